"""The compiled reader (analyzer/native: ``analyzer._native``, :mod:`analyzer.ingest.jsonl_native`) reads what the
Python paths read: the same rows of every ``sse`` line it takes, the same digests, and for an event whose data is a
JSON-RPC notification the method :func:`analyzer.decode.jsonrpc.event_rpc` reads -- and the whole read gives the same
tables with it and without it.  What it declines, the Python paths read; so every test here also checks that it
does take the common case (a test that compared two readers that both declined everything would prove nothing)."""
from __future__ import annotations

import io
import json
import os
import shutil
import threading
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import compiled
from analyzer.decode import jsonrpc
from analyzer.ingest import inputs, jsonl as ingest_jsonl, jsonl_columns, jsonl_machine, jsonl_native, jsonl_typed
from analyzer.ingest.reading import Reading
from analyzer.tables import compact_digest_expr, digest_expr
from test_fuzz import rows
from test_jsonl_columns import LINE, _CONNS, any_writer, damaged, opening

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "sample_logs").glob("**/*.jsonl"))
BUILT = compiled.core is not None

needs_native = pytest.mark.skipif(not BUILT, reason="analyzer._native is not built (no cargo at install): the Python paths read")


def test_the_compiled_reader_is_built_where_cargo_is():
    """CI and every machine with cargo build it (pyproject.toml): there the tests below must run, not skip."""
    if os.environ.get("CI") == "true" or shutil.which("cargo"):
        assert BUILT, "analyzer._native is missing: `pip install -e .` with cargo on PATH builds it (analyzer/native/README.md)"
        assert compiled.ENABLED or os.environ.get("MCP_SSE_AUDIT_NATIVE") == "0"


def test_a_core_built_before_the_code_is_set_aside_not_called():
    """An editable install pulled past a change of the core keeps its old build: the code must not call it (a missing
    function is an internal error in the middle of a read), and says why, once."""
    class Old:  # what a build before the ABI number looked like: sse_lines alone
        def sse_lines(self, lines):
            raise AssertionError("called")

    why = compiled.usable(Old())
    assert why is not None and "pip install -e ." in why and f"needs build {compiled.ABI}" in why
    if BUILT:
        assert compiled.usable(compiled.core) is None


def _decoded(lines: list, native: bool, monkeypatch) -> tuple[pl.DataFrame, dict]:
    monkeypatch.setattr(compiled, "ENABLED", native)
    return jsonl_typed.decode(lines)


def _lines(data: bytes) -> list:
    return data.split(b"\n")[:-1]


@needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(any_writer(), any_writer(), damaged(), LINE), max_size=40))
def test_a_batch_decodes_to_the_python_paths_rows(lines):
    """Every line, of any writer and any damage: the decoded ``sse`` rows (the compiled reader's and msgspec's for
    what it declined) and the records left to the per-line reader are the Python paths' alone."""
    batch = _lines(b"".join(lines))
    mp = pytest.MonkeyPatch()
    try:
        new, new_records = _decoded(batch, True, mp)
        old, old_records = _decoded(batch, False, mp)
    finally:
        mp.undo()
    assert new.select(old.columns).to_dicts() == old.to_dicts()
    assert new_records == old_records
    # each digest the compiled reader made is the Builder's
    made = new.filter(pl.col("digest").is_not_null())
    want = made.select(compact_digest_expr(digest_expr(pl.col("id"), pl.col("data").fill_null(""))))
    assert made.get_column("digest").to_list() == want.to_series().to_list()


@needs_native
def test_the_common_records_are_taken_with_digest_and_method():
    """The recorder's and any writer's common records are the compiled reader's (not declined to msgspec)."""
    note = '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t-1","progress":3}}'
    recs = [{"kind": "sse", "ts": "2026-11-13T09:00:01.250000Z", "conn": "c1", "id": "7", "event": None, "data": note, "retry": None},
            {"conn": "c1", "kind": "sse", "data": "hi", "ts": "2026-11-13T09:00:02Z"},
            {"kind": "sse", "ts": "2026-11-13T09:00:02Z", "conn": "c1", "data": None, "retry": 3000}]
    lines = [json.dumps(recs[0], separators=(",", ":")).encode(), json.dumps(recs[1]).encode(), json.dumps(recs[2], ensure_ascii=True).encode()]
    frame, maybe = jsonl_native.sse_frame(lines)
    assert frame.get_column("pos").to_list() == [0, 1, 2] and maybe == []
    assert frame.get_column("_method").to_list() == ["notifications/progress", None, None]
    assert frame.get_column("digest").null_count() == 0
    assert frame.get_column("ts").dt.microsecond().to_list()[0] == 250_000


# -- each event's JSON-RPC: the method the compiled reader reads is event_rpc's -----------------------------------

_KEY = st.sampled_from(["jsonrpc", "method", "id", "params", "result", "error", "m\\u0065thod", "i\\u0064"])
_SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=6), st.sampled_from(["notifications/progress", "tools/call", "protocolVersion", "2025-06-18"]))
_RAW = st.sampled_from(['{"protocolVersio\\u006e":"v"}', '{"_meta":{"io.modelcontextprotocol/protocolVersio\\u006e":"v"}}', '"\\ud800"', '"a\\udc00b"', '"\\ud83d\\ude00"', "1e400", "-0", "1E2", '"\\u0000"', "[]", "{}", '"\\/"',
                        '{"protocolVersion":"2025-06-18"}', '{"a":1,"a":2}', "[" * 130 + "]" * 130, "123456789012345678901234567890"])


@st.composite
def rpc_text(draw) -> str:
    """A text as an SSE event's data may hold: a JSON-RPC message in any spelling, with the values no reader should
    take lightly (lone surrogates, numbers past a float, deep nesting, a key twice, escaped keys), or no JSON at all."""
    parts = []
    for _ in range(draw(st.integers(0, 5))):
        key = draw(_KEY)
        value = draw(st.one_of(_SCALAR.map(json.dumps), _RAW,
                               st.dictionaries(st.sampled_from(["progressToken", "progress", "name", "_meta", "protocolVersion"]),
                                               _SCALAR, max_size=3).map(json.dumps)))
        parts.append(f'"{key}"{draw(st.sampled_from([":", ": ", " : "]))}{value}')
    sep = draw(st.sampled_from([",", ", ", ",\n"]))
    text = "{" + sep.join(parts) + "}"
    if draw(st.booleans()):
        text = '{"jsonrpc":"2.0","method":' + json.dumps(draw(st.sampled_from(["notifications/progress", "notifications/message", "é\\", "a\"b"]))) \
            + sep + text[1:] if parts else '{"jsonrpc":"2.0","method":"m"}'
    pre = draw(st.sampled_from(["", "", " ", "\n\t", "\u00a0", "\u2028", "\ufeff", "x"]))
    post = draw(st.sampled_from(["", "", " ", "\n", "\u00a0", "}", " x"]))
    return draw(st.one_of(st.just(pre + text + post), st.just("[" + text + "]"), st.text(max_size=8)))


