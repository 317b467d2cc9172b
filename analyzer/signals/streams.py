"""Sessions, streams and reconnect boundaries, rebuilt from the canonical tables.

Everything here is a Polars expression over whole tables.  Vocabulary:

- *session*: ``Mcp-Session-Id`` sent on the request, else the one the response
  issued (that is how the ``initialize`` POST joins the session it created).
- *position* (``pos``): the order of requests in the merged history.
- *visible event*: an event the client processed or at least parsed to its end
  (``fate != cut_off``); a cut-off event is evidence, not delivery.
- *boundary*: a request that resumes a stream.  It carries ``Last-Event-ID``,
  or it is a GET that reopens a session whose earlier GET stream exists.
- *resumed exchange*: the connection that delivered the event named by
  ``Last-Event-ID`` (latest one before the boundary), else the session's
  previous SSE connection (README, "Decision chain").
- *stream*: the chain of connections linked by resumptions; its id is the
  position of the chain's first connection.
- *incident*: the per-input sessions that share an exchange, transitively
  (views.incidents); a resume whose own capture never saw its Last-Event-ID
  delivered is looked up in the other captures of its incident.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals import components, idschemes, views
from analyzer.signals.frames import Frames, hidden, in_order  # (the rules and signals import Frames from here)
from analyzer.tables import compact_digest_expr, one_chunk
from analyzer.formatted import formatted

SSE = "text/event-stream"


def _ordered_exchanges(x: pl.DataFrame) -> pl.DataFrame:
    """Global position: by request start time; a missing time keeps the record's place in its source."""
    # The order never depends on the order inputs were given in (or read back from a store):
    # time first, then the input's name and the record's place in it.
    return (
        in_order(x, ["source", "xid"])
        .with_row_index("gx")
        .with_columns(
            pl.col("gx").cast(pl.Int64),
            pl.col("started").forward_fill().over("source").alias("_t"),
            pl.coalesce("req_session_id", "resp_session_id").fill_null("").alias("session_id"),
        )
        .pipe(views.hops)
        # The grouping key: each view (an input, or one hop of a multi-hop capture) is its own
        # history, the same id in two views is two sessions.  Views of one incident are tied by
        # shared exchanges (``incident``).
        .with_columns((pl.col("view") + "\x1f" + pl.col("session_id")).alias("session"))
        # the session as one integer (``sk``, its rank among the sessions' strings: exact, no hash): the rules
        # join and group on it, the string stays for what the document shows
        .with_columns(sk=session_key(pl.col("session")))
        .pipe(in_order, ["_t", "source", "xid"])
        .with_row_index("pos")
        .with_columns(pl.col("pos").cast(pl.Int64))
        .drop("_t")
    )


def attach(x: pl.DataFrame, right: pl.DataFrame, on: str) -> pl.DataFrame:
    """``x.join(right, on=on, how="left")`` in ``x``'s row order (``right`` has one row per key), without a copy
    of every column of ``x``: the key column alone is joined, and ``right``'s columns are added beside ``x``'s
    (each left join of the exchanges copied all two dozen columns: 500k exchanges, 117 MiB a join)."""
    got = x.select(on).join(right, on=on, how="left", maintain_order="left")
    assert got.height == x.height, f"one row of {on} per key"
    return x.hstack(got.drop(on).get_columns())


