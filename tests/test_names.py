"""Names of sessions and reconnects (analyzer/document/names.py) are the same in every run.

The issue ("Stable names"): the same session was ``S107`` in one run, ``S2`` in a windowed run and ``S5`` in the
nightly one, and 11 of 31 sessions got new JUnit names between two CI runs.  Done when subsets of the inputs,
``--since``/``--until`` windows, input order and engines never rename a session or a reconnect.

What "the same" is, here, never comes from the names themselves: a session record is the same when it is one
capture's (``sources``) view of one Mcp-Session-Id, an exchange when it is the same record of the same file
(``source``, ``location``), a reconnect when its request is the same record of the same file (its ``request``
or one of its ``views``, the other captures that saw it).  Every such thing must have one name, in every run.
"""
from __future__ import annotations

import json
import random
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analyzer import pipeline
from analyzer import window as windows
from analyzer.document import ci, names
from analyzer.scale import partitions, spill
from analyzer.scale import store as store_mod

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "sample_logs"
SYN = SAMPLES / "synthetic"
SLOW = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], derandomize=True)


# --- what a document calls each thing --------------------------------------------------------------------------


def named(doc: dict) -> dict[str, dict]:
    """Every thing a document names, by what it is (see the module's docstring), with its name; and the check
    that within the document one thing has one name and one name one thing of its kind."""
    sessions: dict[tuple, str] = {}
    for s in doc["sessions"]:
        for src in s["sources"]:
            assert sessions.setdefault((src, s["session_id"]), s["session"]) == s["session"]
    by_id: dict[str, str] = {}
    for s in doc["sessions"]:  # one Mcp-Session-Id, one name; two ids, two names
        assert by_id.setdefault(s["session_id"], s["session"]) == s["session"]
    assert len(set(by_id.values())) == len(by_id)
    exchanges = {(x["source"], x["location"]): x["session"] for x in doc["exchanges"]}
    reconnects: dict[tuple, str] = {}
    for b in doc["boundaries"]:
        for ref in [b["request"], *b["views"]]:
            assert reconnects.setdefault((ref["source"], ref["location"]), b["boundary_id"]) == b["boundary_id"]
        assert b["boundary_id"].startswith(b["session"] + ".r")
    assert len({b["boundary_id"] for b in doc["boundaries"]}) == len(doc["boundaries"])
    known = {b["boundary_id"] for b in doc["boundaries"]}
    assert all(f["boundary"] is None or f["boundary"] in known for f in doc["findings"])
    assert {f["session"] for f in doc["findings"]} <= set(by_id.values()) | {None}
    return {"sessions": sessions, "exchanges": exchanges, "reconnects": reconnects}


def assert_same_names(whole: dict, part: dict) -> int:
    """Everything ``part`` names, ``whole`` names alike; the number of names compared."""
    a, b = named(whole), named(part)
    n = 0
    for kind in ("sessions", "exchanges", "reconnects"):
        for key, name in b[kind].items():
            assert key in a[kind], (kind, key)
            assert a[kind][key] == name, (kind, key, a[kind][key], name)
            n += 1
    return n


@pytest.fixture(scope="module")
def whole(_samples_run) -> dict:
    """The single pass over every sample (absolute paths, as the store records them); read only."""
    return _samples_run


@pytest.fixture(scope="module")
def universe(whole) -> list[str]:
    return [i["path"] for i in whole["inputs"]]


@pytest.fixture(scope="module")
def times(whole) -> list[str]:
    return sorted({x["started"] for x in whole["exchanges"] if x["started"]})


# --- the property: subsets, order, windows, engines -----------------------------------------------------------


def test_the_samples_name_many_things(whole):
    got = named(whole)
    assert len({s["session_id"] for s in whole["sessions"]}) > 40 and len(got["reconnects"]) > 100
    assert len(whole["sessions"]) > len({s["session"] for s in whole["sessions"]})  # records of one session share its name


@settings(SLOW, max_examples=14)
@given(data=st.data())
def test_a_subset_of_the_inputs_in_any_order_renames_nothing(whole, universe, data):
    paths = data.draw(st.lists(st.sampled_from(universe), min_size=1, max_size=10, unique=True), label="paths")
    doc = pipeline.run(paths).document
    assert_same_names(whole, doc)


def test_every_input_in_another_order_renames_nothing(whole, universe):
    paths = list(universe)
    random.Random(7).shuffle(paths)
    assert paths != universe
    assert assert_same_names(whole, pipeline.run(paths).document) > 500


