"""--since/--until (analyzer/window.py): what the tool prints, dates and durations; on inputs and on stores; a session
that overlaps the window is kept whole, so a window never cuts a resume off the history it names."""
from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from analyzer import pipeline
from analyzer.cli import main
from analyzer.scale import store

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
DENSE = SAMPLES / "real-python-resume-dense.jsonl"  # 2026-12-02 12:04:04-06, one session: POST, GET Last-Event-ID 3, GET 6
SHARED = SAMPLES / "real-python-shared-store.jsonl"  # 2026-12-03 01:58:46-48, two sessions one after the other
GAP = SAMPLES / "synthetic" / "gap.jsonl"  # 2026-11-13 09:00:00-04
EPOCH = "1764547200"
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
UTC = timezone.utc
US = timedelta(microseconds=1)


def cli(*args: str) -> tuple[dict, object]:
    """``analyze ARGS --json -``: the document and the click result."""
    r = CliRunner().invoke(main, ["analyze", *args, "--json", "-", "-q"], env={"SOURCE_DATE_EPOCH": EPOCH})
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout), r


def when(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def show(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def body(doc: dict) -> dict:
    """What a window must not change for the sessions it keeps (anomalies: a store lists them by input folder)."""
    return {**{k: doc[k] for k in ("sessions", "exchanges", "boundaries", "findings")},
            "anomalies": sorted(doc["anomalies"], key=lambda a: json.dumps(a, sort_keys=True))}


def rules(doc: dict, rule: str) -> int:
    return sum(1 for f in doc["findings"] if f["rule"] == rule)


def verdicts(doc: dict) -> list[tuple[str, str, str]]:
    return [(b["request"]["source"], b["request"]["location"], b["verdict"]) for b in doc["boundaries"]]


@pytest.fixture(scope="module")
def dense():
    """The unwindowed document of DENSE, and the start of its newest exchange."""
    doc = pipeline.run([str(DENSE)]).document
    return doc, max(when(e["started"]) for e in doc["exchanges"])


# --- the forms --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, want", [
    ("2026-12-02T12:04:05.000000Z", datetime(2026, 12, 2, 12, 4, 5, tzinfo=UTC)),  # as the outputs print times
    ("2026-12-02T12:04:05.25Z", datetime(2026, 12, 2, 12, 4, 5, 250000, tzinfo=UTC)),
    ("2026-12-02T12:04:05.123456789Z", datetime(2026, 12, 2, 12, 4, 5, 123456, tzinfo=UTC)),  # nanoseconds: cut to µs
    ("2026-12-02t12:04:05z", datetime(2026, 12, 2, 12, 4, 5, tzinfo=UTC)),
    ("2026-12-02 12:04:05Z", datetime(2026, 12, 2, 12, 4, 5, tzinfo=UTC)),
    ("2026-12-02T13:04:05+01:00", datetime(2026, 12, 2, 12, 4, 5, tzinfo=UTC)),
    ("2026-12-02T07:34:05.5-04:30", datetime(2026, 12, 2, 12, 4, 5, 500000, tzinfo=UTC)),
    ("2026-12-02T12:04:05", datetime(2026, 12, 2, 12, 4, 5, tzinfo=UTC)),  # no offset: UTC
    ("2026-12-02", datetime(2026, 12, 2, tzinfo=UTC)),  # a date: its 00:00 UTC
])
def test_every_time_form_is_accepted_and_shown_in_utc(text, want):
    doc, _ = cli(str(DENSE), "--since", text)
    assert doc["summary"]["window"] == {"since": show(want), "until": None}
    got, _ = cli(str(DENSE), "--until", text)
    assert got["summary"]["window"] == {"since": None, "until": show(want)}


