"""Boundaries and history checks become the findings document (schemas/findings.schema.json).

This is the edge where frames turn into plain JSON values: collect once here,
never inside a rule.
"""
from __future__ import annotations

import json
import re
from concurrent.futures import ThreadPoolExecutor

import polars as pl

from analyzer.rules import registry
from analyzer.document import names
from analyzer.document.finding_rows import FindingRecords, identify
from analyzer.document.records import Records
from analyzer.signals import clients, rpc, streams
from analyzer.signals.streams import Frames
from analyzer.tables import digest_expr
from analyzer.catalog import VERDICT_ORDER
from analyzer.formatted import formatted

EVIDENCE_EVENTS = 3
DATA_PREVIEW = 400
TS_FMT = "%Y-%m-%dT%H:%M:%S%.6fZ"


def _iso(col: str) -> pl.Expr:
    return pl.col(col).dt.to_string(TS_FMT)


PREVIEW_COLUMNS = ("gx", "ordinal", "id", "event", "data", "digest", "fate", "ts", "source", "location")


def _event_preview(events: pl.LazyFrame) -> pl.LazyFrame:
    return events.select(
        "gx",
        "ordinal",
        pl.struct(
            "id",
            "event",
            pl.when(pl.col("data").str.len_chars() > DATA_PREVIEW)
            .then(pl.col("data").str.slice(0, DATA_PREVIEW) + "…")
            .otherwise(pl.col("data"))
            .alias("data"),
            # the digest of what the document shows (the redacted data), not of the raw data: a sha256 of a 6-digit OTP
            # or a PIN printed beside its redacted text gave it back in a second of brute force
            digest_expr(pl.col("id"), pl.col("data")).str.slice(0, 16).alias("digest"),
            "fate",
            _iso("ts").alias("ts"),
            "source",
            "location",
        ).alias("ev"),
    )


EVENT_TIMES = 40  # event times listed per connection (and per cut-off part): the report's ticks per bar


