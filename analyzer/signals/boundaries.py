"""Per-boundary facts: everything the decision chain (rules/verdicts.py) reads about one reconnect.

Computed over whole tables, one frame per fact, joined on the boundary's ``gx``:

- the boundary itself: the resumed connection, the client's cursor (its ``Last-Event-ID``, or the
  last id delivered), read in the session's id scheme;
- the events after the cursor, with the overlap flag (the boundary event re-sent unchanged: the
  reference's dead digest branch, made live) and, per id, whether the stream had delivered it before;
- the id sequence of every event of the resumed connection (reference cases 2-4), duplicates of
  opaque ids, ids naming another stream;
- the client's reaction: a new session, or the old one used again;
- events another session had been delivered first (a store shared across sessions);
- with the signals of rpc.py, eras.py and views.py: ``facts`` joins them all.

Nothing here decides a verdict or a severity.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals import clients, eras, idschemes, progress, rpc, views
from analyzer.signals.streams import Frames, id_hash, packet_no, keyed_id

LIST_CAP = 1000  # ids listed per boundary; the counts stay exact
MAX_EXPAND = 1_000_000  # missing ids checked one by one against other streams (shared counter)


def boundaries(f: Frames, links: pl.DataFrame) -> pl.DataFrame:
    x = f.exchanges
    prev = x.select(
        pl.col("gx").alias("resumed_gx"),
        pl.col("pos").alias("prev_pos"),
        pl.col("replay_epoch").alias("epoch_before"),
        pl.col("last_cursor").alias("last_before"),
        pl.col("body_recorded").alias("prev_body_recorded"),
        pl.col("content_type").alias("prev_content_type"),
    )
    unrecorded = x.group_by("session").agg(session_has_unrecorded=(~pl.col("body_recorded")).any())
    scheme = pl.col("id_scheme")
    b = (
        links.join(x, on="gx", how="inner")
        .join(prev, on="resumed_gx", how="left")
        .join(unrecorded, on="session", how="left")
        .with_columns(
            header=pl.col("last_event_id"),
            last_before=pl.when(pl.col("last_before") != "").then(pl.col("last_before")),
        )
        .with_columns(
            h_seq=idschemes.seq(pl.col("header"), scheme),
            h_prefix=idschemes.prefix(pl.col("header"), scheme),
            l_seq=idschemes.seq(pl.col("last_before"), scheme),
            l_prefix=idschemes.prefix(pl.col("last_before"), scheme),
            cursor_str=pl.coalesce(pl.when(pl.col("header") != "").then(pl.col("header")), pl.col("last_before")),
        )
    )
    # The cursor is the client's own claim: WHATWG's Last-Event-ID is the last event the
    # *client* received.  A capture point (a proxy, a server-side pcap) can have seen more
    # events leave on the old connection than ever arrived; a server that resumes past them
    # lost them, and only the claim shows it.  (Taking max(claim, delivered) turned exactly
    # that failure into "continuous".)  Without a header, the last id delivered is all we have.
    return b.with_columns(
        cursor_seq=pl.coalesce("h_seq", pl.when(pl.col("header").fill_null("") == "").then(pl.col("l_seq"))),
        cursor_prefix=pl.coalesce("h_prefix", "l_prefix"),
    ).sort("pos")


# what the checks read of the events after each cursor (sequence_checks, opaque_checks, foreign, facts,
# views.boundary_history)
AFTER_COLUMNS = ("gx", "ordinal", "id", "idh", "digest", "seq", "sprefix", "id_scheme", "session", "stream", "b_pos", "cursor_seq", "cursor_prefix",
                 "overlap", "foreign")


def deliveries(f: Frames) -> pl.DataFrame:
    """The frame the checks share: every event the client saw with an id, in delivery order (history position, then
    place in the stream), made once, with ``r`` (its row among all events: delivery order), ``has_data`` and the
    first delivery of its (stream, id) (``first_r``, ``first_pos``).  Each check used to filter the 1M events again
    for these and join them with the few boundaries or ids it looked at; :func:`after_events`' per-id look-up of
    the first delivery (``_prior``) was a unique, a semi-join and a grouping of the reconnects' 600k events
    (0.26 s at 1M events; one window over the deliveries' integer key here: 0.06 s)."""
    # (stream, id) as one 64-bit key (keyed_id): a window over one column, not two
    return (
        f.events.lazy()
        .with_row_index("r")
        .filter(pl.col("visible") & pl.col("has_id"))
        # (the events' session, session_id, source and location strings are not copied here: a check that shows them
        # gathers them by ``r`` for its own rows, _strings; carried for the 1M deliveries they were +80-100 MiB of peak)
        .select("gx", "ordinal", "id", "idh", "digest", "seq", "sprefix", "id_scheme", "stream", "pos", "r",
                has_data=pl.col("data") != "", _k=keyed_id(pl.col("stream"), pl.col("idh")))
        .with_columns(first_r=pl.col("r").min().over("_k"))
        # (the events are in delivery order: the first delivery's position is the one at its row; a second window for
        # it was 0.05 s)
        .with_columns(first_pos=pl.lit(f.events.get_column("pos")).gather(pl.col("first_r")))
        .drop("_k")
        .collect()
    )


def _strings(f: Frames, rows: pl.DataFrame, *cols: str) -> pl.DataFrame:
    """``rows`` (deliveries' rows, with ``r``) with the events' string columns ``cols`` gathered by ``r``, every
    column in one chunk (a gathered string column beside columns chunked otherwise panicked in Polars 2.1's string
    functions: rpc.with_gathered); by :meth:`Frames.gathered`."""
    rows = rows.rechunk()
    return rows.with_columns(f.gathered(rows.get_column("r"), *cols))


def _of_boundaries(d: pl.DataFrame, b: pl.DataFrame, own: list[str] | None, *columns: str, **named: str) -> pl.LazyFrame:
    """The deliveries of the boundaries' own connections (``b``: one row per gx), with ``own``, their own columns
    (None: all), and their boundary's ``columns`` (and ``named``: alias=column), in the deliveries' order: a filter
    and a gather by gx, not a join of 600k rows."""
    rows = d.lazy().filter(pl.col("gx").is_in(b.get_column("gx").implode()))
    if own is not None:
        rows = rows.select(own)
    got = rpc.by_gx(b, pl.col("gx"), *columns, **named)
    if got is None:
        return rows.join(b.lazy().select("gx", *columns, *(pl.col(c).alias(a) for a, c in named.items())), on="gx", maintain_order="left")
    return rpc.with_gathered(rows, got).lazy()


def after_events(f: Frames, b: pl.DataFrame, claims: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """Id-bearing events the client saw on each boundary's connection, with the overlap flag: each boundary's
    events one run of rows in stream order (the runs in history order).  ``d``: :func:`deliveries` (made here when
    not given)."""
    if d is None:
        d = deliveries(f)
    # the digest of the cursor's event on the resumed connection: only the events with the cursor's id are
    # looked at (the resumed connections carry most of a capture's events)
    before_digest = (
        d.lazy()
        # (in delivery order: the cursor's digest is its id's last delivery on that connection, whatever order a join
        # of many threads leaves)
        .join(b.lazy().select(pl.col("resumed_gx").alias("gx"), pl.col("cursor_str").alias("id")).unique(), on=["gx", "id"], how="semi",
              maintain_order="left")
        .select(pl.col("gx").alias("resumed_gx"), pl.col("id").alias("cursor_str"), pl.col("digest").alias("before_digest"))
        .collect()
        .unique(["resumed_gx", "cursor_str"], keep="last", maintain_order=True)
    )
    # per boundary, what its events are read against: the cursor, its digest, the cursor's claim (cursor_claims)
    bk = (
        b.select("gx", "resumed_gx", "cursor_str", "cursor_seq", "cursor_prefix", "pos")
        .join(before_digest, on=["resumed_gx", "cursor_str"], how="left", maintain_order="left", nulls_equal=False)
        .join(claims.select("gx", "claim_r"), on="gx", how="left", maintain_order="left")
    )
    return (
        # The events are in history order (pos, then ordinal: Frames), so each reconnect's events are one run of
        # rows in stream order, kept so by the filter: no sort of them, and a reconnect's first event is the first
        # row of its run (a sort by gx and ordinal and a window over gx: 0.7 of after_events' 1.0 s at 1M events)
        _of_boundaries(d, bk, None, "cursor_str", "cursor_seq", "cursor_prefix", "before_digest", "claim_r", b_pos="pos")
        .with_columns(
            # the dead branch of the reference, made live: the boundary event itself, re-sent unchanged
            overlap=(pl.col("gx") != pl.col("gx").shift(1)).fill_null(True) & (pl.col("id") == pl.col("cursor_str")) & (pl.col("digest") == pl.col("before_digest")).fill_null(False),
            # an id that names another stream than the cursor's (go, csharp, typescript ids carry their stream)
            foreign=pl.col("cursor_prefix").is_not_null() & pl.col("sprefix").is_not_null() & (pl.col("sprefix") != pl.col("cursor_prefix")),
            prior=_prior(),
        )
        .select(*(c for c in AFTER_COLUMNS if c != "session"), "prior", "r")
        .collect()
        .pipe(lambda rows: _strings(f, rows, "session"))
        .select(*AFTER_COLUMNS, "prior")
        .rechunk()  # (one chunk: the checks below read it a dozen times; 0.014 s at 1M events, and 0.05 s less of theirs)
    )


def _deliveries(f: Frames, d: pl.DataFrame | None = None) -> pl.LazyFrame:
    """Every event the client saw with an id, with ``r``, its row in delivery order (history position, then place
    in the stream); ``d``: :func:`deliveries`, when made."""
    if d is not None:
        return d.lazy().select("stream", "pos", "r", "idh", "digest")
    return f.events.lazy().with_row_index("r").filter(pl.col("visible") & pl.col("has_id")).select("stream", "pos", "r", "idh", "digest")


def cursor_claims(f: Frames, b: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per boundary with a cursor, the cursor's last delivery on its stream before the boundary (``claim_r``: what
    the client says it had) and how many payloads that id had carried on the stream by then (``cursor_payloads``;
    two or more: the cursor names two events, :func:`ambiguous_cursor`).  An as-of join with each (stream, id,
    position)'s deliveries, not a join with every delivery of the id: a stream resumed k times from one id would be
    joined k times with all k of them (tests/test_h2.py's 300 -> 600 streams).  ``d``: :func:`deliveries`."""
    cursors = b.lazy().filter(pl.col("cursor_str").is_not_null()).select("gx", "stream", pl.col("pos").alias("b_pos"), idh=id_hash(pl.col("cursor_str")))
    seen = (
        _deliveries(f, d).join(cursors.select("stream", "idh").unique(), on=["stream", "idh"], how="semi")
        .sort("r")
        .with_columns(payloads=pl.col("r").rank("ordinal").over("stream", "idh", "digest").eq(1).cum_sum().over("stream", "idh"))
        .group_by("stream", "idh", "pos")
        .agg(claim_r=pl.col("r").max(), cursor_payloads=pl.col("payloads").max())
        .sort("pos")
    )
    return (
        cursors.sort("b_pos")
        .join_asof(seen, left_on="b_pos", right_on="pos", by=["stream", "idh"], strategy="backward", allow_exact_matches=False, check_sortedness=False)
        .select("gx", "stream", "claim_r", "cursor_payloads")
        .collect()
    )


def _prior() -> pl.Expr:
    """Per event after a boundary: had the stream already delivered its id, before or after the client's cursor?

    ``before_claim``: the client says it had it (Last-Event-ID at or after it in delivery
    order): sending it again is a duplicate.  ``after_claim``: it left the capture point
    after the cursor, so by the client's own Last-Event-ID it never arrived: sending it
    again is the replay the client needs (or, if the client resumed from an older point
    than it had reached, a duplicate the wire alone cannot tell apart).

    Delivery order is the events' own order (history position, then place in the stream): ``r`` is
    the row number there.  Read from the id's first delivery on the stream (``first_r``, ``first_pos``:
    :func:`deliveries`), kept when it came before the boundary (``b_pos``), and the cursor's last delivery
    (``claim_r``: :func:`cursor_claims`): a stream resumed k times, each connection delivering the same ids, is not
    joined k times with all of them (quadratic in its connections).
    """
    return (
        pl.when(pl.col("first_pos") >= pl.col("b_pos")).then(pl.lit(None, dtype=pl.String))
        .when(pl.col("claim_r").is_null() | (pl.col("first_r") <= pl.col("claim_r")))
        .then(pl.lit("before_claim"))
        .otherwise(pl.lit("after_claim"))
    )


def sequence_checks(f: Frames, after: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """Reference cases 2-4 over every event of the resumed connection, for contiguous id schemes.

    With one counter shared by a session's streams (``integer_shared``) a jump is
    only a gap for the ids that no other stream of the session delivered.  ``d``: :func:`deliveries` (the events'
    own table when not given: an event with a ``seq`` has an id).
    """
    # the visible events with a sequence number (every one has an id: from the shared frame when given)
    numbered = (f.events.lazy().filter(pl.col("visible") & pl.col("seq").is_not_null()) if d is None
                else d.lazy().filter(pl.col("seq").is_not_null()))
    seq = (
        after.filter(~pl.col("overlap") & ~pl.col("foreign") & pl.col("seq").is_not_null() & pl.col("cursor_seq").is_not_null())
        # (each boundary's rows are one run, in stream order (after_events): the previous row of the run is the
        # previous row, when it has the same gx -- no window for the shift)
        .with_columns(prev=pl.when(pl.col("gx") == pl.col("gx").shift(1)).then(pl.col("seq").shift(1)), _cm=pl.col("seq").cum_max().over("gx"))
        .with_columns(prev=pl.coalesce("prev", "cursor_seq"))
        .with_columns(
            step=pl.col("seq") - pl.col("prev"),
            running_max=pl.max_horizontal(pl.col("cursor_seq"), pl.when(pl.col("gx") == pl.col("gx").shift(1)).then(pl.col("_cm").shift(1))),
        )
        .drop("_cm")
        # ids at or below what the client already had (its cursor, or an id delivered before on this connection)
        # cannot be lost by this reconnect: after ids went back (2, 4 after the cursor 5), the 3 between is not a loss
        .with_columns(rise=pl.col("seq") - pl.max_horizontal("prev", "running_max"))
        .with_row_index("rid")
    )
    shared = pl.col("id_scheme") == "integer_shared"
    expand = pl.when(shared).then(pl.lit(MAX_EXPAND)).otherwise(pl.lit(LIST_CAP))
    missing = (
        seq.filter(pl.col("rise") > 1)
        .with_columns(floor=pl.col("seq") - pl.col("rise"))
        .select("rid", "gx", "session", "stream", "id_scheme", "sprefix", "b_pos",
                m=pl.int_ranges(pl.col("floor") + 1, pl.min_horizontal(pl.col("seq"), pl.col("floor") + 1 + expand)))
        .explode("m")
    )
    shared_rows = numbered.filter(pl.col("id_scheme") == "integer_shared")
    if d is not None:  # (the shared frame has no session strings: gathered for these rows alone)
        shared_rows = _strings(f, shared_rows.select("r", "stream", "seq").collect(), "session").lazy()
    elsewhere = (
        shared_rows
        .select("session", pl.col("stream").alias("o_stream"), pl.col("seq").alias("m"))
        .collect()
        .unique()
    )
    # per id, how many streams of the session delivered it and the least of them: another stream than the
    # row's delivered it when there are two, or the one is not the row's own (a join with every stream that
    # delivered it would meet each of them at every gap)
    by_m = elsewhere.group_by("session", "m").agg(n_streams=pl.len(), o_stream=pl.col("o_stream").min())
    taken = (
        missing.filter(pl.col("id_scheme") == "integer_shared")
        .join(by_m, on=["session", "m"], how="inner")
        .filter((pl.col("n_streams") > 1) | (pl.col("o_stream") != pl.col("stream")))
        .select("rid", "m")
        .unique()
    )
    missing = missing.join(taken, on=["rid", "m"], how="anti")
    # missing ids the capture point saw leave on this stream before the reconnect: each id's first delivery on
    # the stream (with its prefix) before the boundary, not every delivery of it at every gap
    passed = (
        numbered
        .select("stream", pl.col("seq").alias("m"), pl.col("pos").alias("d_pos"), pl.col("sprefix"))
        .join(missing.lazy().select("stream", "m").unique(), on=["stream", "m"], how="semi")
        .group_by("stream", "m", "sprefix")
        .agg(pl.col("d_pos").min())
        .join(missing.lazy().select("rid", "stream", "m", "b_pos", "sprefix"), on=["stream", "m", "sprefix"], nulls_equal=True)
        .filter(pl.col("d_pos") < pl.col("b_pos"))
        .select("rid", "m")
        .unique()
        .group_by("rid")
        .agg(n_passed=pl.len())
        .collect()
    )
    per_row = missing.group_by("rid").agg(
        n_missing_listed=pl.len(),
        missing_ids=idschemes.format_ids(pl.col("sprefix"), pl.col("id_scheme"), pl.col("m")).head(LIST_CAP),
    )
    seq = (
        # (each boundary's rows stay one run in stream order, as after_events made them: the groups below read them
        # in that order without a sort of the 522k rows by gx and ordinal, 0.07 s at 1M events)
        seq.join(per_row, on="rid", how="left", maintain_order="left")
        .join(passed, on="rid", how="left", maintain_order="left")
        .with_columns(
            # beyond the expansion cap nothing was subtracted: those ids count as missing
            n_missing=pl.when(pl.col("rise") <= 1)
            .then(0)
            .when(shared)
            .then(pl.col("n_missing_listed").fill_null(0) + pl.max_horizontal(pl.col("rise") - 1 - MAX_EXPAND, pl.lit(0)))
            .otherwise(pl.col("rise") - 1)
        )
        .with_columns(
            brk=pl.when(pl.col("step") <= 0).then(pl.lit("replay_reset")).when(pl.col("n_missing") > 0).then(pl.lit("gap")),
            dup=pl.col("seq") <= pl.col("running_max"),
        )
    )
    return seq.group_by("gx").agg(
        first_break=pl.col("brk").drop_nulls().first(),
        break_prev=pl.col("prev").filter(pl.col("brk").is_not_null()).first(),
        break_id=pl.col("id").filter(pl.col("brk").is_not_null()).first(),
        lost_ids=pl.col("missing_ids").drop_nulls().list.explode(keep_nulls=False, empty_as_null=False).head(LIST_CAP),
        lost_count=pl.col("n_missing").sum(),
        n_passed=pl.col("n_passed").sum(),
        dup_ids=pl.col("id").filter(pl.col("dup")).head(LIST_CAP),
        dup_count=pl.col("dup").sum(),
    )


def foreign(after: pl.DataFrame) -> pl.DataFrame:
    """Events whose id names another stream than the one resumed (the spec: MUST NOT replay those)."""
    return (
        after.filter(pl.col("foreign"))
        .group_by("gx")
        .agg(
            foreign_count=pl.len(),
            foreign_id=pl.col("id").first(),
            foreign_prefix=pl.col("sprefix").first(),
            cursor_prefix=pl.col("cursor_prefix").first(),
        )
    )


def opaque_checks(f: Frames, after: pl.DataFrame) -> pl.DataFrame:
    """History instead of arithmetic: ids the stream already delivered, delivered again.

    Proving continuity for opaque ids needs a second view of the same stream
    (a server-side log showing which event followed the cursor); that comes
    with merging captures by session.  Until then an opaque resume without
    repeats is ``unverifiable``.
    """
    # ``prior`` is set only where the stream delivered the id before the boundary (_prior): no second look-up of
    # those deliveries (a join with every one of them: quadratic in a stream that re-delivers its ids)
    seen_before = after.filter(~pl.col("overlap") & (pl.col("prior") == "before_claim")).select("gx", "ordinal", "id").unique()
    # (an id twice on one connection: its (gx, id) pair as one 64-bit key (keyed_id), not a window of the strings)
    repeated_here = after.filter(~pl.col("overlap") & keyed_id(pl.col("gx"), pl.col("idh")).is_duplicated()).select("gx", "ordinal", "id")
    dups = (
        pl.concat([seen_before, repeated_here])
        .unique()
        .sort(["gx", "ordinal"])
        .group_by("gx")
        .agg(dup_ids=pl.col("id").head(LIST_CAP), dup_count=pl.len())
    )
    return dups



AMBIGUOUS_SCHEMA = {"gx": pl.Int64, "amb_ids": pl.List(pl.String), "amb_count": pl.UInt32, "amb_cursor_n": pl.UInt32}


def ambiguous_cursor(f: Frames, after: pl.DataFrame, claims: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """A Last-Event-ID that names two different events of the stream, and the events it brought again.

    Two servers numbering one stream each their own way (replicas behind a round-robin balancer, a store that
    ignores which replica wrote) leave the stream with one id on two different events.  The server that reads
    such a cursor may place it at either; when it places it at the older one, the events that followed that one
    come again, byte for byte: the client processes them twice, though the ids go up from the cursor
    (real-go-client-replica-failover's second resume: "slow_count step 1" twice in the client's log).

    Counted only when the cursor was delivered with two digests or more before the reconnect, and then an event
    after the cursor is a repeat when the stream had delivered its id *and* digest before the cursor's last
    delivery (what the client says it had: a later delivery is the resend ``_prior`` calls ``after_claim``), and
    only when no event after the cursor carries such an old id with another payload.  A stream that restarted its
    counter with new payloads delivers old ids with new digests, and now and then one equal by chance
    (bench/generate.py's restarts, 250k events: counting ids alone read 134 of 3,929 reconnects wrong; ids and
    digests 9, the resends after the cursor's delivery 1 more; this rule none).
    """
    amb = (
        claims.filter(pl.col("cursor_payloads") > 1)
        .select("gx", "stream", "claim_r", amb_cursor_n="cursor_payloads")
    )
    if amb.is_empty():
        return pl.DataFrame(schema=AMBIGUOUS_SCHEMA)
    delivered = _deliveries(f, d)
    again = after.join(amb, on="gx").filter(~pl.col("overlap")).select("gx", "ordinal", "id", "idh", "digest", "stream", "claim_r", "amb_cursor_n")
    # each id's first delivery on the stream, and each (id, payload)'s: one row per key, whatever the reconnects
    ids = delivered.join(again.lazy().select("stream", "idh").unique(), on=["stream", "idh"], how="semi")
    first_id = ids.group_by("stream", "idh").agg(id_r=pl.col("r").min())
    first_same = ids.group_by("stream", "idh", "digest").agg(same_r=pl.col("r").min())
    seen = (
        again.lazy()
        .join(first_id, on=["stream", "idh"])
        .filter(pl.col("id_r") < pl.col("claim_r"))
        .join(first_same, on=["stream", "idh", "digest"], how="left")
        .with_columns(same=(pl.col("same_r") < pl.col("claim_r")).fill_null(False))
        .sort("gx", "ordinal")
        .collect()
    )
    return (
        seen.group_by("gx", maintain_order=True)
        .agg(
            amb_ids=pl.col("id").filter(pl.col("same")).unique(maintain_order=True).head(LIST_CAP),
            amb_count=pl.col("same").sum().cast(pl.UInt32),
            amb_other=(~pl.col("same")).sum(),
            amb_cursor_n=pl.col("amb_cursor_n").first().cast(pl.UInt32),
        )
        # only when every old id delivered again carries its earlier payload: the server placed the cursor at the
        # older event, and replays what followed it
        .filter((pl.col("amb_count") > 0) & (pl.col("amb_other") == 0))
        .drop("amb_other")
        .cast(AMBIGUOUS_SCHEMA)
    )


def reaction(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Did the client start a new session (initialize without the old id) before using the old one again?"""
    inits = (
        f.messages.filter(
            (pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & (pl.col("method") == "initialize")
        )
        .join(f.exchanges.select("gx", "req_session_id"), on="gx")
        .filter(pl.col("req_session_id").is_null())
        .select("source", pl.col("pos").alias("init_pos"))
        .unique()
        .sort("init_pos")
    )
    uses = (
        f.exchanges.filter(pl.col("req_session_id").is_not_null() & (pl.col("method") != "DELETE"))
        .select(
            "session",
            pl.col("pos").alias("use_pos"),
            pl.struct("source", "location").alias("next_use"),
        )
        .sort("use_pos")
    )
    left = b.select("gx", "pos", "session", "source").sort("pos")
    out = left.join_asof(inits, left_on="pos", right_on="init_pos", by="source", strategy="forward", allow_exact_matches=False, check_sortedness=False)
    out = out.join_asof(uses, left_on="pos", right_on="use_pos", by="session", strategy="forward", allow_exact_matches=False, check_sortedness=False)
    # A capture rarely says which client sent a request, so a new initialize after the boundary
    # may be another client's.  What decides is the old session: used again (anything but
    # DELETE) = not handled, whoever initialized meanwhile; never used again after a new
    # initialize = handled; neither = the capture ends first (null).
    return out.select(
        "gx",
        "init_pos",
        "use_pos",
        "next_use",
        handled=pl.when(pl.col("use_pos").is_not_null())
        .then(False)
        .when(pl.col("init_pos").is_not_null())
        .then(True),
    )


def replayed_across_sessions(f: Frames, b: pl.DataFrame, per_event: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per reconnect: events another session of the same input had been delivered first (``per_event``:
    :func:`foreign_deliveries`, when the caller has it already)."""
    if per_event is None:
        per_event = foreign_deliveries(f, b)
    return per_event.group_by("gx").agg(
        xs_n=pl.col("id").n_unique(),
        session=pl.col("b_session").first(),
        session_id=pl.col("session_id").first(),
        xs_other=pl.col("o_session_id").first(),
        xs_ids=pl.col("id").unique(maintain_order=True).head(5),
        pos=pl.col("b_pos").first(),
        xs_evidence=pl.concat_list(
            pl.struct("source", "location").head(2), pl.struct("source", pl.col("o_location").alias("location")).head(2)
        ).first(),
    )


def foreign_deliveries(f: Frames, b: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per event of a reconnect: the earliest delivery of the same event to another session (one row per
    event and other session), with its place in history (``o_pos``, the exchange that carried it).

    A shared event store that looks up Last-Event-ID without the session replays one
    session's events into another (fastmcp PR #4402, GHSA-84j6-jc92-77jm).  With per-session
    integer counters the ids even look continuous; the content gives it away: the same id
    *and* the same payload (digest) that another session was delivered earlier.  Only
    payloads that at most two sessions share count ("progress 1" alike in every session
    is no proof), and never empty data (priming events).  Ids that carry their stream
    (go, csharp, typescript) also count when they name a stream another session used.
    Sessions are compared by Mcp-Session-Id, so two hops of one capture are one session.  ``d``:
    :func:`deliveries` (made here when not given).
    """
    if d is None:
        d = deliveries(f)
    # (the deliveries of the reconnects' connections, from the shared frame: no filter and join of the 1M events)
    # (each event's location is gathered by its row ``r`` for the few rows found at the end, not for the 600k)
    after = (
        _strings(f, _of_boundaries(d, b, ["gx", "ordinal", "r", "id", "digest", "sprefix"], "session_id", b_pos="pos", b_session="session").collect(),
                 "source")
        .select("gx", "ordinal", "source", "id", "digest", "sprefix", "r", "session_id", "b_pos", "b_session")
    )
    # only the events that share an id and payload with an event of a reconnect can matter: the
    # rest of history (millions of events on streams that never broke) is neither copied nor grouped;
    # those are collected once, for both uses below
    # the digest (64 bits of the id and data's sha256) narrows history to those events by one integer
    # set look-up; the three keys, strings included, are then joined on the few rows left, not hashed
    # for every event
    # Only an event whose digest another event shares can have been delivered to two sessions: the events of a
    # reconnect share their digests with nothing but their own replays, mostly, and are not copied (the reconnects'
    # own 600k events at 1M: a string semi-join and a grouping of all of them, 1.0 of this function's 1.4 s)
    # (the digests seen twice found by sorting the one integer column, then those of the reconnects' events kept:
    # an is_in of the 1M digests against the reconnects' 600k and a hash count of those left was 0.13 s, this 0.04)
    digests = d.get_column("digest").sort()
    again = digests.filter(digests == digests.shift(1)).unique()
    del digests
    again = again.filter(again.is_in(after.get_column("digest").implode()))
    # the few events of those digests first, then the semi-join on the three keys: with the reconnects' events of
    # those digests alone (a hash table of every reconnect's (source, id, digest) strings, 600k at 1M events, was
    # 0.12 of this function's 0.4 s)
    wanted = after.lazy().filter(pl.col("digest").is_in(again.implode())).select("source", "id", "digest").unique()
    same_key = (
        _strings(f, d.lazy().filter(pl.col("digest").is_in(again.implode())).select("r", "id", "digest", "pos", _has_data="has_data").collect(),
                 "source", "session_id", "location")
        .select("source", "session_id", "id", "digest", "pos", "location", "_has_data")
        .lazy()
        .join(wanted, on=["source", "id", "digest"], how="semi", maintain_order="left")
        .collect()
    )
    delivered = same_key.select(
        "source", pl.col("session_id").alias("o_session_id"), "id", "digest", pl.col("pos").alias("o_pos"), pl.col("location").alias("o_location"),
    )
    distinctive = (
        same_key.filter(pl.col("_has_data"))
        .group_by("source", "id", "digest")
        .agg(pl.col("session_id").n_unique().alias("n"))
        # at most two sessions share it, and (exactly two) another session than the reconnect's own had it:
        # a payload one session alone was delivered is the reconnect's own, and no replay from elsewhere
        .filter(pl.col("n") == 2)
        .select("source", "id", "digest")
    )
    del same_key
    # only deliveries of those payloads can show a replay: the rest is neither looked up nor joined
    delivered = delivered.join(distinctive, on=["source", "id", "digest"], how="semi")
    # an event this session had itself been delivered before the reconnect is explained by its own history
    own_before = (
        # (one row per reconnect: its position, session and source are its gx's, so the rows are told apart by gx
        # alone, not by hashing the two strings of each of the 600k events)
        after.select("gx", "b_pos", "session_id", "source")
        .unique("gx")
        .join(delivered.rename({"o_session_id": "session_id"}), on=["source", "session_id"])
        .filter(pl.col("o_pos") < pl.col("b_pos"))
        .select("gx", "id", "digest")
    )
    same_event = (
        # (the reconnects' events of the shared digests alone: a distinctive payload's digest is one of them)
        after.filter(pl.col("digest").is_in(again.implode())).join(distinctive, on=["source", "id", "digest"], how="semi")
        .join(own_before, on=["gx", "id", "digest"], how="anti")
        .join(delivered, on=["source", "id", "digest"])
        .filter(pl.col("o_pos") < pl.col("b_pos"))
    )
    prefixes = (
        f.pick(pl.col("visible") & pl.col("sprefix").is_not_null() & (pl.col("sprefix") != ""),
               "source", "sprefix", pl.col("session_id").alias("o_session_id"), pl.col("location").alias("o_location"), pl.col("pos").alias("o_pos"))
        # (each other session's first event of the prefix, in history order: which one the evidence names does not
        # change from run to run)
        .unique(["source", "sprefix", "o_session_id"], keep="first", maintain_order=True)
    )
    same_stream = after.filter(pl.col("sprefix").is_not_null() & (pl.col("sprefix") != "")).join(prefixes, on=["source", "sprefix"])
    cols = ["gx", "ordinal", "b_session", "session_id", "b_pos", "source", "id", "location", "o_session_id", "o_location", "o_pos"]
    picked = [c if c != "location" else "r" for c in cols]  # (the location gathered by ``r`` once the rows are found)
    found = (
        pl.concat([same_event.select(picked), same_stream.select(picked)])
        .filter(pl.col("o_session_id") != pl.col("session_id"))
        # joins keep no order: sort before anything takes a first
        .sort(["gx", "ordinal", "o_session_id", "o_location"])
        .unique(["gx", "id", "o_session_id"], keep="first", maintain_order=True)
    )
    return found.with_columns(f.gathered(found.get_column("r"), "location")).select(cols)


def undecrypted_before(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Per boundary whose resumed stream the tables do not show (no earlier connection of it, or none that
    delivered its Last-Event-ID): the TLS connections of its capture that no key decrypted and that began
    before it (``tls_hidden``, the first one's packet ``tls_hidden_first``).  The stream it resumes may lie
    in one of them, so what the client had before the cursor is unknown."""
    k = (
        b.lazy()
        .filter(pl.col("resumed_gx").is_null() | ~pl.col("id_found").fill_null(False))
        .select("gx", "source", b_packet=packet_no(pl.col("location")))
    )
    return (
        k.join(f.hidden.lazy(), on="source")
        .filter(pl.col("packet") < pl.col("b_packet"))
        .group_by("gx")
        .agg(tls_hidden=pl.len(), tls_hidden_first=pl.col("packet").min())
        .collect()
    )


def facts(f: Frames, links: pl.DataFrame, rev: pl.DataFrame) -> pl.DataFrame:
    """One row per boundary (before one is kept per reconnect) with every fact the decision chain reads;
    ``rev`` from eras.revisions."""
    b = boundaries(f, links).join(rev, on="session", how="left")
    if b.height == 0:
        # no reconnect (a capture of healthy streams): every fact below is joined onto no rows.  Made over no events and
        # no messages they give the same empty frame, its columns and their types, without a pass over every event
        # (2M tiny records of one stream: the deliveries frame alone was +118 MiB of the analysis' peak)
        f = Frames(f.exchanges, f.events.clear(), f.messages.clear(), f.hidden)
    d = deliveries(f)  # (shared by the checks below)
    claims = cursor_claims(f, b, d)
    after = after_events(f, b, claims, d)
    seqs = sequence_checks(f, after, d)
    opq = opaque_checks(f, after)
    first = after.group_by("gx").agg(
        first_event_id_after=pl.col("id").first(),
        overlap=pl.col("overlap").any(),
        n_after=(~pl.col("overlap")).sum(),
        # re-sent events that had left the capture point after the client's cursor
        resent_ids=pl.col("id").filter(~pl.col("overlap") & (pl.col("prior") == "after_claim")).unique(maintain_order=True).head(LIST_CAP),
        resent_count=(~pl.col("overlap") & (pl.col("prior") == "after_claim")).sum(),
    )
    elsewhere = foreign_deliveries(f, b, d)
    fam = clients.sessions(f, b)  # the client of each session with a reconnect: once, for the two facts that read it
    c = rpc.boundary_calls(f, b, elsewhere)  # (named once: wrong_results, proof and stale_cursor read them)
    wrong = rpc.wrong_results(f, b, elsewhere, fam, c)
    b = (
        b.join(first, on="gx", how="left")
        .join(seqs, on="gx", how="left")
        .join(opq.rename({"dup_ids": "o_dup_ids", "dup_count": "o_dup_count"}), on="gx", how="left")
        .join(ambiguous_cursor(f, after, claims, d), on="gx", how="left")
        .join(foreign(after).drop("cursor_prefix"), on="gx", how="left")
        .join(reaction(f, b), on="gx", how="left")
        .join(rpc.boundary_signals(f, b, c), on="gx", how="left")
        .join(eras.polling(f, b), on="gx", how="left")
        .join(views.boundary_history(f, b, after, d), on="gx", how="left")
        .join(replayed_across_sessions(f, b, elsewhere).select("gx", "xs_n", "xs_other", "xs_ids", "xs_evidence"), on="gx", how="left")
        .join(wrong, on="gx", how="left")
        .join(progress.proof(f, b, wrong, c), on="gx", how="left")
        .join(undecrypted_before(f, b), on="gx", how="left")
        .join(stale_cursor(f, b, after, fam, d, c), on="gx", how="left")
        .with_columns(pl.col("n_after").fill_null(0), pl.col("overlap").fill_null(False))
    )
    return b


def stale_cursor(f: Frames, b: pl.DataFrame, after: pl.DataFrame, fam: pl.DataFrame | None = None, d: pl.DataFrame | None = None,
                 c: pl.DataFrame | None = None) -> pl.DataFrame:
    """The python client's stale cursor (shared/reference/mcp-transport-facts.md point 3): when a *resumed* stream
    breaks again, it resumes with the cursor of its previous resume, not the last id it received
    (``_handle_reconnection``'s ``except`` branch).  A reconnect of a python-client session whose Last-Event-ID is
    that of the stream's reconnect just before it (a resume, then: a reopen without one resets the client's cursor),
    after that reconnect's connection delivered events with ids: the client had those events, and a correct store
    sends them again, the same ids and payloads (real-python-stale-cursor*: the client log shows them twice).  Per such boundary: ``sc_prev`` (the previous reconnect's request), ``sc_ids`` / ``sc_n`` (the events
    delivered again, their ids), ``sc_call`` (the call that opened the stream).  ``fam``: clients.sessions of ``b``'s
    sessions (made here when not given); ``d``: :func:`deliveries` (the events' own table when not given); ``c``: the
    calls of ``b``'s sessions or more (rpc.boundary_calls), when made."""
    python = (clients.sessions(f, b) if fam is None else fam).filter(pl.col("client") == clients.PYTHON).select("session")
    # (the previous reconnect is the stream's reconnect just before, with a cursor or without: a reopen without
    # Last-Event-ID between two resumes is no resume, and the client's cursor after it is what that connection
    # delivered -- after a restart numbered from 1 again, the same id string names another event)
    keys = (
        b.lazy()
        .join(python.lazy(), on="session", how="semi")
        .select("gx", "pos", "session", "sk", "stream", "header")
        .sort("pos")
        .with_columns(p_gx=pl.col("gx").shift(1).over("session", "stream"), p_header=pl.col("header").shift(1).over("session", "stream"))
        .filter(pl.col("header").is_not_null() & (pl.col("header") != "") & pl.col("p_gx").is_not_null() & (pl.col("p_header") == pl.col("header")))
    )
    # what the previous reconnect's connection delivered (ids, visible, with data), and which of them came again: the
    # same event (its id and its digest), not another that has its id
    had = (
        (f.events.lazy().filter(pl.col("visible") & pl.col("has_id") & (pl.col("data") != "")) if d is None else d.lazy().filter(pl.col("has_data")))
        .select(pl.col("gx").alias("p_gx"), "id", "digest")
        .join(keys.select("p_gx", "gx"), on="p_gx")
    )
    again = (
        after.lazy().filter(~pl.col("overlap")).select("gx", "id", "digest", "ordinal")
        .join(had.select("gx", "id", "digest").unique(), on=["gx", "id", "digest"], how="semi")
        .sort("gx", "ordinal")
        .group_by("gx")
        .agg(sc_ids=pl.col("id").unique(maintain_order=True).head(LIST_CAP), sc_n=pl.col("id").n_unique())
    )
    x = f.exchanges.lazy().select(pl.col("gx").alias("p_gx"), pl.struct("source", "location").alias("sc_prev"))
    # (by the session's integer sk: rpc.calls names it so)
    opener = rpc.openers(f, keys.select("sk"), key="sk", c=c).select(sk="session", stream="stream", sc_call="v_call")
    return (
        keys.join(again, on="gx").join(x, on="p_gx", how="left").join(opener, on=["sk", "stream"], how="left")
        .select("gx", "sc_prev", "sc_ids", "sc_n", "sc_call")
        .collect()
    )
