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

from analyzer.catalog import CAPTURE_BLIND
from analyzer.signals import boundaries, idschemes
from analyzer.signals.boundaries import LIST_CAP
from analyzer.signals.streams import SSE, Frames
from analyzer.formatted import formatted



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
    rejected_why = pl.when(pl.col("error_message").is_not_null()).then(formatted(" ({})", pl.col("error_message"))).otherwise(pl.lit(""))
    hist_lost = pl.col("hist_lost_count").fill_null(0) > 0
    B = Branch
    return [
        B("no_response", "unverifiable", pl.col("status").is_null(),
          pl.lit("the reconnect got no response (aborted or connection failed)"),
          "the reconnect got no response (aborted, connection failed)"),
        B("refused", "session_invalid", ~status_ok,
          formatted("the reconnect was answered HTTP {}{}", pl.col("status"), rejected_why),
          "answered non-2xx (the reason quotes the server: `404 Session not found`, `400 Invalid event ID format`, `409 Conflict`)"),
        B("other_session_id", "session_invalid", other_session,
          formatted("the reconnect was answered with another Mcp-Session-Id ({})", pl.col("resp_session_id")),
          "answered with another `Mcp-Session-Id`"),
        B("forgotten_session", "session_resurrected", pl.col("resurrected").is_not_null(), pl.col("resurrected"),
          "the old session id was accepted, but before the old process delivers anything again the server answers "
          "`-32600`/`-32602`/\"not initialized\", issues a second `initialize` result, or numbers its own requests from the start"),
        B("epoch_changed", "epoch_change", epoch_changed,
          formatted("the replay epoch changed from {} to {}", pl.col("epoch_before").fill_null("(none)"), pl.col("replay_epoch").fill_null("(none)")),
          "`X-MCP-Replay-Epoch` differs from the resumed connection's"),
        B("not_an_event_stream", "unverifiable", pl.col("content_type") != SSE,
          formatted("the reconnect was answered {} {}, not an event stream", pl.col("status"), pl.col("content_type").fill_null("(no content type)")),
          "answered 2xx but not `text/event-stream`"),
        B("body_not_recorded", "unverifiable", ~pl.col("body_recorded"),
          pl.lit("the capture did not record the reconnect's body, so its events are unknown"),
          "the capture did not record the body"),
        # Another session's events make every id comparison meaningless (its counter, its stream).
        B("other_sessions_events", "cross_stream_replay", pl.col("xs_n").fill_null(0) > 0,
          formatted("{} event(s) on this reconnect are the same events (id and payload) that session {} had been delivered "
                    "earlier (first: {}): another session's stream was replayed here",
                    pl.col("xs_n"), pl.col("xs_other"), pl.col("xs_ids").list.first()),
          "events with the id *and* payload another session was delivered earlier (a store keyed without the session), any id scheme"),
        B("stale_last_event_id", "replay_reset", pl.col("sc_n").fill_null(0) > 0,
          formatted(
              "the python client resumed with Last-Event-ID {}, the cursor of its previous resume of this stream ({}), although "
              "that resume had delivered events after it: the python client (2.3.0) reuses its previous resume's cursor when "
              "a resumed stream breaks again, and the store replayed from it, so the application got {} event(s) twice ({}){}",
              pl.col("header"), pl.col("sc_prev").struct.field("location"), pl.col("sc_n"), pl.col("sc_ids").list.head(5).list.join(", "),
              pl.when(pl.col("sc_call").is_not_null()).then(formatted(": {} processed them twice", pl.col("sc_call"))).otherwise(pl.lit("")),
          ),
          "a python-client session resumes a stream with the Last-Event-ID of the stream's reconnect just before, a resume "
          "that delivered events: the client had them, and the same events (id and payload) came again (the python "
          "client's stale cursor)"),
        B("ids_went_back", "replay_reset", contiguous & (pl.col("first_break") == "replay_reset"),
          formatted("event id {} came after {}: ids went back, {} event(s) already processed were delivered again",
                    pl.col("break_id"), pl.col("break_prev"), pl.col("dup_count")),
          "contiguous ids: an id not above the client's Last-Event-ID (or the previous event) anywhere in the resumed connection"),
        B("opaque_redelivered", "replay_reset", ~contiguous & (pl.col("o_dup_count").fill_null(0) > 0),
          formatted("{} event id(s) this stream had already delivered were delivered again", pl.col("o_dup_count")),
          "opaque ids: an id the stream had delivered at or before the client's Last-Event-ID, delivered again"),
        B("cursor_named_two_events", "replay_reset", pl.col("amb_count").fill_null(0) > 0,
          formatted("the client's Last-Event-ID {} named {} different events on this stream (two servers numbering it), and {} "
                    "event(s) it had already been delivered came again, same id and payload (first: {})",
                    pl.col("cursor_str"), pl.col("amb_cursor_n"), pl.col("amb_count"), pl.col("amb_ids").list.first()),
          "any id scheme: the Last-Event-ID had been delivered on the stream with two payloads or more, and events the "
          "stream had delivered before (same id, same payload) came again"),
        B("foreign_stream_ids", "cross_stream_replay", pl.col("foreign_count").fill_null(0) > 0,
          formatted("{} event(s) carry ids of another stream (first: {}; the resumed stream is {})",
                    pl.col("foreign_count"), pl.col("foreign_id"), pl.col("cursor_prefix")),
          "ids that name another stream (go, csharp, typescript ids carry it)"),
        B("response_of_other_stream", "cross_stream_replay", pl.col("rpc_cross").is_not_null(), pl.col("rpc_cross"),
          "a JSON-RPC response whose request opened another stream"),
        B("ids_jumped", "gap", contiguous & (pl.col("first_break") == "gap"),
          formatted(
              "event id {} came after {}: {} event id(s) were never delivered{}",
              pl.col("break_id"), pl.col("break_prev"), pl.col("lost_count"),
              pl.when(pl.col("n_passed").fill_null(0) > 0)
              .then(formatted(
                  " ({} of them left the capture point on the old connection, but the client's own Last-Event-ID {} shows they never arrived)",
                  pl.col("n_passed"), pl.col("cursor_str"),
              ))
              .when(hist_lost)
              .then(formatted(
                  " ({} of them were seen on the resumed connection by {}, but never reached this view)",
                  pl.col("hist_lost_count"), pl.col("hist_sources").list.join(", "),
              ))
              .otherwise(pl.lit("")),
          ),
          "contiguous ids: `first > last + 1` from the client's Last-Event-ID, anywhere in the resumed connection "
          "(ids another stream of the session took excepted)"),
        B("lost_after_capture_point", "gap", hist_lost & pl.col("hist_passed").fill_null(False),
          formatted(
              "{} event(s) left the capture point on the old connection after the client's Last-Event-ID {} ({}), "
              "but that Last-Event-ID shows they never arrived, and the server resumed past them (shown by {})",
              pl.col("hist_lost_count"), pl.col("cursor_str"), pl.col("hist_lost_ids").list.head(5).list.join(", "),
              pl.col("hist_sources").list.join(", "),
          ),
          "events that left the capture point after the client's Last-Event-ID (so never reached the client) and were never replayed"),
        B("lost_in_history", "gap", hist_lost,
          formatted(
              "{} event(s) the server emitted on the resumed stream after the cursor never reached the client{} (shown by {})",
              pl.col("hist_lost_count"),
              pl.when(pl.col("hist_reused") > 0).then(formatted("; {} of their ids were reused for other events", pl.col("hist_reused"))).otherwise(pl.lit("")),
              pl.col("hist_sources").list.join(", "),
          ),
          "another view (capture, hop) or the cut-off tail shows events emitted after the cursor that never arrived"),
        B("progress_skipped", "gap", pl.col("ps_count").fill_null(0) > 0, pl.col("ps_reason"),
          "opaque ids: the call's progress keeps one fixed step (two values or more before the cursor and after the "
          "reconnect) and jumps at the reconnect by a whole number of steps (1, 2, 3, then 5, 6, 7): the values in between "
          "never arrived"),
        B("owed_nothing_replayed", "gap", (pl.col("n_after") == 0) & (pl.col("owed").fill_null(0) > 0),
          formatted("nothing was replayed, yet {} request(s) sent on the resumed stream never got their response ({})", pl.col("owed"), pl.col("owed_ids")),
          "nothing replayed while the resumed stream still owed a response"),
        B("no_event_after", "unverifiable", pl.col("n_after") == 0,
          pl.lit("no event with an id arrived after the reconnect, so nothing shows the stream resumed"),
          "no event with an id after the reconnect"),
        # (before no_cursor: an earlier stream whose body the capture did not record delivered ids the capture cannot
        # show, and the client had them: the capture's blind spot, not the client's, so its reaction is not judged)
        B("resumed_not_recorded", "unverifiable",
          contiguous & pl.col("cursor_seq").is_null() & (pl.col("header").fill_null("") == "") & (pl.col("prev_body_recorded") == False),  # noqa: E712
          pl.lit("the client sent no Last-Event-ID and the capture did not record the body of the stream it reopened, so what "
                 "the client had received is unknown"),
          "contiguous ids, no Last-Event-ID, and the capture did not record the body of the stream the reconnect reopens (a HAR "
          "keeps none of an event stream that ended empty or was still open)"),
        B("no_cursor", "unverifiable", contiguous & pl.col("cursor_seq").is_null(),
          pl.lit("the client sent no Last-Event-ID and the earlier stream delivered no id to compare with"),
          "contiguous ids, but no Last-Event-ID and no earlier id to compare with"),
        B("resumed_undecrypted", "unverifiable", pl.col("tls_hidden").fill_null(0) > 0,
          formatted("the stream this reconnect resumes is not in the decrypted traffic, and {} TLS connection(s) of the capture "
                    "that began before it could not be decrypted (the first at packet {}): what the client had before the "
                    "cursor is unknown", pl.col("tls_hidden"), pl.col("tls_hidden_first")),
          "the resumed stream is not in the decrypted traffic, and TLS connections that began before the reconnect had no key "
          "in the key log: the stream may lie in one of them"),
        B("ids_continue", "continuous", contiguous,
          formatted("event ids continue from the cursor {} without a gap or a repeat", pl.col("cursor_str")),
          "contiguous ids continue from the client's Last-Event-ID, and every later id keeps validating"),
        B("successor_proven", "continuous", pl.col("successor_source").is_not_null(),
          formatted("{} shows that event {} came right after the cursor, and the reconnect starts with it",
                    pl.col("successor_source"), pl.col("first_event_id_after")),
          "opaque ids: another view, or the old connection itself, shows the reconnect starts with the event that followed the cursor"),
        B("progress_continues", "continuous", pl.col("progress_proof").is_not_null(),
          formatted("opaque ids, but the call's own {}", pl.col("progress_proof")),
          "opaque ids: the call's progress (one progressToken) goes on from its last value before the cursor by its fixed step "
          "on the reconnect, the step it cut carries the notifications every other step carries, and the call's own response "
          "arrives after it (a lost log of a tool that logs at some steps only is not seen)"),
    ]


