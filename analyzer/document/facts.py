"""The run's facts in words, defined once for every output: the terminal summary, the HTML report and JUnit
say the same counts in the same words, so two of them cannot count one thing two ways.

Each count is the findings document's (its ``summary``, made in :mod:`analyzer.document.assemble`); the
outputs read it from there and word it with the functions here:

* **inputs** -- the inputs the analysis read (the rows of ``inputs[]``; over a store, the stored inputs it
  read); **unreadable** -- those of them nothing could be read from (their row has an ``error``: see
  :func:`unread`); **skipped** -- the files passed over as no capture (``skipped[]``: a name that is no
  capture's in a walked folder, a walked ``.json`` or JSON Lines file that is no capture, a FIFO or device);
* the baseline's **new, known, gone** (``summary.baseline``) -- with ``--baseline`` they lead every output
  (:func:`baseline_headline`), and only the new findings set the exit code and the colour of the report.

Unreadable or read with 0 records (decided here, for every engine):

* an input is **unreadable** when nothing could be read from what it holds: it cannot be opened or
  decompressed, it is no capture (JSON that is neither HAR nor proxy JSONL), or it held records and every one
  was rejected (a HAR whose only entry has no ``response``).  Its row's ``error`` says why, it counts in
  ``inputs_unreadable``, the command names it on stderr (``error: PATH: why``), and it is lost input for
  ``--fail-on error`` and ``warning``;
* an input is **read, with 0 records** when it holds nothing to read: an empty or blank file, a HAR with no
  entries, a JSONL log of blank lines, a pcap with its header only.  Nothing in it was lost: it has an
  ``input_empty`` warning, the command says so on stderr (``warning: PATH: ...``), and it fails nothing.
"""
from __future__ import annotations


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 reconnect``, ``2 reconnects``; ``many``: the plural when it is not ``word + "s"`` (``anomalies``)."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def unread(records: int, rejected: int) -> str | None:
    """Why an input that opened counts as unreadable all the same: it held records and each one was rejected
    (its anomalies say why, record by record).  None: something was read from it, or it held nothing."""
    if records and rejected >= records:
        return (f"no record could be read: {'its one record was' if records == 1 else f'all {records} of its records were'} "
                "rejected (its anomalies say why)")
    return None


def skipped(doc: dict) -> int:
    """The files the run passed over (``summary.inputs_skipped``; a document written before it: ``skipped[]``)."""
    s = doc.get("summary") or {}
    return s["inputs_skipped"] if "inputs_skipped" in s else len(doc.get("skipped") or [])


def input_counts(doc: dict) -> list[tuple[str, int]]:
    """What the inputs gave, each count with its label, in the order every output shows them."""
    s = doc.get("summary") or {}
    return [("records", s.get("records", 0)), ("rejected", s.get("rejected", 0)),
            ("unreadable", s.get("inputs_unreadable", 0)), ("skipped", skipped(doc))]


def inputs_line(doc: dict) -> str:
    """``106 (6335 records, 0 rejected, 0 unreadable, 29 skipped)``: the inputs as the terminal and the report
    give them (a file skipped is no input: it is counted beside them)."""
    s = doc.get("summary") or {}
    return f"{s.get('inputs', 0)} (" + ", ".join(f"{n} {label}" for label, n in input_counts(doc)) + ")"


def baseline_headline(baseline: dict) -> str:
    """``2 new (15 known, 1 gone)``: what every output leads with when the run has a baseline."""
    return f"{baseline.get('new', 0)} new ({baseline.get('known', 0)} known, {baseline.get('gone', 0)} gone)"