@pytest.mark.parametrize("text, back", [
    ("24h", timedelta(hours=24)), ("7d", timedelta(days=7)), ("90m", timedelta(minutes=90)),
    ("30s", timedelta(seconds=30)), ("1h30m", timedelta(minutes=90)), ("2w", timedelta(weeks=2)),
])
def test_every_duration_counts_back_from_now(dense, text, back):
    whole, newest = dense
    now = newest + timedelta(seconds=1)
    for given in (show(now), now.strftime("%Y-%m-%d %H:%M:%S.%f UTC")):
        doc, _ = cli(str(DENSE), "--since", text, "--now", given)
        assert doc["summary"]["window"] == {"since": show(now - back), "until": None}
        assert body(doc) == body(whole)  # the capture spans 2 s: any of these keeps all of it


def test_without_now_a_duration_counts_back_from_the_clock(dense):
    """As journalctl --since: the captures' own times never place the window.  The sample is from 2026-12-02; a
    day back from the clock (any day after 2026-12-03) keeps none of it -- the old rule (back from the newest
    exchange) kept all of it."""
    before = datetime.now(UTC)
    doc, r = cli(str(DENSE), "--since", "24h")
    after = datetime.now(UTC)
    since = when(doc["summary"]["window"]["since"])
    assert before - timedelta(hours=24) <= since <= after - timedelta(hours=24)
    assert doc["summary"]["exchanges"] == 0 and "warning: no exchange in the inputs matches --since 1d" in r.stderr


def test_a_record_dated_9999_does_not_move_the_window(tmp_path):
    """One exchange far in the future beside a capture's gap: --since 24h (now given) keeps the gap's session.
    Counted back from the newest start, the window held only the 9999 exchange: 0 findings, exit 0."""
    lines = GAP.read_text().splitlines()
    future = json.loads(lines[0])
    future.update(ts="9999-12-31T00:00:00Z", conn="future", headers={"mcp-session-id": "future-session"})
    p = tmp_path / "gap-and-future.jsonl"
    p.write_text("\n".join([*lines, json.dumps(future)]) + "\n")
    doc, r = cli(str(p), "--since", "24h", "--now", "2026-11-13T12:00:00Z")
    assert r.exit_code == 1 and any(b["verdict"] == "gap" for b in doc["boundaries"])
    # and the record from the future is said, where it is (a warning: it fails no run by itself)
    [a] = [a for a in doc["anomalies"] if a["code"] == "time_in_future"]
    assert a["severity"] == "warning" and a["location"] == f"line {len(lines) + 1}" and "9999-12-31T00:00:00" in a["message"]


def test_now_is_a_time_and_needs_a_duration():
    r = CliRunner().invoke(main, ["analyze", str(DENSE), "--since", "1h", "--now", "2h"])
    assert r.exit_code == 2 and "Invalid value for '--now'" in r.stderr
    r = CliRunner().invoke(main, ["analyze", str(DENSE), "--since", "2026-12-01", "--now", "2026-12-02"])
    assert r.exit_code == 2 and "--now sets what a duration of --since/--until counts back from" in r.stderr


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "2026-12-02T25:00:00Z", "2026-12-02T12:04:05+24:00", "24", "1y", "h",
                                  "2026-12-02T12:04:05ZZ", "-1h", ""])
def test_a_bad_value_is_a_usage_error_naming_the_forms(text):
    r = CliRunner().invoke(main, ["analyze", str(DENSE), f"--since={text}"])
    assert r.exit_code == 2 and "Invalid value for '--since'" in r.stderr and "Traceback" not in r.output
    for form in ("RFC 3339", "2026-11-13T09:00:03.000000Z", "+01:00", "2026-11-13", "24h", "7d"):
        assert form in r.stderr, form


def test_session_still_narrows_only_a_store():
    r = CliRunner().invoke(main, ["analyze", str(DENSE), "--session", "x", "--since", "24h"])
    assert r.exit_code == 2 and "--session narrows a store: add --store DIR (--since and --until work on PATHs too)" in r.stderr


