"""History across captures: several inputs of one incident seen together.

A client HAR, a proxy log on the load balancer and a capture on a server host
each hold their own *view* of the same HTTP exchanges.  Clocks of different
hosts disagree, so views are matched by what the exchange *is*, never by time:
the session id, the method, the ``Last-Event-ID`` it sent, the request body,
and how many such requests came before it in the same input (its fingerprint).

What the other views add at a boundary:

- events the server emitted on the resumed connection after the client's
  cursor that never reached the client (a server-side capture saw them; or the
  client's own capture shows them cut off by the disconnect), and that no later
  connection of the stream delivered — with the same id and digest: the "gap
  with continuous ids" signature is exactly an old event whose id was reused
  for a new one (same id, other digest);
- for opaque ids, which event came right after the cursor: when the reconnect
  starts with it, continuity is proven.

Each view judges the reconnect from where it stood; the boundary reported is
the view nearest the client (its resumed connection delivered the fewest
events), with every other view named as evidence.

Captures need not all hold the same exchanges: a browser HAR may share only a
POST with one balancer node's log, which shares the old GET with a server's
log.  Sessions of different inputs that share an exchange form one *incident*
(transitively, ``incidents``); a resume whose own capture never saw its
``Last-Event-ID`` delivered finds the resumed connection in another capture of
its incident (streams.py), and that connection's other views come in here.
"""
from __future__ import annotations

from datetime import timedelta

import polars as pl

from analyzer.signals import components
from analyzer.signals.frames import Frames
from analyzer.formatted import formatted

LIST_CAP = 1000
HOP_WINDOW = timedelta(seconds=2)  # a proxy forwards a request within this of receiving it


def _base() -> pl.Expr:
    """What an exchange *is*, whoever saw it: session id, method, Last-Event-ID, request body."""
    return pl.concat_str(
        [pl.col("session_id"), pl.col("method").fill_null(""), pl.col("last_event_id").fill_null("\x00"), pl.col("request_body").fill_null("")],
        separator="\x1f",
    ).hash()


def hops(x: pl.DataFrame) -> pl.DataFrame:
    """``view``: the input, or one hop of it when one capture holds the same exchanges on several hops.

    ``tcpdump -i any`` on a host that runs nginx/envoy/a sidecar in front of the server
    records every exchange twice: client -> proxy and proxy -> upstream, with their own
    TCP connections, keep-alive and Content-Encoding.  Analyzed as one history, each copy
    looks like a second delivery (cross-stream replays, duplicate responses, extra
    reconnects).  A capture is split into hops by the server endpoint of each connection
    (pcap ``conn`` is ``client->server#n``) when some exchange of a session appears on two
    endpoints; each hop is then a view like a separate capture, matched to the others by
    content (``fingerprint``), and each reconnect is judged once, from the hop nearest the
    client (``dedupe``).  Captures with one server endpoint, HAR and JSONL keep one view.
    """
    endpoint = pl.col("conn").str.extract(r"->([^#]*)#", 1)
    hx = x.with_columns(_ep=endpoint, _fpb=_base())
    # A proxy forwards at once: the two copies of one exchange start within HOP_WINDOW of each
    # other.  Neighbours in time order suffice (linear, unlike a self-join on a session's many
    # alike GETs); a client that merely reached one server by two addresses at other times is
    # not taken for a proxy.
    multi = (
        hx.filter((pl.col("session_id") != "") & pl.col("_ep").is_not_null() & pl.col("started").is_not_null())
        .sort("source", "_fpb", "started")
        .with_columns(
            _prev_ep=pl.col("_ep").shift(1).over("source", "_fpb"),
            _gap=(pl.col("started") - pl.col("started").shift(1).over("source", "_fpb")),
        )
        .filter((pl.col("_prev_ep") != pl.col("_ep")) & (pl.col("_gap") <= HOP_WINDOW))
        .select("source")
        .unique()
        .with_columns(_multi=pl.lit(True))
    )
    return (
        hx.join(multi, on="source", how="left")
        .with_columns(
            view=pl.when(pl.col("_multi").fill_null(False) & pl.col("_ep").is_not_null())
            .then(formatted("{} (hop to {})", pl.col("source"), pl.col("_ep")))
            .otherwise(pl.col("source"))
        )
        .drop("_ep", "_fpb", "_multi")
    )


