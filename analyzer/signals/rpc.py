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

This module computes those facts (the verdicts read them per boundary); analyzer/rules/calls.py turns them
into findings.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.streams import SSE, Frames

FORGOT = r"(?i)not initiali[sz]ed|session not found|unknown session|no valid session|invalid session|session.*expired"
FORGOT_CODES = [-32600, -32602]


# the request's own name for what it calls: the tool and the prompt by name, the resource by URI
_NAMED_BY = {"tools/call": "$.params.name", "prompts/get": "$.params.name", "resources/read": "$.params.uri",
             "resources/subscribe": "$.params.uri", "resources/unsubscribe": "$.params.uri"}


def call_name(method: pl.Expr, body: pl.Expr) -> pl.Expr:
    """What a request calls, as a reader names it: ``tools/call slow_count``, ``resources/read file:///a.txt``,
    ``tools/list``.  The name comes from the request body when the body is that one message (a batch gives the
    method alone)."""
    target = None
    for m, path in _NAMED_BY.items():
        target = (pl.when(method == m) if target is None else target.when(method == m)).then(body.str.json_path_match(path))
    return pl.when(target.is_not_null()).then(pl.format("{} {}", method, target)).otherwise(method.fill_null("request"))


def call_label(method: pl.Expr, body: pl.Expr, rpc_id: pl.Expr) -> pl.Expr:
    """A request by :func:`call_name` and id: ``tools/call slow_count (id 4)``."""
    return pl.format("{} (id {})", call_name(method, body), rpc_id)


def named(requests: pl.LazyFrame, f: Frames) -> pl.LazyFrame:
    """``requests`` (client requests among the messages, with ``gx``, ``method`` and ``rpc_id``) with ``call``:
    each named by :func:`call_label` from its exchange's request body."""
    body = f.exchanges.lazy().select("gx", "request_body")
    return (
        requests.join(body, on="gx", how="left", maintain_order="left")
        .with_columns(call=call_label(pl.col("method"), pl.col("request_body"), pl.col("rpc_id")))
        .drop("request_body")
    )


def in_sessions(messages: pl.LazyFrame, sessions: pl.LazyFrame | None) -> pl.LazyFrame:
    """The messages of ``sessions`` (a frame with a ``session`` column) alone, in their order; all of them for None.
    A signal about reconnects reads only the sessions that have one: 500k tiny POST exchanges without a
    reconnect named every one of their 500k calls for nothing (+460 MiB)."""
    if sessions is None:
        return messages
    return messages.filter(pl.col("session").is_in(sessions.select("session").unique().collect().to_series().implode()))


