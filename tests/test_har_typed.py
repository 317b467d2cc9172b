"""The msgspec HAR reader (ingest.har_typed.entries) against the json one (ingest.har.stream_entries).

A well-formed HAR is decoded entry by entry by msgspec into Structs of the fields the reader reads; a document
msgspec does not read as Python's json would is read again by the json reader.  Both must give the same tables,
anomalies and notes on every document: the sample HARs, generated ones, and damaged copies (cut, a wrong type in
a field, a lone surrogate, base64 bodies, missing keys, invalid UTF-8, NaN), in any read size."""
from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import InputError
from analyzer.ingest import har as ingest_har, har_typed
from analyzer.ingest.reading import Reading
from test_fuzz import fuzz, mutated_har

ROOT = Path(__file__).resolve().parent.parent
HARS = sorted((ROOT / "sample_logs").rglob("*.har"))


def outcome(raw: bytes, typed: bool = True, chunk: int | None = None) -> tuple:
    """The tables of ``raw`` read by the msgspec reader (``typed``) or by the json reader alone."""
    with pytest.MonkeyPatch.context() as m:
        if not typed:
            m.setattr(har_typed, "entries", _refuse)
        if chunk is not None:
            m.setattr(ingest_har, "STREAM_CHUNK", chunk)
        try:
            ing = ingest_har.read("x.har", io.BytesIO(raw), Reading())
        except InputError as exc:
            return ("refused", str(exc))
    return (ing.records, ing.rejected, ing.exchanges.to_pylist(), ing.events.to_pylist(), ing.messages.to_pylist(),
            ing.anomalies.to_pylist(), ing.notes)


def _refuse(*args, **kwargs):
    raise har_typed.Refused
    yield  # (a generator, as entries is)


def typed_takes(raw: bytes, chunk: int = 1 << 20) -> bool:
    """Whether the msgspec reader reads ``raw`` to the end without handing it to the json reader."""
    try:
        for _ in har_typed.entries(io.BytesIO(raw), 1 << 30, chunk):
            pass
    except har_typed.Refused:
        return False
    return True


@pytest.mark.parametrize("path", HARS, ids=lambda p: p.name)
def test_every_sample_har_is_read_by_msgspec_to_the_json_readers_tables(path):
    raw = path.read_bytes()
    assert typed_takes(raw)
    assert typed_takes(raw, chunk=7)  # entries, strings and escapes cut at every place by the reads
    want = outcome(raw, typed=False)
    assert outcome(raw) == want
    assert outcome(raw, chunk=7) == want


def _entry(i: int, **over) -> dict:
    e = {"startedDateTime": "2026-01-01T00:00:0%dZ" % (i % 10), "time": 12.5, "connection": str(i % 2),
         "request": {"method": "POST", "url": "http://h/mcp", "headers": [{"name": "Content-Type", "value": "application/json"}],
                     "postData": {"mimeType": "application/json", "text": json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call"})},
                     "cookies": [], "queryString": [], "headersSize": -1, "bodySize": 60},
         "response": {"status": 200, "headers": [{"name": "Content-Type", "value": "text/event-stream"}],
                      "content": {"mimeType": "text/event-stream", "size": 40,
                                  "text": f'id: {i}\ndata: {{"jsonrpc":"2.0","id":{i},"result":{{}}}}\n\n'},
                      "cookies": [], "redirectURL": "", "_transferSize": 99},
         "cache": {}, "timings": {"send": 0, "wait": 1.5, "receive": 11}}
    for path, value in over.items():
        parent = e
        keys = path.split(".")
        for k in keys[:-1]:
            parent = parent[k]
        if value is _MISSING:
            parent.pop(keys[-1], None)
        else:
            parent[keys[-1]] = value
    return e


_MISSING = object()
# values msgspec and json disagree on, or that the reader's rules judge: each in every field the reader reads
_ODD = [None, 0, -1, 2**64, -(2**70), 1e308, float("inf"), float("nan"), "\ud800", "\udfff x", "x\ud83d", "😀", "é\u2028",
        "200", True, 1.5, [], {}, [{"name": "content-type"}], [{"name": 1}], [{"name": "x", "value": {"a": [1]}}],
        [{"name": "x"}], {"text": "x"}, "base64", "text/event-stream", _MISSING]
_FIELDS = ["startedDateTime", "time", "connection", "_error", "_failureText", "_wasAborted", "request", "response",
           "request.method", "request.url", "request.headers", "request.postData", "request.postData.text",
           "response.status", "response.headers", "response.content", "response.content.text", "response.content.encoding",
           "response.content.mimeType", "response.content.size", "response._error", "response._failureText"]


def _document(entries: list, kw: dict) -> bytes:
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "t"}, "entries": entries}}, allow_nan=True, **kw).encode(
        "utf-8", "surrogatepass")


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_wrong_value_in_any_field_gives_the_json_readers_tables(data):
    draw = data.draw
    entries = [_entry(i) for i in range(draw(st.integers(1, 4)))]
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(entries) - 1))
        field, value = draw(st.sampled_from(_FIELDS)), draw(st.sampled_from(_ODD))
        try:
            entries[at] = _entry(at, **{field: value})
        except (KeyError, TypeError):  # (a parent that an earlier draw replaced)
            pass
    raw = _document(entries, draw(st.sampled_from([{}, {"indent": 1}, {"ensure_ascii": False}, {"separators": (",", ":")}])))
    assert outcome(raw) == outcome(raw, typed=False)
    assert outcome(raw, chunk=draw(st.integers(1, 64))) == outcome(raw, typed=False)


