"""Checks over the whole history, beyond the first event after a boundary.

Each rule returns a lazy findings frame (a plan; document/build.py collects them all at once) with the
columns of ``FINDING_COLS``:
the rule name, its severity, the session, one sentence, the operational
effect and the evidence (source + location of each record that proves it).
"""
from __future__ import annotations

import polars as pl

from analyzer import catalog
from analyzer.signals import idschemes
from analyzer.signals.keys import where_varies
from analyzer.signals.streams import Frames

REF = pl.Struct({"source": pl.String, "location": pl.String})
FINDING_COLS = ["rule", "severity", "session", "session_id", "boundary", "message", "effect", "evidence", "pos", "subject"]


def subject(*parts: pl.Expr | str) -> pl.Expr:
    """What a finding is about, in the wire's own terms (event ids, calls, headers): with its rule, session id
    and time it makes the finding's fingerprint (document.fingerprint), which must not change with the wording
    of the message or the place of a record in a file.  Every rule sets one."""
    cols = [(pl.col(p) if isinstance(p, str) else p).cast(pl.String).fill_null("") for p in parts]
    return pl.concat_str(cols, separator="\x1f")


def natural_order(ids: pl.Expr) -> pl.Expr:
    """String ids in the order a reader expects: the all-digit ones by number (1, 2, 10, 11, 100, not 1, 10,
    100, 11), then the others as strings."""
    digits = ids.str.contains(r"^[0-9]+$")
    return ids.sort_by(~digits, pl.when(digits).then(ids.str.len_chars()).otherwise(0), ids)


def _frame(df: pl.LazyFrame, rule: str, severity: str) -> pl.LazyFrame:
    """Findings of ``rule``: its severity checked against the catalog, its effect the catalog's."""
    return _either(df, pl.lit(True), (rule, severity), (rule, severity))


def _either(df: pl.LazyFrame, cond: pl.Expr, yes: tuple[str, str], no: tuple[str, str]) -> pl.LazyFrame:
    """Findings of one plan under two (rule, severity) pairs, row by row: ``yes`` where ``cond`` holds,
    else ``no``.  One plan, not two filters of it (Polars would run a shared plan once per filter)."""
    def pick(a, b):
        return pl.when(cond).then(pl.lit(a)).otherwise(pl.lit(b)) if a != b else pl.lit(a)

    return df.select(
        pick(yes[0], no[0]).alias("rule"),
        pick(catalog.finding_severity(*yes), catalog.finding_severity(*no)).alias("severity"),
        pl.col("session"),
        pl.col("session_id"),
        pl.lit(None, dtype=pl.String).alias("boundary"),
        pl.col("message"),
        pick(catalog.FINDING[yes[0]].effect, catalog.FINDING[no[0]].effect).alias("effect"),
        pl.col("evidence"),
        pl.col("pos"),
        pl.col("subject"),
    )


