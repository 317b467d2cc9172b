"""One recording, three recorders: the JSONL, HAR and pcap of each real scenario must tell the same story.

``sample_logs/recording/record.py`` records every real scenario in one run
through a chain (see sample_logs/README.md)::

    client -> mitmdump A (addon: .jsonl) -> mitmdump B (hardump: .har) -> server
                                                   tcpdump 'tcp port <server>' (.pcap) ^

so ``real-python-<scenario>.{jsonl,har,pcap}`` are three views of the same
HTTP exchanges: A's, B's and the wire between B and the server. Each file is
analyzed on its own with ``pipeline.run([path]).document`` and every boundary
is compared field by field, in order, with the JSONL's.

What a format legitimately cannot know is written out below as an explicit
expected difference, never skipped:

* HAR keeps no per-event time (events' ``ts`` is null), and an empty body on a
  ``200 text/event-stream`` entry is read as "not recorded" (mitmproxy's HAR of
  a streamed response is empty; B's helper ``har_keep_stream.py`` writes the
  streamed bytes back). In these recordings that happens to the standalone GET
  only, whose body really was empty (the pcap shows just the headers and the
  terminating chunk, or the FIN): HAR cannot tell empty from not recorded.
  A boundary whose own response body HAR did not record is ``unverifiable``
  "did not record"; a boundary whose *resumed* response HAR did not record
  cannot know ``last_before``.
* The pcap sees each exchange on the B -> server leg, a few milliseconds before
  A stamps it: its times are earlier, never later, and within a second.

``end_reason`` is not compared: the formats name the same ending differently
(see test_end_reasons_are_named_differently_per_format, which pins what each
one says today so that a change is seen).
"""
from __future__ import annotations

import functools
import re
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import pytest

from analyzer import catalog

from analyzer.ingest import inputs
from analyzer import pipeline

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SCENARIOS = ["resume-uuid", "resume-dense", "server-restart", "resurrection-loop", "shared-store", "reissue-after-break",
             "capture-client-loss", "capture-client-loss-send-buffer", "shared-store-concurrent"]
# (not real-python-replica-failover: the client closed the resumed stream at the first response it read, so
# the JSONL proxy next to it saw 1 replayed event, while the HAR proxy and the pcap behind it saw the 2 the replica sent)
NOT_RECORDED = "the capture did not record the reconnect's body, so its events are unknown"
BOUNDARY_FIELDS = (
    "last_event_id", "last_before", "first_event_id_after", "verdict", "reason",
    "lost_event_ids", "duplicated_event_ids", "handled_correctly",
)
# verdicts decided before any look at the reconnect's body (decision chain: the HTTP response,
# or what the server did with the session afterwards)
HTTP_VERDICTS = {"session_invalid", "epoch_change", "session_resurrected"}


def path(scenario: str, fmt: str) -> Path:
    return SAMPLES / f"real-python-{scenario}.{fmt}"


@functools.lru_cache(maxsize=None)
def document(p: Path) -> dict:
    return pipeline.run([str(p)]).document


@functools.lru_cache(maxsize=None)
def tables(p: Path):
    return inputs.read_one(str(p))


LOCATION = re.compile(r"\b(line|packet|entry) \d+\b")


def view(b: dict) -> dict:
    # a reason may cite a record ("answered line 45 error ..."): each format names it its own way
    v = {k: b[k] for k in BOUNDARY_FIELDS} | {"status": b["http"]["status"], "method": b["http"]["method"]}
    return v | {"reason": LOCATION.sub("<record>", v["reason"])}


def ts(s: str) -> datetime:
    return datetime.fromisoformat(s.replace("Z", "+00:00"))


