"""streams.build's lookups that stand in for a join of the events table: each gives what the join gives."""
from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.signals import streams
from analyzer.ingest.reading import Reading

SOURCES = ["b.jsonl", "a.har", "/archive/2026-11/c.pcap"]


@st.composite
def events_and_exchanges(draw):
    """Exchanges (source, xid, gx numbered in (source, xid) order) and events in runs of one source, some
    of whose exchanges are missing (narrowed away), with xids near the 2^32 limit or past it now and then."""
    big = draw(st.sampled_from([0, 2**32 - 5, 2**32]))
    xs = draw(st.lists(st.tuples(st.sampled_from(SOURCES), st.integers(0, 6).map(lambda i: i + big)), unique=True, max_size=12))
    x = pl.DataFrame({"source": [s for s, _ in xs], "xid": [i for _, i in xs]}, schema={"source": pl.String, "xid": pl.Int64})
    x = x.sort("source", "xid").with_row_index("gx").with_columns(pl.col("gx").cast(pl.Int64))
    runs = draw(st.lists(st.tuples(st.sampled_from(SOURCES), st.lists(st.integers(0, 8).map(lambda i: i + big), max_size=5)), max_size=6))
    rows = [(s, i) for s, ids in runs for i in ids]
    ev = pl.DataFrame({"source": [s for s, _ in rows], "xid": [i for _, i in rows]}, schema={"source": pl.String, "xid": pl.Int64})
    return ev, x


@settings(max_examples=300, deadline=None)
@given(events_and_exchanges())
def test_event_gx_is_the_join_on_source_and_xid(case):
    ev, x = case
    want = ev.join(x, on=["source", "xid"], how="left", maintain_order="left").get_column("gx")
    got = streams._event_gx(ev, x)
    assert got.to_list() == want.to_list()
    # the same by the key join, which serves where the sources come in too many runs
    saved, streams.MAX_RUNS = streams.MAX_RUNS, -1
    try:
        assert streams._gathered_gx(ev, x) is None
        assert streams._event_gx(ev, x).to_list() == want.to_list()
    finally:
        streams.MAX_RUNS = saved


def test_event_gx_codes_runs_of_one_source():
    """Interleaved runs of two inputs (as a concatenation of stores gives), an exchange missing."""
    x = pl.DataFrame({"source": ["a", "a", "b", "b"], "xid": [0, 1, 0, 1]}).with_row_index("gx").with_columns(pl.col("gx").cast(pl.Int64))
    ev = pl.DataFrame({"source": ["b", "b", "a", "a", "b", "c", "a"], "xid": [1, 0, 0, 1, 1, 0, 2]})
    assert streams._event_gx(ev, x).to_list() == [3, 2, 0, 1, 3, None, None]


def test_where_varies_keeps_every_row_of_a_group_with_two_values():
    from analyzer.signals.keys import where_varies

    lf = pl.LazyFrame({
        "session": ["s", "s", "s", "s", "t", "t", "u", "u", "v", "v"],
        "id": ["1", "1", "2", "2", "1", "1", "9", "9", "5", "5"],
        "digest": [7, 8, 3, 3, 7, 7, None, 4, None, None],
    }, schema={"session": pl.String, "id": pl.String, "digest": pl.UInt64})
    got = where_varies(lf, ["session", "id"], "digest").collect()
    # s/1 has two digests; u/9 a digest and a null (two values, as n_unique counts); s/2, t/1 and v/5 one each
    assert got.rows() == [("s", "1", 7), ("s", "1", 8), ("u", "9", None), ("u", "9", 4)]
    exact = lf.group_by("session", "id").agg(n=pl.col("digest").n_unique()).filter(pl.col("n") > 1).collect()
    assert sorted(exact.select("session", "id").rows()) == sorted(set(got.select("session", "id").rows()))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["s", "t"]), st.sampled_from(["1", "2", "3", "4"]), st.one_of(st.none(), st.integers(0, 2))),
                max_size=30))
def test_where_varies_matches_an_exact_grouping(rows):
    """Against n_unique per (session, id), with the rows of a key anywhere in the frame (not side by side)
    and nulls: the rows kept are exactly those of the keys with two values (no two of these few keys share
    a hash), in their order."""
    from analyzer.signals.keys import where_varies

    lf = pl.LazyFrame(rows, schema={"session": pl.String, "id": pl.String, "digest": pl.UInt64}, orient="row")
    got = where_varies(lf, ["session", "id"], "digest").collect()
    varied = set(lf.group_by("session", "id").agg(n=pl.col("digest").n_unique()).filter(pl.col("n") > 1).select("session", "id").collect().rows())
    assert got.columns == ["session", "id", "digest"]
    assert got.rows() == [r for r in rows if (r[0], r[1]) in varied]


def _sample_parts(compact: bool):
    from pathlib import Path

    from analyzer.ingest import inputs

    root = Path(__file__).resolve().parent.parent / "sample_logs"
    paths = [root / "real-python-resume-dense.jsonl", root / "real-python-resume-dense.har", root / "real-python-server-restart.pcap"]
    if not compact:
        return [inputs.read_one(str(p)) for p in paths]
    return [inputs.read_one(str(p), Reading(compact=True)) for p in paths]