SECRET_TEXTS = [
    '{"jsonrpc":"2.0","method":"notifications/message","params":{"token":"abc123456789","data":"Bearer abcdefghijkl"}}',
    '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"api_key":"sk-abcdefghijklmnop1234"}}}',
    '{"jsonrpc":"2.0","id":8,"result":{"content":[{"type":"text","text":"password=hunter22"}]}}',
    '{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p-1","progress":1}}',
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.abcdefghijklmnop", "plain text with a token=abc and more",
    '{"jsonrpc":"2.0","id":"s","method":"sampling/createMessage","params":{"session":"x","messages":[]}}',
]
_SECRETS = st.sampled_from(SECRET_TEXTS)


def _sse_line(data: str) -> bytes:
    rec = {"kind": "sse", "ts": "2026-01-01T00:00:00Z", "conn": "c1", "data": data}
    return json.dumps(rec, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _event_rpc(texts: list[str]) -> list[tuple]:
    rows_ = pl.DataFrame({"row": range(len(texts)), "data": texts, "fate": ["dispatched"] * len(texts)},
                         schema={"row": pl.Int64, "data": pl.String, "fate": pl.String})
    got = jsonrpc.event_rpc(rows_).parsed.filter(pl.col("kind") == "notification")
    by_row = {r["row"]: (r["kind"], r["rpc_id"], r["method"], r["protocol_version"]) for r in got.iter_rows(named=True)}
    return [by_row.get(i) for i in range(len(texts))]


@needs_native
@settings(max_examples=500, deadline=None)
@given(st.lists(rpc_text(), min_size=1, max_size=20))
def test_a_method_read_ahead_is_the_method_event_rpc_reads(texts):
    # (a text with a lone surrogate cannot be a Polars string: the per-line reader makes it U+FFFD first)
    texts = [t.encode("utf-8", "replace").decode() for t in texts]
    frame, _ = jsonl_native.sse_frame([_sse_line(t) for t in texts])
    assert frame.height == len(texts)
    want = _event_rpc(texts)
    for method, text, rpc in zip(frame.get_column("_method").to_list(), texts, want):
        if method is not None:  # read ahead: event_rpc reads the same notification, and so does extract
            assert rpc == ("notification", None, method, None), text
            assert [(m.kind, m.rpc_id, m.method, m.protocol_version) for m in jsonrpc._extract(text)] == [rpc], text
    # the same methods from a column (Builder.finish's, for any reader's events), sliced and with nulls between
    column = pl.Series([None, *texts, None], dtype=pl.String)[1:]
    got = jsonrpc.notification_methods(column).to_list()
    assert got == [*frame.get_column("_method").to_list(), None]


@needs_native
def test_the_methods_of_the_sdks_notifications_are_read_ahead():
    texts = ['{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1,"total":3}}',
             '{"method":"notifications/message","params":{"level":"info","data":{"x":[1,2.5e3,null]}},"jsonrpc":"2.0"}',
             '{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}',
             '{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled","params":{"requestId":4}}']
    frame, _ = jsonl_native.sse_frame([_sse_line(t) for t in texts])
    got = frame.get_column("_method").to_list()
    assert got == ["notifications/progress", "notifications/message", "notifications/tools/list_changed", "notifications/cancelled"]
    assert [(("notification", None, m, None)) for m in got] == _event_rpc(texts)
    # and what it leaves to event_rpc: a request (an id), a response, an initialize result, a batch, a lone surrogate
    left = ['{"jsonrpc":"2.0","id":3,"method":"sampling/createMessage","params":{}}', '{"jsonrpc":"2.0","id":1,"result":{}}',
            '{"jsonrpc":"2.0","method":"m","params":{"protocolVersion":"2025-06-18"}}', '[{"jsonrpc":"2.0","method":"m"}]',
            '{"jsonrpc":"2.0","method":"m","params":{"x":"\\ud800"}}', '{"jsonrpc":"2.0","method":5}',
            # a protocol version under a key spelled with an escape (extract reads it; the text does not show it)
            '{"jsonrpc":"2.0","method":"m","params":{"protocolVersio\\u006e":"v"}}',
            '{"jsonrpc":"2.0","method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersio\\u006e":"v"}}}']
    frame, _ = jsonl_native.sse_frame([_sse_line(t) for t in left])
    assert frame.get_column("_method").to_list() == [None] * len(left)


@needs_native
def test_the_method_read_ahead_keeps_the_last_of_each_key_and_takes_no_text_serde_json_refuses():
    """The method is read without a serde_json Value (91e16a0), so what a Value would keep and refuse is checked
    here: the last of a repeated key (as Python's json keeps it too), keys spelled with escapes, and every text a
    Value refuses (a number out of range, a lone surrogate deep inside, nesting past the limit, text after the
    object) left to event_rpc."""
    cases = [  # (text, the method read ahead or None)
        ('{"jsonrpc":"2.0","method":"a","method":"b"}', "b"),
        ('{"jsonrpc":"2.0","id":1,"id":null,"method":"m"}', "m"),
        ('{"jsonrpc":"2.0","id":null,"i\\u0064":1,"method":"m"}', None),
        ('{"jsonrpc":"2.0","meth\\u006fd":"m\\u00e9"}', "m\u00e9"),
        ('{"jsonrpc":"2.0","method":"m","method":5}', None),
        ('{"jsonrpc":"2.0","method":"m","params":{"protocolVersio\\u006e":1}}', "m"),
        ('{"jsonrpc":"2.0","method":"m","params":[1],"params":{"protocolVersio\\u006e":"v"}}', None),
        ('{"jsonrpc":"2.0","method":"m","params":{"protocolVersio\\u006e":"v"},"params":[1]}', "m"),
        ('{"jsonrpc":"2.0","method":"m","result":{"protocolVersio\\u006e":"v"}}', None),
        ('{"jsonrpc":"2.0","method":"m","params":{"_meta":{"io.modelcontextprotocol/protocolVersio\\u006e":"v"},"_meta":{}}}', "m"),
        ('{"jsonrpc":"2.0","method":"m","params":{"progress":1e400}}', None),
        ('{"jsonrpc":"2.0","method":"m","params":{"a":[{"b":"\\udc00"}]}}', None),
        ('{"jsonrpc":"2.0","method":"m","params":' + "[" * 200 + "]" * 200 + "}", None),
        ('{"jsonrpc":"2.0","method":"m"} x', None),
        ('{"jsonrpc":"2.0","method":"m",}', None),
    ]
    texts = [t for t, _ in cases]
    frame, _ = jsonl_native.sse_frame([_sse_line(t) for t in texts])
    assert frame.get_column("_method").to_list() == [m for _, m in cases]
    for (text, method), rpc in zip(cases, _event_rpc(texts)):
        if method is not None:  # what is read ahead is what event_rpc reads
            assert rpc == ("notification", None, method, None), text


# -- the whole read: the same tables with the compiled reader and without it -------------------------------------

def _read(data: bytes, native: bool, batch_lines: int | None = None, reading: Reading = Reading(compact=True)):
    mp = pytest.MonkeyPatch()
    mp.setattr(compiled, "ENABLED", native)
    if batch_lines:
        mp.setattr(ingest_jsonl, "BATCH_LINES", batch_lines)
    try:
        return ingest_jsonl.read("x.jsonl", io.BytesIO(data), reading)
    finally:
        mp.undo()


def _assert_same_read(data: bytes, batch_lines: int | None = None, reading: Reading = Reading(compact=True)) -> None:
    new, old = _read(data, True, batch_lines, reading), _read(data, False, batch_lines, reading)
    assert (new.records, new.rejected) == (old.records, old.rejected)
    for name in ("exchanges", "messages", "anomalies"):
        assert rows(getattr(new, name)) == rows(getattr(old, name)), name
    assert new.events_polars().to_dicts() == old.events_polars().to_dicts()


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(any_writer(), damaged(), LINE, rpc_text().map(lambda t: _sse_line(t) + b"\n"),
                          _SECRETS.map(lambda t: _sse_line(t) + b"\n")), max_size=40),
       st.sampled_from([None, 1, 3]), st.lists(st.sampled_from(_CONNS), unique=True), st.booleans())
