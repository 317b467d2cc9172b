"""The store on object storage: ``--store s3://bucket/prefix`` against a real S3-compatible server.

The server is moto's (``tests/s3_server.py``, a child process on a free 127.0.0.1 port); the client is
the real one, pyarrow's S3FileSystem and botocore for the conditional writes: nothing is mocked.
Without moto these tests skip with the reason; with CI=true they fail instead.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.cli import main
from analyzer.scale import partitions, storage, store
from analyzer.scale.store_commit import DIGEST_KEY, KILL_ENV, PAUSE_ENV, RELEASE_ENV

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
TIMEOUT = 120
EPOCH = "1767225600"
sys.path.insert(0, str(Path(__file__).parent))
import s3_server  # noqa: E402
from needs import unavailable  # noqa: E402


def moto_missing() -> str | None:
    try:
        import botocore  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def server():
    reason = moto_missing()
    if reason:
        unavailable(reason)
    srv = s3_server.start()
    saved = {k: os.environ.get(k) for k in (*srv.env(), "AWS_ENDPOINT_URL_S3")}
    os.environ.pop("AWS_ENDPOINT_URL_S3", None)
    os.environ.update(srv.env())
    storage._remote.cache_clear()
    try:
        yield srv
    finally:
        srv.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        storage._remote.cache_clear()


def client(srv):
    import botocore.session

    return botocore.session.get_session().create_client("s3", endpoint_url=srv.endpoint, region_name="us-east-1")


@pytest.fixture
def bucket(server) -> str:
    name = f"audit-{uuid.uuid4().hex[:12]}"
    client(server).create_bucket(Bucket=name)
    return name


@pytest.fixture
def archive(tmp_path) -> list[str]:
    d = tmp_path / "archive"
    d.mkdir()
    out = []
    for name, src in (("a-continuous.har", "continuous.har"), ("b-gap.jsonl", "gap.jsonl"), ("c-replay_reset.jsonl", "replay_reset.jsonl")):
        (d / name).write_bytes((SYN / src).read_bytes())
        out.append(str(d / name))
    return out


def body(doc: dict) -> str:
    return json.dumps({k: doc[k] for k in ("sessions", "exchanges", "boundaries", "findings")}, sort_keys=True)


def direct(paths) -> str:
    return body(pipeline.run(sorted(paths)).document)


def stored(uri: str) -> str:
    r = CliRunner().invoke(main, ["analyze", "--store", uri, "--json", "-", "-q"])
    assert r.exit_code in (0, 1), r.output
    return body(json.loads(r.stdout))


def committed(uri: str) -> list[str]:
    return sorted(store.manifest(uri)["path"].to_list())


def objects(srv, bucket: str, prefix: str = "st/") -> set[str]:
    got = client(srv).list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):] for o in got.get("Contents", [])}


def listed(uri: str) -> set[str]:
    return {r[f"{t}_file"] for r in store.manifest(uri).iter_rows(named=True) for t in store.TABLES}


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from analyzer.cli import main; main()", *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=TIMEOUT)


def popen(*args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from analyzer.cli import main; main()", *args], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stop(*procs) -> None:
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)


def wait_for(path: Path, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


# --- the server enforces what the protocol relies on -------------------------------------------------


def test_the_server_enforces_conditional_writes(server, bucket):
    from analyzer.scale.store_remote import Conditional, Conflict

    cond = Conditional(storage.locate(f"s3://{bucket}/st"))
    first = cond.put("obj", b"1", None)
    with pytest.raises(Conflict):  # If-None-Match: * on an existing object
        cond.put("obj", b"2", None)
    second = cond.put("obj", b"3", first)  # If-Match on the current ETag
    with pytest.raises(Conflict):  # If-Match on a stale ETag: the lost update that must not happen
        cond.put("obj", b"4", first)
    with pytest.raises(Conflict):
        cond.delete("obj", first)
    assert cond.get("obj") == (b"3", second)


# --- ingest and analyze --------------------------------------------------------------------------------


def test_s3_store_gives_the_local_stores_document_byte_for_byte(server, bucket, synthetic_store, tmp_path):
    uri = f"s3://{bucket}/st"
    env = {"SOURCE_DATE_EPOCH": EPOCH}
    r = CliRunner().invoke(main, ["ingest", str(SYN), "--store", uri])
    assert r.exit_code == 0 and "stored 35 new input(s), 0 already in s3://" in r.stdout, r.output
    r = CliRunner().invoke(main, ["ingest", str(SYN), "--store", uri])  # known by sha256: nothing parsed again
    assert r.exit_code == 0 and "stored 0 new input(s), 35 already" in r.stdout, r.output
    # the local store of the same folder (built once per session, tests/conftest.py, as `ingest SYN --store` builds it)
    for st, out in ((uri, "s3.json"), (str(synthetic_store), "local.json"), (f"file://{synthetic_store}", "file.json")):
        r = CliRunner().invoke(main, ["analyze", "--store", st, "--json", str(tmp_path / out), "-q"], env=env)
        assert r.exit_code == 1, r.output
    local = (tmp_path / "local.json").read_bytes()
    assert json.loads(local)["summary"]["boundaries"] > 10
    assert (tmp_path / "s3.json").read_bytes() == local == (tmp_path / "file.json").read_bytes()
    r = CliRunner().invoke(main, ["analyze", "--store", uri, "--partitions", "3", "--json", str(tmp_path / "p.json"), "-q"], env=env)
    assert r.exit_code == 1 and json.loads((tmp_path / "p.json").read_text()) == json.loads(local)
    # the server holds the manifest, its backup and exactly the parts it lists; no lease is left behind
    assert objects(server, bucket) == listed(uri) | {store.MANIFEST, store.PREVIOUS, DIGEST_KEY}


def test_endpoint_in_the_uri_instead_of_the_environment(server, bucket, monkeypatch, archive):
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    storage._remote.cache_clear()
    uri = f"s3://{bucket}/st?endpoint_override=127.0.0.1:{server.port}&scheme=http"
    r = CliRunner().invoke(main, ["ingest", *archive, "--store", uri])
    assert r.exit_code == 0 and "stored 3 new input(s), 0 already" in r.stdout, r.output
    assert stored(uri) == direct(archive)


def test_narrowing_by_session_reads_the_same_as_locally(server, bucket, tmp_path):
    uri = f"s3://{bucket}/st"
    paths = [str(SYN / "gap.jsonl"), str(SYN / "continuous.jsonl")]
    store.ingest(paths, uri)
    store.ingest(paths, tmp_path / "local")
    sid = pipeline.run([paths[0]]).document["sessions"][0]["session_id"]
    for st in (uri, str(tmp_path / "local")):
        r = CliRunner().invoke(main, ["analyze", "--store", st, "--session", sid, "--json", str(tmp_path / "n.json"), "-q"],
                               env={"SOURCE_DATE_EPOCH": EPOCH})
        assert r.exit_code == 1, r.output
        doc = json.loads((tmp_path / "n.json").read_text())
        assert {s["session_id"] for s in doc["sessions"]} == {sid} and [b["verdict"] for b in doc["boundaries"]] == ["gap"]


# --- damage and repair -----------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["garbage", "deleted"])
def test_damaged_part_is_named_then_ingest_repairs_it(server, bucket, archive, how):
    uri = f"s3://{bucket}/st"
    store.ingest(archive, uri)
    victim = archive[1]
    row = next(r for r in store.manifest(uri).iter_rows(named=True) if r["path"] == victim)
    key = f"st/{row['events_file']}"
    if how == "garbage":
        client(server).put_object(Bucket=bucket, Key=key, Body=os.urandom(row["events_bytes"]))
    else:
        client(server).delete_object(Bucket=bucket, Key=key)
    r = CliRunner().invoke(main, ["analyze", "--store", uri, "--json", "-", "-q"])
    assert r.exit_code == 2 and "Traceback" not in r.output and r.stdout == ""
    assert victim in r.stderr and "events part" in r.stderr and f"s3://{bucket}/{key}" in r.stderr and "mcp-sse-audit ingest" in r.stderr
    r = CliRunner().invoke(main, ["ingest", archive[0], "--store", uri])
    assert r.exit_code == 0 and f"repaired {victim}" in r.stderr, r.output
    assert stored(uri) == direct(archive)
    assert objects(server, bucket) == listed(uri) | {store.MANIFEST, store.PREVIOUS, DIGEST_KEY}


# --- kill -9 mid-commit, two writers, a broken lease ---------------------------------------------------------

KILL_POINTS = [("after_part:6", 1), ("before_manifest_replace:2", 1), ("after_manifest_replace:2", 2)]


@pytest.mark.parametrize("point,n", KILL_POINTS)
def test_kill_9_mid_commit_leaves_only_committed_inputs(server, bucket, archive, point, n):
    uri = f"s3://{bucket}/st"
    r = cli("ingest", *archive, "--store", uri, env={"MCP_SSE_AUDIT_LEASE_SECONDS": "8", KILL_ENV: point})
    assert r.returncode == -signal.SIGKILL, r.stderr
    # the dead writer's lease (it cannot release it) blocks writers until it expires, 8 s after its last renewal
    r = CliRunner().invoke(main, ["ingest", *archive, "--store", uri])
    assert r.exit_code == 2 and "another ingest is writing to this store" in r.stderr and "--lock-timeout" in r.stderr, r.output
    assert committed(uri) == archive[:n] and stored(uri) == direct(archive[:n])  # the half-written input is invisible
    r = cli("ingest", *archive, "--store", uri, "--lock-timeout", "30")  # waits for the lease to expire, takes it over
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    if n == 1:
        assert "orphaned part file" in r.stderr
    assert committed(uri) == archive and stored(uri) == direct(archive)
    assert objects(server, bucket) == listed(uri) | {store.MANIFEST, store.PREVIOUS, DIGEST_KEY}


def test_second_writer_fails_at_once_naming_the_holder_then_waits(server, bucket, archive, tmp_path):
    uri, release = f"s3://{bucket}/st", tmp_path / "release"
    first = popen("ingest", *archive, "--store", uri, env={PAUSE_ENV: "after_lock", RELEASE_ENV: str(release)})
    waiter = None
    try:
        wait_for(Path(str(release) + ".waiting"))
        r = cli("ingest", *archive, "--store", uri)
        assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert "another ingest is writing to this store" in r.stderr and f"pid {first.pid}" in r.stderr
        waiter = popen("ingest", *archive, "--store", uri, "--lock-timeout", "60")
        time.sleep(1)
        assert waiter.poll() is None  # waiting for the lease
        release.touch()
        out1, err1 = first.communicate(timeout=TIMEOUT)
        out2, err2 = waiter.communicate(timeout=TIMEOUT)
    finally:
        stop(first, waiter)
    assert first.returncode == 0 and "stored 3 new input(s), 0 already" in out1, err1
    assert waiter.returncode == 0 and "stored 0 new input(s), 3 already" in out2, err2
    man = store.manifest(uri)
    assert man.height == 3 and man["sha256"].n_unique() == 3 and stored(uri) == direct(archive)


def test_two_writers_racing_commit_both_inputs_once(server, bucket, archive):
    uri = f"s3://{bucket}/st"
    procs = [popen("ingest", *paths, "--store", uri, "--lock-timeout", "60") for paths in (archive[:2], archive[1:])]
    try:
        outs = [p.communicate(timeout=TIMEOUT) for p in procs]
    finally:
        stop(*procs)
    assert [p.returncode for p in procs] == [0, 0], outs
    man = store.manifest(uri)
    assert sorted(man["path"].to_list()) == archive and man["sha256"].n_unique() == 3  # nothing lost, nothing twice
    assert stored(uri) == direct(archive)


def test_two_audits_racing_on_s3_lose_neither_commit(server, bucket, archive, tmp_path):
    """--audit's ledger on S3 is a compare-and-swap: audit A reads the (absent) ledger and waits before its PUT;
    B judges and commits; A's If-None-Match PUT conflicts, it reads B's ledger, merges and commits.  Then nothing
    is left to judge, and the ledger names every input."""
    from analyzer.scale import audits

    uri, release = f"s3://{bucket}/st", tmp_path / "release"
    assert cli("ingest", *archive[:2], "--store", uri).returncode == 0
    a = popen("analyze", "--store", uri, "--audit", "nightly", "--fail-on", "never", "--json", str(tmp_path / "a.json"),
              env={PAUSE_ENV: "audit_merged", RELEASE_ENV: str(release)})
    try:
        deadline = time.monotonic() + TIMEOUT
        while not Path(str(release) + ".waiting").exists():
            assert time.monotonic() < deadline and a.poll() is None, "audit A never reached its commit"
            time.sleep(0.05)
        assert cli("ingest", archive[2], "--store", uri).returncode == 0
        b = cli("analyze", "--store", uri, "--audit", "nightly", "--fail-on", "never", "--json", str(tmp_path / "b.json"))
        assert b.returncode == 0, b.stderr
        release.touch()
        _, err = a.communicate(timeout=TIMEOUT)
    finally:
        stop(a)
    assert a.returncode == 0, err
    assert len(json.loads((tmp_path / "a.json").read_text())["sessions"]) == 2  # its snapshot: two inputs
    assert set(audits.read(uri, "nightly").inputs) == set(store.manifest(uri)["sha256"].to_list())  # all three
    r = CliRunner().invoke(main, ["analyze", "--store", uri, "--audit", "nightly", "--json", "-", "-q"])
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["audit"]["inputs_new"] == 0, r.output


def test_a_stalled_object_store_fails_the_writer_and_the_reader_in_bounded_time(server, bucket, archive, tmp_path):
    """An endpoint that stops answering (a manifest PUT, the reads of an analysis): the writer gives up after the
    request timeout (MCP_SSE_AUDIT_S3_TIMEOUT, here 1 s) and its retries, exits 2 naming the request, and stops
    renewing its lease; the reader exits 2 too.  Before, the 60 s read timeout tried three times held the store's
    lease and the analysis past 240 s."""
    from stall_proxy import StallProxy

    uri, release = f"s3://{bucket}/st", tmp_path / "release"
    with StallProxy(server.port) as proxy:
        env = {"AWS_ENDPOINT_URL": proxy.endpoint, "MCP_SSE_AUDIT_S3_TIMEOUT": "1"}
        assert cli("ingest", archive[0], "--store", uri, env=env).returncode == 0  # through the proxy, answering
        writer = popen("ingest", archive[1], "--store", uri, env=env | {PAUSE_ENV: "before_manifest_replace", RELEASE_ENV: str(release)})
        try:
            deadline = time.monotonic() + TIMEOUT
            while not Path(str(release) + ".waiting").exists():
                assert time.monotonic() < deadline and writer.poll() is None, "the writer never reached its commit"
                time.sleep(0.05)
            proxy.stall = True
            started = time.monotonic()
            release.touch()
            _, err = writer.communicate(timeout=TIMEOUT)
            took = time.monotonic() - started
        finally:
            stop(writer)
        assert writer.returncode == 2 and "Traceback" not in err, err
        # the first request of the commit that gets no answer is named: the lease's renewal, or the manifest's PUT
        assert ("cannot write .lock" in err or "cannot write inputs.parquet" in err) and "timed out" in err and took < 30, (took, err)
        started = time.monotonic()
        r = cli("analyze", "--store", uri, "--json", str(tmp_path / "x.json"), env=env)
        assert r.returncode == 2 and "Traceback" not in r.stderr and time.monotonic() - started < 60, r.stderr
        assert uri.split("?")[0] in r.stderr or "s3://" in r.stderr, r.stderr
        proxy.stall = False
    assert committed(uri) == [archive[0]]  # the stalled commit left nothing half-listed


def test_a_broken_lease_never_loses_an_update(server, bucket, archive, tmp_path):
    """Writer A stalls (SIGSTOP: its lease renewal stops too) just before its manifest commit, past its
    lease; B takes the stale lease over and commits.  A wakes up: its compare-and-swap names a manifest
    that is no longer current, so it stops with exit 2, and B's input stays committed."""
    uri, release = f"s3://{bucket}/st", tmp_path / "release"
    lease = {"MCP_SSE_AUDIT_LEASE_SECONDS": "2"}
    store.ingest(archive[:1], uri)
    a = popen("ingest", archive[1], "--store", uri, env={**lease, PAUSE_ENV: "before_manifest_replace", RELEASE_ENV: str(release)})
    try:
        wait_for(Path(str(release) + ".waiting"))
        a.send_signal(signal.SIGSTOP)
        r = cli("ingest", archive[2], "--store", uri, "--lock-timeout", "30", env=lease)
        assert r.returncode == 0 and "stored 1 new input(s)" in r.stdout, r.stderr
        release.touch()
        a.send_signal(signal.SIGCONT)
        out, err = a.communicate(timeout=TIMEOUT)
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
        stop(a)
    assert a.returncode == 2 and "Traceback" not in err and ("lost the store's lease" in err or "another writer committed" in err), err
    assert committed(uri) == [archive[0], archive[2]] and stored(uri) == direct([archive[0], archive[2]])
    r = cli("ingest", *archive, "--store", uri, "--lock-timeout", "30", env=lease)  # A's leftovers cleaned, A's input added
    assert r.returncode == 0 and committed(uri) == archive
    assert objects(server, bucket) == listed(uri) | {store.MANIFEST, store.PREVIOUS, DIGEST_KEY}


