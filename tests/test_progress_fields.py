"""progress.notification_fields: the method, token and value of progress notifications read from the compact SDK
text by one whole-text pattern, the rest by ``json_path_match``, must equal what three ``json_path_match`` read of
every text (the code before read them so, 3 us a notification)."""
from __future__ import annotations

import json

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.signals.progress import _COMPACT_PROGRESS, PROGRESS, notification_fields


def old_fields(texts: list[str]) -> pl.DataFrame:
    d = pl.col("data")
    return pl.DataFrame({"data": texts}, schema={"data": pl.String}).select(
        method=d.str.json_path_match("$.method"),
        token=d.str.json_path_match("$.params.progressToken"),
        value=d.str.json_path_match("$.params.progress").cast(pl.Float64, strict=False),
    )


def new_fields(texts: list[str]) -> pl.DataFrame:
    d = pl.col("data")
    return (
        pl.DataFrame({"data": texts}, schema={"data": pl.String})
        .with_columns(_shape=d.str.extract_groups(_COMPACT_PROGRESS))
        .select(**notification_fields(d, pl.col("_shape")))
    )


def compact(params: dict, method: str = PROGRESS) -> str:
    return json.dumps({"jsonrpc": "2.0", "method": method, "params": params}, separators=(",", ":"), ensure_ascii=False)


TRICKY = [
    compact({"progressToken": "tc-21", "progress": 0, "total": 2, "message": "the quick brown fox"}),
    compact({"progressToken": "j0-9f5e62", "progress": 6, "message": "umps"}),
    compact({"progressToken": "a", "progress": 7}),
    compact({"progressToken": "", "progress": 1}),
    compact({"progressToken": 5, "progress": 1}),  # a numeric token: its JSON text
    compact({"progressToken": 5.0, "progress": 1}),
    compact({"progressToken": "é \u2028", "progress": 3}),
    compact({"progressToken": "q\"x", "progress": 3}),  # an escape
    compact({"progressToken": "t", "progress": 2.5}),
    compact({"progressToken": "t", "progress": -3}),
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":-0}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1234567890123456789}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":123456789012345}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"total":1e999}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"total":2.50}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"total":02}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":01}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t\x01","progress":1}}',  # not JSON
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":"4"}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}} ',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}\n',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1,"progress":2}}',
    '{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": "t", "progress": 1}}',
    '{"method":"notifications/progress","jsonrpc":"2.0","params":{"progressToken":"t","progress":1}}',
    '[{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}]',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":[1,2]}',
    '{"jsonrpc":"2.0","method":"notifications/message","params":{"data":"notifications/progress"}}',
    "notifications/progress",
    "",
    None,
]


def test_tricky_texts_read_as_json_path_match_reads_them():
    assert new_fields(TRICKY).equals(old_fields(TRICKY))


def test_the_compact_sdk_text_takes_the_pattern():
    # (else the equality above would hold by parsing everything the old way)
    texts = TRICKY[:4] + [TRICKY[6]]
    shape = pl.Series(texts).str.extract_groups(_COMPACT_PROGRESS).struct.field("token")
    assert shape.to_list() == ["tc-21", "j0-9f5e62", "a", "", "é \u2028"]


_token = st.one_of(st.text(max_size=8), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False), st.none(), st.booleans())
_number = st.one_of(st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=4), st.none())


@st.composite
def notifications(draw):
    params = {"progressToken": draw(_token), "progress": draw(_number)}
    if draw(st.booleans()):
        params["total"] = draw(_number)
    if draw(st.booleans()):
        params["message"] = draw(st.text(max_size=12))
    if draw(st.booleans()):
        params = dict(reversed(list(params.items())))
    if draw(st.booleans()):
        del params["progressToken"]
    text = compact(params, draw(st.sampled_from([PROGRESS, "notifications/message", "x"])))
    if draw(st.booleans()):
        text = json.dumps(json.loads(text), ensure_ascii=draw(st.booleans()))  # spaced
    return text


@settings(max_examples=300, deadline=None)
@given(st.lists(notifications(), min_size=1, max_size=8))
def test_any_notification_reads_as_json_path_match_reads_it(texts):
    assert new_fields(texts).equals(old_fields(texts))