def test_the_read_gives_the_same_tables_with_the_compiled_reader(lines, batch_lines, opened, compact):
    data = opening(opened) + b"".join(lines)
    _assert_same_read(data, batch_lines, Reading(compact=compact))


@needs_native
@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name)
def test_sample_logs_read_the_same_with_the_compiled_reader(path):
    _assert_same_read(path.read_bytes())
    _assert_same_read(path.read_bytes(), reading=Reading())


@needs_native
def test_sample_logs_are_mostly_the_compiled_readers():
    """Not a vacuous comparison: on the recorded logs, the compiled reader takes most sse lines."""
    taken = total = 0
    for path in SAMPLES:
        lines = _lines(path.read_bytes())
        frame, _ = jsonl_native.sse_frame(lines)
        taken += frame.height
        total += sum(b'"kind":"sse"' in raw or b'"kind": "sse"' in raw for raw in lines)
    assert total > 100 and taken >= 0.9 * total, (taken, total)


def test_without_the_compiled_reader_the_python_paths_read(monkeypatch):
    """MCP_SSE_AUDIT_NATIVE=0 (or no build): jsonl_columns' grammar and msgspec read the sse lines."""
    monkeypatch.setattr(compiled, "ENABLED", False)
    line = b'{"kind":"sse","ts":"2026-01-01T00:00:00Z","conn":"c1","data":"x"}'
    frame, records = jsonl_typed.decode([line])
    assert "_method" not in frame.columns and frame.height == 1 and records == {}
    assert jsonl_columns.sse_frame([line])[0].height == 1


@needs_native
@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parent.parent / "sample_logs").glob("**/*.har")), ids=lambda p: p.name)
def test_har_samples_read_the_same_with_the_compiled_core(path, monkeypatch):
    """A HAR's events get their notifications' methods from the compiled core in Builder.finish: the same tables."""
    got = {}
    for native in (True, False):
        monkeypatch.setattr(compiled, "ENABLED", native)
        got[native] = inputs.read_one(str(path), Reading(compact=True))
    for name in ("exchanges", "messages", "anomalies"):
        assert rows(getattr(got[True], name)) == rows(getattr(got[False], name)), name
    assert got[True].events_polars().to_dicts() == got[False].events_polars().to_dicts()


@needs_native
def test_the_single_pass_redacts_in_the_worker_what_the_builder_would_and_reads_json_rpc_from_the_raw_text():
    """The single pass (compact) redacts its plain events' data in the reader's worker thread: the same redacted
    text as at the end of the read, and the JSON-RPC (a request's params digest) still from the raw text."""
    data = opening(["c1"]) + b"".join(_sse_line(t) + b"\n" for t in SECRET_TEXTS)
    _assert_same_read(data)
    import threading

    from analyzer import redact

    threads, column = [], redact.column

    def seen(series):
        threads.append(threading.current_thread().name)
        return column(series)

    mp = pytest.MonkeyPatch()
    mp.setattr(redact, "column", seen)
    try:
        new = _read(data, True)
    finally:
        mp.undo()
    assert any(t.startswith("jsonl-columns") for t in threads), threads  # the events' text: in the reader's worker
    texts = new.events_polars().get_column("data").to_list()
    assert not any("hunter22" in t or "sk-abcdefghijklmnop1234" in t or "abc123456789" in t for t in texts), texts
    call = [r for r in rows(new.messages) if r["method"] == "tools/call"]
    raw = '{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"t","arguments":{"api_key":"sk-abcdefghijklmnop1234"}}}'
    assert call and call[0]["params_digest"] == jsonrpc.extract(raw)[0].params_digest


# -- one JSON-RPC text (a request's body, a response body): the compiled core's messages are extract's -------------