# --- one clear line, exit 2 ------------------------------------------------------------------------------------


def test_missing_bucket_unreachable_endpoint_and_refused_uris_are_one_line_exit_2(server, monkeypatch):
    for args in (["analyze", "--store", "s3://no-such-bucket/st"], ["ingest", str(SYN / "gap.har"), "--store", "s3://no-such-bucket/st"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1
        assert "the bucket no-such-bucket does not exist" in r.stderr
    r = CliRunner().invoke(main, ["ingest", str(SYN / "gap.har"), "--store", "gs://bucket/st"])
    assert r.exit_code == 2 and "not supported" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = CliRunner().invoke(main, ["analyze", "--store", "s3://b/st?secret_key=hunter22"])
    assert r.exit_code == 2 and "hunter22" not in r.output and "AWS_SECRET_ACCESS_KEY" in r.stderr
    r = CliRunner().invoke(main, ["analyze", "--store", "ftp://host/st"])
    assert r.exit_code == 2 and "unknown store scheme" in r.stderr
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    closed = s.getsockname()[1]
    s.close()  # nothing listens there now
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed}")
    storage._remote.cache_clear()
    for args in (["analyze", "--store", "s3://audit/st"], ["ingest", str(SYN / "gap.har"), "--store", "s3://audit/st"]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.output
        assert f"cannot reach http://127.0.0.1:{closed}" in r.stderr and "AWS_ENDPOINT_URL" in r.stderr
    storage._remote.cache_clear()


def test_an_endpoint_that_drops_every_connection_is_tried_a_bounded_number_of_times(monkeypatch):
    """The work an unreachable endpoint costs, counted (not timed): each command fails after at most
    ``storage.ATTEMPTS`` connections, its first request's retries, then says so in one line."""
    import socket
    import struct
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    port, accepted, done = listener.getsockname()[1], [], threading.Event()

    def drop_every_connection():  # accept, then reset: the client's request fails at once, and is counted
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=drop_every_connection, daemon=True)
    thread.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
    for key, value in {**s3_server.CREDENTIALS, "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    try:
        for args in (["analyze", "--store", "s3://audit/st"], ["ingest", str(SYN / "gap.har"), "--store", "s3://audit/st"]):
            storage._remote.cache_clear()
            accepted.clear()
            r = CliRunner().invoke(main, args)
            assert r.exit_code == 2 and "Traceback" not in r.output and len(r.stderr.strip().splitlines()) == 1, r.output
            assert f"cannot reach http://127.0.0.1:{port}" in r.stderr
            assert 1 <= len(accepted) <= storage.ATTEMPTS, (args, len(accepted))
    finally:
        done.set()
        thread.join()
        listener.close()
        storage._remote.cache_clear()


def test_refused_credentials_are_one_line_exit_2_without_the_secret(tmp_path):
    """A second server that checks credentials (moto with authentication on): ours are unknown to it."""
    reason = moto_missing()
    if reason:
        unavailable(reason)
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"  # read by the child server at start
    try:
        srv = s3_server.start()
    finally:
        del os.environ["INITIAL_NO_AUTH_ACTION_COUNT"]
    try:
        env = {**srv.env(), "AWS_SECRET_ACCESS_KEY": "a-secret-that-must-not-show"}
        for args in (["analyze", "--store", "s3://audit/st"], ["ingest", str(SYN / "gap.har"), "--store", "s3://audit/st"]):
            r = cli(*args, env=env)
            assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert "credentials were refused" in r.stderr and "a-secret-that-must-not-show" not in r.stderr
    finally:
        srv.stop()


# --- Spark over the object store ----------------------------------------------------------------------------------


def test_spark_engine_over_the_s3_store_gives_the_local_document(server, bucket, tmp_path):
    """Five inputs, three groups: one incident captured three times in two formats (a group whose task reads
    three inputs' parts), a gap, and a pcap.  (The whole sample set proves nothing more here: test_spark
    compares the engines on it, and each group's task is the same code whatever the group.)"""
    from test_spark import spark_missing

    reason = spark_missing()
    if reason:
        unavailable(reason)
    uri = f"s3://{bucket}/st"
    inputs = [*sorted(str(p) for p in (SYN / "three_captures").iterdir()), str(SYN / "gap.jsonl"), str(ROOT / "sample_logs" / "real-ts-resume.pcap")]
    store.ingest(inputs, uri)
    store.ingest(inputs, tmp_path / "local")
    assert partitions.components(tmp_path / "local")["label"].n_unique() == 3
    env = {"SOURCE_DATE_EPOCH": EPOCH}
    r = CliRunner().invoke(main, ["analyze", "--store", str(tmp_path / "local"), "--json", str(tmp_path / "local.json"), "-q"], env=env)
    assert r.exit_code == 1, r.output
    local = json.loads((tmp_path / "local.json").read_text())
    assert local["summary"]["boundaries"] >= 3 and {b["verdict"] for b in local["boundaries"]} >= {"gap"}
    r = cli("analyze", "--store", uri, "--engine", "spark", "--json", str(tmp_path / "spark.json"), "-q", env=env)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert (tmp_path / "spark.json").read_bytes() == (tmp_path / "local.json").read_bytes()
    # a damaged part is found by the task that reads it: one line, exit 2
    row = store.manifest(uri).row(0, named=True)
    client(server).put_object(Bucket=bucket, Key=f"st/{row['messages_file']}", Body=b"not parquet")
    r = cli("analyze", "--store", uri, "--engine", "spark", "--json", str(tmp_path / "x.json"), "-q")
    assert r.returncode == 2 and row["path"] in r.stderr and "messages part" in r.stderr, r.stderr


# --- gs:// : read-only, against gcp-storage-emulator -----------------------------------------------------------


def test_gs_store_copied_from_a_local_one_reads_the_same_document(synthetic_store, tmp_path):
    """The documented way to a gs:// store: ingest locally, copy it (pyarrow's copy_files here), analyze."""
    try:
        import gcp_storage_emulator  # noqa: F401
    except ImportError:
        unavailable("gcp-storage-emulator is not installed (pip install -e '.[test]')")
    import pyarrow.fs as pafs

    srv = s3_server.start_gcs("audit")
    try:
        local = synthetic_store  # built once per session (tests/conftest.py); only read here
        uri = f"gs://audit/st?endpoint_override=127.0.0.1:{srv.port}&scheme=http&anonymous=true"
        gcs = storage.locate(uri)
        pafs.copy_files(str(local), "audit/st", source_filesystem=pafs.LocalFileSystem(), destination_filesystem=gcs.fs)
        env = {"SOURCE_DATE_EPOCH": EPOCH}
        for st, out in ((str(local), "local.json"), (uri, "gs.json")):
            r = CliRunner().invoke(main, ["analyze", "--store", st, "--json", str(tmp_path / out), "-q"], env=env)
            assert r.exit_code == 1, r.output
        assert (tmp_path / "gs.json").read_bytes() == (tmp_path / "local.json").read_bytes()
        r = CliRunner().invoke(main, ["ingest", str(SYN / "gap.har"), "--store", uri])  # writes: refused, before any request
        assert r.exit_code == 2 and "not supported" in r.stderr and "gs://audit/st:" in r.stderr
        row = store.manifest(uri).row(0, named=True)
        with gcs.fs.open_output_stream(gcs.path(row["events_file"])) as fh:
            fh.write(b"damaged")
        r = CliRunner().invoke(main, ["analyze", "--store", uri, "--json", "-", "-q"])
        assert r.exit_code == 2 and row["path"] in r.stderr and "events part" in r.stderr
    finally:
        srv.stop()
        storage._remote.cache_clear()
