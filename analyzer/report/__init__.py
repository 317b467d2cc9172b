"""The HTML incident report: one self-contained page from the findings document.

Everything the page shows comes from log content an attacker may control
(session ids, URLs, event data, file names), so:

* the jinja2 environment autoescapes every expression; nothing from the
  document is ever marked safe. The only Markup built here is in ``_text``,
  which escapes each piece itself and adds fixed ``<span>`` markers for
  invisible characters (bidi overrides, U+2028, controls) so they show;
* ``id``/``href``/``data-*`` values are never taken from the document as they
  are: sessions, boundaries, findings and exchanges are anchored by their ids
  only when those match the schema's ``S<n>``/``b<n>``/``f<n>``/``x<n>``
  pattern (else by a hash or an index), and class names and filter tokens come
  from fixed tables;
* every session is called by its document key (``S10``: the terminal's and the
  JSON's name), in headings, anchors (``#session-S10``), rows, links and the
  filter's tokens; a section holding several per-capture sessions of one
  incident is named by all their keys. The page never numbers sessions itself;
* no JSON, no remote resource. A Content-Security-Policy allows exactly one
  inline ``<style>`` and one inline ``<script>``, each by the sha256 that
  ``render`` computes over the exact text it emits, and Trusted Types in
  enforcing mode with no policy, so the script cannot turn a string into
  markup even by mistake. The script is static text (it carries no data):
  filters, search, sortable tables, deep links into closed ``<details>`` and
  print expansion, reading only ``dataset`` and ``textContent``. Without it the
  page is complete: the filter bar is ``hidden`` until the script shows it.
  No ``style=`` attributes: the SVG uses presentation attributes (``x=``,
  ``fill=``), which CSP allows.

The page is a pure function of the document (no clock, stable order), and all
grouping is done here with dicts so the template never searches lists: a
capture with 100k sessions renders in one pass.

The package: ``view`` turns the document into what the page shows, ``timeline`` draws the session
timelines, ``common`` holds the fixed tables and the escaping filters, and this module renders the
page.  It reads only the findings document and ``analyzer.catalog``, never the rules.
"""
from __future__ import annotations

import base64
import hashlib
import sys
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from .common import (  # noqa: F401  (the tables and limits are part of this package's interface)
    COLLAPSE_ROWS, DECISIVE, DIVERGED, MAX_FULL_SESSIONS, MAX_ROWS, NO_EFFECT, SEV_RANK, SEVERITIES, TEMPLATE,
    TICKS_PER_TIMELINE, VERDICTS, _clip, _name, _or_dash, _plain, _ref, _session_id, _text, _truncate, natural_key,
    session_token,
)
from .view import _context, _ranges  # noqa: F401

# --------------------------------------------------------------------------
# templates


def template_dir() -> Path:
    """Source checkout / editable install first, then the data-files install."""
    here = Path(__file__).resolve().parent.parent.parent / "reports_templates"  # analyzer/report/__init__.py -> the checkout
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
    return html