def match_exchanges(base: list[dict], other: list[dict]) -> list[tuple[dict, dict]]:
    """Pair exchanges by what they are (method, Last-Event-ID, status), in start order.

    Not by position: two requests a millisecond apart (the client's
    notifications/initialized POST and its standalone GET) may reach the server
    in the other order than they reached A.
    """
    left = list(other)
    pairs = []
    for x in base:
        key = (x["method"], x["last_event_id"], x["status"])
        found = next((y for y in left if (y["method"], y["last_event_id"], y["status"]) == key
                      and abs((ts(y["started"]) - ts(x["started"])).total_seconds()) < 1.0), None)
        assert found is not None, f"no counterpart for {x['location']} {key}"
        left.remove(found)
        pairs.append((x, found))
    assert not left, f"exchanges only in the other format: {[y['location'] for y in left]}"
    return pairs


def expected_har_view(jb: dict, har_exchanges: dict[str, dict], hb: dict) -> tuple[dict, list[str]]:
    """The HAR boundary the JSONL boundary `jb` implies, given what the HAR recorded; plus the
    names of the fields that HAR cannot know and that are therefore not compared."""
    want = view(jb)
    not_compared: list[str] = []
    resumed = har_exchanges.get(hb["resumes_exchange"]) if hb["resumes_exchange"] else None
    if resumed is not None and not resumed["body_recorded"] and jb["last_before"] is not None:
        # The HAR lost the events of the resumed stream, so it cannot know the last id it delivered;
        # for integer ids that id is part of the cursor, so the judgement after it may differ too.
        want["last_before"] = None
        not_compared += ["first_event_id_after", "verdict", "reason", "lost_event_ids", "duplicated_event_ids",
                         "handled_correctly"]
    if not har_exchanges[hb["request_exchange"]]["body_recorded"] and jb["verdict"] not in HTTP_VERDICTS:
        # The reconnect's own events are unknown: never "no events", never a verdict from ids.
        want |= {"first_event_id_after": None, "verdict": "unverifiable", "reason": NOT_RECORDED,
                 "lost_event_ids": [], "duplicated_event_ids": []}
        # handled_correctly is now the re-initialize rule applied to an unverifiable verdict
        # (a continuous one is handled by definition): it follows the client, not the ids.
        not_compared.append("handled_correctly")
    return want, not_compared


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_format_was_read_completely(scenario):
    for fmt in ("jsonl", "har", "pcap"):
        doc = document(path(scenario, fmt))
        (inp,) = doc["inputs"]
        assert (inp["format"], inp["rejected"], inp["error"]) == ("pcap" if fmt == "pcap" else fmt, 0, None), inp
        assert not [a for a in doc["anomalies"] if a["severity"] == "error"], (fmt, doc["anomalies"])


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fmt", ["pcap", "har"])
def test_sessions_and_exchanges_agree(scenario, fmt):
    base, other = document(path(scenario, "jsonl")), document(path(scenario, fmt))
    assert [s["session_id"] for s in other["sessions"]] == [s["session_id"] for s in base["sessions"]]
    for x, y in match_exchanges(base["exchanges"], other["exchanges"]):
        where = (x["location"], y["location"])
        assert (y["session_id"], y["content_type"]) == (x["session_id"], x["content_type"]), where
        if fmt == "har" and not y["body_recorded"]:
            # An empty HAR body is "not recorded": its events are unknown to HAR. (It is the standalone
            # GET, whose body was in fact empty: the JSONL and pcap agree with 0 events.)
            assert (y["events"], y["first_id"], y["last_id"]) == (0, None, None), where
            assert (x["method"], x["events"]) == ("GET", 0), where
            continue
        assert y["body_recorded"] and x["body_recorded"], where
        assert (y["events"], y["cut_off_events"], y["first_id"], y["last_id"]) == (
            x["events"], x["cut_off_events"], x["first_id"], x["last_id"]), where


WITH_RECONNECTS = [s for s in SCENARIOS if s != "reissue-after-break"]  # that client never resumes: it re-issues


@pytest.mark.parametrize("scenario", WITH_RECONNECTS)
def test_pcap_boundaries_equal_jsonl(scenario):
    """The wire between B and the server holds every byte A saw: no difference is expected."""
    base, other = document(path(scenario, "jsonl")), document(path(scenario, "pcap"))
    assert base["boundaries"], "the scenario has reconnects"
    assert [view(b) for b in other["boundaries"]] == [view(b) for b in base["boundaries"]]