@settings(SLOW, max_examples=10)
@given(data=st.data())
def test_a_window_renames_nothing(whole, universe, times, data):
    since = data.draw(st.sampled_from([None, *times]), label="since")
    until = data.draw(st.sampled_from([None, *[t for t in times if since is None or t > since]]), label="until")
    if since is None and until is None:
        until = times[len(times) // 2]
    paths = data.draw(st.one_of(st.just(universe), st.lists(st.sampled_from(universe), min_size=1, max_size=10, unique=True)), label="paths")
    w = windows.of(since and windows.parse(since), until and windows.parse(until))
    doc = pipeline.run(paths, window=w).document
    assert_same_names(whole, doc)


@settings(SLOW, max_examples=8)
@given(data=st.data())
def test_every_engine_over_the_store_renames_nothing(whole, samples_store, times, tmp_path_factory, data):
    """The store analyzed in one pass (``analyze --store``), in ``n`` partitions merged in memory, and spilled
    (``--partitions N`` without --html), with or without a window."""
    engine = data.draw(st.sampled_from(["store", "partitions", "spill"]), label="engine")
    n = data.draw(st.integers(1, 6), label="n")
    since = data.draw(st.sampled_from([None, *times[::7]]), label="since")
    w = windows.of(since and windows.parse(since), None)
    if engine == "store":
        tables, rows = store_mod.load(samples_store, w and w.since)
        doc = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    elif engine == "partitions":
        doc = partitions.analyze(samples_store, n, w and w.since).document
    else:
        out = tmp_path_factory.mktemp("spill") / "f.json"
        spill.write(samples_store, n, None, str(out), w and w.since)
        doc = json.loads(out.read_text())
    compared = assert_same_names(whole, doc)
    assert compared > (500 if since is None else 0)


# --- JUnit: the names a CI server keeps a test's history by ----------------------------------------------------


def junit_names(doc: dict) -> set[tuple[str, str, str]]:
    root = ET.fromstring(ci.junit_xml(doc, "warning"))
    return {(suite.get("name"), case.get("classname"), case.get("name")) for suite in root for case in suite}


def test_junit_names_of_a_windowed_run_are_those_of_the_whole_run(whole, universe, times):
    w = windows.of(windows.parse(times[len(times) // 3]), windows.parse(times[2 * len(times) // 3]))
    part = pipeline.run(universe, window=w).document
    small, big = junit_names(part), junit_names(whole)
    assert len(small) > 20 and len(small) < len(big)
    assert small <= big, sorted(small - big)[:5]
    # a windowed run over a part of the inputs too, in another order
    part = pipeline.run(list(reversed(universe[: len(universe) // 2])), window=w).document
    assert junit_names(part) <= big


# --- reconnects of one stream with one Last-Event-ID; sessions without an id ----------------------------------


def test_two_reconnects_with_the_same_last_event_id_are_two_names(capture, analyze, tmp_path):
    """The python client resends the cursor of a resume that delivered nothing: two reconnects of one stream with
    one Last-Event-ID, each its own boundary with its own name, the same in every run, alone or beside another
    capture whose reconnects come between them in time."""
    cap = capture.initialize().stream(ids=[1, 2, 3]).stream(last="3", ids=[]).stream(last="3", ids=[4, 5])
    doc = analyze(cap)
    bs = [b for b in doc["boundaries"] if b["last_event_id"] == "3"]
    assert len(bs) == 2 and bs[0]["boundary_id"] != bs[1]["boundary_id"]
    path = cap.write(tmp_path / "again.jsonl")
    for paths in ([str(path)], [str(SYN / "gap.jsonl"), str(path)], [str(path), str(SYN / "session_invalid.jsonl"), str(SYN / "gap.har")]):
        both = pipeline.run(paths).document
        assert len(both["boundaries"]) > len(bs) or len(paths) == 1
        mine = [b["boundary_id"] for b in both["boundaries"] if b["request"]["source"] == str(path)]
        assert mine == [b["boundary_id"] for b in doc["boundaries"]], paths
    # the same for a GET that reopens the stream without Last-Event-ID, twice
    cap = type(capture)().initialize().stream(ids=[1, 2]).stream(ids=[]).stream(ids=[3])
    doc = analyze(cap, "reopen.jsonl")
    assert [b["last_event_id"] for b in doc["boundaries"]] == [None, None]
    assert len({b["boundary_id"] for b in doc["boundaries"]}) == 2


def test_traffic_without_a_session_is_S0_in_every_run(whole):
    stateless = [s for s in whole["sessions"] if not s["session_id"]]
    assert stateless and {s["session"] for s in stateless} == {names.NO_SESSION}
    one = pipeline.run([str(SYN / "stateless_reissue.jsonl")]).document
    assert {s["session"] for s in one["sessions"]} == {"S0"} and {f["session"] for f in one["findings"]} == {"S0"}


# --- collisions: forced with one-character names ---------------------------------------------------------------


def test_shortest_makes_both_longer_whatever_the_order():
    ds = [names.digest(t) for t in ("a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n")]
    for width in (1, 2):
        got = names.shortest(ds, width)
        assert got == names.shortest(list(reversed(ds)), width)
        assert len(set(got.values())) == len(ds) and all(d.startswith(p) and len(p) >= width for d, p in got.items())
        heads = [d[:width] for d in ds]
        for d, p in got.items():  # longer only where another digest shares the head
            assert (len(p) > width) == (heads.count(d[:width]) > 1)


def test_twin_reconnects_are_told_apart_by_time_then_place():
    ident = names.digest("sid\x1fGET\x1f5\x1f\x1f0")
    got = names.reconnect_names(["Sabc"] * 3, [ident] * 3, ["t1", "t2", "t2"], ["a", "b", "c"])
    assert len(set(got)) == 3 and all(n.startswith("Sabc.r") for n in got)
    back = names.reconnect_names(["Sabc"] * 3, [ident] * 3, ["t2", "t2", "t1"], ["c", "b", "a"])
    assert back == got[::-1]


@pytest.fixture
def one_character_names(monkeypatch):
    """Names one base32 character long: 32 of them, so the samples' sessions and reconnects collide."""
    monkeypatch.setattr(names, "SESSION_CHARS", 1)
    monkeypatch.setattr(names, "RECONNECT_CHARS", 1)


def test_a_forced_collision_is_resolved_alike_in_every_engine(one_character_names, samples_store):
    tables, rows = store_mod.load(samples_store)
    single = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    got = named(single)  # (one name per Mcp-Session-Id, distinct ids distinct names: the collisions were resolved)
    sids = {s["session_id"] for s in single["sessions"] if s["session_id"]}
    assert len(sids) > 32  # more sessions than one-character names
    lengths = {s["session"]: len(s["session"]) - 1 for s in single["sessions"] if s["session_id"]}
    assert min(lengths.values()) >= 1 and max(lengths.values()) > 1  # made longer where they collided
    for s in single["sessions"]:
        if s["session_id"]:
            assert names.digest(s["session_id"]).startswith(s["session"][1:])
    assert any(len(b["boundary_id"].rsplit(".r", 1)[1]) > 1 for b in single["boundaries"])
    assert len(got["reconnects"]) > 10
    # partitions name what they hold alone; merged, the whole's collisions decide, as in the single pass
    for n in (2, 5):
        assert assert_same_names(single, partitions.analyze(samples_store, n).document) > 500
    same = pipeline.run([i["path"] for i in single["inputs"]][::-1]).document
    assert {s["session_id"]: s["session"] for s in same["sessions"]} == {s["session_id"]: s["session"] for s in single["sessions"]}


# --- the digests, made faster, are the same -------------------------------------------------------------------------

_TEXTS = ["", "a", "sid\x1fGET\x1f5\x1f\x1f0", "é字😀", "\ud800 lone surrogate", "x" * 1000, "\x00\x1f"]


def test_digest_is_the_base32_of_the_sha256_and_head_its_start():
    import base64
    import hashlib

    rnd = random.Random(5)
    texts = _TEXTS + ["".join(rnd.choice("ab\x1f\x00é字😀xyz0123") for _ in range(rnd.randint(0, 60))) for _ in range(2000)]
    for t in texts:
        want = base64.b32encode(hashlib.sha256(t.encode("utf-8", "surrogatepass")).digest()).decode().rstrip("=").lower()
        assert names.digest(t) == want and names.head(t) == want[:names.HEAD_CHARS], t


def test_names_when_two_identities_share_a_head(monkeypatch):
    """The names are made from the digests' heads (60 bits); where two different identities of a session (two session
    ids) share one, the whole digests are read, and the names are those of the whole digests."""
    idents = [names.digest(f"sid\x1fGET\x1f{i}\x1f\x1f0") for i in range(40)]
    sessions = ["Sa"] * 20 + ["Sb"] * 20
    want = names.reconnect_names(sessions, idents, [None] * 40, [str(i) for i in range(40)], width=1)
    sids = [f"session-{i}" for i in range(40)]
    want_s = names.session_names(sids, width=1)
    # every head the same: only the whole digests tell them apart
    monkeypatch.setattr(names, "head", lambda text: "aaaaaaaaaaaa")
    assert names.reconnect_names(sessions, idents, [None] * 40, [str(i) for i in range(40)], width=1) == want
    assert names.session_names(sids, width=1) == want_s
    # and a width past the heads reads the whole digests
    assert names.session_names(sids, width=20) == {s: "S" + names.digest(s)[:20] for s in sids}
