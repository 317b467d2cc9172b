"""The column-wise JSON-RPC reader of SSE data agrees with the one-message-at-a-time reader."""
from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.decode import jsonrpc

CASES = [
    {"jsonrpc": "2.0", "id": 5, "result": {"protocolVersion": "2025-11-25"}},
    {"jsonrpc": "2.0", "id": "5", "method": "sampling/createMessage", "params": {"id": "inner", "n": [1, 2]}},
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"id": 7, "progress": 1}},
    {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}},
    {"jsonrpc": "2.0", "id": "a\"b\\c", "result": {}},
    {"jsonrpc": "2.0", "id": "ü-1", "error": {"code": -32602, "message": "not initialized"}},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "x", "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}},
    {"jsonrpc": "2.0", "id": 12, "result": {"content": [{"type": "text", "text": "{\"id\": \"12\"}"}]}},
]


def both(texts):
    ev = pl.DataFrame(
        {
            "source": ["s"] * len(texts), "xid": [0] * len(texts), "ordinal": list(range(len(texts))),
            "location": [f"line {i}" for i in range(len(texts))], "fate": ["dispatched"] * len(texts), "data": texts,
        }
    )
    got, invalid = jsonrpc.sse_messages(ev)
    fast = sorted(
        (r["ordinal"], r["kind"], r["rpc_id"], r["method"], r["error_code"], r["error_message"], r["protocol_version"], r["params_digest"])
        for r in got.iter_rows(named=True)
    )
    slow, bad = [], []
    for i, t in enumerate(texts):  # (blank text: extract gives no message)
        try:
            slow += [(i, m.kind, m.rpc_id, m.method, m.error_code, m.error_message, m.protocol_version, m.params_digest) for m in jsonrpc.extract(t)]
        except jsonrpc.NotJsonRpc:
            bad.append(f"line {i}")
    return fast, sorted(slow), sorted(ev["location"].gather(invalid["row"]).to_list()), sorted(bad)


@pytest.mark.parametrize("sep", [(",", ":"), (", ", ": ")])  # JavaScript's JSON.stringify, Python's json.dumps
def test_known_shapes_agree(sep):
    texts = [json.dumps(c, separators=sep, ensure_ascii=False) for c in CASES] + ["not json", "", "[1, 2]", json.dumps([CASES[0], CASES[2]])]
    # no object: invalid before any JSON path is read; an object after white space is read as one
    texts += ["42", '"a string"', "null", "true", "\n\t x {", " \n" + json.dumps(CASES[0], separators=sep)]
    fast, slow, inv_fast, inv_slow = both(texts)
    assert fast == slow
    assert inv_fast == inv_slow


ids = st.one_of(st.integers(-10**6, 10**6), st.text(max_size=8), st.none())
messages = st.fixed_dictionaries(
    {"jsonrpc": st.just("2.0")},
    optional={
        "id": ids,
        "method": st.sampled_from(["tools/call", "ping", "notifications/progress"]),
        "params": st.dictionaries(st.sampled_from(["id", "name", "n"]), st.one_of(st.integers(), st.text(max_size=5)), max_size=3),
        "error": st.fixed_dictionaries({"code": st.integers(-33000, 0), "message": st.text(max_size=10)}),
        "result": st.dictionaries(st.sampled_from(["id", "ok"]), st.integers(), max_size=2),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, min_size=1, max_size=6), st.booleans())
def test_any_message_agrees(msgs, compact):
    sep = (",", ":") if compact else (", ", ": ")
    fast, slow, inv_fast, inv_slow = both([json.dumps(m, separators=sep, ensure_ascii=False) for m in msgs])
    assert fast == slow and inv_fast == inv_slow


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(messages.map(json.dumps), st.text(max_size=12), st.from_regex(r"\A\s{0,2}[{\[\d\"ntf]", fullmatch=False)), min_size=1, max_size=8))
def test_messages_among_any_text_agree(texts):
    """Plain text, numbers and broken JSON beside messages: each invalid, as the per-message reader says."""
    fast, slow, inv_fast, inv_slow = both(texts)
    assert fast == slow and inv_fast == inv_slow


def test_blank_is_the_same_character_set_on_both_paths():
    """A text of only these characters is blank (no message, not invalid) on both paths: Unicode
    White_Space, what the column-wise \\S test reads; Python's isspace() also takes U+001C-U+001F."""
    import polars as pl

    chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    column_blank = (~pl.Series(chars).str.contains(r"\S")).to_list()
    def python_blank(c: str) -> bool:
        try:
            return jsonrpc.extract(c) == []
        except jsonrpc.NotJsonRpc:
            return False

    python_blank = [python_blank(c) if c.isspace() else False for c in chars]
    assert [hex(ord(c)) for c, a, b in zip(chars, column_blank, python_blank) if a != b] == []
    fast, slow, inv_fast, inv_slow = both(["\x1f", " \x1c ", "\u2028", "\t"])
    assert fast == slow == [] and inv_fast == inv_slow and len(inv_slow) == 2