def test_an_empty_window_is_a_usage_error():
    r = CliRunner().invoke(main, ["analyze", str(DENSE), "--since", "2026-12-03", "--until", "2026-12-02T00:00:00Z"])
    assert r.exit_code == 2 and "is not before --until" in r.stderr
    r = CliRunner().invoke(main, ["analyze", str(DENSE), "--since", "1h", "--until", "2h"])  # known once the newest start is
    assert r.exit_code == 2 and "the window is empty" in r.stderr and "Traceback" not in r.output


# --- whole sessions -----------------------------------------------------------------------------------


def test_a_session_straddling_the_window_is_kept_whole_on_inputs(dense):
    """The window holds the first resume GET (``Last-Event-ID: 3``) and nothing else: the POST whose stream it resumes
    started before it, the second resume after it.  Kept whole, the verdicts are the unwindowed run's."""
    whole, _ = dense
    first = when(whole["boundaries"][0]["started"])
    assert when(whole["exchanges"][0]["started"]) < first  # the stream's POST lies before the window
    doc, r = cli(str(DENSE), "--since", show(first), "--until", show(first + US))
    assert doc["summary"]["exchanges"] == whole["summary"]["exchanges"] == 8
    assert rules(doc, "unknown_last_event_id") == 0
    assert verdicts(doc) == verdicts(whole) == [(str(DENSE), "line 17", "continuous"), (str(DENSE), "line 23", "continuous")]
    assert body(doc) == body(whole)
    assert doc["summary"]["window"] == {"since": show(first), "until": show(first + US)}


def test_a_session_straddling_the_window_is_kept_whole_in_a_store(dense, tmp_path):
    """Before: the store kept only the exchanges that started inside, and the resume named an event it had dropped."""
    whole, _ = dense
    first = when(whole["boundaries"][0]["started"])
    store.ingest([str(DENSE)], tmp_path / "st")
    tables, rows = store.load(tmp_path / "st", since=first, until=first + US)
    doc = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    assert rules(doc, "unknown_last_event_id") == 0 and verdicts(doc) == verdicts(whole)
    assert body(doc) == body(whole)
    got, _ = cli("--store", str(tmp_path / "st"), "--since", show(first), "--until", show(first + US))
    assert body(got) == body(whole) and got["summary"]["window"] == {"since": show(first), "until": show(first + US)}


def test_a_session_is_kept_across_captures_of_one_incident():
    """Three captures of one session: the window holds only the client's part; the proxy's and the server's, earlier
    (another clock), come along, so the cross-capture verdict stands."""
    caps = sorted(str(p) for p in (SAMPLES / "synthetic" / "three_captures").iterdir())
    whole = pipeline.run(caps).document
    doc, _ = cli(*caps, "--since", "2026-11-13T09:00:04Z")
    assert sorted(s for sess in doc["sessions"] for s in sess["sources"]) == caps
    assert body(doc) == body(whole) and verdicts(doc) == verdicts(whole)


def test_sessions_outside_the_window_go_and_inputs_still_count():
    whole = pipeline.run([str(GAP), str(DENSE)]).document
    doc, r = cli(str(GAP), str(DENSE), "--since", "2026-12-01")
    jsonschema.validate(doc, SCHEMA)  # summary.window is in the schema
    assert {s["session_id"] for s in doc["sessions"]} == {s["session_id"] for s in whole["sessions"] if str(DENSE) in s["sources"]}
    assert doc["summary"]["inputs"] == whole["summary"]["inputs"] == 2  # read, whatever the window keeps
    assert doc["summary"]["records"] == whole["summary"]["records"]
    assert [i["path"] for i in doc["inputs"]] == [i["path"] for i in whole["inputs"]]
    doc, r = cli(str(GAP), "--since", "2026-12-01")
    assert doc["summary"]["exchanges"] == 0 and doc["summary"]["inputs"] == 1
    assert "warning: no exchange in the inputs matches --since 2026-12-01T00:00:00.000000Z" in r.stderr


