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

- when every whole step of the call (the events between two progress notifications) carries the same
  other notifications -- a log at every step -- the step the reconnect cut through carries them too.

A lost progress notification breaks the count; a store that replays nothing while the tool goes on
live jumps it; a replay of the wrong stream carries another token or another response; a log dropped
by the replay leaves the cut step short of what every other step carries.  What this does not see is a
lost log of a tool that logs at some steps only: the evidence name says which proof was used
(``progress_and_response``), and the README says so.  A jump or a short step is said in the reason of
the ``unverifiable`` verdict (``progress_doubt``), not made a gap: a tool may skip a value.
Recordings: real-python-resume-uuid and real-ts-resume (proven), real-python-uuid-lossy-replay (a
jump), real-python-uuid-drops-log (a short step), real-python-uuid-restart (nothing after the resume).
"""
from __future__ import annotations

import polars as pl

from analyzer.signals import idschemes, rpc
from analyzer.signals.streams import Frames
from analyzer.formatted import formatted

PROGRESS = "notifications/progress"

# A progress notification as the SDKs write it compactly, matched whole: its strings without an escape or a control
# character, the progress a whole number of at most 15 digits (exact as a float), an optional total (a plain number:
# no exponent, which could overflow and make the text unreadable to json_path_match) and message.  Such a text is
# valid JSON with these keys once each, so what ``json_path_match`` reads of it is known: the method, the token's
# characters, the progress's digits.
_STR = r'"[^"\\\x00-\x1f]*"'
_COMPACT_PROGRESS = (
    r'\A\{"jsonrpc":"2\.0","method":"notifications/progress","params":\{"progressToken":"(?<token>[^"\\\x00-\x1f]*)",'
    r'"progress":(?<value>-?[1-9][0-9]{0,14}|0)(?:,"total":-?(?:0|[1-9][0-9]{0,14})(?:\.[0-9]{1,15})?)?'
    r'(?:,"message":' + _STR + r")?\}\}\z"
)


def notification_fields(data: pl.Expr, shape: pl.Expr) -> dict[str, pl.Expr]:
    """``method``, ``token`` (params.progressToken) and ``value`` (params.progress, a float) of each event's ``data``,
    as ``json_path_match`` reads them (a number as its JSON text, a batch or a broken text as null).  ``shape``:
    ``data.str.extract_groups(_COMPACT_PROGRESS)``, made as a column first (an expression of it used thrice ran the
    regex thrice).  The compact notifications the pattern matches whole are read from its groups; only the rest
    (another writer's spacing or key order, escapes, a decimal or numeric token) are parsed, three times, by
    ``json_path_match`` (3 us a notification: 0.94 s for the 326k progress notifications of the 1M events, 0.24 s
    this way)."""
    hit = shape.struct.field("token").is_not_null()
    rest = pl.when(~hit).then(data)  # (json_path_match of a null costs nothing)
    return {
        "method": pl.when(hit).then(pl.lit(PROGRESS)).otherwise(rest.str.json_path_match("$.method")),
        "token": pl.when(hit).then(shape.struct.field("token")).otherwise(rest.str.json_path_match("$.params.progressToken")),
        "value": pl.when(hit).then(shape.struct.field("value")).otherwise(rest.str.json_path_match("$.params.progress"))
        .cast(pl.Float64, strict=False),
    }


def proof(f: Frames, b: pl.DataFrame, wrong: pl.DataFrame, c: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per boundary whose progress and response prove it (``gx``, ``progress_proof``: the reason's words), or whose
    progress speaks against continuity (``progress_doubt``: a jump by other than the call's step, or a cut step
    that lacks a notification every other step carries).

    ``b``: the boundaries (``gx``, ``pos``, ``session``, ``stream``, ``header``); ``wrong``: the reconnects
    whose first answer was another call's (rpc.wrong_results: their ``gx``), which prove nothing; ``c``: the calls of
    those sessions or more (rpc.boundary_calls), when made."""
    keys = (
        b.lazy()
        # only opaque ids are judged by it (contiguous ids decide before the decision chain reaches its branch)
        .filter(pl.col("header").is_not_null() & ~pl.col("id_scheme").is_in(idschemes.CONTIGUOUS))
        # (``session`` is the session's integer ``sk`` here, streams.session_key: every join below is on it)
        .select("gx", pl.col("pos").alias("b_pos"), pl.col("sk").alias("session"), "stream", pl.col("header").alias("cursor"))
        .join(wrong.lazy().select("gx"), on="gx", how="anti")
    )
    # the events of the resumed streams alone, in delivery order (connection by connection): the events' own order
    # (Frames), found by their connections (a semi-join of the few exchanges by session and stream, then of the
    # events by the integer gx, and a window over an integer per (session, stream): the strings' semi-join, sort
    # and window over 1M events were 0.3 s)
    conns = (
        f.exchanges.lazy().select("gx", pl.col("sk").alias("session"), "stream")
        .join(keys.select("session", "stream").unique(), on=["session", "stream"], how="semi")
        .with_columns(_ss=pl.struct("session", "stream").rank("dense"))
    )
    ev = (
        f.events.lazy()
        .filter(pl.col("visible"))
        .join(conns, on="gx", how="inner", maintain_order="left", suffix="_x")
        .select(pl.col("sk").alias("session"), "stream", "gx", "pos", "ordinal", "id", "data", _k=pl.int_range(pl.len()).over("_ss"))
        .collect()  # once: the plans below read it three times (a lazy frame is scanned again by each)
    )
    # where the client's cursor is: the last delivery of its id before the reconnect
    at_cursor = (
        # (the events with a cursor's id alone: not every event of the stream once per reconnect)
        keys.join(ev.lazy().select("session", "stream", "pos", "id", "_k")
                  .join(keys.select(pl.col("cursor").alias("id")).unique(), on="id", how="semi"), on=["session", "stream"])
        .filter((pl.col("pos") < pl.col("b_pos")) & (pl.col("id") == pl.col("cursor")))
        .group_by("gx")
        .agg(cursor_k=pl.col("_k").max())
    )
    d = pl.col("data")
    prog = (
        ev.lazy().filter(d.str.contains(PROGRESS, literal=True))
        .with_columns(_shape=d.str.extract_groups(_COMPACT_PROGRESS))
        .with_columns(**notification_fields(d, pl.col("_shape")))
        .filter((pl.col("method") == PROGRESS) & pl.col("token").is_not_null() & pl.col("value").is_not_null())
        .select("session", "stream", "gx", "pos", "_k", "token", "value")
        .collect()
        .lazy()
    )
    ev = ev.drop("data").lazy()
    # (k, before and after are collected once each: as plans, every collect below computed them again -- at_cursor
    # three times, before twice)
    k = keys.join(at_cursor, on="gx").collect().lazy()
    # the call's progress up to the cursor: its token and last value, and the step between its last two values
    before = (
        k.join(prog, on=["session", "stream"])
        .filter(pl.col("_k") <= pl.col("cursor_k"))
        .sort("_k")
        .group_by("gx")
        .agg(token=pl.col("token").last(), last=pl.col("value").last(), step_before=pl.col("value").diff().last(),
             bvals=pl.col("value").filter(pl.col("token") == pl.col("token").last()))
    )
    # ... and after it, on the reconnect's own connection: that token's values (any other token: no proof)
    own = k.join(prog.rename({"gx": "p_gx"}), on=["session", "stream"]).filter(pl.col("p_gx") == pl.col("gx"))
    after = (
        own.sort("_k")
        .group_by("gx")
        .agg(values=pl.col("value"), tokens=pl.col("token").unique(), first_k=pl.col("_k").min())
    )
    before, after = (one.lazy() for one in pl.collect_all([before, after]))
    # the call's own response after the reconnect, on the stream (this connection or a later one)
    opener = rpc.openers(f, keys.select(sk="session"), key="sk", c=c).select("session", "stream", "v_call", call_id="v_id")
    answers = (
        f.messages.lazy()
        .filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]) & pl.col("rpc_id").is_not_null()
                & (pl.col("origin") == "sse"))
        .select(pl.col("sk").alias("session"), pl.col("gx").alias("a_gx"), pl.col("pos").alias("a_pos"), "ordinal", pl.col("rpc_id").alias("a_id"))
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
    checked = (
        before.join(after, on="gx")
        .with_columns(_step=step)
        .filter(
            (pl.col("tokens").list.len() == 1)
            & (pl.col("tokens").list.first() == pl.col("token"))
            & (pl.col("_step") > 0)
            # the step before the cursor, when two values show it, is the same step
            & (pl.col("step_before").is_null() | ((pl.col("step_before") - pl.col("_step")).abs() < 1e-9))
        )
        # every step equal to the call's step (compared row by row after an explode: list.eval cannot read another column)
        .with_columns(_steps=steps)
        .explode("_steps")
        .group_by("gx", maintain_order=True)
        .agg(
            ok=((pl.col("_steps") - pl.col("_step")).abs() < 1e-9).all(),
            token=pl.col("token").first(),
            last=pl.col("last").first(),
            values=pl.col("values").first(),
            step=pl.col("_step").first(),
        )
    )
    checked = checked.collect().lazy()
    # (only a reconnect whose progress went on by its step can be proven, or cut short)
    # (collected once: proven and doubts both read it)
    short = _step_cut_short(f, k.join(checked.filter(pl.col("ok")).select("gx"), on="gx", how="semi"), ev, prog).collect().lazy()
    proven = (
        checked.filter(pl.col("ok"))
        .join(responded, on="gx")
        .join(short, on="gx", how="anti")
        .select(
            "gx",
            progress_proof=formatted(
                "progress of token {} went on from {} to {} without a jump, and the call's own response (id {}) arrived after the reconnect",
                pl.col("token"), _num(pl.col("last")), _num(pl.col("values").list.last()), pl.col("call_id"),
            ),
        )
    )
    # what the same reading shows against continuity (the verdict stays unverifiable: a tool may skip a value)
    doubts = pl.concat([
        # (only when the values after the reconnect keep one step themselves: uneven progress -- 1, 2 | 5, 6, 10 --
        # is the tool's own way of counting, not a sign of loss; real-python-uuid-healthy-uneven lost nothing)
        checked.filter(~pl.col("ok") & _even(pl.col("values"))).select(
            "gx",
            progress_doubt=formatted(
                "the call's progress went from {} to {} on the reconnect where its step is {}: a progress notification was likely lost",
                _num(pl.col("last")), _num(pl.col("values").list.first()), _num(pl.col("step")),
            ),
        ),
        checked.filter(pl.col("ok")).join(short, on="gx").select(
            "gx",
            progress_doubt=formatted(
                "the call's progress went on, but the step the reconnect cut lacks a {} that every other step of the call "
                "carries: it was likely lost", pl.col("missing"),
            ),
        ),
    ])
    skipped = _skipped(before, after, keys, opener)
    return (
        proven.join(doubts, on="gx", how="full", coalesce=True)
        .join(skipped, on="gx", how="full", coalesce=True)
        .collect()
    )


