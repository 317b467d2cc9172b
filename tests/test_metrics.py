"""``--metrics``: OpenMetrics text for Prometheus' node_exporter textfile collector (analyzer/document/metrics.py).

Every output here is read back with prometheus_client's OpenMetrics parser (a real, strict reader of the format),
and the values are checked against the findings JSON of the same run.
"""
from __future__ import annotations

import errno
import json
import os
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from prometheus_client.openmetrics.parser import text_string_to_metric_families
from prometheus_client.parser import text_string_to_metric_families as prometheus_text_families

from analyzer import catalog
from analyzer.cli import main
from analyzer.document import metrics

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"
P = "mcp_sse_audit_"
FAMILIES = {"reconnects", "events_lost", "events_duplicated", "findings", "findings_new", "findings_known", "findings_gone",
            "baseline_given", "inputs", "run_end_timestamp_seconds", "run_duration_seconds", "exit_code"}
PAIRS = {(v, s) for v in catalog.VERDICT_ORDER for s in catalog.verdict_severities(v)} | {
    (r.rule, s) for r in catalog.FINDING_RULES for s in r.severities}


def parse(text: str) -> dict[str, list[tuple[dict, float]]]:
    """The OpenMetrics text as {family (without the prefix): [(labels, value)]}, checked on the way: a strict parse, every
    family a gauge with its help, a unit where its name says seconds, no two samples with one label set, and the
    same families and values read by the Prometheus text-format parser (what node_exporter's collector speaks)."""
    assert text.endswith("# EOF\n")
    got = {}
    for fam in text_string_to_metric_families(text):
        assert fam.name.startswith(P) and fam.type == "gauge" and fam.documentation, fam
        assert fam.unit == ("seconds" if fam.name.endswith("_seconds") else ""), fam
        samples = [(s.labels, s.value) for s in fam.samples]
        assert all(s.name == fam.name and s.timestamp is None for s in fam.samples)
        assert len({tuple(sorted(labels.items())) for labels, _ in samples}) == len(samples), f"{fam.name}: a label set twice"
        got[fam.name[len(P):]] = samples
    classic = {f.name[len(P):]: [(s.labels, s.value) for s in f.samples] for f in prometheus_text_families(text)}
    assert classic == got
    return got


def total(samples, **where) -> float:
    return sum(v for labels, v in samples if all(labels.get(k) == w for k, w in where.items()))


def by(samples, *keys) -> dict:
    out = Counter()
    for labels, v in samples:
        out[tuple(labels[k] for k in keys)] += v
    return {k: v for k, v in out.items() if v}


def run(*args, env=None):
    return CliRunner().invoke(main, list(map(str, args)), env=env)


