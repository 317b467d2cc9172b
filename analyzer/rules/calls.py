"""Rules over the JSON-RPC pairing of analyzer/signals/rpc.py: requests left unanswered, answered twice, answers to
no request, and answers on another stream than their request's.  rpc.py computes the facts (also for the
verdicts); this module, named for what it judges (the calls), turns them into findings (analyzer/catalog.py names each rule)."""
from __future__ import annotations

import polars as pl

from analyzer.rules.shape import either, finding_frame, subject
from analyzer.signals import keys
from analyzer.signals.rpc import _tagged, call_label, named, sent_elsewhere
from analyzer.signals.streams import SSE, Frames, packet_no
from analyzer.formatted import formatted


def _hidden_note(n: pl.Expr, what: str) -> pl.Expr:
    """`` (... may lie in N TLS connection(s) ...)`` when ``n`` > 0, else empty."""
    return pl.when(n.fill_null(0) > 0).then(
        formatted(f"; {what} may lie in one of the {{}} TLS connection(s) of this capture that the key log could not decrypt", n)
    ).otherwise(pl.lit(""))


def findings(f: Frames) -> pl.LazyFrame:
    """JSON-RPC findings over the whole session history (frames in the rules/shape.FINDING_COLS shape)."""

    # a capture's TLS connections that no key decrypted: any of them may hold the missing half of a pair
    hidden_n = f.hidden.group_by("source").agg(n_hidden=pl.len())

    def tagged(messages: pl.LazyFrame) -> pl.LazyFrame:
        """The messages a part reads, with their exchange's columns (rpc._tagged) and ``ref``: joined after the
        filter, not to every message of history first."""
        return _tagged(f, messages=messages).with_columns(ref=pl.struct("source", pl.col("x_location").alias("location")))

    m = f.messages
    s2c = pl.col("direction") == "server_to_client"
    c2s = pl.col("direction") == "client_to_server"
    answer = pl.col("kind").is_in(["response", "error"])
    # the client's requests; each is named (rpc.named: its request body read) only where a finding shows it -- naming
    # every request of history first cost 500k tiny POST exchanges +306 MiB and 6 s
    request_rows = m.filter(c2s & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
    requests = tagged(request_rows)
    response_rows = m.filter(s2c & answer & pl.col("rpc_id").is_not_null())
    on_stream = response_rows.filter(pl.col("origin") == "sse")
    responses = tagged(response_rows)
    # a stream that broke, that the client closed before the server finished it, or that the server
    # ended without the response (2025-11-25 polling close: if the client never resumes, nothing else
    # will ever bring the response; the python client with reconnection off re-issues instead)
    broke = f.exchanges.filter(
        pl.col("end_reason").is_in(["reset", "error", "aborted", "open", "capture_end"])
        | ((pl.col("end_reason") == "eof") & (pl.col("end_by") == "client"))
        | (pl.col("end_reason").is_in(["eof", "complete"]) & (pl.col("content_type") == SSE))
    ).select("gx")
    # a request has a boundary after it when its session's last boundary is (not a join of every request of a
    # session with every boundary of it: quadratic in its streams)
    last_boundary = f.exchanges.filter(pl.col("last_event_id").is_not_null()).group_by("session").agg(bpos=pl.col("pos").max())

    # (the answers' keys among the requests' alone: not every answer's of history hashed and made unique first)
    answered = response_rows.select("session", "rpc_id").join(requests.select("session", "rpc_id"), on=["session", "rpc_id"], how="semi")
    left_unanswered = (
        requests.filter(pl.col("status").is_between(200, 299))
        .join(answered.unique(), on=["session", "rpc_id"], how="anti", maintain_order="left")
        .join(
            pl.concat([
                requests.select("session", "pos", "gx").join(last_boundary, on="session")
                .filter(pl.col("bpos") > pl.col("pos"))
                .select("gx")
                .unique(),
                broke,
            ]),
            on="gx",
            how="semi", maintain_order="left")
    )
    unanswered = (
        named(left_unanswered, f)
        .join(hidden_n, on="source", how="left", maintain_order="left")
        .with_columns(
            message=formatted("{} never got a response, although its stream broke, ended or was resumed", pl.col("call"))
            + _hidden_note(pl.col("n_hidden"), "its response"),
            evidence=pl.concat_list("ref"),
            subject=subject("call"),
        )
    )
    dup_resp = (
        responses.filter(keys.repeated(response_rows, ["session", "session_id", "rpc_id"]))
        .group_by("session", "session_id", "rpc_id")
        .agg(n=pl.len(), pos=pl.col("pos").min(), evidence=pl.col("ref").head(6))
        .filter(pl.col("n") > 1)
    )
    # each (session, id) of those named by its first request
    by_id = named(
        requests.join(dup_resp.select("session", "rpc_id"), on=["session", "rpc_id"], how="semi")
        .sort("pos").group_by("session", "rpc_id").agg(pl.col("gx", "method").first()), f
    ).select("session", "rpc_id", "call")
    dup_resp = (
        dup_resp
        .join(by_id, on=["session", "rpc_id"], how="left", maintain_order="left")
        .with_columns(message=formatted("the response to {} was delivered {} times",
                                        pl.col("call").fill_null(formatted("request id {}", pl.col("rpc_id"))), pl.col("n")),
                      subject=subject("rpc_id", "call"))
    )
    server_rows = m.filter(s2c & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
    server_req = tagged(server_rows)
    client_ans = m.filter(c2s & answer & pl.col("rpc_id").is_not_null()).group_by("session", "rpc_id").agg(answers=pl.len())
    dup_req = (
        server_req.filter(keys.repeated(server_rows, ["session", "session_id", "rpc_id"])).group_by("session", "session_id", "rpc_id")
        .agg(n=pl.len(), method=pl.col("method").first(), pos=pl.col("pos").min(), evidence=pl.col("ref").head(6))
        .filter(pl.col("n") > 1)
        .join(client_ans, on=["session", "rpc_id"], how="left", maintain_order="left")
        .with_columns(pl.col("answers").fill_null(0))
        .with_columns(
            message=formatted("the server's request {} (id {}) was delivered {} times and answered {} times", pl.col("method"), pl.col("rpc_id"), pl.col("n"), pl.col("answers")),
            subject=subject("method", "rpc_id"),
        )
    )
    no_request = (
        # a session without any recorded request (capture started late) proves nothing: those sessions' responses
        # are left out first (2M responses of a log without requests were hashed by their ids for nothing)
        responses.join(requests.select("session").unique(), on="session", how="semi", maintain_order="left")
        .filter(pl.col("status").is_between(200, 299))  # an HTTP error's body answers the HTTP request
        .join(requests.select("session", "rpc_id").unique(), on=["session", "rpc_id"], how="anti", maintain_order="left")
    )
    orphan = (
        no_request
        .join(
            # the request may lie in a TLS connection no key decrypted, that began before this response's exchange
            f.hidden.join(no_request.select("source", "gx", "x_location").unique(), on="source")
            .filter(pl.col("packet") < packet_no(pl.col("x_location")))
            .group_by("gx")
            .agg(n_hidden=pl.len()),
            on="gx", how="left", maintain_order="left")
        .with_columns(
            message=formatted("a response to request id {} arrived, but this session never sent that request", pl.col("rpc_id"))
            + _hidden_note(pl.col("n_hidden"), "its request"),
            evidence=pl.concat_list("ref"),
            subject=subject("rpc_id"),
        )
    )
    boundary_gx = f.exchanges.filter(pl.col("last_event_id").is_not_null()).select("gx")
    req_body = f.exchanges.select(pl.col("gx").alias("req_gx"), pl.col("request_body").alias("req_body"))
    cross = (
        # (the responses on a stream and the requests of their ids alone tagged: not every call and answer of history)
        sent_elsewhere(tagged(request_rows.join(on_stream.select("session", "rpc_id").unique(), on=["session", "rpc_id"], how="semi")),
                       tagged(on_stream), "gx", "method", "ref")
        .join(boundary_gx, on="gx", how="anti", maintain_order="left")  # at a reconnect it is that boundary's verdict
        .join(req_body, on="req_gx", how="left", maintain_order="left")
        .with_columns(req_call=call_label(pl.col("req_method"), pl.col("req_body"), pl.col("rpc_id")))
        .with_columns(
            message=formatted("the response to {} was delivered on another stream than the one its request opened", pl.col("req_call")),
            evidence=pl.concat_list("req_ref", "ref"),
            subject=subject("req_call", "rpc_id"),
        )
    )
    return pl.concat(
        [
            either(unanswered, pl.col("n_hidden").fill_null(0) > 0, ("request_unanswered", "warning"), ("request_unanswered", "error")),
            finding_frame(dup_resp, "duplicate_response", "error"),
            finding_frame(dup_req.filter(pl.col("answers") > 1), "duplicate_side_effect", "critical"),
            finding_frame(dup_req.filter(pl.col("answers") <= 1), "duplicate_server_request", "warning"),
            either(orphan, pl.col("n_hidden").fill_null(0) > 0, ("response_without_request", "warning"), ("response_without_request", "error")),
            finding_frame(cross, "cross_stream_replay", "error"),
        ],
        how="vertical_relaxed",
    )
