"""``--baseline PREVIOUS.json``: alert on what is new, as Semgrep, ruff and CodeQL baselines do.

A scheduled audit that fails every night on the same known finding gets switched off.  With a baseline
(the findings JSON or JSON Lines of an earlier run), every finding is marked ``new`` or ``known`` by its
``fingerprint`` (:func:`analyzer.document.fingerprint`: content, not position), the summary says how many are
new, known and gone (in the baseline, not found now), and only the new ones count for ``--fail-on`` and the
exit code (:func:`analyzer.pipeline.fails`).

Matching is by set: a fingerprint in the baseline makes every finding with it known.  (Two findings share one
only when they are the same thing seen twice, e.g. the HAR and the proxy log of a stateless client's call,
which no session id ties together.)
"""
from __future__ import annotations

import json
from pathlib import Path

from analyzer.errors import AuditError

SEVERITIES = ("critical", "error", "warning", "info")
GONE_LISTED = 100  # findings of the baseline not found now, listed in the summary (all are counted)
BRIEF = ("fingerprint", "rule", "severity", "session_id", "time", "message")


class Baseline:
    """The fingerprints of an earlier run's findings, and the tally of this run's against them."""

    def __init__(self, source: str, findings: list[dict], made: str | None = None, version: str | None = None) -> None:
        self.source = source
        self.made = made
        self.version = version
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

    def summary(self) -> dict:
        gone = sorted((b for fp, b in self.old.items() if fp not in self.seen),
                      key=lambda b: (SEVERITIES.index(b["severity"]) if b.get("severity") in SEVERITIES else 9, b.get("time") or "", b["fingerprint"]))
        return {
            "source": self.source,
            "generated_at": self.made,
            "new": sum(self.new_by_severity.values()),
            "known": self.known,
            "gone": len(gone),
            "new_by_severity": dict(self.new_by_severity),
            "gone_findings": gone[:GONE_LISTED],
        }


def apply(doc: dict, base: Baseline) -> None:
    """Mark the document's findings ``new`` or ``known`` and put the tally in its summary (in place)."""
    for f in doc["findings"]:
        f["baseline"] = base.count(f)
    doc["summary"]["baseline"] = base.summary()


def load(path: str) -> Baseline:
    """A findings JSON (``--json``) or JSON Lines (``--json-lines``) of an earlier run; a clear error otherwise."""
    fix = "give the file an earlier `mcp-sse-audit analyze ... --json FILE` wrote"
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise AuditError(f"--baseline {path}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise AuditError(f"--baseline {path}: not a findings JSON (not UTF-8 text); {fix}") from None
    head, findings = None, None
    try:
        doc = json.loads(text)
        if isinstance(doc, dict) and isinstance(doc.get("findings"), list):
            head, findings = doc, doc["findings"]
    except json.JSONDecodeError:
        head, findings = _json_lines(text)
    if head is None or findings is None or not (isinstance(head.get("tool"), dict) and head["tool"].get("name") == "mcp-sse-audit"):
        raise AuditError(f"--baseline {path}: not a findings document of mcp-sse-audit (no tool and findings at its top); {fix}")
    version = head["tool"].get("version")
    if not all(isinstance(f, dict) and isinstance(f.get("fingerprint"), str) and f.get("severity") in SEVERITIES for f in findings):
        raise AuditError(f"--baseline {path}: its findings have no fingerprints (written by mcp-sse-audit {version}, before fingerprints "
                         f"existed); make a new baseline with this version: mcp-sse-audit analyze ... --json {path}")
    return Baseline(path, findings, head.get("generated_at"), version)


def _json_lines(text: str) -> tuple[dict | None, list[dict] | None]:
    head, findings = None, []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            return None, None
        if not isinstance(rec, dict):
            return None, None
        if rec.get("type") == "summary":
            head = rec
        elif rec.get("type") == "finding":
            findings.append(rec)
    return head, findings
