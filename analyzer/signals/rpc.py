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

from analyzer import catalog
from analyzer.signals import clients
from analyzer.signals.streams import SSE, Frames
from analyzer.formatted import formatted

FORGOT = r"(?i)not initiali[sz]ed|session not found|unknown session|no valid session|invalid session|session.*expired"
FORGOT_CODES = [-32600, -32602]


# the request's own name for what it calls: the tool and the prompt by name, the resource by URI
_NAMED_BY = {"tools/call": "$.params.name", "prompts/get": "$.params.name", "resources/read": "$.params.uri",
             "resources/subscribe": "$.params.uri", "resources/unsubscribe": "$.params.uri"}
_PATHS = {path: [m for m, p in _NAMED_BY.items() if p == path] for path in dict.fromkeys(_NAMED_BY.values())}


def call_name(method: pl.Expr, body: pl.Expr) -> pl.Expr:
    """What a request calls, as a reader names it: ``tools/call slow_count``, ``resources/read file:///a.txt``,
    ``tools/list``.  The name comes from the request body when the body is that one message (a batch gives the
    method alone)."""
    target = None
    # (each path parsed out of its own methods' bodies alone: json_path_match of a null costs nothing, and every branch
    # of a when/then is computed for every row -- five parses of every request body before)
    for path, methods in _PATHS.items():
        hit = method.is_in(methods)
        got = pl.when(hit).then(body).str.json_path_match(path)
        target = (pl.when(hit) if target is None else target.when(hit)).then(got)
    return pl.when(target.is_not_null()).then(formatted("{} {}", method, target)).otherwise(method.fill_null("request"))


def call_label(method: pl.Expr, body: pl.Expr, rpc_id: pl.Expr) -> pl.Expr:
    """A request by :func:`call_name` and id: ``tools/call slow_count (id 4)``."""
    return formatted("{} (id {})", call_name(method, body), rpc_id)


def by_gx(x: pl.DataFrame | pl.LazyFrame, gx: pl.Expr, *columns: str, **named: str) -> list[pl.Expr] | None:
    """The exchange's ``columns`` (and ``named``: alias=column) for each row's ``gx``, as expressions that gather them
    from ``x`` (the exchanges, one row per gx), in the rows' own order: a left join by gx without the join.  None when
    ``x`` is a plan (the document's lazy frames): the caller joins.  (The 1M messages joined with their exchanges
    by gx: 0.21 s; gathered: 0.01 s.)"""
    if not isinstance(x, pl.DataFrame) or x.height == 0:
        return None
    keys = x.get_column("gx")
    # (never from streams.build, whose gx are row numbers; a frame keyed twice by one gx, or by a null, is joined)
    if keys.null_count() or keys.min() < 0 or keys.max() > 4 * x.height + 1024 or keys.n_unique() != x.height:
        return None
    size = int(keys.max()) + 1
    # each gx's row in ``x`` (null for a gx that names no exchange: as a left join leaves it)
    row = pl.Series("_row", [None] * size, dtype=pl.UInt32).scatter(keys, pl.int_range(x.height, dtype=pl.UInt32, eager=True))
    gx = gx.cast(pl.Int64)
    at = pl.lit(row).gather(pl.when((gx >= 0) & (gx < size)).then(gx))
    return [pl.lit(x.get_column(c)).gather(at).alias(c) for c in columns] + [pl.lit(x.get_column(c)).gather(at).alias(a) for a, c in named.items()]


def with_gathered(rows: pl.DataFrame | pl.LazyFrame, got: list[pl.Expr]) -> pl.DataFrame:
    """``rows`` collected, in one chunk, with :func:`by_gx`'s columns.  (A gathered column comes out in the chunks of
    the frame's gx column, and a string function of it and a column chunked otherwise -- the messages' columns are,
    after a concat of inputs -- panicked in Polars 2.1, "i < self.len()": the rows are made one chunk first.)"""
    rows = rows.collect() if isinstance(rows, pl.LazyFrame) else rows
    if len({tuple(s.chunk_lengths()) for s in rows.iter_columns()}) > 1:  # (a copy only when the chunks differ)
        rows = rows.rechunk()
    return rows.with_columns(got)


