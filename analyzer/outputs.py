"""The files a run writes: the findings JSON, JSON Lines, the HTML report, JUnit XML, GitHub annotations and the
OpenMetrics text.

Each is written whole or not at all (a temporary file beside the target, fsync'd and renamed over it: a full
disk leaves no truncated file, and node_exporter's textfile collector, which reads only ``*.prom`` files, never
sees a half-written one), or to standard output for ``-`` (a reader that goes away is an error, never exit 0
with the output cut).  What goes in them is the document's (:mod:`analyzer.document`) and the
report's (:mod:`analyzer.report`); this module only writes.
"""
from __future__ import annotations

import io
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator

from analyzer import report
from analyzer.document import build as findings, ci, metrics, records
from analyzer.errors import AuditError

PRETTY_UP_TO = 5_000  # exchanges; past that the JSON is written compact (the indenting encoder is pure Python, and holds
# the document as dicts: 10,000 reconnects of one stream peaked at 599 MiB indented, 410 MiB compact: bench/many_streams.py)


def document_json(doc: dict) -> bytes:
    """What ``--json`` writes, in UTF-8: indented for a person when small; compact for archive runs, its large
    arrays written by Polars (:mod:`analyzer.document.records`: the same text as the C encoder's, without a
    dict per record)."""
    if doc["summary"]["exchanges"] <= PRETTY_UP_TO:
        return (json.dumps(records.plain(doc), indent=1, ensure_ascii=False) + "\n").encode("utf-8")
    return records.document_json(doc, end=b"\n")


def _document_json_to(doc: dict):
    """:func:`document_json` as a writer of a binary file (:func:`emit`): a compact document is written as it is made,
    never held whole (500k exchanges: 232 MiB of JSON, and Polars' copies of it)."""
    if doc["summary"]["exchanges"] <= PRETTY_UP_TO:
        return document_json(doc)
    return lambda out: records.write_document_json(doc, out, end=b"\n")


@dataclass(frozen=True)
class Run:
    """What the metrics say of the run itself: when it started (seconds since 1970, ``time.time()``) and the exit
    code it will end with.  It ends when the metrics are made, after every other output was written."""

    started: float
    exit_code: int | None = None


def _renderers(doc: dict, fail_on: str, run: Run) -> dict[str, tuple[str, Callable]]:
    """Each output's name (for progress lines and what standard output makes inert) and what makes its text, in the
    order they are written: the metrics come last (an output that could not be written stops the run before them,
    and a stale ``mcp_sse_audit_run_end_timestamp_seconds`` says so)."""
    return {"json": ("findings JSON", lambda: _document_json_to(doc)),
            "json_lines": ("JSON Lines", lambda: "".join(line + "\n" for line in findings.json_lines(records.plain(doc)))),
            "json_lines_folder": ("JSON Lines", lambda: {f"{name}.ndjson": "".join(line + "\n" for line in lines)
                                                        for name, lines in findings.json_lines_by_kind(records.plain(doc))}),
            "html": ("report", lambda: report.render(records.plain(doc))),
            "junit": ("JUnit XML", lambda: ci.junit_xml(records.plain(doc), fail_on)),
            "github": ("", lambda: ci.github_annotations(records.plain(doc), fail_on)),
            "metrics": ("metrics", lambda: metrics.openmetrics(doc, fail_on, run.started, time.time(), run.exit_code))}


def write_one(doc: dict, kind: str, out: str, fail_on: str = "error") -> None:
    """One output (``kind``: ``json``, ``json_lines``, ``html``, ``junit``, ``github``, ``metrics``) of ``doc`` to ``out``."""
    if kind == "json_lines" and is_folder(out):
        kind = "json_lines_folder"
    what, render = _renderers(doc, fail_on, Run(time.time()))[kind]
    _emit_to(out, render(), what)


def is_folder(out: str | None) -> bool:
    """A JSON Lines target that is a folder (one that exists, or a path ending in ``/``): one file per record kind."""
    return bool(out) and out != "-" and (out.endswith("/") or os.path.isdir(out))


def _emit_to(out: str, text, what: str) -> None:
    """``text``, or a dict of file name -> text written into the folder ``out`` (each file whole or not at all)."""
    if isinstance(text, dict):
        for name, one in text.items():
            write(os.path.join(out, name), one)
        return
    emit(out, text, what)


def write_all(doc: dict, outputs: "analyzer.options.Outputs", fail_on: str, progress: Callable[[str], None] | None,
              run: Run | None = None) -> list[str]:
    """Every output asked for, from one document; the ones the terminal summary points to, as written."""
    written = []
    folder = is_folder(outputs.json_lines)
    targets = {"json": outputs.json, "json_lines": None if folder else outputs.json_lines, "json_lines_folder": outputs.json_lines if folder else None,
               "html": outputs.html, "junit": outputs.junit, "github": "-" if outputs.github else None, "metrics": outputs.metrics}
    for kind, (what, render) in _renderers(doc, fail_on, run or Run(time.time())).items():
        out = targets[kind]
        if out:
            if progress and what:
                progress(f"writing the {what}")
            _emit_to(out, render(), what)
            if out in outputs.pointed():
                written.append(out)
    return written


