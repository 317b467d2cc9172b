"""Record what a capture on a reverse-proxy host looks like: nginx in front of an MCP server, one pcap, two hops.

For each scenario, in one run:

    client (python SDK client.py or TS SDK ts/client.cjs)
        --> nginx 127.0.0.1:N  (gzip on for text/event-stream + application/json, proxy_buffering off,
                                upstream keepalive 8 or none, generated config in a temp prefix dir)
        --> MCP server 127.0.0.1:S  (python SDK server.py or TS SDK ts/server.cjs)
    tcpdump -i any -n -s 0 -U -w real-nginx-<scenario>.pcap 'tcp port N or tcp port S'

`-i any` gives a Linux cooked capture v2 (SLL2, link type 276) with every HTTP exchange in it
twice: client -> nginx (gzip-encoded responses where nginx compressed them) and nginx ->
server (plain). With `--mitm` a mitmdump (analyzer/mitm_addon.py, proxy JSONL) and a second
mitmdump (../har_keep_stream.py + hardump, HAR) sit in front of nginx, and tcpdump also
captures the mitmdump -> nginx port.

tcpdump starts first (the harness waits for "listening on"), then the server, nginx, the
mitmdumps; the client runs with a timeout; then mitmdumps, nginx, server are stopped (SIGINT
first, SIGTERM/SIGKILL after bounded waits; nginx treats SIGINT as a fast shutdown) and
tcpdump last. nginx runs with its own prefix dir (`nginx -p DIR -c DIR/nginx.conf -g
'daemon off; error_log stderr info;'`), pid file and temp paths inside DIR; DIR (config,
access log) is copied to the log dir afterwards. Never touches the system nginx.

    python3 sample_logs/recording/record_proxy_host.py               # all scenarios
    python3 sample_logs/recording/record_proxy_host.py python-resume # one
    python3 sample_logs/recording/record_proxy_host.py --print-config python-resume

Environment: REC_PYTHON (default /work/rec-venv/bin/python), NODE (node), TS_REC_DIR
(/work/ts-rec), NGINX (nginx), TCPDUMP (tcpdump), MITMDUMP (/work/mitm-venv/bin/mitmdump).
Needs root (tcpdump; nginx runs its worker as root so it can write into the prefix dir).
127.0.0.1 only; every wait has a deadline. Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
TS_DIR = HERE / "ts"
REPO = HERE.parent.parent
REC_PYTHON = os.environ.get("REC_PYTHON", "/work/rec-venv/bin/python")
NODE = os.environ.get("NODE", "node")
TS_REC_DIR = Path(os.environ.get("TS_REC_DIR", "/work/ts-rec"))
NGINX = os.environ.get("NGINX", "nginx")
TCPDUMP = os.environ.get("TCPDUMP", "tcpdump")
HOST = "127.0.0.1"


sys.path.insert(0, str(Path(__file__).resolve().parent))
import record as _shared  # noqa: E402  (the python harness: process, port and mitmdump helpers shared by all three)

free_port, wait_port, start, stop, mitm_cmd = _shared.free_port, _shared.wait_port, _shared.start, _shared.stop, _shared.mitm_cmd
sys.path.insert(0, str(Path(__file__).resolve().parent / "ts"))
import record_ts as _ts  # noqa: E402  (the TS harness: its node environment and log-line wait)

wait_text, node_env = _ts.wait_text, _ts.node_env


@dataclass(frozen=True)
class Scenario:
    sdk: str  # "python" | "ts"
    server_args: list[str]
    client_args: list[str]
    gzip: bool = True
    upstream_keepalive: int = 8  # 0: no upstream block keepalive, nginx speaks HTTP/1.0 + Connection: close upstream
    mitm: bool = False
    client_timeout_s: int = 30
    extra_http: list[str] = field(default_factory=list)


SCENARIOS: dict[str, Scenario] = {
    # python SDK server, dense per-stream ids, closes the tool's stream after steps 2 and 4 (as record.py
    # resume-dense): POST -> GET -> GET; python SDK client. nginx gzips, keep-alive on both hops.
    "python-resume": Scenario(
        sdk="python",
        server_args=["--store", "dense", "--retry-ms", "500", "--close-at", "2,4", "--interval", "0.3"],
        client_args=["--steps", "5"],
    ),
    # TS SDK server + client, scenario resume of record_ts.py (6 steps x 400 ms, close after 2 and 4, retry 600).
    "ts-resume": Scenario(
        sdk="ts",
        server_args=["--retry-ms", "600", "--keepalive-ms", "15000", "--store", "per-session"],
        client_args=["resume", "--steps", "6", "--interval-ms", "400", "--close-at", "2,4"],
    ),
    # The same TS run without upstream keep-alive: nginx's default HTTP/1.0 + "Connection: close" to the
    # server (one upstream TCP connection per exchange, close-delimited bodies), keep-alive client side only.
    "ts-resume-upstream-close": Scenario(
        sdk="ts",
        server_args=["--retry-ms", "600", "--keepalive-ms", "15000", "--store", "per-session"],
        client_args=["resume", "--steps", "6", "--interval-ms", "400", "--close-at", "2,4"],
        upstream_keepalive=0,
    ),
    # python-resume with the two mitmdumps of record.py in front of nginx: JSONL, HAR and the pcap of one run.
    "python-resume-mitm": Scenario(
        sdk="python",
        server_args=["--store", "dense", "--retry-ms", "500", "--close-at", "2,4", "--interval", "0.3"],
        client_args=["--steps", "5"],
        mitm=True,
    ),
}

LOG_FORMAT = (
    "'$time_iso8601 msec=$msec conn=$connection req#=$connection_requests $remote_addr:$remote_port '\n"
    "        '\"$request\" status=$status bytes_sent=$bytes_sent body=$body_bytes_sent gzip_ratio=$gzip_ratio '\n"
    "        'upstream=$upstream_addr upstream_status=$upstream_status upstream_connect=$upstream_connect_time '\n"
    "        'upstream_bytes_received=$upstream_bytes_received request_time=$request_time '\n"
    "        'ae=\"$http_accept_encoding\" lei=\"$http_last_event_id\" sid=\"$http_mcp_session_id\"'"
)


def nginx_config(prefix: Path, listen: int, upstream: int, sc: Scenario) -> str:
    if sc.upstream_keepalive:
        upstream_block = f"    upstream mcp_upstream {{\n        server {HOST}:{upstream};\n        keepalive {sc.upstream_keepalive};\n    }}\n"
        proxy_pass = "http://mcp_upstream"
        http11 = "            proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n"
    else:
        upstream_block = ""
        proxy_pass = f"http://{HOST}:{upstream}"
        http11 = "            # no proxy_http_version: nginx's default HTTP/1.0 + Connection: close upstream\n"
    gzip = (
        "        gzip on;\n"
        "        gzip_types text/event-stream application/json;\n"
        "        gzip_proxied any;\n"
        "        gzip_min_length 0;\n"
        "        gzip_vary on;\n"
    ) if sc.gzip else "        gzip off;\n"
    return f"""# generated by sample_logs/recording/record_proxy_host.py
