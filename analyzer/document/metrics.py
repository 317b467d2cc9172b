"""``--metrics``: the findings document as OpenMetrics text, for Prometheus' node_exporter textfile collector.

A Grafana or Alertmanager user alerts on these instead of parsing the JSON.  Every value is the last run's, so
every family is a gauge (a counter would have to grow across runs); every family is written on every run, with
explicit zeros (every verdict of the catalog for every host, every rule and severity the catalog can report),
so an alert can tell "0" from "no data" (the job did not run).  Only gauges, and no timestamps or exemplars:
the same text is valid Prometheus text format 0.0.4 too, which is what node_exporter's collector reads (it
takes ``# UNIT`` and ``# EOF`` for comments).

``host`` is the server the traffic went to (:mod:`analyzer.document.hosts`: the URL's authority, without
userinfo); ``""`` when a URL names none, and for a run that saw no exchange at all (then every per-host family
has one set of zeros with ``host=""``).  Label values come from captures, so they are escaped as OpenMetrics
asks (backslash, double quote, newline) and any other control character is written ``U+XXXX``; counts are
added up by the escaped value, so two hosts that look alike never make two samples with one label set.

Made from the finished document (after ``--baseline`` is applied); this module only formats, the caller writes.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from analyzer import catalog
from analyzer.document import hosts
from analyzer.document.assemble import SEVERITIES

PREFIX = "mcp_sse_audit_"
INPUT_STATES = ("read", "damaged", "unreadable", "skipped")


def openmetrics(doc: dict, fail_on: str, started: float, ended: float, exit_code: int | None = None) -> str:
    """The OpenMetrics text (ending ``# EOF``) of the findings document ``doc``, for a run that started and ended at
    these Unix times (seconds) and exits with ``exit_code`` (None: that family is left out) at ``--fail-on fail_on``."""
    x_host = hosts.by_exchange(doc["exchanges"])
    label = {h: _label_value(h) for h in set(x_host.values())}
    hosts_seen = set(label.values()) or {""}
    bs = doc["boundaries"]
    b_host = [label.get(x_host.get(x), "") for x in hosts.column(bs, "request_exchange")]
    verdicts = Counter(zip(b_host, hosts.column(bs, "verdict")))
    lost, dup = Counter(), Counter()
    for h, n_lost, n_dup in zip(b_host, hosts.column(bs, "lost_count"), hosts.column(bs, "duplicated_count"), strict=True):
        lost[h] += n_lost or 0
        dup[h] += n_dup or 0
    per_host = sorted(hosts_seen | set(b_host))

    findings = Counter()
    for f in doc["findings"]:
        findings[(label.get(x_host.get(f.get("exchange")), ""), _label_value(f["rule"]), f["severity"])] += 1
    pairs = sorted(_catalog_pairs() | {(r, s) for _, r, s in findings}, key=lambda p: (p[0], SEVERITIES.index(p[1])))
    finding_hosts = sorted(hosts_seen | {h for h, _, _ in findings})

    summary = doc["summary"]
    base = summary.get("baseline")
    new = base["new_by_severity"] if base else summary["findings_by_severity"]
    known = Counter(f["severity"] for f in doc["findings"] if f.get("baseline") == "known")

    out: list[str] = []
    _family(out, "reconnects", "Reconnects judged in the last run, by the host the reconnect went to and its verdict.",
            (({"host": h, "verdict": v}, verdicts[(h, v)]) for h in per_host for v in catalog.VERDICT_ORDER))
    _family(out, "events_lost", "Events emitted while a stream was broken that its reconnect never delivered, by host.",
            (({"host": h}, lost[h]) for h in per_host))
    _family(out, "events_duplicated", "Events a reconnect delivered again (delivered twice), by host.",
            (({"host": h}, dup[h]) for h in per_host))
    _family(out, "findings", "Findings of the last run by host (empty: not tied to one), rule and severity; every rule "
            "and severity the catalog can report is listed, zero when not found.",
            (({"host": h, "rule": r, "severity": s}, findings[(h, r, s)]) for h in finding_hosts for r, s in pairs))
    _family(out, "findings_new", "Findings whose fingerprint the --baseline lacks, by severity (only these fail the run); "
            "without --baseline every finding is new.",
            (({"severity": s}, new.get(s, 0)) for s in SEVERITIES))
    _family(out, "findings_known", "Findings the --baseline already has, by severity (0 without --baseline).",
            (({"severity": s}, known[s]) for s in SEVERITIES))
    _family(out, "findings_gone", "Findings of the --baseline not found in the last run (0 without --baseline).",
            [({}, base["gone"] if base else 0)])
    _family(out, "baseline_given", "1 when the run compared its findings with a --baseline, else 0.", [({}, int(base is not None))])
    _family(out, "inputs", "Inputs of the last run by state: read (whole), damaged (read, but cut short or with lost "
            "records: an error-severity anomaly), unreadable, skipped (not a capture).",
            (({"state": s}, n) for s, n in _inputs(doc).items()))
    _family(out, "run_end_timestamp_seconds", "When the last run ended, in seconds since 1970-01-01 UTC.",
            [({}, _seconds(ended))], unit="seconds")
    _family(out, "run_duration_seconds", "How long the last run took.", [({}, _seconds(max(ended - started, 0.0)))],
            unit="seconds")
    if exit_code is not None:
        _family(out, "exit_code", "The last run's exit code (0 clean, 1 findings or damaged input at --fail-on, 2 nothing "
                "readable or nothing to judge).", [({"fail_on": fail_on}, exit_code)])
    out.append("# EOF\n")
    return "".join(out)


def _inputs(doc: dict) -> dict[str, int]:
    """read / damaged / unreadable / skipped, each input counted once (the exit code's notion of damaged input)."""
    damaged_paths = {a["source"] for a in doc["anomalies"] if a.get("severity") == "error"}
    states = Counter({s: 0 for s in INPUT_STATES})
    for i in doc["inputs"]:
        states["unreadable" if i.get("error") else "damaged" if i["path"] in damaged_paths else "read"] += 1
    states["skipped"] = len(doc.get("skipped") or ())
    return {s: states[s] for s in INPUT_STATES}


def _catalog_pairs() -> set[tuple[str, str]]:
    """Every (rule, severity) a finding can have: a reconnect's (named by its verdict) and every history rule's."""
    pairs = {(v, s) for v in catalog.VERDICT_ORDER for s in catalog.verdict_severities(v)}
    return pairs | {(r.rule, s) for r in catalog.FINDING_RULES for s in r.severities}


def _family(out: list[str], name: str, help_: str, samples: Iterable[tuple[dict[str, str], float]], unit: str | None = None) -> None:
    full = PREFIX + name
    out.append(f"# HELP {full} {_escape(help_)}\n# TYPE {full} gauge\n")
    if unit:
        out.append(f"# UNIT {full} {unit}\n")
    for labels, value in samples:
        text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))  # (label values escaped by the caller)
        out.append(f"{full}{{{text}}} {value}\n" if text else f"{full} {value}\n")


def _label_value(value: str) -> str:
    """A label value as OpenMetrics writes it (between the quotes)."""
    return _escape(value)


def _escape(text: str) -> str:
    """OpenMetrics' escaped-string (label values and HELP): a backslash, a double quote and a line feed escaped,
    other control characters written as ``U+XXXX`` (the format allows some of them raw, but a reader's line
    splitter or a terminal should never meet them)."""
    out = []
    for ch in text:
        if ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == '"':
            out.append('\\"')
        elif ch < " " or "\x7f" <= ch <= "\x9f" or "\ud800" <= ch <= "\udfff":
            out.append(f"U+{ord(ch):04X}")  # a control character (CR, NUL, ESC...) or a lone surrogate: shown, never sent
        else:
            out.append(ch)
    return "".join(out)


def _seconds(t: float) -> str:
    return f"{t:.3f}"
