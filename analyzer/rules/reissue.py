"""A call re-issued after its stream broke: the server may have run it twice.

Revision 2026-07-28 has no resumption: "a broken stream cancels its request and
the client re-issues it".  Clients of the older revisions do the same when they
give up on resuming (a reconnect refused, a retry budget spent, an SDK that
never resumes POST streams).  Either way the application sends the same method
with the same arguments again under a new JSON-RPC id and a new progressToken
(``params._meta``), and the wire cannot show whether the server rolled the
first attempt back.  Only a first attempt that visibly started is reported: a
stream that delivered nothing before it broke proves nothing about the server.

``reissued_after_break`` pairs, within one session (for 2026-07-28 traffic
without session ids: the input, as eras.py groups it), a request A with the
next request B of the same method and the same ``params_digest`` (the params
without ``_meta``, see jsonrpc.py) when:

1. A's stream (its POST and every resume of it: ``stream``) never delivered a
   response or error to A's id, and its last connection ended (not ``open`` /
   ``capture_end``: a stream still open was not given up on);
2. A's stream delivered at least one visible event with data (a progress
   notification, a log message, a server request; a priming event carries no
   message and does not count);
3. B started after that stream's last connection (position order, and by the
   clock when both times are known), under another id, and no response to A's
   id was delivered anywhere in the session on a connection before B;
4. B was not refused with a JSON-RPC error (then it did not run; the next
   attempt after it is the re-issue, if any).

Methods that only read (``eras.READ_ONLY``) are left out: running them twice
is harmless, and A is still reported as ``request_unanswered``.

Severity: **critical** when the wire proves the first attempt did work — it
reported progress (``notifications/progress`` on its stream) or it was
answered after all, later, so both attempts ran to the end; **error**
otherwise (it started, e.g. it logged, but nothing shows how far it got).

Against ``eras.reissued_request_ran_twice`` (2026-07-28, the same call answered
under several ids): when both attempts were answered with a result in one
stateless session, that rule already reports the pair with the same severity
and it wins; this one leaves the pair out.  When A was never answered (the usual
case) only this rule sees it.
"""
from __future__ import annotations

import polars as pl

from analyzer.rules.shape import either, ref, subject
from analyzer.signals.eras import READ_ONLY
from analyzer.signals.streams import Frames
from analyzer.formatted import formatted

ENDED_OPEN = ["open", "capture_end"]
BROKE = ["reset", "error", "aborted"]