user root;
worker_processes 1;
pid {prefix}/nginx.pid;
events {{
    worker_connections 256;
}}
http {{
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    log_format hops {LOG_FORMAT};
    access_log {prefix}/access.log hops;
    keepalive_timeout 75s;
{upstream_block}
    server {{
        listen {HOST}:{listen};
{gzip}
        location /mcp {{
            proxy_pass {proxy_pass};
{http11}            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_buffering off;
            proxy_cache off;
            proxy_read_timeout 3600s;
            chunked_transfer_encoding on;
        }}
    }}
}}
"""


def record(name: str, sc: Scenario, out_dir: Path, log_dir: Path) -> None:
    log_dir.mkdir(parents=True, exist_ok=True)
    for old in log_dir.glob(f"nginx-{name}.*"):
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"real-nginx-{name}"
    pcap, jsonl, har = (out_dir / f"{stem}.{ext}" for ext in ("pcap", "jsonl", "har"))
    for f in (pcap, jsonl, har):
        if f.exists():
            f.unlink()
    s_port, n_port = free_port(), free_port()
    b_port, a_port = (free_port(), free_port()) if sc.mitm else (0, 0)
    logs = {p: log_dir / f"nginx-{name}.{p}.log" for p in ("tcpdump", "server", "nginx", "client", "mitm-har", "mitm-jsonl")}
    prefix = Path(tempfile.mkdtemp(prefix=f"nginx-{name}-", dir="/tmp"))
    (prefix / "tmp").mkdir()
    conf = prefix / "nginx.conf"
    conf.write_text(nginx_config(prefix, n_port, s_port, sc))

    ports = [n_port, s_port] + ([b_port] if sc.mitm else [])  # the A port is client -> A, one more copy: skip
    procs: list[tuple[str, subprocess.Popen]] = []
    try:
        tcpdump = start([TCPDUMP, "-i", "any", "-n", "-s", "0", "-U", "-Z", "root", "-w", str(pcap),
                         " or ".join(f"tcp port {p}" for p in ports)], logs["tcpdump"])
        procs.append(("tcpdump", tcpdump))
        wait_text(logs["tcpdump"], "listening on", tcpdump)
        if sc.sdk == "python":
            server = start([REC_PYTHON, "-u", "server.py", "--port", str(s_port), *sc.server_args], logs["server"])
        else:
            server = start([NODE, "server.cjs", "--port", str(s_port), *sc.server_args], logs["server"],
                           cwd=TS_DIR, env=node_env())
        procs.append(("server", server))
        wait_port(s_port, server)
        nginx = start([NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off; error_log stderr info;"],
                      logs["nginx"])
        procs.append(("nginx", nginx))
        wait_port(n_port, nginx)
        entry = n_port
        if sc.mitm:
            b_extra = ["--set", f"hardump={har}", "-s", str(HERE / "har_keep_stream.py")]
            a_extra = ["-s", str(REPO / "analyzer" / "mitm_addon.py"), "--set", f"mcp_jsonl={jsonl}"]
            procs.append(("mitm-har", start(mitm_cmd(b_port, n_port, b_extra), logs["mitm-har"])))
            wait_port(b_port, procs[-1][1])
            procs.append(("mitm-jsonl", start(mitm_cmd(a_port, b_port, a_extra), logs["mitm-jsonl"])))
            wait_port(a_port, procs[-1][1])
            time.sleep(1.0)  # mitmdump listens before it reports script errors and exits
            for label, proc in procs[-2:]:
                if proc.poll() is not None:
                    raise RuntimeError(f"{label} exited early ({proc.returncode}), see {logs[label]}")
            entry = a_port
        chain = f"server :{s_port} <- nginx :{n_port}" + (f" <- HAR proxy :{b_port} <- JSONL proxy :{a_port}" if sc.mitm else "")
        print(f"[nginx-{name}] {chain} <- {sc.sdk} client (tcpdump -i any on {ports})", flush=True)
        url = f"http://{HOST}:{entry}/mcp"
        if sc.sdk == "python":
            cmd, cwd, env = [REC_PYTHON, "-u", "client.py", url, *sc.client_args, "--timeout", str(sc.client_timeout_s)], HERE, None
        else:
            cmd, cwd, env = [NODE, "client.cjs", url, *sc.client_args, "--timeout", str(sc.client_timeout_s)], TS_DIR, node_env()
        t0 = time.time()
        client = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=sc.client_timeout_s + 15, env=env)
        logs["client"].write_text(f"# started {t0:.6f}\n" + client.stdout + client.stderr)
        print(client.stdout + client.stderr, end="", flush=True)
        print(f"[nginx-{name}] client exit code {client.returncode}", flush=True)
        time.sleep(0.5)  # let nginx see the last client connection close
    finally:
        # mitmdumps (A, then B: its HAR is written on exit), nginx (closes its idle upstream
        # keep-alive connections), the server, tcpdump last (SIGINT flushes the file).
        order = ["mitm-jsonl", "mitm-har", "nginx", "server", "tcpdump"]
        for label in order:
            for lab, proc in procs:
                if lab == label:
                    if label == "tcpdump":
                        # libpcap (TPACKET_V3) hands blocks to tcpdump when full or after its 1 s block
                        # timeout; packets still in the ring at SIGINT are lost (nginx's closing FINs were,
                        # with 0.3 s). --immediate-mode avoids that but made the kernel drop packets on "any".
                        time.sleep(2.5)
                    stop(proc, grace_s=5.0 if label in ("tcpdump", "nginx") else 10.0)
        keep = log_dir / f"nginx-{name}.prefix"
        shutil.copytree(prefix, keep, ignore=shutil.ignore_patterns("tmp"), dirs_exist_ok=True)
        shutil.rmtree(prefix, ignore_errors=True)
    written = [pcap] + ([jsonl, har] if sc.mitm else [])
    sizes = ", ".join(f"{p.name} ({p.stat().st_size if p.exists() else 'missing'} B)" for p in written)
    print(f"[nginx-{name}] wrote {sizes}; logs in {log_dir}/nginx-{name}.*", flush=True)
    counts = [ln.strip() for ln in logs["tcpdump"].read_text(errors="replace").splitlines() if "packets" in ln]
    print(f"[nginx-{name}] tcpdump: {'; '.join(counts)}", flush=True)
    dropped = [ln for ln in counts if ln.endswith("dropped by kernel") and not ln.startswith("0 ")]
    if dropped:
        print(f"[nginx-{name}] WARNING: tcpdump lost packets ({dropped[0]}): record again", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", help=f"any of {list(SCENARIOS)} (default: all)")
    parser.add_argument("--out-dir", type=Path, default=HERE.parent)
    parser.add_argument("--log-dir", type=Path, default=Path("/tmp/mcp-sse-audit-recording"))
    parser.add_argument("--print-config", action="store_true", help="print the generated nginx.conf and exit")
    args = parser.parse_args()
    unknown = [n for n in args.scenarios if n not in SCENARIOS]
    if unknown:
        parser.error(f"unknown scenario(s) {unknown}; choose from {list(SCENARIOS)}")
    names = args.scenarios or list(SCENARIOS)
    if args.print_config:
        for n in names:
            print(nginx_config(Path("/tmp/nginx-PREFIX"), 18081, 18080, SCENARIOS[n]))
        return 0
    if any(SCENARIOS[n].sdk == "ts" for n in names) and not (TS_REC_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        raise SystemExit(f"{TS_REC_DIR}/node_modules missing: run ts/record_ts.py --install first")
    for n in names:
        record(n, SCENARIOS[n], args.out_dir.resolve(), args.log_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