def _resume_links(x: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """One row per boundary: gx of the request and gx of the exchange it resumes."""
    # Several connections may have delivered the named id (per-stream counters repeat values):
    # prefer one whose stream was still owed something (a GET stream, or a POST stream whose
    # response had not come), then the latest.
    with_header = x.filter(pl.col("last_event_id").is_not_null() & (pl.col("last_event_id") != ""))
    # the latest delivery before the boundary, an unfinished one first: two as-of joins (the latest unfinished
    # one, the latest of all), not a join with every earlier delivery of the id (a session whose streams all
    # name and re-deliver one id would meet each of them at every boundary: quadratic in its streams)
    # (session, id) as one integer key (keyed_id of sk and idh), and only the deliveries of the pairs some request
    # named, found by that key among the visible events' keys (by the id strings first, a named integer id such
    # as "57" matched most of a log's deliveries: 1M events, 0.08 s)
    asked = with_header.select("gx", "pos", k=keyed_id(pl.col("sk"), id_hash(pl.col("last_event_id")))).sort("pos")
    finished = x.select("gx", "finished")
    by_pos = (
        ev.lazy().filter(pl.col("visible") & pl.col("has_id"))
        .select(pl.col("gx").alias("by_id_gx"), pl.col("pos").alias("by_id_pos"), k=keyed_id(pl.col("sk"), pl.col("idh")))
        .filter(pl.col("k").is_in(asked.get_column("k").implode()))
        .collect()
        .join(finished.select(by_id_gx="gx", unfinished=~pl.col("finished")), on="by_id_gx")
        .sort("by_id_pos")
    )

    def latest(left: pl.DataFrame, d: pl.DataFrame, name: str) -> pl.DataFrame:
        return left.join_asof(
            d.select("k", "by_id_pos", pl.col("by_id_gx").alias(name)), left_on="pos", right_on="by_id_pos",
            by="k", strategy="backward", allow_exact_matches=False, check_sortedness=False,
        ).drop("by_id_pos")

    own = (
        latest(latest(asked, by_pos.filter("unfinished"), "_u"), by_pos, "_a")
        .select("gx", by_id_gx=pl.coalesce("_u", "_a"))
        .filter(pl.col("by_id_gx").is_not_null())
    )
    # The boundary's own capture never saw the id delivered (it started later, or the
    # resume went another way): another capture of the same incident may have.  Several
    # views of one exchange delivered it: the one nearest the client (fewest events) is
    # the connection the client resumed; between exchanges, as above.
    joined = x.select("session", "incident").unique().filter(pl.col("incident").is_duplicated()).select("session")
    cross = pl.DataFrame(schema={"gx": pl.Int64, "by_id_gx": pl.Int64})
    if joined.height:  # (a capture alone has no other capture to look in: none of this is made)
        # the deliveries of any id some request named, in the sessions of incidents of several views alone (the
        # other view that delivered it is one of them)
        named = with_header.get_column("last_event_id").unique()
        deliveries = (
            ev.lazy().join(x.lazy().join(joined.lazy(), on="session", how="semi").select("sk").unique(), on="sk", how="semi")
            .filter(pl.col("visible") & pl.col("has_id") & pl.col("id").is_in(named.implode()))
            .collect()
            .join(finished, on="gx")
            .select("session", pl.col("id").alias("last_event_id"), pl.col("gx").alias("by_id_gx"), pl.col("pos").alias("by_id_pos"),
                    (~pl.col("finished")).alias("unfinished"))
        )
        views_of = x.select("gx", x_pos=pl.col("pos").min().over(pl.coalesce(pl.col("fp"), formatted("gx#{}", pl.col("gx")))))
        nvis = ev.lazy().filter(pl.col("visible")).group_by("gx").agg(_nv=pl.len()).collect()
        cross = (
            with_header.join(joined, on="session", how="semi")
            .select("gx", "pos", "session", "incident", "last_event_id")
            .join(
                deliveries.rename({"session": "d_session"})
                .join(x.select(pl.col("gx").alias("by_id_gx"), "incident"), on="by_id_gx")
                .join(views_of.rename({"gx": "by_id_gx"}), on="by_id_gx")
                .join(nvis.rename({"gx": "by_id_gx"}), on="by_id_gx", how="left"),
                on=["incident", "last_event_id"],
                how="inner",
            )
            .filter((pl.col("d_session") != pl.col("session")) & (pl.col("by_id_pos") < pl.col("pos")))
            .with_columns(nearness=-pl.col("_nv").fill_null(0).cast(pl.Int64))
            .group_by("gx")
            .agg(pl.col("by_id_gx").sort_by(["unfinished", "x_pos", "nearness", "by_id_pos"]).last())
        )
    by_id = (
        own.join(cross.rename({"by_id_gx": "cross_gx"}), on="gx", how="full", coalesce=True)
        .select("gx", pl.coalesce("by_id_gx", "cross_gx").alias("by_id_gx"))
    )
    sse_prev = (
        x.filter((pl.col("content_type") == SSE) & pl.col("status").is_between(200, 299))
        .select("session", pl.col("pos").alias("prev_pos"), pl.col("gx").alias("prev_gx"), pl.col("method").alias("prev_method"))
        .sort("prev_pos")
    )
    get_reopen = (pl.col("method") == "GET") & pl.col("last_event_id").is_null() & (pl.col("session_id") != "")
    candidates = x.filter(pl.col("last_event_id").is_not_null() | get_reopen).sort("pos")
    prev_any = candidates.select("gx", "pos", "session").join_asof(
        sse_prev.select("session", "prev_pos", "prev_gx"), left_on="pos", right_on="prev_pos", by="session",
        strategy="backward", allow_exact_matches=False, check_sortedness=False,
    )
    prev_get = candidates.select("gx", "pos", "session").join_asof(
        sse_prev.filter(pl.col("prev_method") == "GET").select("session", pl.col("prev_pos").alias("g_pos"), pl.col("prev_gx").alias("get_gx")),
        left_on="pos", right_on="g_pos", by="session", strategy="backward", allow_exact_matches=False, check_sortedness=False,
    )
    links = (
        candidates.select("gx", "last_event_id", "method")
        .join(by_id, on="gx", how="left")
        .join(prev_any.select("gx", "prev_gx"), on="gx", how="left")
        .join(prev_get.select("gx", "get_gx"), on="gx", how="left")
        .with_columns(
            has_header=pl.col("last_event_id").is_not_null(),
            id_found=pl.col("by_id_gx").is_not_null(),
        )
        # a GET without Last-Event-ID is a boundary only when it reopens an earlier GET stream
        .filter(pl.col("has_header") | pl.col("get_gx").is_not_null())
        .with_columns(
            resumed_gx=pl.when(pl.col("has_header"))
            .then(pl.coalesce("by_id_gx", "prev_gx"))
            .otherwise(pl.col("get_gx"))
        )
        .select("gx", "resumed_gx", "id_found")
    )
    return links


def _finished(msgs: pl.DataFrame) -> pl.DataFrame:
    """Exchanges whose every request was answered on the exchange itself (nothing left to resume)."""
    # (lazy, the four columns first: an eager filter copied every column of the messages it kept)
    m = msgs.lazy().select("gx", "rpc_id", "direction", "kind")
    reqs = m.filter((pl.col("direction") == "client_to_server") & (pl.col("kind") == "request") & pl.col("rpc_id").is_not_null())
    answers = m.filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]))
    return (
        reqs.select("gx", "rpc_id")
        .join(answers.select("gx", "rpc_id", pl.lit(True).alias("ok")).unique(), on=["gx", "rpc_id"], how="left")
        .group_by("gx")
        .agg(finished=pl.col("ok").fill_null(False).all())
        .collect()
    )


