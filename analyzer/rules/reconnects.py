"""The finding of each reconnect that was not continuous: its verdict, why, and what the client did.

A client whose resume is answered with an empty stream polls again with the same Last-Event-ID
until it gives up: the same stream, the same Last-Event-ID, the same verdict, nothing delivered in
between.  Each attempt keeps its own boundary; they make one finding that says how many attempts
and over which time span (not ten critical findings), with the worst attempt's severity and the
attempts' requests as evidence (up to ``RETRY_EVIDENCE`` records in all).
"""
from __future__ import annotations

import polars as pl

from analyzer import catalog
from analyzer.catalog import SEVERITIES
from analyzer.rules.shape import subject
from analyzer.formatted import formatted

# what a foreign answer on a resumed stream did, by the client on the wire (signals/rpc.wrong_results)
WRONG_RESULT_RULES = ("wrong_result_delivered", "foreign_response_dropped", "foreign_response_on_resume")

RETRY_EVIDENCE = 12  # evidence records of one reconnect retried many times

_REF = pl.Struct({"source": pl.String, "location": pl.String})
_REFS = pl.List(_REF)


# the columns of the boundary rows the rule reads (besides the event previews, read into ``_base`` and ``_after_n`` first)
_READ = ("session", "stream", "session_id", "boundary_id", "verdict", "severity", "reason", "rule_id", "handled_correctly",
         "next_use", "started", "_pos", "last_event_id", "first_event_id_after", "request", "wrong_result",
         "_wr_message", "_wr_rule", "_wr_severity", "_wr_refs")