def fingerprint(x: pl.DataFrame) -> pl.DataFrame:
    """``fp``: the same HTTP exchange in two views gets the same value (sessionless traffic never matches)."""
    from analyzer.signals.frames import in_order

    return (
        in_order(x, ["pos"])  # (the exchanges come in that order: no copy of them)
        .with_columns(_fpb=_base())
        .with_columns(_k=pl.int_range(pl.len()).over(["view", "_fpb"]))
        .with_columns(fp=pl.when(pl.col("session_id") != "").then(formatted("{}#{}", pl.col("_fpb"), pl.col("_k"))))
        .drop("_fpb", "_k")
    )


def incidents(x: pl.DataFrame) -> pl.DataFrame:
    """``incident`` per session: the per-input sessions that share an exchange (a fingerprint), transitively.

    A client HAR and a balancer log share a POST; the balancer log and a server log share
    the old GET: the three are one incident even though the client's capture and the
    server's share nothing.  Connected components over (input, session) pairs
    (:mod:`analyzer.signals.components`), labelled with their least session: every session
    of a fingerprint is tied to the fingerprint's least session.  Without a shared exchange
    (fingerprints include the session id), the same Mcp-Session-Id in two inputs stays two
    incidents.
    """
    fps = x.filter(pl.col("fp").is_not_null()).select("session", "fp").unique()
    edges = (
        fps.filter(pl.col("fp").is_duplicated())  # (a window over every fingerprint costs more than this look for shared ones)
        .with_columns(other=pl.col("session").min().over("fp"))
        .filter(pl.col("session") != pl.col("other"))
    )
    return components.labels(x.get_column("session"), edges.get_column("session"), edges.get_column("other"), "incident")


def _lost_summary(rows: pl.DataFrame, key: str) -> pl.DataFrame:
    """The lost events of each ``key`` (one row per id and digest, with ``new_digest``: the reconnect's own event of
    that id, if any) as the boundary's ``hist_*`` facts."""
    return (
        rows.sort(key, "ordinal")
        .group_by(key)
        .agg(
            hist_lost_ids=pl.col("id").head(LIST_CAP),
            hist_lost_count=pl.len(),
            hist_reused=(pl.col("new_digest").is_not_null() & (pl.col("new_digest") != pl.col("digest"))).sum(),
            hist_sources=pl.col("e_source").unique().sort(),
            # every lost event was seen leaving this capture point after the client's cursor
            hist_passed=(pl.col("e_kind") == "passed").all(),
            hist_refs=pl.struct(pl.col("e_file").alias("source"), pl.col("e_location").alias("location")).head(4),
        )
    )


