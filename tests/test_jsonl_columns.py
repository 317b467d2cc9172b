"""The column-wise JSONL path gives what the per-line reader gives: same tables row for row, same anomalies
at the same locations, same counts (``ingest_jsonl.read(columns=False)`` is the reference)."""
from __future__ import annotations

import io
import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.errors import NotACapture
from analyzer.ingest import jsonl as ingest_jsonl, jsonl_columns
from analyzer.ingest.reading import Reading
from test_fuzz import jsonl_line, rows

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "sample_logs").glob("*.jsonl"))


def _read(data: bytes, columns: bool, reading: Reading = Reading()):
    """The reader's result, or the NotACapture it raised (a log of JSON objects none of which is a proxy record)."""
    try:
        return ingest_jsonl.read("x.jsonl", io.BytesIO(data), reading, columns=columns)
    except NotACapture as exc:
        return exc


def both(data: bytes, batch_lines: int | None = None, reading: Reading = Reading()):
    old = ingest_jsonl.BATCH_LINES
    if batch_lines:
        ingest_jsonl.BATCH_LINES = batch_lines
    try:
        fast = _read(data, True, reading)
    finally:
        ingest_jsonl.BATCH_LINES = old
    slow = _read(data, False, reading)
    return fast, slow


def assert_same(data: bytes, batch_lines: int | None = None, reading: Reading = Reading()) -> None:
    fast, slow = both(data, batch_lines, reading)
    if isinstance(fast, NotACapture) or isinstance(slow, NotACapture):
        assert str(fast) == str(slow)
        return
    assert (fast.format, fast.records, fast.rejected, fast.notes) == (slow.format, slow.records, slow.rejected, slow.notes)
    for name in ("exchanges", "events", "messages", "anomalies"):
        a, b = getattr(fast, name), getattr(slow, name)
        assert a.schema == b.schema, name
        assert rows(a) == rows(b), name


# -- records: the recorder's own shape (the fast path) among everything the per-line reader must take -----

_CONNS = ["c1", "c2", "c3"]
_TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "x", "\x00", "a\x00b", "\ufffd", "é ☃ 𝄞", "\ud800", "a\udfffb", "\u2028", '{"jsonrpc":"2.0","method":"m"}',
                     '{"jsonrpc":"2.0","id":1,"result":{}}', "line\nbreak", "\\u0000", "\"q\"", "\x7f\x1f"]),
)
_TS = st.one_of(
    st.sampled_from(["2026-01-01T00:00:00Z", "2026-11-13T09:00:01.250000Z", "2026-11-13T09:00:01.1Z", "2026-11-13T09:00:01.1234Z",
                     "2026-02-30T00:00:00Z", "2026-02-29T00:00:00Z", "2024-02-29T23:59:59.999999Z", "2026-01-01T24:00:00Z",
                     "2026-01-01T23:59:60Z", "2026-13-01T00:00:00Z", "2026-00-10T00:00:00Z", "2026-04-31T00:00:00Z",
                     "1900-01-01T00:00:00Z", "2099-12-31T23:59:59Z", "2026-01-01T00:00:00+00:00", "2026-01-01 00:00:00Z",
                     "2026-01-01T00:00:00.1234567Z", "2026-01-01T00:00:00z", "garbage"]),
    st.datetimes(min_value=datetime(1000, 1, 1), max_value=datetime(2099, 12, 31)).map(lambda d: d.strftime("%Y-%m-%dT%H:%M:%S.%fZ")),
)


