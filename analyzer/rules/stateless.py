"""Rules of the protocol revisions of analyzer/signals/eras.py: a 2026-07-28 server that still mints sessions or
honours resumption, and a re-issued call it ran twice.  eras.py says which revision each session speaks
(also for the verdicts); this module turns what the stateless revisions forbid into findings."""
from __future__ import annotations

import polars as pl

from analyzer.rules.shape import finding_frame, natural_order, subject
from analyzer.signals.eras import READ_ONLY
from analyzer.signals.rpc import call_name
from analyzer.signals.streams import SSE, Frames
from analyzer.formatted import formatted


def findings(f: Frames, rev: pl.LazyFrame) -> pl.LazyFrame:
    """Sessions of the stateless revisions that still behave like the old ones, and re-issued
    calls that ran twice."""

    x = f.exchanges.join(rev, on="session", how="left", maintain_order="left").filter(pl.col("era") == "stateless")
    ref = pl.struct("source", "location")
    minted = (
        x.filter(pl.col("resp_session_id").is_not_null())
        .group_by("session", "session_id")
        .agg(pos=pl.col("pos").min(), evidence=ref.head(3), n=pl.len(), rev=pl.col("revision").first())
        .with_columns(message=formatted("a {} server minted or echoed Mcp-Session-Id on {} response(s); that revision has no sessions", pl.col("rev"), pl.col("n")),
                      subject=subject("rev"))
    )
    ev_count = f.events.group_by("gx").agg(n_ev=pl.len())
    honoured = (
        x.filter(pl.col("last_event_id").is_not_null() & pl.col("status").is_between(200, 299) & (pl.col("content_type") == SSE))
        .join(ev_count, on="gx", how="left", maintain_order="left")
        .filter(pl.col("n_ev").fill_null(0) > 0)
        .with_columns(
            message=formatted("a {} server answered a Last-Event-ID reconnect with a replayed stream; that revision has no resumption", pl.col("revision")),
            evidence=pl.concat_list(ref),
            subject=subject("revision", "last_event_id"),
        )
    )
    # the calls of stateless sessions alone get their exchange's columns (every message with its request body
    # beside it: 1M tiny messages, +130 MiB)
    calls = f.messages.join(rev, on="session", how="left", maintain_order="left").filter(
        (pl.col("era") == "stateless") & (pl.col("direction") == "client_to_server") & (pl.col("kind") == "request")
        & ~pl.col("method").is_in(READ_ONLY) & pl.col("params_digest").is_not_null()
    ).join(f.exchanges.select("gx", "end_reason", "source", "location", "request_body"), on="gx", how="left", suffix="_x", maintain_order="left")
    # (the responses to those calls' ids alone: not every response of history made unique first)
    answered = (
        f.messages.filter((pl.col("direction") == "server_to_client") & (pl.col("kind") == "response")).select("session", "rpc_id")
        .join(calls.select("session", "rpc_id"), on=["session", "rpc_id"], how="semi")
        .unique()
    )
    twice = (
        calls.join(answered, on=["session", "rpc_id"], how="semi", maintain_order="left")
        .group_by("session", "session_id", "method", "params_digest")
        .agg(n=pl.col("rpc_id").n_unique(), ids=natural_order(pl.col("rpc_id").unique()).str.join(", "), pos=pl.col("pos").min(),
             evidence=pl.struct("source", "location").head(4), name=call_name(pl.col("method"), pl.col("request_body")).first())
        .filter(pl.col("n") > 1)
        .with_columns(message=formatted("{} with the same arguments was issued under {} ids ({}) and answered each time: it ran {} times", pl.col("name"), pl.col("n"), pl.col("ids"), pl.col("n")),
                      # (not the arguments' digest: a fingerprint is printed, and a 4-digit PIN among the arguments came
                      # back from it by brute force; the call's name and ids tell the finding apart as well)
                      subject=subject("name", "ids"))
    )
    return pl.concat(
        [
            finding_frame(minted, "stateless_server_minted_session", "warning"),
            finding_frame(honoured, "stateless_server_honoured_resumption", "warning"),
            finding_frame(twice, "reissued_request_ran_twice", "critical"),
        ],
        how="vertical_relaxed",
    )
