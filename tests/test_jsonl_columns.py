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

from analyzer import compiled
from analyzer.errors import NotACapture
from analyzer.ingest import jsonl as ingest_jsonl, jsonl_columns, jsonl_typed
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


# -- the msgspec reader (analyzer/ingest/jsonl_typed.py) against the reader before it and the per-line reader ----

def _paths(data: bytes, decode=None, batch_lines: int | None = None, reading: Reading = Reading()) -> dict[str, int]:
    """How many records each path read (columns, typed, per_line, compiled) with ``decode`` (None: msgspec's)."""
    old = ingest_jsonl.BATCH_LINES
    if batch_lines:
        ingest_jsonl.BATCH_LINES = batch_lines
    try:
        return ingest_jsonl._read("x.jsonl", io.BytesIO(data), reading, True, decode)[1]
    finally:
        ingest_jsonl.BATCH_LINES = old


def _grammar_read(data: bytes, batch_lines: int | None = None, decode=ingest_jsonl._grammar):
    """The reader before msgspec: the recorder's compact sse lines by a regular expression, the rest per line
    (``decode``: or another way of decoding the batches)."""
    old = ingest_jsonl.BATCH_LINES
    if batch_lines:
        ingest_jsonl.BATCH_LINES = batch_lines
    try:
        return ingest_jsonl._read("x.jsonl", io.BytesIO(data), Reading(), True, decode)[0]
    except NotACapture as exc:
        return exc
    finally:
        ingest_jsonl.BATCH_LINES = old


def assert_same_three(data: bytes, batch_lines: int | None = None) -> None:
    """The msgspec reader gives the per-line reader's result (assert_same) and the result of the reader before it,
    and so does msgspec alone (every record typed: ``jsonl_typed.typed``, the other kinds through the state machine
    as dicts)."""
    assert_same(data, batch_lines)
    new, _ = both(data, batch_lines)
    for old in (_grammar_read(data, batch_lines), _grammar_read(data, batch_lines, jsonl_typed.typed)):
        if isinstance(new, NotACapture) or isinstance(old, NotACapture):
            assert str(new) == str(old)
            continue
        assert (new.records, new.rejected) == (old.records, old.rejected)
        for name in ("exchanges", "events", "messages", "anomalies"):
            assert rows(getattr(new, name)) == rows(getattr(old, name)), name


_SEPARATORS = st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : "), (",\t", ":\t"), (", ", ":")])


@st.composite
def any_writer(draw, kinds=("sse", "sse", "sse", "request", "response", "body", "close")) -> bytes:
    """A record as another writer could put it: any separators, key order, ASCII escapes or not, spaces around the
    object, CRLF; sometimes an extra field (the schema allows them), sometimes a value no reader should take."""
    kind = draw(st.sampled_from(kinds))
    conn = draw(st.sampled_from(_CONNS))
    rec: dict = {"kind": kind, "ts": draw(st.one_of(st.sampled_from(["2026-01-01T00:00:00Z", "2026-11-13T09:00:01.250000Z"]), _TS)), "conn": conn}
    if kind == "sse":
        rec.update(id=draw(st.one_of(st.none(), st.integers(0, 99).map(str), _TEXT)), event=draw(st.one_of(st.none(), _TEXT)),
                   data=draw(st.one_of(st.none(), _TEXT)), retry=draw(st.one_of(st.none(), st.integers(0, 5000))))
        for key in ("id", "event", "retry"):
            if not draw(st.integers(0, 3)):
                del rec[key]
    elif kind == "request":
        rec.update(method=draw(st.sampled_from(["GET", "POST", "get"])), url="http://h/mcp",
                   headers=draw(st.sampled_from([{}, {"Mcp-Session-Id": "s"}, {"last-event-id": ["3", "4"]}, None])),
                   body=draw(st.sampled_from([None, '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}'])))
    elif kind == "response":
        rec.update(status=draw(st.sampled_from([200, 202, 404])),
                   headers=draw(st.sampled_from([{"content-type": "text/event-stream"}, {"Content-Type": "application/json"}])))
        if draw(st.booleans()):
            rec["decoded"] = draw(st.sampled_from([None, "gzip"]))
    elif kind == "body":
        rec.update(data=draw(st.sampled_from(['{"jsonrpc":"2.0","id":1,"result":{}}', "not json", ""])))
    else:
        rec.update(reason=draw(st.sampled_from(["eof", "reset", "nope", None])), by=draw(st.sampled_from(["client", "server", None, 3])))
    if not draw(st.integers(0, 7)):
        rec[draw(st.sampled_from(["client_addr", "extra", "truncated", "dispatched"]))] = draw(st.sampled_from([True, False, "x", 1, None]))
    if not draw(st.integers(0, 9)):  # a value of the wrong type
        rec[draw(st.sampled_from(list(rec)))] = draw(st.sampled_from([5, 1.5, True, None, [], {}, "x", 2**64]))
    items = list(rec.items())
    if draw(st.booleans()):
        draw(st.randoms(use_true_random=False)).shuffle(items)
    line = json.dumps(dict(items), ensure_ascii=draw(st.booleans()), separators=draw(_SEPARATORS)).encode("utf-8", "surrogatepass")
    pad = draw(st.sampled_from([b"", b" ", b"\t"]))
    return pad + line + pad + draw(st.sampled_from([b"\n", b"\n", b"\r\n"]))


