"""``--baseline PREVIOUS.json``: alert on what is new, as Semgrep, ruff and CodeQL baselines do.

A scheduled audit that fails every night on the same known finding gets switched off.  With a baseline
(the findings JSON or JSON Lines of an earlier run), every finding is marked ``new`` or ``known`` by its
``fingerprint`` (:func:`analyzer.document.fingerprint`: content, not position), the summary says how many are
new, known and gone (in the baseline, not found now), and only the new ones count for ``--fail-on`` and the
exit code (:func:`analyzer.exits.fails`).

Matching is by set: a fingerprint in the baseline makes every finding with it known.  (Two findings share one
only when they are the same thing seen twice, e.g. the HAR and the proxy log of a stateless client's call,
which no session id ties together.)
"""
from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from analyzer.catalog import SEVERITIES
from analyzer.errors import AuditError

GONE_LISTED = 100  # findings of the baseline not found now, listed in the summary (all are counted)
BRIEF = ("fingerprint", "rule", "severity", "session_id", "time", "message")


class Baseline:
    """The fingerprints of an earlier run's findings, and the tally of this run's against them."""

    def __init__(self, source: str, findings: list[dict], made: str | None = None, version: str | None = None,
                 missing: bool = False) -> None:
        self.source = source
        self.made = made
        self.version = version
        self.missing = missing  # no such file yet: a first run, every finding new
        self.old: dict[str, dict] = {}
        for f in findings:
            self.old.setdefault(f["fingerprint"], {k: f.get(k) for k in BRIEF})
        self.seen: set[str] = set()
        self.known = 0
        self.new_by_severity = dict.fromkeys(SEVERITIES, 0)

    def status(self, finding: dict) -> str:
        return "known" if finding["fingerprint"] in self.old else "new"

    def count(self, finding: dict) -> str:
        """Tally one finding of this run (each once) and say what it is."""
        status = self.status(finding)
        self.seen.add(finding["fingerprint"])
        if status == "known":
            self.known += 1
        else:
            self.new_by_severity[finding["severity"]] += 1
        return status

    def summary(self, judged: set[str] | None = None) -> dict:
        """The tally.  ``judged``: when the run judged only some sessions (a window, an incremental audit), the
        session ids it judged: a baseline finding of another session is ``not_judged``, not gone (it may well
        still be there), and a sessionless one too (no session ties it to this run)."""
        unseen = [b for fp, b in self.old.items() if fp not in self.seen]
        gone = [b for b in unseen if judged is None or b.get("session_id") in judged]
        gone.sort(key=lambda b: (SEVERITIES.index(b["severity"]) if b.get("severity") in SEVERITIES else 9, b.get("time") or "", b["fingerprint"]))
        out = {
            "source": self.source,
            "generated_at": self.made,
            "new": sum(self.new_by_severity.values()),
            "known": self.known,
            "gone": len(gone),
            "new_by_severity": dict(self.new_by_severity),
            "gone_findings": gone[:GONE_LISTED],
        }
        if judged is not None:
            out["not_judged"] = len(unseen) - len(gone)
        if self.missing:
            out["missing"] = True
        return out


def judged_sessions(doc: dict) -> set[str] | None:
    """The session ids a narrowed run judged (a window or an incremental audit), None for a run that judged all
    its inputs."""
    s = doc["summary"]
    if not (s.get("window") or s.get("audit")):
        return None
    return {x["session_id"] for x in doc.get("sessions") or () if x.get("session_id")}


def apply(doc: dict, base: Baseline) -> None:
    """Mark the document's findings ``new`` or ``known`` and put the tally in its summary (in place)."""
    for f in doc["findings"]:
        f["baseline"] = base.count(f)
    doc["summary"]["baseline"] = base.summary(judged_sessions(doc))


