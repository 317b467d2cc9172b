"""The verdict at every reconnect boundary (README, "Decision chain", generated from decision_chain below).

The reference's four cases, made exact and extended:

- Its digest branch is dead (``first == last`` is rejected as a replay reset
  before the digest is compared).  Here the comparison comes first: a first
  event that repeats the cursor's id *with the same digest* is the boundary
  event re-sent (a benign overlap the client must de-duplicate); the same id
  with a *different* digest is a reset.
- "Last processed" is what history shows the client processed on the resumed
  stream, not only the ``Last-Event-ID`` it claims: a stale claim (the client
  resumed from an older point) yields duplicates, and the analyzer sees them.
  For integers the cursor is max(claim, last delivered) so that events a
  capture missed never look like a gap.
- Integer continuity is checked for every event of the resumed connection
  (case 4: "continue to validate every subsequent event"); the verdict is the
  nature of the first break.
- Opaque ids are judged by history: an id the stream already delivered is a
  reset; otherwise the boundary is ``unverifiable``.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from . import eras, history, idschemes, rpc, views
from .streams import SSE, Frames

LIST_CAP = 1000  # ids listed per boundary; the counts stay exact
MAX_EXPAND = 1_000_000  # missing ids checked one by one against other streams (shared counter)



@dataclass(frozen=True)
class Branch:
    """One branch of the decision chain: the first branch whose condition holds gives the verdict."""

    rule_id: str
    verdict: str
    when: pl.Expr
    reason: pl.Expr
    doc: str  # the condition in words (README's decision table is checked against these)


def decision_chain() -> list[Branch]:
    """The verdict at a boundary, in the order it is decided (the design's priority order, made exact).

    The transport answers first (no response, refused, another session, a forgotten
    session, a new replay epoch); then whether there is anything to judge (an event
    stream, recorded); then what the events are: another session's, replayed, another
    stream's, lost; then whether continuity is proven.  ``opaque_unproven`` is the fallback.
    """
    contiguous = pl.col("id_scheme").is_in(idschemes.CONTIGUOUS)
    status_ok = pl.col("status").is_between(200, 299)
    other_session = pl.col("resp_session_id").is_not_null() & (pl.col("resp_session_id") != pl.col("session_id"))
    epoch_changed = pl.col("epoch_before").ne_missing(pl.col("replay_epoch")) & (
        pl.col("epoch_before").is_not_null() | pl.col("replay_epoch").is_not_null()
    )
    rejected_why = pl.when(pl.col("error_message").is_not_null()).then(pl.format(" ({})", pl.col("error_message"))).otherwise(pl.lit(""))
    hist_lost = pl.col("hist_lost_count").fill_null(0) > 0
    B = Branch
    return [
        B("no_response", "unverifiable", pl.col("status").is_null(),
          pl.lit("the reconnect got no response (aborted or connection failed)"),
          "the reconnect got no response (aborted, connection failed)"),
        B("refused", "session_invalid", ~status_ok,
          pl.format("the reconnect was answered HTTP {}{}", pl.col("status"), rejected_why),
          "answered non-2xx (the reason quotes the server: `404 Session not found`, `400 Invalid event ID format`, `409 Conflict`)"),
        B("other_session_id", "session_invalid", other_session,
          pl.format("the reconnect was answered with another Mcp-Session-Id ({})", pl.col("resp_session_id")),
          "answered with another `Mcp-Session-Id`"),
        B("forgotten_session", "session_resurrected", pl.col("resurrected").is_not_null(), pl.col("resurrected"),
          "the old session id was accepted, but before the old process delivers anything again the server answers "
          "`-32600`/`-32602`/\"not initialized\", issues a second `initialize` result, or numbers its own requests from the start"),
        B("epoch_changed", "epoch_change", epoch_changed,
          pl.format("the replay epoch changed from {} to {}", pl.col("epoch_before").fill_null("(none)"), pl.col("replay_epoch").fill_null("(none)")),
          "`X-MCP-Replay-Epoch` differs from the resumed connection's"),
        B("not_an_event_stream", "unverifiable", pl.col("content_type") != SSE,
          pl.format("the reconnect was answered {} {}, not an event stream", pl.col("status"), pl.col("content_type").fill_null("(no content type)")),
          "answered 2xx but not `text/event-stream`"),
        B("body_not_recorded", "unverifiable", ~pl.col("body_recorded"),
          pl.lit("the capture did not record the reconnect's body, so its events are unknown"),
          "the capture did not record the body"),
        # Another session's events make every id comparison meaningless (its counter, its stream).
        B("other_sessions_events", "cross_stream_replay", pl.col("xs_n").fill_null(0) > 0,
          pl.format("{} event(s) on this reconnect are the same events (id and payload) that session {} had been delivered "
                    "earlier (first: {}): another session's stream was replayed here",
                    pl.col("xs_n"), pl.col("xs_other"), pl.col("xs_ids").list.first()),
          "events with the id *and* payload another session was delivered earlier (a store keyed without the session), any id scheme"),
        B("ids_went_back", "replay_reset", contiguous & (pl.col("first_break") == "replay_reset"),
          pl.format("event id {} came after {}: ids went back, {} event(s) already processed were delivered again",
                    pl.col("break_id"), pl.col("break_prev"), pl.col("dup_count")),
          "contiguous ids: an id not above the client's Last-Event-ID (or the previous event) anywhere in the resumed connection"),
        B("opaque_redelivered", "replay_reset", ~contiguous & (pl.col("o_dup_count").fill_null(0) > 0),
          pl.format("{} event id(s) this stream had already delivered were delivered again", pl.col("o_dup_count")),
          "opaque ids: an id the stream had delivered at or before the client's Last-Event-ID, delivered again"),
        B("foreign_stream_ids", "cross_stream_replay", pl.col("foreign_count").fill_null(0) > 0,
          pl.format("{} event(s) carry ids of another stream (first: {}; the resumed stream is {})",
                    pl.col("foreign_count"), pl.col("foreign_id"), pl.col("cursor_prefix")),
          "ids that name another stream (go, csharp, typescript ids carry it)"),
        B("response_of_other_stream", "cross_stream_replay", pl.col("rpc_cross").is_not_null(), pl.col("rpc_cross"),
          "a JSON-RPC response whose request opened another stream"),
        B("ids_jumped", "gap", contiguous & (pl.col("first_break") == "gap"),
          pl.format(
              "event id {} came after {}: {} event id(s) were never delivered{}",
              pl.col("break_id"), pl.col("break_prev"), pl.col("lost_count"),
              pl.when(pl.col("n_passed").fill_null(0) > 0)
              .then(pl.format(
                  " ({} of them left the capture point on the old connection, but the client's own Last-Event-ID {} shows they never arrived)",
                  pl.col("n_passed"), pl.col("cursor_str"),
              ))
              .when(hist_lost)
              .then(pl.format(
                  " ({} of them were seen on the resumed connection by {}, but never reached this view)",
                  pl.col("hist_lost_count"), pl.col("hist_sources").list.join(", "),
              ))
              .otherwise(pl.lit("")),
          ),
          "contiguous ids: `first > last + 1` from the client's Last-Event-ID, anywhere in the resumed connection "
          "(ids another stream of the session took excepted)"),
        B("lost_after_capture_point", "gap", hist_lost & pl.col("hist_passed").fill_null(False),
          pl.format(
              "{} event(s) left the capture point on the old connection after the client's Last-Event-ID {} ({}), "
              "but that Last-Event-ID shows they never arrived, and the server resumed past them (shown by {})",
              pl.col("hist_lost_count"), pl.col("cursor_str"), pl.col("hist_lost_ids").list.head(5).list.join(", "),
              pl.col("hist_sources").list.join(", "),
          ),
          "events that left the capture point after the client's Last-Event-ID (so never reached the client) and were never replayed"),
        B("lost_in_history", "gap", hist_lost,
          pl.format(
              "{} event(s) the server emitted on the resumed stream after the cursor never reached the client{} (shown by {})",
              pl.col("hist_lost_count"),
              pl.when(pl.col("hist_reused") > 0).then(pl.format("; {} of their ids were reused for other events", pl.col("hist_reused"))).otherwise(pl.lit("")),
              pl.col("hist_sources").list.join(", "),
          ),
          "another view (capture, hop) or the cut-off tail shows events emitted after the cursor that never arrived"),
        B("owed_nothing_replayed", "gap", (pl.col("n_after") == 0) & (pl.col("owed").fill_null(0) > 0),
          pl.format("nothing was replayed, yet {} request(s) sent on the resumed stream never got their response ({})", pl.col("owed"), pl.col("owed_ids")),
          "nothing replayed while the resumed stream still owed a response"),
        B("no_event_after", "unverifiable", pl.col("n_after") == 0,
          pl.lit("no event with an id arrived after the reconnect, so nothing shows the stream resumed"),
          "no event with an id after the reconnect"),
        B("no_cursor", "unverifiable", contiguous & pl.col("cursor_seq").is_null(),
          pl.lit("the client sent no Last-Event-ID and the earlier stream delivered no id to compare with"),
          "contiguous ids, but no Last-Event-ID and no earlier id to compare with"),
        B("ids_continue", "continuous", contiguous,
          pl.format("event ids continue from the cursor {} without a gap or a repeat", pl.col("cursor_str")),
          "contiguous ids continue from the client's Last-Event-ID, and every later id keeps validating"),
        B("successor_proven", "continuous", pl.col("successor_source").is_not_null(),
          pl.format("{} shows that event {} came right after the cursor, and the reconnect starts with it",
                    pl.col("successor_source"), pl.col("first_event_id_after")),
          "opaque ids: another view, or the old connection itself, shows the reconnect starts with the event that followed the cursor"),
    ]


FALLBACK = ("opaque_unproven", "unverifiable", "opaque ids and nothing proves which event came after the cursor")


def chain_markdown() -> str:
    """README's decision table, from ``decision_chain`` (tests/test_readme.py keeps the two equal)."""
    rows = ["| # | branch (`rule_id`) | verdict | when |", "|---|---|---|---|"]
    for n, br in enumerate(decision_chain(), start=1):
        rows.append(f"| {n} | `{br.rule_id}` | `{br.verdict}` | {br.doc} |")
    rows.append(f"| {len(rows) - 1} | `{FALLBACK[0]}` | `{FALLBACK[1]}` | {FALLBACK[2]} |")
    return "\n".join(rows) + "\n"


def _boundaries(f: Frames, links: pl.DataFrame) -> pl.DataFrame:
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


def _after_events(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Id-bearing events the client saw on each boundary's connection, with the overlap flag."""
    before_digest = (
        f.events.filter(pl.col("visible") & pl.col("has_id"))
        .select(pl.col("gx").alias("resumed_gx"), pl.col("id").alias("cursor_str"), pl.col("digest").alias("before_digest"))
        .unique(["resumed_gx", "cursor_str"], keep="last")
    )
    ev = (
        f.events.filter(pl.col("visible") & pl.col("has_id"))
        .join(
            b.select("gx", "resumed_gx", "cursor_str", "cursor_seq", "cursor_prefix", pl.col("pos").alias("b_pos"), "stream"),
            on="gx",
        )
        .join(before_digest, on=["resumed_gx", "cursor_str"], how="left")
        .sort(["gx", "ordinal"])
        .with_columns(k=pl.int_range(pl.len()).over("gx"))
        .with_columns(
            # the dead branch of the reference, made live: the boundary event itself, re-sent unchanged
            overlap=(pl.col("k") == 0) & (pl.col("id") == pl.col("cursor_str")) & (pl.col("digest") == pl.col("before_digest")).fill_null(False),
            # an id that names another stream than the cursor's (go, csharp, typescript ids carry their stream)
            foreign=pl.col("cursor_prefix").is_not_null() & pl.col("sprefix").is_not_null() & (pl.col("sprefix") != pl.col("cursor_prefix")),
        )
    )
    return ev.join(_prior(f, b), on=["gx", "id"], how="left").sort(["gx", "ordinal"])


def _prior(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Per boundary and id: had the stream already delivered it, before or after the client's cursor?

    ``before_claim``: the client says it had it (Last-Event-ID at or after it in delivery
    order): sending it again is a duplicate.  ``after_claim``: it left the capture point
    after the cursor, so by the client's own Last-Event-ID it never arrived: sending it
    again is the replay the client needs (or, if the client resumed from an older point
    than it had reached, a duplicate the wire alone cannot tell apart).
    """
    delivered = f.events.filter(pl.col("visible") & pl.col("has_id")).select("stream", "pos", "ordinal", "id")
    before = (
        b.select("gx", "stream", "cursor_str", pl.col("pos").alias("b_pos"))
        .join(delivered, on="stream")
        .filter(pl.col("pos") < pl.col("b_pos"))
        .sort("gx", "pos", "ordinal")
        .with_columns(r=pl.int_range(pl.len()).over("gx"))
    )
    claim = before.filter(pl.col("id") == pl.col("cursor_str")).group_by("gx").agg(claim_r=pl.col("r").max())
    return (
        before.group_by("gx", "id")
        .agg(first_r=pl.col("r").min())
        .join(claim, on="gx", how="left")
        .select(
            "gx",
            "id",
            prior=pl.when(pl.col("claim_r").is_null() | (pl.col("first_r") <= pl.col("claim_r")))
            .then(pl.lit("before_claim"))
            .otherwise(pl.lit("after_claim")),
        )
    )


def _sequence_checks(f: Frames, after: pl.DataFrame) -> pl.DataFrame:
    """Reference cases 2-4 over every event of the resumed connection, for contiguous id schemes.

    With one counter shared by a session's streams (``integer_shared``) a jump is
    only a gap for the ids that no other stream of the session delivered.
    """
    seq = (
        after.filter(~pl.col("overlap") & ~pl.col("foreign") & pl.col("seq").is_not_null() & pl.col("cursor_seq").is_not_null())
        .with_columns(prev=pl.col("seq").shift(1).over("gx"))
        .with_columns(prev=pl.coalesce("prev", "cursor_seq"))
        .with_columns(
            step=pl.col("seq") - pl.col("prev"),
            running_max=pl.max_horizontal(pl.col("cursor_seq"), pl.col("seq").cum_max().shift(1).over("gx")),
        )
        .with_row_index("rid")
    )
    shared = pl.col("id_scheme") == "integer_shared"
    expand = pl.when(shared).then(pl.lit(MAX_EXPAND)).otherwise(pl.lit(LIST_CAP))
    missing = (
        seq.filter(pl.col("step") > 1)
        .select("rid", "gx", "session", "stream", "id_scheme", "sprefix", "b_pos",
                m=pl.int_ranges(pl.col("prev") + 1, pl.min_horizontal(pl.col("seq"), pl.col("prev") + 1 + expand)))
        .explode("m")
    )
    elsewhere = (
        f.events.filter(pl.col("visible") & (pl.col("id_scheme") == "integer_shared") & pl.col("seq").is_not_null())
        .select("session", pl.col("stream").alias("o_stream"), pl.col("seq").alias("m"))
        .unique()
    )
    taken = (
        missing.filter(pl.col("id_scheme") == "integer_shared")
        .join(elsewhere, on=["session", "m"], how="inner")
        .filter(pl.col("o_stream") != pl.col("stream"))
        .select("rid", "m")
        .unique()
    )
    missing = missing.join(taken, on=["rid", "m"], how="anti")
    # missing ids the capture point saw leave on this stream before the reconnect
    passed = (
        f.events.filter(pl.col("visible") & pl.col("seq").is_not_null())
        .select("stream", pl.col("seq").alias("m"), pl.col("pos").alias("d_pos"), pl.col("sprefix").alias("d_prefix"))
        .join(missing.select("rid", "stream", "m", "b_pos", "sprefix"), on=["stream", "m"])
        .filter((pl.col("d_pos") < pl.col("b_pos")) & pl.col("d_prefix").eq_missing(pl.col("sprefix")))
        .select("rid", "m")
        .unique()
        .group_by("rid")
        .agg(n_passed=pl.len())
    )
    per_row = missing.group_by("rid").agg(
        n_missing_listed=pl.len(),
        missing_ids=idschemes.format_ids(pl.col("sprefix"), pl.col("id_scheme"), pl.col("m")).head(LIST_CAP),
    )
    seq = (
        seq.join(per_row, on="rid", how="left")
        .join(passed, on="rid", how="left")
        .with_columns(
            # beyond the expansion cap nothing was subtracted: those ids count as missing
            n_missing=pl.when(pl.col("step") <= 1)
            .then(0)
            .when(shared)
            .then(pl.col("n_missing_listed").fill_null(0) + pl.max_horizontal(pl.col("step") - 1 - MAX_EXPAND, pl.lit(0)))
            .otherwise(pl.col("step") - 1)
        )
        .with_columns(
            brk=pl.when(pl.col("step") <= 0).then(pl.lit("replay_reset")).when(pl.col("n_missing") > 0).then(pl.lit("gap")),
            dup=pl.col("seq") <= pl.col("running_max"),
        )
        .sort("gx", "ordinal")
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


def _foreign(after: pl.DataFrame) -> pl.DataFrame:
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


def _opaque_checks(f: Frames, after: pl.DataFrame) -> pl.DataFrame:
    """History instead of arithmetic: ids the stream already delivered, delivered again.

    Proving continuity for opaque ids needs a second view of the same stream
    (a server-side log showing which event followed the cursor); that comes
    with merging captures by session.  Until then an opaque resume without
    repeats is ``unverifiable``.
    """
    delivered = f.events.filter(pl.col("visible") & pl.col("has_id")).select(
        "stream", "id", pl.col("pos").alias("d_pos"), pl.col("gx").alias("d_gx")
    )
    seen_before = (
        after.filter(~pl.col("overlap") & (pl.col("prior") == "before_claim"))
        .join(delivered, on=["stream", "id"], how="inner")
        .filter(pl.col("d_pos") < pl.col("b_pos"))
        .select("gx", "ordinal", "id")
        .unique()
    )
    repeated_here = after.filter(~pl.col("overlap") & pl.col("id").is_duplicated().over("gx")).select("gx", "ordinal", "id")
    dups = (
        pl.concat([seen_before, repeated_here])
        .unique()
        .sort(["gx", "ordinal"])
        .group_by("gx")
        .agg(dup_ids=pl.col("id").head(LIST_CAP), dup_count=pl.len())
    )
    return dups



def _handled(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
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


def judge(f: Frames, links: pl.DataFrame, rev: pl.DataFrame) -> pl.DataFrame:
    """One row per boundary with its verdict, reason, ids and handling; ``rev`` from eras.revisions."""
    b = _boundaries(f, links).join(rev, on="session", how="left")
    after = _after_events(f, b)
    seqs = _sequence_checks(f, after)
    opq = _opaque_checks(f, after)
    first = after.group_by("gx").agg(
        first_event_id_after=pl.col("id").first(),
        overlap=pl.col("overlap").any(),
        n_after=(~pl.col("overlap")).sum(),
        # re-sent events that had left the capture point after the client's cursor
        resent_ids=pl.col("id").filter(~pl.col("overlap") & (pl.col("prior") == "after_claim")).unique(maintain_order=True).head(LIST_CAP),
        resent_count=(~pl.col("overlap") & (pl.col("prior") == "after_claim")).sum(),
    )
    b = (
        b.join(first, on="gx", how="left")
        .join(seqs, on="gx", how="left")
        .join(opq.rename({"dup_ids": "o_dup_ids", "dup_count": "o_dup_count"}), on="gx", how="left")
        .join(_foreign(after).drop("cursor_prefix"), on="gx", how="left")
        .join(_handled(f, b), on="gx", how="left")
        .join(rpc.boundary_signals(f, b), on="gx", how="left")
        .join(eras.polling(f, b), on="gx", how="left")
        .join(views.boundary_history(f, b, after), on="gx", how="left")
        .join(history.replayed_across_sessions(f, b).select("gx", "xs_n", "xs_other", "xs_ids"), on="gx", how="left")
        .with_columns(pl.col("n_after").fill_null(0), pl.col("overlap").fill_null(False))
    )
    contiguous = pl.col("id_scheme").is_in(idschemes.CONTIGUOUS)
    verdict_reason = pl.struct(v=pl.lit(FALLBACK[1]), r=pl.lit("ids are opaque and no capture shows which event came after the cursor"), rule=pl.lit(FALLBACK[0]))
    for br in reversed(decision_chain()):
        verdict_reason = pl.when(br.when).then(pl.struct(v=pl.lit(br.verdict), r=br.reason, rule=pl.lit(br.rule_id))).otherwise(verdict_reason)
    b = b.with_columns(_vr=verdict_reason).with_columns(
        verdict=pl.col("_vr").struct.field("v"),
        rule_id=pl.col("_vr").struct.field("rule"),
        reason=pl.when((pl.col("_vr").struct.field("v") == "unverifiable") & pl.col("polling").fill_null(False))
        .then(pl.format("{} (2025-11-25 polling: the server closed the connection after sending retry)", pl.col("_vr").struct.field("r")))
        .when(pl.col("overlap"))
        .then(pl.format("{} (the server first re-sent event {} unchanged: the client must drop that duplicate)", pl.col("_vr").struct.field("r"), pl.col("cursor_str")))
        .otherwise(pl.col("_vr").struct.field("r")),
    ).with_columns(
        reason=pl.when(pl.col("resent_count").fill_null(0) > 0)
        .then(pl.format(
            "{}; {} event(s) sent again had already left the capture point after the client's Last-Event-ID {}: "
            "by that Last-Event-ID they never reached the client, and resending them is right; "
            "if the client had them after all (a stale Last-Event-ID), it processes them twice",
            pl.col("reason"), pl.col("resent_count"), pl.col("cursor_str"),
        ))
        .otherwise(pl.col("reason")),
    )
    is_int_verdict = contiguous & pl.col("verdict").is_in(["gap", "replay_reset", "continuous"]) & (pl.col("first_break").is_not_null() | (pl.col("verdict") != "gap"))
    by_history = (
        (pl.col("verdict") == "gap") & pl.col("hist_lost_count").is_not_null() & ~(contiguous & (pl.col("first_break") == "gap")).fill_null(False)
    )
    b = b.with_columns(
        lost_event_ids=pl.when(by_history).then(pl.col("hist_lost_ids")).when(is_int_verdict).then(pl.col("lost_ids")).otherwise(pl.lit([], dtype=pl.List(pl.String))),
        lost_count=pl.when(by_history).then(pl.col("hist_lost_count")).when(is_int_verdict).then(pl.col("lost_count")).otherwise(0),
        # the events the server sent twice past the capture point: definite duplicates (at or
        # before the client's cursor), then the ones resent after it (see ``_prior``)
        duplicated_event_ids=pl.concat_list(
            pl.when(is_int_verdict).then(pl.col("dup_ids")).otherwise(pl.col("o_dup_ids")).fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pl.col("resent_ids").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        ).list.unique(maintain_order=True).list.head(LIST_CAP),
        duplicated_count=pl.when(is_int_verdict).then(pl.col("dup_count")).otherwise(pl.col("o_dup_count")).fill_null(0)
        + pl.col("resent_count").fill_null(0),
        handled_correctly=pl.when(pl.col("verdict") == "continuous").then(True).otherwise(pl.col("handled")),
    )
    b = b.with_columns(
        pl.col("lost_event_ids").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        pl.col("lost_count").fill_null(0),
        severity=pl.when(pl.col("verdict") == "continuous")
        .then(pl.lit(None, dtype=pl.String))
        .when((pl.col("verdict") == "unverifiable") & pl.col("polling").fill_null(False) & (pl.col("owed").fill_null(0) == 0))
        .then(pl.lit("info"))
        .when(pl.col("verdict") == "unverifiable")
        .then(pl.lit("warning"))
        .when(pl.col("handled_correctly") == True)  # noqa: E712 (polars expression)
        .then(pl.lit("warning"))
        .when(pl.col("handled_correctly") == False)  # noqa: E712
        .then(pl.lit("critical"))
        .otherwise(pl.lit("error")),
    )
    return views.dedupe(b.drop("_vr"), f)