def test_a_short_duration_keeps_only_the_latest_sessions():
    whole = pipeline.run([str(SHARED)]).document
    assert len(whole["sessions"]) == 2
    last = max(whole["sessions"], key=lambda s: s["first_seen"])
    newest = max(when(e["started"]) for e in whole["exchanges"])
    doc, _ = cli(str(SHARED), "--since", "0s", "--now", show(newest))  # the session of the newest exchange start
    assert [s["session_id"] for s in doc["sessions"]] == [last["session_id"]]
    dense_newest = max(when(e["started"]) for e in pipeline.run([str(DENSE)]).document["exchanges"])
    doc, _ = cli(str(GAP), str(DENSE), "--since", "1h", "--now", show(dense_newest))  # two captures weeks apart: the newer one
    assert {x["source"] for x in doc["exchanges"]} == {str(DENSE)} and doc["summary"]["inputs"] == 2
    doc, _ = cli(str(GAP), str(DENSE), "--until", "1h", "--now", show(dense_newest))  # and the other way round
    assert {x["source"] for x in doc["exchanges"]} == {str(GAP)}


# --- the same on every path ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    """Five captures from three days in one folder, and a store of them."""
    base = tmp_path_factory.mktemp("window")
    caps = base / "caps"
    caps.mkdir()
    for name in ("real-python-resume-dense.jsonl", "real-ts-resume.jsonl", "real-python-shared-store.jsonl",
                 "real-python-reissue-after-break.jsonl", "real-python-uuid-restart.jsonl"):
        shutil.copy(SAMPLES / name, caps / name)
    store.ingest([str(caps)], base / "st")
    return caps, base / "st"


@pytest.mark.parametrize("window", [
    ("--since", "2026-12-03", "--until", "2026-12-04"),
    ("--since", "2026-12-02T12:04:05.320515Z", "--until", "2026-12-02T13:04:05.320516+01:00"),  # inside dense's session
    ("--since", "24h", "--now", "2026-12-04T12:00:00Z"),
    ("--until", "1d", "--now", "2026-12-04T12:00:00Z"),
])
def test_inputs_store_and_partitions_give_the_same_findings(archive, tmp_path, window):
    caps, st = archive
    plain, _ = cli(str(caps), *window)
    stored, _ = cli("--store", str(st), *window)
    assert plain["summary"]["exchanges"] > 0 and plain["summary"]["window"] == stored["summary"]["window"]
    assert body(stored) == body(plain)
    drop = ("inputs", "inputs_unreadable", "records", "rejected")  # a store lists the inputs that contribute; inputs, all
    assert {k: v for k, v in stored["summary"].items() if k not in drop} == {k: v for k, v in plain["summary"].items() if k not in drop}
    r = CliRunner().invoke(main, ["analyze", "--store", str(st), *window, "--partitions", "2", "--json", str(tmp_path / "p.json"), "-q"],
                           env={"SOURCE_DATE_EPOCH": EPOCH})
    assert r.exit_code in (0, 1), r.output
    assert json.loads((tmp_path / "p.json").read_text()) == stored  # written partition by partition
    from analyzer.scale import partitions
    from analyzer.window import parse

    args = dict(zip(window[::2], window[1::2]))
    from analyzer.window import Window

    resolved = Window(*(parse(args[k]) if k in args else None for k in ("--since", "--until"))).resolve(
        parse(args["--now"]) if "--now" in args else None)
    since, until = resolved.since, resolved.until
    skip = ("generated_at", "trend")  # (the command adds a store's trend to the document, analyzer/run.py)
    for n in (1, 2):
        got = partitions.analyze(st, n, since, until).document
        assert {k: v for k, v in got.items() if k not in skip} == {k: v for k, v in stored.items() if k not in skip}


# --- no window cuts a resume off its history: every capture, a window on its last reconnect -----------