def test_compact_events_hold_the_canonical_values():
    """The single pass's events (Reading(compact=True)) are the canonical table's in a smaller form: the
    digest's first 64 bits, the fate as an Enum, the event type as a Categorical, retry as a flag (true
    where the field was sent, else null) and no cursor (streams.build takes it from the ids)."""
    from analyzer import tables

    retries = 0
    for full, small in zip(_sample_parts(False), _sample_parts(True)):
        canon = full.events_polars()
        got = small.events_polars()
        assert canon.height > 0 and list(got.schema) == list(tables.COMPACT_EVENTS)
        assert "cursor" not in got.columns
        assert [got.schema[c] for c in ("digest", "fate", "event", "retry")] == [pl.UInt64, pl.Enum(tables.FATES), pl.Categorical(), pl.Boolean]
        assert got.select(pl.col("fate").cast(pl.String), pl.col("event").cast(pl.String)).equals(canon.select("fate", "event"))
        assert got["digest"].equals(canon.select(tables.compact_digest_expr(pl.col("digest"))).to_series())
        assert got["retry"].is_not_null().equals(canon["retry"].is_not_null()) and got["retry"].drop_nulls().all()
        retries += got["retry"].sum()
        assert got.drop("fate", "event", "digest", "retry").equals(canon.drop("fate", "event", "digest", "retry", "cursor"))
        # the canonical table as a store hands it over (Arrow, cursor and all) and the compact one build the
        # same connections: each one's last cursor from the cursor column's rule, applied to the ids
        frames = [streams.build({"exchanges": p.exchanges, "events": e, "messages": p.messages})[0].exchanges
                  for p, e in ((full, full.events), (small, small.events_polars()))]
        wanted = ["gx", "last_cursor", "sent_retry"]
        assert frames[0].select(wanted).equals(frames[1].select(wanted))
        # and that rule is the one the cursor column was made by: the last visible event's cursor
        last = (pl.from_arrow(full.events).with_columns(visible=pl.col("fate") != "cut_off").group_by("xid")
                .agg(c=pl.col("cursor").filter("visible").last()))
        x = frames[0].join(last, on="xid", how="left")
        seen = x.filter(pl.col("body_recorded") & pl.col("c").is_not_null())
        assert seen.height and seen["last_cursor"].equals(seen["c"], check_names=False)
    assert retries > 0  # a sample sends a retry field: the flag is tested on one


@st.composite
def connections_of_integer_ids(draw):
    """Connections (one prefix each) of integer ids, some missing (an id the scheme could not read: a null
    seq), in history order: the events ``history.id_order`` reads."""
    rows = []
    for gx in range(draw(st.integers(1, 5))):
        seqs = draw(st.lists(st.one_of(st.none(), st.integers(0, 12)), min_size=1, max_size=12))
        for ordinal, s in enumerate(seqs):
            rows.append({"gx": gx, "pos": gx, "ordinal": ordinal, "seq": s, "id": "x" if s is None else str(s),
                         "location": f"line {len(rows) + 1}"})
    return rows


def _backwards_reference(rows: list[dict]) -> dict[int, tuple[int, str, str | None]]:
    """Per connection: how many ids were not above every earlier one, the first such id and the id before
    it.  A row whose previous row has no readable id is not compared (the running maximum is unknown there,
    as Polars' cum_max gives null on a null), a row without a readable id neither."""
    out: dict[int, tuple[int, str, str | None]] = {}
    by_gx: dict[int, list[dict]] = {}
    for r in rows:
        by_gx.setdefault(r["gx"], []).append(r)
    for gx, conn in by_gx.items():
        top, n, first = None, 0, None
        for i, r in enumerate(conn):
            prev = conn[i - 1] if i else None
            if r["seq"] is not None and prev is not None and prev["seq"] is not None and r["seq"] <= top:
                n += 1
                first = first or (r["id"], prev["id"])
            if r["seq"] is not None:
                top = r["seq"] if top is None else max(top, r["seq"])
        if n:
            out[gx] = (n, *first)
    return out


@settings(max_examples=150, deadline=None)
@given(connections_of_integer_ids())
def test_id_order_flags_what_a_window_over_every_connection_flags(rows):
    """``id_order`` looks only at connections whose ids somewhere fail to rise: it finds what the check over
    every connection finds, nulls included."""
    from analyzer.rules import event_ids as history

    events = pl.DataFrame(rows, schema={"gx": pl.Int64, "pos": pl.Int64, "ordinal": pl.Int32, "seq": pl.Int64, "id": pl.String,
                                        "location": pl.String}).with_columns(
        visible=pl.lit(True), has_id=pl.lit(True), sprefix=pl.lit(""), id_scheme=pl.lit("integer"), source=pl.lit("a.jsonl"),
        session=pl.lit(0, pl.Int64), session_id=pl.lit("s"), idh=streams.id_hash(pl.col("id")))
    got = history.id_order(streams.Frames(pl.DataFrame(), events, pl.DataFrame()).lazy()).collect()
    assert set(got["rule"]) <= {"id_not_monotonic"}
    found = {int(p): m for p, m in zip(got["pos"], got["message"])}
    want = {gx: f"{n} event id(s) on one connection were not above an earlier id (first: {first} after {after})"
            for gx, (n, first, after) in _backwards_reference(rows).items()}
    assert found == want