def _ref(source: str = "source", location: str = "location") -> pl.Expr:
    return pl.struct(pl.col(source).alias("source"), pl.col(location).alias("location"))


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
        "gx", "id", "seq", "sprefix", "location", "source", "session", "session_id", "pos",
        contiguous=pl.col("id_scheme").is_in(idschemes.CONTIGUOUS),
        first_of_gx=pl.col("gx").is_first_distinct(),
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
        offences(ev.filter(~pl.col("contiguous")), ~pl.struct("gx", "id").is_first_distinct()),
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
        refs=_ref().head(5),
    ).with_columns(evidence=pl.concat_list(_ref("source", "prev_loc"), pl.col("refs")))
    backwards = per_conn.filter(pl.col("integer")).with_columns(
        message=pl.format("{} event id(s) on one connection were not above an earlier id (first: {} after {})", pl.col("n"), pl.col("first_id"), pl.col("after")),
        subject=subject("first_id", "after"),
    )
    repeated = per_conn.filter(~pl.col("integer")).with_columns(
        message=pl.format("{} event id(s) were delivered again on the same connection (first: {})", pl.col("n"), pl.col("first_id")),
        subject=subject("first_id"),
    )
    return pl.concat([_frame(backwards, "id_not_monotonic", "error"), _frame(repeated, "id_repeated", "error")])


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
    # only the events of a (session, id) that may have two digests are compared (keys.where_varies)
    ev = (
        where_varies(f.events.filter(pl.col("has_id") & pl.col("visible") & (pl.col("session_id") != "")), ["session", "id"], "digest")
        .join(restart, on="session", how="left", maintain_order="left")
        .filter(pl.col("r_pos").is_null() | (pl.col("pos") < pl.col("r_pos")))
        .with_columns(_epoch=pl.lit(False))
        .cache()  # few rows, used twice below
    )
    # First the (session, id) keys with two digests, from four narrow columns; only their events are then
    # gathered for evidence.  Grouping every event with its evidence list first cost a list per id: on
    # one stream of 2M events, 2M lists (+800 MiB) to keep none of them.
    keys = ev.select("session", "_epoch", "stream", "id", "digest").unique()
    conflicted = keys.group_by("session", "_epoch", "id").agg(n=pl.col("digest").n_unique()).filter(pl.col("n") > 1)
    per_stream = (
        keys.join(conflicted.select("session", "_epoch", "id"), on=["session", "_epoch", "id"], how="semi")
        .group_by("session", "_epoch", "stream", "id")
        .agg(in_stream=pl.len())
        .group_by("session", "_epoch", "id")
        .agg(pl.col("in_stream").max())
    )
    grouped = (
        ev.join(conflicted.select("session", "_epoch", "id"), on=["session", "_epoch", "id"], how="semi", maintain_order="left")
        .group_by("session", "_epoch", "id")
        .agg(
            session_id=pl.col("session_id").first(),
            n=pl.col("digest").n_unique(),
            streams=pl.col("stream").n_unique(),
            evidence=pl.struct("source", "location").unique(maintain_order=True).head(6),
            pos=pl.col("pos").min(),
        )
        .join(per_stream, on=["session", "_epoch", "id"], maintain_order="left")
        .sort("pos", "id")
    )
    # one finding per session and kind (a restarted counter conflicts on every id it reuses): the kinds are one
    # grouping, so the events are gone through once for both
    def said(one: str, many: str) -> pl.Expr:
        return (
            pl.when(pl.col("n_ids") == 1)
            .then(pl.format("event id {} {}", pl.col("first"), pl.lit(one)))
            .otherwise(pl.format("{} event ids ({}{}) {}", pl.col("n_ids"), pl.col("ids"),
                                 pl.when(pl.col("n_ids") > 5).then(pl.lit(", …")).otherwise(pl.lit("")), pl.lit(many)))
        )

    per_session = (
        grouped.with_columns(_same=pl.col("in_stream") > 1)
        .group_by("session", "_same")
        .agg(
            session_id=pl.col("session_id").first(),
            n_ids=pl.col("id").n_unique(),
            first=pl.col("id").first(),
            ids=pl.col("id").unique(maintain_order=True).head(5).str.join(", "),
            pos=pl.col("pos").min(),
            evidence=pl.col("evidence").first(),
        )
        .with_columns(
            message=pl.when(pl.col("_same"))
            .then(said("carried different payloads on one stream", "each carried different payloads on one stream"))
            .otherwise(said("was used on several streams of the session for different events",
                            "were each used on several streams of the session for different events")),
            subject=subject("ids"),
        )
        .sort("pos")
    )
    return _either(per_session, pl.col("_same"), ("digest_conflict", "error"), ("id_reused_across_streams", "warning"))


def cursor_claims(b: pl.LazyFrame) -> pl.LazyFrame:
    """What the client claimed (Last-Event-ID) against what history shows it had."""
    with_header = b.filter(pl.col("header").is_not_null() & (pl.col("header") != ""))
    evidence = pl.concat_list(_ref())
    # A gap already says the events after the claim were lost on the way to the client; a
    # stale claim is the other reading of the same wire, when the server sent them again.
    stale = with_header.filter(
        pl.col("last_before").is_not_null() & (pl.col("last_before") != pl.col("header")) & pl.col("id_found")
        & (pl.col("verdict") != "gap")
    ).with_columns(
        message=pl.format(
            "the client resumed with Last-Event-ID {} although the capture shows the stream had already delivered up to {}: "
            "either those events were lost after the capture point (then replaying them is right) or the client "
            "resumed from an older point than it had reached",
            pl.col("header"), pl.col("last_before"),
        ),
        evidence=evidence,
        subject=subject("header", "last_before"),
    )
    # when a body of the session was not recorded, the id may well be in it: no finding then
    unknown = with_header.filter(~pl.col("id_found") & ~pl.col("session_has_unrecorded")).with_columns(
        message=pl.format("Last-Event-ID {} names an event that no capture shows being delivered in this session", pl.col("header")),
        evidence=evidence,
        subject=subject("header"),
    )
    return pl.concat([_frame(stale, "stale_last_event_id", "warning"), _frame(unknown, "unknown_last_event_id", "warning")])


