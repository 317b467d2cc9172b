"""The options of a run, as one value: what the command line was asked, checked, before anything is read.

:class:`Options` is everything ``mcp-sse-audit analyze`` takes; :func:`analyzer.run.run` is the one
run every engine goes through.  How the inputs are read (format, redaction, ports, limits, the TLS key
log, the progress meter) is its :class:`~analyzer.ingest.reading.Reading`, handed down to every reader:
no option lives in a module global.  :func:`key_log` reads ``--tls-keylog`` into that value.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Callable

from analyzer import window as windows
from analyzer.decode import tls
from analyzer.errors import AuditError
from analyzer.ingest import inputs
from analyzer.ingest.reading import Reading
from analyzer.limits import Limits
from analyzer.rules.registry import Analysis

# key log text kept, besides the lines of the named captures' client randoms, when a capture comes from standard
# input or a pipe (no pre-pass tells which lines it needs): the newest lines, and a warning says what was left out
MAX_KEYLOG = 1 << 28


@dataclass(frozen=True)
class Outputs:
    """Where the run writes (``-``: standard output; None: not written)."""

    json: str | None = None
    json_lines: str | None = None
    html: str | None = None
    junit: str | None = None
    github: bool = False  # GitHub Actions annotations, on standard output
    metrics: str | None = None  # OpenMetrics text for node_exporter's textfile collector (analyzer/document/metrics.py)

    def to_stdout(self) -> list[str]:
        """The options that write to standard output."""
        return [name for name, out in (("--json", self.json), ("--json-lines", self.json_lines), ("--html", self.html),
                                       ("--junit", self.junit), ("--github-annotations", "-" if self.github else None),
                                       ("--metrics", self.metrics)) if out == "-"]

    def whole_document(self) -> bool:
        """Does an output need the whole document in memory?  The report, JUnit, the annotations and the metrics do
        (the metrics are made from the finished document, per host and rule: the spilling writer never holds one,
        and a second, streaming count of the same numbers could drift from it); the JSON and JSON Lines can be
        written partition by partition (``--partitions N``)."""
        from analyzer.outputs import is_folder  # (--json-lines DIR/: one file per kind, written from the whole document)

        return bool(self.html or self.junit or self.github or self.metrics or is_folder(self.json_lines))

    def pointed(self) -> tuple[str | None, ...]:
        """The outputs the terminal summary points to for what it does not show."""
        return (self.json, self.json_lines, self.html)


@dataclass(frozen=True)
class Options:
    """One ``analyze`` run.  ``store``: a store to analyze (PATHs are ingested into it first); ``since`` /
    ``until``: :mod:`analyzer.window`'s bounds; ``sessions``: with a store, only these ids; ``partitions``:
    a store analyzed in N groups (written as it goes unless :meth:`Outputs.whole_document`); ``engine``:
    ``local`` or ``spark``; ``fail_on``: the least severity that fails the run; ``baseline``: an earlier
    run's findings file; ``quiet``: no summary; ``progress``: phase lines (None: none); ``now``: what a duration
    of ``since``/``until`` counts back from (None: the clock when the run starts)."""

    paths: tuple[str, ...] = ()
    store: str | None = None
    since: windows.When | None = None
    until: windows.When | None = None
    sessions: tuple[str, ...] = ()
    partitions: int = 1
    engine: str = "local"
    spark_master: str = "local[2]"
    outputs: Outputs = Outputs()
    fail_on: str = "error"
    baseline: str | None = None
    reading: Reading = field(default_factory=Reading)
    quiet: bool = False
    progress: Callable[[str], None] | None = None
    now: datetime | None = None
    audit: str | None = None  # with a store: judge what this audit has not judged yet (analyzer.scale.audits)
    analysis: Analysis = field(default_factory=Analysis)  # the rules' thresholds, for every engine

    def window(self) -> windows.Window:
        """The window with absolute bounds, resolved once for the whole run (every engine gets the same times)."""
        return windows.Window(self.since, self.until).resolve(self.now)

    def reads_store(self) -> bool:
        """Does the analysis read a store?  ``--store``, and Spark, which analyzes PATHs through a temporary store.
        Its document then carries the trend over the store's days (:mod:`analyzer.document.trend`)."""
        return self.store is not None or self.engine == "spark"

    def problem(self) -> str | None:
        """What makes these options a usage error (exit 2, before anything is read), or None."""
        if not self.paths and not self.store:
            return "give PATHs to analyze, or --store DIR"
        if self.engine == "spark" and self.partitions > 1:
            return "--partitions is for --engine local; Spark makes one group per set of inputs sharing session ids"
        if self.audit is not None:
            from analyzer.scale.audits import check_name

            if not self.store:
                return "--audit records what it judged in a store: add --store DIR (mcp-sse-audit ingest fills it)"
            if self.since is not None or self.until is not None or self.sessions:
                return ("--audit judges every session the inputs new to it touch, whatever their times: drop --since/--until/--session "
                        "(a window would leave late captures unjudged and record them as judged)")
            if self.partitions > 1 or self.engine != "local":
                return "--audit runs with --engine local and one partition"
            bad = check_name(self.audit)
            if bad:
                return bad
        if self.sessions and not self.store:
            return "--session narrows a store: add --store DIR (--since and --until work on PATHs too)"
        if self.now is not None and not (isinstance(self.since, timedelta) or isinstance(self.until, timedelta)):
            return "--now sets what a duration of --since/--until counts back from: give --since or --until as a duration (24h)"
        empty = windows.empty(self.since, self.until)  # two times in the wrong order
        if empty:
            return empty
        if self.partitions > 1 and not self.store:
            return "--partitions splits a store: ingest first (mcp-sse-audit ingest PATH... --store DIR), or add --store DIR"
        if (self.store or self.engine == "spark") and any(inputs.is_stream(p) for p in self.paths):
            return ("standard input or a pipe cannot go into a store (it knows inputs by the sha256 of a file): "
                    "save it to a file and name the file")
        stdout = self.outputs.to_stdout()
        if len(stdout) > 1:
            return f"{' and '.join(stdout)} both write to standard output ('-'): send all but one to a file"
        return None