@st.composite
def plain_sse(draw) -> bytes:
    """An sse record as mitm_addon.py writes it (compact, fixed key order), sometimes with a quirk."""
    rec = {"kind": "sse", "ts": draw(_TS), "conn": draw(st.sampled_from(_CONNS + [1, "c\"1", "c\\1"]))}
    for key, values in (("id", st.one_of(st.none(), st.integers(0, 99).map(str), _TEXT)), ("event", st.one_of(st.none(), _TEXT)),
                        ("data", st.one_of(st.none(), _TEXT)), ("retry", st.one_of(st.none(), st.integers(0, 5000), st.sampled_from([-1, 2**63 - 1, 2**63, 10**18, 1.5, "1", True])))):
        if draw(st.integers(0, 5)):
            rec[key] = draw(values)
    if not draw(st.integers(0, 9)):
        rec[draw(st.sampled_from(["truncated", "dispatched", "extra"]))] = draw(st.sampled_from([True, False, None, 1]))
    if not draw(st.integers(0, 19)):  # another key order
        items = list(rec.items())
        draw(st.randoms(use_true_random=False)).shuffle(items)
        rec = dict(items)
    spaced = not draw(st.integers(0, 19))
    line = json.dumps(rec, ensure_ascii=draw(st.booleans()), separators=(", ", ": ") if spaced else (",", ":")).encode("utf-8", "surrogatepass")
    return line + draw(st.sampled_from([b"\n", b"\n", b"\r\n", b" \n"]))


@st.composite
def framing(draw) -> bytes:
    conn = draw(st.sampled_from(_CONNS))
    kind = draw(st.sampled_from(["request", "response", "close", "coded", "body"]))
    if kind == "request":
        rec = {"kind": "request", "ts": "2026-01-01T00:00:00Z", "conn": conn, "method": "GET", "url": "http://h/mcp",
               "headers": draw(st.sampled_from([{}, {"mcp-session-id": "s"}, {"mcp-session-id": "s", "last-event-id": "3"}]))}
    elif kind in ("response", "coded"):
        headers = {"content-type": "text/event-stream"}
        if kind == "coded":
            headers["content-encoding"] = "gzip"  # a coded stream: its first record decides whether it is noise
        rec = {"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": conn, "status": draw(st.sampled_from([200, 404])), "headers": headers}
        if kind == "coded" and draw(st.booleans()):
            rec["decoded"] = "gzip"
    elif kind == "body":
        rec = {"kind": "body", "ts": "2026-01-01T00:00:00Z", "conn": conn, "data": '{"jsonrpc":"2.0","id":1,"result":{}}'}
    else:
        rec = {"kind": "close", "ts": "2026-01-01T00:00:00Z", "conn": conn, "reason": "eof"}
    return json.dumps(rec, separators=(",", ":")).encode() + b"\n"


@st.composite
def clean_sse(draw) -> bytes:
    """The recorder's common case: what the column-wise path takes (unless no exchange is open on its conn)."""
    rec = {"kind": "sse", "ts": draw(st.sampled_from(["2026-01-01T00:00:00Z", "2026-11-13T09:00:01.250000Z"])), "conn": draw(st.sampled_from(_CONNS))}
    rec["id"] = draw(st.one_of(st.none(), st.integers(0, 9).map(str), st.text(st.characters(min_codepoint=32), max_size=4)))
    rec["event"] = draw(st.sampled_from([None, "message", "ping", "é"]))
    rec["data"] = draw(st.one_of(st.none(), st.sampled_from(["", "x", '{"jsonrpc":"2.0","method":"m","params":{"a":"\\u00e9"}}', "\ufffd",
                                                             '{"jsonrpc":"2.0","id":1,"result":{}}']), st.text(st.characters(min_codepoint=32), max_size=6)))
    rec["retry"] = draw(st.sampled_from([None, None, 0, 3000]))
    return json.dumps(rec, ensure_ascii=draw(st.booleans()), separators=(",", ":")).encode("utf-8", "surrogatepass") + b"\n"


LINE = st.one_of(clean_sse(), clean_sse(), clean_sse(), plain_sse(), plain_sse(), framing(), framing(), jsonl_line().map(lambda raw: raw + b"\n"))


def opening(conns) -> bytes:
    """Each conn's exchange opened first: most sse records then have one to attach to."""
    return b"".join(
        json.dumps({"kind": k, "ts": "2026-01-01T00:00:00Z", "conn": c, **f}, separators=(",", ":")).encode() + b"\n"
        for c in conns
        for k, f in (("request", {"method": "GET", "url": "/", "headers": {"last-event-id": "7"}}),
                     ("response", {"status": 200, "headers": {"content-type": "text/event-stream"}}))
    )