@st.composite
def damaged(draw) -> bytes:
    """A line damaged as a copy or a disk damages it: cut, a byte flipped, invalid UTF-8, two records on one line,
    blank, a byte order mark in the middle."""
    line = draw(any_writer()).rstrip(b"\r\n")
    how = draw(st.integers(0, 5))
    at = draw(st.integers(0, len(line)))
    if how == 0:
        line = line[:at]
    elif how == 1 and line:
        at = min(at, len(line) - 1)
        line = line[:at] + bytes([line[at] ^ draw(st.integers(1, 255))]) + line[at + 1:]
        line = line.replace(b"\n", b" ")
    elif how == 2:
        line = line[:at] + b"\xff\xfe" + line[at:]
    elif how == 3:
        line = line + draw(st.sampled_from([b"", b" "])) + draw(any_writer()).rstrip(b"\r\n")
    elif how == 4:
        line = draw(st.sampled_from([b"", b" ", b"\t\r"]))
    else:
        line = b"\xef\xbb\xbf" + line
    return line + b"\n"


@settings(max_examples=500, deadline=None)
@given(st.lists(st.one_of(any_writer(), any_writer(), any_writer(), damaged(), LINE), max_size=40), st.sampled_from([None, 1, 2, 3, 7]),
       st.lists(st.sampled_from(_CONNS), unique=True), st.booleans())
def test_any_writers_json_and_damage_read_as_the_per_line_reader_and_the_old_reader_read_them(lines, batch_lines, opened, bom):
    data = opening(opened) + b"".join(lines)
    assert_same_three(b"\xef\xbb\xbf" + data if bom else data, batch_lines)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_logs_the_three_readers(path):
    data = path.read_bytes()
    assert_same_three(data)
    assert _paths(data)["per_line"] <= _paths(data, ingest_jsonl._grammar)["per_line"]


def test_a_damaged_log_reads_as_line_by_line():
    """Every sample log in one, with a tenth of a percent... here one line in 50 damaged (seeded): every batch of
    msgspec's holds a line it refuses, and is decoded again line by line; the tables, every anomaly and its line
    number are the per-line reader's and the old reader's."""
    import random

    rng = random.Random(42)
    lines = b"".join(p.read_bytes() for p in SAMPLES).splitlines()
    for i in range(0, len(lines), 50):
        j = rng.randrange(i, min(i + 50, len(lines)))
        line = lines[j]
        lines[j] = rng.choice([line[: len(line) // 2], line + line, b"\xff" + line, b"", line.replace(b'"', b"'", 1)])
    data = b"\n".join(lines) + b"\n"
    assert_same_three(data)
    assert_same_three(data, 7)
    fast, _ = both(data)
    assert sum(1 for a in rows(fast.anomalies) if a["code"] in ("jsonl_bad_line", "jsonl_invalid_utf8")) > 10


def _spaced_log(n: int, eol: bytes = b"\n") -> bytes:
    """Two streams' requests and responses, then ``n`` sse records, as Python's default json.dumps writes them
    (", " and ": ", ASCII escapes), each with its keys in another order."""
    import random

    rng = random.Random(7)
    out = []
    for c in ("c1", "c2"):
        out.append({"kind": "request", "ts": "2026-01-01T00:00:00Z", "conn": c, "method": "GET", "url": "http://h/mcp",
                    "headers": {"Accept": "text/event-stream", "Mcp-Session-Id": "s"}, "body": None, "client_addr": "10.0.0.1:1"})
        out.append({"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": c, "status": 200, "headers": {"content-type": "text/event-stream"}})
    for i in range(n):
        rec = {"kind": "sse", "ts": f"2026-01-01T00:00:{i % 60:02d}.5Z", "conn": rng.choice(["c1", "c2"]), "id": str(i), "event": "message",
               "data": json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": f"é {i} /\\\" \u2028"}}),
               "retry": rng.choice([None, 3000])}
        items = list(rec.items())
        rng.shuffle(items)
        out.append(dict(items))
    return b"".join(json.dumps(r).encode() + eol for r in out)


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_spaced_json_takes_the_fast_paths(eol):
    """Python's default json.dumps (", " / ": ", ASCII escapes, any key order, CRLF): every sse record is read
    column-wise (msgspec alone types the other records too).  The reader before msgspec took none of them
    column-wise (its grammar is the recorder's compact bytes)."""
    data = _spaced_log(300, eol)
    # (the requests and responses are parsed per line, as the recorder's own are; in the compact reading, by the
    # compiled core where it is built)
    assert _paths(data) == {"columns": 300, "typed": 0, "per_line": 4, "compiled": 0}
    assert _paths(data, batch_lines=7) == {"columns": 300, "typed": 0, "per_line": 4, "compiled": 0}
    assert _paths(data, jsonl_typed.typed) == {"columns": 300, "typed": 4, "per_line": 0, "compiled": 0}
    assert _paths(data, ingest_jsonl._grammar) == {"columns": 0, "typed": 0, "per_line": 304, "compiled": 0}
    native = 4 if compiled.ENABLED else 0
    assert _paths(data, reading=Reading(compact=True)) == {"columns": 300, "typed": 0, "per_line": 4 - native, "compiled": native}
    assert_same_three(data)


