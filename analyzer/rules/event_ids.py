"""Event ids over the whole history: reference case 4 ("continue to validate every subsequent event") inside
each connection, and one (session, id) with two payloads or on two streams."""
from __future__ import annotations

import polars as pl

from analyzer.rules.shape import either, finding_frame, natural_order, ref, subject
from analyzer.signals import idschemes
from analyzer.signals.keys import where_varies
from analyzer.signals.streams import Frames, keyed_id
from analyzer.formatted import formatted


def id_order(f: Frames) -> pl.LazyFrame:
    """Reference case 4, 'continue to validate every subsequent event': ids inside one connection.

    Integer ids must rise: an id not above every earlier id of the connection
    went backwards or repeated.  Opaque ids must not repeat.  One finding per
    connection (a restarted counter would otherwise give thousands), naming
    the first offence and counting the rest.
    """
    # The frames' events are in history order (pos, then ordinal: Frames), so each connection's events
    # are one run of rows in stream order: no sort, and "previous" is the previous row unless the row
    # starts its connection (shifted before the filter: the connection's previous event, not the
    # previous offence).
    # A connection's ids all follow its session's scheme, so its events are all in one of the two parts:
    # integers are checked against the highest id before them, other ids for repeats.  Each check runs
    # on its own part only (both over every event: +135 MiB on 2M events).
    ev = f.events.filter(pl.col("visible") & pl.col("has_id")).select(
        "gx", "id", "idh", "seq", "sprefix", "location", "source", "session", "session_id", "pos",
        contiguous=pl.col("id_scheme").is_in(idschemes.CONTIGUOUS),
        # (a connection's rows are one run: its first is the one whose gx differs from the row before, no hash table)
        first_of_gx=pl.col("gx").ne_missing(pl.col("gx").shift(1)),
    )

    def offences(part: pl.LazyFrame, offence: pl.Expr) -> pl.LazyFrame:
        # The offending rows, each with the id and place of the event before it on its connection.  Those
        # two come from the row before, which is kept only where the next row offends: shifted among the
        # few rows left, not over every event (two string columns shifted and masked over 2M events:
        # +64 MiB at least, for none kept).  A connection is wholly in one part, so the previous row of a
        # part is the connection's previous event unless the row starts its connection.
        return (
            part.with_columns(_off=offence)
            .filter(pl.col("_off") | pl.col("_off").shift(-1).fill_null(False))
            .with_columns(prev_loc=pl.when(~pl.col("first_of_gx")).then(pl.col("location").shift(1)),
                          prev_id=pl.when(~pl.col("first_of_gx")).then(pl.col("id").shift(1)))
            .filter("_off")
            .drop("_off")
        )

    # per stream prefix: a go/csharp connection may legitimately carry a replay of one stream only.  Most
    # connections carry one prefix (or none): theirs are checked by connection alone, a window over one
    # sorted integer key (``pos``, one per connection: +44 MiB on 2M events, against +88 MiB by connection
    # and prefix); only the connections whose prefix changes are checked by both.
    seq_before = pl.col("seq").cum_max().shift(1)
    # Only a connection whose ids (nulls filled forward) somewhere fail to rise can hold an offence: the
    # window runs over those connections' rows alone (where none does, a window over every event: +45 MiB
    # on 2M events, for nothing).  A null seq fails too (filled, it repeats the one before), so a
    # connection with no dip has every id after its first, and each above the one before.
    dips = ~pl.col("first_of_gx") & (pl.col("seq").forward_fill().diff() <= 0)
    changes = pl.col("sprefix").ne_missing(pl.col("sprefix").shift(1)) & ~pl.col("first_of_gx")
    cont = ev.filter(pl.col("contiguous")).with_columns(
        _mixed=pl.col("pos").is_in(pl.col("pos").filter(changes).implode())  # not any().over(): +100 MiB
    ).cache()  # for both parts
    ev = pl.concat([
        offences(cont.filter(~pl.col("_mixed") & pl.col("pos").is_in(pl.col("pos").filter(dips).implode())).drop("_mixed"),
                 pl.col("seq") <= seq_before.over("pos")),
        offences(cont.filter(pl.col("_mixed")).drop("_mixed"), pl.col("seq") <= seq_before.over(["gx", "sprefix"])),
        # (the pair (connection, id) as one integer, the id by its hash: not a hash of the id strings)
        offences(ev.filter(~pl.col("contiguous")), ~keyed_id(pl.col("gx"), pl.col("idh")).is_first_distinct()),
    ])
    per_conn = ev.group_by("gx").agg(
        session=pl.col("session").first(),
        session_id=pl.col("session_id").first(),
        pos=pl.col("pos").first(),
        integer=pl.col("contiguous").first(),
        n=pl.len(),
        first_id=pl.col("id").first(),
        after=pl.col("prev_id").first(),
        source=pl.col("source").first(),
        prev_loc=pl.col("prev_loc").first(),
        refs=ref().head(5),
    ).with_columns(evidence=pl.concat_list(ref("source", "prev_loc"), pl.col("refs")))
    backwards = per_conn.filter(pl.col("integer")).with_columns(
        message=formatted("{} event id(s) on one connection were not above an earlier id (first: {} after {})", pl.col("n"), pl.col("first_id"), pl.col("after")),
        subject=subject("first_id", "after"),
    )
    repeated = per_conn.filter(~pl.col("integer")).with_columns(
        message=formatted("{} event id(s) were delivered again on the same connection (first: {})", pl.col("n"), pl.col("first_id")),
        subject=subject("first_id"),
    )
    return pl.concat([finding_frame(backwards, "id_not_monotonic", "error"), finding_frame(repeated, "id_repeated", "error")])