@needs_native
@pytest.mark.parametrize("redact", [True, False])
def test_an_event_the_core_read_is_not_read_for_its_method_again(redact, monkeypatch):
    """The core looks for each event's notification method as it reads the line; a null method there means "none",
    so the end of the read looks again only at the events it did not read (here: a time it does not vet, read per
    line) -- not at every event without a method (2M tiny events of plain text: a second pass over each, and the
    read's memory peak).  The messages are the Python paths' all the same."""
    note = '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info"}}'
    resp = '{"jsonrpc":"2.0","id":1,"result":{}}'
    recs = [{"kind": "request", "ts": "2026-01-01T00:00:00Z", "conn": "c", "method": "GET", "url": "http://h/mcp", "headers": {}},
            {"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": "c", "status": 200, "headers": {"content-type": "text/event-stream"}},
            {"kind": "sse", "ts": "2026-01-01T00:00:01Z", "conn": "c", "id": "1", "data": resp},
            {"kind": "sse", "ts": "2026-01-01T00:00:01Z", "conn": "c", "id": "2", "data": "plain text"},
            {"kind": "sse", "ts": "2026-01-01T00:00:01Z", "conn": "c", "id": "3", "data": note},
            {"kind": "sse", "ts": "2150-01-01T00:00:01Z", "conn": "c", "id": "4", "data": note},  # (the core's years end at 2099)
            {"kind": "sse", "ts": "2026-01-01T00:00:01+01:00", "conn": "c", "id": "5", "data": resp}]  # (and it reads UTC alone)
    data = b"".join(json.dumps(r).encode() + b"\n" for r in recs)
    looked: list[list] = []
    real = jsonrpc.notification_methods
    monkeypatch.setattr(jsonrpc, "notification_methods", lambda texts: looked.append(texts.to_list()) or real(texts))
    reading = Reading(compact=True, redact=redact)
    got, paths = ingest_jsonl._read("x.jsonl", io.BytesIO(data), reading, True)
    assert paths["columns"] == 3 and paths["per_line"] == 2  # (ids 1-3 the core's, 4 and 5 the per-line reader's)
    assert looked == [[note, resp]]
    monkeypatch.undo()
    _assert_same_read(data, reading=reading)
    kinds = rows(got.messages)
    assert [(m["ordinal"], m["kind"], m["method"]) for m in kinds] == [
        (0, "response", None), (2, "notification", "notifications/message"), (3, "notification", "notifications/message"),
        (4, "response", None)]


def _python_rows(text: str):
    """The Python path's messages as tuples, or the NotJsonRpc reason."""
    try:
        return [(m.kind, m.rpc_id, m.method, m.error_code, m.error_message, m.protocol_version, m.params_digest)
                for m in jsonrpc._extract(text)]
    except jsonrpc.NotJsonRpc as exc:
        return f"NotJsonRpc: {exc}"


_KEYS = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=4) | st.sampled_from(["_meta", "a", "B", "é", "\x00", "\u2028", "protocolVersion"])
_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False, allow_infinity=False),
                  st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6))
_VALUE = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=12)
_META = st.dictionaries(st.sampled_from(["progressToken", jsonrpc.META_VERSION, "x"]), st.one_of(st.text(max_size=5), st.integers(0, 9)), max_size=2)


@st.composite
def rpc_body(draw) -> str:
    """A request's or a response's body in any writer's spelling: ids of every JSON type, params of any shape (keys
    to sort, control characters and non-ASCII text to escape or not, numbers past 64 bits, floats, ``_meta``),
    errors and results, method of another type, and the members missing or null."""
    msg = {}
    for key, value in (("jsonrpc", st.just("2.0")), ("id", _LEAF | st.lists(_LEAF, max_size=2) | st.dictionaries(_KEYS, _LEAF, max_size=2)),
                       ("method", st.sampled_from(["tools/call", "initialize", "ping", "é/x"]) | _LEAF),
                       ("params", _VALUE | st.fixed_dictionaries({"name": st.text(max_size=4)}, optional={"_meta": _META, "protocolVersion": _LEAF, "arguments": _VALUE})),
                       ("result", _VALUE | st.fixed_dictionaries({"protocolVersion": _LEAF})),
                       ("error", _LEAF | st.fixed_dictionaries({}, optional={"code": _LEAF, "message": _LEAF}))):
        if draw(st.booleans()):
            msg[key] = draw(value)
    keys = list(msg)
    keys = draw(st.permutations(keys))
    text = json.dumps({k: msg[k] for k in keys}, ensure_ascii=draw(st.booleans()),
                      separators=draw(st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")])))
    pre, post = draw(st.sampled_from(["", " ", "\n\t", "\r\n"])), draw(st.sampled_from(["", " ", "\n", " x"]))
    return pre + text + post


_NO_FLOAT = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**64, 2**64), st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=6)),
                         lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4), max_leaves=16)


@st.composite
def rpc_request(draw) -> str:
    """A request the core digests: its params' canonical JSON (keys sorted at every depth, escapes) is the hash."""
    params = draw(_NO_FLOAT | st.dictionaries(_KEYS, _NO_FLOAT, max_size=5) | st.fixed_dictionaries({"_meta": _META}, optional={"a": _NO_FLOAT}))
    msg = {"jsonrpc": "2.0", "id": draw(st.integers(-2**63, 2**64 - 1) | st.text(max_size=4) | st.booleans()),
           "method": draw(st.text(max_size=6)), "params": params}
    return json.dumps(msg, ensure_ascii=draw(st.booleans()), separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])))


@needs_native
@settings(max_examples=1500, deadline=None)
@given(st.one_of(rpc_body(), rpc_request(), rpc_request(), rpc_text(), st.text(max_size=10)))
def test_a_body_the_core_reads_has_extracts_messages(text):
    """What the core takes it reads as the Python path does, to the params digest's canonical JSON; whatever the
    Python path calls no JSON-RPC (and says why) the core leaves to it."""
    got = compiled.core.rpc_messages(text)
    if got is not None:
        assert got == _python_rows(text), text