@settings(max_examples=600, deadline=None)
@given(st.lists(LINE, max_size=40), st.sampled_from([None, 1, 2, 3, 7]), st.booleans(), st.booleans(), st.lists(st.sampled_from(_CONNS), unique=True))
def test_same_result_as_the_per_line_reader(lines, batch_lines, bom, cut_last_eol, opened):
    data = opening(opened) + b"".join(lines)
    if bom:
        data = b"\xef\xbb\xbf" + data
    if cut_last_eol and data.endswith(b"\n"):
        data = data[:-1]
    assert_same(data, batch_lines)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(clean_sse(), clean_sse(), plain_sse(), framing()), max_size=30).map(b"".join), st.sampled_from([None, 2, 5]))
def test_mostly_valid_logs(data, batch_lines):
    assert_same(opening(_CONNS) + data, batch_lines)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_logs(path):
    data = path.read_bytes()
    assert_same(data)
    assert_same(data, 3)


def test_invalid_utf8_and_too_long_lines_in_a_batch():
    head = (b'{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c1","method":"GET","url":"/","headers":{}}\n'
            b'{"kind":"response","ts":"2026-01-01T00:00:00Z","conn":"c1","status":200,"headers":{"content-type":"text/event-stream"}}\n')
    sse = b'{"kind":"sse","ts":"2026-01-01T00:00:01Z","conn":"c1","id":"%d","data":"x"}\n'
    data = head + sse % 1 + b'{"kind":"sse","ts":"2026-01-01T00:00:01Z","conn":"c1","id":"2","data":"caf\xe9"}\n' + sse % 3 + b"y" * 5000 + b"\n" + sse % 4
    from analyzer import limits
    narrow = Reading(limits=limits.Limits(line_bytes=1000))
    assert_same(data, reading=narrow)
    fast, _ = both(data, reading=narrow)
    assert [r["location"] for r in rows(fast.events)] == ["line 3", "line 4", "line 5", "line 7"]
    assert [(a["code"], a["location"]) for a in rows(fast.anomalies) if a["code"].startswith("jsonl")] == [("jsonl_invalid_utf8", "line 4"), ("jsonl_line_too_long", "line 6")]