# a window holding one reconnect of these keeps its session whole, but not the *other* session of the capture whose
# events the resume replayed (a shared event store): the cross-session evidence lies outside the window, so the
# verdict is the one the session alone supports (documented in analyzer/window.py)
# two sessions on one store keyed without the session: a window of one reconnect leaves out the other session whose
# events were replayed, so the verdict can only say the ids went back (real-go-client-foreign-same-id: B got A's ids)
CROSS_SESSION = {"real-python-shared-store.jsonl", "real-python-shared-store-concurrent.jsonl", "real-ts-cross-session.jsonl",
                 "real-go-client-foreign-same-id.jsonl"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    st = tmp_path_factory.mktemp("corpus") / "st"
    files = sorted(str(p) for p in (*SAMPLES.glob("*.jsonl"), *(SAMPLES / "synthetic").glob("*.jsonl")))
    store.ingest(files, st)
    tables, rows = store.load(st)
    return st, pipeline.analyze_tables(tables, rows, [], [], len(rows)).document


def test_a_window_on_any_reconnect_invents_no_unknown_last_event_id(corpus):
    st, whole = corpus
    last: dict[str, dict] = {}
    for b in whole["boundaries"]:
        src = b["request"]["source"]
        if src not in last or when(b["started"]) > when(last[src]["started"]):
            last[src] = b
    assert len(last) >= 20
    for src, b in sorted(last.items()):
        t = when(b["started"])
        tables, rows = store.load(st, since=t, until=t + US)
        doc = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
        sid = b["session_id"]
        unknown = lambda d: sum(1 for f in d["findings"] if f["rule"] == "unknown_last_event_id" and f["session_id"] == sid)  # noqa: E731
        assert unknown(doc) == unknown(whole), src
        got = next(x for x in doc["boundaries"] if x["request"] == b["request"])
        if Path(src).name not in CROSS_SESSION:
            assert (got["verdict"], got["lost_event_ids"], got["duplicated_event_ids"]) == \
                (b["verdict"], b["lost_event_ids"], b["duplicated_event_ids"]), src


def test_a_stream_open_through_the_window_brings_its_session(tmp_path):
    """An exchange counts by its lifetime, not its start: a GET stream opened before --since that delivered into
    the window keeps its session (a nightly --since 24h sees the events a day-long stream delivered)."""
    lines = []
    for line in GAP.read_text().splitlines():  # gap.jsonl's clock moved so that its last stream ends a day later
        rec = json.loads(line)
        if rec["conn"] == sorted({json.loads(ln)["conn"] for ln in GAP.read_text().splitlines()})[-1] and rec["kind"] in ("sse", "close"):
            rec["ts"] = show(when(rec["ts"]) + timedelta(days=1))
        lines.append(json.dumps(rec))
    p = tmp_path / "long.jsonl"
    p.write_text("\n".join(lines) + "\n")
    whole = pipeline.run([str(p)]).document
    last = max(when(x["ended"]) for x in whole["exchanges"])
    assert all(when(x["started"]) < last - timedelta(hours=12) for x in whole["exchanges"])  # every start is a day back
    doc, _ = cli(str(p), "--since", show(last - timedelta(hours=1)))
    assert doc["summary"]["exchanges"] == whole["summary"]["exchanges"] and verdicts(doc) == verdicts(whole)


def test_times_that_cannot_be_placed_are_kept_and_said(tmp_path):
    """A leap second (23:59:60Z, RFC 3339) is a time: read as 23:59:59.999999.  A time that cannot be read at all
    keeps its exchange in every window, with a warning: before, both vanished from every window with their findings."""
    lines = [json.loads(x) for x in GAP.read_text().splitlines()]
    leap = [dict(r, ts="2026-11-13T23:59:60Z") for r in lines]
    bad = [dict(r, ts="not a time") for r in lines]
    for name, recs, says in (("leap", leap, None), ("bad", bad, "have no time that could be read")):
        p = tmp_path / f"{name}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        doc, r = cli(str(p), "--since", "2026-11-13T23:00:00Z", "--until", "2026-11-14")
        assert any(b["verdict"] == "gap" for b in doc["boundaries"]), name
        assert (says in r.stderr) if says else ("no time" not in r.stderr), r.stderr
    doc, _ = cli(str(tmp_path / "leap.jsonl"))
    assert {x["started"] for x in doc["exchanges"]} == {"2026-11-13T23:59:59.999999Z"}