@pytest.mark.parametrize("scenario", WITH_RECONNECTS)
def test_har_boundaries_equal_jsonl_where_har_recorded(scenario):
    base, other = document(path(scenario, "jsonl")), document(path(scenario, "har"))
    har_exchanges = {x["exchange_id"]: x for x in other["exchanges"]}
    assert len(other["boundaries"]) == len(base["boundaries"]) > 0
    fully_compared = 0
    for jb, hb in zip(base["boundaries"], other["boundaries"], strict=True):
        want, not_compared = expected_har_view(jb, har_exchanges, hb)
        got = view(hb)
        for k in not_compared:
            want.pop(k), got.pop(k)
        assert got == want, (jb["request"]["location"], hb["request"]["location"])
        fully_compared += not not_compared
    # With har_keep_stream.py, B recorded the body of every reconnect in these recordings, so every
    # boundary is compared in full; the HAR-only expectations are exercised by the streamed HAR below.
    assert fully_compared == len(base["boundaries"])


def test_har_without_bodies_makes_every_resume_unverifiable():
    """mitmproxy's plain streamed HAR (`.mitm-streamed.har`, every body empty) against the JSONL.

    It is a *separate* run of resume-dense (its JSONL was not kept), so session
    and event ids are not compared. It is comparable at all because the
    scenario is deterministic on the wire: the same requests, and dense ids
    that restart at 1 on every stream, so the Last-Event-IDs are 3 and 6 again.
    """
    base = document(path("resume-dense", "jsonl"))
    streamed = document(SAMPLES / "real-python-resume-dense.mitm-streamed.har")
    assert [(b["last_event_id"], b["verdict"]) for b in base["boundaries"]] == [("3", "continuous"), ("6", "continuous")]
    assert len(streamed["boundaries"]) == len(base["boundaries"])
    for jb, hb in zip(base["boundaries"], streamed["boundaries"], strict=True):
        assert (hb["last_event_id"], hb["http"]["status"]) == (jb["last_event_id"], jb["http"]["status"])
        assert hb["verdict"] == "unverifiable" and hb["reason"] == NOT_RECORDED, hb
        # nothing of the earlier stream was recorded either: no last id before, none after
        assert (hb["last_before"], hb["first_event_id_after"], hb["lost_event_ids"], hb["duplicated_event_ids"]) == (
            None, None, [], [])
        # JSONL: continuous, handled by definition. HAR: unverifiable only because the capture kept no body;
        # the client saw the events and rightly went on, so its reaction is not judged (was False: a capture's
        # blind spot blamed on the client)
        assert (jb["handled_correctly"], hb["handled_correctly"]) == (True, None)
        assert hb["rule_id"] in catalog.CAPTURE_BLIND


def _events_by_content(p: Path) -> dict[tuple, list]:
    """Event times keyed by what the event is; equal keys (priming `1`, data "" on every
    stream of a dense session) are told apart by their order in time."""
    out: dict[tuple, list] = defaultdict(list)
    for e in tables(p).events.to_pylist():
        out[(e["id"], e["event"], e["data"], e["retry"], e["fate"])].append(e["ts"])
    for times in out.values():
        times.sort(key=lambda t: (t is None, t))
    return dict(out)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_agree_and_pcap_times_are_within_a_second_of_jsonl(scenario):
    jsonl = _events_by_content(path(scenario, "jsonl"))
    pcap = _events_by_content(path(scenario, "pcap"))
    har = _events_by_content(path(scenario, "har"))
    assert jsonl, "events expected"
    # the same events, the same number of times, in all three
    assert {k: len(v) for k, v in pcap.items()} == {k: len(v) for k, v in jsonl.items()}
    assert {k: len(v) for k, v in har.items()} == {k: len(v) for k, v in jsonl.items()}
    assert all(t is None for v in har.values() for t in v), "HAR keeps no per-event time"
    lags = []
    for key, times in jsonl.items():
        for j, p in zip(times, pcap[key], strict=True):
            assert j is not None and p is not None, key
            lags.append(((j - p).total_seconds(), key[0]))
    # The server's packet comes first, then B, then A stamps it: same clock, later, well within 1 s.
    bad = [(lag, eid) for lag, eid in lags if not 0 <= lag < 1.0]
    assert not bad, f"pcap vs JSONL event time (JSONL - pcap, s) outside [0, 1): {bad}"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pcap_requests_start_within_a_second_after_jsonl(scenario):
    base, other = document(path(scenario, "jsonl")), document(path(scenario, "pcap"))
    for x, y in match_exchanges(base["exchanges"], other["exchanges"]):
        lag = (ts(y["started"]) - ts(x["started"])).total_seconds()
        assert 0 <= lag < 1.0, (x["location"], y["location"], lag)