def _skipped(before: pl.LazyFrame, after: pl.LazyFrame, keys: pl.LazyFrame, opener: pl.LazyFrame) -> pl.LazyFrame:
    """The boundaries (``gx``) where the call's progress proves a loss: one token, a fixed step shown by at least two
    values before the cursor and two after the reconnect, every step before and after equal to it, and between the
    last value before and the first after a whole number (2 or more) of those steps: 1, 2, 3 | 5, 6, 7.  The values in
    between are progress notifications the server sent for the call and the client never got (a store that skips on
    replay, evicts or expires the cursor): ``ps_count`` of them, ``ps_values``, named in ``ps_reason``.  Uneven
    progress (1, 2, 5, 6, 10) proves nothing and stays a doubt (a tool may skip values)."""
    eps = 1e-9
    bd = pl.col("bvals").list.diff(null_behavior="drop")
    ad = pl.col("values").list.diff(null_behavior="drop")
    step = pl.col("step_before")
    regular = lambda d: ((d.list.max() - step).abs() < eps) & ((d.list.min() - step).abs() < eps)  # noqa: E731
    k = (pl.col("values").list.first() - pl.col("last")) / step
    calls = keys.join(opener.select("session", "stream", "call_id", "v_call"), on=["session", "stream"]).select("gx", "v_call")
    sk = (
        before.join(after, on="gx")
        .filter(
            (pl.col("tokens").list.len() == 1) & (pl.col("tokens").list.first() == pl.col("token"))
            & (pl.col("bvals").list.len() >= 2) & (pl.col("values").list.len() >= 2) & (step > 0)
            & regular(bd) & regular(ad)
        )
        .with_columns(_k=k)
        .filter((pl.col("_k") >= 2 - eps) & ((pl.col("_k") - pl.col("_k").round(0)).abs() < 1e-6))
        .with_columns(ps_count=(pl.col("_k").round(0) - 1).cast(pl.Int64))
        .join(calls, on="gx", how="left")
    )
    # the values that never arrived, as written (the first 20)
    missing = (
        sk.select("gx", "last", "step_before", _i=pl.int_ranges(1, pl.col("ps_count") + 1).list.head(20))
        .explode("_i")
        .group_by("gx")
        .agg(ps_values=_num(pl.col("last") + pl.col("_i").cast(pl.Float64) * pl.col("step_before")).sort_by("_i"))
    )
    return sk.join(missing, on="gx").select(
        "gx", "ps_count", "ps_values",
        ps_reason=formatted(
            "opaque ids, but the call's own progress (token {}) went {} by {} before the cursor and {} by {} after the "
            "reconnect: {} progress notification(s) in between ({}) never arrived{}",
            pl.col("token"), _nums(pl.col("bvals")), _num(step), _nums(pl.col("values")), _num(step), pl.col("ps_count"),
            pl.col("ps_values").list.join(", ") + pl.when(pl.col("ps_count") > 20).then(pl.lit(", …")).otherwise(pl.lit("")),
            pl.when(pl.col("v_call").is_not_null()).then(formatted(": {} lost them", pl.col("v_call"))).otherwise(pl.lit("")),
        ),
        ps_call="v_call",
    )