def load(path: str) -> Baseline:
    """A findings JSON (``--json``) or JSON Lines (``--json-lines``) of an earlier run, or a baseline ``accept``
    wrote; a clear error otherwise.  No file at all (not even a dangling link) is a first run: an empty baseline
    marked ``missing``, every finding new."""
    if not os.path.lexists(path):
        return Baseline(path, [], missing=True)
    got = read(path, "--baseline")
    return Baseline(path, got.findings, got.head.get("generated_at"), got.version)


@dataclass
class Read:
    """A findings document as a baseline needs it: its top (summary line), findings and judged session ids."""

    head: dict
    findings: list[dict]
    sessions: list[str]
    version: str | None


def _text(path: str, what: str, fix: str) -> str:
    """The file's text, read within :data:`MAX_BYTES`: a regular file only (a FIFO would block the run forever, a
    link to ``/dev/zero`` would fill the memory), a UTF-8 byte order mark dropped (Windows editors write one)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise AuditError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AuditError(f"{what} {path}: not a regular file (a device, a pipe or a socket); {fix}")
        try:
            data = fh.read(MAX_BYTES + 1)
        except OSError as exc:
            raise AuditError(f"{what} {path}: cannot read it ({exc.strerror or exc})") from None
    if len(data) > MAX_BYTES:
        raise AuditError(f"{what} {path}: larger than {MAX_BYTES >> 20} MiB, more than any findings file of this tool; {fix}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise AuditError(f"{what} {path}: not a findings JSON (not UTF-8 text); {fix}") from None


def read(path: str, what: str) -> Read:
    """A findings JSON or JSON Lines (or a baseline ``accept`` wrote) at ``path``; ``what`` names it in errors.
    Hostile content is refused or made harmless: nesting too deep or numbers too long for the parser are "not a
    findings document", each finding is checked field by field (:func:`_checked`)."""
    fix = "give a file `mcp-sse-audit analyze ... --json FILE` (or `mcp-sse-audit accept`) wrote"
    text = _text(path, what, fix)
    got = None
    try:
        doc = json.loads(text, parse_constant=_no_constant)
        if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
            sessions = doc.get("sessions") if isinstance(doc.get("sessions"), list) else []
            got = Read(doc, doc["findings"], [x.get("session_id") for x in sessions if isinstance(x, dict)], None)
    except json.JSONDecodeError:
        got = _json_lines(text)
    except (RecursionError, ValueError):  # 100k-deep nesting; a 5,000-digit integer (Python's int limit); NaN
        got = None
    if got is None or not (isinstance(got.head.get("tool"), dict) and got.head["tool"].get("name") == "mcp-sse-audit"):
        raise AuditError(f"{what} {path}: not a findings document of mcp-sse-audit (no tool and findings at its top); {fix}")
    version = got.head["tool"].get("version")
    got.version = version if isinstance(version, str) else None
    if not all(isinstance(f, dict) and isinstance(f.get("fingerprint"), str) and f.get("severity") in SEVERITIES for f in got.findings):
        raise AuditError(f"{what} {path}: its findings have no fingerprints (written by mcp-sse-audit {_clean(got.version)}, before fingerprints "
                         f"existed); make a new one with this version: mcp-sse-audit analyze ... --json {path}")
    checked = [_checked(f) for f in got.findings]
    bad = next((f for f, c in zip(got.findings, checked) if c is None), None)
    if bad is not None:
        raise AuditError(f"{what} {path}: a finding is not as this tool writes it (fingerprint {_clean(bad.get('fingerprint'))[:40]!r}: "
                         f"24 hex digits, a rule name, a time or null); {fix}")
    got.findings = checked
    if not isinstance(got.head.get("generated_at"), (str, type(None))) or not _TIME.fullmatch(got.head.get("generated_at") or "2000-01-01T00:00:00Z"):
        got.head["generated_at"] = None
    return got


MAX_BYTES = 1 << 30  # a findings file larger than this is not one (the tool caps what it writes well below)
_FP = re.compile(r"[0-9a-f]{24}")
_RULE = re.compile(r"[a-z][a-z0-9_]{0,79}")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z")


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _clean(value) -> str:
    """A string as it may be shown again: lone surrogates replaced (they cannot be written as UTF-8)."""
    return str(value).encode("utf-8", "replace").decode("utf-8")