def test_the_samples_metrics_agree_with_their_findings_json(tmp_path):
    """The sample logs' metrics, read by a real OpenMetrics parser, say what the findings JSON of the same run says."""
    prom, js = tmp_path / "audit.prom", tmp_path / "f.json"
    before = time.time()
    r = run("analyze", SAMPLES, "--json", js, "--metrics", prom, "-q")
    after = time.time()
    assert r.exit_code == 1, r.output
    doc = json.loads(js.read_text())
    m = parse(prom.read_text())
    assert set(m) == FAMILIES
    s = doc["summary"]
    # reconnects: by verdict, the summary's counts (every verdict of the catalog, for every host); by host, the request's URL
    assert {v: total(m["reconnects"], verdict=v) for v in catalog.VERDICT_ORDER} == s["verdicts"]
    url = {x["exchange_id"]: x["url"] for x in doc["exchanges"]}
    host = {b["boundary_id"]: urlsplit(url[b["request_exchange"]]).netloc for b in doc["boundaries"]}
    assert by(m["reconnects"], "host", "verdict") == Counter((host[b["boundary_id"]], b["verdict"]) for b in doc["boundaries"])
    hosts = {urlsplit(u).netloc for u in url.values()}
    assert len(hosts) > 10 and {labels["host"] for labels, _ in m["reconnects"]} == hosts
    assert len(m["reconnects"]) == len(hosts) * len(catalog.VERDICT_ORDER)  # zeros included
    # events lost and delivered twice, by host
    lost, dup = Counter(), Counter()
    for b in doc["boundaries"]:
        lost[host[b["boundary_id"]]] += b["lost_count"]
        dup[host[b["boundary_id"]]] += b["duplicated_count"]
    assert by(m["events_lost"], "host") == {(h,): n for h, n in lost.items() if n} and sum(lost.values()) > 0
    assert by(m["events_duplicated"], "host") == {(h,): n for h, n in dup.items() if n} and sum(dup.values()) > 0
    # findings: by severity the summary's, by rule and host each finding's, every pair of the catalog present
    assert {sev: total(m["findings"], severity=sev) for sev in catalog.SEVERITIES} == s["findings_by_severity"]
    f_host = lambda f: urlsplit(url[f["exchange"]]).netloc if f["exchange"] else ""  # noqa: E731
    assert by(m["findings"], "host", "rule", "severity") == Counter((f_host(f), f["rule"], f["severity"]) for f in doc["findings"])
    assert {(labels["rule"], labels["severity"]) for labels, _ in m["findings"]} == PAIRS
    # without --baseline every finding is new
    assert {labels["severity"]: v for labels, v in m["findings_new"]} == s["findings_by_severity"]
    assert total(m["findings_known"]) == total(m["findings_gone"]) == total(m["baseline_given"]) == 0
    # inputs: every one read (none damaged), and the README and scripts of sample_logs/ skipped
    assert {labels["state"]: v for labels, v in m["inputs"]} == {"read": s["inputs"], "damaged": 0, "unreadable": 0,
                                                                 "skipped": len(doc["skipped"])}
    assert len(doc["skipped"]) > 0
    # the run: its exit code, when it ended, how long it took
    assert m["exit_code"] == [({"fail_on": "error"}, 1.0)]
    (_, end), = m["run_end_timestamp_seconds"]
    (_, took), = m["run_duration_seconds"]
    assert before <= end <= after + 0.001 and 0 < took <= after - before + 0.001


def test_a_baseline_gives_new_known_and_gone(tmp_path):
    base, prom, js = tmp_path / "base.json", tmp_path / "m.prom", tmp_path / "f.json"
    assert run("analyze", SYN / "gap.jsonl", SYN / "session_invalid.jsonl", "--json", base, "-q").exit_code == 1
    r = run("analyze", SYN / "gap.jsonl", SYN / "epoch_change.jsonl", "--baseline", base, "--json", js, "--metrics", prom,
            "--fail-on", "critical", "-q")
    doc = json.loads(js.read_text())
    bl = doc["summary"]["baseline"]
    assert bl["new"] and bl["known"] and bl["gone"], bl  # each of the three is there to be counted
    m = parse(prom.read_text())
    assert {labels["severity"]: v for labels, v in m["findings_new"]} == bl["new_by_severity"]
    assert {labels["severity"]: v for labels, v in m["findings_known"]} == {
        sev: sum(1 for f in doc["findings"] if f["baseline"] == "known" and f["severity"] == sev) for sev in catalog.SEVERITIES}
    assert total(m["findings_known"]) == bl["known"] and m["findings_gone"] == [({}, bl["gone"])]
    assert m["baseline_given"] == [({}, 1.0)]
    assert m["exit_code"] == [({"fail_on": "critical"}, float(r.exit_code))] and r.exit_code == 1  # epoch_change is new and critical


def _zeros(m: dict, host: str) -> None:
    """Every family there, with explicit zeros: every verdict and every (rule, severity) of the catalog for ``host``."""
    assert set(m) == FAMILIES
    assert m["reconnects"] == [({"host": host, "verdict": v}, 0.0) for v in catalog.VERDICT_ORDER]
    assert m["events_lost"] == m["events_duplicated"] == [({"host": host}, 0.0)]
    assert {(labels["host"], labels["rule"], labels["severity"]) for labels, _ in m["findings"]} == {(host, r, s) for r, s in PAIRS}
    assert [labels["severity"] for labels, _ in m["findings_new"]] == list(catalog.SEVERITIES)
    assert total(m["findings_new"]) == total(m["findings_known"]) == 0