def _streams(x: pl.DataFrame, links: pl.DataFrame) -> pl.Series:
    """``stream`` of each exchange, indexed by ``pos``: the position of its resumption chain's first
    connection.  A boundary resumes an earlier connection (``resumed_gx`` comes before it in ``pos``),
    so a chain's first connection is its least position: the connected components of the resumption
    links, labelled with their least node (:mod:`analyzer.signals.components`), nodes being positions."""
    pos_of = x.select(pl.col("pos").sort_by("gx")).to_series()  # gx and pos both number the exchanges 0..n-1
    edges = links.filter(pl.col("resumed_gx").is_not_null())
    return components.least_node(x.height, pos_of.gather(edges.get_column("gx")), pos_of.gather(edges.get_column("resumed_gx")))


def _polars(table) -> pl.DataFrame:
    """A canonical table as Polars: an Arrow table is converted, a Polars frame taken as it is."""
    return table if isinstance(table, pl.DataFrame) else pl.from_arrow(table)


def compact_digest(events: pl.DataFrame) -> pl.DataFrame:
    """The events with ``digest`` as the first 64 bits of the sha256 (UInt64, 8 bytes a row) instead of
    its 64-character hex (80 bytes a row with its view): what the rules compare.  Two different events
    of the same id share those bits with odds of 2**-64.  The document shows them as 16 hex digits,
    the hex's own first 16."""
    events = _polars(events)
    if events.schema["digest"] == pl.UInt64:
        return events
    return events.with_columns(compact_digest_expr(pl.col("digest")))