def _checked(f: dict) -> dict | None:
    """A baseline finding reduced to :data:`BRIEF`, every value of the type and shape this tool writes, its message
    redacted again and cut to 2,000 characters (a baseline is input: it may come from anywhere); None when its
    fingerprint, rule or time is not one this tool writes."""
    from analyzer import redact

    fp, rule, time_, sid, msg = (f.get(k) for k in ("fingerprint", "rule", "time", "session_id", "message"))
    if not (isinstance(fp, str) and _FP.fullmatch(fp) and isinstance(rule, str) and _RULE.fullmatch(rule)):
        return None
    if time_ is not None and not (isinstance(time_, str) and _TIME.fullmatch(time_)):
        return None
    sid = _clean(sid)[:1000] if isinstance(sid, str) else None
    msg = redact.text(_clean(msg)[:2000]) if isinstance(msg, str) else None
    return {"fingerprint": fp, "rule": rule, "severity": f["severity"], "session_id": sid, "time": time_, "message": msg}


def _json_lines(text: str) -> Read | None:
    head, findings, sessions = None, [], []
    # records end at "\n" only: U+2028, U+2029, U+0085 inside a string are not line ends (str.splitlines would cut there)
    for line in text.split("\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line, parse_constant=_no_constant)
        except (json.JSONDecodeError, RecursionError, ValueError):
            return None
        if not isinstance(rec, dict):
            return None
        if rec.get("type") == "summary":
            head = rec
        elif rec.get("type") == "finding":
            findings.append(rec)
        elif rec.get("type") == "session":
            sessions.append(rec.get("session_id"))
    return None if head is None else Read(head, findings, sessions, None)


@dataclass
class Accepted:
    """What ``accept`` did: findings taken from the run, kept from the old baseline, dropped as gone."""

    taken: int
    kept: int
    dropped: int
    created: bool


def accept(findings_path: str, baseline_path: str, generated_at: str, write) -> Accepted:
    """Make ``baseline_path`` accept the findings of the run ``findings_path`` wrote (its ``--json`` or
    ``--json-lines``), written whole or not at all by ``write(path, bytes)``.

    A run that judged every session of its inputs replaces the baseline.  A run that judged only some (a window,
    an incremental ``--audit``) replaces the baseline's findings of the sessions it judged and keeps the others:
    tonight's audit of the new sessions must not forget what earlier nights accepted.  Sessionless findings of
    the old baseline are kept (no session says whether this run saw them) unless the run replaced everything."""
    run = read(findings_path, "FINDINGS")
    old = load(baseline_path)
    summary = run.head.get("summary") if isinstance(run.head.get("summary"), dict) else {}
    narrowed = bool(summary.get("window") or summary.get("audit"))
    judged = {s for s in run.sessions if s}
    have = {f["fingerprint"] for f in run.findings}
    brief = [_brief(f) for f in run.findings]
    kept = [b for fp, b in old.old.items() if narrowed and fp not in have and b.get("session_id") not in judged]
    from analyzer import __version__

    out = {
        "schema_version": "1",
        "tool": {"name": "mcp-sse-audit", "version": __version__},
        "generated_at": generated_at,
        "baseline": {"accepted_from": findings_path, "accepted_generated_at": run.head.get("generated_at"),
                     "findings": len(brief) + len(kept)},
        "findings": sorted(brief + kept, key=lambda b: (b.get("time") or "", b["fingerprint"])),
    }
    write(baseline_path, (json.dumps(out, indent=1, ensure_ascii=True) + "\n").encode())
    return Accepted(len(brief), len(kept), len(old.old) - len(kept) - len(have & set(old.old)), old.missing)


def _brief(f: dict) -> dict:
    return {k: f.get(k) for k in BRIEF}