def test_last_cursor_counts_an_id_of_an_event_cut_off_inside_a_stream(tmp_path):
    """A log may mark an event truncated in the middle of a stream.  The cursor after the last visible
    event is then the cut-off event's id when no later event has one (the canonical cursor column's rule:
    the buffer persists): the compact single pass, which has no cursor column, gives the same."""
    import json

    from analyzer.ingest import inputs

    recs = [
        {"kind": "request", "ts": "2026-01-01T00:00:00Z", "conn": "c1", "method": "GET", "url": "http://127.0.0.1/mcp",
         "headers": {"mcp-session-id": "s1", "accept": "text/event-stream"}},
        {"kind": "response", "ts": "2026-01-01T00:00:00Z", "conn": "c1", "status": 200, "headers": {"content-type": "text/event-stream"}},
        {"kind": "sse", "ts": "2026-01-01T00:00:01Z", "conn": "c1", "id": "1", "data": "a"},
        {"kind": "sse", "ts": "2026-01-01T00:00:02Z", "conn": "c1", "id": "2", "data": "b", "truncated": True},
        {"kind": "sse", "ts": "2026-01-01T00:00:03Z", "conn": "c1", "data": "c"},
        {"kind": "close", "ts": "2026-01-01T00:00:04Z", "conn": "c1", "reason": "eof", "by": "server"},
    ]
    path = tmp_path / "cut.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    full = inputs.read_one(str(path))
    small = inputs.read_one(str(path), Reading(compact=True))
    assert pl.from_arrow(full.events)["cursor"].to_list() == ["1", "2", "2"]
    got = [streams.build({"exchanges": p.exchanges, "events": e, "messages": p.messages})[0].exchanges["last_cursor"].to_list()
           for p, e in ((full, full.events), (small, small.events_polars()))]
    assert got == [["2"], ["2"]]


def test_session_key_is_one_integer_per_session_string(tmp_path):
    """``sk`` (the session as an integer, what the rules join and group on): equal exactly where ``session`` is,
    on the exchanges, events and messages alike, and in the strings' order (a sort by it is a sort by them)."""
    import json

    from analyzer.ingest import inputs

    recs = []
    for n, sid in enumerate(["s-b", "s-a", "s-b", "", "s-c"]):
        conn = f"c{n}"
        ts = f"2026-01-01T00:00:0{n}Z"
        headers = {"accept": "text/event-stream"} | ({"mcp-session-id": sid} if sid else {})
        recs += [
            {"kind": "request", "ts": ts, "conn": conn, "method": "POST", "url": "http://127.0.0.1/mcp", "headers": headers,
             "body": json.dumps({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "t"}})},
            {"kind": "response", "ts": ts, "conn": conn, "status": 200, "headers": {"content-type": "text/event-stream"}},
            {"kind": "sse", "ts": ts, "conn": conn, "id": f"{n}", "data": json.dumps({"jsonrpc": "2.0", "id": n, "result": {}})},
            {"kind": "close", "ts": ts, "conn": conn, "reason": "eof", "by": "server"},
        ]
    path = tmp_path / "keys.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    # a second view of the same log: its sessions are others (the view is part of the key)
    other = tmp_path / "keys2.jsonl"
    other.write_text(path.read_text())
    parts = [inputs.read_one(str(p), Reading(compact=True)) for p in (path, other)]
    f, _ = streams.build(inputs.concat(parts))
    for frame in (f.exchanges, f.events, f.messages):
        assert frame.height > 0
        pairs = frame.select("session", "sk").unique()
        assert pairs.get_column("session").n_unique() == pairs.get_column("sk").n_unique() == pairs.height
    x = f.exchanges.select("session", "sk").unique().sort("session")
    assert x.height == 8  # 4 session ids (one empty) in each of the two views
    assert x.get_column("sk").is_sorted()


def test_keyed_id_tells_every_pair_apart():
    """The (stream, id) key of boundaries._prior: the same pair, the same key; 1M pairs of 1,000 streams that share
    their ids (the case a key that dropped the stream, or added it, would merge), 1M keys."""
    n = 1000
    pairs = pl.DataFrame({"stream": pl.int_range(n * n, eager=True) // n, "id": (pl.int_range(n * n, eager=True) % n).cast(pl.String)})
    keys = pairs.select(streams.keyed_id(pl.col("stream"), streams.id_hash(pl.col("id")))).to_series()
    assert keys.dtype == pl.UInt64 and keys.null_count() == 0
    assert keys.n_unique() == n * n
    again = pairs.head(5).select(streams.keyed_id(pl.col("stream"), streams.id_hash(pl.col("id")))).to_series()
    assert again.to_list() == keys.head(5).to_list()
