"""The streaming HAR reader (ingest_har.stream_entries) against the whole-document one (ingest_har.load).

A well-formed HAR is read entry by entry; every other document is read whole.  Both must give the same
tables: the streaming path is only a way to hold less memory."""
from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.ingest import har as ingest_har
from analyzer.errors import InputError
from analyzer.ingest.reading import Reading

ROOT = Path(__file__).resolve().parent.parent
HARS = sorted((ROOT / "sample_logs").rglob("*.har"))


def whole(data: bytes):
    entries, broken = ingest_har.load("x.har", io.BytesIO(data))
    return ingest_har._read("x.har", iter(entries), {"broken": broken}, Reading())


def tables(ing) -> tuple:
    return (ing.records, ing.rejected, ing.exchanges.to_pylist(), ing.events.to_pylist(), ing.messages.to_pylist(),
            ing.anomalies.to_pylist(), ing.notes)


@pytest.fixture
def tiny_reads(monkeypatch):
    """Reads of a few bytes, so entries, strings and escapes are cut at every place."""
    monkeypatch.setattr(ingest_har, "STREAM_CHUNK", 5)


@pytest.mark.parametrize("path", HARS, ids=lambda p: p.name)
def test_every_sample_har_streams_to_the_same_tables(path, tiny_reads):
    data = path.read_bytes()
    assert list(ingest_har.stream_entries("x.har", io.BytesIO(data))) == json.loads(data)["log"]["entries"]
    assert tables(ingest_har.read("x.har", io.BytesIO(data))) == tables(whole(data))


_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=12) | st.sampled_from(
    ['"entries": [', '\\"entries\\": [', "]", "}", "\u2028", "é", "😀"])
_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=12)