def findings(rows: pl.LazyFrame) -> pl.LazyFrame:
    """One finding per run of attempts, from the document's boundary rows (document/build.py) in
    boundary order, with ``next_use``, ``_hist_refs`` and ``_pos`` beside the record's fields.

    Columns: those of ``shape.FINDING_COLS`` plus ``attempts`` and ``attempts_span``."""
    key = ["session", "stream"]

    def prev(c: str) -> pl.Expr:
        return pl.col(c).shift(1).over(key, order_by="_i")

    rank = {s: i for i, s in enumerate(SEVERITIES)}
    empty = pl.lit([], dtype=_REFS)
    last_before = pl.col("events_before").list.tail(1).list.eval(
        pl.struct(pl.element().struct.field("source"), pl.element().struct.field("location"))
    )
    first_after = pl.col("events_after").list.head(1).list.eval(
        pl.struct(pl.element().struct.field("source"), pl.element().struct.field("location"))
    )
    # the request, the connection it resumed, the last event before and the first after, every capture
    # that saw this reconnect, and the records of other captures that proved a loss
    base = pl.concat_list(
        pl.concat_list("request"),
        pl.when(pl.col("resumes").is_not_null()).then(pl.concat_list("resumes")).otherwise(empty),
        last_before.fill_null(empty),
        first_after.fill_null(empty),
        pl.col("views").fill_null(empty),
        pl.col("_hist_refs").fill_null(empty),
    ).list.unique(maintain_order=True)
    handled = (
        pl.when(pl.col("rule_id").is_in(list(catalog.CAPTURE_BLIND)))
        .then(pl.lit("the client's reaction is not judged: the capture lacks what the client received"))
        .when(pl.col("handled_correctly") == True)  # noqa: E712 (polars expression)
        .then(pl.lit("the client re-initialized before using the session again"))
        .when(pl.col("handled_correctly") == False)  # noqa: E712
        .then(formatted("the client used the old session again ({}) without re-initializing",
                        pl.col("next_use").struct.field("location").fill_null("None")))
        .otherwise(pl.lit("the capture ends before the client re-initialized or used the session again"))
    )
    # what the rule reads of the rows, the event previews (up to 400 characters of data each) made the few references
    # and counts it uses first: the filter, sort and group-by below copied every boundary's previews (60,000
    # reconnects: +240 MiB at the document's peak, bench/SCALE.md)
    # (and only for the reconnects that are not continuous, the rows that make findings: 60,000 continuous
    # reconnects made theirs for nothing, +113 MiB at the rules' peak)
    rows = rows.with_columns(_i=pl.int_range(pl.len()))
    found = rows.filter(pl.col("verdict") != "continuous").select("_i", _base=base)
    rows = rows.select(*_READ, "_i", _after_n=pl.col("events_after").list.len()).join(found, on="_i", how="left", maintain_order="left")
    g = (
        rows
        .with_columns(
            # an attempt again: the previous reconnect of this stream had the same verdict and
            # Last-Event-ID and delivered nothing
            _retry=(pl.col("verdict") != "continuous")
            & (prev("verdict") == pl.col("verdict")).fill_null(False)
            & prev("last_event_id").eq_missing(pl.col("last_event_id"))
            & (prev("_after_n") == 0).fill_null(False),
            _rank=pl.col("severity").replace_strict(rank, default=None, return_dtype=pl.Int32),
        )
        .with_columns(_run=(~pl.col("_retry")).cum_sum().over(key, order_by="_i"))
        .filter(pl.col("verdict") != "continuous")
        .sort("_i")
    )
    runs = g.group_by(*key, "_run", maintain_order=True).agg(
        *(pl.col(c).first() for c in ("verdict", "session_id", "boundary_id", "reason", "handled_correctly", "next_use", "started", "_pos",
                                      "last_event_id", "first_event_id_after", "rule_id")),
        _base=pl.col("_base").first(),
        _requests=pl.col("request").slice(1),
        attempts=pl.len().cast(pl.Int64),
        _last_started=pl.col("started").last(),
        _worst=pl.col("_rank").min(),
    )
    sev = pl.col("_worst").replace_strict({i: s for s, i in rank.items()}, return_dtype=pl.String)
    evidence = pl.concat_list("_base", "_requests").list.unique(maintain_order=True).list.head(
        pl.max_horizontal(pl.col("_base").list.len(), pl.lit(RETRY_EVIDENCE))
    )
    tried = formatted(
        " The client tried this reconnect {} times with the same Last-Event-ID from {} to {}, and nothing was delivered in between.",
        pl.col("attempts"), pl.col("started").fill_null("None"), pl.col("_last_started").fill_null("None"),
    )
    per_run = runs.select(
        rule=pl.col("verdict"),
        severity=sev,
        session=pl.col("session"),
        session_id=pl.col("session_id"),
        boundary=pl.col("boundary_id"),
        message=formatted("{}; {}.", pl.col("reason"), handled)
        + pl.when(pl.col("attempts") > 1).then(tried).otherwise(pl.lit("")),
        effect=pl.col("verdict").replace_strict({v: catalog.effect(v) for v in catalog.VERDICT_ORDER if v != "continuous"},
                                                default=None, return_dtype=pl.String),
        evidence=evidence,
        pos=pl.col("_pos"),
        attempts=pl.col("attempts"),
        attempts_span=pl.concat_list(pl.col("started"), pl.col("_last_started")),
        subject=subject("last_event_id", "first_event_id_after"),
    )
    # another call's answer handed to the call the resumed stream was opened for (signals/rpc.wrong_results):
    # its own finding, whatever the verdict (the ids of a store keyed without the session even look continuous)
    wrong = rows.filter(pl.col("_wr_message").is_not_null()).select(
        rule=pl.col("_wr_rule"),
        severity=pl.col("_wr_severity"),
        session=pl.col("session"),
        session_id=pl.col("session_id"),
        boundary=pl.col("boundary_id"),
        message=pl.col("_wr_message"),
        effect=pl.col("_wr_rule").replace_strict({r: catalog.FINDING[r].effect for r in WRONG_RESULT_RULES}, return_dtype=pl.String),
        evidence=pl.col("_wr_refs"),
        pos=pl.col("_pos"),
        attempts=pl.lit(1, dtype=pl.Int64),
        attempts_span=pl.concat_list(pl.col("started"), pl.col("started")),
        subject=subject(pl.col("wrong_result").struct.field("call"), pl.col("wrong_result").struct.field("got")),
    )
    return pl.concat([wrong, per_run], how="vertical_relaxed")
