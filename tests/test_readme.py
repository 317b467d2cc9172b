"""README's decision table is the decision chain the code runs (issue [1/6] item 8).

    python tests/test_readme.py --write    # rewrite the table from analyzer/verdicts.decision_chain
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from analyzer import catalog, verdicts

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- decision-chain:start -->\n", "<!-- decision-chain:end -->"


def _table(text: str) -> str:
    return text[text.index(START) + len(START) : text.index(END)]


def test_readme_decision_table_is_the_code_chain():
    assert _table(README.read_text()) == verdicts.chain_markdown(), "run: python tests/test_readme.py --write"


def test_chain_has_every_verdict_and_unique_branch_names():
    chain = verdicts.decision_chain()
    ids = [b.rule_id for b in chain] + [verdicts.FALLBACK[0]]
    assert len(ids) == len(set(ids))
    assert {b.verdict for b in chain} | {verdicts.FALLBACK[1]} == set(catalog.VERDICT_ORDER)


def test_the_unverifiable_transport_branches_come_before_the_id_verdicts():
    """The table once claimed replay_reset outranks "no response", "not SSE" and "body not recorded"."""
    rows = re.findall(r"^\| (\d+) \| `(\w+)` \| `(\w+)` \|", _table(README.read_text()), re.M)
    order = {rule: int(n) for n, rule, _ in rows}
    for early in ("no_response", "not_an_event_stream", "body_not_recorded"):
        assert order[early] < order["ids_went_back"] < order["ids_jumped"]


def test_layout_names_every_module():
    """README's Layout table names every module of analyzer/ (and no module that is gone)."""
    text = README.read_text()
    table = text[text.index("<!-- layout:start -->") : text.index("<!-- layout:end -->")]
    named = set(re.findall(r"`([a-z_0-9]+\.py|[a-z_0-9]+/)`", table))
    root = README.parent / "analyzer"
    have = {p.name for p in root.glob("*.py") if p.name != "__init__.py"} | {p.name + "/" for p in root.iterdir() if (p / "__init__.py").is_file()}
    assert named == have


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit(__doc__)
    text = README.read_text()
    README.write_text(text[: text.index(START) + len(START)] + verdicts.chain_markdown() + text[text.index(END) :])
    print(f"wrote the decision table in {README}")
