"""A reconnect storm: more reconnects of one stream within a minute than a client that backs off makes.

Each reconnect may be judged continuous, and the stream still be unusable: a client that reconnects at once, again and
again (no backoff, a proxy that cuts every stream after a few seconds, a server that closes it on each event) loads
the server and the event store, and every reconnect is one more chance to lose or repeat events.  One finding per
stream, for its busiest minute: how many reconnects started within it.
"""
from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from analyzer.rules.shape import finding_frame, ref, subject
from analyzer.formatted import formatted

MAX_EVIDENCE = 12  # reconnect requests listed as evidence (the count is exact)


@dataclass(frozen=True)
class Storm:
    """``reconnects``: more than this many reconnects of one stream within ``seconds`` is a storm."""

    reconnects: int = 10
    seconds: int = 60

    def __post_init__(self) -> None:
        if self.reconnects < 1 or self.seconds < 1:
            raise ValueError(f"a reconnect storm needs reconnects >= 1 and seconds >= 1, not {self.reconnects} and {self.seconds}")


def findings(b: pl.LazyFrame, s: Storm) -> pl.LazyFrame:
    """For each stream, the window of ``s.seconds`` ending at each reconnect's start; the busiest one, when it holds
    more than ``s.reconnects`` reconnects, is the stream's finding (its first reconnect places it in history)."""
    r = (b.filter(pl.col("started").is_not_null())
         .select("session", "session_id", "stream", "url", "started", "pos", ref().alias("_ref"))
         .sort("started", "pos"))
    windows = (
        r.rolling(index_column="started", period=f"{s.seconds}s", group_by=["session", "stream"])
        .agg(n=pl.len(), first=pl.col("started").min(), pos=pl.col("pos").min(), refs=pl.col("_ref").head(MAX_EVIDENCE),
             session_id=pl.col("session_id").first(), url=pl.col("url").first())
        .filter(pl.col("n") > s.reconnects)
    )
    busiest = windows.sort("n", "pos", descending=[True, False]).group_by("session", "stream", maintain_order=True).first()
    found = busiest.with_columns(
        message=formatted(f"{{}} reconnects of one stream ({{}}) within {s.seconds} s from {{}}: more than {s.reconnects}, a client "
                          "reconnecting without backing off, or a proxy or server cutting the stream each time",
                          pl.col("n"), pl.col("url"), pl.col("first").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")),
        evidence=pl.col("refs"),
        subject=subject("url", pl.col("first").dt.strftime("%Y-%m-%dT%H:%M:%S%.6fZ")),
    ).sort("pos")
    return finding_frame(found, "reconnect_storm", "warning")