FALLBACK = ("opaque_unproven", "unverifiable", "opaque ids and nothing proves which event came after the cursor "
            "(the reason adds what the call's progress shows against it: a jump, or a cut step lacking a notification)")

# what each branch's verdict rests on (the boundary's ``evidence``; the kinds are catalog.EVIDENCE_KINDS)
EVIDENCE = {
    "no_response": "none", "refused": "http", "other_session_id": "http", "forgotten_session": "jsonrpc",
    "epoch_changed": "http", "not_an_event_stream": "http", "body_not_recorded": "none", "other_sessions_events": "content",
    "stale_last_event_id": "ids", "ids_went_back": "ids", "opaque_redelivered": "ids", "cursor_named_two_events": "ids", "foreign_stream_ids": "ids", "response_of_other_stream": "jsonrpc",
    "ids_jumped": "ids", "lost_after_capture_point": "second_view", "lost_in_history": "second_view",
    "progress_skipped": "progress_skipped", "owed_nothing_replayed": "jsonrpc", "no_event_after": "none", "resumed_not_recorded": "none", "no_cursor": "none", "resumed_undecrypted": "none", "ids_continue": "ids",
    "successor_proven": "second_view", "progress_continues": "progress_and_response", "opaque_unproven": "none",
}


def chain_markdown() -> str:
    """README's decision table, from ``decision_chain`` (tests/test_readme.py keeps the two equal)."""
    rows = ["| # | branch (`rule_id`) | verdict | evidence | when |", "|---|---|---|---|---|"]
    for n, br in enumerate(decision_chain(), start=1):
        rows.append(f"| {n} | `{br.rule_id}` | `{br.verdict}` | `{EVIDENCE[br.rule_id]}` | {br.doc} |")
    rows.append(f"| {len(rows) - 1} | `{FALLBACK[0]}` | `{FALLBACK[1]}` | `{EVIDENCE[FALLBACK[0]]}` | {FALLBACK[2]} |")
    return "\n".join(rows) + "\n"


