"""The HTML incident report: one self-contained page from the findings document.

Everything the page shows comes from log content an attacker may control
(session ids, URLs, event data, file names), so:

* the jinja2 environment autoescapes every expression; nothing from the
  document is ever marked safe. The only Markup built here is in ``_text``,
  which escapes each piece itself and adds fixed ``<span>`` markers for
  invisible characters (bidi overrides, U+2028, controls) so they show;
* ``id``/``href``/``data-*`` values are never taken from the document as they
  are: sessions, reconnects, findings and exchanges are anchored by their names
  and ids only when those match the forms analyzer.document.names makes
  (``Sk3vq7m2a``, ``Sk3vq7m2a.r5xj2qd``) or the schema's ``f<n>``/``x<n>``
  (else by a hash or an index), and class names and filter tokens come
  from fixed tables;
* every session is called by its name (the terminal's and the JSON's), in
  headings, rows, links and the filter's tokens, and its element's ``id`` is the
  name, as a reconnect card's is the reconnect's: ``report.html#<name>``
  scrolls there. The per-capture records of one session (one name) are one
  section. The page never numbers sessions itself;
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
timelines, ``common`` holds the fixed tables and the escaping filters, and ``page`` renders the
page; this file only re-exports.  It reads only the findings document and ``analyzer.catalog``, never the rules.
"""
from analyzer.report.common import (  # noqa: F401  (the tables and limits are part of this package's interface)
    COLLAPSE_ROWS, DECISIVE, DIVERGED, MAX_FULL_SESSIONS, MAX_ROWS, NO_EFFECT, SEV_RANK, SEVERITIES, TEMPLATE,
    TICKS_PER_TIMELINE, VERDICTS, _clip, _name, _or_dash, _plain, _ref, _session_id, _text, _truncate, natural_key,
    reconnect_anchor, session_anchor, session_token,
)
from analyzer.report.page import _environment, csp_hash, render, template_dir  # noqa: F401
from analyzer.report.view import _context, _ranges  # noqa: F401
