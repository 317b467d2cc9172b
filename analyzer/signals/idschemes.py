"""Which event-id scheme a session's server uses, and how to read one id.

The official SDKs make very different ids (seen in the SDKs' own event stores and in the real recordings
of sample_logs/, whose README says how each was made):

| scheme | example | made by | contiguous |
|---|---|---|---|
| ``integer`` | ``17`` | a store with a counter per stream | yes, per stream |
| ``integer_shared`` | ``17`` | python-sdk test/story stores: one counter for all streams of a session | yes, once the other streams' ids are taken out |
| ``stream_seq`` | ``K7Q…ZC_4`` | go-sdk ``<streamID>_<idx>`` | yes, per stream prefix |
| ``csharp`` | ``c2Vz:c3Ry:12`` | csharp-sdk ``b64(session):b64(stream):seq`` | yes, per stream prefix |
| ``ts_stream_ms`` | ``<uuid>_1764671400123_k3j9a0x1`` | typescript-sdk example store ``<stream>_<ms>_<rand>`` | no (time + random); the prefix names the stream |
| ``uuid`` | ``f44bb41b-…`` | python-sdk example store | no |
| ``opaque`` | anything else | | no |

A scheme is chosen per session only when *every* id the session used fits it,
so one odd id turns a session opaque rather than into false arithmetic.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.keys import where_varies
from analyzer.formatted import formatted

INT_ID = r"^[0-9]{1,18}$"  # fits in Int64; longer digit strings are opaque
CSHARP_ID = r"^([A-Za-z0-9+/]+={0,2}:[A-Za-z0-9+/]+={0,2}):([0-9]{1,18})$"
TS_ID = r"^(.*)_([0-9]{12,14})_([0-9a-z]{1,16})$"
STREAM_SEQ_ID = r"^(.*)_([0-9]{1,18})$"
UUID_ID = r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"

# schemes whose ids can be compared by arithmetic (reference cases 2-4)
CONTIGUOUS = ("integer", "integer_shared", "stream_seq", "csharp")
# every scheme ``classify`` names, and "none" (a session without ids): the events carry theirs as an Enum
# of these, one byte a row, not a 16-byte string view (2M events: 30 MiB)
SCHEMES = ("integer", "integer_shared", "stream_seq", "csharp", "ts_stream_ms", "uuid", "opaque", "none")
# separator between stream prefix and sequence when a lost id is written back out
SEPARATOR = {"integer": "", "integer_shared": "", "stream_seq": "_", "csharp": ":"}


def classify(ev: pl.DataFrame) -> pl.DataFrame:
    """One row per session: ``id_scheme``.  ``ev`` needs session (its string, or any key of it: streams.build
    passes the integer ``sk``), stream, id, has_id."""
    # An integer id ("17") fits no other scheme (each of those has a ":", "_" or "-"), and integers win: so every
    # id is asked the integer question only, and the other four patterns are run over the ids that are not
    # integers alone -- a session with an integer among other ids fits none of the other schemes either.  (The
    # five patterns over every id: 0.08 s of 0.12 at 1M events, 78% of them integers.)
    ids = ev.lazy().filter(pl.col("has_id")).select("session", "stream", "id")
    flagged = ids.with_columns(is_int=pl.col("id").str.contains(INT_ID)).collect()
    per = flagged.group_by("session").agg(
        all_int=pl.col("is_int").all(),
        any_int=pl.col("is_int").any(),
        streams=pl.col("stream").n_unique(),
    )
    others = (
        flagged.lazy().filter(~pl.col("is_int"))
        .group_by("session")
        .agg(
            all_cs=pl.col("id").str.contains(CSHARP_ID).all(),
            all_ts=pl.col("id").str.contains(TS_ID).all(),
            all_go=pl.col("id").str.contains(STREAM_SEQ_ID).all(),
            all_uuid=pl.col("id").str.contains(UUID_ID).all(),
        )
        .collect()
    )
    del flagged
    # (a session of integers only has no row in ``others``: its nulls are never read, it is "integer" first)
    per = per.join(others, on="session", how="left").with_columns(
        pl.col("all_cs", "all_ts", "all_go", "all_uuid") & ~pl.col("any_int"))
    # integers: one counter per stream repeats values across streams; a shared counter never does.  That
    # is asked only of a session whose ids are all integers on several streams (one stream of 2M events:
    # nothing to group), and only the ids that may be on two streams are grouped exactly (keys.where_varies)
    several = per.filter(pl.col("all_int") & (pl.col("streams") > 1)).select("session")
    collisions = (
        where_varies(ids.join(several.lazy(), on="session", how="semi"), ["session", "id"], "stream")
        .group_by("session", "id")
        .agg(pl.col("stream").n_unique().alias("n"))
        .group_by("session")
        .agg(collide=(pl.col("n") > 1).any())
        .collect()
    )
    return per.join(collisions, on="session", how="left").select(
        "session",
        id_scheme=pl.when(pl.col("all_int") & (pl.col("streams") > 1) & ~pl.col("collide").fill_null(False))
        .then(pl.lit("integer_shared"))
        .when(pl.col("all_int"))
        .then(pl.lit("integer"))
        .when(pl.col("all_cs"))
        .then(pl.lit("csharp"))
        .when(pl.col("all_ts"))
        .then(pl.lit("ts_stream_ms"))
        .when(pl.col("all_go"))
        .then(pl.lit("stream_seq"))
        .when(pl.col("all_uuid"))
        .then(pl.lit("uuid"))
        .otherwise(pl.lit("opaque")),
    )


def _chain(branches: list[tuple[list[str], pl.Expr]], scheme: pl.Expr, present, dtype) -> pl.Expr:
    """``when(scheme in names).then(value)...`` over the branches whose schemes are ``present`` (all when
    None): Polars computes every branch's value for every row, so a branch no session uses would make
    a column for nothing (2M events: a 32 MiB string column each)."""
    kept = [(names, value) for names, value in branches if present is None or set(names) & set(present)]
    if not kept:
        return pl.lit(None, dtype)
    expr = pl.when(scheme.is_in(kept[0][0])).then(kept[0][1])
    for names, value in kept[1:]:
        expr = expr.when(scheme.is_in(names)).then(value)
    return expr.otherwise(pl.lit(None, dtype))


def _seq_branches(id_col: pl.Expr) -> list[tuple[list[str], pl.Expr]]:
    return [
        # parsed where the text is 1-18 ASCII digits: no column of the digits' text first
        (["integer", "integer_shared"], pl.when(id_col.str.contains(INT_ID)).then(id_col.str.to_integer(strict=False))),
        (["csharp"], id_col.str.extract(CSHARP_ID, 2).cast(pl.Int64, strict=False)),
        (["stream_seq"], id_col.str.extract(STREAM_SEQ_ID, 2).cast(pl.Int64, strict=False)),
    ]


def _prefix_branches(id_col: pl.Expr) -> list[tuple[list[str], pl.Expr]]:
    return [
        (["integer", "integer_shared"], pl.when(id_col.str.contains(INT_ID)).then(pl.lit(""))),
        (["csharp"], id_col.str.extract(CSHARP_ID, 1)),
        (["stream_seq"], id_col.str.extract(STREAM_SEQ_ID, 1)),
        (["ts_stream_ms"], id_col.str.extract(TS_ID, 1)),
    ]


def seq(id_col: pl.Expr, scheme: pl.Expr, present=None) -> pl.Expr:
    """The comparable sequence number of an id under a contiguous scheme, else null.  ``present``: the
    schemes that occur (None: any)."""
    return _chain(_seq_branches(id_col), scheme, present, pl.Int64)


def prefix(id_col: pl.Expr, scheme: pl.Expr, present=None) -> pl.Expr:
    """The stream an id names, when the scheme encodes one ("" for plain integers).  ``present``: the
    schemes that occur (None: any)."""
    return _chain(_prefix_branches(id_col), scheme, present, pl.String)


# the schemes read by a pattern's groups: (schemes, pattern, the group of the sequence number or None, the prefix's group)
_GROUPS = ((["csharp"], CSHARP_ID, 2, 1), (["stream_seq"], STREAM_SEQ_ID, 2, 1), (["ts_stream_ms"], TS_ID, None, 1))


def readings(ids: pl.Series, scheme: pl.Series) -> tuple[pl.Series, pl.Series]:
    """:func:`seq` and :func:`prefix` of every id (``scheme``: each id's scheme), as two Series.  The integers are
    read over the whole column (a cheap test); each other scheme's pattern is run once, over the rows of that scheme
    alone, for both readings, and its groups are put in their places: the ``when/then`` chain of :func:`seq` and
    :func:`prefix` ran every present scheme's pattern over every row, twice (1M events, 10% stream_seq: 0.14 s)."""
    frame = pl.DataFrame([ids.alias("id"), scheme.alias("scheme")])
    is_int = pl.col("scheme").is_in(["integer", "integer_shared"]) & pl.col("id").str.contains(INT_ID)
    out = frame.select(seq=pl.when(is_int).then(pl.col("id").str.to_integer(strict=False)),
                       sprefix=pl.when(is_int).then(pl.lit("")))
    seqs, prefixes = out.get_column("seq"), out.get_column("sprefix")
    del out
    for names, pattern, seq_group, prefix_group in _GROUPS:
        rows = scheme.is_in(names).arg_true()
        if not len(rows):
            continue
        got = ids.gather(rows).str.extract_groups(pattern).struct.unnest()
        prefixes.scatter(rows, got.get_column(str(prefix_group)))
        if seq_group is not None:
            seqs.scatter(rows, got.get_column(str(seq_group)).cast(pl.Int64, strict=False))
    return seqs, prefixes


def format_ids(prefix_col: pl.Expr, scheme: pl.Expr, seqs: pl.Expr) -> pl.Expr:
    """Write sequence numbers back as ids of the scheme (a list expression)."""
    sep = pl.when(scheme == "stream_seq").then(pl.lit("_")).when(scheme == "csharp").then(pl.lit(":")).otherwise(pl.lit(""))
    return formatted("{}{}{}", prefix_col.fill_null(""), sep, seqs)
