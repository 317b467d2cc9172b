"""Checks over the whole history, beyond the first event after a boundary.

Each function returns a findings frame with the columns of ``FINDING_COLS``:
the rule name, its severity, the session, one sentence, the operational
effect and the evidence (source + location of each record that proves it).
"""
from __future__ import annotations

import polars as pl

from .streams import Frames

REF = pl.Struct({"source": pl.String, "location": pl.String})
FINDING_COLS = ["rule", "severity", "session", "session_id", "boundary", "message", "effect", "evidence", "pos"]

EFFECTS = {
    "session_invalid": "The server no longer knows the session: the client must start a new one with initialize "
    "(the spec says MUST on 404); anything it keeps sending under the old id is rejected or lost.",
    "session_resurrected": "Phantom state: the server answers under the old session id but has none of its state "
    "(capabilities, subscriptions, pending requests).",
    "epoch_change": "The server's replay buffer was reset: events from before the change can no longer be replayed.",
    "replay_reset": "Duplicate side effects: events the client had already processed were delivered again "
    "(tool calls, sampling or elicitation requests handled twice).",
    "cross_stream_replay": "Events of another stream were delivered here: responses reach the wrong request.",
    "gap": "Unbounded latency and stale state: events emitted while disconnected never arrived; a request "
    "whose response was among them hangs until it times out.",
    "unverifiable": "Continuity cannot be proven from the captures: the reference's rule is to treat the "
    "session as untrusted and re-initialize.",
    "id_not_monotonic": "Event ids went backwards or repeated inside one connection: a client de-duplicating by id "
    "drops new events or processes old ones twice.",
    "id_repeated": "The same event id was delivered twice on one connection: a repeated message is processed twice.",
    "digest_conflict": "Two different events carry the same id in one session: proof that the server's ids "
    "restarted or that another process answered (the 'gap with continuous ids' signature).",
    "id_reused_across_streams": "The server numbers events per stream, although the spec requires ids unique "
    "across all streams of a session: a Last-Event-ID cannot say which stream to resume, and a server may replay "
    "the wrong one.",
    "stale_last_event_id": "The client resumed from an older point than it had reached: already-processed events "
    "are replayed to it.",
    "unknown_last_event_id": "The resume names an event no capture shows being delivered: which stream it resumes "
    "cannot be proven.",
}


def _frame(df: pl.DataFrame, rule: str, severity: str) -> pl.DataFrame:
    return df.select(
        pl.lit(rule).alias("rule"),
        pl.lit(severity).alias("severity"),
        pl.col("session"),
        pl.col("session_id"),
        pl.lit(None, dtype=pl.String).alias("boundary"),
        pl.col("message"),
        pl.lit(EFFECTS[rule]).alias("effect"),
        pl.col("evidence"),
        pl.col("pos"),
    )


def _ref(source: str = "source", location: str = "location") -> pl.Expr:
    return pl.struct(pl.col(source).alias("source"), pl.col(location).alias("location"))