def owned_events(tables: dict) -> pl.DataFrame:
    """The events table, taken out of ``tables`` (the single pass hands it over), made ready for
    :func:`build`: digests compacted, and one chunk per column.  A frame of several chunks (several
    inputs, or the pieces a lazy plan's parallel run gives) would otherwise be rechunked inside ``build``
    when the first column is added -- a copy of every column made beside the frames' own new columns.
    Here it is rechunked one column at a time, each old column let go as soon as its copy is made:
    the table is held once and one column twice (2M tiny events: +30 MiB, not +250 MiB), and a column
    already in one chunk is not copied at all."""
    held = [compact_digest(tables.pop("events"))]
    return one_chunk(held, dict(held[0].schema))


def _by_gx(x: pl.DataFrame, *names: str) -> list[pl.Expr]:
    """Columns of the exchanges, one value per event, gathered by the event's ``gx`` (gx numbers the
    exchanges 0..n-1): new columns beside the events' own, where a join would copy every column."""
    at = x.sort("gx")
    assert at.is_empty() or at.item(-1, "gx") == at.height - 1, "gx numbers the exchanges 0..n-1"
    return [pl.lit(at.get_column(n)).gather(pl.col("gx")).alias(n) for n in names]


def _event_gx(ev: pl.DataFrame, x: pl.DataFrame) -> pl.Series:
    """The ``gx`` of every event: its exchange's (source, xid), looked up as one integer.

    An input's events are one run of rows (or a few), so the source is coded per run of equal values,
    not per event, and (source code, xid) becomes one Int64 key.  (The join on the source string and
    xid hashed the path of every event: 2M events, +240 MiB.)  Where an xid is outside 0..2^32 (a store
    written by hand, say) the two columns are joined as they are."""
    xids = ev.get_column("xid")

    def in_range(s: pl.Series) -> bool:
        return s.null_count() == 0 and (s.is_empty() or (0 <= s.min() and s.max() < 2**32))

    if not (in_range(xids) and in_range(x.get_column("xid")) and x.get_column("source").null_count() == 0):
        return ev.select("source", "xid").join(x.select("source", "xid", "gx"), on=["source", "xid"], how="left",
                                               maintain_order="left").get_column("gx")
    got = _gathered_gx(ev, x)
    if got is not None:
        return got
    codes = x.select("source").unique().sort("source").with_row_index("code").with_columns(pl.col("code").cast(pl.Int64))
    runs = (
        ev.select(pl.col("source").rle().alias("r"))
        .unnest("r")
        .join(codes, left_on="value", right_on="source", how="left", maintain_order="left")
        .select(pl.col("code").fill_null(-1).repeat_by("len").explode())
    )
    key = (runs.get_column("code") * 2**32 + xids).alias("_k")
    wanted = x.join(codes, on="source").select((pl.col("code") * 2**32 + pl.col("xid")).alias("_k"), "gx")
    return key.to_frame().join(wanted, on="_k", how="left", maintain_order="left").get_column("gx")


MAX_RUNS = 256  # runs of one source in the events (one per input, read in one pass) above which the join serves


