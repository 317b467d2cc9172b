"""Column-wise SSE parsing of finished streams: many bodies in, one table of blocks out.

:class:`analyzer.decode.sse.SSEParser` is the reference: exact for every input, one Python call per
line.  A 100 MB capture holds over a million lines, and that per-line work was the largest cost
of pcap ingestion.  Most real bodies have a shape this module can parse with Polars string
kernels over all bodies at once, with the very same result:

* valid UTF-8 (then splitting lines after decoding is what the spec does anyway),
* no byte order mark at the start,
* every line ended the same way: all LF, or all CRLF (the two kinds are parsed in separate
  batches, each with its own line end, so byte offsets need no translation).

Any other body (a lone CR, mixed line ends, invalid UTF-8, a BOM, a ``retry`` beyond 64 bits)
goes to the reference parser.  ``tests/test_sse_columns.py`` checks that both paths agree on
every field, including the dispatch offsets, on generated bodies.

How the fast path follows WHATWG §9.2.6: a block is the text between blank lines, so the
text is split at two line ends (a line end followed by an empty line).  A piece can then begin
with one more line end: an empty line right after a dispatch, with no field before it, which
dispatches nothing.  The last piece has no blank line after it: the stream ended inside it
(``cut_off``), unless it holds no field.  Blocks of comments only produce no record.
"""
from __future__ import annotations

import polars as pl

from analyzer.decode.sse import parse_all

__all__ = ["COLUMNS", "parse"]

_BOM = b"\xef\xbb\xbf"
_INT64_DIGITS = 18  # any run of at most 18 ASCII digits fits in an int64

# key: the caller's body key; block: position of the record among the body's records, from 0;
# dispatch: byte offset in the body of the blank line that completed the block (None: cut_off);
# start: byte offset in the body of the block's first line, comment lines included (SSEEvent.offset);
# anomalies: codes in order of first appearance in the block, no duplicates.
COLUMNS = {
    "key": pl.Int64,
    "block": pl.Int64,
    "id": pl.String,
    "event": pl.String,
    "data": pl.String,
    "retry": pl.Int64,
    "fate": pl.String,
    "dispatch": pl.Int64,
    "start": pl.Int64,
    "anomalies": pl.List(pl.String),
}


def _fast_shape(raw: bytes) -> tuple[str, str] | None:
    """(text, its line end) when the fast path applies to this body, else None."""
    if raw[:3] == _BOM or (len(raw) < 3 and raw and _BOM.startswith(raw)):
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    crs = raw.count(b"\r")
    if not crs:
        return text, "\n"
    if crs != raw.count(b"\r\n") or crs != raw.count(b"\n"):
        return None
    return text, "\r\n"


def _reference(keys: list[int], bodies: list[bytes]) -> pl.DataFrame:
    rows: dict[str, list] = {name: [] for name in COLUMNS}
    for key, raw in zip(keys, bodies):
        for block, ev in enumerate(parse_all(raw)):
            rows["key"].append(key)
            rows["block"].append(block)
            rows["id"].append(ev.id)
            rows["event"].append(ev.event)
            rows["data"].append(ev.data)
            # beyond int64 the value cannot be stored; it is reported, not kept (as retry_invalid)
            big = ev.retry is not None and not -(2**63) <= ev.retry < 2**63
            rows["retry"].append(None if big else ev.retry)
            rows["fate"].append(ev.fate)
            rows["dispatch"].append(ev.end)
            rows["start"].append(ev.offset)
            codes = list(ev.anomalies)
            if big and "sse_retry_invalid" not in codes:
                codes.append("sse_retry_invalid")
            rows["anomalies"].append(codes)
    return pl.DataFrame(rows, schema=COLUMNS)


_E = pl.element()
_KNOWN = ("data", "event", "id", "retry")


def _named(field: str) -> pl.Expr:
    """Lines of the field ``field``: names are compared literally, a line is "data" or starts "data:"."""
    return _E.str.starts_with(field + ":") | (_E == field)


def _value() -> pl.Expr:
    """The value of a field line: after the first colon, less one leading space ("" without colon)."""
    return _E.str.slice(_E.str.find(":", literal=True) + 1).str.strip_prefix(" ").fill_null("")