def boundary_history(f: Frames, b: pl.DataFrame, after: pl.DataFrame, d: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per boundary: events history proves were emitted after the cursor and never delivered,
    and whether another view proves the reconnect's first event is the cursor's successor.

    Many reconnects may resume one connection (a client retrying from the same Last-Event-ID, each retry answered
    by nothing): what the views emitted after the cursor is found once per resumed connection and cursor (``rk``),
    and which of those events were lost once per class of reconnects that saw the same later deliveries (``cl``);
    a reconnect joins its class's summary.  Joining each reconnect with the events its resumed connection emitted
    after the cursor was quadratic (2,000 retries of one 2,000-event connection: 4M rows).  ``d``: the events the
    client saw with an id (boundaries.deliveries), when made."""
    x = f.exchanges.select("gx", "fp", pl.col("view").alias("source"))
    keys = b.select("gx", "resumed_gx", "cursor_str", "stream", pl.col("pos").alias("b_pos"))
    rks = keys.select("resumed_gx", "cursor_str").unique(maintain_order=True).with_row_index("rk")
    keys = keys.join(rks, on=["resumed_gx", "cursor_str"], how="left", nulls_equal=True, maintain_order="left")
    # the resumed connection as other inputs saw it, plus this input's own cut-off events
    rviews = (
        rks.join(x.select(pl.col("gx").alias("resumed_gx"), pl.col("fp").alias("rfp")), on="resumed_gx")
        .join(x.select(pl.col("gx").alias("v_gx"), pl.col("fp").alias("rfp"), pl.col("source").alias("v_source")), on="rfp")
        .filter(pl.col("rfp").is_not_null() & (pl.col("v_gx") != pl.col("resumed_gx")))
        .select("rk", "v_gx", "v_source", "cursor_str")
    )
    view_ev = f.pick(pl.col("has_id"), pl.col("gx").alias("v_gx"), "ordinal", "id", "digest", "fate", pl.col("location").alias("v_location"),
                     pl.col("source").alias("v_file"), among=rviews.select(pl.col("v_gx").alias("gx")))
    at_cursor = (
        rviews.join(view_ev, on="v_gx")
        .filter(pl.col("id") == pl.col("cursor_str"))
        .group_by("rk", "v_gx")
        .agg(c_ord=pl.col("ordinal").max())
    )
    emitted_other = (
        rviews.join(at_cursor, on=["rk", "v_gx"])
        .join(view_ev, on="v_gx")
        .filter(pl.col("ordinal") > pl.col("c_ord"))
        .select("rk", "ordinal", "id", "digest", "fate", pl.col("v_source").alias("e_source"), pl.col("v_location").alias("e_location"),
                pl.col("v_file").alias("e_file"))
    )
    # (the resumed connections' events found by an integer set look-up of their gx, not a semi-join: 0.085 -> 0.03 s
    # at 1M events)
    own_ev = f.pick(pl.col("has_id") & pl.col("gx").is_in(rks.get_column("resumed_gx").drop_nulls().unique().implode()),
                    pl.col("gx").alias("resumed_gx"), "ordinal", "id", "digest", "fate", "visible", "source", "view", "location")
    # (the cursor's own events by a join on the connection and the id, not a join with every event of the connection;
    # the events with a cursor's id alone are joined)
    own_cursor = (
        rks.join(own_ev.lazy().filter(pl.col("id").is_in(rks.get_column("cursor_str").drop_nulls().unique().implode()))
                 .select("resumed_gx", "ordinal", cursor_str="id").collect(), on=["resumed_gx", "cursor_str"])
        .group_by("rk")
        .agg(own_c_ord=pl.col("ordinal").max())
    )
    # This capture's own view of the resumed connection: events cut off by the disconnect, and
    # events that left the capture point after the client's Last-Event-ID (the client's claim
    # says they never arrived: lost between the capture point and the client, unless replayed).
    # The rows are found on three integer columns and their row numbers, and only those rows' strings are
    # gathered (joined with all their columns, every event of the resumed connections was copied: 758k at 1M events)
    rows = (
        rks.select("rk", "resumed_gx").join(own_cursor, on="rk", how="left")
        .join(own_ev.select("resumed_gx", "ordinal", "visible").with_row_index("_i"), on="resumed_gx")
        .filter(~pl.col("visible") | (pl.col("ordinal") > pl.col("own_c_ord")).fill_null(False))
        .select("rk", "_i")
    )
    emitted_own = (
        own_ev[rows.get_column("_i")].with_columns(rows.get_column("rk"))
        .select(
            "rk", "ordinal", "id", "digest", "fate", pl.col("view").alias("e_source"), pl.col("location").alias("e_location"),
            pl.col("source").alias("e_file"), e_kind=pl.when(pl.col("visible")).then(pl.lit("passed")).otherwise(pl.lit("cut_off")),
        )
    )
    emitted_other = emitted_other.with_columns(e_kind=pl.lit("other"))
    emitted = pl.concat([emitted_other, emitted_own])
    # delivered: on the reconnect or any later connection of the same stream, in this input.  Only the ids
    # some view emitted matter (``lost`` below is emitted minus delivered): a stream resumed k times would
    # otherwise be joined k times with all its later events.  Each (id, digest)'s last delivery on the stream
    # is enough: delivered at or after the boundary is delivered after it (a join of every boundary of the
    # stream with every delivery would be quadratic in the stream's connections)
    asked = emitted.select("rk", "id").unique().join(keys.select("rk", "stream").unique(), on="rk").select("stream", "id")
    shown = (f.pick(pl.col("has_id") & pl.col("visible"), pl.col("stream"), pl.col("pos").alias("d_pos"), "id", "digest", among=asked) if d is None
             else d.lazy().join(asked.lazy().unique(), on=["stream", "id"], how="semi").select("stream", pl.col("pos").alias("d_pos"), "id", "digest").collect())
    last = (
        shown.group_by("stream", "id", "digest")
        .agg(d_pos=pl.col("d_pos").max())
    )
    last_of_id = last.group_by("stream", "id").agg(pl.col("d_pos").max())
    # Reconnects of one ``rk`` and stream with no such delivery between them lose the same events: ``bucket``, the
    # last of those deliveries before the boundary, names the class (``cl``) whose lost events are found once.
    dels = last.select("stream", "d_pos").unique().sort("d_pos")
    keys = keys.sort("b_pos").join_asof(
        dels, left_on="b_pos", right_on="d_pos", by="stream", strategy="backward", allow_exact_matches=False, check_sortedness=False
    ).rename({"d_pos": "bucket"})
    classes = keys.group_by("rk", "stream", "bucket").agg(pl.col("b_pos").min()).with_row_index("cl")
    keys = keys.join(classes.select("rk", "stream", "bucket", "cl"), on=["rk", "stream", "bucket"], how="left", nulls_equal=True)
    emitted = emitted.join(classes.select("cl", "rk", "stream", "b_pos"), on="rk")
    reused = after.select("gx", "id", pl.col("digest").alias("new_digest"))
    # a cut-off event holds only part of its data, so its digest never matches the full
    # event: it was delivered if its id was
    undelivered = pl.col("d_pos").is_null() | (pl.col("d_pos") < pl.col("b_pos"))
    lost_rows = (
        pl.concat(
            [
                emitted.filter(pl.col("fate") != "cut_off").join(last, on=["stream", "id", "digest"], how="left").filter(undelivered).drop("d_pos"),
                emitted.filter(pl.col("fate") == "cut_off").join(last_of_id, on=["stream", "id"], how="left").filter(undelivered).drop("d_pos"),
            ]
        )
        .drop("rk", "stream", "b_pos")
        # joins keep no order: the kept row (which view showed it) must not depend on threads
        .sort(["cl", "id", "digest", "e_kind", "e_source", "ordinal"])
        .unique(["cl", "id", "digest"], keep="first", maintain_order=True)
    )
    # a reconnect whose own events reuse a lost id gets its own rows (a join with its events); the others share
    # their class's summary
    own = reused.filter(pl.col("id").is_in(lost_rows.get_column("id").unique().implode())).join(keys.select("gx", "cl"), on="gx").join(lost_rows.select("cl", "id").unique(), on=["cl", "id"], how="semi").select("gx").unique()
    lost = pl.concat(
        [
            # (their own events alone looked up by id: not all the reconnects' events)
            _lost_summary(own.join(keys.select("gx", "cl"), on="gx").join(lost_rows, on="cl").drop("cl")
                          .join(reused.join(own, on="gx", how="semi"), on=["gx", "id"], how="left"), "gx"),
            keys.select("gx", "cl").join(own, on="gx", how="anti")
            .join(_lost_summary(lost_rows.with_columns(new_digest=pl.lit(None, dtype=lost_rows.schema["digest"])), "cl"), on="cl")
            .drop("cl"),
        ]
    )
    # (each boundary's events are one run in stream order (boundaries.after_events): its first row is its first event)
    first_after = after.lazy().filter(~pl.col("overlap")).filter(pl.col("gx").is_first_distinct()).select(
        "gx", f_id="id", f_digest="digest").collect()
    successor = (
        pl.concat([emitted_other, emitted_own.filter(pl.col("e_kind") == "passed")])
        .sort("rk", "ordinal")
        .group_by("rk", "e_source")
        .agg(s_id=pl.col("id").first(), s_digest=pl.col("digest").first())
        .join(keys.select("gx", "rk"), on="rk")
        .join(first_after, on="gx")
        .filter((pl.col("s_id") == pl.col("f_id")) & (pl.col("s_digest") == pl.col("f_digest")))
        .group_by("gx")
        .agg(successor_source=pl.col("e_source").sort().first())
    )
    return b.select("gx").join(lost, on="gx", how="left").join(successor, on="gx", how="left")