def judge(f: Frames, links: pl.DataFrame, rev: pl.DataFrame) -> pl.DataFrame:
    """One row per reconnect with its verdict, ``rule_id``, reason, ids, handling and severity,
    decided from ``boundaries.facts`` by the decision chain; ``rev`` from eras.revisions."""
    b = boundaries.facts(f, links, rev)
    contiguous = pl.col("id_scheme").is_in(idschemes.CONTIGUOUS)
    verdict_reason = pl.struct(v=pl.lit(FALLBACK[1]), r=pl.lit("ids are opaque and no capture shows which event came after the cursor"), rule=pl.lit(FALLBACK[0]))
    for br in reversed(decision_chain()):
        verdict_reason = pl.when(br.when).then(pl.struct(v=pl.lit(br.verdict), r=br.reason, rule=pl.lit(br.rule_id))).otherwise(verdict_reason)
    b = b.with_columns(_vr=verdict_reason).with_columns(
        verdict=pl.col("_vr").struct.field("v"),
        rule_id=pl.col("_vr").struct.field("rule"),
        evidence=pl.col("_vr").struct.field("rule").replace_strict(EVIDENCE, return_dtype=pl.String),
        reason=pl.when((pl.col("_vr").struct.field("v") == "unverifiable") & pl.col("polling").fill_null(False))
        .then(formatted("{} (2025-11-25 polling: the server closed the connection after sending retry)", pl.col("_vr").struct.field("r")))
        .when((pl.col("_vr").struct.field("rule") == FALLBACK[0]) & pl.col("progress_doubt").is_not_null())
        .then(formatted("{}; {}", pl.col("_vr").struct.field("r"), pl.col("progress_doubt")))
        .when(pl.col("overlap"))
        .then(formatted("{} (the server first re-sent event {} unchanged: the client must drop that duplicate)", pl.col("_vr").struct.field("r"), pl.col("cursor_str")))
        .otherwise(pl.col("_vr").struct.field("r")),
    ).with_columns(
        reason=pl.when((pl.col("resent_count").fill_null(0) > 0) & (pl.col("rule_id") != "stale_last_event_id"))
        .then(formatted(
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
        lost_event_ids=pl.when(pl.col("rule_id") == "stale_last_event_id").then(pl.lit([], dtype=pl.List(pl.String))).when(by_history).then(pl.col("hist_lost_ids")).when(is_int_verdict).then(pl.col("lost_ids")).otherwise(pl.lit([], dtype=pl.List(pl.String))),
        lost_count=pl.when(pl.col("rule_id") == "stale_last_event_id").then(0).when(by_history).then(pl.col("hist_lost_count")).when(is_int_verdict).then(pl.col("lost_count"))
        .when(pl.col("rule_id") == "progress_skipped").then(pl.col("ps_count")).otherwise(0),
        # the events the server sent twice past the capture point: definite duplicates (at or
        # before the client's cursor), then the ones resent after it (see ``_prior``)
        duplicated_event_ids=pl.when(pl.col("rule_id") == "stale_last_event_id").then(pl.col("sc_ids")).otherwise(pl.concat_list(
            pl.when(pl.col("rule_id") == "cursor_named_two_events").then(pl.col("amb_ids"))
            .when(is_int_verdict).then(pl.col("dup_ids")).otherwise(pl.col("o_dup_ids")).fill_null(pl.lit([], dtype=pl.List(pl.String))),
            pl.col("resent_ids").fill_null(pl.lit([], dtype=pl.List(pl.String))),
        ).list.unique(maintain_order=True).list.head(LIST_CAP)),
        duplicated_count=pl.when(pl.col("rule_id") == "stale_last_event_id").then(pl.col("sc_n"))
        .otherwise(pl.when(pl.col("rule_id") == "cursor_named_two_events").then(pl.col("amb_count"))
                   .when(is_int_verdict).then(pl.col("dup_count")).otherwise(pl.col("o_dup_count")).fill_null(0)
                   + pl.col("resent_count").fill_null(0)),
        handled_correctly=pl.when(pl.col("verdict") == "continuous").then(True)
        .when(pl.col("rule_id").is_in(list(CAPTURE_BLIND))).then(None)  # the client saw what the capture did not
        .otherwise(pl.col("handled")),
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
    return _one_per_reconnect(b.drop("_vr"), f)


def _one_per_reconnect(b: pl.DataFrame, f: Frames) -> pl.DataFrame:
    """One boundary per reconnect: the view nearest the client, the others listed in ``views``."""
    nvis = f.exchanges.select(pl.col("gx").alias("resumed_gx"), pl.col("n_visible").alias("_nv"))
    # the rows kept and their order chosen on the few columns that decide them, then the boundaries' ~130 columns
    # gathered once: a sort, a unique, a join and a sort of the whole frame were four copies of it, three held at once
    # (60,000 reconnects: +181 MiB, the verdicts' peak; now +68, bench/SCALE.md 2026-12-06)
    small = (
        b.select("resumed_gx", "fp", "gx", "pos", "source", "location").with_row_index("_r")
        .join(nvis, on="resumed_gx", how="left")
        .with_columns(_key=pl.coalesce(pl.col("fp"), formatted("solo#{}", pl.col("gx"))))
    )
    views = small.group_by("_key").agg(views=pl.struct("source", "location").sort_by("pos"), _n=pl.len())
    keep = small.sort(["_nv", "pos"], nulls_last=True).unique("_key", keep="first").join(views, on="_key").sort("pos")
    return b.select(pl.all().gather(keep["_r"])).hstack(keep.select("_key", "views", "_n"))