def named(requests: pl.LazyFrame, f: Frames) -> pl.LazyFrame:
    """``requests`` (client requests among the messages, with ``gx``, ``method`` and ``rpc_id``) with ``call``:
    each named by :func:`call_label` from its exchange's request body."""
    got = by_gx(f.exchanges, pl.col("gx"), "request_body")
    if got is None:
        requests = requests.join(f.exchanges.lazy().select("gx", "request_body"), on="gx", how="left", maintain_order="left")
    else:
        requests = with_gathered(requests, got).lazy()
    return requests.with_columns(call=call_label(pl.col("method"), pl.col("request_body"), pl.col("rpc_id"))).drop("request_body")


def in_sessions(messages: pl.LazyFrame, sessions: pl.LazyFrame | None, key: str = "session") -> pl.LazyFrame:
    """The messages of ``sessions`` (a frame with a ``session`` column, or ``key``: ``sk``) alone, in their order; all
    of them for None.  A signal about reconnects reads only the sessions that have one: 500k tiny POST exchanges
    without a reconnect named every one of their 500k calls for nothing (+460 MiB)."""
    if sessions is None:
        return messages
    return messages.filter(pl.col(key).is_in(sessions.select(key).unique().collect().to_series().implode()))


def calls(f: Frames, sessions: pl.LazyFrame | None = None, key: str = "session") -> pl.LazyFrame:
    """Every JSON-RPC request the client sent, named (:func:`call_label`): ``session``, ``session_id``,
    ``rpc_id``, ``method``, ``call``, ``gx``, ``pos``, ``stream``, ``content_type`` and ``ref`` (its request record).
    ``sessions``: only those sessions' (:func:`in_sessions`); ``key="sk"``: ``sessions`` names them by their integer
    ``sk``, and the ``session`` column is that integer too (for joins, not to show)."""
    requests = (
        in_sessions(f.messages.lazy(), sessions, key)
        .filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
        .select(pl.col(key).alias("session"), "session_id", "source", "gx", "pos", "rpc_id", "method")
    )
    got = by_gx(f.exchanges, pl.col("gx"), "stream", "content_type", "request_body", x_location="location")
    if got is None:
        x = f.exchanges.lazy().select("gx", "stream", "content_type", "request_body", pl.col("location").alias("x_location"))
        requests = requests.join(x, on="gx", how="left", maintain_order="left")
    else:
        requests = with_gathered(requests, got).lazy()
    return (
        requests
        .select(
            "session", "session_id", "rpc_id", "method", "gx", "pos", "stream", "content_type",
            call=call_label(pl.col("method"), pl.col("request_body"), pl.col("rpc_id")),
            ref=pl.struct("source", pl.col("x_location").alias("location")),
        )
    )


def openers(f: Frames, sessions: pl.LazyFrame | None = None, key: str = "session", c: pl.DataFrame | pl.LazyFrame | None = None) -> pl.LazyFrame:
    """The request that opened each SSE stream, where one did (a batch's routing is the client's own):
    ``session``, ``stream``, ``v_id`` (its id), ``v_call`` (:func:`call_label`) and ``v_ref``; ``sessions``, ``key``: as
    :func:`calls`.  ``c``: :func:`calls` made already (of these sessions or more: the streams of the others come
    too), instead of naming every request again."""
    return (
        (calls(f, sessions, key) if c is None else c.lazy())
        .filter(pl.col("content_type") == SSE)
        .group_by("session", "stream")
        .agg(n=pl.len(), v_id=pl.col("rpc_id").first(), v_call=pl.col("call").first(), v_ref=pl.col("ref").first())
        .filter(pl.col("n") == 1)
        .drop("n")
    )