def test_what_msgspec_reads_differently_from_json_goes_per_line():
    """msgspec decode_lines' and Struct decoding's differences from json.loads, each read as the per-line reader
    reads it: a blank line and two records on one line keep every line number; an extra field's invalid UTF-8
    (msgspec skips the field unread); an absent and a null ``decoded``; a nesting near the recursion limit."""
    req = _rec(kind="request", conn="c1", method="GET", url="/", headers={})
    resp = _rec(kind="response", conn="c1", status=200, headers={"content-type": "text/event-stream", "content-encoding": "gzip"})
    sse = _rec(kind="sse", conn="c1", id="1", data="x")
    deep = b'{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c2","method":"GET","x":' + b"[" * 990 + b"]" * 990 + b"}\n"
    data = b"".join([
        req, b"\n", b"   \n", resp.replace(b',"headers"', b',"decoded":null,"headers"'), sse, sse.rstrip(b"\n") + sse,
        b'{"kind":"close","ts":"2026-01-01T00:00:00Z","conn":"c1","reason":"eof","x":"caf\xe9"}\n', sse, req, resp, sse, deep,
    ])
    assert_same_three(data)
    assert_same_three(data, 2)
    fast, _ = both(data)
    codes = [(a["code"], a["location"]) for a in rows(fast.anomalies) if a["code"].startswith("jsonl")]
    assert ("jsonl_bad_line", "line 6") in codes and ("jsonl_invalid_utf8", "line 7") in codes and ("jsonl_orphan_record", "line 8") in codes
    assert [r["location"] for r in rows(fast.events)] == ["line 5", "line 11"]


# -- issue #42 (2026-12-06): the vetted sse lines of any spacing by read_ndjson; headers and JSON in C --------

@st.composite
def recorder_order_sse(draw) -> bytes:
    """An sse record in the recorder's key order, with any writer's white space (and sometimes a quirk)."""
    line = draw(plain_sse()).rstrip(b"\r\n")
    rec = json.loads(line)
    if list(rec)[:3] != ["kind", "ts", "conn"]:
        return line
    sep, colon = draw(st.sampled_from([(",", ":"), (", ", ": "), (" , ", " : "), (",\t", ":\t"), (", ", ":"), (",\r", ":")]))
    pad = draw(st.sampled_from(["", " ", "\t", " \r"]))
    text = json.dumps(rec, ensure_ascii=draw(st.booleans()), separators=(sep, colon))
    return (pad + text[0] + pad + text[1:-1] + pad + text[-1] + pad).encode("utf-8", "surrogatepass")


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(recorder_order_sse(), plain_sse().map(lambda b: b.rstrip(b"\n")), LINE.map(lambda b: b.rstrip(b"\n"))), max_size=30))
def test_sse_frame_reads_what_msgspec_reads(lines):
    """``sse_frame`` (the grammar of any spacing, then one ``read_ndjson`` of the lines it vets) gives, for every
    line it takes, the values msgspec's typed reading gives; the lines it leaves that hold ``"sse"`` are named for
    msgspec; and every line the compact grammar took before (``sse_rows``) it takes too, to the same values."""
    import polars as pl

    frame, rest = jsonl_columns.sse_frame(lines)
    typed, _ = jsonl_typed.typed(lines)
    assert frame.schema == typed.schema
    assert frame.to_dicts() == typed.filter(pl.col("pos").is_in(frame["pos"].implode())).to_dicts()
    taken = set(frame["pos"].to_list())
    assert not taken & set(rest)
    assert rest == [i for i, raw in enumerate(lines) if i not in taken and b'"sse"' in raw]
    old = jsonl_columns.sse_rows(lines)
    assert old.to_dicts() == frame.filter(pl.col("pos").is_in(old["pos"].implode())).to_dicts()


