"""Protocol revisions: each session is judged by the rules of its own revision.

- 2024-11-05: the old HTTP+SSE transport (no Streamable HTTP resumption rules).
- 2025-03-26 … 2025-11-25: sessions (``Mcp-Session-Id``) and resumable SSE
  (``Last-Event-ID``).  2025-11-25 adds priming events (an id with empty data)
  and lets the server close a connection after sending ``retry`` so the client
  polls: such a close followed by a reconnect that only primes is normal.
- 2026-07-28 and later: no sessions, no resumption.  A server SHOULD ignore
  ``Mcp-Session-Id`` / ``Last-Event-ID`` and mint no session ids; a broken
  stream cancels its request and the client re-issues it under a new id — so
  the same call answered twice ran twice.

The revision comes from the initialize result, else the ``MCP-Protocol-Version``
header, else ``params._meta["io.modelcontextprotocol/protocolVersion"]``.
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.streams import Frames

STATELESS_FROM = "2026-07-28"
POLLING_FROM = "2025-11-25"
# methods that only read: re-issuing them twice is harmless
READ_ONLY = ["initialize", "ping", "tools/list", "prompts/list", "prompts/get", "resources/list", "resources/read",
             "resources/templates/list", "completion/complete", "server/discover", "logging/setLevel"]


def revisions(f: Frames) -> pl.DataFrame:
    """One row per session: ``revision`` (a date string or null) and ``era``."""
    m = f.messages
    negotiated = (
        m.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "response") & pl.col("protocol_version").is_not_null())
        .sort("pos")
        .group_by("session")
        .agg(negotiated=pl.col("protocol_version").first())
    )
    header = (
        f.exchanges.filter(pl.col("protocol_version").is_not_null())
        .sort("pos")
        .group_by("session")
        .agg(header=pl.col("protocol_version").first())
    )
    meta = (
        m.filter((pl.col("direction") == "client_to_server") & pl.col("protocol_version").is_not_null())
        .sort("pos")
        .group_by("session")
        .agg(meta=pl.col("protocol_version").first())
    )
    rev = pl.coalesce("negotiated", "header", "meta")
    return (
        f.exchanges.select("session").unique()
        .join(negotiated, on="session", how="left")
        .join(header, on="session", how="left")
        .join(meta, on="session", how="left")
        .select(
            "session",
            rev.alias("revision"),
            era=pl.when(rev.is_null())
            .then(pl.lit("unknown"))
            .when(rev >= STATELESS_FROM)
            .then(pl.lit("stateless"))
            .when(rev >= "2025-03-26")
            .then(pl.lit("sessions"))
            .otherwise(pl.lit("legacy")),
        )
    )


def polling(f: Frames, b: pl.DataFrame) -> pl.DataFrame:
    """Boundaries that are 2025-11-25 polling: the resumed connection sent ``retry`` and the
    server closed it; the reconnect brought only priming events (or nothing)."""
    retry_sent = f.exchanges.filter(pl.col("sent_retry")).select(pl.col("gx").alias("resumed_gx"))
    only_priming = (
        f.events.lazy()
        .filter(pl.col("visible"))
        .group_by("gx")
        .agg(all_priming=(pl.col("data") == "").all())
        .collect()
    )
    x_end = f.exchanges.select(pl.col("gx").alias("resumed_gx"), pl.col("end_reason").alias("prev_end"), pl.col("end_by").alias("prev_by"))
    return (
        b.select("gx", "resumed_gx", "revision")
        .join(retry_sent.with_columns(retry=pl.lit(True)), on="resumed_gx", how="left")
        .join(only_priming, on="gx", how="left")
        .join(x_end, on="resumed_gx", how="left")
        .select(
            "gx",
            polling=(pl.col("revision") >= POLLING_FROM).fill_null(False)
            & pl.col("retry").fill_null(False)
            & (pl.col("prev_end") == "eof")
            & (pl.col("prev_by").is_null() | (pl.col("prev_by") == "server"))
            & pl.col("all_priming").fill_null(True),
        )
    )