@needs_native
def test_the_common_bodies_are_the_cores():
    """The core reads the SDKs' requests, responses and errors (the comparison above is not between two readers that
    both leave everything to Python), and leaves what only Python's json writes or reads its own way."""
    texts = [json.dumps(m, separators=sep, ensure_ascii=False) for m in (
        {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "add", "arguments": {"a": 1, "b": "é\n"}, "_meta": {"progressToken": 3}}},
        {"jsonrpc": "2.0", "id": "srv-1", "method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 5}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "3"}], "isError": False}},
        {"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18", "capabilities": {}}},
        {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Bad Request: No valid session ID provided"}},
    ) for sep in ((",", ":"), (", ", ": "))] + ["", " \n"]
    for text in texts:
        got = compiled.core.rpc_messages(text)
        assert got is not None and got == _python_rows(text), text
    # Python's own readings: a float in params (its repr), an id of -0 (0 in Python, -0.0 in serde_json), an integer
    # past 64 bits, a batch, a lone surrogate, a method that is no string (extract says why), NaN
    for text in ('{"id":1,"method":"m","params":{"x":1.5}}', '{"id":-0,"result":{}}', '{"id":1,"method":"m","params":[123456789012345678901]}',
                 '[{"id":1,"result":{}}]', '{"id":1,"method":"\ud800"}', '{"id":1,"method":5}', '{"id":1,"result":NaN}',
                 '{"id":1,"error":{"code":1e2}}', '\u00a0{"id":1,"result":{}}', '{"jsonrpc":"2.0"}', "[" * 200 + "]" * 200):
        assert compiled.core.rpc_messages(text) is None, text


@needs_native
def test_the_bodies_messages_are_the_same_with_the_compiled_core(monkeypatch):
    """Builder._messages reads every body through extract_rows: with the core and without it, the same messages and
    the same jsonrpc_invalid anomalies, in order (the request and response bodies of the JSONL samples)."""
    from analyzer.tables import Builder
    from analyzer.anomalies import AnomalyLog

    texts = []
    for path in SAMPLES:
        for line in path.read_bytes().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("body" if rec.get("kind") == "request" else "data"), str) and rec.get("kind") in ("request", "body"):
                texts.append(rec["body" if rec["kind"] == "request" else "data"])
    assert len(texts) > 100
    texts += ["not json", '{"id":1,"method":5}', "[1]", '{"id":1,"method":"m","params":{"x":0.1}}']
    got = {}
    for native in (True, False):
        monkeypatch.setattr(compiled, "ENABLED", native)
        log = AnomalyLog("s")
        b = Builder("s", log, True, True, None)
        for i, t in enumerate(texts):
            b._messages(i, "request_body", None, "client_to_server", t, f"line {i}")
        b._flush_messages()
        got[native] = ([c.to_pylist() for t in b._message_chunks for c in t.columns], log.rows, log.counts)
    assert got[True] == got[False]
    assert got[True][2].get("jsonrpc_invalid") == 3  # (not json, a method 5, [1]: Python's reasons, in order)
    taken = sum(compiled.core.rpc_messages(t) is not None for t in texts)
    assert taken > len(texts) * 0.9, (taken, len(texts))


# -- the blocks' lines: spans of one buffer (jsonl.Lines) where the core is built, the same lines as bytes.split ----

def _flat(blocks) -> tuple[list, int]:
    """The lines of _lines_in_blocks' blocks (a Blank run as that many empty lines), and how many blocks were Lines."""
    out, spans = [], 0
    for block in blocks:
        if type(block) is ingest_jsonl.Blank:
            out += [b""] * block
            continue
        spans += type(block) is ingest_jsonl.Lines
        out += list(block)
    return out, spans


@needs_native
@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from([b"", b"a", b"abcdefgh", b"x" * 30, b"\r", b"{}", b" \t", b"\xff\xfe"]), max_size=40).map(lambda xs: b"\n".join(xs)),
       st.booleans(), st.integers(1, 40), st.integers(1, 64), st.sampled_from([4, 16, 1 << 16]))
def test_a_blocks_lines_are_the_same_as_spans_of_its_bytes(data, eol, limit, block, blank_run):
    """Carried across blocks, too long to keep (an int), blank runs, CR, no newline at the end: the same lines, in
    the same blocks' order, with the core's newline search and with bytes.split."""
    data += b"\n" if eol else b""
    got = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ingest_jsonl, "READ_BLOCK", block)
        mp.setattr(ingest_jsonl, "BLANK_RUN", blank_run)
        for native in (True, False):
            mp.setattr(compiled, "ENABLED", native)
            got[native] = _flat(ingest_jsonl._lines_in_blocks(io.BytesIO(data), limit))
    assert got[True][0] == got[False][0]
    assert got[False][1] == 0


@needs_native
def test_a_log_of_records_comes_as_spans_and_a_long_line_as_before(monkeypatch):
    """(So the comparison above is not between two bytes.split readers): a log's blocks are Lines where the core is
    built, and a block with a line over the limit is split as before, the line an int."""
    data = b"".join(b'{"kind":"close","conn":"c%d","reason":"eof"}\n' % i for i in range(50))
    monkeypatch.setattr(ingest_jsonl, "READ_BLOCK", 256)
    lines, spans = _flat(ingest_jsonl._lines_in_blocks(io.BytesIO(data), 1 << 20))
    assert lines == data.split(b"\n")[:-1] and spans >= 5
    long = data[:200] + b"x" * 300 + b"\n" + data[200:]
    blocks = list(ingest_jsonl._lines_in_blocks(io.BytesIO(long), 100))
    assert any(type(b) is list and any(type(x) is int for x in b) for b in blocks)
    assert _flat(blocks)[0] == [x if len(x) <= 100 else len(x) + 1 for x in long.split(b"\n")[:-1]]