def cross_session(f: Frames, b: pl.LazyFrame) -> pl.LazyFrame:
    """A reconnect naming another session's event, and streams replayed across sessions.

    A shared event store keyed only by stream (fastmcp PR #4402, GHSA-84j6-jc92-77jm)
    replays one session's events into another: the ids and payloads show it.
    """
    delivered = f.events.filter(pl.col("visible") & pl.col("has_id")).select(
        "source", pl.col("session").alias("o_session"), pl.col("session_id").alias("o_session_id"), "id", "digest"
    )
    named = (
        b.filter(pl.col("header").is_not_null() & (pl.col("header") != "") & ~pl.col("id_found"))
        .join(delivered.rename({"id": "header"}).drop("digest"), on=["source", "header"], maintain_order="left")
        # another Mcp-Session-Id in the same input (two hops of one capture are one session)
        .filter(pl.col("o_session_id") != pl.col("session_id"))
        .unique("gx")
        .with_columns(
            message=pl.format("the reconnect sent Last-Event-ID {}, an event of session {}", pl.col("header"), pl.col("o_session_id")),
            evidence=pl.concat_list(_ref()),
            subject=subject("header", "o_session_id"),
        )
    )
    # the signal the verdicts read (signals/boundaries.replayed_across_sessions), on the reconnect's row
    replayed = b.filter(pl.col("xs_n").is_not_null()).with_columns(
        message=pl.format("{} event(s) delivered on this reconnect had been delivered in session {} ({}{})",
                          pl.col("xs_n"), pl.col("xs_other"), pl.col("xs_ids").list.join(", "),
                          pl.when(pl.col("xs_n") > 5).then(pl.lit(", …")).otherwise(pl.lit(""))),
        evidence=pl.col("xs_evidence"),
        subject=subject("xs_other", pl.col("xs_ids").list.join(",")),
    )
    return pl.concat([_frame(named, "last_event_id_of_other_session", "error"), _frame(replayed, "cross_session_replay", "critical")])


def ts_get_stream(b: pl.LazyFrame) -> pl.LazyFrame:
    """typescript-sdk example store: a resumed standalone GET stream is registered under the key ''
    (``'_GET_stream_…'.split('_')[0]``), so later notifications go nowhere (#943, #2560)."""
    hit = b.filter(
        (pl.col("id_scheme") == "ts_stream_ms")
        & pl.col("header").str.starts_with("_GET_stream_").fill_null(False)
        & pl.col("status").is_between(200, 299)
        & (pl.col("n_after") == 0)
    ).with_columns(
        message=pl.lit(
            "the standalone GET stream was resumed with a _GET_stream_ id and nothing came after: the typescript-sdk "
            "example event store registers such a resume under the wrong stream (issues #943, #2560)"
        ),
        evidence=pl.concat_list(_ref()),
        subject=subject("header"),
    )
    return _frame(hit, "get_stream_resume_lost", "error")


def once_per_capture(f: Frames, hist: pl.LazyFrame) -> pl.LazyFrame:
    """History findings of a multi-hop capture, once: each hop is its own view (views.hops), and
    a per-stream counter or an unanswered request shows on every hop.  A rule reported on the
    hop nearest the client (the one whose exchanges start first) is not repeated for the other
    hops of the same capture and session; what only another hop shows is kept."""
    views_ = (
        f.exchanges.filter(pl.col("view") != pl.col("source"))
        .group_by("session")
        .agg(pl.col("source").first(), pl.col("session_id").first(), first=pl.col("pos").min())
        .with_columns(primary=pl.col("first") == pl.col("first").min().over("source", "session_id"))
    )
    tagged = hist.join(views_.select("session", pl.col("source").alias("_src"), "primary"), on="session", how="left", maintain_order="left")
    # one window instead of a join of the plan with itself (which would run every rule twice)
    on_primary = pl.col("primary").fill_null(False).any().over("rule", "_src", "session_id")
    return tagged.filter(pl.col("primary").is_null() | pl.col("primary") | ~on_primary).drop("_src", "primary")
