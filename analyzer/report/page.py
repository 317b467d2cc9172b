"""The page: the jinja2 environment over reports_templates/, its filters, and :func:`render` with the page's
Content-Security-Policy hashes (see the package's docstring for what the page promises)."""
from __future__ import annotations

import re

import base64
import hashlib
import sys
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from analyzer.report.common import (
    MAX_FULL_SESSIONS, MAX_ROWS, TEMPLATE, _clip, _name, _or_dash, _plain, _plural, _ref, _session_id, _text, _truncate,
)
from analyzer.report.view import _context

# --------------------------------------------------------------------------
# templates


def template_dir() -> Path:
    """Source checkout / editable install first, then the data-files install."""
    here = Path(__file__).resolve().parent.parent.parent / "reports_templates"  # analyzer/report/page.py -> the checkout
    installed = Path(sys.prefix) / "share" / "mcp-sse-audit" / "reports_templates"
    for candidate in (here, installed):
        if (candidate / TEMPLATE).is_file():
            return candidate
    raise FileNotFoundError(
        f"HTML report template {TEMPLATE} not found in {here} nor in {installed}; "
        "reinstall mcp-sse-audit (pip install .) or run from a source checkout"
    )


def _environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(str(template_dir())),
        autoescape=True,  # every {{ }} is escaped, whatever the template's name
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["t"] = _text
    env.filters["o"] = _or_dash
    env.filters["sid"] = _session_id
    env.filters["plain"] = _plain
    env.filters["ref"] = _ref
    env.filters["trunc"] = _truncate
    env.filters["clip"] = _clip
    env.filters["name"] = _name
    env.filters["plural"] = _plural  # {{ n|plural("reconnect") }}: "1 reconnect", "2 reconnects"
    return env


# --------------------------------------------------------------------------

# filters


# --------------------------------------------------------------------------
# entry point


def csp_hash(text: str) -> str:
    """The CSP source for an inline <style> or <script> element whose text is ``text``."""
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render(doc: dict, max_full: int = MAX_FULL_SESSIONS, max_rows: int = MAX_ROWS) -> str:
    """Render the findings document as one self-contained HTML page.

    Past ``max_full`` sessions with findings, and ``max_rows`` rows of any list, the page
    says how many more are in the JSON instead of showing them."""
    template = _environment().get_template(TEMPLATE)
    # The stylesheet and the script are static blocks of the template: render
    # them alone first, hash them, and hand the hashes to the page's CSP.
    css = "".join(template.blocks["css"](template.new_context({})))
    js = "".join(template.blocks["js"](template.new_context({})))
    context = _context(doc, max_full, max_rows)
    context["csp_style"] = csp_hash(css)
    context["csp_script"] = csp_hash(js)
    html = template.render(context)
    # the hashes must cover exactly what we emit
    if f"<style>{css}</style>" not in html or html.count("<style>") != 1:
        raise RuntimeError("report template: the <style> element does not match its CSP hash")
    if f"<script>{js}</script>" not in html or html.count("<script>") != 1:
        raise RuntimeError("report template: the <script> element does not match its CSP hash")
    # a report written to standard output in a CI job: no capture text may read as a workflow command (a line's
    # leading "::", "##[" anywhere); as character references the page shows the same text
    inert = _COMMAND.sub(lambda m: f"{m.group(1)}&#58;" if m.group(1) is not None else "&#35;", html)
    if f"<style>{css}</style>" not in inert or f"<script>{js}</script>" not in inert:
        raise RuntimeError("report template: its stylesheet or script holds a workflow command sequence")
    return inert


_COMMAND = re.compile(r"^([ \t]*):(?=:)|#(?=#\[)", re.M)  # as analyzer.terminal.inert