def _columnwise(keys: list[int], texts: list[str], eol: str) -> tuple[pl.DataFrame, list[int]]:
    """The fast path for bodies whose lines all end with ``eol``: one row per piece, its lines as a
    list, each field read with list expressions (no explode of lines, no regrouping).  Lines are
    first sorted out by name, so values are cut only from the lines of their field."""
    step = len(eol)
    comment_or_empty = _E.str.starts_with(":") | (_E == "")
    unknown = ~comment_or_empty & ~pl.any_horizontal(_named(f) for f in _KNOWN)
    # "If the field value consists of only ASCII digits": tested on the line ("retry", a colon, at
    # most one space, digits); a NUL in an id line is in its value (the name has none)
    retry_ok = _E.str.contains(r"^retry: ?[0-9]+$")
    nul = _E.str.contains("\x00", literal=True)
    lines = pl.col("lines")
    pieces = (
        pl.DataFrame({"key": keys, "text": texts}, schema={"key": pl.Int64, "text": pl.String})
        .lazy()
        .select("key", piece=pl.col("text").str.split(eol + eol))
        .with_columns(n=pl.col("piece").list.len())
        .explode("piece")
        .with_columns(
            p=pl.int_range(pl.len()).over("key"),
            plen=pl.col("piece").str.len_bytes().cast(pl.Int64),
            lines=pl.col("piece").str.split(eol),
        )
        .with_columns(
            final=pl.col("p") == pl.col("n") - 1,
            # pieces are laid out piece, eol, eol, piece, ...: the blank line that completes a
            # piece starts one line end after it
            dispatch=(pl.col("plen") + 2 * step).cum_sum().over("key") - step,
            # a piece starts where the two line ends before it end; one more line end at its head is an
            # empty line (it dispatched nothing), and the block's first line comes after it
            start=(pl.col("plen") + 2 * step).cum_sum().over("key") - pl.col("plen") - 2 * step
            + pl.when(pl.col("piece").str.starts_with(eol)).then(step).otherwise(0),
            fields=lines.list.eval((~comment_or_empty).sum()).list.first(),
        )
        .drop("piece", "plen")
        .filter(pl.col("fields") > 0)  # no field line: nothing a client could act on, no record
        .with_columns(
            dispatch=pl.when(~pl.col("final")).then(pl.col("dispatch")),
            data=lines.list.eval(_E.filter(_named("data"))),
            events=lines.list.eval(_E.filter(_named("event"))),
            ids=lines.list.eval(_E.filter(_named("id"))),
            retries=lines.list.eval(_E.filter(_named("retry"))),
            unknown=lines.list.eval(unknown.any()).list.first(),
        )
        .with_columns(
            data=pl.col("data").list.eval(_value()),
            event=pl.col("events").list.eval(_value()).list.last(),
            # "If the field value does not contain U+0000 NULL, then set the last event ID buffer"
            id=pl.col("ids").list.eval(_E.filter(~nul)).list.eval(_value()).list.last(),
            retry_text=pl.col("retries").list.eval(_E.filter(retry_ok)).list.eval(_value()).list.last(),
            flagged=pl.col("unknown")
            | pl.col("ids").list.eval(nul.any()).list.first().fill_null(False)
            | pl.col("retries").list.eval((~retry_ok).any()).list.first().fill_null(False),
        )
        .drop("events", "ids", "retries", "unknown")
        .with_columns(
            block=pl.int_range(pl.len()).over("key"),
            event=pl.when(pl.col("event").is_null() | (pl.col("event") == "")).then(pl.lit("message")).otherwise(pl.col("event")),
            fate=pl.when(pl.col("final"))
            .then(pl.lit("cut_off"))
            .when(pl.col("data").list.len() > 0)
            .then(pl.lit("dispatched"))
            .otherwise(pl.lit("no_data")),
            data=pl.col("data").list.join("\n"),
            retry=pl.when(pl.col("retry_text").str.len_bytes() <= _INT64_DIGITS).then(pl.col("retry_text").str.to_integer(strict=False)),
            big_retry=pl.col("retry_text").str.len_bytes() > _INT64_DIGITS,
        )
        .collect()
    )
    # anomaly codes, in order of first appearance: only for the (rare) pieces that have any
    codes = (
        pieces.lazy()
        .filter(pl.col("flagged"))
        .select(
            "key",
            "p",
            anomalies=pl.col("lines").list.eval(
                pl.when(_named("id") & nul)
                .then(pl.lit("sse_id_contains_nul"))
                .when(_named("retry") & ~retry_ok)
                .then(pl.lit("sse_retry_invalid"))
                .when(unknown)
                .then(pl.lit("sse_unknown_field"))
                .drop_nulls()
                .unique(maintain_order=True)
            ),
        )
        .collect()
    )
    blocks = pieces.drop("lines").join(codes, on=["key", "p"], how="left", maintain_order="left").with_columns(
        anomalies=pl.col("anomalies").fill_null(pl.lit([], dtype=pl.List(pl.String)))
    )
    # A retry beyond what fits in int64: leave those bodies to the reference (rare and hostile).
    big = blocks.filter(pl.col("big_retry"))["key"].unique().to_list()
    out = blocks.filter(~pl.col("key").is_in(big)).select(pl.col(name).cast(dtype) for name, dtype in COLUMNS.items())
    return out, big


def parse(keys: list[int], bodies: list[bytes]) -> pl.DataFrame:
    """Every SSE block of each finished body, in order (see :data:`COLUMNS`).

    Same records as ``analyzer.decode.sse.parse_all`` on each body, plus the dispatch offset; the keys
    must be distinct.  Rows come grouped by key in the order the keys were given.
    """
    batches: dict[str, tuple[list[int], list[str]]] = {"\n": ([], []), "\r\n": ([], [])}
    slow: dict[int, bytes] = {}
    for key, raw in zip(keys, bodies):
        shape = _fast_shape(raw)
        if shape is None:
            slow[key] = raw
        else:
            batch = batches[shape[1]]
            batch[0].append(key)
            batch[1].append(shape[0])
    frames = []
    for eol, (fast_keys, texts) in batches.items():
        if not fast_keys:
            continue
        fast, big = _columnwise(fast_keys, texts, eol)
        texts.clear()
        frames.append(fast)
        if big:
            wanted = set(big)
            for key, raw in zip(keys, bodies):
                if key in wanted:
                    slow[key] = raw
    if slow:
        frames.append(_reference(list(slow), list(slow.values())))
    if not frames:
        return pl.DataFrame(schema=COLUMNS)
    order = pl.DataFrame({"key": keys, "_o": range(len(keys))}, schema={"key": pl.Int64, "_o": pl.Int64})
    return pl.concat(frames).join(order, on="key").sort("_o", "block").drop("_o")