def _even(values: pl.Expr) -> pl.Expr:
    """Fewer than three values, or every step between them the same."""
    d = values.list.diff(null_behavior="drop")
    return (values.list.len() < 3) | ((d.list.max() - d.list.min()).abs() < 1e-9)


def _nums(values: pl.Expr) -> pl.Expr:
    """Progress values as written, joined by ", " (the first 8, then "…")."""
    shown = values.list.head(8).list.eval(
        pl.when(pl.element() == pl.element().round(0)).then(pl.element().cast(pl.Int64).cast(pl.String)).otherwise(pl.element().cast(pl.String))
    ).list.join(", ")
    return pl.when(values.list.len() > 8).then(shown + pl.lit(", …")).otherwise(shown)


def _step_cut_short(f: Frames, k: pl.LazyFrame, ev: pl.LazyFrame, prog: pl.LazyFrame) -> pl.LazyFrame:
    """The boundaries (``gx``) whose cut step lacks a notification every other step carries.

    The events the client processed (up to its cursor on the old connections, then the reconnect's own) are
    cut into steps at each progress notification.  When every whole step on either side of the cursor
    carries the same other notifications (at least two such steps: a log at every step), the step the
    reconnect cut through must carry at least those too; one missing is an event lost at the reconnect that
    the progress values cannot show (a log dropped by the replay).  A tool that logs at some steps only
    shows no such rule, and this check says nothing then."""
    notes = (
        f.messages.lazy()
        .filter((pl.col("direction") == "server_to_client") & (pl.col("origin") == "sse") & pl.col("kind").is_in(["notification", "request"]))
        .select(pl.col("gx").alias("e_gx"), "ordinal", "method")
    )
    is_prog = prog.select(pl.col("gx").alias("e_gx"), "_k", "session", "stream").with_columns(_p=pl.lit(True))
    seq = (
        k.join(ev.select("session", "stream", pl.col("gx").alias("e_gx"), "pos", "ordinal", "_k"), on=["session", "stream"])
        .filter(((pl.col("pos") < pl.col("b_pos")) & (pl.col("_k") <= pl.col("cursor_k"))) | (pl.col("e_gx") == pl.col("gx")))
        .collect()
    )
    # the notifications of those connections alone are looked up (a hash table of every SSE notification of the
    # capture, 1M at 1M events, was built for each use of this plan)
    notes = notes.filter(pl.col("e_gx").is_in(seq.get_column("e_gx").unique().implode()))
    seq = (
        seq.lazy()
        .join(is_prog, on=["session", "stream", "e_gx", "_k"], how="left")
        .join(notes, on=["e_gx", "ordinal"], how="left")
        .with_columns(pl.col("_p").fill_null(False))
        .sort("gx", "_k")
        .with_columns(step=pl.col("_p").cast(pl.Int32).cum_sum().over("gx"))
    )
    sep = "\x1f"
    steps = seq.group_by("gx", "step").agg(
        key=pl.col("method").filter(~pl.col("_p") & pl.col("method").is_not_null()).sort().str.join(sep),
        has_cursor=(pl.col("_k") == pl.col("cursor_k")).any(),
    )
    last = steps.group_by("gx").agg(last_step=pl.col("step").max())
    cut = steps.filter(pl.col("has_cursor")).select("gx", cut_step="step", cut_key="key")
    regular = (
        steps.join(last, on="gx").join(cut, on="gx")
        # whole steps only: not before the first progress, not the last (it ends with the response), not the cut one
        .filter((pl.col("step") >= 1) & (pl.col("step") < pl.col("last_step")) & (pl.col("step") != pl.col("cut_step")))
        .group_by("gx")
        .agg(n=pl.len(), kinds=pl.col("key").n_unique(), key=pl.col("key").first(), cut_key=pl.col("cut_key").first())
        .filter((pl.col("n") >= 2) & (pl.col("kinds") == 1) & (pl.col("key") != ""))
    )
    def counts(col: str, name: str) -> pl.LazyFrame:
        return (
            regular.select("gx", method=pl.col(col).str.split(sep))
            .explode("method")
            .filter(pl.col("method").is_not_null() & (pl.col("method") != ""))
            .group_by("gx", "method")
            .agg(pl.len().alias(name))
        )

    return (
        counts("key", "want")
        .join(counts("cut_key", "got"), on=["gx", "method"], how="left")
        .filter(pl.col("got").fill_null(0) < pl.col("want"))
        .sort("gx", "method")
        .group_by("gx")
        .agg(missing=pl.col("method").first())
    )


def _num(x: pl.Expr) -> pl.Expr:
    """A progress value as written: 3 for 3.0, 2.5 as is."""
    return pl.when(x == x.round(0)).then(x.cast(pl.Int64).cast(pl.String)).otherwise(x.cast(pl.String))