@needs_native
def test_lines_index_slice_and_size_as_a_list_of_their_bytes():
    data = b"ab\n\ncde\r\nf\n"
    starts, longest = compiled.core.line_starts(data)
    lines = ingest_jsonl.Lines(data, starts, 0, len(starts) // 8 - 1)
    want = [b"ab", b"", b"cde\r", b"f"]
    assert list(lines) == want and len(lines) == 4 and longest == 4
    assert [lines[i] for i in range(4)] == want and lines[-1] == b"f"
    part = lines[1:3]
    assert list(part) == want[1:3] and part[0] == b"" and part.nbytes() == len(b"\ncde\r\n")
    assert list(part[1:]) == [b"cde\r"] and list(lines[3:10]) == [b"f"] and len(lines[4:]) == 0
    with pytest.raises(IndexError):
        part[2]
    # the core reads a Lines batch as the list of its lines
    sse = [_sse_line(t) for t in ('{"jsonrpc":"2.0","method":"m"}', "x", "")] + [b'{"kind":"request"}', b"not json"]
    data = b"\n".join(sse) + b"\n"
    starts, _ = compiled.core.line_starts(data)
    for lo, hi in ((0, 5), (1, 4), (2, 2)):
        spans = ingest_jsonl.Lines(data, starts, lo, hi)
        a, _ = jsonl_native.sse_frame(spans)
        b, _ = jsonl_native.sse_frame(list(spans))
        assert a.equals(b) and a.height == max(0, min(hi, 3) - lo)
    with pytest.raises(ValueError):
        compiled.core.sse_lines(ingest_jsonl.Lines(data, starts, 0, 9))


# -- the exchange records read ahead (request, response, body, close) in the compact reading -----------------------

def _paths(data: bytes, batch_lines: int | None = None) -> dict[str, int]:
    mp = pytest.MonkeyPatch()
    if batch_lines:
        mp.setattr(ingest_jsonl, "BATCH_LINES", batch_lines)
    try:
        return ingest_jsonl._read("x.jsonl", io.BytesIO(data), Reading(compact=True), True)[1]
    finally:
        mp.undo()


def _request(**fields) -> dict:
    return {"kind": "request", "ts": "2026-01-01T00:00:01Z", "conn": "c1", "method": "POST", "url": "http://h/mcp",
            "headers": {"mcp-session-id": "s1"}, "body": '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}',
            **fields}


_SSE_AFTER = b'{"kind":"sse","ts":"2026-01-01T00:00:02Z","conn":"c1","id":"1","data":"{\\"jsonrpc\\":\\"2.0\\",\\"method\\":\\"m\\"}"}\n'

# (the line under test, whether the core takes it): each one around a rule of the per-line reader's that the core
# must keep or leave to it
EXCHANGE_LINES = [
    (json.dumps(_request()), True),
    (json.dumps(_request(), separators=(", ", ": ")), True),
    (json.dumps(_request(headers={"Mcp-Session-Id": "S", "Last-Event-ID": "7", "MCP-Protocol-Version": "2025-06-18", "User-Agent": "ua"})), True),
    (json.dumps(_request(headers={"Mcp-Session-Id": "a", "mcp-session-id": "b"})), False),  # one name twice: _headers chooses
    ('{"kind":"request","ts":"2026-01-01T00:00:01Z","conn":"c1","method":"GET","headers":{"mcp-session-id":"a","mcp-session-id":"b"}}', False),
    (json.dumps(_request(headers={"Host": "h", "host": "h2", "mcp-session-id": "s"})), True),  # (a name the reading does not keep, twice)
    (json.dumps(_request(headers={"mcp-session-id": ["a", "b"]})), False),
    (json.dumps(_request(headers={"x": 1, "mcp-session-id": "s"})), False),
    (json.dumps(_request(headers={"MCP-SESSİON-ID": "s"}, ensure_ascii=False)), False),  # not ASCII: Python's lower() decides
    (json.dumps(_request(headers={"\u212aeep": "s"})), False),  # (a Kelvin sign lower-cases to an ASCII k in Python)
    (json.dumps(_request(headers=None)), True),
    (json.dumps(_request(headers=["x"])), False),
    (json.dumps(_request(url=5)), True),
    (json.dumps(_request(url={"a": [1, 2.5]})), True),
    (json.dumps(_request(url="http://u:p@h/x?token=abcdef123")), True),
    (json.dumps(_request(method="ß")), True),
    (json.dumps(_request(method=None)), False),
    (json.dumps(_request(body=None)), True),
    (json.dumps(_request(body=5)), False),
    (json.dumps(_request(body="not json")), True),
    (json.dumps(_request(body='{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"api_key":"sk-abcdef123456"}}}')), True),
    (json.dumps(_request(body="password=hunter22 and token=abcdefgh1234")), True),
    (json.dumps(_request(ts=None)), True),
    (json.dumps({k: v for k, v in _request().items() if k != "ts"}), True),
    (json.dumps(_request(ts="2026-01-01T00:00:01+00:00")), False),
    (json.dumps(_request(ts="2026-02-30T00:00:01Z")), False),
    (json.dumps(_request(ts="2026-01-01T23:59:60Z")), False),
    (json.dumps(_request(ts=5)), False),
    (json.dumps(_request(conn=5)), False),
    (json.dumps(_request(kind="requests")), False),
    ('{"kind":"r\\u0065quest","ts":"2026-01-01T00:00:01Z","conn":"c1","method":"GET"}', True),
    ('{"kind":"request","ts":"2026-01-01T00:00:01Z","conn":"c1","method":"GET","method":"POST"}', False),
    (json.dumps(_request(client_addr="\ud800")), False),  # a lone surrogate escape in a field no one reads
    (json.dumps(_request(client_addr="\ud83d\ude00")), False),  # (a pair: the per-line reader's look, too)
    (json.dumps(_request(client_addr=float("nan"))), False),
    (json.dumps(_request(client_addr=[[[[1]]]] * 3)), True),
    (json.dumps(_request(client_addr="x" * 3 + "\u0000")), True),
    (json.dumps(_request(client_addr="[" * 600)), True),  # (brackets in a string: json.loads reads it, to the same)
    (json.dumps(_request(deep=json.loads("[" * 200 + "]" * 200))), False),
    (json.dumps(_request()) + json.dumps(_request()), False),
    (json.dumps(_request()) + "  \r", True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200, "headers": {"Content-Type": "text/event-stream", "Mcp-Session-Id": "s9"}}), True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream", "x-mcp-replay-epoch": "e2"}}), True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream", "content-encoding": "gzip"}}), False),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream", "content-encoding": ""}}), True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200, "decoded": None, "headers": {}}), True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 2**31 - 1, "headers": {}}), True),
    (json.dumps({"kind": "response", "conn": "c1", "status": 2**31, "headers": {}}), False),
    (json.dumps({"kind": "response", "conn": "c1", "status": -1, "headers": {}}), False),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200.0, "headers": {}}), False),
    (json.dumps({"kind": "response", "conn": "c1", "status": True, "headers": {}}), False),
    (json.dumps({"kind": "response", "conn": "c1", "status": 200}), True),
    (json.dumps({"kind": "response", "conn": "c2", "status": 200}), True),  # an orphan: no exchange on c2
    (json.dumps({"kind": "body", "conn": "c1", "data": '{"jsonrpc":"2.0","id":1,"result":{}}'}), True),
    (json.dumps({"kind": "body", "conn": "c1", "data": '{"jsonrpc":"2.0","id":1,"result":{}}', "base64": False}), True),
    (json.dumps({"kind": "body", "conn": "c1", "data": "eyJqc29ucnBjIjoiMi4wIn0=", "base64": True}), False),
    (json.dumps({"kind": "body", "conn": "c1", "data": "x", "base64": "yes"}), False),
    (json.dumps({"kind": "body", "conn": "c1", "data": 5}), False),
    (json.dumps({"kind": "body", "conn": "c1", "data": "token=abcdef12345 and more"}), True),
    (json.dumps({"kind": "close", "conn": "c1", "ts": "2026-01-01T00:00:03.25Z", "reason": "eof", "by": "server"}), True),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "reset", "by": ["client"]}), True),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "capture_end", "by": 3}), True),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "bogus"}), False),
    (json.dumps({"kind": "close", "conn": "c1", "reason": ["eof"]}), False),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "eof", "decoding": "truncated", "decoding_detail": "x"}), False),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "eof", "decoding": "fine"}), True),
    (json.dumps({"kind": "close", "conn": "c1", "reason": "eof", "decoding": 3}), True),
    (json.dumps({"kind": "close", "conn": "c9", "reason": "eof"}), True),  # an orphan
]


