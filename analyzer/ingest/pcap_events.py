"""The SSE events of a capture: every kept event-stream body parsed column-wise, each event given its packet.

One job: turn the :class:`analyzer.ingest.pcap_body.Run` s of the MCP conversations into the events
table.  The bodies are parsed while packets are still being read (:class:`Parsing`: batches of
finished connections go to :func:`analyzer.decode.sse_columns.parse` in one worker thread); at the
end :func:`events` hands the :class:`analyzer.tables.Builder` one event row per event, with the time
and number of the packet that completed it (the one that carried the first byte of its terminating
blank line), so pcap gives exact per-event times, and the parser's anomalies as rows.
"""
from __future__ import annotations

from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable

import polars as pl

from analyzer.decode import sse_columns
from analyzer.ingest.pcap_body import Run
from analyzer.tables import Builder
from analyzer.formatted import formatted

MIN_NS, MAX_NS = -62_135_596_800 * 10**9, 253_402_300_799 * 10**9  # years 1 .. 9999: the times a row can hold


class Parsing:
    """SSE bodies are parsed while packets are still being read: when a connection is over, its
    bodies join a batch, and full batches are parsed by :func:`analyzer.decode.sse_columns.parse` in one
    worker thread.  Polars releases the GIL, so the parse runs on the second core while this
    thread reassembles TCP; what is left is parsed at the end."""

    BATCH = 8 << 20  # bytes of body per batch: big enough for Polars, small enough to overlap

    def __init__(self) -> None:
        self.pool: ThreadPoolExecutor | None = None
        self.jobs: list[Future] = []
        self.keys: list[int] = []
        self.bodies: list[bytes] = []
        self.size = 0
        self.next = 0

    def add(self, runs: Iterable[Run]) -> None:
        for run in runs:
            if not run.size:
                continue
            run.key = self.next
            self.next += 1
            self.keys.append(run.key)
            self.bodies.append(b"".join(run.parts))
            run.parts = []
            self.size += run.size
        if self.size >= self.BATCH:
            self._submit()

    def _submit(self) -> None:
        if not self.keys:
            return
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="sse-parse")
        self.jobs.append(self.pool.submit(sse_columns.parse, self.keys, self.bodies))
        self.keys, self.bodies, self.size = [], [], 0

    def results(self) -> pl.DataFrame:
        """Every event of every body added, grouped by key (blocks in order within a key)."""
        if self.keys and not self.jobs:  # small capture: no thread
            frames = [sse_columns.parse(self.keys, self.bodies)]
            self.keys, self.bodies = [], []
        else:
            self._submit()
            try:
                frames = [job.result() for job in self.jobs]
            finally:
                self.close()
        return pl.concat(frames) if frames else pl.DataFrame(schema=sse_columns.COLUMNS)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        self.jobs = []


def events(b: Builder, runs: list[tuple[int, str, Run]], parsed: pl.DataFrame, note: Callable[..., None]) -> None:
    """Every SSE event of the capture (``parsed``: all bodies, see :class:`Parsing`), each given the
    packet that carried the first byte of its blank line (a block the stream ended inside: the last
    packet seen), in the order of the exchanges (``runs``: exchange id, connection name, run)."""
    if not runs:
        return
    base, bases = 0, []
    ends, ts, pkts = array("q"), [], array("q")
    for _xid, _conn, run in runs:
        bases.append(base)
        ends.extend(base + e for e in run.ends)  # offsets in all bodies laid end to end: one sorted axis
        ts.extend(run.ts)
        pkts.extend(run.pkts)
        base += run.size
    meta = pl.DataFrame(
        {
            "key": [r[2].key for r in runs],
            "_o": range(len(runs)),
            "xid": [r[0] for r in runs],
            "conn": [r[1] for r in runs],
            "base": bases,
            "close_ts": [r[2].close_ts for r in runs],
            "close_pkt": [r[2].close_pkt for r in runs],
        },
        schema={"key": pl.Int64, "_o": pl.Int64, "xid": pl.Int64, "conn": pl.String, "base": pl.Int64, "close_ts": pl.Int64, "close_pkt": pl.Int64},
    )
    marks = pl.DataFrame({"_end": ends, "_ts": ts, "_pkt": pkts}, schema={"_end": pl.Int64, "_ts": pl.Int64, "_pkt": pl.Int64})
    ev = (
        parsed.join(meta, on="key", how="inner")
        # the piece whose end lies past the blank line's first byte carried it
        .with_columns(_at=(pl.col("base") + pl.col("dispatch") + 1).fill_null(-1))
        .sort("_at")
        .join_asof(marks, left_on="_at", right_on="_end", strategy="forward")
        .sort("_o", "block")
        .with_columns(
            ns=pl.when(pl.col("dispatch").is_null()).then(pl.col("close_ts")).otherwise(pl.col("_ts")),
            pkt=pl.when(pl.col("dispatch").is_null()).then(pl.col("close_pkt")).otherwise(pl.col("_pkt")),
        )
        .with_columns(location=formatted("packet {}", pl.col("pkt")), ns_ok=pl.col("ns").is_between(MIN_NS, MAX_NS))
    )
    # anomaly rows: the parser's codes, blocks the stream ended inside, times out of range
    flagged = ev.filter((pl.col("anomalies").list.len() > 0) | (pl.col("fate") == "cut_off") | (pl.col("ns").is_not_null() & ~pl.col("ns_ok")))
    last_bad = None
    for codes, fate, where, conn, ns, ok in flagged.select("anomalies", "fate", "location", "conn", "ns", "ns_ok").iter_rows():
        for code in codes:
            b.log.add(code, where, conn)
        if fate == "cut_off":
            b.log.add("sse_unterminated_event", where, conn)
        if ns is not None and not ok and ns != last_bad:
            note("pcap_bad_timestamp", where, f"{ns} ns since 1970")
            last_bad = ns
    b.add_events(
        ev.select(
            "xid",
            "location",
            ts=pl.when(pl.col("ns_ok")).then(pl.from_epoch(pl.col("ns") // 1000, time_unit="us")).dt.replace_time_zone("UTC"),
            id=pl.col("id"),
            event=pl.col("event"),
            data=pl.col("data"),
            retry=pl.col("retry"),
            fate=pl.col("fate"),
        )
    )
