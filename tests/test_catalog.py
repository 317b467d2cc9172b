"""The catalog (analyzer/catalog.py) is what the code decides and what the README says (issue [4/6])."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from analyzer import catalog, pipeline
from analyzer.rules import verdicts
from analyzer.signals import clients

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SAMPLES = sorted(p for p in (ROOT / "sample_logs").rglob("*") if p.suffix in (".jsonl", ".har", ".pcap", ".pcapng"))


def _between(text: str, name: str) -> str:
    start, end = f"<!-- catalog-{name}:start -->\n", f"<!-- catalog-{name}:end -->"
    return text[text.index(start) + len(start) : text.index(end)]


def test_readme_tables_are_the_catalog():
    text = README.read_text()
    assert _between(text, "verdicts") == catalog.verdicts_markdown(), "run: python tests/test_catalog.py --write"
    assert _between(text, "findings") == catalog.findings_markdown(), "run: python tests/test_catalog.py --write"
    assert _between(text, "next-steps") == catalog.next_steps_markdown(), "run: python tests/test_catalog.py --write"
    assert _between(text, "evidence") == catalog.evidence_markdown(), "run: python tests/test_catalog.py --write"
    assert "Severity: " + catalog.VERDICT_SEVERITY + "." in text
    assert _between(text, "clients") == clients.clients_markdown(), "run: python tests/test_catalog.py --write"


def test_every_branch_names_its_evidence_and_continuous_is_never_a_guess():
    branches = [(b.rule_id, b.verdict) for b in verdicts.decision_chain()] + [verdicts.FALLBACK[:2]]
    assert {r for r, _ in branches} == set(verdicts.EVIDENCE)
    assert set(verdicts.EVIDENCE.values()) <= set(catalog.EVIDENCE)
    assert all(verdicts.EVIDENCE[r] != "none" for r, v in branches if v == "continuous")
    # the schema's enum is the catalog's list
    import json
    schema = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())
    assert schema["properties"]["boundaries"]["items"]["properties"]["evidence"]["enum"] == [k for k, _ in catalog.EVIDENCE_KINDS]


def test_every_verdict_and_rule_says_what_to_do():
    assert all(v.next_step for v in catalog.VERDICTS) and all(r.next_step for r in catalog.FINDING_RULES)
    assert catalog.next_step("cross_stream_replay", boundary=True) == catalog.VERDICT["cross_stream_replay"].next_step
    assert catalog.next_step("cross_stream_replay", boundary=False) == catalog.FINDING["cross_stream_replay"].next_step


def test_the_decision_chain_gives_exactly_the_catalog_verdicts():
    given = {b.verdict for b in verdicts.decision_chain()} | {verdicts.FALLBACK[1]}
    assert given == set(catalog.VERDICT_ORDER)


def test_every_rule_the_code_names_is_in_the_catalog_with_its_severity():
    """Each `finding_frame(frame, "rule", "severity")` call in the analyzer, and each (rule, severity) pair of an
    `either(frame, condition, ("rule", "severity"), ("rule", "severity"))` call (rules/shape.py), and each
    `finding_severity("rule", "severity")` call (a rule that builds its own record: rules/reconnects.py), names a
    catalog rule and one of its severities."""
    calls = []
    for path in (ROOT / "analyzer").rglob("*.py"):
        text = path.read_text()
        calls += re.findall(r'\bfinding_frame\(.*?,\s*"(\w+)",\s*"(\w+)"\)', text)
        calls += re.findall(r'\bfinding_severity\(\s*"(\w+)",\s*"(\w+)"\)', text)
        for a, b, c, d in re.findall(r'\beither\(.*?\(\s*"(\w+)",\s*"(\w+)"\),\s*\(\s*"(\w+)",\s*"(\w+)"\)\)', text):
            calls += [(a, b), (c, d)]
    assert len(calls) >= len(catalog.FINDING_RULES)
    named = set()
    for rule, severity in calls:
        assert severity in catalog.FINDING[rule].severities, (rule, severity)
        named.add(rule)
    assert named == set(catalog.FINDING), "a catalog rule no code reports, or the other way round"
    with pytest.raises(ValueError, match="catalog"):
        catalog.finding_severity("request_unanswered", "critical")


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_every_finding_of_the_samples_is_in_the_catalog(sample):
    doc = pipeline.run([str(sample)]).document
    for f in doc["findings"]:
        if f["boundary"] is None or f["rule"] not in catalog.VERDICT:  # a history rule (wrong_result_delivered: at its reconnect)
            assert f["severity"] in catalog.FINDING[f["rule"]].severities
            assert f["effect"] == catalog.FINDING[f["rule"]].effect
        else:  # a boundary's finding, named by its verdict
            assert f["rule"] in catalog.VERDICT and f["rule"] != "continuous"
            assert f["effect"] == catalog.VERDICT[f["rule"]].effect
    for b in doc["boundaries"]:
        assert b["verdict"] in catalog.VERDICT


def test_every_finding_rule_is_in_the_registry_once():
    """analyzer/rules/registry.py lists every rule the document reports; the catalog's decided_by names its entry."""
    from analyzer.rules import registry

    names = {h.name for h in registry.HISTORY}
    for r in catalog.FINDING_RULES:
        owners = [h.name for h in registry.HISTORY if r.rule in h.reports]
        if r.rule in registry.RECONNECT_REPORTS:
            assert owners == [], r.rule
            continue
        assert owners == [r.decided_by], (r.rule, owners)
    reported = {rule for h in registry.HISTORY for rule in h.reports} | set(registry.RECONNECT_REPORTS)
    assert reported == {r.rule for r in catalog.FINDING_RULES}
    assert len(names) == len(registry.HISTORY)
    # the registry restates no name: each entry's is its rules' decided_by, a function that exists
    import importlib

    for h in registry.HISTORY:
        module, _, function = h.name.rpartition(".")
        assert callable(getattr(importlib.import_module(f"analyzer.{module}"), function)), h.name


def test_the_history_rules_report_only_what_the_registry_says():
    from analyzer import pipeline
    from analyzer.rules import registry

    doc = pipeline.run([str(Path(__file__).resolve().parent.parent / "sample_logs")]).document
    said = {rule for h in registry.HISTORY for rule in h.reports}
    got = {f["rule"] for f in doc["findings"] if f["boundary"] is None}
    assert got and got <= said


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit(__doc__)
    text = README.read_text()
    for name, table in (("verdicts", catalog.verdicts_markdown()), ("findings", catalog.findings_markdown()),
                        ("next-steps", catalog.next_steps_markdown()), ("evidence", catalog.evidence_markdown()),
                        ("clients", clients.clients_markdown())):
        start, end = f"<!-- catalog-{name}:start -->\n", f"<!-- catalog-{name}:end -->"
        text = text[: text.index(start) + len(start)] + table + text[text.index(end) :]
    README.write_text(text)
    print(f"wrote the catalog tables in {README}")