# -- jsonrpc.loads: msgspec first, json.loads where they differ ---------------------------------------------------

def _outcome(fn, text):
    try:
        value = fn(text)
    except (ValueError, RecursionError) as exc:
        return ("error", type(exc).__name__, str(exc))
    return ("value", repr(value), json.dumps(value, sort_keys=False, default=repr) if value == value else "nan")


_JSON_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True),
              st.text(st.characters(codec="utf-8") | st.sampled_from(["\ud800", "\udfff", "\x00", "\u2028"]))),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
_LOADS_EDGES = ["NaN", "-Infinity", "1e400", "-1e400", "1e-400", "-0.0", "1" * 4301, "0." + "1" * 5000, '"\\ud800"',
                '"\\udc00\\ud800"', '{"a":1,"a":2,"b":3,"a":4}', "[" * 600 + "]" * 600, "[" * 3000 + "]" * 3000,
                '{"a":' * 400 + "1" + "}" * 400, "01", "[1,]", '"\x01"', " {} ", "", "tru", '{"a":1}x', '"\ud800"']


@settings(max_examples=400, deadline=None)
@given(_JSON_VALUES, st.sampled_from([(",", ":"), (", ", ": ")]), st.booleans(), st.integers(0, 30), st.sampled_from(["", "x", "]", " ", "\\", '"']))
def test_loads_is_json_loads(value, seps, ascii_only, cut, junk):
    """:func:`jsonrpc.loads` gives json.loads' value (same types, same float bits, the last of a repeated key in the
    first one's place) or its exception and message, on valid JSON and on JSON cut short or with a byte more."""
    text = json.dumps(value, separators=seps, ensure_ascii=ascii_only)
    for t in (text, text[: len(text) - cut] + junk, junk + text):
        assert _outcome(jsonrpc.loads, t) == _outcome(json.loads, t)


@pytest.mark.parametrize("text", _LOADS_EDGES, ids=range(len(_LOADS_EDGES)))
def test_loads_edges(text):
    """Where msgspec and json.loads read differently (NaN, a number past a float, an integer past Python's digit
    limit, a lone surrogate, deep nesting), ``loads`` is json.loads."""
    assert _outcome(jsonrpc.loads, text) == _outcome(json.loads, text)


def test_a_request_whose_method_is_no_string_does_not_fail_the_read():
    """The JSON path reads `"method": 5` as the text "5" (a request, with the id), where the Python reading finds no
    request to digest: the digests were one fewer than the requests and the whole read failed with a ShapeError
    (an internal error, exit 3, for one such event in a capture).  Each request keeps its own digest."""
    texts = ['{"jsonrpc":"2.0","id":1,"method":5}', '{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"t"}}',
             '{"i\\u0064":false,"jsonrpc":null,"method":false}']
    ev = pl.DataFrame({"source": ["s"] * 3, "xid": [0] * 3, "ordinal": [0, 1, 2], "data": texts, "fate": ["dispatched"] * 3})
    got, invalid = jsonrpc.sse_messages(ev)
    by_ordinal = {r["ordinal"]: r for r in got.iter_rows(named=True)}
    assert by_ordinal[1]["params_digest"] == jsonrpc.extract(texts[1])[0].params_digest
    # and (since the next change) a method that is no string is what extract says it is: no JSON-RPC
    assert sorted(by_ordinal) == [1] and invalid["row"].to_list() == [0, 2]


