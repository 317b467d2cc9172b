"""README's decision table is the decision chain the code runs (issue [1/6] item 8).

    python tests/test_readme.py --write    # rewrite the table from analyzer/verdicts.decision_chain
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from analyzer import catalog
from analyzer.rules import verdicts

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


def _modules() -> dict[str, Path]:
    """Every module of analyzer/ by its path in the Layout table: ``decode/sse.py``; a package's
    ``__init__.py`` only when it holds code (not only a docstring)."""
    root = README.parent / "analyzer"
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if p.name == "__init__.py" and not re.search(r"^(def|class|from|import) ", p.read_text(), re.M):
            continue
        if "__pycache__" not in rel:
            out[rel] = p
    return out


def test_layout_names_every_module():
    """README's Layout table names every module of analyzer/ (and no module that is gone)."""
    text = README.read_text()
    table = text[text.index("<!-- layout:start -->") : text.index("<!-- layout:end -->")]
    named = set(re.findall(r"`([a-z_0-9/]+\.py)`", table))
    assert named == set(_modules()) - {"__init__.py"}


# The import order of the stages.  tables.py is the schema the ingesters write through, so it comes
# before ingest/ in imports although ingest/ feeds it; the scale engines run the pipeline's pieces.
SHARED = {"__init__.py", "anomalies.py", "catalog.py", "errors.py", "limits.py", "redact.py"}
RANK = {"decode": 1, "tables.py": 2, "ingest": 3, "signals": 4, "rules": 5, "document": 6, "report": 7,
        "pipeline.py": 8, "scale": 9, "cli.py": 10, "mitm_addon.py": 10, "__main__.py": 11}


def _rank(rel: str) -> int:
    if rel in SHARED:
        return 0
    return RANK[rel.split("/")[0]]


def _imports(path: Path, rel: str) -> set[str]:
    """The analyzer modules ``path`` imports (at the top or inside a function), as Layout paths."""
    names = _modules()
    pkg = ["analyzer", *rel.split("/")[:-1]]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        mods = []
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            mods = [base] + [f"{base}.{a.name}" for a in node.names]
        for m in mods:
            if not m.startswith("analyzer"):
                continue
            parts = m.split(".")[1:]
            for cand in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
                if cand in names or cand == "__init__.py":
                    out.add(cand)
    return out - {rel}


def test_stages_import_only_earlier_stages():
    """A module imports only its own stage, the ones before it and the shared modules; the report
    reads only the document and the catalog (never a rule)."""
    bad = []
    for rel, path in _modules().items():
        for dep in _imports(path, rel):
            if _rank(dep) > _rank(rel):
                bad.append(f"{rel} imports {dep}")
            if rel.startswith("report/") and not dep.startswith(("report/", "document/")) and dep not in {"catalog.py", "__init__.py"}:
                bad.append(f"{rel} imports {dep}: the report reads the document and the catalog only")
    assert not bad, bad

if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit(__doc__)
    text = README.read_text()
    README.write_text(text[: text.index(START) + len(START)] + verdicts.chain_markdown() + text[text.index(END) :])
    print(f"wrote the decision table in {README}")
