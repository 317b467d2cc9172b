"""JSON-RPC semantics per session: requests paired with responses across POST
bodies, JSON responses and SSE events (the wire, before any client rewrites ids).

What the pairing shows that event ids cannot:

- a request whose response never came (the reference's "unbounded latency");
- a response or a server→client request delivered twice, and answered twice
  ("duplicate side effects");
- a response to a request this session never sent (another session's replay);
- a response delivered on another stream than the one its request opened
  (``cross_stream_replay``: python and typescript clients overwrite the id of a
  response on a resumed stream, so only the wire shows it);
- a server that forgot the session it still answers to (``session_resurrected``).

This module computes those facts (the verdicts read them per boundary); analyzer/rules/rpc.py turns them
into findings.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.streams import SSE, Frames

FORGOT = r"(?i)not initiali[sz]ed|session not found|unknown session|no valid session|invalid session|session.*expired"
FORGOT_CODES = [-32600, -32602]


def _tagged(f: Frames) -> pl.DataFrame:
    x = f.exchanges.select("gx", "stream", "status", "content_type", "method", pl.col("location").alias("x_location"))
    return f.messages.join(x.rename({"method": "http_method"}), on="gx", how="left", maintain_order="left")


def boundary_signals(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Per boundary: why the server rejected it, what the resumed stream still owed, cross-stream
    responses on the reconnect, and signs that the server forgot the session afterwards.

    One lazy plan, collected at the end: the messages table is as long as the events table, and
    eager joins of it would copy every column of it several times over."""
    m = _tagged(f.lazy())
    keys = b.lazy().select("gx", "pos", "session", "stream")
    # the error text the server gave when it refused the reconnect
    refused = (
        m.filter(pl.col("kind") == "error")
        .group_by("gx")
        .agg(error_message=pl.col("error_message").drop_nulls().first())
    )
    # requests the resumed stream was opened for, that no response anywhere in the session answered
    requests = m.filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
    answered = m.filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"])).select(
        "session", "rpc_id"
    ).unique()
    owed = (
        keys.join(
            requests.filter(pl.col("content_type") == SSE).select("session", "stream", "rpc_id", "method", pl.col("pos").alias("req_pos")),
            on=["session", "stream"],
        )
        .join(answered, on=["session", "rpc_id"], how="anti")
        .group_by("gx")
        .agg(
            owed=pl.len(),
            owed_ids=pl.format("{} id {}", pl.col("method"), pl.col("rpc_id")).sort().str.join(", "),
            # the exchanges of those requests (the document's owed_requests: the report links their findings)
            owed_pos=pl.col("req_pos").unique().sort(),
        )
    )
    # responses on the reconnect whose request opened another stream
    req_stream = requests.select("session", "rpc_id", pl.col("stream").alias("req_stream"), pl.col("method").alias("req_method"))
    cross = (
        m.filter((pl.col("origin") == "sse") & (pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]))
        .join(keys.select("gx"), on="gx")
        .join(req_stream, on=["session", "rpc_id"])
        .filter(pl.col("req_stream") != pl.col("stream"))
        .group_by("gx")
        .agg(
            rpc_cross=pl.format(
                "the reconnect delivered the response to {} id {}, which was sent on another stream",
                pl.col("req_method"), pl.col("rpc_id"),
            ).first()
        )
    )
    # after the boundary, until the session's next boundary: did the server show it forgot the session?
    nxt = keys.sort("pos").with_columns(next_pos=pl.col("pos").shift(-1).over("session"))
    # (the reconnect's own response counts: a server that forgot the session shows it there first)
    later = m.join(nxt.select(pl.col("gx").alias("b_gx"), pl.col("pos").alias("b_pos"), "next_pos", "session"), on="session").filter(
        (pl.col("pos") >= pl.col("b_pos")) & (pl.col("next_pos").is_null() | (pl.col("pos") < pl.col("next_pos")))
    )
    # the same id for a *different* server request: a new process numbering from the start again
    # (the same request delivered again is a duplicate, judged elsewhere)
    server_reqs_before = (
        m.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "request"))
        .select("session", "rpc_id", "method", "params_digest", pl.col("pos").alias("first_pos"))
    )
    forgot = later.filter(
        (pl.col("direction") == "server_to_client")
        & (pl.col("kind") == "error")
        & pl.col("status").is_between(200, 299)
        & (pl.col("error_code").is_in(FORGOT_CODES) | pl.col("error_message").str.contains(FORGOT).fill_null(False))
    ).select("b_gx", "pos", why=pl.format("after the reconnect the server answered {} error {} \"{}\" under the same session id", pl.col("x_location"), pl.col("error_code"), pl.col("error_message")))
    reinit = later.filter(
        (pl.col("direction") == "server_to_client") & (pl.col("kind") == "response") & pl.col("protocol_version").is_not_null()
    ).select("b_gx", "pos", why=pl.format("a second initialize result was issued under the same session id ({})", pl.col("x_location")))
    renumbered = (
        later.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "request"))
        .join(server_reqs_before, on=["session", "rpc_id"], suffix="_before")
        .filter(
            (pl.col("first_pos") < pl.col("b_pos"))
            & (pl.col("method").ne_missing(pl.col("method_before")) | pl.col("params_digest").ne_missing(pl.col("params_digest_before")))
        )
        .select("b_gx", "pos", why=pl.format("the server numbered its own requests from the start again (id {} reused): a new process", pl.col("rpc_id")))
    )
    resurrected = (
        pl.concat([forgot, reinit, renumbered])
        .sort("pos")
        .group_by("b_gx")
        .agg(resurrected=pl.col("why").first())
        .rename({"b_gx": "gx"})
    )
    # A restarted process that re-creates the session id uninitialized answers every resume
    # with an empty 200, and the client retries the same Last-Event-ID until it gives up: the
    # proof (an error that it forgot the session, a second initialize result) comes only after
    # the last retry.  Every reconnect between the last proof of the old process (anything the
    # server delivered: a response, a notification, a server request) and the first proof of
    # the new one is resurrected, not only the one right before the proof.
    proofs = (
        m.filter(
            (pl.col("direction") == "server_to_client")
            & (
                ((pl.col("kind") == "error") & pl.col("status").is_between(200, 299)
                 & (pl.col("error_code").is_in(FORGOT_CODES) | pl.col("error_message").str.contains(FORGOT).fill_null(False)))
                | ((pl.col("kind") == "response") & pl.col("protocol_version").is_not_null())
            )
        )
        .join(keys.select(pl.col("gx").alias("b_gx"), pl.col("pos").alias("b_pos"), "session"), on="session")
        .filter(pl.col("pos") >= pl.col("b_pos"))
        .sort("pos")
        .group_by("b_gx")
        .agg(p_pos=pl.col("pos").first(), p_loc=pl.col("x_location").first(), p_code=pl.col("error_code").first(),
             p_msg=pl.col("error_message").first(), p_init=(pl.col("kind") == "response").first())
    )
    alive = (
        m.filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "notification", "request"]))
        .filter(~(pl.col("protocol_version").is_not_null() & (pl.col("kind") == "response")))
        .select("session", pl.col("pos").alias("a_pos"))
    )
    alive_between = (
        proofs.join(keys.select(pl.col("gx").alias("b_gx"), pl.col("pos").alias("b_pos"), "session"), on="b_gx")
        .join(alive, on="session")
        .filter((pl.col("a_pos") >= pl.col("b_pos")) & (pl.col("a_pos") < pl.col("p_pos")))
        .select("b_gx")
        .unique()
    )
    extended = (
        proofs.join(alive_between, on="b_gx", how="anti")
        .select(
            pl.col("b_gx").alias("gx"),
            resurrected_later=pl.when(pl.col("p_init"))
            .then(pl.format("the server delivered nothing of the old session after this reconnect, and then issued a second "
                            "initialize result under the same session id ({}): a new process", pl.col("p_loc")))
            .otherwise(pl.format("the server delivered nothing of the old session after this reconnect, and then answered {} "
                                 "error {} \"{}\" under the same session id: a new process that re-created the session uninitialized",
                                 pl.col("p_loc"), pl.col("p_code"), pl.col("p_msg"))),
        )
    )
    resurrected = (
        resurrected.join(extended, on="gx", how="full", coalesce=True)
        .select("gx", resurrected=pl.coalesce("resurrected", "resurrected_later"))
    )
    return (
        keys.select("gx")
        .join(refused, on="gx", how="left")
        .join(owed, on="gx", how="left")
        .join(cross, on="gx", how="left")
        .join(resurrected, on="gx", how="left")
        .collect()
    )


