"""A proof of continuity for opaque event ids: the call's own progress, and its own response.

Opaque ids (uuid4 of the python SDK's example store and FastMCP's, the typescript SDK's
``<stream>_<ms>_<rand>``) cannot say which event followed the client's Last-Event-ID.  What a resumed
tool call carries can: its ``notifications/progress`` for one progressToken count on by a fixed step
(the SDKs' ``report_progress(i, total)``), and the call ends with its own response.  A reconnect is
proven to continue where the client stopped when

- the client's Last-Event-ID is an event the stream delivered, and before it the stream carried the
  call's progress (its last value ``p``);
- on the reconnect's own connection the same token's progress goes on from ``p`` by the step the
  values show (the step between the values after the reconnect, or else the one before it), without a
  jump, a repeat or a step back, and at least one progress value arrives;
- the call's own response (its id, not another call's answer) arrives after the reconnect on the same
  stream, on this connection or a later one.

A lost progress notification breaks the count; a store that replays nothing while the tool goes on
live jumps it; a replay of the wrong stream carries another token or another response.  What this
does not see is a lost notification of another kind between two progress values (a log message):
the evidence name says which proof was used (``progress_and_response``), and the README says so.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.streams import Frames

PROGRESS = "notifications/progress"


def proof(f: Frames, b: pl.DataFrame, wrong: pl.DataFrame) -> pl.DataFrame:
    """Per boundary whose progress and response prove it (``gx``, ``progress_proof``: the reason's words).

    ``b``: the boundaries (``gx``, ``pos``, ``session``, ``stream``, ``header``); ``wrong``: the reconnects
    whose first answer was another call's (rpc.wrong_results: their ``gx``), which prove nothing."""
    keys = (
        b.lazy()
        .filter(pl.col("header").is_not_null())
        .select("gx", pl.col("pos").alias("b_pos"), "session", "stream", pl.col("header").alias("cursor"))
        .join(wrong.lazy().select("gx"), on="gx", how="anti")
    )
    streams = keys.select("session", "stream").unique()
    # the events of the resumed streams alone, in delivery order (connection by connection)
    ev = (
        f.events.lazy()
        .filter(pl.col("visible"))
        .join(streams, on=["session", "stream"], how="semi")
        .select("session", "stream", "gx", "pos", "ordinal", "id", "data")
        .sort("pos", "ordinal")
        .with_columns(_k=pl.int_range(pl.len()).over("session", "stream"))
    )
    # where the client's cursor is: the last delivery of its id before the reconnect
    at_cursor = (
        keys.join(ev.select("session", "stream", "pos", "id", "_k"), on=["session", "stream"])
        .filter((pl.col("pos") < pl.col("b_pos")) & (pl.col("id") == pl.col("cursor")))
        .group_by("gx")
        .agg(cursor_k=pl.col("_k").max())
    )
    d = pl.col("data")
    prog = (
        ev.filter(d.str.contains(PROGRESS, literal=True))
        .with_columns(
            method=d.str.json_path_match("$.method"),
            token=d.str.json_path_match("$.params.progressToken"),
            value=d.str.json_path_match("$.params.progress").cast(pl.Float64, strict=False),
        )
        .filter((pl.col("method") == PROGRESS) & pl.col("token").is_not_null() & pl.col("value").is_not_null())
        .select("session", "stream", "gx", "pos", "_k", "token", "value")
    )
    k = keys.join(at_cursor, on="gx")
    # the call's progress up to the cursor: its token and last value, and the step between its last two values
    before = (
        k.join(prog, on=["session", "stream"])
        .filter(pl.col("_k") <= pl.col("cursor_k"))
        .sort("_k")
        .group_by("gx")
        .agg(token=pl.col("token").last(), last=pl.col("value").last(), step_before=pl.col("value").diff().last())
    )
    # ... and after it, on the reconnect's own connection: that token's values (any other token: no proof)
    own = k.join(prog.rename({"gx": "p_gx"}), on=["session", "stream"]).filter(pl.col("p_gx") == pl.col("gx"))
    after = (
        own.sort("_k")
        .group_by("gx")
        .agg(values=pl.col("value"), tokens=pl.col("token").unique(), first_k=pl.col("_k").min())
    )
    # the call's own response after the reconnect, on the stream (this connection or a later one)
    opener = (
        f.messages.lazy()
        .filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
        .join(f.exchanges.lazy().filter(pl.col("content_type") == "text/event-stream").select("gx", "stream"), on="gx")
        .group_by("session", "stream")
        .agg(n=pl.len(), call_id=pl.col("rpc_id").first())
        .filter(pl.col("n") == 1)
        .drop("n")
    )
    answers = (
        f.messages.lazy()
        .filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]) & pl.col("rpc_id").is_not_null()
                & (pl.col("origin") == "sse"))
        .select("session", pl.col("gx").alias("a_gx"), pl.col("pos").alias("a_pos"), "ordinal", pl.col("rpc_id").alias("a_id"))
        .join(f.exchanges.lazy().select(pl.col("gx").alias("a_gx"), "stream"), on="a_gx")
    )
    responded = (
        keys.join(opener, on=["session", "stream"])
        .join(answers, on=["session", "stream"])
        .filter(pl.col("a_pos") >= pl.col("b_pos"))
        .sort("a_pos", "ordinal")
        .group_by("gx")
        .agg(first_answer=pl.col("a_id").first(), call_id=pl.col("call_id").first(), where=pl.col("a_gx").first())
        .filter(pl.col("first_answer") == pl.col("call_id"))
        .select("gx", "call_id")
    )
    vals = pl.col("values")
    step = pl.when(vals.list.len() >= 2).then(vals.list.get(1) - vals.list.get(0)).otherwise(pl.col("step_before"))
    # every step after the cursor, the first one from the last value before it included
    steps = pl.concat_list(pl.col("last"), vals).list.diff(null_behavior="drop")
    proven = (
        before.join(after, on="gx")
        .join(responded, on="gx")
        .with_columns(_step=step)
        .filter(
            (pl.col("tokens").list.len() == 1)
            & (pl.col("tokens").list.first() == pl.col("token"))
            & (pl.col("_step") > 0)
            # the step before the cursor, when two values show it, is the same step
            & (pl.col("step_before").is_null() | ((pl.col("step_before") - pl.col("_step")).abs() < 1e-9))
        )
    )
    # every step equal to the call's step (compared row by row after an explode: list.eval cannot read another column)
    proven = (
        proven.with_columns(_steps=steps)
        .explode("_steps")
        .group_by("gx", maintain_order=True)
        .agg(
            ok=((pl.col("_steps") - pl.col("_step")).abs() < 1e-9).all(),
            token=pl.col("token").first(),
            last=pl.col("last").first(),
            values=pl.col("values").first(),
            call_id=pl.col("call_id").first(),
        )
        .filter(pl.col("ok"))
    )
    return proven.select(
        "gx",
        progress_proof=pl.format(
            "progress of token {} went on from {} to {} without a jump, and the call's own response (id {}) arrived after the reconnect",
            pl.col("token"), _num(pl.col("last")), _num(pl.col("values").list.last()), pl.col("call_id"),
        ),
    ).collect()


def _num(x: pl.Expr) -> pl.Expr:
    """A progress value as written: 3 for 3.0, 2.5 as is."""
    return pl.when(x == x.round(0)).then(x.cast(pl.Int64).cast(pl.String)).otherwise(x.cast(pl.String))
