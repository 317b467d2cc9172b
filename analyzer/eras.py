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

from .streams import SSE, Frames

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
    retry_sent = f.events.filter(pl.col("retry").is_not_null()).select(pl.col("gx").alias("resumed_gx")).unique()
    only_priming = (
        f.events.filter(pl.col("visible"))
        .group_by("gx")
        .agg(all_priming=(pl.col("data") == "").all())
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


def findings(f: Frames, rev: pl.DataFrame) -> pl.DataFrame:
    """Sessions of the stateless revisions that still behave like the old ones, and re-issued
    calls that ran twice."""
    from .history import _frame

    x = f.exchanges.join(rev, on="session", how="left").filter(pl.col("era") == "stateless")
    ref = pl.struct("source", "location")
    minted = (
        x.filter(pl.col("resp_session_id").is_not_null())
        .group_by("session", "session_id")
        .agg(pos=pl.col("pos").min(), evidence=ref.head(3), n=pl.len(), rev=pl.col("revision").first())
        .with_columns(message=pl.format("a {} server minted or echoed Mcp-Session-Id on {} response(s); that revision has no sessions", pl.col("rev"), pl.col("n")))
    )
    ev_count = f.events.group_by("gx").agg(n_ev=pl.len())
    honoured = (
        x.filter(pl.col("last_event_id").is_not_null() & pl.col("status").is_between(200, 299) & (pl.col("content_type") == SSE))
        .join(ev_count, on="gx", how="left")
        .filter(pl.col("n_ev").fill_null(0) > 0)
        .with_columns(
            message=pl.format("a {} server answered a Last-Event-ID reconnect with a replayed stream; that revision has no resumption", pl.col("revision")),
            evidence=pl.concat_list(ref),
        )
    )
    m = f.messages.join(rev, on="session", how="left").join(
        f.exchanges.select("gx", "end_reason", "source", "location"), on="gx", how="left", suffix="_x"
    )
    calls = m.filter(
        (pl.col("era") == "stateless") & (pl.col("direction") == "client_to_server") & (pl.col("kind") == "request")
        & ~pl.col("method").is_in(READ_ONLY) & pl.col("params_digest").is_not_null()
    )
    answered = m.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "response")).select("session", "rpc_id").unique()
    twice = (
        calls.join(answered, on=["session", "rpc_id"], how="semi")
        .group_by("session", "session_id", "method", "params_digest")
        .agg(n=pl.col("rpc_id").n_unique(), ids=pl.col("rpc_id").unique().sort().str.join(", "), pos=pl.col("pos").min(),
             evidence=pl.struct("source", "location").head(4))
        .filter(pl.col("n") > 1)
        .with_columns(message=pl.format("{} with the same arguments was issued under {} ids ({}) and answered each time: it ran {} times", pl.col("method"), pl.col("n"), pl.col("ids"), pl.col("n")))
    )
    return pl.concat(
        [
            _frame(minted, "stateless_server_minted_session", "warning"),
            _frame(honoured, "stateless_server_honoured_resumption", "warning"),
            _frame(twice, "reissued_request_ran_twice", "critical"),
        ],
        how="vertical_relaxed",
    )
