"""README's generated parts are what the code does: the decision chain the code runs (issue [1/6] item 8),
the first command's terminal output and the CLI reference from ``--help`` (issue [4/5] item 7).

    python tests/test_readme.py --write    # rewrite all three from the code
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from click.testing import CliRunner

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


def _holds_code(init: Path) -> bool:
    """A package's ``__init__.py`` holds code when it has more than a docstring, imports (re-exports), ``__version__``
    and ``__all__``, and a lazy re-export (PEP 562: ``_WHERE``, name -> module, and the ``__getattr__`` that loads it)."""
    tree = ast.parse(init.read_text())
    body = tree.body[1:] if tree.body and isinstance(tree.body[0], ast.Expr) else tree.body
    names = ("__version__", "__all__", "_WHERE")
    dunder = lambda n: isinstance(n, ast.Assign) and all(isinstance(t, ast.Name) and t.id in names for t in n.targets)  # noqa: E731
    lazy = lambda n: isinstance(n, ast.FunctionDef) and n.name == "__getattr__" and len(n.body) <= 3  # noqa: E731
    return any(not isinstance(node, (ast.Import, ast.ImportFrom)) and not dunder(node) and not lazy(node) for node in body)


def _modules() -> dict[str, Path]:
    """Every module of analyzer/ by its path in the Layout table: ``decode/sse.py``; a package's
    ``__init__.py`` only when it holds code (not only a docstring)."""
    root = README.parent / "analyzer"
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if p.name == "__init__.py" and not _holds_code(p):
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


def test_package_init_files_only_re_export():
    """A package's __init__.py holds a docstring and imports; its code lives in a module named for its job."""
    holding = [p.relative_to(README.parent).as_posix() for p in (README.parent / "analyzer").rglob("__init__.py") if _holds_code(p)]
    assert holding == [], holding


# The import order of the stages.  tables.py is the schema the ingesters write through, so it comes
# before ingest/ in imports although ingest/ feeds it; the scale engines run the pipeline's pieces.
SHARED = {"__init__.py", "anomalies.py", "atomic.py", "catalog.py", "compiled.py", "errors.py", "exits.py", "formatted.py", "limits.py", "redact.py",
          "window.py"}
RANK = {"decode": 1, "tables.py": 2, "ingest": 3, "signals": 4, "rules": 5, "document": 6, "report": 7,
        "pipeline.py": 8, "scale": 9, "outputs.py": 9, "options.py": 10, "result.py": 10, "api.py": 12, "terminal.py": 10, "run.py": 11,
        "cli.py": 12, "mitm_addon.py": 12, "__main__.py": 13}


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


RUN_START, RUN_END = "<!-- first-run:start -->\n", "<!-- first-run:end -->"
HELP_START, HELP_END = "<!-- cli-help:start -->\n", "<!-- cli-help:end -->"
COLUMNS = 120  # the terminal width the README's output is shown at
NEWCOMER_WORDS = 2000  # the part before "## Reference" that a newcomer reads


def _first_command() -> list[str]:
    """The analyzer command of the README's first line of set-up (after the last ``&&``), as arguments."""
    block = README.read_text().split("```sh\n", 1)[1].split("```", 1)[0]
    line = next(ln for ln in block.splitlines() if ln and not ln.startswith("#"))
    args = shlex.split(line.split("&&")[-1])
    assert args[0] == "mcp-sse-audit", line
    return args[1:]


def first_run() -> tuple[str, int]:
    """What the first command prints (stdout) and its exit code, run as a process from the repository root on a
    terminal COLUMNS wide, its outputs in a scratch folder beside a link to sample_logs/ (same names, same text)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.symlink(README.parent / "sample_logs", Path(tmp) / "sample_logs")
        env = dict(os.environ, COLUMNS=str(COLUMNS), PYTHONPATH=str(README.parent))
        env.pop("SOURCE_DATE_EPOCH", None)
        r = subprocess.run([sys.executable, "-m", "analyzer", *_first_command()], cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=600)
        assert (Path(tmp) / "out" / "findings.json").exists() and (Path(tmp) / "out" / "report.html").exists(), r.stderr
    return r.stdout, r.returncode


def _run_block(out: str) -> str:
    return "```\n" + out + "```\n"


def cli_help() -> str:
    """The CLI reference: ``--help`` of the program and of each command, as a reader's terminal shows it."""
    from analyzer.cli import main

    parts = []
    for args in ([], *([name] for name in sorted(main.commands))):
        r = CliRunner().invoke(main, [*args, "--help"], prog_name="mcp-sse-audit", terminal_width=100)
        assert r.exit_code == 0, r.output
        parts.append(f"`mcp-sse-audit {' '.join(args + ['--help'])}`:\n\n```\n{r.output.rstrip()}\n```\n")
    return "\n".join(parts)


def _between(text: str, start: str, end: str) -> str:
    return text[text.index(start) + len(start) : text.index(end)]


def test_readme_shows_what_the_first_command_prints():
    out, code = first_run()
    assert code == 1  # as its comment says: the samples hold critical findings
    assert _between(README.read_text(), RUN_START, RUN_END) == _run_block(out), "run: python tests/test_readme.py --write"


def test_readme_cli_reference_is_the_help_text():
    assert _between(README.read_text(), HELP_START, HELP_END) == cli_help(), "run: python tests/test_readme.py --write"


def test_the_newcomers_part_is_short_and_comes_first():
    text = README.read_text()
    head = text[: text.index("\n## Reference\n")]
    assert len(head.split()) < NEWCOMER_WORDS
    for must in ("## What you get", "## Capture the traffic", "## Read the report", "## Exit codes", "## Nightly audits and CI",
                 "mitm_addon.py", "SSLKEYLOGFILE", "HAR", "--baseline", "--junit", "cron"):
        assert must in head, must
    # internal material lives with its readers: no benchmark targets or allocator knobs in the README
    assert "_RJEM_MALLOC_CONF" not in text and "Issue [1/5]" not in text


if __name__ == "__main__":
    if "--write" not in sys.argv:
        sys.exit(__doc__)
    text = README.read_text()
    text = text[: text.index(START) + len(START)] + verdicts.chain_markdown() + text[text.index(END) :]
    text = text[: text.index(HELP_START) + len(HELP_START)] + cli_help() + text[text.index(HELP_END) :]
    out, _ = first_run()
    text = text[: text.index(RUN_START) + len(RUN_START)] + _run_block(out) + text[text.index(RUN_END) :]
    README.write_text(text)
    print(f"wrote the decision table, the CLI reference and the first run's output in {README}")