def _gathered_gx(ev: pl.DataFrame, x: pl.DataFrame) -> pl.Series | None:
    """The ``gx`` of every event taken by position from a table of every source's xids (the xids of one
    input are 0..n-1: a block of n slots per source), one run of a source at a time: a gather of the xid
    column itself where the run's block starts at 0 (one input), no key made per event and no join
    (2M events: +16 MiB, against +62 MiB for the key join).  None when the xids are too sparse for such a
    table, or the sources come in too many runs: the caller joins instead."""
    runs = ev.select(pl.col("source").rle().alias("r")).unnest("r")
    if runs.height > MAX_RUNS:
        return None
    # (source, first row, rows) of each run
    runs = runs.select("value", start=pl.col("len").cum_sum() - pl.col("len"), n="len").rows()
    xids = ev.get_column("xid")
    top: dict[str, int] = dict(x.group_by("source").agg(pl.col("xid").max()).iter_rows())
    for source, start, n in runs:
        if source in top:
            top[source] = max(top[source], xids.slice(start, n).max())
    offset, at = 0, {}
    for source in sorted(top):
        at[source] = offset
        offset += top[source] + 1
    if offset > 4 * (x.height + 1024):  # sparse xids (a store written by hand): a table mostly empty
        return None
    table = pl.repeat(None, offset, dtype=pl.Int64, eager=True).alias("gx")
    if x.height:
        slots = x.select(pl.col("source").replace_strict(at, return_dtype=pl.Int64) + pl.col("xid")).to_series()
        table.scatter(slots, x.get_column("gx").cast(pl.Int64))
    parts = []
    for source, start, n in runs:
        if source not in at:  # events of an input whose exchanges are not in the table (narrowed away)
            parts.append(pl.repeat(None, n, dtype=pl.Int64, eager=True))
            continue
        ids = xids.slice(start, n)
        parts.append(table.gather(ids if at[source] == 0 else ids + at[source]))
    if not parts:
        return pl.Series("gx", [], dtype=pl.Int64)
    return (parts[0] if len(parts) == 1 else pl.concat(parts, rechunk=True)).alias("gx")


# the messages' coded columns (analyzer/tables.py MESSAGES): every value they take
MESSAGE_CODES = {"origin": ("request_body", "response_body", "sse"), "direction": ("client_to_server", "server_to_client"),
                 "kind": ("request", "notification", "response", "error")}


def _message_frame(tables: dict, consume: bool) -> pl.DataFrame:
    """The canonical messages as Polars, :data:`MESSAGE_CODES`' columns as Enums (``consume``: taken out of ``tables``)."""
    held = [tables["messages"]]
    if consume:
        tables["messages"] = None
    table, columns = held.pop(), []
    if isinstance(table, pl.DataFrame):  # (the single pass's messages: tables.Ingested)
        return table.with_columns(pl.col(name).cast(pl.Enum(codes)) for name, codes in MESSAGE_CODES.items())
    for name in table.column_names:
        columns.append((_coded(table.column(name), MESSAGE_CODES[name]) if name in MESSAGE_CODES else pl.from_arrow(table.column(name))).alias(name))
        if consume:
            table = table.drop_columns([name])
    return pl.DataFrame(columns)