def _rec(kind: str, **fields) -> bytes:
    """A record as mitm_addon.py writes it (an sse record of this shape is a plain one)."""
    return json.dumps({"kind": kind, "ts": "2026-01-01T00:00:00Z", **fields}, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@pytest.mark.parametrize("batch_lines", [None, 2, 3, 5])
def test_a_coded_stream_and_orphans_among_plain_records(batch_lines):
    """The plain records are handed out after the slow lines of their batch are read (jsonl._hand_out):
    a stream made suspect in the middle of a batch (its first record, plain, decides that it is noise)
    and plain records with no exchange open (orphans, among other anomalies) come out as line by line."""
    sse = lambda conn, i, data="x": _rec(kind="sse", conn=conn, id=str(i), data=data)  # noqa: E731
    data = b"".join([
        _rec(kind="request", conn="c1", method="GET", url="/", headers={}),
        _rec(kind="response", conn="c1", status=200, headers={"content-type": "text/event-stream"}),
        sse("c1", 1), sse("c3", 1),  # c3: an orphan
        _rec(kind="request", conn="c2", method="GET", url="/", headers={}),
        sse("c1", 2),
        _rec(kind="response", conn="c2", status=200, headers={"content-type": "text/event-stream", "content-encoding": "gzip"}),
        sse("c1", 3), sse("c2", 1, "\x1f\ufffd\ufffd"), sse("c1", 4), b"not json\n", sse("c2", 2, "\ufffd"), sse("c3", 2),
        _rec(kind="close", conn="c2", reason="eof"), sse("c2", 3), sse("c1", 5),
        _rec(kind="close", conn="c1", reason="eof"), sse("c1", 6),
    ])
    assert len(jsonl_columns.sse_rows(data.splitlines())) == 11  # every sse record here is a plain one
    assert_same(data, batch_lines)
    fast, _ = both(data, batch_lines)
    assert [r["location"] for r in rows(fast.events)] == ["line 3", "line 6", "line 8", "line 10", "line 16"]
    assert [(a["code"], a["location"]) for a in rows(fast.anomalies) if a["code"].startswith("jsonl")] == [
        ("jsonl_orphan_record", "line 4"), ("jsonl_sse_not_decoded", "line 9"), ("jsonl_bad_line", "line 11"),
        ("jsonl_sse_not_decoded", "line 12"), ("jsonl_orphan_record", "line 13"), ("jsonl_orphan_record", "line 15"),
        ("jsonl_orphan_record", "line 18")]


def test_the_fast_path_takes_the_recorders_records():
    """The grammar covers what mitm_addon.py writes (else the column-wise path would be dead code)."""
    lines = [json.dumps({"kind": "sse", "ts": "2026-12-03T02:15:11.567869Z", "conn": "c1.1", "id": "2", "event": "message",
                         "data": '{"jsonrpc":"2.0","id":1,"result":{"é":"\\u0041"}}', "retry": None}, ensure_ascii=a, separators=(",", ":")).encode() + b"\n"
             for a in (True, False)]
    got = jsonl_columns.sse_rows(lines)
    assert got["pos"].to_list() == [0, 1]
    assert got["data"].to_list() == ['{"jsonrpc":"2.0","id":1,"result":{"é":"\\u0041"}}'] * 2
    assert got["ts"].to_list() == [datetime(2026, 12, 3, 2, 15, 11, 567869, tzinfo=timezone.utc)] * 2


@settings(max_examples=300, deadline=None)
@given(_TS)
def test_times_the_fast_path_takes_are_read_as_python_reads_them(ts):
    line = json.dumps({"kind": "sse", "ts": ts, "conn": "c", "data": "x"}, separators=(",", ":")).encode()
    got = jsonl_columns.sse_rows([line])
    if got.height:  # (a line not taken is read per line: nothing to compare)
        assert got["ts"][0] == ingest_jsonl.parse_ts(ts)


def _readline_lines(stream, limit: int):
    """The reference: one readline per line (the reader before block reads), newlines dropped."""
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        if len(raw) <= limit or raw.endswith(b"\n"):
            yield raw[:-1] if raw.endswith(b"\n") else raw
            continue
        size = len(raw)
        while True:
            rest = stream.readline(1 << 20)
            size += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield size


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([b"", b"a", b"abcdefgh", b"x" * 30, b"\r", b"{}"]), max_size=30).map(lambda xs: b"\n".join(xs)),
       st.booleans(), st.integers(1, 12), st.integers(1, 40))
def test_block_reads_split_lines_as_readline_does(data, eol, limit, block):
    """Lines split from blocks of any size are readline's lines, over-long lines counted the same (with their newline)."""
    import io

    data += b"\n" if eol else b""
    old = ingest_jsonl.READ_BLOCK
    ingest_jsonl.READ_BLOCK = block
    try:
        got = list(ingest_jsonl._lines(io.BytesIO(data), limit))
    finally:
        ingest_jsonl.READ_BLOCK = old
    assert got == list(_readline_lines(io.BytesIO(data), limit))


_DATA_RX = r',"data":(null|"(?:[^"\\]|\\.)*")'  # what jsonl_columns took data's text by before its splits


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.one_of(plain_sse(), clean_sse()), st.sampled_from([b"", b"\r"])), min_size=1, max_size=20))
def test_the_data_text_is_the_fields_text(lines):
    """``_data_text`` (two literal splits) gives the capture regex's text of ``data`` on every line the
    fast path takes: with and without retry, CRLF endings, escaped quotes and braces in strings."""
    import polars as pl

    lines = [line.rstrip(b"\r\n") + eol for line, eol in lines]  # a line as _lines_in_blocks gives it: CRLF keeps its CR
    raw = pl.DataFrame({"raw": jsonl_columns._text(lines)}).filter(pl.col("raw").str.contains(jsonl_columns.SSE_LINE))
    got = raw.select(split=jsonl_columns._data_text(pl.col("raw")), rx=pl.col("raw").str.extract(_DATA_RX, 1))
    assert got["split"].to_list() == got["rx"].to_list()