@needs_native
@pytest.mark.parametrize(("line", "taken"), EXCHANGE_LINES, ids=range(len(EXCHANGE_LINES)))
def test_an_exchange_record_is_read_ahead_only_where_the_per_line_reader_reads_it_alike(line, taken):
    """Each line among the records a log has around it (an exchange open on c1 by keep-alive, an event after it, a
    second exchange that the next request completes): the same tables with the core and without it, and the core
    takes the line or leaves it as the rule says (a test where it took nothing would compare nothing)."""
    before = json.dumps(_request(conn="c1", body=None)).encode() + b"\n" + json.dumps(
        {"kind": "response", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream"}}).encode() + b"\n"
    after = _SSE_AFTER + json.dumps(_request(conn="c1", ts="2026-01-01T00:00:05Z")).encode() + b"\n"
    data = before + line.encode("utf-8", "surrogatepass") + b"\n" + after
    for batch_lines in (None, 1, 2):
        _assert_same_read(data, batch_lines)
    assert _paths(data)["compiled"] == 3 + taken, line


@needs_native
def test_an_exchange_record_that_is_not_utf8_or_starts_with_a_bom_is_the_per_line_readers():
    line = json.dumps(_request(client_addr="é"), ensure_ascii=False).encode()
    for data, taken in ((line.replace("é".encode(), b"\xff") + b"\n", 0), (b"\xef\xbb\xbf" + line + b"\n", 0), (line + b"\n", 1)):
        _assert_same_read(data)
        assert _paths(data)["compiled"] == taken


from test_jsonl_columns import exchange_record  # noqa: E402  (the generator of issue #42's exchange logs)


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(exchange_record(), max_size=40), st.sampled_from([None, 1, 2, 7]), st.lists(st.sampled_from(_CONNS), unique=True))
def test_logs_of_exchange_records_read_the_same_with_the_core_reading_them_ahead(lines, batch_lines, opened):
    """Random interleavings of requests (keep-alive), responses, bodies, closes, orphans and damaged lines: the compact
    reading's tables with the core and without it, row for row, anomaly for anomaly."""
    _assert_same_read(opening(opened) + b"".join(lines), batch_lines)


@needs_native
def test_sample_logs_exchange_records_are_mostly_read_ahead():
    """Not a vacuous comparison: on the recorded logs, the core reads most request, response, body and close lines."""
    paths = [_paths(path.read_bytes()) for path in SAMPLES]
    compiled_, per_line = sum(p["compiled"] for p in paths), sum(p["per_line"] for p in paths)
    assert compiled_ > 1000 and compiled_ >= 0.8 * (compiled_ + per_line), (compiled_, per_line)


# -- the connection state machine over a batch's columns (jsonl_machine.run) ------------------------------------------

def _by_machine(data: bytes, machine: bool, batch_lines: int | None, reading: Reading):
    """The compact reading with the core, its exchange records read by ``jsonl_machine.run`` where a batch allows it
    (``machine``) or one tuple at a time (``_Reader.compiled``) everywhere; and how many batches the machine read."""
    mp = pytest.MonkeyPatch()
    ran = []
    if batch_lines:
        mp.setattr(ingest_jsonl, "BATCH_LINES", batch_lines)
    if machine:
        real = jsonl_machine.run
        mp.setattr(jsonl_machine, "run", lambda *a: (ran.append(1), real(*a))[1])
    else:
        mp.setattr(jsonl_machine, "settled", lambda *a: False)
    try:
        return ingest_jsonl.read("x.jsonl", io.BytesIO(data), reading), len(ran)
    finally:
        mp.undo()


def _assert_same_machine(data: bytes, batch_lines: int | None, reading: Reading) -> int:
    (new, ran), (old, _) = _by_machine(data, True, batch_lines, reading), _by_machine(data, False, batch_lines, reading)
    assert (new.records, new.rejected) == (old.records, old.rejected)
    for name in ("exchanges", "messages", "anomalies"):
        assert rows(getattr(new, name)) == rows(getattr(old, name)), name
    assert new.events_polars().to_dicts() == old.events_polars().to_dicts()
    return ran


@needs_native
@settings(max_examples=300, deadline=None)
@given(st.lists(exchange_record(), max_size=40), st.sampled_from([None, 1, 2, 7]), st.lists(st.sampled_from(_CONNS), unique=True),
       st.booleans())
def test_the_state_machine_over_a_batchs_columns_gives_the_per_record_tables(lines, batch_lines, opened, redact):
    """Random interleavings of requests (keep-alive across batches), responses (one or several), bodies under any
    content type, closes, orphans, cut-off and damaged lines: the batches the machine reads (every slow line an
    exchange record the core vets, or a line that changes no state) give the tables of the per-record state machine,
    row for row, anomaly for anomaly, message for message, with and without redaction."""
    _assert_same_machine(opening(opened) + b"".join(lines), batch_lines, Reading(compact=True, redact=redact))


def _exchanges(n: int) -> bytes:
    """``n`` POST exchanges (answered with JSON, some closed, the others ended by the next request on their conn), a
    GET stream open throughout with events between them, a cut-off event, a blank line, an orphan body, bodies that are
    no JSON-RPC and JSON-RPC batches (the core leaves those to the Python path)."""
    out = [dict(kind="request", ts="2026-01-01T00:00:01Z", conn="g", method="get", url="http://x/mcp?token=abcdef123456",
                headers={"mcp-session-id": "s", "last-event-id": "3"}),
           dict(kind="response", ts="2026-01-01T00:00:01Z", conn="g", status=200, headers={"content-type": "text/event-stream"})]
    for i in range(n):
        c = f"c{i % 5}"
        out += [dict(kind="request", ts=f"2026-01-01T00:00:{i % 60:02d}.{i:06d}Z", conn=c, method="POST", url="http://x/mcp",
                     headers={"mcp-session-id": "s", "User-Agent": "python-httpx/0.28"},
                     body=json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "t", "arguments": {"api_key": "sk-abcdef123456"}}})),
                dict(kind="sse", ts="2026-01-01T00:00:02Z", conn="g", id=str(i), data=json.dumps({"jsonrpc": "2.0", "method": "notifications/message"})),
                dict(kind="response", ts="2026-01-01T00:00:02Z", conn=c, status=200, headers={"Content-Type": "application/json; charset=utf-8"}),
                dict(kind="body", ts="2026-01-01T00:00:02Z", conn=c, data=(
                    "not json" if i % 7 == 3  # (jsonrpc_invalid, at its line among the others)
                    else json.dumps([{"jsonrpc": "2.0", "id": i, "result": {}}, {"jsonrpc": "2.0", "method": "m"}]) if i % 11 == 5  # (a batch: Python's)
                    else json.dumps({"jsonrpc": "2.0", "id": i, "result": {}})))]
        if i % 4 == 0:
            out.append(dict(kind="close", ts="2026-01-01T00:00:03Z", conn=c, reason="eof", by="server"))
        if i % 9 == 0:
            out.append(dict(kind="sse", ts="2026-01-01T00:00:02Z", conn="g", id="x", data="{\"jsonr", truncated=True))
    out.append(dict(kind="body", conn="nobody", data="{}"))
    return b"\n".join(json.dumps(r).encode() for r in out[:40]) + b"\n\n" + b"\n".join(json.dumps(r).encode() for r in out[40:]) + b"\n"