def test_a_night_with_nothing_judged_writes_every_family_with_zeros(tmp_path):
    """An alert must tell "0" from "no data": nothing in the window, nothing readable, traffic without a reconnect."""
    st = tmp_path / "st"
    assert run("ingest", SYN / "gap.jsonl", SYN / "continuous.jsonl", "--store", st, "-q").exit_code == 0
    # a store night with no exchange in the window: no host at all, so host="" carries the zeros
    r = run("analyze", "--store", st, "--since", "2030-01-01", "--metrics", tmp_path / "a.prom")
    assert r.exit_code == 0 and "no exchange in the store matches" in r.stderr
    m = parse((tmp_path / "a.prom").read_text())
    _zeros(m, "")
    assert total(m["findings"]) == 0 and m["exit_code"] == [({"fail_on": "error"}, 0.0)]
    assert {labels["state"]: v for labels, v in m["inputs"]}["read"] == 0  # (a store lists the inputs that contribute)
    # nothing readable: the metrics are still written, and say exit 2
    empty = tmp_path / "empty"
    empty.mkdir()
    r = run("analyze", empty, "--metrics", tmp_path / "b.prom")
    assert r.exit_code == 2
    m = parse((tmp_path / "b.prom").read_text())
    _zeros(m, "")
    assert m["exit_code"] == [({"fail_on": "error"}, 2.0)]
    # traffic to a host but no reconnect (a stateless client's re-sent call): that host's zeros, and its one finding
    r = run("analyze", SYN / "stateless_reissue.jsonl", "--metrics", tmp_path / "c.prom", "-q")
    assert r.exit_code == 1
    m = parse((tmp_path / "c.prom").read_text())
    assert m["reconnects"] == [({"host": "127.0.0.1:8765", "verdict": v}, 0.0) for v in catalog.VERDICT_ORDER]
    assert by(m["findings"], "host", "rule", "severity") == {("127.0.0.1:8765", "reissued_request_ran_twice", "critical"): 1}


def hostile_capture(tmp_path: Path, hosts: list[str]) -> Path:
    """The gap capture once per host (its own session ids), each copy's URLs sent to that host."""
    out = tmp_path / "caps"
    out.mkdir()
    src = (SYN / "gap.jsonl").read_text()
    for n, h in enumerate(hosts):
        lines = []
        for line in src.replace("6bc55101ffaf5d540dcf824037126c13", f"6bc55101ffaf5d540dcf824037126c{n:02d}").splitlines():
            rec = json.loads(line)
            if "url" in rec:
                rec["url"] = rec["url"].replace("127.0.0.1:8765", h)
            lines.append(json.dumps(rec))
        (out / f"c{n}.jsonl").write_text("\n".join(lines) + "\n")
    return out


def test_hostile_hosts_are_escaped_and_never_carry_userinfo(tmp_path):
    """Host values come from captures: a newline, quotes, backslashes, control characters, userinfo, hosts of thousands
    of characters that are one once cut -- the text stays valid, one sample per label set."""
    hosts = ['evil"host\\\nname:1', "alice:s3cret@creds.example:8443", "a\x1bb\rc\x00", "au+001bbu+000dcu+0000",
             "x" * 5000, "x" * 4000 + "y", "MiXeD.Example.COM"]
    caps = hostile_capture(tmp_path, hosts)
    prom = tmp_path / "m.prom"
    assert sum(1 for _ in caps.iterdir()) == len(hosts)
    r = run("analyze", caps, "--metrics", prom, "--no-redact", "-q")  # (redaction would take the userinfo out first)
    assert r.exit_code == 1, r.output
    text = prom.read_text()
    assert "alice" not in text and "s3cret" not in text and "\r" not in text and "\x00" not in text and "\x1b" not in text
    m = parse(text)
    seen = {labels["host"] for labels, _ in m["reconnects"]}
    assert seen == {'evil"host\\\nname:1', "creds.example:8443", "aU+001BbU+000DcU+0000", "au+001bbu+000dcu+0000",
                    "x" * 255 + "…", "mixed.example.com"}
    # each capture's one gap, under its host; the two long hosts cut alike are one host with both (the escaped control
    # characters and the capture's own "u+001b" stay two: hosts are lower-cased, the escape is upper-case)
    assert by(m["reconnects"], "host", "verdict") == {(h, "gap"): 2 if h.startswith("xxx") else 1 for h in seen}
    assert all(len(h) <= 256 for h in seen)


