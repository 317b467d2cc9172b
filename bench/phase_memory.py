"""Where the analysis memory goes, phase by phase: resident memory at rest after each phase and its peak during it.

    python bench/phase_memory.py bench/out/tiny-160mb.jsonl
    python bench/phase_memory.py capture.pcap keys.log                                  # a TLS capture and its key log
    _RJEM_MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 python bench/phase_memory.py FILE   # freed pages returned at once

Runs the single pass the CLI runs (``pipeline.run``'s steps, the canonical events let go once the frames
exist, then the JSON text ``--json`` writes (``outputs.document_json``)) in this process, with a thread that reads
``/proc/self/statm`` every 3 ms.  "at rest" is the resident size when the phase returned; "peak" the
largest the thread saw during it.  Polars allocates with jemalloc, which Polars 2.1 tells to keep freed pages
for 0.5-1.5 s: "at rest" then includes pages already freed (the environment variable above shows the live size).
Polars' allocator runs with one arena, as in the command (``analyzer.__main__``).
"""
from __future__ import annotations

import os
import sys
import threading
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


def main() -> int:
    if len(sys.argv) not in (2, 3) or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 0 if sys.argv[1:] in (["-h"], ["--help"]) else 2
    path = sys.argv[1]
    if not os.path.isfile(path):
        print(f"{path}: no such file (give a capture: python bench/phase_memory.py FILE)", file=sys.stderr)
        return 2
    peak = [_rss_mib()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.003):  # stops when the run ends
            peak[0] = max(peak[0], _rss_mib())

    threading.Thread(target=sample, daemon=True).start()
    rows = []
    last = [time.perf_counter()]

    def mark(phase: str) -> None:
        now, rss = time.perf_counter(), _rss_mib()
        rows.append((phase, rss, max(peak[0], rss), now - last[0]))
        peak[0], last[0] = rss, now

    from analyzer.__main__ import tune_allocator

    tune_allocator()  # as the command does, before Polars loads
    from analyzer.tables import keep_pandas_out

    keep_pandas_out()  # as the command does (analyzer.run): a HAR's first pa.array of a list would import pandas, +47 MiB
    from analyzer import pipeline
    from analyzer.outputs import document_json
    from analyzer.decode.tls_keys import KeyLog
    from analyzer.document import assemble
    from analyzer.document import build as findings
    from analyzer.ingest import inputs
    from analyzer.ingest.reading import Reading
    from analyzer.rules import verdicts
    from analyzer.signals import eras, streams

    mark("imports")
    keys = KeyLog()
    if len(sys.argv) == 3:  # as --tls-keylog reads it
        with open(sys.argv[2], "rb") as f:
            keys.add_text(f.read())
    got = pipeline.read_inputs([path], Reading(compact=True, keys=keys))  # as pipeline.run reads
    mark("read (canonical tables)")
    tables = inputs.concat(got.parts)
    got.parts = []
    pipeline.release_freed()  # as pipeline.run does
    n_events, n_messages = len(tables["events"]), len(tables["messages"])
    tables["events"] = streams.owned_events(tables)
    frames, links = streams.build(tables, consume=True)
    tables["events"] = None  # as pipeline.analyze_tables(consume=True)
    pipeline.release_freed()
    mark("streams.build (frames)")
    rev = eras.revisions(frames)
    b = verdicts.judge(frames, links, rev)
    mark("verdicts")
    body = findings.build_document(frames, b, rev, columnar=True)  # as `analyze` makes it
    del frames, links, b, rev  # as in the command: pipeline.analyze_tables returns the document alone
    mark("findings document")
    doc = assemble(got.input_rows, got.errors, got.skipped, body, n_events, n_messages, [])
    text = document_json(doc)  # what --json writes (compact past outputs.PRETTY_UP_TO exchanges)
    mark("JSON text")
    done.set()
    size = os.path.getsize(path) / 2**20
    print(f"{path}: {size:.1f} MiB, {n_events} events, JSON {len(text) / 2**20:.1f} MiB")
    print("| phase | at rest MiB | peak MiB | peak / input | s |")
    print("|---|---:|---:|---:|---:|")
    for phase, rss, top, secs in rows:
        print(f"| {phase} | {rss:.0f} | {top:.0f} | {top / size:.1f}x | {secs:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