def digest_conflicts(f: Frames, b: pl.LazyFrame) -> pl.LazyFrame:
    """One (session, id) seen with two different digests.

    Inside one stream this proves that two different events went out under one
    id (a restarted counter, another process).  Across streams it is the
    per-stream counter that the spec forbids ("globally unique across all
    streams within that session"): a Last-Event-ID then cannot name its stream.
    Ids after the first ``session_resurrected`` reconnect are the new process's own
    numbering (restarting at 1, per stream or not), already explained by that verdict:
    only the old process's events are compared.
    """
    restart = b.filter(pl.col("verdict") == "session_resurrected").group_by("session").agg(r_pos=pl.col("pos").min())
    # a cut-off event holds only part of its data: its digest says nothing about its id
    # only the events of a (session, id) that may have two digests are compared (keys.where_varies; it hashes the
    # integers sk and idh, the session and id as numbers, not the strings: a (session, id) with two digests has
    # two under its (sk, idh) too, and the exact grouping below drops the rest)
    ev = (
        where_varies(f.events.filter(pl.col("has_id") & pl.col("visible") & (pl.col("session_id") != "")), ["sk", "idh"], "digest")
        .join(restart, on="session", how="left", maintain_order="left")
        .filter(pl.col("r_pos").is_null() | (pl.col("pos") < pl.col("r_pos")))
        .with_columns(_epoch=pl.lit(False))
        .cache()  # few rows, used twice below
    )
    # First the (session, id) keys with two digests, from four narrow columns; only their events are then
    # gathered for evidence.  Grouping every event with its evidence list first cost a list per id: on
    # one stream of 2M events, 2M lists (+800 MiB) to keep none of them.  (Grouped by the integers sk and idh, the
    # session and the id as numbers: by their strings, 0.05 s more at 1M events; the strings are taken once a group.)
    on = ["sk", "_epoch", "idh"]
    keys = ev.select("sk", "_epoch", "stream", "idh", "digest").unique()
    conflicted = keys.group_by(on).agg(n=pl.col("digest").n_unique()).filter(pl.col("n") > 1).select(on)
    per_stream = (
        keys.join(conflicted, on=on, how="semi")
        .group_by("sk", "_epoch", "stream", "idh")
        .agg(in_stream=pl.len())
        .group_by(on)
        .agg(pl.col("in_stream").max())
    )
    grouped = (
        ev.join(conflicted, on=on, how="semi", maintain_order="left")
        .group_by(on)
        .agg(
            session=pl.col("session").first(),
            id=pl.col("id").first(),
            session_id=pl.col("session_id").first(),
            n=pl.col("digest").n_unique(),
            streams=pl.col("stream").n_unique(),
            evidence=pl.struct("source", "location").unique(maintain_order=True).head(6),
            pos=pl.col("pos").min(),
        )
        .join(per_stream, on=on, maintain_order="left")
        .sort("pos", "id")
    )
    # one finding per session and kind (a restarted counter conflicts on every id it reuses): the kinds are one
    # grouping, so the events are gone through once for both
    def said(one: str | pl.Expr, many: str | pl.Expr) -> pl.Expr:
        one, many = (pl.lit(t) if isinstance(t, str) else t for t in (one, many))
        return (
            pl.when(pl.col("n_ids") == 1)
            .then(formatted("event id {} {}", pl.col("first"), one))
            .otherwise(formatted("{} event ids ({}{}) {}", pl.col("n_ids"), pl.col("ids"),
                                 pl.when(pl.col("n_ids") > 5).then(pl.lit(", …")).otherwise(pl.lit("")), many))
        )

    per_session = (
        grouped.with_columns(_same=pl.col("in_stream") > 1)
        .group_by("session", "_same")
        .agg(
            session_id=pl.col("session_id").first(),
            n_ids=pl.col("id").n_unique(),
            first=pl.col("id").first(),
            ids=natural_order(pl.col("id").unique()).head(5).str.join(", "),  # 9, 10: integer ids as numbers
            pos=pl.col("pos").min(),
            evidence=pl.col("evidence").first(),
            streams=pl.col("streams").max(),  # how many streams one id was used on (the most of any)
        )
        .with_columns(
            message=pl.when(pl.col("_same"))
            .then(said("carried different payloads on one stream", "each carried different payloads on one stream"))
            .otherwise(said(formatted("was used on {} streams of the session for different events", pl.col("streams")),
                            formatted("were used on up to {} streams of the session each, for different events", pl.col("streams")))),
            subject=subject("ids"),
        )
        .sort("pos")
    )
    return either(per_session, pl.col("_same"), ("digest_conflict", "error"), ("id_reused_across_streams", "warning"))