def calls(f: Frames, sessions: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """Every JSON-RPC request the client sent, named (:func:`call_label`): ``session``, ``session_id``,
    ``rpc_id``, ``method``, ``call``, ``gx``, ``pos``, ``stream``, ``content_type`` and ``ref`` (its request record).
    ``sessions``: only those sessions' (:func:`in_sessions`)."""
    x = f.exchanges.lazy().select("gx", "stream", "content_type", "request_body", pl.col("location").alias("x_location"))
    return (
        in_sessions(f.messages.lazy(), sessions)
        .filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
        .select("session", "session_id", "source", "gx", "pos", "rpc_id", "method")
        .join(x, on="gx", how="left", maintain_order="left")
        .select(
            "session", "session_id", "rpc_id", "method", "gx", "pos", "stream", "content_type",
            call=call_label(pl.col("method"), pl.col("request_body"), pl.col("rpc_id")),
            ref=pl.struct("source", pl.col("x_location").alias("location")),
        )
    )


def openers(f: Frames, sessions: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """The request that opened each SSE stream, where one did (a batch's routing is the client's own):
    ``session``, ``stream``, ``v_id`` (its id), ``v_call`` (:func:`call_label`) and ``v_ref``; ``sessions``: as
    :func:`calls`."""
    return (
        calls(f, sessions)
        .filter(pl.col("content_type") == SSE)
        .group_by("session", "stream")
        .agg(n=pl.len(), v_id=pl.col("rpc_id").first(), v_call=pl.col("call").first(), v_ref=pl.col("ref").first())
        .filter(pl.col("n") == 1)
        .drop("n")
    )


def _tagged(f: Frames, sessions: pl.LazyFrame | None = None, messages=None) -> pl.DataFrame:
    """``messages`` (default: all of ``f``'s; ``sessions``: see :func:`in_sessions`) with their exchange's stream,
    status, content type, method (``http_method``) and location (``x_location``)."""
    x = f.exchanges.select("gx", "stream", "status", "content_type", "method", pl.col("location").alias("x_location"))
    return in_sessions(f.messages if messages is None else messages, sessions).join(x.rename({"method": "http_method"}), on="gx", how="left", maintain_order="left")


def boundary_signals(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Per boundary: why the server rejected it, what the resumed stream still owed, cross-stream
    responses on the reconnect, and signs that the server forgot the session afterwards.

    One lazy plan, collected at the end: the messages table is as long as the events table, and
    eager joins of it would copy every column of it several times over."""
    keys = b.lazy().select("gx", "pos", "session", "stream")
    # every part below looks at the boundaries' own sessions alone (each joins the boundaries by session or gx)
    m = _tagged(f.lazy(), keys)
    # the error text the server gave when it refused the reconnect
    refused = (
        m.filter(pl.col("kind") == "error")
        .group_by("gx")
        .agg(error_message=pl.col("error_message").drop_nulls().first())
    )
    # requests the resumed stream was opened for, that no response anywhere in the session answered
    requests = named(m.filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null()), f)
    answered = m.filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"])).select(
        "session", "rpc_id"
    ).unique()
    owed = (
        keys.join(
            requests.filter(pl.col("content_type") == SSE).select("session", "stream", "rpc_id", "call", pl.col("pos").alias("req_pos")),
            on=["session", "stream"],
        )
        .join(answered, on=["session", "rpc_id"], how="anti")
        .group_by("gx")
        .agg(
            owed=pl.len(),
            owed_ids=pl.col("call").sort_by("req_pos").str.join(", "),  # in the order they were sent (id 2 before id 10)
            # the exchanges of those requests (the document's owed_requests: the report links their findings)
            owed_pos=pl.col("req_pos").unique().sort(),
        )
    )
    # responses on the reconnect whose request opened another stream
    req_stream = requests.select("session", "rpc_id", pl.col("stream").alias("req_stream"), pl.col("call").alias("req_call"))
    cross = (
        m.filter((pl.col("origin") == "sse") & (pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]))
        .join(keys.select("gx"), on="gx")
        .join(req_stream, on=["session", "rpc_id"])
        .filter(pl.col("req_stream") != pl.col("stream"))
        .group_by("gx")
        .agg(
            rpc_cross=pl.format(
                "the reconnect delivered the response to {}, which was sent on another stream", pl.col("req_call"),
            ).first()
        )
    )
    # after the boundary, until the session's next boundary: did the server show it forgot the session?
    # (the reconnect's own response counts: a server that forgot the session shows it there first.)  Each message
    # belongs to the session's last boundary at or before it: an as-of join, linear in messages and boundaries (a
    # join on the session and a filter by position made every message of a session meet every boundary of it:
    # 5,000 reconnects of one stream, 460 MB)
    bounds = keys.select(pl.col("gx").alias("b_gx"), pl.col("pos").alias("b_pos"), "session").sort("b_pos")
    later = (
        m.filter(pl.col("session").is_not_null()).sort("pos")
        .join_asof(bounds, left_on="pos", right_on="b_pos", by="session", strategy="backward", check_sortedness=False)
        .filter(pl.col("b_gx").is_not_null())
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
        # each boundary's first proof at or after it (as-of, forward; the first in message order on one position)
        .select("session", p_pos="pos", p_loc="x_location", p_code="error_code", p_msg="error_message",
                p_init=pl.col("kind") == "response", _o=pl.int_range(pl.len()))
        .sort("p_pos", "_o")
        .unique(["session", "p_pos"], keep="first", maintain_order=True)
        .drop("_o")
    )
    proofs = (
        bounds.join_asof(proofs, left_on="b_pos", right_on="p_pos", by="session", strategy="forward", check_sortedness=False)
        .filter(pl.col("p_pos").is_not_null())
    )
    alive = (
        m.filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "notification", "request"]))
        .filter(~(pl.col("protocol_version").is_not_null() & (pl.col("kind") == "response")))
        .select("session", pl.col("pos").alias("a_pos"))
        .unique()
        .sort("a_pos")
    )
    # a boundary whose first sign of life after it comes before its proof: the old process was still there
    alive_between = (
        proofs.sort("b_pos")
        .join_asof(alive, left_on="b_pos", right_on="a_pos", by="session", strategy="forward", check_sortedness=False)
        .filter(pl.col("a_pos") < pl.col("p_pos"))
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




PREVIEW_CHARS = 120


def _preview(data: pl.Expr) -> pl.Expr:
    """What the application was handed, in a few words: a tool result's first text, an error's message, or the
    result's JSON, cut at PREVIEW_CHARS characters."""
    text = pl.coalesce(
        data.str.json_path_match("$.result.content[0].text"),
        data.str.json_path_match("$.error.message"),
        data.str.json_path_match("$.result"),
        data,
    )
    return pl.when(text.str.len_chars() > PREVIEW_CHARS).then(text.str.slice(0, PREVIEW_CHARS) + "…").otherwise(text)


def wrong_results(f: Frames, b: pl.DataFrame, foreign: pl.DataFrame) -> pl.DataFrame:
    """Per reconnect: another call's result, handed to the call that opened the resumed stream.

    The python and typescript clients give the first response (or error) that arrives on a resumed stream to
    the request that opened the stream -- they overwrite its id (python ``message.id = original_request_id``,
    typescript ``replayMessageId``) -- and stop waiting for that request.  When that first answer belongs to
    another call, the application takes someone else's result as its own, and nothing on the client shows it:

    - its id is another request's (a replica whose store starts over on an unknown Last-Event-ID replays
      the session from its start: ``tools/call add``'s result completes ``tools/call slow_count``);
    - or it is an event that another session had been delivered (``foreign``: a store keyed without the
      session), whatever its id: the other session's call is named from the stream that carried it.

    Only a request that was still unanswered when the reconnect began counts (one already answered is never
    resumed), and only a stream that one request opened (a batch's routing is the client's own).
    Columns: ``gx``, ``wr_message``, ``wr_call``, ``wr_got``, ``wr_preview``, ``wr_refs`` (the request, the
    answer's event, and the request it really answered when known)."""
    keys = b.lazy().select("gx", pl.col("pos").alias("b_pos"), "session", "stream")
    # the calls of the boundaries' sessions (every use below joins them by session) and of the sessions that had
    # been delivered an event a reconnect got (``foreign``: the other session's call is named from its opener)
    others = foreign.lazy().select("o_pos").join(f.exchanges.lazy().select(pl.col("pos").alias("o_pos"), "session"), on="o_pos")
    among = pl.concat([keys.select("session"), others.select("session")])
    c = calls(f, among)
    opener = openers(f, among)
    s2c_answer = (pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]) & pl.col("rpc_id").is_not_null()
    first = (
        f.messages.lazy()
        .filter(s2c_answer & (pl.col("origin") == "sse"))
        .select("gx", "ordinal", pl.col("rpc_id").alias("a_id"), pl.col("kind").alias("a_kind"))
        .join(keys.select("gx"), on="gx", how="semi")
        .sort("gx", "ordinal")
        .group_by("gx")
        .agg(pl.all().first())
    )
    answered_before = (
        f.messages.lazy()
        .filter(s2c_answer)
        .select("session", pl.col("rpc_id").alias("v_id"), pl.col("pos").alias("r_pos"))
    )
    resumed = keys.join(opener, on=["session", "stream"])
    cand = (
        resumed.join(first, on="gx")
        .join(answered_before.join(resumed.select("gx", "session", "v_id", "b_pos"), on=["session", "v_id"])
              .filter(pl.col("r_pos") < pl.col("b_pos")).select("gx").unique(), on="gx", how="anti")
    )
    # the answer's own event: where it is, and what it said
    cand = cand.collect().lazy()  # (few rows: the events table is looked up for these alone)
    ev = (
        f.events.lazy()
        .filter(pl.col("gx").is_in(cand.select("gx").collect().to_series().implode()))
        .select("gx", "ordinal", "source", "location", "data")
    )
    cand = cand.join(ev, on=["gx", "ordinal"], how="left")
    # another session had been delivered that event: the call that opened the stream it came on
    x = f.exchanges.lazy().select(pl.col("pos").alias("o_pos"), pl.col("session").alias("o_session"), pl.col("stream").alias("o_stream"))
    o_opener = opener.select(pl.col("session").alias("o_session"), pl.col("stream").alias("o_stream"),
                             pl.col("v_call").alias("o_call"), pl.col("v_ref").alias("o_ref"))
    elsewhere = (
        foreign.lazy()
        .select("gx", "ordinal", "o_session_id", "o_pos", "o_location", "source")
        .sort("o_pos")
        .group_by("gx", "ordinal")
        .agg(pl.all().first())
        .join(x, on="o_pos", how="left")
        .join(o_opener, on=["o_session", "o_stream"], how="left")
        .select("gx", "ordinal", "o_session_id", "o_call", "o_ref",
                o_event=pl.struct("source", pl.col("o_location").alias("location")))
    )
    # ... or its id is another request's of this session
    same_session = (
        c.select("session", pl.col("rpc_id").alias("a_id"), pl.col("call").alias("s_call"), pl.col("ref").alias("s_ref"), pl.col("pos").alias("s_pos"))
        .sort("s_pos")
        .group_by("session", "a_id")
        .agg(pl.col("s_call").first(), pl.col("s_ref").first())
    )
    cand = (
        cand.join(elsewhere, on=["gx", "ordinal"], how="left")
        .join(same_session, on=["session", "a_id"], how="left")
        .filter(pl.col("o_session_id").is_not_null() | (pl.col("a_id") != pl.col("v_id")))
    )
    what = pl.when(pl.col("a_kind") == "error").then(pl.lit("the error")).otherwise(pl.lit("the result"))
    preview = _preview(pl.col("data"))
    foreign_call = pl.col("o_session_id").is_not_null()
    got = (
        pl.when(foreign_call & pl.col("o_call").is_not_null())
        .then(pl.format("{} of session {}", pl.col("o_call"), pl.col("o_session_id")))
        .when(foreign_call)
        .then(pl.format("a response (id {}) that session {} had been delivered", pl.col("a_id"), pl.col("o_session_id")))
        .when(pl.col("s_call").is_not_null())
        .then(pl.col("s_call"))
        .otherwise(pl.format("a response to id {}, which this session never sent", pl.col("a_id")))
    )
    where = (
        pl.when(foreign_call & pl.col("o_call").is_not_null()).then(pl.col("o_ref").struct.field("location"))
        .when(foreign_call).then(pl.col("o_event").struct.field("location"))
        .otherwise(pl.col("s_ref").struct.field("location"))
    )
    msg = pl.format(
        "{} was handed {} of {}{}: \"{}\" ({}); the client gives the first response on a resumed stream to the call that "
        "opened the stream, so the application took it as this call's own",
        pl.col("v_call"), what, got, pl.when(where.is_not_null()).then(pl.format(" ({})", where)).otherwise(pl.lit("")),
        preview.fill_null(""), pl.col("location"),
    )
    answer_ref = pl.struct("source", "location")
    refs = pl.concat_list(
        pl.concat_list(pl.col("v_ref")),
        pl.concat_list(answer_ref),
        pl.when(foreign_call & pl.col("o_ref").is_not_null()).then(pl.concat_list(pl.col("o_ref")))
        .when(foreign_call).then(pl.concat_list(pl.col("o_event")))
        .when(pl.col("s_ref").is_not_null()).then(pl.concat_list(pl.col("s_ref")))
        .otherwise(pl.lit([], dtype=pl.List(pl.Struct({"source": pl.String, "location": pl.String})))),
    ).list.unique(maintain_order=True)
    return cand.select(
        "gx", wr_message=msg, wr_call=pl.col("v_call"), wr_got=got, wr_preview=preview, wr_refs=refs,
    ).collect()
