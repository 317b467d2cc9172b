"""Every finding rule, in one place: the document layer draws the findings from here and runs no rule itself.

Two kinds.  A *reconnect rule* turns each judged reconnect (analyzer/rules/verdicts.py) into its finding:
:func:`reconnect_findings`.  A *history rule* reads the whole history (the frames, the judged reconnects,
the protocol revision of each session) and returns a lazy plan of findings in the shape of
:mod:`analyzer.rules.shape`; :data:`HISTORY` lists them in the order their findings are concatenated, each with
the finding rules of analyzer/catalog.py it reports; its name is their ``decided_by`` (tests/test_catalog.py checks
that every catalog rule is reported by exactly one entry, and that the rules of an entry share their ``decided_by``).
:func:`history_findings` collects their plans one after the other, joins their findings and reports each history
finding of a multi-hop capture once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import polars as pl

from analyzer import catalog
from analyzer.rules import calls, cursors, event_ids, reconnects, reissue, stateless, storm
from analyzer.signals.streams import Frames


@dataclass(frozen=True)
class HistoryRule:
    # (frames, reconnects, revisions, the rule's settings in the Analysis: None for a rule without) -> findings
    plan: Callable[[Frames, pl.LazyFrame, pl.LazyFrame, Any], pl.LazyFrame]
    reports: tuple[str, ...]  # the catalog's finding rules it reports
    settings: type | None = None  # a tunable rule's thresholds: a frozen dataclass with their defaults, in the rule's file

    @property
    def name(self) -> str:
        """The entry's name, as analyzer/catalog.py's ``decided_by`` gives it for the rules it reports (said there once)."""
        return catalog.FINDING[self.reports[0]].decided_by


HISTORY: tuple[HistoryRule, ...] = (
    HistoryRule(lambda f, b, rev, _: event_ids.id_order(f), ("id_not_monotonic", "id_repeated")),
    HistoryRule(lambda f, b, rev, _: event_ids.digest_conflicts(f, b),
                ("digest_conflict", "id_reused_across_streams")),
    HistoryRule(lambda f, b, rev, _: cursors.cursor_claims(b), ("stale_last_event_id", "unknown_last_event_id")),
    HistoryRule(lambda f, b, rev, _: cursors.cross_session(f, b),
                ("last_event_id_of_other_session", "cross_session_replay")),
    HistoryRule(lambda f, b, rev, _: cursors.ts_get_stream(b), ("get_stream_resume_lost",)),
    HistoryRule(lambda f, b, rev, _: calls.findings(f),
                ("request_unanswered", "duplicate_response", "duplicate_side_effect", "duplicate_server_request",
                 "response_without_request", "cross_stream_replay")),
    HistoryRule(lambda f, b, rev, _: stateless.findings(f, rev),
                ("stateless_server_minted_session", "stateless_server_honoured_resumption", "reissued_request_ran_twice")),
    HistoryRule(lambda f, b, rev, _: reissue.findings(f, rev), ("reissued_after_break",)),
    HistoryRule(lambda f, b, rev, s: storm.findings(b, s), ("reconnect_storm",), storm.Storm),
)

TUNABLE = {rule.reports[0]: rule.settings for rule in HISTORY if rule.settings is not None}  # (a tunable rule reports one rule)


@dataclass(frozen=True, init=False)
class Analysis:
    """The rules' thresholds, one frozen value beside :class:`~analyzer.ingest.reading.Reading`, carried to every
    engine (the single pass, a store's partitions, Spark's workers).

    Each tunable rule keeps its thresholds in its own file, as a frozen dataclass whose defaults are the rule's,
    named in its registry line (``settings``); ``Analysis(reconnect_storm={"reconnects": 8})`` (or the settings
    value itself) tunes it, and a rule not named keeps its defaults.  A name or a field no rule has is a
    ValueError, never a threshold silently unused."""

    tuned: tuple[tuple[str, Any], ...]  # (rule, its settings), sorted: only the rules given

    def __init__(self, **settings: Any) -> None:
        tuned = []
        for rule, value in sorted(settings.items()):
            kind = TUNABLE.get(rule)
            if kind is None:
                raise ValueError(f"no tunable rule {rule!r}: the tunable rules are {', '.join(sorted(TUNABLE)) or 'none'}")
            if isinstance(value, dict):
                try:
                    value = kind(**value)
                except TypeError as exc:
                    raise ValueError(f"{rule}: {exc}") from None
            elif not isinstance(value, kind):
                raise ValueError(f"{rule}: give a {kind.__name__} or a dict of its fields, not {type(value).__name__}")
            tuned.append((rule, value))
        object.__setattr__(self, "tuned", tuple(tuned))

    def of(self, rule: str) -> Any:
        """The settings of ``rule``: as given, else its defaults."""
        return dict(self.tuned).get(rule) or TUNABLE[rule]()


# the reconnect rule reports the verdicts' findings (named by the verdict) and this one
RECONNECT_REPORTS = reconnects.WRONG_RESULT_RULES


def reconnect_findings(rows: pl.LazyFrame) -> pl.LazyFrame:
    """The findings of the judged reconnects (one per run of retries) and of their wrong results: rules/reconnects.py."""
    return reconnects.findings(rows)


def history_findings(f: Frames, b: pl.LazyFrame, rev: pl.LazyFrame, analysis: Analysis | None = None) -> pl.LazyFrame:
    """Every history rule's findings, in history order, each finding of a multi-hop capture once; a tunable rule
    runs with its settings in ``analysis`` (None: every rule's defaults).

    Each rule's plan is collected on its own, one after the other, and their few findings are joined: one plan
    of all of them ran the rules side by side, with every rule's transient tables and every shared subplan
    held at once (500k tiny POST exchanges: +354 MiB; one after the other, +186 MiB, in the same time)."""
    analysis = analysis or Analysis()
    found = [rule.plan(f, b, rev, rule.settings and analysis.of(rule.reports[0])).collect() for rule in HISTORY]
    # (a stable sort: the findings of one place in history stay in the rules' order, run after run)
    plan = pl.concat([one.lazy() for one in found], how="vertical_relaxed").sort("pos", maintain_order=True)
    return once_per_capture(f, plan)


def once_per_capture(f: Frames, hist: pl.LazyFrame) -> pl.LazyFrame:
    """History findings of a multi-hop capture, once: each hop is its own view (views.hops), and
    a per-stream counter or an unanswered request shows on every hop.  A rule reported on the
    hop nearest the client (the one whose exchanges start first) is not repeated for the other
    hops of the same capture and session; what only another hop shows is kept."""
    views_ = (
        f.exchanges.filter(pl.col("view") != pl.col("source"))
        .group_by("session")
        .agg(pl.col("source").first(), pl.col("session_id").first(), first=pl.col("pos").min())
        .with_columns(primary=pl.col("first") == pl.col("first").min().over("source", "session_id"))
    )
    tagged = hist.join(views_.select("session", pl.col("source").alias("_src"), "primary"), on="session", how="left", maintain_order="left")
    # one window instead of a join of the plan with itself (which would run every rule twice)
    on_primary = pl.col("primary").fill_null(False).any().over("rule", "_src", "session_id")
    return tagged.filter(pl.col("primary").is_null() | pl.col("primary") | ~on_primary).drop("_src", "primary")