def _event_offsets(f: Frames) -> pl.DataFrame:
    """Per-event times for the report's timelines (capped; null where the capture keeps no time per
    event, as in HAR): the events the client saw, and those the disconnect cut off.  Per connection and
    part, the times of at most ``EVENT_TIMES`` of its n events, spread evenly over them in order: the
    first of each of EVENT_TIMES equal runs, which is event ``ceil(j * n / EVENT_TIMES)`` of the part
    for j = 0, 1, ... (every event when n <= EVENT_TIMES), as milliseconds since the request started.

    A connection's events are one run of rows in stream order (Frames); its two parts are runs of rows
    too (one each, unless cut-off and seen events alternate).  The work is done on those runs, a few
    rows per connection: the sampled events are found by their place in their part and only their times
    are read.  (Per-event windows over all events cost +178 MiB on 2M events.)"""
    # runs of (gx, visible) as they are: no per-event key computed first (gx * 2 + visible: two 64-bit
    # columns, 2M events +30 MiB)
    runs = (
        f.events.lazy()
        .select(pl.struct("gx", "visible").rle().alias("r"))
        .select(pl.col("r").struct.field("len").cast(pl.Int64).alias("len"), pl.col("r").struct.field("value").alias("v"))
        .select("len", part=pl.col("v").struct.field("gx") * 2 + pl.col("v").struct.field("visible").cast(pl.Int64))
        .with_columns(start=pl.col("len").cum_sum() - pl.col("len"))  # the run's first row
        .with_columns(offset=(pl.col("len").cum_sum() - pl.col("len")).over("part"))  # its first row's place in its part
        .collect()
    )
    # the events without a time in each run: differences of the running count of them (none, or every
    # one, as a capture with a time per event or a HAR has, are told without that count)
    ts = f.events["ts"]
    if ts.null_count() in (0, len(ts)):
        runs = runs.with_columns(n_null=pl.col("len") * int(ts.null_count() > 0))
    else:
        before = pl.concat([pl.Series([0], dtype=pl.Int64), ts.is_null().cast(pl.Int64).cum_sum()])
        runs = runs.with_columns(n_null=before.gather(runs["start"] + runs["len"]) - before.gather(runs["start"]))
        del before
    parts = runs.group_by("part").agg(n=pl.col("len").sum(), timed=pl.col("n_null").sum() == 0).filter(pl.col("timed"))
    k = pl.min_horizontal(pl.col("n"), EVENT_TIMES)
    # the sampled events each run holds, j_lo <= j < j_hi: the first j whose event ceil(j * n / k) is at or past the
    # run's first place o in its part is 0 for o = 0, else floor((o - 1) * k / n) + 1 (integers all: none negative);
    # the runs are in row order and a part's runs in the order of their places, so the samples come out in the
    # order of j in each part (no sort of them, and no as-of join to find each one's run)
    def first_j(o: pl.Expr) -> pl.Expr:
        return pl.when(o == 0).then(0).otherwise((o - 1) * k // pl.col("n") + 1)

    # (each run with its request's start: the exchanges without one have no times)
    starts = f.exchanges.select(pl.col("gx").cast(pl.Int64), "started").filter(pl.col("started").is_not_null())
    wanted = (
        runs.join(parts.select("part", "n"), on="part", maintain_order="left")
        .with_columns(gx=pl.col("part") // 2)
        .join(starts, on="gx", maintain_order="left")
        .with_columns(j=pl.int_ranges(first_j(pl.col("offset")), pl.min_horizontal(first_j(pl.col("offset") + pl.col("len")), k)))
        .explode("j")
        .filter(pl.col("j").is_not_null())
        .select("part", "started", row=pl.col("start") + (pl.col("j") * pl.col("n") + k - 1) // k - pl.col("offset"))
    )
    times = (
        # (grouped by the part alone, one integer that names the gx too: by both, 0.03 s more at 1M events)
        wanted.select("part", ms=(f.events["ts"].gather(wanted["row"]) - wanted["started"]).dt.total_milliseconds())
        .group_by("part", maintain_order=True)
        .agg("ms")
        .with_columns(gx=pl.col("part") // 2, visible=(pl.col("part") % 2) == 1)
    )
    return (
        f.exchanges.select("gx")
        .join(times.filter(pl.col("visible")).select("gx", event_offsets_ms="ms"), on="gx", how="left")
        .join(times.filter(~pl.col("visible")).select("gx", cut_off_offsets_ms="ms"), on="gx", how="left")
    )


def _previews(f: Frames, rows: pl.Series) -> pl.DataFrame:
    """The events at ``rows`` as previews, per connection (``gx``, ``ev``: a list in stream order)."""
    kept = f.events.select(PREVIEW_COLUMNS)[rows]
    # in one chunk: the boundaries' joins gather these lists, and a gather of a list of structs in several chunks (as a
    # parallel group-by leaves them) cost ten times the column (60,000 reconnects: +119 MiB for 21 MiB; one chunk +12)
    return _event_preview(kept.lazy()).group_by("gx").agg(pl.col("ev").sort_by("ordinal")).collect().rechunk()


def _evidence_rows(f: Frames, gxs: pl.DataFrame) -> tuple[pl.Series, pl.Series, pl.Series]:
    """The rows of the events each reconnect shows (``gxs``: ``gx``, the reconnect's own connection, and
    ``resumed_gx``): the last EVIDENCE_EVENTS seen events of the resumed connection, all its cut-off events, and
    the first EVIDENCE_EVENTS events of the reconnect's own.  A connection's events are one run of rows in stream
    order (Frames), so those are places in its run, found from the run's start and length and its count of cut-off
    events -- the last k seen events are among its last k + (cut-off events) -- not by joining every event of the
    resumed connections (which may carry most of a capture's events) with the reconnects and ranking them."""
    runs = (
        f.events.select(pl.col("gx").rle().alias("r")).unnest("r")
        .select(gx="value", start=(pl.col("len").cum_sum() - pl.col("len")).cast(pl.Int64), n=pl.col("len").cast(pl.Int64))
    )
    resumed = gxs.select(pl.col("resumed_gx").alias("gx")).unique()
    cut_counts = f.exchanges.select("gx", n_cut=pl.col("n_cut_off").cast(pl.Int64))
    last = (
        runs.join(resumed, on="gx", how="semi").join(cut_counts, on="gx", how="left")
        .select("gx", r=pl.int_ranges(pl.col("start") + pl.col("n") - pl.min_horizontal("n", pl.col("n_cut").fill_null(0) + EVIDENCE_EVENTS),
                                      pl.col("start") + pl.col("n")))
        .explode("r").drop_nulls("r")
    )
    visible = f.events.get_column("visible")
    before = (
        last.filter(visible.gather(last.get_column("r")))
        .filter(pl.col("gx").cum_count(reverse=True).over("gx") <= EVIDENCE_EVENTS)
        .get_column("r")
    )
    cut = (
        f.events.lazy().select(pl.int_range(pl.len(), dtype=pl.Int64).alias("r"), "gx", "visible")
        .filter(~pl.col("visible"))
        .join(resumed.lazy(), on="gx", how="semi")
        .collect()
        .get_column("r")
    )
    after = (
        runs.join(gxs.select("gx").unique(), on="gx", how="semi")
        .select(r=pl.int_ranges(pl.col("start"), pl.col("start") + pl.min_horizontal("n", EVIDENCE_EVENTS)))
        .explode("r").drop_nulls("r")
        .get_column("r")
    )
    return before, cut, after


def _boundary_evidence(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    before_rows, cut_rows, after_rows = _evidence_rows(f, b.select("gx", "resumed_gx"))
    before = _previews(f, before_rows).rename({"gx": "resumed_gx", "ev": "events_before"})
    cut = _previews(f, cut_rows).rename({"gx": "resumed_gx", "ev": "cut_off_before"})
    after = _previews(f, after_rows).rename({"ev": "events_after"})
    x = f.exchanges.select(
        pl.col("gx").alias("resumed_gx"),
        pl.struct(pl.col("source"), pl.col("location")).alias("resumed_ref"),
    )
    # maintain_order: Polars does not promise a join's row order otherwise, and the boundaries are listed in it
    return (
        b.join(before, on="resumed_gx", how="left", maintain_order="left")
        .join(cut, on="resumed_gx", how="left", maintain_order="left")
        .join(after, on="gx", how="left", maintain_order="left")
        .join(x, on="resumed_gx", how="left", maintain_order="left")
    )


_SAME_REQUEST = ("view", "session_id", "method", "last_event_id", "request_body")


def _request_order(x: pl.DataFrame, gxs: pl.DataFrame) -> pl.DataFrame:
    """``gx`` and ``order`` for the requests of ``gxs``: which request of its session with the same method,
    Last-Event-ID and body it is in its capture (0, 1, ...; names.reconnect_identity).  Counted only
    among the requests alike some of ``gxs`` (a reconnect's alikes: a few GETs, not every exchange)."""
    alike = x.select("gx", "pos", *_SAME_REQUEST)
    wanted = alike.join(gxs.select("gx"), on="gx", how="semi").select(_SAME_REQUEST).unique()
    return (
        alike.join(wanted, on=list(_SAME_REQUEST), how="semi", nulls_equal=True)  # (no Last-Event-ID is a value too)
        .sort("pos")
        .select("gx", order=pl.int_range(pl.len()).over(_SAME_REQUEST))
        .join(gxs.select("gx"), on="gx", how="semi")
    )


def _reconnect_names(f: Frames, b: pl.DataFrame, key: dict) -> tuple[list[str], list[str]]:
    """Each boundary's name (names.reconnect_names) and the digest of its identity, in ``b``'s order: what
    names a reconnect is gathered by Polars, the sha256 of it taken here, at the document's edge, one per
    boundary (Polars has no sha256, and a name must not change with a Polars version, as its hash may)."""
    what = b.select("gx", "session", "started", "source", "location").join(
        f.exchanges.select("gx", "session_id", "method", "last_event_id", "request_body"), on="gx", how="left", maintain_order="left"
    ).join(_request_order(f.exchanges, b), on="gx", how="left", maintain_order="left").with_columns(_iso("started").alias("started"))
    idents = names.digests([
        names.reconnect_identity(sid, method, cursor, body, order, started)
        for sid, method, cursor, body, order, started in what.select(
            "session_id", "method", "last_event_id", "request_body", "order", "started").iter_rows()
    ])
    sessions = [key[s] for s in what["session"].to_list()]
    where = [f"{s}\x1f{loc}" for s, loc in what.select("source", "location").iter_rows()]
    return names.reconnect_names(sessions, idents, what["started"].to_list(), where), idents


def _boundary_rows(f: Frames, b: pl.DataFrame, key: dict, keep_pos: bool = False) -> pl.DataFrame:
    """The boundaries as the document's records (one row each), with ``next_use``, ``_hist_refs`` and
    ``_pos`` beside them for the reconnect rule (rules/reconnects.py); ``keep_pos``: and ``_identity``
    (the digest its name is made of) for the merge of partitions."""
    # in history order, whatever order the rules left the rows in (pos: the request's place in history)
    b = _boundary_evidence(f, b.sort("pos", "gx", maintain_order=True))
    bnames, idents = _reconnect_names(f, b, key)
    b = b.with_columns(boundary_id=pl.Series(bnames, dtype=pl.String), _identity=pl.Series(idents, dtype=pl.String))
    _hidden_stream = (pl.col("rule_id") == "resumed_undecrypted") & ~pl.col("id_found").fill_null(False)
    stream_ids = f.exchanges.select("gx", "stream")
    # the call that opened the resumed stream, and whether its own answer ever came (the document's calls_hit)
    # (the sessions with a reconnect alone: naming every request of history cost 500k tiny POST exchanges +300 MiB)
    touched = b.select("session").unique().lazy()
    answered = (
        rpc.in_sessions(f.messages.lazy(), touched)
        .filter((pl.col("direction") == "server_to_client") & pl.col("kind").is_in(["response", "error"]) & pl.col("rpc_id").is_not_null())
        .select("session", v_id="rpc_id").unique().with_columns(_answered=pl.lit(True))
    )
    opened = (
        rpc.openers(f, touched).join(answered, on=["session", "v_id"], how="left")
        .select("session", "stream", _call="v_call", _answered=pl.col("_answered").fill_null(False))
        .collect()
    )
    b = b.join(opened, on=["session", "stream"], how="left", maintain_order="left")
    rows = b.join(stream_ids.rename({"stream": "_s"}), on="gx", how="left", maintain_order="left").select(
        "boundary_id",
        "session",
        "session_id",
        formatted("s{}", pl.col("stream") + 1).alias("stream"),
        pl.struct("source", "location").alias("request"),
        formatted("x{}", pl.col("pos") + 1).alias("request_exchange"),
        # (a resume whose stream lies in an undecrypted TLS connection names none: the link the tables offer is a guess)
        pl.when(~_hidden_stream).then(formatted("x{}", pl.col("prev_pos") + 1)).alias("resumes_exchange"),
        pl.when(~_hidden_stream).then(pl.col("resumed_ref")).alias("resumes"),
        pl.col("header").alias("last_event_id"),
        "last_before",
        "first_event_id_after",
        "verdict",
        "rule_id",
        "evidence",
        "reason",
        "severity",
        "lost_event_ids",
        "lost_count",
        "duplicated_event_ids",
        "duplicated_count",
        "handled_correctly",
        # where the client reacted (signals/boundaries.reaction): the old session's next use, or the new session's initialize
        pl.when(pl.col("verdict") == "continuous").then(None)
        .when(pl.col("handled_correctly") == False)  # noqa: E712 (polars expression)
        .then(formatted("x{}", pl.col("use_pos") + 1))
        .when(pl.col("handled_correctly") == True)  # noqa: E712
        .then(formatted("x{}", pl.col("init_pos") + 1))
        .alias("reaction_exchange"),
        # the requests the resumed stream still owed a response (signals/rpc.py): the report shows their findings here
        pl.col("owed_pos").list.eval(formatted("x{}", pl.element() + 1)).fill_null(pl.lit([], dtype=pl.List(pl.String))).alias("owed_requests"),
        # another call's answer handed to the call that opened the resumed stream (signals/rpc.wrong_results)
        pl.col("_call").alias("call"),
        pl.when(pl.col("_call").is_not_null()).then(pl.col("_answered")).alias("call_answered"),
        pl.when(pl.col("wr_message").is_not_null())
        .then(pl.struct(call="wr_call", got="wr_got", preview="wr_preview", client="wr_client", outcome="wr_outcome",
                        resumed_call="wr_resumed_call"))
        .alias("wrong_result"),
        "id_scheme",
        pl.col("overlap").alias("boundary_event_resent"),
        _iso("started").alias("started"),
        pl.struct(
            "method",
            "status",
            pl.col("req_session_id").alias("request_session_id"),
            pl.col("resp_session_id").alias("response_session_id"),
            pl.col("protocol_version"),
            "content_type",
            pl.col("epoch_before").alias("replay_epoch_before"),
            pl.col("replay_epoch").alias("replay_epoch_after"),
            pl.col("end_reason"),
        ).alias("http"),
        "events_before",
        "events_after",
        "cut_off_before",
        "next_use",
        "views",
        pl.col("hist_refs").alias("_hist_refs"),
        pl.col("wr_message").alias("_wr_message"),
        pl.col("wr_refs").alias("_wr_refs"),
        pl.col("wr_rule").alias("_wr_rule"),
        pl.col("wr_severity").alias("_wr_severity"),
        pl.col("pos").alias("_pos"),
        *(["_identity"] if keep_pos else []),
    )
    return rows.with_columns(pl.col("events_before", "events_after", "cut_off_before").fill_null([]))


def session_keys(f: Frames) -> dict[str, str]:
    """Every session's name (names.session_names: from its Mcp-Session-Id), by the key the frames group it by."""
    pairs = f.exchanges.select("session", "session_id").unique("session")
    named = names.session_names(pairs["session_id"].to_list())
    return {k: named[sid or ""] for k, sid in pairs.iter_rows()}


def _sessions_and_exchanges(f: Frames, b: pl.DataFrame, rev: pl.DataFrame, key: dict, keep_pos: bool = False) -> tuple[list[dict], pl.LazyFrame]:
    """The document's sessions and exchanges (as a plan of its records' frame); ``key``: every session's name
    (:func:`session_keys`); ``keep_pos``: each session keeps its first exchange's place in history as ``_pos``."""
    x = f.exchanges
    sess = (
        x.group_by("session")
        .agg(
            session_id=pl.col("session_id").first(),
            first_pos=pl.col("pos").min(),
            first_seen=pl.col("started").min(),
            last_seen=pl.coalesce(pl.col("ended"), pl.col("started")).max(),
            exchanges=pl.len(),
            streams=pl.col("stream").filter(pl.col("content_type") == "text/event-stream").n_unique(),
            events=pl.col("n_events").sum(),
            protocol_version=pl.col("protocol_version").drop_nulls().first(),
            id_scheme=pl.col("id_scheme").first(),
            sources=pl.col("source").unique().sort(),
            incident=pl.col("incident").first(),
        )
        .sort("first_pos")
    )
    inits = f.messages.filter(
        (pl.col("direction") == "server_to_client") & (pl.col("kind") == "response") & pl.col("protocol_version").is_not_null()
    ).group_by("session").agg(pl.col("protocol_version").first().alias("negotiated"), pl.len().alias("initialize_results"))
    # each session's boundaries counted by verdict, in the verdict order, by Polars (not per session in Python)
    rank = {v: i for i, v in enumerate(VERDICT_ORDER)}
    counted = (
        b.group_by("session", "verdict")
        .agg(n=pl.len())
        .with_columns(_rank=pl.col("verdict").replace_strict(rank, default=None, return_dtype=pl.Int32))
        .sort("session", "_rank")
        .group_by("session", maintain_order=True)
        .agg(
            boundaries=pl.col("n").sum(),
            _verdicts=pl.col("verdict").filter(pl.col("_rank").is_not_null()),
            _counts=pl.col("n").filter(pl.col("_rank").is_not_null()),
        )
    )
    sess = (
        sess.join(inits, on="session", how="left", maintain_order="left")
        .join(clients.sessions(f), on="session", how="left", maintain_order="left")
        .join(rev, on="session", how="left", maintain_order="left")
        .join(counted, on="session", how="left", maintain_order="left")
        .with_columns(pl.col("initialize_results").fill_null(0), pl.col("boundaries").fill_null(0).cast(pl.Int64))
    )
    # an incident (the per-input sessions that share an exchange: captures of one incident) is named
    # by its first session in history (they share one Mcp-Session-Id: its name, names.py)
    first_of = dict(sess.group_by("incident").agg(pl.col("session").sort_by("first_pos").first()).iter_rows())
    incident = {k: key[first_of[i]] for k, i in sess.select("session", "incident").iter_rows()}
    sessions = sess.select(
        session=pl.col("session").replace_strict(key, return_dtype=pl.String),
        incident=pl.col("session").replace_strict(incident, return_dtype=pl.String),
        session_id="session_id",
        protocol_version="revision",
        era="era",
        id_scheme="id_scheme",
        first_seen=_iso("first_seen"),
        last_seen=_iso("last_seen"),
        exchanges="exchanges",
        streams="streams",
        events="events",
        boundaries="boundaries",
        _verdicts="_verdicts",
        _counts="_counts",
        initialize_results="initialize_results",
        sources="sources",
        client=pl.struct(family=pl.col("client").fill_null(clients.UNKNOWN), user_agent="user_agent",
                         name="client_name", version="client_version"),
        _pos="first_pos",
    ).to_dicts()
    for s in sessions:  # the JSON object of verdict counts (only the verdicts seen: a dict per session is the contract)
        s["verdicts"] = dict(zip(s.pop("_verdicts") or [], s.pop("_counts") or []))
    order = ["session", "incident", "session_id", "protocol_version", "era", "id_scheme", "first_seen", "last_seen", "exchanges", "streams",
             "events", "boundaries", "verdicts", "initialize_results", "sources", "client"]
    if keep_pos:  # (the merge of partitions orders the sessions of every partition by it)
        order.append("_pos")
    sessions = [{k: s[k] for k in order} for s in sessions]
    times = _event_offsets(f)
    # the columns the records read, and the offsets beside them (a join of the exchanges, then a sort, copied
    # every column of them twice: 500k exchanges, +230 MiB); the exchanges are in position order already
    needed = ["gx", "pos", "session", "session_id", "stream", "source", "location", "conn", "started", "ended", "method", "url",
              "status", "content_type", "last_event_id", "end_reason", "body_recorded", "n_events", "n_cut_off", "first_id", "last_id"]
    # (a plan over them: the records are made when the document is written, a slice at a time: records.Records)
    exchanges = streams.attach(x.select(needed), times, "gx").pipe(streams.in_order, ["pos"]).lazy().select(
        formatted("x{}", pl.col("pos") + 1).alias("exchange_id"),
        pl.col("session").replace_strict(key, return_dtype=pl.String).alias("session"),
        "session_id",
        formatted("s{}", pl.col("stream") + 1).alias("stream"),
        "source",
        "location",
        "conn",
        _iso("started").alias("started"),
        _iso("ended").alias("ended"),
        "method",
        "url",
        "status",
        "content_type",
        pl.col("last_event_id"),
        "end_reason",
        "body_recorded",
        pl.col("n_events").alias("events"),
        pl.col("n_cut_off").alias("cut_off_events"),
        "first_id",
        "last_id",
        "event_offsets_ms",
        "cut_off_offsets_ms",
    )
    return sessions, exchanges


def _identify(findings: list[dict], x: pl.DataFrame) -> None:
    """Each finding's time (its exchange's start), catalog text, ``fingerprint`` (document.fingerprint) and ``seen_in``, in
    place (finding_rows.identify); the rules' ``subject`` is used up here."""
    at = [r["pos"] for r in findings if r["pos"] is not None and r["pos"] >= 0]
    started = dict(x.filter(pl.col("pos").is_in(at)).select("pos", _iso("started")).iter_rows()) if at else {}
    for r in findings:
        identify(r, started.get(r["pos"]))


# where a record is, in a finding's words: left out when two captures' findings are compared
_LOCATION = re.compile(r"\b(?:line|entry|packet) [0-9]+(?: byte [0-9]+)?")


def _once_per_incident(findings: list[dict], x: pl.DataFrame) -> list[dict]:
    """History findings of the captures of one incident (a HAR, a proxy log and a pcap of the same traffic:
    views.incidents) reported once: the same rule and severity for the same Mcp-Session-Id about the same
    thing (its subject: the ids, the calls), whatever each capture's message says.  The one earliest in history is kept, with the evidence of all of
    them (the document then names the captures that show it: ``seen_in``).  (Reconnects are merged the same way, by their
    fingerprints: their findings already come once.)"""
    incident = dict(x.select("session", "incident").unique("session").iter_rows())
    kept: dict[tuple, list[tuple[set, dict]]] = {}
    # per key and source: how many of the key's first groups all hold that source (none of them can take a
    # finding of it), so the search starts past them: one capture's n findings of one key are n groups, and
    # looking through all the earlier ones for each would be quadratic in n
    full: dict[tuple, dict[str, int]] = {}
    out = []
    for rec in sorted(findings, key=lambda r: (r["pos"] if r["pos"] is not None else -1, json.dumps(r, sort_keys=True, default=str))):
        inc = incident.get(rec["session"])
        if inc is None or rec.get("boundary") is not None:
            out.append(rec)
            continue
        # what it is about in the wire's terms (the rule's subject: ids, calls), not its wording: two captures of one
        # incident may count differently (a HAR sees 4 streams reuse an id, the proxy log 2) and still show one finding
        said = rec.get("subject") or _LOCATION.sub("@", rec["message"])
        key = (inc, rec["session_id"], rec["rule"], rec["severity"], said)
        sources = {e["source"] for e in rec["evidence"]}
        # the same finding twice in one capture is two occurrences: each capture's n-th joins the n-th group
        groups = kept.setdefault(key, [])
        held = full.setdefault(key, {})
        at = max((held.get(s, 0) for s in sources), default=0)
        at = next((i for i in range(at, len(groups)) if not (groups[i][0] & sources)), len(groups))
        if at == len(groups):
            groups.append((sources, rec))
            out.append(rec)
        else:
            have, first = groups[at]
            seen = {(e["source"], e["location"]) for e in first["evidence"]}
            first["evidence"] = first["evidence"] + [e for e in rec["evidence"] if (e["source"], e["location"]) not in seen]
            have |= sources
        for s in sources:
            n = held.get(s, 0)
            while n < len(groups) and s in groups[n][0]:  # bounded: a count of groups, only ever moved forward
                n += 1
            held[s] = n
    return out


# what a foreign answer on a resumed stream left the resumed call with, when that finding is the call's whole story
_TOLD = ("another_result", "never_completed", "another_result_or_never_completed")


def _one_story_per_call(hist: list[dict], rows: pl.DataFrame) -> list[dict]:
    """The history findings without a ``request_unanswered`` for a call whose story a reconnect's foreign answer already
    tells (signals/rpc.wrong_results): the python client completed it with that answer (it did get "a response"), the
    TypeScript client dropped the answer and the call never completed (the finding says so), or the client is not known
    (the finding says both).  One call, one story (not "was handed the result of ..." and "never got a response")."""
    # (by Mcp-Session-Id: each view of an incident -- a HAR and a proxy log of one traffic -- is its own session, and
    # the reconnect is judged from one of them)
    told = {
        (s, w["resumed_call"])
        for s, w in rows.filter(pl.col("wrong_result").is_not_null()).select("session_id", "wrong_result").iter_rows()
        if w["outcome"] in _TOLD and w["call"] == w["resumed_call"]  # (not when another waiting call took it)
    }
    if not told:
        return hist
    return [r for r in hist if not (r["rule"] == "request_unanswered" and (r["session_id"], r.get("subject")) in told)]


def build_document(f: Frames, b: pl.DataFrame, rev: pl.DataFrame, keep_pos: bool = False, columnar: bool = False,
                   analysis: registry.Analysis | None = None) -> dict:
    """``columnar``: the two large arrays, exchanges and boundaries, are :class:`~analyzer.document.records.Records`
    (their frames, written as JSON by Polars), not lists of dicts.  ``analysis``: the rules' thresholds (None: the defaults)."""
    lf, lb, lrev = f.lazy(), b.lazy(), rev.lazy()
    # the history rules' plans are Polars work, which releases the GIL: collected in a worker thread, from the start
    # (they read the judged reconnects, not the boundary rows), while this one makes the boundary rows, turns the
    # session and exchange rows into Python objects and collects the reconnect rule's findings (begun after the
    # boundary rows, the history rules kept this thread waiting 0.15-0.2 s at 1M events)
    with ThreadPoolExecutor(1, thread_name_prefix="findings") as pool:
        job = pool.submit(lambda: registry.history_findings(lf, lb, lrev, analysis).collect())
        key = session_keys(f)
        rows = _boundary_rows(f, b, key, keep_pos)
        sessions, exchanges = _sessions_and_exchanges(f, b, rev, key, keep_pos)
        boundaries = rows.drop("next_use", "_hist_refs", "_wr_message", "_wr_refs", "_wr_rule", "_wr_severity", "_pos").with_columns(
            pl.col("session").replace_strict(key, default=None, return_dtype=pl.String))
        if not columnar:
            boundaries, exchanges = boundaries.to_dicts(), exchanges.collect().to_dicts()
        per_reconnect = registry.reconnect_findings(rows.lazy()).collect()
        hist = job.result()
    hist = _once_per_incident(_one_story_per_call(hist.to_dicts(), rows), f.exchanges)
    _identify(hist, f.exchanges)
    hist_pos = [r.pop("pos") for r in hist]
    # the reconnect findings stay the rule's frame, with their exchange's start (_identify's), and are made as dicts a
    # slice at a time when written: 60,000 of them as dicts at once were the analysis' peak (finding_rows.py)
    started = f.exchanges.select("pos", _time=_iso("started")).unique("pos", keep="last", maintain_order=True)
    per_reconnect = per_reconnect.join(started, on="pos", how="left", maintain_order="left")
    findings = FindingRecords(per_reconnect, hist, hist_pos, key, keep_pos)
    del per_reconnect, hist, hist_pos
    if not columnar:
        findings = findings.rows()
    if columnar:
        boundaries, exchanges = Records(boundaries), Records(exchanges, height=f.exchanges.height)
    return {"sessions": sessions, "exchanges": exchanges, "boundaries": boundaries, "findings": findings}


JSON_LINES_KINDS = (("input", "inputs"), ("session", "sessions"), ("exchange", "exchanges"), ("boundary", "boundaries"),
                    ("finding", "findings"), ("anomaly", "anomalies"))


# Characters that some line readers take for a line end (str.splitlines: U+0085, U+2028, U+2029; JavaScript's
# old JSON-in-source rules: U+2028/2029) or that an 8-bit terminal obeys (C1 controls, 0x9b is CSI).  json.dumps
# with ensure_ascii=False writes them raw inside strings; a JSON Lines record holding one would be cut in two
# by such a reader (the tool's own output refused as a baseline, issue [2/5] item 8).  Escaped, they are the
# same JSON value and every line is one record for every reader.
_LINE_SAFE = str.maketrans({c: f"\\u{ord(c):04x}" for c in [*map(chr, range(0x80, 0xa0)), "\u2028", "\u2029"]})


def ndjson_line(obj) -> str:
    """One JSON Lines record: ``json.dumps(obj, ensure_ascii=False)`` with the characters above escaped."""
    return json.dumps(obj, ensure_ascii=False).translate(_LINE_SAFE)


def json_lines_by_kind(doc: dict):
    """The JSON Lines of :func:`json_lines`, one file per kind: (name, its lines), ``summary`` first (one line), then
    ``inputs``, ``sessions``, ``exchanges``, ``boundaries``, ``findings``, ``anomalies``.  The lines of a file are records
    of one kind, so one ``pl.read_ndjson`` reads every key its kind always has (each boundary's verdict): in one file
    of every kind, the boundaries came after the exchanges, past the 100 lines Polars infers its columns from."""
    lines = json_lines(doc)
    yield "summary", [next(lines)]
    for kind, key in JSON_LINES_KINDS:
        yield key, [ndjson_line({"type": kind, **rec}) for rec in doc[key]]


def json_lines(doc: dict):
    """The findings document as NDJSON for downstream tools: a header line (tool, summary,
    skipped), then one line per record, each with its ``type``."""
    head = {"type": "summary", "schema_version": doc["schema_version"], "tool": doc["tool"], "generated_at": doc["generated_at"],
            "summary": doc["summary"], "skipped": doc["skipped"]}
    yield ndjson_line(head)
    for kind, key in JSON_LINES_KINDS:
        for rec in doc[key]:
            yield ndjson_line({"type": kind, **rec})