# values the JSON paths read their own way (a number or an object as its JSON text, the last of two keys, a nested
# key's text found in the raw text, a float's or a big integer's formatting, escaped keys): each event's messages
# are extract's (event_rpc leaves such texts to it)
HOSTILE = [
    '{"jsonrpc":"2.0","id":1,"method":5}', '{"jsonrpc":"2.0","method":true}', '{"jsonrpc":"2.0","method":{"a":1}}',
    '{"jsonrpc":"2.0","method":"a","method":5}', '{"jsonrpc":"2.0","method":5,"method":"a"}',
    '{"jsonrpc":"2.0","x":{"method":"5"},"method":5}', '{"jsonrpc":"2.0","id":5,"method":"m","params":{"id":"5"}}',
    '{"jsonrpc":"2.0","id":{"b":1,"a":2},"result":{}}', '{"jsonrpc":"2.0","id":[1,{"b":2,"a":1}],"method":"m"}',
    '{"jsonrpc":"2.0","id":1.5,"result":{}}', '{"jsonrpc":"2.0","id":1e2,"method":"m"}', '{"jsonrpc":"2.0","id":-0,"result":{}}',
    '{"jsonrpc":"2.0","id":123456789012345678901234,"method":"m"}', '{"jsonrpc":"2.0","id":1,"error":{"code":"5","message":7}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":5.0,"message":"m"}}', '{"jsonrpc":"2.0","id":1,"error":{"code":true}}',
    '{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":5}}', '{"jsonrpc":"2.0","method":"initialize","params":{"protocolVersion":["x"]}}',
    '{"jsonrpc":"2.0","m\\u0065thod":"notifications/x"}', '{"jsonrpc":"2.0","method":"notifications\\/x"}',
    '{"jsonrpc":"2.0","method":"n","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":5}}}',
    '{"jsonrpc":"2.0","method":"n","params":{"_meta":{"io.modelcontextprotocol/protocolVersio\\u006e":"v"}}}',
    '{"jsonrpc":"2.0","id":"a\\"b","method":"m"}', '{"jsonrpc":"2.0","id":null,"method":"m"}', '{"jsonrpc":"2.0","id":true,"method":"m"}',
    '{"jsonrpc":"2.0","id":"5","method":"m"}', '{"jsonrpc":"2.0","id":5,"method":"m","params":{"x":1.0}}',
    '{"jsonrpc":"2.0"}', "{}", '{"result":null}', '{"error":null}', '{"id":1,"result":{},"method":null}',
    '{"jsonrpc":"2.0","method":"m","params":{"method":"GET","id":"7"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":123456789012345678901234,"message":"m"}}',
    '{"jsonrpc":"2.0","id":1,"error":{"code":-9223372036854775808}}', '{"jsonrpc":"2.0","id":1,"error":{"code":9223372036854775808}}',
    '{"jsonrpc":"2.0","id":1,"i\\u0064":"1","method":"m"}', '{"jsonrpc":"2.0","i\\u0064":"1","method":"m"}',
    '{"jsonrpc":"2.0","method":"a","m\\u0065thod":"b"}', '{"jsonrpc":"2.0","method":"caf\\u00e9"}',
]


@pytest.mark.parametrize("native", [True, False])
def test_values_the_json_paths_read_their_own_way_are_read_as_extract_reads_them(native, monkeypatch):
    from analyzer import compiled

    monkeypatch.setattr(compiled, "ENABLED", native and compiled.core is not None)
    fast, slow, inv_fast, inv_slow = both(HOSTILE)
    assert fast == slow
    assert inv_fast == inv_slow


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=4), st.sampled_from(["notifications/progress", "5", "a\"b", "é"]),
                    st.dictionaries(st.sampled_from(["id", "method", "code", "message", "protocolVersion", "_meta"]),
                                    st.one_of(st.integers(-5, 5), st.text(max_size=3), st.none()), max_size=3))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "x"]), _VALUES), max_size=5),
                min_size=1, max_size=6), st.booleans(), st.booleans())
def test_any_members_of_any_type_read_as_extract_reads_them(objects, compact, ascii_only):
    """Objects of any members with values of any type (keys repeated, nested ids and methods, a key's first letter
    written as an escape), in any spelling."""
    sep = (",", ":") if compact else (", ", ": ")

    def key(k: str, i: int) -> str:
        return f'"\\u{ord(k[0]):04x}{k[1:]}"' if (len(k) + i) % 5 == 0 else json.dumps(k)

    texts = ["{" + sep[0].join(key(k, i) + sep[1] + json.dumps(v, separators=sep, ensure_ascii=ascii_only) for i, (k, v) in enumerate(members)) + "}"
             for members in objects]
    fast, slow, inv_fast, inv_slow = both(texts)
    assert fast == slow and inv_fast == inv_slow


def test_an_error_code_past_64_bits_is_no_code_not_a_failed_read(tmp_path):
    """An error's code too large for the tables (an SSE event's, a JSON body's) is read as no code: the read went on
    to an internal error (exit 3) when Python's integer reached the Int64 column."""
    from analyzer.ingest import inputs
    from analyzer.ingest.reading import Reading

    err = json.dumps({"jsonrpc": "2.0", "id": 1, "error": {"code": 10**24, "message": "m"}})
    recs = [{"kind": "request", "ts": "2026-01-01T00:00:00Z", "conn": c, "method": "POST", "url": "/mcp", "headers": {},
             "body": '{"jsonrpc":"2.0","id":1,"method":"x"}'} for c in ("c1", "c2")]
    recs[1:1] = [{"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream"}},
                 {"kind": "sse", "ts": "2026-01-01T00:00:00Z", "conn": "c1", "data": err}]
    recs += [{"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": "c2", "status": 200, "headers": {"content-type": "application/json"}},
             {"kind": "body", "ts": "2026-01-01T00:00:00Z", "conn": "c2", "data": err}]
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    got = inputs.read_one(str(path), Reading(compact=True))
    errors = [r for r in got.messages.to_pylist() if r["kind"] == "error"]
    assert len(errors) == 2 and all(r["error_code"] is None and r["error_message"] == "m" for r in errors)
    assert jsonrpc.extract(err)[0].error_code is None and jsonrpc.extract(err.replace(str(10**24), "-32000"))[0].error_code == -32000
