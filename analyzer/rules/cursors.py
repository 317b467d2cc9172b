"""What a reconnect claimed (its Last-Event-ID) against what history shows: a stale or unknown cursor, another
session's event named or replayed, and the typescript example store's lost GET-stream resume."""
from __future__ import annotations

import polars as pl

from analyzer.rules.shape import finding_frame, ref, subject
from analyzer.signals.streams import Frames
from analyzer.formatted import formatted


def cursor_claims(b: pl.LazyFrame) -> pl.LazyFrame:
    """What the client claimed (Last-Event-ID) against what history shows it had."""
    with_header = b.filter(pl.col("header").is_not_null() & (pl.col("header") != ""))
    evidence = pl.concat_list(ref())
    # A gap already says the events after the claim were lost on the way to the client; a
    # stale claim is the other reading of the same wire, when the server sent them again.
    stale = with_header.filter(
        pl.col("last_before").is_not_null() & (pl.col("last_before") != pl.col("header")) & pl.col("id_found")
        & (pl.col("verdict") != "gap")
    ).with_columns(
        message=formatted(
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
        message=formatted("Last-Event-ID {} names an event that no capture shows being delivered in this session", pl.col("header")),
        evidence=evidence,
        subject=subject("header"),
    )
    return pl.concat([finding_frame(stale, "stale_last_event_id", "warning"), finding_frame(unknown, "unknown_last_event_id", "warning")])


def cross_session(f: Frames, b: pl.LazyFrame) -> pl.LazyFrame:
    """A reconnect naming another session's event, and streams replayed across sessions.

    A shared event store keyed only by stream (fastmcp PR #4402, GHSA-84j6-jc92-77jm)
    replays one session's events into another: the ids and payloads show it.
    """
    # (``_order``: the event's place in history, the events' own order)
    delivered = f.events.with_row_index("_order").filter(pl.col("visible") & pl.col("has_id")).select(
        "_order", "source", pl.col("session").alias("o_session"), pl.col("session_id").alias("o_session_id"), "id"
    )
    named = (
        b.filter(pl.col("header").is_not_null() & (pl.col("header") != "") & ~pl.col("id_found"))
        .join(delivered.rename({"id": "header"}), on=["source", "header"], maintain_order="left")
        # another Mcp-Session-Id in the same input (two hops of one capture are one session)
        .filter(pl.col("o_session_id") != pl.col("session_id"))
        # the first other session that was delivered that id: the one the message names.  (``unique("gx")`` kept any
        # of them, and the message and the finding's fingerprint changed from run to run: 14 of 8,763 findings of a
        # damaged 1M-event log in one run of three.  Sorted after the join, on its few rows: a join that keeps the
        # deliveries' order, maintain_order="left_right", built its table of every delivery, +150 MiB on 2M events)
        .sort("gx", "_order")
        .unique("gx", keep="first", maintain_order=True)
        .drop("_order")
        .with_columns(
            message=formatted("the reconnect sent Last-Event-ID {}, an event of session {}", pl.col("header"), pl.col("o_session_id")),
            evidence=pl.concat_list(ref()),
            subject=subject("header", "o_session_id"),
        )
    )
    # the signal the verdicts read (signals/boundaries.replayed_across_sessions), on the reconnect's row
    replayed = b.filter(pl.col("xs_n").is_not_null()).with_columns(
        message=formatted("{} event(s) delivered on this reconnect had been delivered in session {} ({}{})",
                          pl.col("xs_n"), pl.col("xs_other"), pl.col("xs_ids").list.join(", "),
                          pl.when(pl.col("xs_n") > 5).then(pl.lit(", …")).otherwise(pl.lit(""))),
        evidence=pl.col("xs_evidence"),
        subject=subject("xs_other", pl.col("xs_ids").list.join(",")),
    )
    return pl.concat([finding_frame(named, "last_event_id_of_other_session", "error"), finding_frame(replayed, "cross_session_replay", "critical")])


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
        evidence=pl.concat_list(ref()),
        subject=subject("header"),
    )
    return finding_frame(hit, "get_stream_resume_lost", "error")