def test_spaced_records_in_the_recorders_order_go_to_read_ndjson():
    """bench/run.py --spaced's copy (Python's default json.dumps of the recorder's records): every sse line is taken
    by the grammar, none left to msgspec (the reader before #42 typed every one of them by msgspec Structs)."""
    lines = [json.dumps({"kind": "sse", "ts": "2026-11-13T09:00:01.250000Z", "conn": "1.1", "id": str(i), "event": "message",
                         "data": json.dumps({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": f"é {i} \u2028"}}),
                         "retry": [None, 3000][i % 2]}).encode() + eol for i, eol in enumerate([b"", b"\r"] * 50)]
    frame, rest = jsonl_columns.sse_frame(lines)
    assert frame["pos"].to_list() == list(range(100)) and rest == []
    assert frame["data"][3] == '{"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "\\u00e9 3 \\u2028"}}'
    assert frame["retry"].to_list()[:2] == [None, 3000]


def _headers_before(value):
    """``jsonl._headers`` before its fast path: add_header for every name and value."""
    from analyzer.decode.http1 import add_header

    if value is None:
        return {}
    if not isinstance(value, dict):
        return None
    out: dict[str, str] = {}
    for k, v in value.items():
        for one in (v if type(v) is list else (v,)):
            add_header(out, str(k).lower(), str(one))
    return out


_HEADER_NAMES = st.sampled_from(["Content-Type", "content-type", "CONTENT-TYPE", "Cookie", "cookie", "last-event-id", "Last-Event-ID",
                                 "x-a", "X-A", "mcp-session-id", "İ", "ß", "K"])


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.none(), st.lists(st.text(max_size=2)), st.dictionaries(
    _HEADER_NAMES | st.text(max_size=4),
    st.one_of(st.text(max_size=4), st.lists(st.text(max_size=3) | st.integers(), max_size=3), st.integers(), st.none(), st.booleans()),
    max_size=6)))
def test_headers_are_the_add_header_loops(value):
    got = ingest_jsonl._headers(value)
    want = _headers_before(value)
    assert got == want and (got is None or list(got.items()) == list(want.items()))


# -- issue #42 (2026-12-06): logs of exchange records (bench/SCALE.md, "the exchange lines column-wise": a reader that
# read them ahead was measured against these and not kept) ----------------------------------------------------------

_BODIES = st.sampled_from([None, "", " ", '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"progressToken":1}}}',
                           '{"jsonrpc":"2.0","method":"notifications/initialized"}', '[{"jsonrpc":"2.0","id":"a","method":"m"}]',
                           '{"jsonrpc":"2.0","id":2,"result":{"protocolVersion":"2025-06-18"}}', '{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"token=abc12345"}}',
                           "not json", "[1]", '{"a":1}', '{"jsonrpc":"2.0","id":1,"method":"m","params":{"password":"hunter2"}}'])
_HEADERS = st.sampled_from([None, {}, {"mcp-session-id": "s1", "last-event-id": "4", "user-agent": "ua"}, {"Mcp-Session-Id": "S", "MCP-Protocol-Version": "2025-06-18"},
                            {"mcp-session-id": ["a", "b"]}, {"authorization": "Bearer abcdefgh12345"}, {"Content-Type": "application/json"},
                            {"content-type": "text/event-stream"}, {"content-type": "application/vnd.x+json; charset=utf-8"}, {"content-type": "text/plain"},
                            {"content-type": "text/event-stream", "content-encoding": "gzip"}, {"x-mcp-replay-epoch": "e1", "content-type": "text/event-stream"},
                            {"a": 1}, ["x"]])