def sent_elsewhere(requests: pl.LazyFrame, responses: pl.LazyFrame, *cols: str) -> pl.LazyFrame:
    """``responses`` (with ``session``, ``rpc_id``, ``stream``) whose id the session requested on another stream
    than the response's own, each with the first such request's ``cols`` (by position) as ``req_<col>``.

    One row per response, not one per (response, request) pair: a client that numbers every call 1 sends n
    requests of one id, and n responses would each meet the n - 1 others (n = 1,000 POST streams: a million
    findings, 2.8 GB).  Per id, its first request and its first request on another stream than that one are
    enough: whichever stream the response came on, one of the two is not on it.  Only the requests of the
    responses' ids are looked at (500k tiny POST exchanges whose answers are JSON bodies, none on a stream, grouped
    every request by its id with its record for nothing: +340 MiB)."""
    requests = requests.join(responses.select("session", "rpc_id").unique(), on=["session", "rpc_id"], how="semi")
    first = requests.group_by("session", "rpc_id").agg(
        pl.col("stream", *cols).sort_by("pos", "method").first().name.prefix("req_"))
    second = (
        requests.join(first.select("session", "rpc_id", "req_stream"), on=["session", "rpc_id"])
        .filter(pl.col("stream") != pl.col("req_stream"))
        .group_by("session", "rpc_id")
        .agg(pl.col("stream", *cols).sort_by("pos", "method").first().name.prefix("alt_"))
    )
    on_first = pl.col("req_stream") == pl.col("stream")
    return (
        responses.join(first, on=["session", "rpc_id"], maintain_order="left")
        .join(second, on=["session", "rpc_id"], how="left", maintain_order="left")
        .filter(~on_first | pl.col("alt_stream").is_not_null())
        .with_columns(pl.when(on_first).then(pl.col(f"alt_{c}")).otherwise(pl.col(f"req_{c}")).alias(f"req_{c}") for c in ("stream", *cols))
        .drop(pl.selectors.starts_with("alt_"))
    )


def _tagged(f: Frames, sessions: pl.LazyFrame | None = None, messages=None, key: str = "session") -> pl.DataFrame:
    """``messages`` (default: all of ``f``'s; ``sessions``, ``key``: see :func:`in_sessions`) with their exchange's stream,
    status, content type, method (``http_method``) and location (``x_location``)."""
    m = in_sessions(f.messages if messages is None else messages, sessions, key)
    got = by_gx(f.exchanges, pl.col("gx"), "stream", "status", "content_type", http_method="method", x_location="location")
    if got is not None:
        return with_gathered(m, got).lazy() if isinstance(m, pl.LazyFrame) else with_gathered(m, got)
    x = f.exchanges.select("gx", "stream", "status", "content_type", "method", pl.col("location").alias("x_location"))
    if isinstance(m, pl.LazyFrame):
        x = x.lazy()
    return m.join(x.rename({"method": "http_method"}), on="gx", how="left", maintain_order="left")