@needs_native
@pytest.mark.parametrize("batch_lines", [None, 3, 16, 64])
def test_the_state_machine_reads_every_batch_of_a_log_of_exchanges(batch_lines):
    """Not a vacuous comparison: on a log of exchanges, events, a cut-off event, a blank line and an orphan, every
    batch is read by the machine, to the per-record tables (secrets in URLs and bodies redacted alike)."""
    data = _exchanges(120)
    ran = _assert_same_machine(data, batch_lines, Reading(compact=True))
    batches = -(-data.count(b"\n") // (batch_lines or ingest_jsonl.BATCH_LINES))
    assert ran >= batches - 1, (ran, batches)  # (a batch of plain sse records alone has no slow line: nothing to read)
    got = _by_machine(data, True, batch_lines, Reading(compact=True))[0]
    assert got.exchanges.num_rows == 121 and "sk-abcdef123456" not in str(rows(got.exchanges))
    codes = [a["code"] for a in rows(got.anomalies)]
    assert codes.count("jsonrpc_invalid") == 17 and codes.count("jsonl_orphan_record") == 1, codes
    assert sum(m["kind"] == "notification" and m["origin"] == "response_body" for m in rows(got.messages)) == 9  # (i % 11 == 5 and not i % 7 == 3)


@needs_native
def test_a_batch_of_exchanges_is_parsed_by_the_decoder_and_one_of_events_by_the_main_thread(monkeypatch):
    """Where the core parses a batch's exchange records: in the decoder's thread when the batch is mostly exchange
    records (its own pass was short), in the main thread when it is mostly events (the decoder is the busier); the
    tables the same either way."""
    where = []
    real = jsonl_native.exchange_frame
    monkeypatch.setattr(jsonl_native, "exchange_frame", lambda *a: (where.append(threading.current_thread().name), real(*a))[1])
    events = b"".join(json.dumps(dict(kind="sse", ts="2026-01-01T00:00:02Z", conn="g", id=str(i), data="x")).encode() + b"\n"
                      for i in range(200))
    for data, thread in ((_exchanges(60), "jsonl-columns"), (_exchanges(4) + events, "MainThread")):
        where.clear()
        for batch_lines in (None, 50):
            _assert_same_machine(data, batch_lines, Reading(compact=True))
        assert where and where[0].startswith(thread), where


@needs_native
def test_sample_logs_batches_are_mostly_the_machines():
    """On the recorded logs, most batches with exchange records are read by the machine, to the same tables."""
    ran = sum(_assert_same_machine(path.read_bytes(), None, Reading(compact=True)) for path in SAMPLES)
    assert ran >= 0.9 * len(SAMPLES), ran


# -- the names' digests (analyzer/document/names.py digests) ---------------------------------------------------------

@needs_native
@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(st.characters(codec=None, min_codepoint=0, max_codepoint=0x10FFFF), max_size=60)
                | st.just("\ud800\udfff") | st.just(""), max_size=30))
def test_the_cores_name_digests_are_pythons(texts):
    """A reconnect's or a session's name is kept across runs: the core's sha256 in base32 must be hashlib's, for any
    text (lone surrogates are hashed as Python's surrogatepass writes them), at both widths."""
    from analyzer.document import names

    got = {chars: names.digests(texts, chars) for chars in (names.DIGEST_CHARS, names.HEAD_CHARS)}
    assert got[names.DIGEST_CHARS] == [names.digest(t) for t in texts]
    assert got[names.HEAD_CHARS] == [names.head(t) for t in texts]
    assert all(len(d) == 52 for d in got[names.DIGEST_CHARS])


def test_name_digests_without_the_core(monkeypatch):
    from analyzer.document import names

    monkeypatch.setattr(compiled, "ENABLED", False)
    assert names.digests(["a", ""], names.HEAD_CHARS) == [names.head("a"), names.head("")]
    # (the digest of the empty text: base32 of sha256(b"") by the standard library)
    assert names.digests([""]) == [__import__("base64").b32encode(__import__("hashlib").sha256(b"").digest()).decode().lower()[:52]]
    with pytest.raises(ValueError):
        names.digests(["a"], 20)