@fuzz(60)
@given(mutated_har(), st.integers(1, 64))
def test_the_fuzzers_mutated_sample_hars_read_alike(case, chunk):
    """tests/test_fuzz.py's mutations of the sample HARs (values of every type in every field, keys removed,
    lone surrogates, NaN and Infinity, huge numbers, deep nesting): the same tables by both readers."""
    raw, _ = case
    want = outcome(raw, typed=False)
    assert outcome(raw) == want
    assert outcome(raw, chunk=chunk) == want


def test_values_msgspec_refuses_in_one_entry_cost_only_that_entry_its_json_reading():
    """An entry msgspec refuses but json reads (a number past a float, invalid UTF-8 in a field read) is decoded
    by json alone: the document stays on the msgspec reader, and the tables are the json reader's."""
    plain = _document([_entry(0), _entry(1)], {})
    for raw in (plain.replace(b'"time": 12.5', b'"time": 1e400', 1),
                plain.replace(b'"url": "http://h/mcp"', b'"url": "http://h/\xff\xfe"', 1),
                plain.replace(b'"request": {', b'"request": 5, "request": {', 1),  # a duplicate key: the last wins
                plain.replace(b'"timings": {', b'"_x": 123456789012345678901234567890, "timings": {', 1)):
        assert raw != plain
        assert typed_takes(raw)
        assert outcome(raw) == outcome(raw, typed=False)
    got = outcome(plain.replace(b'"url": "http://h/mcp"', b'"url": "http://h/\xff\xfe"', 1))
    assert got[2][0]["url"] == "http://h/\ufffd\ufffd"


@pytest.mark.parametrize("damage", ["nan", "surrogate", "surrogate_end", "control", "bom", "garbage", "trailing_comma",
                                    "deep", "page_entries", "later_entries", "cut_inside", "cut_between", "cut_after"])
def test_documents_msgspec_cannot_follow_go_to_the_json_reader(damage):
    plain = _document([_entry(i) for i in range(3)], {"indent": 2})
    last_entry_end = plain.rfind(b"}", 0, plain.rfind(b"]")) + 1
    log_end = plain.rfind(b"}", 0, plain.rfind(b"}"))
    second = plain.find(b"{", plain.find(b'"startedDateTime"', plain.find(b'"startedDateTime"') + 1) - 12)
    raw = {
        "nan": plain.replace(b'"cache": {}', b'"cache": NaN', 1),
        "surrogate": plain.replace(b'"url": "http://h/mcp"', b'"url": "\\ud800 x"', 1),
        "surrogate_end": plain.replace(b'"url": "http://h/mcp"', b'"url": "x\\ud800"', 1),
        "control": plain.replace(b'"url": "http://h/mcp"', b'"url": "\x01"', 1),
        "bom": b"\xef\xbb\xbf" + plain,
        "garbage": plain + b" x",
        "trailing_comma": plain[:last_entry_end] + b"," + plain[last_entry_end:],
        "deep": plain.replace(b'"cache": {}', b'"cache": ' + b"[" * 5000 + b"]" * 5000, 1),
        "page_entries": plain.replace(b'"log": {', b'"log": {"pages": [{"entries": []}],', 1),
        "later_entries": plain[:log_end] + b', "entries": []' + plain[log_end:],  # a later duplicate key wins
        "cut_inside": plain[: plain.rfind(b'"startedDateTime"')],
        "cut_between": plain[:second],
        "cut_after": plain[: plain.rfind(b"]") + 1],
    }[damage]
    assert not typed_takes(raw)
    assert outcome(raw) == outcome(raw, typed=False)
    assert outcome(raw, chunk=5) == outcome(raw, typed=False)