def findings(f: Frames, rev: pl.LazyFrame) -> pl.LazyFrame:
    """``reissued_after_break`` findings (rules/shape.FINDING_COLS)."""

    x = f.exchanges
    m = f.messages
    s2c = pl.col("direction") == "server_to_client"

    def tagged(messages: pl.LazyFrame, *names: str) -> pl.LazyFrame:
        """The messages a part reads, each with its exchange's ``names``: joined after the filter, not to every
        message of history first (1M tiny messages: +240 MiB)."""
        return messages.join(x.select("gx", *names), on="gx", how="left", maintain_order="left")

    calls = (
        tagged(m.filter(
            (pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null()
            & pl.col("method").is_not_null() & ~pl.col("method").is_in(READ_ONLY)
        ), "stream", "started", "location", "request_body")
        .select(
            "session", "session_id", "gx", "pos", "stream", "rpc_id", "method", "source", "location", "started",
            # "" stands for "no params": the same call without arguments is still the same call
            pl.col("params_digest").fill_null("").alias("call_key"),
            # the tool's name (a batch body has none at $.params.name: the method alone names it then)
            tool=pl.when(pl.col("method") == "tools/call").then(pl.col("request_body").str.json_path_match("$.params.name")),
        )
    )
    # the answers to those calls' ids: every use below joins them to the calls (or pairs of them) by session and id
    # (2M answers of a log without calls were joined to their streams and grouped for nothing)
    answers = tagged(m.filter(s2c & pl.col("kind").is_in(["response", "error"]) & pl.col("rpc_id").is_not_null())
                     .select("session", "rpc_id", "gx", "pos", "kind")
                     .join(calls.select("session", "rpc_id").unique(), on=["session", "rpc_id"], how="semi", maintain_order="left"),
                     "stream").select("session", "rpc_id", "stream", "pos", "kind")
    # (both collected once, together, here: the plans below read the calls four times and the answers five, and the
    # one plan ran them once a read -- 1M events, 0.18 -> 0.10 s; they are the non-read-only calls and their
    # answers, a few columns of a small part of the messages)
    calls, answers = (part.lazy() for part in pl.collect_all([calls, answers]))
    pending = calls.join(answers.select("session", "rpc_id", "stream"), on=["session", "rpc_id", "stream"], how="anti", maintain_order="left")

    # the first attempt's stream: how it ended, what it delivered (only the streams of calls left unanswered on them)
    last_conn = (
        f.exchanges.join(pending.select("stream").unique(), on="stream", how="semi")
        .sort("pos")
        .group_by("stream")
        .agg(
            end_pos=pl.col("pos").last(),
            end_reason=pl.col("end_reason").last(),
            end_ended=pl.col("ended").last(),
            end_source=pl.col("source").last(),
            end_location=pl.col("location").last(),
            resumes=pl.len() - 1,
        )
    )
    progress = (
        tagged(m.filter(s2c & (pl.col("origin") == "sse") & (pl.col("method") == "notifications/progress")).select("gx"), "stream")
        .group_by("stream")
        .agg(n_progress=pl.len())
    )
    unanswered = (
        pending
        .join(last_conn, on="stream", maintain_order="left")
        .filter(~pl.col("end_reason").is_in(ENDED_OPEN))
    )
    # what the streams of those calls delivered (only theirs: the rest of history is neither sorted nor grouped)
    # (the data's test after the streams' filter: as one filter, Polars pushed it below the semi-join, and every event's
    # data of history was stripped for the few streams kept -- 1M events, 0.06 s for none kept)
    delivered = (
        f.events.join(unanswered.select("stream").unique(), on="stream", how="semi")
        .filter(pl.col("visible"))
        .with_columns(_blank=pl.col("data").str.strip_chars() == "")
        .filter(~pl.col("_blank"))
        .sort("pos", "ordinal")
        .group_by("stream")
        .agg(n_events=pl.len(), ev_source=pl.col("source").last(), ev_location=pl.col("location").last())
    )
    first = (
        unanswered.join(delivered, on="stream", maintain_order="left")
        .join(progress, on="stream", how="left", maintain_order="left")
        .with_columns(pl.col("n_progress").fill_null(0))
    )

    # the re-issue: the next request of the session with the same method and arguments after the stream ended.
    # One the server refused with a JSON-RPC error did not run (a tool's own failure is a result with
    # isError): it is no second run, and a later attempt may still be.
    refused = answers.filter(pl.col("kind") == "error").select("session", "rpc_id").unique()
    later = calls.join(refused, on=["session", "rpc_id"], how="anti", maintain_order="left").select(
        "session", "method", "call_key",
        pl.col("pos").alias("pos_b"), pl.col("rpc_id").alias("rpc_id_b"), pl.col("started").alias("started_b"),
        pl.col("source").alias("source_b"), pl.col("location").alias("location_b"),
    ).sort("pos_b")
    pairs = (
        first.sort("end_pos")
        .join_asof(later, left_on="end_pos", right_on="pos_b", by=["session", "method", "call_key"],
                   strategy="forward", allow_exact_matches=False, check_sortedness=False)
        .filter(
            pl.col("pos_b").is_not_null()
            & (pl.col("rpc_id_b") != pl.col("rpc_id"))
            # started after the break by the clock too, when both times are known (same input: one clock)
            & (pl.col("end_ended").is_null() | pl.col("started_b").is_null() | (pl.col("started_b") >= pl.col("end_ended")))
        )
        # (collected here, once: the plan below reads the pairs three times, and Polars would run them once per read)
        .collect()
        .lazy()
    )
    # no answer to the first id anywhere in the session before the re-issue; answered later is "ran twice"
    a_first = pairs.select("session", "rpc_id", "pos_b").join(answers.select("session", "rpc_id", pl.col("pos").alias("a_pos"), "kind"), on=["session", "rpc_id"], maintain_order="left")
    answered_before = a_first.filter(pl.col("a_pos") < pl.col("pos_b")).select("session", "rpc_id").unique()
    answered_after = a_first.filter(pl.col("kind") == "response").select("session", "rpc_id", first_result=pl.lit(True)).unique()
    b_result = answers.filter(pl.col("kind") == "response").select(
        "session", pl.col("rpc_id").alias("rpc_id_b"), b_result=pl.lit(True)
    ).unique()
    stateless = rev.filter(pl.col("era") == "stateless").select("session", is_stateless=pl.lit(True))
    hits = (
        pairs.join(answered_before, on=["session", "rpc_id"], how="anti", maintain_order="left")
        .join(answered_after, on=["session", "rpc_id"], how="left", maintain_order="left")
        .join(b_result, on=["session", "rpc_id_b"], how="left", maintain_order="left")
        .join(stateless, on="session", how="left", maintain_order="left")
        .with_columns(pl.col("first_result", "b_result", "is_stateless").fill_null(False))
        .with_columns(both=pl.col("first_result") & pl.col("b_result"))
        # eras.reissued_request_ran_twice reports exactly these (stateless, params known, both results)
        .filter(~(pl.col("is_stateless") & (pl.col("call_key") != "") & pl.col("both")))
        .with_columns(critical=(pl.col("n_progress") > 0) | pl.col("both"))
    )
    name = pl.when(pl.col("tool").is_not_null()).then(formatted("{} {}", pl.col("method"), pl.col("tool"))).otherwise(pl.col("method"))
    # how it ended, in words every format gives alike (a HAR's _error is the JSONL's reset)
    how = pl.when(pl.col("end_reason").is_in(BROKE)).then(pl.lit("broke")).otherwise(pl.lit("ended"))
    resumed = pl.when(pl.col("resumes") > 0).then(formatted(" after {} resume(s)", pl.col("resumes"))).otherwise(pl.lit(""))
    shown = (
        pl.when(pl.col("both"))
        .then(pl.lit("both attempts were answered: it ran twice"))
        .when(pl.col("n_progress") > 0)
        .then(formatted("the first attempt had reported progress {} time(s): the server may have run it twice", pl.col("n_progress")))
        .otherwise(pl.lit("the server may have run it twice"))
    )
    out = hits.with_columns(
        pos=pl.col("pos_b"),
        message=formatted(
            "{} (id {}) was re-issued as id {} after its stream {}{} without a response, although the first attempt had "
            "started ({} event(s) delivered); {}",
            name, pl.col("rpc_id"), pl.col("rpc_id_b"), how, resumed, pl.col("n_events"), shown,
        ),
        # the first request, the last event it delivered, the connection that broke (when a resume), the re-issue
        evidence=pl.concat_list(
            ref("source", "location"),
            ref("ev_source", "ev_location"),
            ref("end_source", "end_location"),
            ref("source_b", "location_b"),
        ).list.unique(maintain_order=True),
        subject=subject(name, "rpc_id", "rpc_id_b"),
    ).sort("pos", "rpc_id")
    return either(out, pl.col("critical"), ("reissued_after_break", "critical"), ("reissued_after_break", "error"))