def _entry(draw, i: int) -> dict:
    return {
        "startedDateTime": draw(st.sampled_from(["2026-01-01T00:00:0%dZ" % (i % 10), "2026-01-01T00:00:00Z", None, "later"])),
        "request": {"method": "POST", "url": "http://h/mcp", "headers": [{"name": "X", "value": draw(_text)}],
                    "postData": {"text": json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"})}},
        "response": {"status": 200, "headers": [{"name": "Content-Type", "value": "text/event-stream"}],
                     "content": {"mimeType": "text/event-stream", "text": f"id: {i}\ndata: {draw(_text)!s}\n\n"}},
        "extra": draw(_json),
    }


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_well_formed_documents_stream_to_what_json_loads_gives(data):
    draw = data.draw
    entries = [_entry(draw, i) for i in range(draw(st.integers(0, 4)))]
    log = {"version": "1.2", "creator": {"name": draw(_text), "note": draw(_json)}}
    if draw(st.booleans()):
        log["pages"] = [{"title": '"entries": [ inside a string'}]
    log["entries"] = entries
    if draw(st.booleans()):
        log["after"] = draw(_json)
    doc = {"log": log}
    kw = draw(st.sampled_from([{}, {"indent": 1}, {"separators": (",", ":")}, {"ensure_ascii": False}]))
    raw = json.dumps(doc, **kw).encode()
    got = list(ingest_har.stream_entries("x.har", _Chunky(raw, draw(st.integers(1, 9)))))
    assert got == entries
    assert tables(ingest_har.read("x.har", io.BytesIO(raw))) == tables(whole(raw))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_broken_documents_are_read_whole_with_the_same_result(data):
    draw = data.draw
    entries = [_entry(draw, i) for i in range(draw(st.integers(1, 3)))]
    kw = draw(st.sampled_from([{}, {"indent": 1}, {"separators": (",", ":")}]))
    raw = json.dumps({"log": {"version": "1.2", "entries": entries, "pages": []}}, **kw).encode()
    how = draw(st.sampled_from(["cut", "cut", "garbage", "bad_utf8", "nan", "deep", "no_entries", "bad_entry", "trailing_comma",
                                "bom", "cut_after"]))
    if how == "cut":
        raw = raw[: draw(st.integers(1, len(raw) - 1))]
    elif how == "bad_entry":  # a broken entry in the middle of the array, whole ones after it
        raw = raw.replace(b'"startedDateTime"', b'"startedDateTime" x', 1) if len(entries) == 1 else raw.replace(
            b'"request"', b'"request" -', draw(st.integers(1, len(entries))))
    elif how == "trailing_comma":
        raw = raw.replace(b"]", b",]", 1) if b'"pages": []' not in raw[raw.find(b"]") - 12 :] else raw
        raw = raw.replace(b'}\n  ]', b'},\n  ]', 1).replace(b'}], "pages"', b'},], "pages"', 1).replace(b'}],"pages"', b'},],"pages"', 1)
    elif how == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif how == "cut_after":  # the entries whole, the document cut after them
        raw = raw[: raw.rfind(b"pages") + draw(st.integers(0, 5))]
    elif how == "garbage":
        raw += b" x"
    elif how == "bad_utf8":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\xff" + raw[at:]
    elif how == "nan":
        raw = raw.replace(b'"extra": ', b'"extra": NaN, "was": ', 1)
    elif how == "deep":
        raw = raw.replace(b'"extra": ', b'"extra": ' + b"[" * 100_000 + b"]" * 100_000 + b', "was": ', 1)
    else:
        raw = json.dumps({"log": {"pages": entries}}).encode()
    assert outcome(lambda: ingest_har.read("x.har", io.BytesIO(raw))) == outcome(lambda: whole(raw))
    with pytest.MonkeyPatch.context() as m:  # reads of a few bytes: the break anywhere in the read buffer
        m.setattr(ingest_har, "STREAM_CHUNK", draw(st.integers(1, 9)))
        assert outcome(lambda: ingest_har.read("x.har", io.BytesIO(raw))) == outcome(lambda: whole(raw))


def outcome(run) -> tuple:
    try:
        return tables(run())
    except InputError as exc:
        return ("refused", str(exc))


def test_no_entries_list_is_refused_as_before():
    with pytest.raises(InputError, match="log.entries"):
        ingest_har.read("x.har", io.BytesIO(b'{"log": {"pages": []}}'))
    with pytest.raises(InputError, match="log.entries"):  # an `entries` key somewhere else is not the HAR's
        ingest_har.read("x.har", io.BytesIO(b'{"log": {"pages": [{"entries": []}]}}'))
    # a page's `entries` before the real ones: the real ones are read, not the page's
    page = {"startedDateTime": "2026-01-01T00:00:00Z", "request": {"method": "GET", "url": "http://h/page", "headers": []},
            "response": {"status": 204, "headers": []}}
    for real in ([], [dict(page, request=dict(page["request"], url="http://h/real"))]):
        raw = json.dumps({"log": {"pages": [{"entries": [page]}], "entries": real}}).encode()
        got = ingest_har.read("x.har", io.BytesIO(raw))
        assert got.exchanges.column("url").to_pylist() == [e["request"]["url"] for e in real]
    raw = json.dumps({"log": {"entries": [page]}}).encode()[:-2] + b', "entries": []}}'  # a later duplicate key wins
    assert ingest_har.read("x.har", io.BytesIO(raw)).exchanges.num_rows == 0


class _Chunky(io.RawIOBase):
    """Short reads of ``size`` bytes."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size, self.at = data, size, 0

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        out = self.data[self.at : self.at + min(self.size, n if n >= 0 else self.size)]
        self.at += len(out)
        return out


@pytest.mark.parametrize("path", [p for p in HARS if b"text/event-stream" in p.read_bytes()], ids=lambda p: p.name)
def test_event_bodies_give_the_same_tables_in_any_batching(path, monkeypatch):
    """The entries' event streams are parsed column-wise in batches (ingest_har._EventBodies; the parser itself is
    checked against the reference in tests/test_sse_columns.py): one body per batch gives the same tables."""
    data = path.read_bytes()
    whole_batch = tables(ingest_har.read("x.har", io.BytesIO(data)))
    monkeypatch.setattr(ingest_har._EventBodies, "PARSE_BYTES", 1)  # (tests/test_har_batches.py: parsed apart, logged together)
    monkeypatch.setattr(ingest_har._EventBodies, "LOG_BYTES", 1)
    assert tables(ingest_har.read("x.har", io.BytesIO(data))) == whole_batch


def test_the_sample_hars_hold_events_to_batch():
    assert sum(ingest_har.read("x.har", io.BytesIO(p.read_bytes())).events.num_rows for p in HARS) > 100


def test_a_document_cut_short_is_streamed_not_read_whole(monkeypatch):
    """A HAR cut short (an exporter killed, a full disk) is read entry by entry up to the break: the
    whole-document reader (ten times the file in memory) is never called, and the result is its."""
    page = {"startedDateTime": "2026-01-01T00:00:0%dZ", "request": {"method": "GET", "url": "http://h/%d", "headers": []},
            "response": {"status": 204, "headers": []}}
    entries = [json.loads(json.dumps(page) % (i, i)) for i in range(5)]
    for kw in ({}, {"indent": 2}):
        raw = json.dumps({"log": {"version": "1.2", "entries": entries}}, **kw).encode()
        second = raw.rfind(b"{", 0, raw.find(b"startedDateTime", raw.find(b"startedDateTime") + 1))  # where entry 2 starts
        # inside an entry; after an entry's comma; after the last entry; after the array
        for cut in (raw.rfind(b"startedDateTime"), second, raw.rfind(b"}", 0, raw.rfind(b"]")) + 1, len(raw) - 2):
            want = tables(whole(raw[:cut]))
            with monkeypatch.context() as m:
                m.setattr(ingest_har, "load", lambda *a: pytest.fail("read whole"))
                m.setattr(ingest_har, "STREAM_CHUNK", 7)
                got = tables(ingest_har.read("x.har", io.BytesIO(raw[:cut])))
            assert got == want
            assert any(note.startswith("The HAR document is not complete (JSON error at line") for note in got[-1]), got[-1]
