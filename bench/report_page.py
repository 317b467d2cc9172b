"""The HTML report of a large run in a real browser: size, DOM nodes, load and filter times.

    python bench/report_page.py [findings.json ...]

Pages: the synthetic samples' report (the baseline), the synthetic samples x 60 (2,100 sessions, as
tests/test_browser.py's budget test) and every findings JSON given (e.g. bench/out's 250k-event run:
mcp-sse-audit analyze bench/out/traffic-250k.jsonl --json bench/out/findings-250k.json).  Each page is
loaded three times in the system Chromium; the best time is kept, and each is also given as a ratio to
the baseline page measured in the same session.  Times are the browser's own (performance API).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from analyzer import pipeline, report  # noqa: E402
from reportscale import scaled  # noqa: E402

MEASURE = """async () => {
  const nav = performance.getEntriesByType('navigation')[0];
  const t0 = performance.now();
  const sel = document.getElementById('f-sev');
  sel.value = 'critical';
  sel.dispatchEvent(new Event('change', {bubbles: true}));
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  const filter = performance.now() - t0;
  return {dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd, nodes: document.getElementsByTagName('*').length,
          filter: filter, count: document.getElementById('f-count').textContent};
}"""


def main(extra: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    os.chdir(ROOT)
    base = pipeline.run(["sample_logs/synthetic"]).document
    docs = [("synthetic (baseline)", base), ("synthetic x 60 (2,100 sessions)", scaled(base, 60))]
    docs += [(p, json.loads(Path(p).read_text())) for p in extra]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=os.environ.get("CHROMIUM", "/usr/bin/chromium"), args=["--no-sandbox"])
        for name, doc in docs:
            page_path = Path(tmp) / "page.html"
            page_path.write_text(report.render(doc), encoding="utf-8")
            best = None
            for _ in range(3):
                page = browser.new_page(viewport={"width": 1280, "height": 900})
                page.goto(page_path.as_uri(), wait_until="load")
                got = page.evaluate(MEASURE)
                page.close()
                best = got if best is None or got["load"] < best["load"] else best
            rows.append((name, page_path.stat().st_size, len(doc["sessions"]), sum(b["severity"] == "critical" for b in doc["boundaries"]), best))
        browser.close()
    b0 = rows[0][4]
    print("| page | MB | sessions | critical reconnects | DOM nodes | DOMContentLoaded ms | load ms | filter ms | load / baseline |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, size, n_s, n_c, r in rows:
        print(f"| {name} | {size / 1e6:.2f} | {n_s:,} | {n_c:,} | {r['nodes']:,} | {r['dcl']:.0f} | {r['load']:.0f} | {r['filter']:.0f} | {r['load'] / b0['load']:.1f}× |")


if __name__ == "__main__":
    main(sys.argv[1:])
