"""The column-wise SSE parser gives what the reference parser gives, dispatch and start offsets included."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.decode import sse_columns
from analyzer.decode.sse import SSEParser, parse_all


def reference_rows(raw: bytes) -> list[tuple]:
    rows = []
    for ev in parse_all(raw):
        big = ev.retry is not None and ev.retry >= 2**63
        codes = list(ev.anomalies) + (["sse_retry_invalid"] if big and "sse_retry_invalid" not in ev.anomalies else [])
        rows.append((ev.id, ev.event, ev.data, None if big else ev.retry, ev.fate, ev.end, ev.offset, codes))
    return rows


def columns_rows(bodies: list[bytes]) -> list[list[tuple]]:
    df = sse_columns.parse(list(range(len(bodies))), bodies)
    out: list[list[tuple]] = [[] for _ in bodies]
    for r in df.iter_rows(named=True):
        out[r["key"]].append((r["id"], r["event"], r["data"], r["retry"], r["fate"], r["dispatch"], r["start"], r["anomalies"]))
    return out


LINES = st.sampled_from(
    [
        "data: x", "data:y", "data", "data:  two spaces", "event: e", "event:", "id: 7", "id:", "id: a\x00b",
        "retry: 1000", "retry: x", "retry:", "retry: 99999999999999999999", ": comment", ":", "foo: bar", "foo",
        "data: é ☃ 𝄞", "data: {\"jsonrpc\":\"2.0\",\"method\":\"m\"}", "", "", "", " data: leading space", "DATA: caps",
        "id: 1: 2", "event: a:b",
    ]
)


@st.composite
def bodies(draw):
    lines = draw(st.lists(LINES, max_size=30))
    eol = draw(st.sampled_from(["\n", "\r\n", "\r", "mixed"]))
    if eol == "mixed":
        ends = draw(st.lists(st.sampled_from(["\n", "\r\n", "\r"]), min_size=len(lines), max_size=len(lines)))
    else:
        ends = [eol] * len(lines)
    text = "".join(line + end for line, end in zip(lines, ends))
    if lines and draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]  # the stream ended anywhere
    raw = text.encode("utf-8")
    if draw(st.integers(0, 9)) == 0:
        raw = b"\xef\xbb\xbf" + raw
    if draw(st.integers(0, 9)) == 0:
        raw = raw + b"data: \xff\xfe\n\n"
    return raw


@settings(max_examples=400, deadline=None)
@given(st.lists(bodies(), min_size=1, max_size=5))
def test_same_records_as_the_reference(raws):
    got = columns_rows(raws)
    for raw, rows in zip(raws, got):
        assert rows == reference_rows(raw), raw


def test_dispatch_offset_is_the_byte_whose_arrival_dispatches():
    """Fed one byte at a time, each event comes out exactly when its dispatch byte arrives."""
    for raw in [b"data: a\n\ndata: b\r\n\r\nid: 3\n\n", b"data: a\r\n\r\n\r\ndata: b\r\n\r\n", b":c\n\ndata: x\n\n\n\ndata: y\n"]:
        parser = SSEParser()
        when = []
        for i in range(len(raw)):
            when += [i] * len(parser.feed(raw[i : i + 1]))
        when += [None] * len(parser.close())
        assert [r[5] for r in columns_rows([raw])[0]] == when


def test_fast_and_reference_paths_both_taken():
    raws = [b"data: a\n\n", b"data: a\r\n\r\n", b"data: a\r\r", b"\xef\xbb\xbfdata: a\n\n", b"data: \xff\n\n", b"retry: 99999999999999999999\ndata: a\n\n"]
    assert columns_rows(raws) == [reference_rows(r) for r in raws]
    assert [sse_columns._fast_shape(r) is not None for r in raws] == [True, True, False, False, False, True]


def test_no_bodies_and_empty_bodies():
    assert sse_columns.parse([], []).height == 0
    assert sse_columns.parse([1, 2], [b"", b": only a comment\n\n"]).height == 0