def test_the_host_of_a_url(tmp_path):
    of = metrics.hosts.of_url
    assert of("http://user:pw@Host.Example:8080/mcp?a=1") == "host.example:8080"
    assert of("https://[::1]:9000/mcp") == "[::1]:9000"
    assert of("https://h#frag") == "h" and of("https://h?q") == "h" and of("https://@h/") == "h"
    assert of("/mcp") == of("") == of(None) == of("mcp.example.com/mcp") == ""  # no authority in the URL: no host


def test_the_metrics_file_is_replaced_whole_or_left_as_it_was(tmp_path, monkeypatch):
    """Written as node_exporter's docs ask (a temporary file in the same folder, renamed over the target): a write
    that fails leaves the previous file, and no half-written one beside it."""
    prom = tmp_path / "audit.prom"
    prom.write_text("# previous run\n")

    def full(*_args, **_kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    r = run("analyze", SYN / "gap.jsonl", "--metrics", prom, "-q")
    assert r.exit_code == 2 and f"cannot write {prom}: No space left on device" in r.stderr, r.output
    assert prom.read_text() == "# previous run\n" and [p.name for p in tmp_path.iterdir()] == ["audit.prom"]
    monkeypatch.undo()
    r = run("analyze", SYN / "gap.jsonl", "--metrics", prom, "-q")
    assert r.exit_code == 1 and parse(prom.read_text())["exit_code"] == [({"fail_on": "error"}, 1.0)]
    assert [p.name for p in tmp_path.iterdir()] == ["audit.prom"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_folder_that_cannot_be_written_keeps_the_old_file(tmp_path):
    folder = tmp_path / "textfile"
    folder.mkdir()
    prom = folder / "audit.prom"
    prom.write_text("# previous run\n")
    folder.chmod(0o555)
    try:
        r = run("analyze", SYN / "gap.jsonl", "--metrics", prom, "-q")
    finally:
        folder.chmod(0o755)
    assert r.exit_code == 2 and "cannot write" in r.stderr and prom.read_text() == "# previous run\n"


def test_metrics_on_standard_output_and_only_one_output_there(tmp_path):
    r = run("analyze", SYN / "gap.jsonl", "--metrics", "-")
    assert r.exit_code == 1 and r.stdout.endswith("# EOF\n") and "reconnect verdicts: gap 1" in r.stderr
    assert total(parse(r.stdout)["reconnects"], verdict="gap") == 1
    r = run("analyze", SYN / "gap.jsonl", "--metrics", "-", "--json", "-")
    assert r.exit_code == 2 and "--json and --metrics both write to standard output" in r.stderr


def test_a_store_in_partitions_counts_the_same(tmp_path, monkeypatch):
    """--partitions N with --metrics analyzes in memory as with --html (the metrics count per host, which the
    spilling writer's summary cannot): the same values as one partition, and the spilling writer is not used."""
    st = tmp_path / "st"
    assert run("ingest", SYN, "--store", st, "-q").exit_code == 0
    assert run("analyze", "--store", st, "--metrics", tmp_path / "one.prom", "-q").exit_code == 1
    from analyzer.scale import spill

    def refuse(*_a, **_k):
        raise AssertionError("the spilling writer cannot make the metrics")

    monkeypatch.setattr(spill, "write", refuse)
    r = run("analyze", "--store", st, "--partitions", "3", "--json", tmp_path / "f.json", "--metrics", tmp_path / "three.prom", "-q")
    assert r.exit_code == 1, r.output
    one, three = (parse((tmp_path / n).read_text()) for n in ("one.prom", "three.prom"))
    for m in (one, three):
        del m["run_end_timestamp_seconds"], m["run_duration_seconds"]
    assert one == three and total(one["reconnects"]) > 10


def test_inputs_by_state(tmp_path):
    """read (whole), damaged (cut short: an error anomaly, which fails --fail-on error), unreadable, skipped."""
    import gzip

    whole = gzip.compress((SYN / "gap.jsonl").read_bytes())
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    (tmp_path / "notes.txt").write_text("not a capture\n")
    r = run("analyze", SYN / "continuous.jsonl", tmp_path, tmp_path / "gone.jsonl", "--metrics", "-", "-q")
    assert r.exit_code == 1, r.output
    assert {labels["state"]: v for labels, v in parse(r.stdout)["inputs"]} == {"read": 1, "damaged": 1, "unreadable": 1, "skipped": 1}