def _coded(column, codes: tuple[str, ...]) -> pl.Series:
    """An Arrow string column of ``codes``' values as a Polars Enum of them: each value's code found by Arrow
    (``index_in``) and the Enum's values gathered by it, not the million strings made Polars strings and cast (1M
    messages: 0.02 -> 0.01 s a column).  A value not among the codes fails as the cast fails."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):  # (any other type: as it was)
        return pl.from_arrow(column).cast(pl.Enum(codes))
    at = pl.from_arrow(pc.index_in(column, value_set=pa.array(codes, column.type)))
    if at.null_count() != column.null_count:  # (a value not among the codes: the strict cast says which)
        return pl.from_arrow(column).cast(pl.Enum(codes))
    return pl.Series(codes, dtype=pl.Enum(codes)).gather(at)


def build(tables: dict, consume: bool = False) -> tuple[Frames, pl.DataFrame]:
    """Frames with sessions and streams, and the links table (one row per boundary).

    ``consume``: the caller hands the tables over: the canonical exchanges and messages are let go (None in
    ``tables``) as soon as their Polars copies exist, not held beside the frames while these are built.

    The events table is the largest by far (a million rows and more); it is never joined or copied
    whole here: each event's exchange (``gx``) comes from a join of two narrow key columns, what the
    event needs of its exchange is gathered by gx, and the one sort into history order is skipped
    when the events already are in it (one input whose exchanges start in their own order)."""
    x = pl.from_arrow(tables["exchanges"])
    if consume:
        tables["exchanges"] = None
    x = _ordered_exchanges(x)
    base = compact_digest(tables["events"])
    ev = base.with_columns(_event_gx(base, x))
    del base
    if ev.get_column("gx").null_count():  # events of exchanges that are not in the table (narrowed away)
        ev = ev.filter(pl.col("gx").is_not_null())
    ev = ev.with_columns(
        *_by_gx(x, "pos", "view", "session", "session_id", "sk"),
        visible=pl.col("fate") != "cut_off",
        has_id=pl.col("id").is_not_null() & (pl.col("id") != ""),
        # the id as one integer (64 bits of its hash, made once here): the rules that look an event's id up among
        # millions join on it, not on the strings (two ids of one stream share it with odds of 2**-64, as digests do)
        idh=id_hash(pl.col("id")),
    )
    ordered = ev.select(
        ((pl.col("pos").diff() > 0) | ((pl.col("pos").diff() == 0) & (pl.col("ordinal").diff() > 0))).fill_null(True).all()
    ).item()
    if not ordered:
        ev = ev.sort(["pos", "ordinal"])
    # (flagged so: a grouping by pos, one connection's run of rows, takes Polars' sorted path, not a hash table)
    ev = ev.with_columns(pl.col("pos").set_sorted())
    # the three coded columns as Enums (1 byte a message, not a 16-byte view; 1M messages: 34 -> 3 MiB, and every
    # copy the rules make of them), converted from Arrow one column at a time, each Arrow column let go as it goes
    msgs = _message_frame(tables, consume)
    # each message's exchange looked up as the events' are (not a join on the source path and xid: 1M messages,
    # +300 MiB), and what it needs of it gathered by gx; a message of no exchange in the table is left out
    msgs = msgs.with_columns(_event_gx(msgs, x))
    if msgs.get_column("gx").null_count():
        msgs = msgs.filter(pl.col("gx").is_not_null())
    # (its source too: the same value, now a view of the exchanges' own column, not a copy of the path per message
    # converted from Arrow: 1M messages, 105 -> 15 MiB)
    msgs = msgs.with_columns(*_by_gx(x, "source", "pos", "view", "session", "session_id", "sk"))
    x = attach(x, _finished(msgs), "gx").with_columns(pl.col("finished").fill_null(False))
    x = views.fingerprint(x)
    x = attach(x, views.incidents(x), "session")
    links = _resume_links(x, ev.select("gx", "pos", "session", "sk", "id", "idh", "visible", "has_id"))
    x = x.with_columns(stream=pl.lit(_streams(x, links)).gather(pl.col("pos")))

    visible, ids = pl.col("visible"), pl.col("id")
    # (by pos, which numbers the connections as gx does and runs in the events' order: 1M events, 0.09 -> 0.04 s)
    per_x = ev.group_by("pos").agg(
        pl.col("gx").first(),
        n_events=pl.len(),
        n_visible=visible.sum(),
        first_id=ids.filter(visible & pl.col("has_id")).first(),
        last_id=ids.filter(visible & pl.col("has_id")).last(),
        # the client's last-event-ID buffer after the last visible event: the last id field up to it (the
        # buffer persists from block to block), taken from the ids, so a table without the cursor column
        # serves too.  Cut-off events come last on a connection (the stream ended inside them), and then
        # the events up to the last visible one are the visible ones ...
        last_id_field=ids.filter(visible).last(ignore_nulls=True),
        _cut_inside=(~visible & visible.shift(-1)).any(),
        n_cut_off=(~visible).sum(),
        sent_retry=pl.col("retry").is_not_null().any(),
    )
    if per_x.get_column("_cut_inside").any():
        # ... unless a log marked an event truncated in the middle of a stream: there, up to the last visible
        # event by its ordinal (a comparison in every row of the group: 2M events, +39 MiB; only these connections)
        o = pl.col("ordinal")
        exact = (
            ev.lazy().join(per_x.lazy().filter("_cut_inside").select("gx"), on="gx", how="semi")
            .group_by("gx").agg(last_id_field=ids.filter(ids.is_not_null() & (o <= o.filter(visible).max())).last())
            .collect()
        )
        per_x = per_x.update(exact, on="gx", include_nulls=True)
    per_x = per_x.drop("pos", "_cut_inside")
    x = (
        attach(x, per_x, "gx")
        .with_columns(
            pl.col("n_events", "n_visible", "n_cut_off").fill_null(0),
            pl.col("sent_retry").fill_null(False),
            # what the client had processed when this connection ended; unknown when the body was not recorded
            pl.when(pl.col("body_recorded"))
            .then(pl.when(pl.col("n_visible") > 0)
                  .then(pl.coalesce(pl.col("last_id_field"), pl.col("last_event_id"), pl.lit("")))
                  .otherwise(pl.col("last_event_id")))
            .alias("last_cursor"),
        )
        .drop("last_id_field")
        .pipe(in_order, ["pos"])
    )
    # the rules read the exchange as gx, the cursor as its last_cursor and a retry field as its sent_retry:
    # the single pass's read never made a cursor; a store's events lose three columns here
    ev = ev.drop("xid", "cursor", "retry", strict=False).with_columns(_by_gx(x, "stream"))
    # (grouped by the session's integer sk, not its string)
    schemes = idschemes.classify(ev.select(pl.col("sk").alias("session"), "stream", "id", "has_id")).rename({"session": "sk"})
    x = attach(x, schemes, "sk").with_columns(pl.col("id_scheme").fill_null("none"))
    ev = ev.with_columns(_by_gx(x.with_columns(pl.col("id_scheme").cast(pl.Enum(idschemes.SCHEMES))), "id_scheme"))
    # each scheme's readings made over its own events only
    ev = ev.with_columns(idschemes.readings(ev.get_column("id"), ev.get_column("id_scheme")))
    return Frames(x, ev, msgs, hidden(tables.get("anomalies"))), links


def session_key(session: pl.Expr) -> pl.Expr:
    """The frames' ``sk``: a session (``view`` + "\\x1f" + ``session_id``) as its dense rank among the sessions,
    made once over the exchanges and gathered onto the events and messages.  Two sessions never share it (a rank,
    not a hash); it is the sessions' order by their strings, so it changes with the set of sessions and is never
    shown or stored: a join or a grouping on it is one on the strings (1M events: a string semi-join 0.3-0.65 s,
    the same on integers 0.01-0.2 s)."""
    return session.rank("dense").cast(pl.UInt32)


MIX = 0x9E3779B97F4A7C15  # 2**64 / the golden ratio, odd: a multiplication by it spreads the stream's bits over all 64


def keyed_id(owner: pl.Expr, idh: pl.Expr) -> pl.Expr:
    """(owner, id) as one UInt64, the owner an integer (a stream, a session's ``sk``): ``idh`` (the id's hash) xor the
    owner times :data:`MIX`.  A join on it is a join on one column, not on two (Polars encodes a key of two columns row
    by row: twice the time at 1M events).  Two pairs share it only when their ids' hashes differ by exactly their
    owners' mix: odds of 2**-64 a pair, as ``idh``."""
    return (idh ^ (owner.cast(pl.UInt64) * pl.lit(MIX, dtype=pl.UInt64))).alias("k")


def id_hash(ids: pl.Expr) -> pl.Expr:
    """An event id as an integer key (the events' ``idh``): a Last-Event-ID's hashed the same way finds its events."""
    return ids.hash(seed=0x1D)


def packet_no(location: pl.Expr) -> pl.Expr:
    """The packet number of a pcap record's location (``packet 29``), null for other formats."""
    return location.str.extract(r"^packet ([0-9]{1,18})", 1).cast(pl.Int64)