def boundary_signals(f: Frames, b: pl.DataFrame, c: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per boundary: why the server rejected it, what the resumed stream still owed, cross-stream
    responses on the reconnect, and signs that the server forgot the session afterwards.

    One lazy plan, collected at the end: the messages table is as long as the events table, and
    eager joins of it would copy every column of it several times over.  ``c``: :func:`boundary_calls` (the
    requests of ``b``'s sessions or more, named), when made."""
    # ``session`` here is the session's integer ``sk`` (streams.session_key): every part joins, groups and as-of joins
    # on it, and none shows it
    keys = b.lazy().select("gx", "pos", pl.col("sk").alias("session"), "stream")
    # every part below looks at the boundaries' own sessions alone (each joins the boundaries by session or gx).
    # Collected once, with the columns the parts read: as a plan, each of its seven uses filtered the messages by
    # session and joined their exchanges again (1M messages: 0.6 of this function's 1.0 s went to that)
    sessions = keys.select(pl.col("session").alias("sk"))
    # (the server's notifications -- 995k of the 1M messages at 1M events -- are read by one part alone, ``alive``, for
    # their session and position: they are left out here, and ``alive`` reads them from the messages as they are; the
    # 1M rows with every column and their exchange's gathered were 0.3 GB of fresh pages.  A client notification named
    # initialize is kept, as ``asked`` reads every message so named.)
    m = (
        _tagged(f, sessions, key="sk",
                messages=f.messages.lazy().filter((pl.col("kind") != "notification") | (pl.col("method") == "initialize"))
                .select("gx", "pos", "sk", "direction", "kind", "origin", "rpc_id", "method", "error_code", "error_message",
                        "protocol_version", "params_digest"))
        .select("gx", "pos", pl.col("sk").alias("session"), "stream", "direction", "kind", "origin", "rpc_id", "method", "error_code", "error_message",
                "protocol_version", "params_digest", "status", "content_type", "x_location")
        .collect()
        .lazy()
    )
    # the error text the server gave when it refused the reconnect
    refused = (
        m.filter(pl.col("kind") == "error")
        .group_by("gx")
        .agg(error_message=pl.col("error_message").drop_nulls().first())
    )
    # requests the resumed stream was opened for, that no response anywhere in the session answered
    # (each use joins them with the boundaries by session, or with the responses by session and id: the calls of
    # more sessions than ``b``'s change nothing; named once for every signal, not again here: 0.06 s, twice)
    requests = (named(m.filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null()), f)
                if c is None else c.lazy())
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
    cross = (
        sent_elsewhere(
            requests,
            m.filter((pl.col("origin") == "sse") & (pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]))
            .join(keys.select("gx"), on="gx"),
            "call",
        )
        .group_by("gx")
        .agg(
            rpc_cross=formatted(
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
    # (only the server's errors, requests and initialize results are read after the boundary: those alone are
    # sorted and placed, not every message of the sessions; each row's boundary depends on its own position alone)
    later = (
        m.filter(pl.col("session").is_not_null() & (pl.col("direction") == "server_to_client")
                 & ((pl.col("kind") == "error") | (pl.col("kind") == "request") | ((pl.col("kind") == "response") & pl.col("protocol_version").is_not_null())))
        .sort("pos")
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
    ).select("b_gx", "pos", why=formatted("after the reconnect the server answered {} error {} \"{}\" under the same session id", pl.col("x_location"), pl.col("error_code"), pl.col("error_message")))
    # an initialize result is issued only on the exchange that carried an initialize request: the same result
    # replayed on a resumed stream (a store that replays the session's first events) is a replay, not a new
    # process (real-go-client-replica-failover: the other replica replayed the initialize answer, and no
    # initialize was sent again)
    asked = m.filter((pl.col("direction") == "client_to_server") & (pl.col("method") == "initialize")).select("gx").unique()
    issued = (pl.col("direction") == "server_to_client") & (pl.col("kind") == "response") & pl.col("protocol_version").is_not_null()
    reinit = later.filter(issued).join(asked, on="gx", how="semi").select("b_gx", "pos", why=formatted("a second initialize result was issued under the same session id ({})", pl.col("x_location")))
    renumbered = (
        later.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "request"))
        .join(server_reqs_before, on=["session", "rpc_id"], suffix="_before")
        .filter(
            (pl.col("first_pos") < pl.col("b_pos"))
            & (pl.col("method").ne_missing(pl.col("method_before")) | pl.col("params_digest").ne_missing(pl.col("params_digest_before")))
        )
        .select("b_gx", "pos", why=formatted("the server numbered its own requests from the start again (id {} reused): a new process", pl.col("rpc_id")))
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
        m.join(asked.with_columns(_asked=pl.lit(True)), on="gx", how="left", maintain_order="left")
        .filter(
            (pl.col("direction") == "server_to_client")
            & (
                ((pl.col("kind") == "error") & pl.col("status").is_between(200, 299)
                 & (pl.col("error_code").is_in(FORGOT_CODES) | pl.col("error_message").str.contains(FORGOT).fill_null(False)))
                | (issued & pl.col("_asked").fill_null(False))
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
        in_sessions(f.messages.lazy(), sessions, "sk")
        .filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "notification", "request"]))
        .filter(~(pl.col("protocol_version").is_not_null() & (pl.col("kind") == "response")))
        .select(pl.col("sk").alias("session"), pl.col("pos").alias("a_pos"))
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
            .then(formatted("the server delivered nothing of the old session after this reconnect, and then issued a second "
                            "initialize result under the same session id ({}): a new process", pl.col("p_loc")))
            .otherwise(formatted("the server delivered nothing of the old session after this reconnect, and then answered {} "
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


def boundary_calls(f: Frames, b: pl.DataFrame, foreign: pl.DataFrame) -> pl.DataFrame:
    """:func:`calls` (``session`` the integer ``sk``) of the boundaries' sessions and of the sessions that had been
    delivered an event a reconnect got (``foreign``: boundaries.foreign_deliveries), named once for every signal
    that reads them (:func:`wrong_results`, progress.proof, boundaries.stale_cursor: each named every request of the
    sessions again, 0.06 s a time at 1M events)."""
    # the calls of the boundaries' sessions (every use joins them by session) and of the other sessions (their
    # call is named from its opener)
    others = foreign.lazy().select("o_pos").join(f.exchanges.lazy().select(pl.col("pos").alias("o_pos"), "sk"), on="o_pos")
    among = pl.concat([b.lazy().select("sk"), others.select("sk")])
    return calls(f, among, "sk").collect()


def wrong_results(f: Frames, b: pl.DataFrame, foreign: pl.DataFrame, fam: pl.DataFrame | None = None, c: pl.DataFrame | None = None) -> pl.DataFrame:
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
    answer's event, and the request it really answered when known).  ``fam``: clients.sessions of ``b``'s sessions
    (made here when not given); ``c``: :func:`boundary_calls` (made here when not given)."""
    # ``session`` is the session's integer ``sk`` (streams.session_key) in every join and grouping below; none shows it
    keys = b.lazy().select("gx", pl.col("pos").alias("b_pos"), pl.col("sk").alias("session"), "stream")
    # the calls of the boundaries' sessions and of the sessions that had been delivered an event a reconnect got,
    # collected once (three uses below and the openers read them)
    c = (boundary_calls(f, b, foreign) if c is None else c).lazy()
    opener = openers(f, c=c)
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
    # each id's first answer in the session: answered before the reconnect when it came before it (a join with
    # every answer of the id would meet each of them at every reconnect of a client that numbers its calls alike)
    # (the boundaries' sessions alone: every use joins it with a boundary's session; all 500k answers of a log
    # without a reconnect were grouped by their id, +100 MiB)
    first_answer = (
        in_sessions(f.messages.lazy(), keys.select(sk="session"), "sk")
        .filter(s2c_answer)
        .group_by(pl.col("sk").alias("session"), pl.col("rpc_id").alias("v_id"))
        .agg(r_pos=pl.col("pos").min())
    )
    resumed = keys.join(opener, on=["session", "stream"])
    cand = (
        resumed.join(first, on="gx")
        .join(resumed.select("gx", "session", "v_id", "b_pos").join(first_answer, on=["session", "v_id"])
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
    x = f.exchanges.lazy().select(pl.col("pos").alias("o_pos"), pl.col("sk").alias("o_session"), pl.col("stream").alias("o_stream"))
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
    # what the client on the wire does with it (signals/clients.py): its family, whether a request of this session
    # with the answer's id was still waiting at the reconnect (a client that keeps ids gives it that request), whether
    # the resumed call's own answer came later, and whether the client read on after it or closed the stream
    fam = (
        (clients.sessions(f, b) if fam is None else fam).lazy().select("session", "client", "user_agent")
        .join(f.exchanges.lazy().select("session", "sk").unique(), on="session")
        .select(pl.col("sk").alias("session"), "client", "user_agent")
    )
    # (as-of joins: the latest request of the answer's id before the reconnect, not every request of that id -- a
    # client that numbers every call alike would meet each reconnect with each of them)
    asked = (
        c.select("session", pl.col("rpc_id").alias("a_id"), pl.col("pos").alias("p_pos"), pl.col("call").alias("p_call"),
                 pl.col("ref").alias("p_ref"))
        .sort("p_pos")
    )
    waiting = (
        cand.select("gx", "session", "a_id", "b_pos").sort("b_pos")
        .join_asof(asked, left_on="b_pos", right_on="p_pos", by=["session", "a_id"], strategy="backward",
                   allow_exact_matches=False, check_sortedness=False)
        .filter(pl.col("p_pos").is_not_null())
        .join(first_answer.rename({"v_id": "a_id"}), on=["session", "a_id"], how="left")
        .filter(pl.col("r_pos").is_null() | (pl.col("r_pos") >= pl.col("b_pos")))  # (not answered before the reconnect)
        .select("gx", "p_call", "p_ref")
    )
    own_later = (
        first_answer.join(cand.select("gx", "session", "v_id", "b_pos"), on=["session", "v_id"])
        .filter(pl.col("r_pos") >= pl.col("b_pos")).select("gx").unique().with_columns(own_later=pl.lit(True))
    )
    read_on = (
        f.events.lazy().filter(pl.col("visible")).select("gx", pl.col("ordinal").alias("e_ord"))
        .join(cand.select("gx", "ordinal"), on="gx")
        .filter(pl.col("e_ord") > pl.col("ordinal"))
        .group_by("gx").agg(read_after=pl.len())
    )
    ended = f.exchanges.lazy().select("gx", "end_by", "end_reason")
    # the TypeScript client rewrites the answer's id only for a resume the application made itself (send() with a
    # resumptionToken): that request takes the next id of the client's numbering but never reaches the wire (its
    # resume is the GET).  The trace: the ids the client sent before the reconnect end at n, the next one after it is
    # n + 2 or more (real-ts-client-resumption-token: 4, then 6; id 5 was the application's resume)
    num = pl.col("rpc_id").cast(pl.Int64, strict=False)
    numbered = (
        c.select("session", "pos", n=num).filter(pl.col("n").is_not_null()).sort("pos")
        # the highest id sent up to each request, and the lowest sent from it on (as-of joins below: one row per reconnect)
        .with_columns(hi=pl.col("n").cum_max().over("session"), lo=pl.col("n").cum_min(reverse=True).over("session"))
    )
    at = cand.select("gx", "session", "b_pos").sort("b_pos")
    app_resume = (
        at.join_asof(numbered.select("session", "pos", n_before="hi"), left_on="b_pos", right_on="pos", by="session",
                     strategy="backward", allow_exact_matches=False, check_sortedness=False)
        .drop("pos")
        .join_asof(numbered.select("session", "pos", n_after="lo"), left_on="b_pos", right_on="pos", by="session",
                   strategy="forward", allow_exact_matches=False, check_sortedness=False)
        .filter(pl.col("n_after") - pl.col("n_before") >= 2)
        .select("gx", app_id=(pl.col("n_before") + 1).cast(pl.String))
    )
    cand = (
        cand.join(fam, on="session", how="left")
        .join(app_resume, on="gx", how="left")
        .join(waiting, on="gx", how="left")
        .join(own_later, on="gx", how="left")
        .join(read_on, on="gx", how="left")
        .join(ended, on="gx", how="left")
        .with_columns(pl.col("client").fill_null(clients.UNKNOWN), pl.col("own_later").fill_null(False), pl.col("read_after").fill_null(0))
    )
    what = pl.when(pl.col("a_kind") == "error").then(pl.lit("the error")).otherwise(pl.lit("the result"))
    preview = _preview(pl.col("data"))
    foreign_call = pl.col("o_session_id").is_not_null()
    got = (
        pl.when(foreign_call & pl.col("o_call").is_not_null())
        .then(formatted("{} of session {}", pl.col("o_call"), pl.col("o_session_id")))
        .when(foreign_call)
        .then(formatted("a response (id {}) that session {} had been delivered", pl.col("a_id"), pl.col("o_session_id")))
        .when(pl.col("s_call").is_not_null())
        .then(pl.col("s_call"))
        .otherwise(formatted("a response to id {}, which this session never sent", pl.col("a_id")))
    )
    where = (
        pl.when(foreign_call & pl.col("o_call").is_not_null()).then(pl.col("o_ref").struct.field("location"))
        .when(foreign_call).then(pl.col("o_event").struct.field("location"))
        .otherwise(pl.col("s_ref").struct.field("location"))
    )
    # the outcome for the application:
    #   handed  -- a call took another call's answer as its own (the python client always: it rewrites the id; a client
    #              that keeps ids when the answer's id is the resumed call's, or a foreign answer whose id another
    #              waiting call of this session has);
    #   dropped -- a client that keeps ids and no waiting request has that id: "unknown message ID", the call waits on;
    #   either  -- a client not known here: both readings, not critical;
    #   none    -- a client that keeps ids, and the answer is a waiting request's own (on another stream: the verdict says so).
    python, ts = pl.col("client") == clients.PYTHON, pl.col("client") == clients.TYPESCRIPT
    # the Go SDK client keeps ids too (no rewrite at all), as far as its recordings show: the resumed call took a foreign
    # answer with its own id (real-go-client-foreign-same-id), answers to no waiting request were dropped
    # (real-go-client-replica-failover); an answer with another WAITING call's id is not recorded: "either" for it
    go = pl.col("client") == clients.GO
    same_id = pl.col("a_id") == pl.col("v_id")
    app = ts & pl.col("app_id").is_not_null() & (pl.col("a_kind") != "error")  # (it rewrites results only, not errors)
    outcome = (
        pl.when(python | ((ts | go) & same_id)).then(pl.lit("handed"))
        .when(app).then(pl.lit("handed_app"))
        .when(ts & pl.col("p_call").is_not_null() & foreign_call).then(pl.lit("handed_other"))
        .when(ts & pl.col("p_call").is_not_null()).then(pl.lit("none"))
        .when(ts | (go & pl.col("p_call").is_null())).then(pl.lit("dropped"))
        .otherwise(pl.lit("either"))
    )
    cand = cand.with_columns(_outcome=outcome).filter(pl.col("_outcome") != "none")
    answer = formatted("{} of {}{}: \"{}\" ({})", what, got, pl.when(where.is_not_null()).then(formatted(" ({})", where)).otherwise(pl.lit("")),
                       preview.fill_null(""), pl.col("location"))
    then_ = (
        pl.when(pl.col("read_after") > 0).then(formatted("; the client read on ({} more event(s) on that stream)", pl.col("read_after")))
        .when(pl.col("end_by") == "client").then(pl.lit("; the client closed the stream right after it"))
        .otherwise(pl.lit(""))
    )
    agent = formatted(" ({})", pl.col("user_agent").fill_null("no User-Agent"))
    later = pl.when(pl.col("own_later")).then(pl.lit("; its own response came later on the stream")).otherwise(
        formatted("; {} never completed", pl.col("v_call")))
    msg = (
        pl.when(pl.col("_outcome") == "handed").then(formatted(
            "{} was handed {}; the {} client{} gives {}, so the application took it as this call's own{}",
            pl.col("v_call"), answer,
            pl.when(python).then(pl.lit("python")).when(go).then(pl.lit("Go")).otherwise(pl.lit("TypeScript")), agent,
            pl.when(python).then(pl.lit("the first response on a resumed stream to the call that opened the stream (it rewrites the id)"))
            .otherwise(pl.lit("a response to the pending request with its id")),
            then_,
        ))
        .when(pl.col("_outcome") == "handed_app").then(formatted(
            "the application's own resume of {}, as id {}, was handed {}: the client's request ids skip {} at this reconnect, so "
            "the application resumed with a resumptionToken (that request never reaches the wire; its resume is this GET), "
            "and the TypeScript client{} rewrites the first result on such a resume to it{}; {} itself waits on",
            pl.col("v_call"), pl.col("app_id"), answer, pl.col("app_id"), agent, then_, pl.col("v_call"),
        ))
        .when(pl.col("_outcome") == "handed_other").then(formatted(
            "{} was handed {}, which arrived on the resumed stream of {}: the TypeScript client{} gives a response to the "
            "pending request with its id{}", pl.col("p_call"), answer, pl.col("v_call"), agent, then_,
        ))
        .when(pl.col("_outcome") == "dropped").then(formatted(
            "{} arrived on the resumed stream of {} and was dropped: the {} client{} keeps a response's id on its "
            "own reconnect, and no pending request has id {} ({}){}{}",
            answer, pl.col("v_call"), pl.when(go).then(pl.lit("Go")).otherwise(pl.lit("TypeScript")), agent, pl.col("a_id"),
            pl.when(go).then(pl.lit("dropped without a word")).otherwise(pl.lit("\"unknown message ID\"")), then_, later,
        ))
        .otherwise(formatted(
            "{} arrived on the resumed stream of {}; what the application got depends on the client{}, which is not known "
            "here: a client that rewrites response ids on a resumed stream (the python SDK's) took it as {}'s result, one "
            "that keeps them (the TypeScript SDK's automatic reconnect) {}{}{}",
            answer, pl.col("v_call"), agent, pl.col("v_call"),
            pl.when(pl.col("p_call").is_not_null() & ~foreign_call).then(formatted("gave it to {}, whose answer it is", pl.col("p_call")))
            .when(pl.col("p_call").is_not_null()).then(formatted("gave it to {}, which took another session's answer", pl.col("p_call")))
            .otherwise(pl.lit("dropped it")),
            then_, later,
        ))
    )
    handed, dropped = pl.col("_outcome").is_in(["handed", "handed_other", "handed_app"]), pl.col("_outcome") == "dropped"
    rule = (
        pl.when(handed).then(pl.lit("wrong_result_delivered"))
        .when(dropped).then(pl.lit("foreign_response_dropped"))
        .otherwise(pl.lit("foreign_response_on_resume"))
    )
    severity = (
        pl.when(handed).then(pl.lit(catalog.finding_severity("wrong_result_delivered", "critical")))
        .when(dropped & pl.col("own_later")).then(pl.lit(catalog.finding_severity("foreign_response_dropped", "warning")))
        .when(dropped).then(pl.lit(catalog.finding_severity("foreign_response_dropped", "error")))
        .otherwise(pl.lit(catalog.finding_severity("foreign_response_on_resume", "error")))
    )
    # the call the application saw hurt, and how (the report's "Calls hit")
    hit_call = (
        pl.when(pl.col("_outcome") == "handed_other").then(pl.col("p_call"))
        .when(pl.col("_outcome") == "handed_app").then(formatted("the application's resume of {}, as id {} (not on the wire)", pl.col("v_call"), pl.col("app_id")))
        .otherwise(pl.col("v_call"))
    )
    hit = (
        pl.when(handed).then(pl.lit("another_result"))
        .when(pl.col("own_later")).then(pl.lit("own_result"))
        .when(pl.col("_outcome") == "dropped").then(pl.lit("never_completed"))
        .otherwise(pl.lit("another_result_or_never_completed"))
    )
    answer_ref = pl.struct("source", "location")
    refs = pl.concat_list(
        pl.concat_list(pl.col("v_ref")),
        pl.concat_list(answer_ref),
        pl.when(pl.col("_outcome") == "handed_other").then(pl.concat_list(pl.col("p_ref")))
        .otherwise(pl.lit([], dtype=pl.List(pl.Struct({"source": pl.String, "location": pl.String})))),
        pl.when(foreign_call & pl.col("o_ref").is_not_null()).then(pl.concat_list(pl.col("o_ref")))
        .when(foreign_call).then(pl.concat_list(pl.col("o_event")))
        .when(pl.col("s_ref").is_not_null()).then(pl.concat_list(pl.col("s_ref")))
        .otherwise(pl.lit([], dtype=pl.List(pl.Struct({"source": pl.String, "location": pl.String})))),
    ).list.unique(maintain_order=True)
    return cand.select(
        "gx", wr_message=msg, wr_call=hit_call, wr_got=got, wr_preview=preview, wr_refs=refs, wr_rule=rule, wr_severity=severity,
        wr_client="client", wr_outcome=hit, wr_resumed_call=pl.col("v_call"), wr_resumed_id=pl.col("v_id"),
    ).collect()