def test_a_lone_surrogate_at_a_strings_end_is_handed_over_without_reading_on():
    """msgspec reports a high surrogate escape as input cut short when fewer than six bytes follow it (it looks for
    the low one): the reader reads on only as far as that, and hands the document over where msgspec refuses it,
    not after reading the rest of the file."""
    entries = [_entry(i) for i in range(200)]
    entries[1]["request"]["url"] = "x\ud800"
    raw = _document(entries, {})
    at = raw.find(b"\\ud800") + 6
    for chunk in (4096, at, at + 1, at + 3, at + 6):  # the read buffer ends after the escape, and 1-5 bytes later
        stream = io.BytesIO(raw)
        with pytest.raises(har_typed.Refused):
            for _ in har_typed.entries(stream, 1 << 30, chunk):
                pass
        assert stream.tell() < len(raw) // 4


def test_base64_and_encoded_bodies_read_alike():
    sse = "id: 1\ndata: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"x": "é"}}, ensure_ascii=False) + "\n\n"
    entries = [
        _entry(0, **{"response.content.text": base64.b64encode(sse.encode()).decode(), "response.content.encoding": "base64"}),
        _entry(1, **{"response.content.text": "!!!=", "response.content.encoding": "base64"}),
        _entry(2, **{"response.content.text": "not base64 at all ***", "response.content.encoding": "base64"}),
    ]
    raw = _document(entries, {})
    assert typed_takes(raw)
    got = outcome(raw)
    assert got == outcome(raw, typed=False)
    assert any(row["data"] and "é" in row["data"] for row in got[3])


def test_the_entry_end_is_where_msgspec_says_the_trailing_characters_start():
    """The reader finds an entry's end in msgspec's "trailing characters (byte N)" (N counted from 1, blanks
    skipped): pinned here, for a msgspec that would word or count it otherwise."""
    for text, end in [(b'{"a":1},', 7), (b'{"a":1}  \n ,{', 11), (b'{"a":"}"}]', 9), (b'{"a":[{}]}\r\n]', 12)]:
        assert har_typed._entry_end(text, 0) == end, text
        assert har_typed._entry_end(b"xx" + text, 2) == end + 2
    assert har_typed._entry_end(b'{"a":1', 0) is None  # cut: read on
    assert har_typed._entry_end(b'{"a":1}  ', 0) is None  # what follows is not read yet
    with pytest.raises(msgspec.DecodeError, match=r"^JSON is malformed: trailing characters \(byte 8\)$"):
        msgspec.json.decode(b'{"a":1},', type=msgspec.Raw)


def test_fields_not_read_are_never_python_objects():
    """The Structs name only the fields the reader reads: the timings, cookies and sizes are skipped in C."""
    got = msgspec.json.decode(json.dumps(_entry(0)).encode(), type=har_typed.Entry)
    assert set(msgspec.structs.asdict(got)) == {"request", "response", "startedDateTime", "connection", "time", "error",
                                                "failure", "aborted"}
    assert set(msgspec.structs.asdict(got.request)) == {"method", "url", "headers", "postData"}
    # a json reading converts to the same Struct
    assert har_typed.typed(json.loads(json.dumps(_entry(0)))) == got


def test_a_file_cut_short_goes_to_the_json_reader_at_once(tmp_path, monkeypatch):
    """A HAR file that does not end in ``}`` (an exporter killed) is read by the json reader first, not read by
    msgspec up to the cut and then again; a whole one is msgspec's.  (gzip inputs have no file end to look at.)"""
    raw = _document([_entry(i) for i in range(6)], {"indent": 2})
    cut, whole = tmp_path / "cut.har", tmp_path / "whole.har"
    cut.write_bytes(raw[: raw.rfind(b'"startedDateTime"')])
    whole.write_bytes(raw + b"\n")
    want = {p: outcome(p.read_bytes(), typed=False) for p in (cut, whole)}
    tried = []
    real = har_typed.entries

    def spy(*args, **kwargs):
        tried.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(har_typed, "entries", spy)
    for path, typed in ((cut, False), (whole, True)):
        tried.clear()
        with open(path, "rb") as f:
            ing = ingest_har.read("x.har", f, Reading())
        assert bool(tried) is typed
        assert (ing.records, ing.rejected, ing.exchanges.to_pylist(), ing.events.to_pylist(), ing.messages.to_pylist(),
                ing.anomalies.to_pylist(), ing.notes) == want[path]