def id_order(f: Frames) -> pl.DataFrame:
    """Reference case 4, 'continue to validate every subsequent event': ids inside one connection.

    Integer ids must rise: an id not above every earlier id of the connection
    went backwards or repeated.  Opaque ids must not repeat.  One finding per
    connection (a restarted counter would otherwise give thousands), naming
    the first offence and counting the rest.
    """
    ev = (
        f.events.filter(pl.col("visible") & pl.col("has_id"))
        .join(f.exchanges.select("gx", "id_scheme"), on="gx")
        .sort(["gx", "ordinal"])
        .with_columns(
            high=pl.col("id_int").cum_max().shift(1).over("gx"),
            prev_loc=pl.col("location").shift(1).over("gx"),
            prev_id=pl.col("id").shift(1).over("gx"),
            seen=pl.int_range(pl.len()).over(["gx", "id"]),
        )
        .with_columns(
            bad=pl.when(pl.col("id_scheme") == "integer").then(pl.col("id_int") <= pl.col("high")).otherwise(pl.col("seen") > 0)
        )
        .filter(pl.col("bad"))
    )
    per_conn = ev.group_by("gx").agg(
        session=pl.col("session").first(),
        session_id=pl.col("session_id").first(),
        pos=pl.col("pos").first(),
        integer=(pl.col("id_scheme") == "integer").first(),
        n=pl.len(),
        first_id=pl.col("id").first(),
        after=pl.col("prev_id").first(),
        source=pl.col("source").first(),
        prev_loc=pl.col("prev_loc").first(),
        refs=_ref().head(5),
    ).with_columns(evidence=pl.concat_list(_ref("source", "prev_loc"), pl.col("refs")))
    backwards = per_conn.filter(pl.col("integer")).with_columns(
        message=pl.format("{} event id(s) on one connection were not above an earlier id (first: {} after {})", pl.col("n"), pl.col("first_id"), pl.col("after"))
    )
    repeated = per_conn.filter(~pl.col("integer")).with_columns(
        message=pl.format("{} event id(s) were delivered again on the same connection (first: {})", pl.col("n"), pl.col("first_id"))
    )
    return pl.concat([_frame(backwards, "id_not_monotonic", "error"), _frame(repeated, "id_repeated", "error")])


def digest_conflicts(f: Frames) -> pl.DataFrame:
    """One (session, id) seen with two different digests.

    Inside one stream this proves that two different events went out under one
    id (a restarted counter, another process).  Across streams it is the
    per-stream counter that the spec forbids ("globally unique across all
    streams within that session"): a Last-Event-ID then cannot name its stream.
    """
    ev = f.events.filter(pl.col("has_id") & (pl.col("session_id") != ""))
    per_stream = ev.group_by("session", "stream", "id").agg(in_stream=pl.col("digest").n_unique())
    grouped = (
        ev.group_by("session", "id")
        .agg(
            session_id=pl.col("session_id").first(),
            n=pl.col("digest").n_unique(),
            streams=pl.col("stream").n_unique(),
            evidence=pl.struct("source", "location").unique(maintain_order=True).head(6),
            pos=pl.col("pos").min(),
        )
        .filter(pl.col("n") > 1)
        .join(per_stream.group_by("session", "id").agg(pl.col("in_stream").max()), on=["session", "id"])
        .sort("pos", "id")
    )
    same = grouped.filter(pl.col("in_stream") > 1).with_columns(
        message=pl.format("event id {} was seen with {} different payloads on one stream", pl.col("id"), pl.col("n"))
    )
    across = grouped.filter(pl.col("in_stream") == 1).with_columns(
        message=pl.format("event id {} was used on {} streams of the session for different events", pl.col("id"), pl.col("streams"))
    )
    return pl.concat([_frame(same, "digest_conflict", "error"), _frame(across, "id_reused_across_streams", "warning")])


def cursor_claims(b: pl.DataFrame) -> pl.DataFrame:
    """What the client claimed (Last-Event-ID) against what history shows it had."""
    with_header = b.filter(pl.col("header").is_not_null() & (pl.col("header") != ""))
    evidence = pl.concat_list(_ref())
    stale = with_header.filter(
        pl.col("last_before").is_not_null() & (pl.col("last_before") != pl.col("header")) & pl.col("id_found")
    ).with_columns(
        message=pl.format(
            "the client resumed with Last-Event-ID {} although the stream had already delivered up to {}",
            pl.col("header"), pl.col("last_before"),
        ),
        evidence=evidence,
    )
    # when a body of the session was not recorded, the id may well be in it: no finding then
    unknown = with_header.filter(~pl.col("id_found") & ~pl.col("session_has_unrecorded")).with_columns(
        message=pl.format("Last-Event-ID {} names an event that no capture shows being delivered in this session", pl.col("header")),
        evidence=evidence,
    )
    return pl.concat([_frame(stale, "stale_last_event_id", "warning"), _frame(unknown, "unknown_last_event_id", "warning")])
