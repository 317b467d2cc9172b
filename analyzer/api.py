"""The Python API: :func:`audit` reads captures (or a store) and returns an :class:`~analyzer.result.Audit`.

    import analyzer
    a = analyzer.audit("sample_logs/real-python-replica-failover.jsonl")
    a.findings.filter(pl.col("severity") == "critical")
    a.exit_code(fail_on="error")

It runs what ``mcp-sse-audit analyze`` runs (analyzer/run.py's :func:`~analyzer.run.analyze`: the single pass over
files, a store read whole or in partitions, Spark) and returns the document it makes; warnings the command line would
print are the Audit's ``notes``.  Nothing is printed and nothing is written until a ``write_*`` method is called.
"""
from __future__ import annotations

import dataclasses
import os
from datetime import datetime, timedelta
from pathlib import Path
from typing import Iterable

from analyzer import options as options_mod
from analyzer import run as runs
from analyzer import window as windows
from analyzer.ingest.reading import Reading
from analyzer.limits import Limits
from analyzer.result import Audit
from analyzer.rules.registry import Analysis
from analyzer.scale.manifest import MANIFEST

When = datetime | timedelta | str | None


def audit(paths_or_store: str | os.PathLike | Iterable[str | os.PathLike], *, since: When = None, until: When = None,
          tls_keylogs: Iterable[str | os.PathLike] = (), limits: Limits | None = None, analysis: Analysis | None = None,
          partitions: int = 1, engine: str = "local", redact: bool = True) -> Audit:
    """Analyze captures and return the :class:`~analyzer.result.Audit`.

    ``paths_or_store``: a capture file or folder (HAR, proxy JSONL, pcap/pcapng, .gz), a list of them, or a store made
    by ``mcp-sse-audit ingest`` (a folder holding its manifest, or an ``s3://``, ``gs://`` or ``file://`` URI).
    ``since``/``until``: the sessions of a window, each kept whole (a datetime, a timedelta counted back from now, or
    the command line's text: ``"24h"``, ``"2026-11-13"``).  ``tls_keylogs``: SSLKEYLOGFILE files for pcap TLS.
    ``limits``: :class:`analyzer.Limits` for hostile inputs.  ``analysis``: :class:`analyzer.Analysis`, the rules'
    thresholds.  ``partitions``, ``engine``: a store in N partitions, or on Spark (``"spark"``).  A usage error (a
    window in the wrong order, ``partitions`` without a store) is a ValueError; an input that cannot be read is in the
    Audit (``inputs``, ``anomalies``, :meth:`~analyzer.result.Audit.exit_code`), never an exception."""
    paths, store = _targets(paths_or_store)
    bounds = limits or Limits()
    notes: list[str] = []
    keys = options_mod.key_log(tuple(map(str, tls_keylogs)), paths, notes.append, limits=bounds)
    o = options_mod.Options(paths=paths, store=store, since=_when(since), until=_when(until), partitions=partitions, engine=engine,
                            reading=Reading(redact=redact, limits=bounds, keys=keys), quiet=True, analysis=analysis or Analysis())
    problem = o.problem()
    if problem:
        raise ValueError(problem)
    win = o.window()
    o = dataclasses.replace(o, since=win.since, until=win.until)
    result, unreadable = runs.analyze(o, lambda text, err=True: notes.append(text))
    return Audit(result.document, result.readable, notes, lost=bool(unreadable), store=o.reads_store())


def _targets(given) -> tuple[tuple[str, ...], str | None]:
    """(paths, store): a single store given alone is the store; anything else is captures."""
    if isinstance(given, (str, os.PathLike)):
        text = os.fspath(given)
        if text.startswith(("s3://", "gs://", "file://")) or (Path(text) / MANIFEST).is_file():
            return (), text
        return (text,), None
    return tuple(os.fspath(p) for p in given), None


def _when(value: When):
    return windows.parse(value) if isinstance(value, str) else value
