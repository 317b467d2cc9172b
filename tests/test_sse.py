"""Tests for analyzer.decode.sse against the WHATWG "Server-sent events" section.

Every example input goes through ``check()``, which parses it whole, byte by
byte (with empty chunks interleaved), at every single split point and, for
short inputs, at every pair of split points, and asserts that all agree.
"""
from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.anomalies import CATALOG
from analyzer.decode.sse import SSEEvent, SSEParser, parse_all

BOM = b"\xef\xbb\xbf"


# --------------------------------------------------------------------------
# helpers


def parse_chunked(data: bytes, splits) -> list[SSEEvent]:
    """Feed ``data`` cut at the given split points (any order, duplicates ok), then close."""
    parser = SSEParser()
    out: list[SSEEvent] = []
    prev = 0
    for cut in sorted(splits):
        out += parser.feed(data[prev:cut])
        prev = cut
    out += parser.feed(data[prev:])
    out += parser.close()
    return out


def check(data: bytes | str) -> list[SSEEvent]:
    """parse_all(data), asserting every chunking gives the identical result."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    expected = parse_all(data)
    n = len(data)
    assert parse_chunked(data, range(1, n)) == expected, "byte by byte"
    # byte by byte with an empty chunk between every two bytes
    parser = SSEParser()
    got: list[SSEEvent] = []
    for i in range(n):
        got += parser.feed(b"")
        got += parser.feed(data[i : i + 1])
    got += parser.feed(b"")
    got += parser.close()
    assert got == expected, "byte by byte with empty chunks"
    for i in range(n + 1):
        assert parse_chunked(data, [i]) == expected, f"split at {i}"
    if n <= 48:
        for i, j in itertools.combinations(range(1, n), 2):
            assert parse_chunked(data, [i, j]) == expected, f"split at {i},{j}"
    return expected


def E(
    data: str = "",
    *,
    fate: str = "dispatched",
    event: str = "message",
    id: str | None = None,
    last: str = "",
    retry: int | None = None,
    offset: int = 0,
    anomalies: tuple[str, ...] = (),
) -> SSEEvent:
    return SSEEvent(
        id=id,
        last_event_id=last,
        event=event,
        data=data,
        retry=retry,
        fate=fate,
        offset=offset,
        anomalies=anomalies,
    )


def datas(events: list[SSEEvent]) -> list[tuple[str, str]]:
    return [(e.fate, e.data) for e in events]




# --------------------------------------------------------------------------
# the examples of the WHATWG SSE section


def test_spec_intro_three_messages():
    s = (
        "data: This is the first message.\n"
        "\n"
        "data: This is the second message, it\n"
        "data: has two lines.\n"
        "\n"
        "data: This is the third message.\n"
        "\n"
    )
    assert check(s) == [
        E("This is the first message.", offset=0),
        E("This is the second message, it\nhas two lines.", offset=s.index("data: This is the second")),
        E("This is the third message.", offset=s.index("data: This is the third")),
    ]


def test_spec_intro_as_printed_last_block_unterminated():
    # As printed in the spec the stream stops after the third data line.
    s = "data: This is the first message.\n\ndata: This is the third message.\n"
    assert check(s) == [
        E("This is the first message."),
        E("This is the third message.", fate="cut_off", offset=34),
    ]


def test_spec_event_types_add_remove():
    s = "event: add\ndata: 73857293\n\nevent: remove\ndata: 2153\n\nevent: add\ndata: 113411\n\n"
    assert check(s) == [
        E("73857293", event="add", offset=0),
        E("2153", event="remove", offset=s.index("event: remove")),
        E("113411", event="add", offset=s.index("event: add\ndata: 113411")),
    ]


def test_spec_stock_ticker_multiline():
    # "...would cause an event message ... The event's data attribute would
    # contain the string "YHOO\n+2\n10"" -- "once followed by a blank line".
    assert check("data: YHOO\ndata: +2\ndata: 10\n\n") == [E("YHOO\n+2\n10")]
    # ... and not without that blank line
    assert check("data: YHOO\ndata: +2\ndata: 10\n") == [
        E("YHOO\n+2\n10", fate="cut_off")
    ]


def test_spec_four_blocks_with_ids():
    s = ": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\ndata:  third event\n\n"
    events = check(s)
    assert events == [
        # the comment-only block fires nothing and is not recorded
        E("first event", id="1", last="1", offset=s.index("data: first")),
        # "id" with no value resets the last event ID to the empty string
        E("second event", id="", last="", offset=s.index("data:second")),
        # "with a single leading space character"
        E(" third event", id=None, last="", offset=s.index("data:  third")),
    ]


def test_spec_four_blocks_connection_dies_after_second():
    # "if the connection died between this block and the next, the server
    # would be sent a Last-Event-ID header with the value 1"
    parser = SSEParser()
    parser.feed(b": test stream\n\ndata: first event\nid: 1\n\n")
    assert parser.last_event_id == "1"
    assert parser.close() == []
    assert parser.last_event_id == "1"


@pytest.mark.parametrize("tail", ["", "\n"])
def test_spec_fires_two_events(tail):
    # "The first block fires events with the data set to the empty string ...
    # The middle block fires an event with the data set to a single newline
    # character. The last block is discarded because it is not followed by a
    # blank line."
    s = "data\n\ndata\ndata\n\ndata:" + tail
    assert check(s) == [
        E("", offset=0),
        E("\n", offset=6),
        E("", fate="cut_off", offset=17),
    ]
    assert [e for e in parse_all(s.encode()) if e.fate == "dispatched"] == [E("", offset=0), E("\n", offset=6)]


def test_spec_fires_two_events_variant_with_colon():
    assert datas(check("data:\n\ndata\ndata\n\ndata:")) == [
        ("dispatched", ""),
        ("dispatched", "\n"),
        ("cut_off", ""),
    ]


def test_spec_last_block_would_fire_if_followed_by_blank_line():
    # "... as would the last block if it was followed by a blank line"
    assert datas(check("data\n\ndata\ndata\n\ndata:\n\n")) == [
        ("dispatched", ""),
        ("dispatched", "\n"),
        ("dispatched", ""),
    ]


def test_spec_two_identical_events():
    # "This is because the space after the colon is ignored if present."
    a, b = check("data:test\n\ndata: test\n\n")
    assert (a.data, a.event, a.fate) == (b.data, b.event, b.fate) == ("test", "message", "dispatched")
    assert (a.offset, b.offset) == (0, 11)


def test_spec_last_event_id_carries_to_events_without_id():
    # "If an event doesn't have an "id" field, but an earlier event did set the
    # event source's last event ID string, then the event's lastEventId field
    # will be set to the value of whatever the last seen "id" field was."
    assert check("id: 5\ndata: a\n\ndata: b\n\n") == [
        E("a", id="5", last="5"),
        E("b", id=None, last="5", offset=15),
    ]


# --------------------------------------------------------------------------
# line endings


@pytest.mark.parametrize("eol", ["\n", "\r", "\r\n"])
def test_each_line_ending(eol):
    s = eol.join(["data: a", "data: b", "", "event: x", "data: c", "", ""])
    assert check(s) == [
        E("a\nb", offset=0),
        E("c", event="x", offset=s.index("event")),
    ]


def test_mixed_line_endings():
    s = "data: a\rdata: b\ndata: c\r\n\r\ndata: d\n\r"
    assert check(s) == [E("a\nb\nc"), E("d", offset=s.index("data: d"))]


@pytest.mark.parametrize(
    "s, expected",
    [
        ("data: a\r\r", [("dispatched", "a")]),  # CR CR: two line ends
        ("data: a\n\r", [("dispatched", "a")]),  # LF CR: two line ends
        ("data: a\r\n\r\n", [("dispatched", "a")]),  # CRLF CRLF
        ("data: a\r\n\n", [("dispatched", "a")]),
        ("data: a\n\r\n", [("dispatched", "a")]),  # LF, then CRLF (blank)
        ("data: a\r\r\n", [("dispatched", "a")]),  # CR, then CRLF (blank)
        ("data: a\r\n", [("cut_off", "a")]),  # CRLF is ONE line end, not two
        ("data: a\n\rdata: b\n\n", [("dispatched", "a"), ("dispatched", "b")]),
        ("data: a\r\n\rdata: b\n\n", [("dispatched", "a"), ("dispatched", "b")]),
    ],
)
def test_line_end_combinations(s, expected):
    assert datas(check(s)) == expected


def test_cr_split_across_chunks_is_one_crlf():
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\ndata: b\r\n\r\n") == [E("a\nb")]
    assert parser.close() == []


def test_cr_split_with_empty_chunks_between():
    parser = SSEParser()
    out = parser.feed(b"data: a\r") + parser.feed(b"") + parser.feed(b"") + parser.feed(b"\n")
    out += parser.feed(b"data: b\r") + parser.feed(b"\n") + parser.feed(b"\r") + parser.feed(b"\n")
    out += parser.close()
    assert out == [E("a\nb")]


def test_cr_at_chunk_end_followed_by_cr_is_a_blank_line():
    parser = SSEParser()
    assert parser.feed(b"data: a\r") == []
    assert parser.feed(b"\rdata: b\r") == [E("a")]
    assert parser.close() == [E("b", fate="cut_off", offset=9)]


def test_trailing_cr_blank_line_dispatches_without_waiting():
    # A CR always ends a line; only the next line's offset depends on whether
    # an LF follows, so the block dispatches now.
    parser = SSEParser()
    assert parser.feed(b"data: a\n\r") == [E("a")]
    assert parser.feed(b"\ndata: b\n\n") == [E("b", offset=10)]


def test_pending_cr_at_close_is_a_line_end():
    assert check(b"data: a\r") == [E("a", fate="cut_off")]
    assert check(b"data: a\r\r") == [E("a")]


def test_other_unicode_line_breaks_are_not_line_ends():
    # VT, FF, NEL, LS, PS are str.splitlines() breaks but not SSE line ends.
    s = "data: a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g\n\n"
    assert check(s) == [E("a\x0bb\x0cc\x1cd\x85e\u2028f\u2029g")]


# --------------------------------------------------------------------------
# BOM


def test_bom_stripped_at_start():
    assert check(BOM + b"data: x\n\n") == [E("x", offset=3)]


def test_only_one_bom_stripped():
    # the second BOM is part of the first line: field name "\ufeffdata"
    assert check(BOM + BOM + b"data: x\n\n") == [
        E(fate="no_data", offset=3, anomalies=("sse_unknown_field",))
    ]


def test_second_bom_kept_as_data():
    assert check(BOM + b"data: " + BOM + b"x\n\n") == [E("\ufeffx", offset=3)]


def test_bom_not_at_start_is_content():
    assert check(b"data: x\n\n" + BOM + b"data: y\n\n") == [
        E("x"),
        E(fate="no_data", offset=9, anomalies=("sse_unknown_field",)),
    ]


def test_bom_then_blank_lines_and_comments_only():
    assert check(BOM) == []
    assert check(BOM + b"\n\n: hi\n\n") == []


def test_partial_bom_is_invalid_utf8_content():
    # EF BB then 'd' is an ill-formed sequence: one U+FFFD, then "data"
    assert check(b"\xef\xbbdata: x\n\n") == [
        E(fate="no_data", anomalies=("sse_invalid_utf8", "sse_unknown_field"))
    ]
    assert check(b"\xef\xbb") == [
        E(fate="cut_off", anomalies=("sse_invalid_utf8", "sse_unknown_field"))
    ]
    assert check(b"\xef") == [
        E(fate="cut_off", anomalies=("sse_invalid_utf8", "sse_unknown_field"))
    ]


def test_bom_offsets_count_the_bom():
    s = BOM + b"data: a\r\n\r\ndata: b\r\n\r\n"
    assert [e.offset for e in check(s)] == [3, 14]


# --------------------------------------------------------------------------
# comments, blank lines


def test_comments_are_ignored_and_not_anomalies():
    assert check(": hello\n\n") == []
    assert check(":\n\n") == []
    assert check("::\n: x\r\n\r") == []
    assert check(": ping\n") == []  # unterminated comment-only block: nothing
    assert check(": a\ndata: x\n: b\n\n") == [E("x", offset=0)]  # block starts at the comment
    assert check("data: x\n:comment\ndata: y\n\n") == [E("x\ny")]


def test_blank_lines_without_fields_record_nothing():
    assert check("\n\n\n") == []
    assert check("\r\n\r\n\r") == []
    assert check("\n\n\ndata: x\n\n\n\n") == [E("x", offset=3)]


def test_empty_stream():
    assert check(b"") == []


# --------------------------------------------------------------------------
# field/value split


@pytest.mark.parametrize(
    "line, value",
    [
        ("data:x", "x"),
        ("data: x", "x"),
        ("data:  x", " x"),  # only one space is removed
        ("data:   x", "  x"),
        ("data:\tx", "\tx"),  # only U+0020 is removed
        ("data: x ", "x "),  # trailing space kept
        ("data: a:b: c", "a:b: c"),  # split at the first colon only
        ("data:", ""),
        ("data: ", ""),
        ("data", ""),  # no colon: whole line is the name, value ""
        ("data:\u00a0x", "\u00a0x"),  # NBSP is not U+0020
    ],
)
def test_value_space_stripping(line, value):
    assert check(line + "\n\n") == [E(value)]


def test_field_names_are_case_sensitive_and_literal():
    for line in ("Data: x", "DATA: x", "data : x", " data: x", "data\x00: x"):
        assert check(line + "\n\n") == [E(fate="no_data", anomalies=("sse_unknown_field",))], line


def test_nul_and_controls_allowed_in_data():
    assert check("data: a\x00b\x01\x7f\n\n") == [E("a\x00b\x01\x7f")]


# --------------------------------------------------------------------------
# event type


def test_event_type_resets_after_each_block():
    assert check("event: a\ndata: 1\n\ndata: 2\n\n") == [E("1", event="a"), E("2", offset=18)]


def test_event_type_resets_after_no_data_block():
    assert check("event: a\n\ndata: 2\n\n") == [E(fate="no_data", event="a"), E("2", offset=10)]


def test_empty_event_type_is_message():
    assert check("event:\ndata: x\n\n") == [E("x")]
    assert check("event\ndata: x\n\n") == [E("x")]
    assert check("event: a\nevent:\ndata: x\n\n") == [E("x")]


def test_last_event_field_wins():
    assert check("event: a\nevent: b\ndata\n\n") == [E("", event="b")]


def test_event_type_value_keeps_inner_spaces():
    assert check("event:  a b \ndata\n\n") == [E("", event=" a b ")]


# --------------------------------------------------------------------------
# id


def test_id_with_nul_is_ignored():
    assert check("id: a\x00b\ndata: x\n\n") == [E("x", id=None, last="", anomalies=("sse_id_contains_nul",))]


def test_id_with_nul_keeps_previous_buffer():
    s = "id: 1\n\nid: 2\x00\ndata: x\n\n"
    assert check(s) == [
        E(fate="no_data", id="1", last="1"),
        E("x", id=None, last="1", offset=7, anomalies=("sse_id_contains_nul",)),
    ]


def test_id_with_nul_after_accepted_id_in_same_block():
    assert check("id: 1\nid: \x00\ndata: x\n\n") == [E("x", id="1", last="1", anomalies=("sse_id_contains_nul",))]


def test_empty_id_resets():
    s = "id: 7\ndata: a\n\nid:\ndata: b\n\ndata: c\n\n"
    events = check(s)
    assert events == [
        E("a", id="7", last="7"),
        E("b", id="", last="", offset=15),
        E("c", id=None, last="", offset=s.index("data: c")),
    ]


@pytest.mark.parametrize("line", ["id", "id:", "id: "])
def test_all_empty_id_forms_reset(line):
    events = check("id: 9\n\n" + line + "\ndata: x\n\n")
    assert [(e.id, e.last_event_id) for e in events] == [("9", "9"), ("", "")]


def test_id_value_keeps_extra_space_and_last_id_wins():
    assert check("id:  x\nid: y\ndata\n\n") == [E("", id="y", last="y")]
    assert check("id:  x\ndata\n\n") == [E("", id=" x", last=" x")]


def test_id_only_block_is_no_data_and_moves_last_event_id():
    parser = SSEParser()
    assert parser.last_event_id == ""
    assert parser.feed(b"id: 42\n\n") == [E(fate="no_data", id="42", last="42")]
    assert parser.last_event_id == "42"
    assert parser.feed(b"data: x\n\n") == [E("x", last="42", offset=8)]
    assert parser.last_event_id == "42"
    assert check("id: 42\n\n") == [E(fate="no_data", id="42", last="42")]


def test_last_event_id_persists_across_many_blocks():
    s = "id: a\n\ndata: 1\n\ndata: 2\n\nid: b\ndata: 3\n\ndata: 4\n\n"
    assert [(e.id, e.last_event_id) for e in check(s)] == [
        ("a", "a"),
        (None, "a"),
        (None, "a"),
        ("b", "b"),
        (None, "b"),
    ]


# --------------------------------------------------------------------------
# retry


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0", 0),
        ("5", 5),
        ("007", 7),
        ("1000", 1000),
        ("3000", 3000),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_retry_valid(value, expected):
    assert check(f"retry: {value}\ndata: x\n\n") == [E("x", retry=expected)]


@pytest.mark.parametrize(
    "value",
    [
        "",  # "retry: " -> empty value: no integer
        " 5",  # "retry:  5": only one space is stripped
        "5 ",
        "+5",
        "-1",
        "1_0",
        "1.5",
        "1e3",
        "0x10",
        "5ms",
        "\uff15",  # fullwidth digit five
        "\u00b2",  # superscript two: str.isdigit() is True
        "\u0661",  # Arabic-Indic digit one
        "\u0e51",  # Thai digit one
        "\t5",
        "5\x00",
    ],
)
def test_retry_invalid(value):
    assert check(f"retry: {value}\ndata: x\n\n") == [E("x", retry=None, anomalies=("sse_retry_invalid",))]


def test_retry_without_colon_is_invalid():
    assert check("retry\ndata: x\n\n") == [E("x", anomalies=("sse_retry_invalid",))]


def test_retry_last_valid_wins_and_is_per_block():
    s = "retry: 1\nretry: x\nretry: 2\ndata: d\n\ndata: e\n\n"
    assert check(s) == [
        E("d", retry=2, anomalies=("sse_retry_invalid",)),
        E("e", retry=None, offset=s.index("data: e")),
    ]


def test_retry_only_block_is_no_data():
    assert check("retry: 10000\n\n") == [E(fate="no_data", retry=10000)]


def test_retry_huge_value_is_exact_and_does_not_raise():
    # beyond Python's 4300-digit int(str) limit
    assert parse_all(b"retry: " + b"9" * 5000 + b"\n\n") == [E(fate="no_data", retry=10**5000 - 1)]
    assert parse_all(b"retry: " + b"0" * 6000 + b"12\n\n") == [E(fate="no_data", retry=12)]
    big = "1" + "0" * 9000 + "7"
    assert parse_all(b"retry: " + big.encode() + b"\n\n")[0].retry == 10**9001 + 7


# --------------------------------------------------------------------------
# unknown fields, no_data blocks, priming events


def test_unknown_field_ignored_with_anomaly():
    assert check("foo: bar\ndata: x\n\n") == [E("x", anomalies=("sse_unknown_field",))]
    assert check("foo\n\n") == [E(fate="no_data", anomalies=("sse_unknown_field",))]


def test_block_without_data_is_no_data():
    assert check("event: ping\n\n") == [E(fate="no_data", event="ping")]
    assert check("event: ping\nid: 3\nretry: 5\n\n") == [
        E(fate="no_data", event="ping", id="3", last="3", retry=5)
    ]


def test_priming_event_single_empty_data_line():
    # MCP 2025-11-25: the server primes a stream with an id and an empty data field
    assert check("id: abc\ndata:\n\n") == [E("", id="abc", last="abc")]
    assert check("data:\n\n") == [E("")]
    assert check("data: \n\n") == [E("")]
    assert check("data\n\n") == [E("")]


def test_multiline_data_and_empty_lines_inside_data():
    assert check("data: a\ndata:\ndata: b\ndata:\n\n") == [E("a\n\nb\n")]
    assert check("data: {\ndata: \"k\": 1\ndata: }\n\n") == [E('{\n"k": 1\n}')]


# --------------------------------------------------------------------------
# cut off at close


def test_cut_off_block_at_close():
    assert check("data: a\ndata: b") == [E("a\nb", fate="cut_off")]
    assert check("data: a\n") == [E("a", fate="cut_off")]
    assert check("event: x") == [E(fate="cut_off", event="x")]
    assert check("data: a\n\ndata: b\n: c") == [E("a"), E("b", fate="cut_off", offset=9)]


def test_cut_off_id_sets_the_buffer():
    parser = SSEParser()
    assert parser.feed(b"id: 1\ndata: a\n\nid: 9\ndata: x\n") == [E("a", id="1", last="1")]
    assert parser.last_event_id == "9"  # the id line was processed
    assert parser.close() == [E("x", fate="cut_off", id="9", last="9", offset=15)]
    assert parser.last_event_id == "9"


def test_unterminated_last_line_is_processed_before_cut_off():
    parser = SSEParser()
    assert parser.feed(b"data: a\nid: 5") == []
    assert parser.last_event_id == ""  # the line is not complete yet
    assert parser.close() == [E("a", fate="cut_off", id="5", last="5")]
    assert parser.last_event_id == "5"


def test_feed_after_close_raises_and_close_is_idempotent():
    parser = SSEParser()
    parser.feed(b"data: x\n\n")
    assert parser.close() == []
    assert parser.close() == []
    with pytest.raises(ValueError):
        parser.feed(b"data: y\n\n")
    with pytest.raises(ValueError):
        parser.feed(b"")


def test_feed_accepts_bytes_like():
    parser = SSEParser()
    out = parser.feed(bytearray(b"data: a\n")) + parser.feed(memoryview(b"\n"))
    assert out == [E("a")]


# --------------------------------------------------------------------------
# UTF-8


def test_invalid_utf8_replaced_with_anomaly():
    assert check(b"data: \xff\n\n") == [E("\ufffd", anomalies=("sse_invalid_utf8",))]
    assert check(b"data: a\xc3(b\n\n") == [E("a\ufffd(b", anomalies=("sse_invalid_utf8",))]


def test_invalid_utf8_anomaly_only_on_its_block():
    assert check(b"data: ok\n\ndata: \x80\n\ndata: ok\n\n") == [
        E("ok"),
        E("\ufffd", offset=10, anomalies=("sse_invalid_utf8",)),
        E("ok", offset=19),
    ]


def test_truncated_sequence_before_line_end():
    # the LF is not swallowed by the broken sequence
    assert check(b"data: \xe2\x82\ndata: x\n\n") == [E("\ufffd\nx", anomalies=("sse_invalid_utf8",))]


def test_truncated_sequence_before_cr():
    # b"\xac" after the CR starts a new line whose name is U+FFFD: unknown field
    assert check(b"data: \xe2\x82\r\xac\n\n") == [
        E("\ufffd", anomalies=("sse_invalid_utf8", "sse_unknown_field"))
    ]


def test_maximal_subpart_replacement():
    # WHATWG Encoding / Unicode "maximal subpart" practice
    assert check(b"data: \xed\xa0\x80\n\n")[0].data == "\ufffd" * 3  # encoded surrogate
    assert check(b"data: \xe0\x80\x80\n\n")[0].data == "\ufffd" * 3  # overlong
    assert check(b"data: \xf0\x9f\x98\n\n")[0].data == "\ufffd"  # truncated 4-byte
    assert check(b"data: \xc0\xaf\n\n")[0].data == "\ufffd" * 2


def test_invalid_utf8_in_comment_counts_for_its_block():
    assert check(b": \xff\ndata: x\n\n") == [E("x", anomalies=("sse_invalid_utf8",))]
    assert check(b": \xff\n\n") == []


def test_invalid_utf8_in_field_name():
    assert check(b"d\xffata: x\n\n") == [E(fate="no_data", anomalies=("sse_invalid_utf8", "sse_unknown_field"))]


def test_literal_replacement_character_is_not_an_anomaly():
    assert check("data: \ufffd\n\n") == [E("\ufffd")]


def test_multibyte_characters_split_across_chunks():
    s = "data: é€😀\n\n".encode()
    assert check(s) == [E("é€😀")]
    parser = SSEParser()
    out = parser.feed(b"data: \xe2\x82") + parser.feed(b"\xac\xf0\x9f") + parser.feed(b"\x98\x80\n\n")
    assert out == [E("€😀")]


# --------------------------------------------------------------------------
# offsets and anomaly bookkeeping


def test_offsets_are_byte_offsets():
    s = "data: é\n\ndata: x\n\n".encode()  # é is two bytes
    assert [e.offset for e in check(s)] == [0, 10]


def test_offsets_with_crlf_and_blank_runs():
    s = b"data: a\r\n\r\n\r\n\r\nid: 1\r\n\r\ndata: b\r"
    assert check(s) == [
        E("a"),
        E(fate="no_data", id="1", last="1", offset=15),
        E("b", fate="cut_off", last="1", offset=24),
    ]


def test_anomalies_in_order_without_duplicates():
    s = "foo: 1\nretry: x\nbar: 2\nretry: y\nid: \x00\ndata: d\n\n"
    assert check(s) == [E("d", anomalies=("sse_unknown_field", "sse_retry_invalid", "sse_id_contains_nul"))]


def test_cut_off_is_a_fate_not_an_anomaly():
    # callers log sse_unterminated_event from fate == "cut_off" (ingest_har does)
    assert check("foo: 1\n") == [E(fate="cut_off", anomalies=("sse_unknown_field",))]
    assert check("data: x") == [E("x", fate="cut_off")]


def test_all_anomaly_codes_are_in_the_catalog():
    s = b"\xff: 1\nretry: x\nid: \x00\ndata: d\n\nfoo"
    codes = {c for e in parse_all(s) for c in e.anomalies}
    assert codes == {
        "sse_invalid_utf8",
        "sse_unknown_field",
        "sse_retry_invalid",
        "sse_id_contains_nul",
    }
    assert codes <= set(CATALOG)


def test_event_is_frozen():
    e = parse_all(b"data: x\n\n")[0]
    with pytest.raises(AttributeError):
        e.data = "y"  # type: ignore[misc]


def test_large_stream_many_events():
    one = b'id: %d\nevent: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress"}\n\n'
    blob = b"".join(one % i for i in range(5000))
    events = parse_all(blob)
    assert len(events) == 5000
    assert events[-1].last_event_id == "4999"
    assert all(blob[e.offset : e.offset + 4] == b"id: " for e in events)
    # in uneven chunks
    assert parse_chunked(blob, range(7, len(blob), 4093)) == events


# --------------------------------------------------------------------------
# property tests

TOKENS = [
    b"data",
    b"id",
    b"event",
    b"retry",
    b"foo",
    b":",
    b": ",
    b" ",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"5",
    b"x",
    b"\x00",
    BOM,
    b"\xef",
    b"\xff",
    b"\xe2\x82",
    b"\xac",
    "é".encode(),
]
sse_like = st.lists(st.sampled_from(TOKENS), max_size=60).map(b"".join)
any_bytes = st.one_of(st.binary(max_size=300), sse_like)


def _reference(data: bytes):
    """A deliberately naive transcription of WHATWG §9.2.6 over decoded text."""
    text = data.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = re.split(r"\r\n|\r|\n", text)
    lines.pop()  # the text after the last line end is not a complete line ...
    tail = re.split(r"\r\n|\r|\n", text)[-1]
    out = []
    data_buf, type_buf, last_id = "", "", ""
    block_id, retry, fields = None, None, False

    def process(line):
        nonlocal data_buf, type_buf, last_id, block_id, retry, fields
        if line.startswith(":"):
            return
        if ":" in line:
            name, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
        else:
            name, value = line, ""
        fields = True
        if name == "event":
            type_buf = value
        elif name == "data":
            data_buf += value + "\n"
        elif name == "id":
            if "\0" not in value:
                last_id = block_id = value
        elif name == "retry":
            if value and all(c in "0123456789" for c in value):
                retry = int(value)

    for line in lines:
        if line == "":
            if fields:
                fate = "no_data" if data_buf == "" else "dispatched"
                out.append((fate, type_buf or "message", data_buf[:-1] if data_buf.endswith("\n") else data_buf, block_id, last_id, retry))
            data_buf, type_buf, block_id, retry, fields = "", "", None, None, False
        else:
            process(line)
    if tail:  # ... but this module processes it at close (it was received)
        process(tail)
    if fields:
        out.append(("cut_off", type_buf or "message", data_buf[:-1] if data_buf.endswith("\n") else data_buf, block_id, last_id, retry))
    return out


def _summary(events):
    return [(e.fate, e.event, e.data, e.id, e.last_event_id, e.retry) for e in events]


@settings(max_examples=400, deadline=None)
@given(any_bytes)
def test_property_never_raises(data):
    events = parse_all(data)
    for e in events:
        assert e.fate in ("dispatched", "no_data", "cut_off")
        assert 0 <= e.offset < len(data)
        assert len(set(e.anomalies)) == len(e.anomalies)
        assert set(e.anomalies) <= set(CATALOG)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_property_chunking_never_changes_the_result(draw):
    data = draw.draw(any_bytes)
    splits = draw.draw(st.lists(st.integers(0, len(data)), max_size=12))
    assert parse_chunked(data, splits) == parse_all(data)


@settings(max_examples=400, deadline=None)
@given(any_bytes)
def test_property_no_cr_in_data_and_no_line_breaks_in_fields(data):
    for e in parse_all(data):
        assert "\r" not in e.data
        for s in (e.event, e.id or "", e.last_event_id):
            assert "\r" not in s and "\n" not in s
        if e.fate == "dispatched":
            assert "\r" not in e.data


@settings(max_examples=400, deadline=None)
@given(any_bytes)
def test_property_matches_naive_reference(data):
    assert _summary(parse_all(data)) == _reference(data)


@settings(max_examples=300, deadline=None)
@given(any_bytes)
def test_property_offsets_are_line_starts_and_increase(data):
    events = parse_all(data)
    offsets = [e.offset for e in events]
    assert offsets == sorted(set(offsets))
    for off in offsets:
        assert off == 0 or (off == 3 and data.startswith(BOM)) or data[off - 1 : off] in (b"\r", b"\n")
        assert data[off : off + 1] not in (b"\r", b"\n")  # a block never starts at a blank line