def key_log(files: tuple[str, ...], paths: tuple[str, ...], warn: Callable[[str], None], bound: int | None = None,
            limits: Limits = Limits()) -> tls.KeyLog:
    """The ``--tls-keylog`` files read into one key log, keeping only the lines the captures among ``paths``
    need (a pre-pass over their ClientHellos), so a key log of any size is read in bounded memory.  Without a
    full pre-pass (a capture on standard input or a pipe) the newest ``bound`` bytes of other lines are kept
    too (``bound``: None, :data:`MAX_KEYLOG`), and ``warn`` says what was left out.  The captures are opened within
    ``limits`` (a ``.gz`` bomb stops where the reader would stop it).  A key log that cannot be read is an :class:`AuditError`."""
    keys = tls.KeyLog()
    if not files:
        return keys
    randoms, why = _client_randoms(paths, Reading(limits=limits))
    kept = (MAX_KEYLOG if bound is None else bound) if why else 0
    for path in files:
        try:
            dropped = keys.read_file(path, frozenset(randoms), kept)
        except OSError as exc:
            raise AuditError(f"--tls-keylog {path}: cannot read it ({exc.strerror or exc}); give the file SSLKEYLOGFILE named") from None
        if dropped:
            warn(f"warning: --tls-keylog {path}: cut to its newest {_size(kept)}, the most kept when {' and '.join(why)} "
                 f"(no pre-pass can tell which keys it needs): the oldest {_size(dropped)} of key log lines were not "
                 "kept, and connections whose keys only they hold get tls_no_key. To avoid it, name the capture file "
                 "instead: then only the keys the captures need are kept, whatever the key log's size")
    if not len(keys):
        warn(f"warning: --tls-keylog {', '.join(files)}: no TLS secret in it (expected lines like "
             "'CLIENT_RANDOM <hex> <hex>' written by SSLKEYLOGFILE); TLS connections stay encrypted")
    elif keys.malformed:
        warn(f"warning: --tls-keylog: {keys.malformed} line(s) are not 'LABEL CLIENT_RANDOM SECRET' in hex and were skipped")
    return keys


def _client_randoms(paths, reading: Reading) -> tuple[set[bytes], list[str]]:
    """The client randoms of the ClientHellos in the captures (a pre-pass over their bytes, so that only the key
    log lines they need are kept), and why the pre-pass cannot tell them all (a capture on standard input or a
    pipe is read once, by the reader)."""
    randoms: set[bytes] = set()
    why = []
    for path in inputs.collect(list(paths)).files:
        if inputs.is_stream(path):
            why.append("a capture comes from " + ("standard input" if path in inputs.STDIN_NAMES else f"the pipe {path}"))
            continue
        try:
            with inputs.open_input(path, reading) as fh:
                if fh.read(4) in inputs.PCAP_MAGIC:
                    tls.client_randoms(fh, into=randoms)
        except (AuditError, OSError, EOFError, ValueError, zlib.error):
            continue  # the reader names what is wrong with it
        if len(randoms) >= tls.PREPASS_LIMIT:
            why.append(f"the captures hold more than {tls.PREPASS_LIMIT} TLS ClientHellos")
            break
    return randoms, why


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}" if not n % (1 << shift) else f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"