# On standard output (a CI job's log) no capture text may read as a GitHub workflow command: "##[" anywhere, "::" at
# a line's start (analyzer.terminal.inert).  JSON has no "#" outside strings and starts no line with "::"; in XML the
# character reference shows the same text.  (The HTML report does it itself; the annotations are the commands.)
_INERT = {"findings JSON": (b"##[", b"#\\u0023["), "JSON Lines": (b"##[", b"#\\u0023["), "JUnit XML": (b"##[", b"#&#35;[")}
_LEADING = re.compile(rb"^([ \t]*):(?=:)", re.M)


def _inert(data: bytes, what: str) -> bytes:
    if what not in _INERT:
        return data
    old, new = _INERT[what]
    data = data.replace(old, new)
    return _LEADING.sub(rb"\1&#58;", data) if what == "JUnit XML" else data


def emit(out: str, text: str | bytes | Callable, what: str = "") -> None:
    """``text`` (or its UTF-8 bytes) to the file ``out``, or to standard output for ``-`` (``what``: which output,
    made inert for a CI log there).  ``text`` may be a writer: a function that writes the bytes to a binary file."""
    if out != "-":
        write(out, text)
        return
    if callable(text):  # (standard output is made inert as a whole: the text is made first)
        buf = io.BytesIO()
        text(buf)
        text = buf.getvalue()
        del buf
    with _stdout():
        _to_stdout(text if isinstance(text, bytes) else text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"), what)


@contextmanager
def streamed(out: str | None, what: str = "") -> Iterator[Callable[[str], None] | None]:
    """An output written piece by piece (``write(text)``), never held whole: to the file ``out``, whole or not at all
    (renamed over it, and its folder fsync'd, when the block ends without an error), or to standard output for
    ``-``, each piece made inert for a CI log (``what``: which output; a piece is a whole JSON value or line, so no
    ``##[`` straddles two) and a reader that goes away an error.  ``None``: nothing is written (None is yielded)."""
    if out is None:
        yield None
        return
    if out == "-":
        encoding, errors = sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"
        with _stdout():
            yield lambda text: _to_stdout(text.encode(encoding, errors), what, flush=False)
            sys.stdout.buffer.flush()
        return
    from analyzer.atomic import atomic_file, describe

    try:
        with atomic_file(out) as fh:
            text = io.TextIOWrapper(fh, encoding="utf-8", newline="")  # (encodes in its buffer's chunks, not piece by piece)
            yield text.write
            text.flush()
            text.detach()  # the binary file stays open for atomic_file to fsync and rename
    except OSError as exc:
        raise AuditError(f"cannot write {out}: {describe(exc)}; the file was left as it was") from None


@contextmanager
def _stdout() -> Iterator[None]:
    """Standard output's failures as errors of the run: a reader that goes away (``| head``), a full disk behind a
    redirection."""
    try:
        sys.stdout.flush()
        yield
    except BrokenPipeError:
        # the reader went away: say the output is cut, and keep Python from failing at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise AuditError("standard output was closed before the output was complete (broken pipe)") from None
    except OSError as exc:  # a full disk behind a redirection (> /dev/full, ENOSPC, a quota): exit 2, as for a file
        from analyzer.atomic import describe

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # what is still buffered cannot be written either
        raise AuditError(f"cannot write to standard output: {describe(exc)}; the output is incomplete") from None


def _to_stdout(data: bytes, what: str, flush: bool = True) -> None:
    out, view = sys.stdout.buffer, memoryview(_inert(data, what))
    # With PYTHONUNBUFFERED=1 (many container images) the buffer is the raw file, whose write() may take only
    # part of the bytes (a pipe's 64 KiB): the rest must be written again, or a reader that stops early
    # leaves the output cut with exit 0 and no word.  (A buffered writer takes all or raises.)
    while view:
        n = out.write(view)
        view = view[len(view) if n is None else n :]
    if flush:
        out.flush()


def write(path: str, text: str | bytes | Callable) -> None:
    """Whole or not at all: a temp file beside ``path``, renamed over it (a full disk leaves no truncated file).
    ``text`` may be a writer (see :func:`emit`)."""
    from analyzer.atomic import describe, write_file_atomically

    try:
        write_file_atomically(path, text if isinstance(text, bytes) or callable(text) else text.encode("utf-8"))
    except OSError as exc:
        raise AuditError(f"cannot write {path}: {describe(exc)}; the file was left as it was") from None