@st.composite
def exchange_record(draw) -> bytes:
    """A request, response, body or close record (now and then one no reader should take, or one with a rule of the
    per-line reader's: an unknown reason, a base64 body, a bad time), or an sse record, on one of a few conns."""
    kind = draw(st.sampled_from(["request", "request", "response", "response", "body", "close", "sse", "sse"]))
    conn = draw(st.sampled_from(_CONNS + ["c4", 5]))
    rec: dict = {"kind": kind, "ts": draw(st.one_of(st.just("2026-01-01T00:00:01.5Z"), st.none(), _TS)), "conn": conn}
    if kind == "request":
        rec.update(method=draw(st.sampled_from(["GET", "post", "", "ß", None])), url=draw(st.sampled_from(["http://h/mcp", "http://u:p@h/x?token=1", None, 5])),
                   headers=draw(_HEADERS), body=draw(_BODIES))
    elif kind == "response":
        rec.update(status=draw(st.sampled_from([200, 202, 404, 2**31, True, "200"])), headers=draw(_HEADERS))
        if draw(st.integers(0, 5)) == 0:
            rec["decoded"] = None
    elif kind == "body":
        rec.update(data=draw(_BODIES.filter(lambda b: b is not None) | st.just(None)))
        if draw(st.integers(0, 7)) == 0:
            rec["base64"] = draw(st.sampled_from([True, False, "yes"]))
            rec["data"] = "eyJqc29ucnBjIjoiMi4wIiwiaWQiOjEsInJlc3VsdCI6e319"
    elif kind == "close":
        rec.update(reason=draw(st.sampled_from(["eof", "reset", "error", "capture_end", "bogus", None, ["eof"]])),
                   by=draw(st.sampled_from(["client", "server", None, "x", ["client"]])))
        if draw(st.integers(0, 7)) == 0:
            rec["decoding"] = draw(st.sampled_from(["truncated", "invalid", "over_limit", "fine", 3]))
    else:
        rec.update(id=draw(st.integers(0, 9).map(str)), data='{"jsonrpc":"2.0","method":"m"}')
    if draw(st.integers(0, 9)) == 0:
        rec["client_addr"] = draw(st.sampled_from(["10.0.0.1:1", "\ud800", "é"]))
    seps = draw(_SEPARATORS)
    line = json.dumps(rec, ensure_ascii=draw(st.booleans()), separators=seps).encode("utf-8", "surrogatepass")
    damage = draw(st.integers(0, 19))
    if damage == 0:
        line = line[: len(line) // 2]
    elif damage == 1:
        line = line.replace(b'"', b"\xff", 1)
    elif damage == 2:
        line = line + line
    return line + b"\n"


@settings(max_examples=500, deadline=None)
@given(st.lists(exchange_record(), max_size=40), st.sampled_from([None, 1, 2, 3, 7]), st.booleans(), st.booleans())
def test_exchange_records_read_ahead_as_the_per_line_reader_reads_them(lines, batch_lines, redact, bom):
    """Random interleavings of conns, keep-alive requests, orphans, closes, bodies that are or are not JSON-RPC under any
    content type, coded streams, damaged lines, in batches of any size: the batches' reading gives the per-line reader's
    result, row for row, anomaly for anomaly, with and without redaction (compact tables: below)."""
    data = b"".join(lines)
    if bom:
        data = b"\xef\xbb\xbf" + data
    assert_same(data, batch_lines, Reading(redact=redact))


def _compact_rows(got) -> list:
    return [rows(got.exchanges), rows(got.messages), rows(got.anomalies), got.events_frame.to_dicts()]


@settings(max_examples=100, deadline=None)
@given(st.lists(exchange_record(), max_size=30), st.sampled_from([None, 2, 5]))
def test_compact_reading_of_exchange_records_is_the_per_line_readers(lines, batch_lines):
    """The single pass's reading (``Reading(compact=True)``: no header objects, digests as integers) is the per-line
    reader's too (assert_same compares the canonical tables, which a compact reading cannot give)."""
    data = b"".join(lines)
    fast, slow = both(data, batch_lines, Reading(compact=True))
    if isinstance(fast, NotACapture) or isinstance(slow, NotACapture):
        assert str(fast) == str(slow)
        return
    assert (fast.records, fast.rejected) == (slow.records, slow.rejected)
    assert _compact_rows(fast) == _compact_rows(slow)
