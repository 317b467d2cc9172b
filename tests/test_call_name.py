"""rpc.call_name parses each request body only for its own method's path (a when/then computes every branch for
every row: the five branches parsed every body five times); the names must be those of the chain it replaced."""
from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.signals.rpc import _NAMED_BY, _PATHS, call_label, call_name


def old_call_name(method: pl.Expr, body: pl.Expr) -> pl.Expr:
    target = None
    for m, path in _NAMED_BY.items():
        target = (pl.when(method == m) if target is None else target.when(method == m)).then(body.str.json_path_match(path))
    return pl.when(target.is_not_null()).then(pl.format("{} {}", method, target)).otherwise(method.fill_null("request"))


METHODS = [*_NAMED_BY, "tools/list", "initialize", None, ""]


def frame(rows):
    return pl.DataFrame(rows, schema={"method": pl.String, "body": pl.String, "rpc_id": pl.String}, orient="row")


def test_every_named_method_has_its_path_once():
    assert sorted(m for ms in _PATHS.values() for m in ms) == sorted(_NAMED_BY)
    assert all(_NAMED_BY[m] == path for path, ms in _PATHS.items() for m in ms)


def test_names_as_before_on_known_requests():
    rows = [
        ("tools/call", '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow_count"}}', "1"),
        ("prompts/get", '{"jsonrpc":"2.0","id":2,"method":"prompts/get","params":{"name":"p"}}', "2"),
        ("resources/read", '{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"uri":"file:///a.txt"}}', "3"),
        ("resources/read", '{"jsonrpc":"2.0","id":3,"method":"resources/read","params":{"name":"n"}}', "3"),
        ("tools/call", '[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a"}}]', "1"),
        ("tools/call", "not json", "4"),
        ("tools/call", None, "5"),
        ("tools/list", '{"params":{"name":"x","uri":"y"}}', "6"),
        (None, '{"params":{"name":"x"}}', "7"),
    ]
    got = frame(rows).select(n=call_name(pl.col("method"), pl.col("body")), l=call_label(pl.col("method"), pl.col("body"), pl.col("rpc_id")))
    assert got.get_column("n").to_list()[:5] == ["tools/call slow_count", "prompts/get p", "resources/read file:///a.txt", "resources/read",
                                                 "tools/call"]
    assert got.get_column("n").equals(frame(rows).select(n=old_call_name(pl.col("method"), pl.col("body"))).get_column("n"))


_value = st.one_of(st.text(max_size=6), st.integers(), st.none(), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@st.composite
def requests(draw):
    params = draw(st.dictionaries(st.sampled_from(["name", "uri", "arguments"]), _value, max_size=3))
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "x", "params": params}, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))
    body = draw(st.sampled_from([body, f"[{body}]", body[:-1], None]))
    return draw(st.sampled_from(METHODS)), body, str(draw(st.integers(0, 9)))


@settings(max_examples=200, deadline=None)
@given(st.lists(requests(), min_size=1, max_size=10))
def test_names_as_before(rows):
    f = frame(rows)
    assert f.select(call_name(pl.col("method"), pl.col("body"))).equals(f.select(old_call_name(pl.col("method"), pl.col("body"))))
    # and inside a grouping, as rules/stateless.py names a group's first request
    g = lambda fn: f.with_columns(k=pl.col("rpc_id")).group_by("k").agg(n=fn(pl.col("method"), pl.col("body")).first()).sort("k")  # noqa: E731
    assert g(call_name).equals(g(old_call_name))