@pytest.mark.parametrize("fmt", ["pcapng", "pcap.gz"])
def test_pcapng_and_gzip_read_like_the_pcap(fmt):
    scenario = {"pcapng": "resume-dense", "pcap.gz": "server-restart"}[fmt]
    base, other = document(path(scenario, "pcap")), document(path(scenario, fmt))
    assert other["inputs"][0]["records"] == base["inputs"][0]["records"]
    assert [view(b) for b in other["boundaries"]] == [view(b) for b in base["boundaries"]]
    strip = lambda xs: [{k: v for k, v in x.items() if k != "source"} for x in xs]  # noqa: E731
    assert strip(other["exchanges"]) == strip(base["exchanges"])


# What each format says about how a response ended, today (canonical `end_reason`, `end_by`).
# The same ending has different names; the analysis does not use them for verdicts yet, but a
# report that compares formats would. Recorded here so that any change is deliberate.
END_REASONS = {
    # a complete response (chunked 0-length chunk / Content-Length reached)
    "complete": {"jsonl": ("eof", "server"), "har": ("complete", None), "pcap": ("complete", None)},
    # resumed GET the client closed after reading the result (the SDK does not wait for the server)
    "client_closed": {"jsonl": ("reset", "client"), "har": ("complete", None), "pcap": ("eof", "client")},
    # SIGKILLed server: the kernel closes its sockets with FIN, mid chunked body
    "server_killed": {"jsonl": ("reset", "server"), "har": ("complete", None), "pcap": ("eof", "server")},
}
ENDINGS = {
    "resume-uuid": ["complete", "complete", "complete", "complete", "client_closed", "complete", "complete"],
    "resume-dense": ["complete"] * 5 + ["client_closed", "complete", "complete"],
    "server-restart": ["complete", "complete", "server_killed", "server_killed"] + ["complete"] * 4,
}


@pytest.mark.parametrize("scenario", list(ENDINGS))
def test_end_reasons_are_named_differently_per_format(scenario):
    base = document(path(scenario, "jsonl"))
    for fmt in ("jsonl", "har", "pcap"):
        rows = {r["location"]: r for r in tables(path(scenario, fmt)).exchanges.to_pylist()}
        pairs = match_exchanges(base["exchanges"], document(path(scenario, fmt))["exchanges"])
        got = [(rows[y["location"]]["end_reason"], rows[y["location"]]["end_by"]) for _, y in pairs]
        want = [END_REASONS[e][fmt] for e in ENDINGS[scenario]]  # in the JSONL's exchange order
        assert got == want, fmt


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("fmt", ["pcap", "har"])
def test_findings_agree(scenario, fmt):
    """The same rules fire, as often and as severe, whatever recorded the traffic."""
    def rules(doc):
        return sorted((f["rule"], f["severity"], f.get("attempts", 1)) for f in doc["findings"])
    assert rules(document(path(scenario, fmt))) == rules(document(path(scenario, "jsonl")))
