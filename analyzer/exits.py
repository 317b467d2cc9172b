"""The exit policy, written once: what fails a run, and the exit codes of ``analyze`` and ``ingest``.

Every engine (the single pass, a store read whole, its partitions merged or written one by one, Spark), the
CI outputs (JUnit's failed cases, the GitHub annotations) and the Python API (:meth:`analyzer.Audit.exit_code`)
ask here, so a finding that fails the exit code is the one a JUnit case fails for.

* :data:`FAIL_LEVELS` -- ``--fail-on``: the least severity that fails the run (``never``: nothing does).
* Damaged input fails the run at ``error`` and ``warning`` (:func:`damage_fails`): an error-severity anomaly
  (an input unreadable, cut short or corrupt, a record lost) or an input named that could not be read into a
  store counts like an error finding, so a scheduled job over a broken night fails at the default.
* ``analyze`` exits 0 clean, 1 failed (:func:`fails`), 2 nothing readable, nothing in the inputs at all or nothing
  to judge (every connection TLS without a key log), 3 internal error (the command line's), 130 interrupted.
* ``ingest`` exits 0 stored, 1 some input unreadable, 2 none readable or a damaged input not repaired.
"""
from __future__ import annotations

from analyzer.catalog import SEVERITIES

FAIL_LEVELS = ("critical", "error", "warning", "never")

CLEAN = 0
FAILED = 1  # findings at or above --fail-on, or damaged input at error or warning
CANNOT = 2  # usage error, nothing readable or to judge, an output or the store that cannot be written
INTERNAL = 3  # a bug or an unexpected condition: neither findings (1) nor a usage error (2)
INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT; not 1, which means findings

_RANK = {s: i for i, s in enumerate(SEVERITIES)}

NOTHING_TO_JUDGE = ("error: nothing to judge: the capture's HTTP is encrypted ({n} TLS connection(s) without a key log); "
                    "give the key log the client wrote (SSLKEYLOGFILE) with --tls-keylog FILE")


def check(fail_on: str) -> str:
    if fail_on not in FAIL_LEVELS:
        raise ValueError(f"fail_on must be one of {', '.join(FAIL_LEVELS)}, not {fail_on!r}")
    return fail_on


def at_or_above(severity: str | None, fail_on: str) -> bool:
    """Does a finding of ``severity`` reach ``fail_on``?  (An unknown severity never does.)"""
    return check(fail_on) != "never" and _RANK.get(severity, len(_RANK)) <= _RANK[fail_on]


def damage_fails(fail_on: str) -> bool:
    """Does damaged input fail the run at ``fail_on``?  At error or warning."""
    return check(fail_on) in ("error", "warning")


def fails(summary: dict, fail_on: str) -> bool:
    """A finding at or above ``fail_on`` (with a baseline: a new one), or damaged input when :func:`damage_fails`.

    Input anomalies are not findings (they say what the capture lost, not what the server did), but an
    error-severity one counts here like an error finding.  Warning and info anomalies never fail a run.  A
    summary without ``anomalies_by_severity`` (written before it existed) is judged by its findings."""
    if check(fail_on) == "never":
        return False
    # with a baseline only the new findings count (document/baseline.py); damaged input counts all the same
    counts = summary["baseline"]["new_by_severity"] if "baseline" in summary else summary["findings_by_severity"]
    if any(counts.get(s) and at_or_above(s, fail_on) for s in SEVERITIES):
        return True
    return damage_fails(fail_on) and bool(summary.get("anomalies_by_severity", {}).get("error"))


def lost_input(unreadable, fail_on: str) -> bool:
    """Inputs named that could not go into the store fail the run as damaged input does."""
    return bool(unreadable) and damage_fails(fail_on)


def analyze(summary: dict | None, fail_on: str, encrypted: int = 0, lost: bool = False, readable: bool = True,
            hollow: bool = False) -> tuple[int, str | None]:
    """The exit code of ``analyze`` and the line that explains a 2 (None when the caller says it).

    ``readable``: some input yielded records; ``hollow``: the inputs hold no record at all (empty captures);
    ``encrypted``: TLS connections no key log decrypted (every connection encrypted is "cannot tell", never a
    clean run); ``lost``: :func:`lost_input`."""
    if not readable or hollow or summary is None:
        return CANNOT, None
    if summary.get("exchanges", 0) == 0 and encrypted:
        return CANNOT, NOTHING_TO_JUDGE.format(n=encrypted)
    return (FAILED if fails(summary, fail_on) or lost else CLEAN), None


def ingest(unreadable: int, stored: int, unrepairable: int) -> int:
    """The exit code of ``ingest``: 2 when a damaged input could not be repaired or no input was readable
    (``stored``: inputs added or already in the store), 1 when some input could not be read, else 0."""
    if unrepairable or (unreadable and not stored):
        return CANNOT
    return FAILED if unreadable else CLEAN
