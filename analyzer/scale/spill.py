"""Partitioned analysis that writes its outputs as it goes: memory holds one partition, not the document.

``partitions.analyze`` merges the partial documents in memory, and the document holds every exchange:
past a few million exchanges that is more than the partitions themselves.  Here each partition's
items (the rows of :func:`analyzer.scale.partitions.analyze_group`, JSON text) are spilled to Parquet files
in a temporary folder, one per kind and partition, and only small things stay in memory: the order
keys of the exchanges (to number them as a single pass does) and counts.  The outputs are then
written in one pass, a k-way merge of the partitions' files per kind (each partition's items are
already in the global order among themselves), renumbering ``x``/``s``/``f`` and naming sessions and
reconnects on the way (their names, made over every partition from what each partition's items say of
them as they are spilled: analyzer.document.Names), reading a bounded batch from each file at a time.
With ``trend``, the document's ``trend`` (per day and host, :mod:`analyzer.document.trend`) is added up as the
boundaries go by: a reference to its host per exchange (the host of a boundary's request) and a small row per
boundary stay in memory.

The JSON Lines written are byte-identical to ``findings.json_lines`` of the single pass's document,
and the JSON document equal to it (always compact here); ``tests/test_spill.py`` checks both.  The HTML
report needs the whole document and is not written this way.
"""
from __future__ import annotations

import gc
import heapq
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import polars as pl
import pyarrow.parquet as pq

from analyzer import document, exits, outputs
from analyzer.anomalies import occurrences
from analyzer.document import hosts, trend as trends
from analyzer.document import calls_hit
from analyzer.document.build import ndjson_line
from analyzer.scale import store as store_mod
from analyzer.scale.partitions import analyze_group, global_positions, plan

KINDS = ("session", "exchange", "boundary", "finding", "anomaly")
BATCH = 2048  # items read from each partition's file at a time


@dataclass
class Written:
    summary: dict
    readable: int
    encrypted: int = 0  # TLS connections no key decrypted (exits.analyze: all of them encrypted is exit 2)

    def fails(self, fail_on: str) -> bool:
        return exits.fails(self.summary, fail_on)


def _items(path: Path) -> Iterator[dict]:
    if not path.exists():
        return
    f = pq.ParquetFile(path)
    for batch in f.iter_batches(batch_size=BATCH, columns=["json"]):
        for text in batch.column(0).to_pylist():
            yield json.loads(text)


def write(
    store: str | Path,
    n: int,
    jsonl_out: str | None,
    json_out: str | None,
    since=None,
    until=None,
    sessions: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    spill_dir: str | None = None,
    baseline=None,
    trend: bool = False,
    skipped: list[str] = (),
    analysis=None,
) -> Written:
    """``baseline``: an :class:`analyzer.document.baseline.Baseline`; each finding is marked new or known and the
    summary gets its tally, as ``baseline.apply`` does to a whole document.  ``trend``: end the JSON document with
    ``trend``, as :func:`analyzer.run.run` adds it to the document of a store.  ``skipped``: the files this run passed
    over (the PATHs ingested first), the document's ``skipped``.  ``analysis``: the rules' thresholds
    (:class:`analyzer.rules.registry.Analysis`; None: their defaults)."""
    store = store_mod.locate(store)
    p = plan(store, n)
    store_mod.input_rows(store)  # no store here: fail before reading anything
    win = store_mod.window(store, since, until)  # a duration: from the whole store's newest start, once
    with tempfile.TemporaryDirectory(prefix="mcp-sse-audit-spill-", dir=spill_dir) as tmp:
        tmp = Path(tmp)
        keys, used = [], set()
        summary = document.Summary()
        seen = document.Names()  # the sessions' and reconnects' identities: their names are made over every partition
        encrypted = 0
        parts = 0
        for i, shas in enumerate(p.partitions):
            tables, rows = store_mod.load(store, win.since, win.until, sessions, inputs=shas)
            used.update(r["path"] for r in rows)
            if progress:
                progress(f"partition {i + 1}/{len(p.partitions)}: {len(shas)} input(s), {tables['exchanges'].num_rows} exchanges, {tables['events'].num_rows} events")
            g = pl.from_arrow(analyze_group(f"p{i:06d}", tables, analysis))
            del tables
            if g.height == 0:
                continue
            part = parts
            parts += 1
            for kind in KINDS:
                items = g.filter(pl.col("kind") == kind).sort("seq").select("json")
                items.write_parquet(tmp / f"{kind}-{part:06d}.parquet", compression="lz4")
                if kind == "exchange":  # (the summary's counts, as the single pass sums them)
                    summary.items[kind] += items.height
                else:
                    for text in items["json"]:
                        rec = json.loads(text)
                        summary.add(kind, rec)
                        if kind == "session":
                            seen.see_session(part, rec)
                        elif kind == "boundary":
                            seen.see_boundary(part, rec)
                        elif kind == "finding" and baseline is not None:
                            baseline.count(rec)  # the tally now (the summary is written first); the mark as written
                        elif kind == "anomaly":
                            encrypted += occurrences([rec], "tls_not_decrypted")
            c = json.loads(g.filter(pl.col("kind") == "counts")["json"][0])
            summary.events += c["events"]
            summary.messages += c["messages"]
            k = [json.loads(t) for t in g.filter(pl.col("kind") == "keys").sort("seq")["json"]]
            keys.append(pl.DataFrame(k, schema={"lpos": pl.Int64, "_t": pl.Int64, "source": pl.String, "xid": pl.Int64}, orient="row")
                        .with_columns(part=pl.lit(part, pl.Int64)))
            del g
            gc.collect()
        allkeys = (pl.concat(keys) if keys else pl.DataFrame(schema={"lpos": pl.Int64, "_t": pl.Int64, "source": pl.String, "xid": pl.Int64, "part": pl.Int64}))
        num = document.Numbering(global_positions(allkeys, parts), seen.make())
        del allkeys, keys, seen

        rows = store_mod.input_rows(store, used if (win.bounded or sessions) else None)
        man = store_mod.manifest(store)
        sha_rank = {sha: r for r, sha in enumerate(sorted(man["sha256"].to_list()))}
        sha_of = dict(zip(man["path"].to_list(), man["sha256"].to_list()))

        def merged(kind: str, key, fix) -> Iterator[tuple[int, dict]]:
            """Every partition's items of ``kind``, fixed, in the global order (each file is in it already)."""
            def one(part: int):
                for n_, rec in enumerate(_items(tmp / f"{kind}-{part:06d}.parquet")):
                    rec = fix(part, rec)
                    yield key(part, n_, rec), part, rec

            for _, part, rec in heapq.merge(*(one(part) for part in range(parts)), key=lambda t: t[0]):
                yield part, rec

        host_of: list[str] = []  # with trend: the host of exchange x<n> at n - 1 (the same few strings, shared)
        interned: dict[str, str] = {}
        reconnects: list[dict] = []  # with trend: one row per boundary
        hits = calls_hit.Hits()  # the document's calls_hit, from the boundaries and findings as they go by

        def exchanges() -> Iterator[dict]:
            for _, e in merged("exchange", lambda part, i, e: int(e["exchange_id"][1:]), num.exchange):
                if trend:
                    n_ = int(e["exchange_id"][1:])
                    host_of.extend([""] * (n_ - len(host_of)))
                    h = hosts.of_url(e["url"])
                    host_of[n_ - 1] = interned.setdefault(h, h)
                yield e

        def boundaries() -> Iterator[dict]:  # (after every exchange: the sections are written in order)
            for _, b in merged("boundary", lambda part, i, b: int(b["request_exchange"][1:]), num.boundary):
                if trend:
                    x = int(b["request_exchange"][1:]) - 1
                    reconnects.append(trends.reconnect(b, host_of[x] if x < len(host_of) else ""))
                hits.add_boundary(b)
                yield b

        def findings() -> Iterator[dict]:
            got = merged("finding", lambda part, i, f: document.finding_key(f, f["_g"]), num.finding)
            for f in document.number_findings(f for _, f in got):
                if baseline is not None:
                    f["baseline"] = baseline.status(f)
                hits.add_finding(f)
                yield f

        sections = [
            ("input", "inputs", iter(rows)),
            # sessions in the order of their first exchange in the merged history (Numbering.session gives its place)
            ("session", "sessions", (s for _, (_, s) in merged("session", lambda part, i, t: t[0], num.session))),
            ("exchange", "exchanges", exchanges()),
            ("boundary", "boundaries", boundaries()),
            ("finding", "findings", findings()),
            ("anomaly", "anomalies", (a for _, a in merged("anomaly", lambda part, i, a: (sha_rank.get(sha_of.get(a["source"], ""), -1), part, i),
                                                           lambda part, a: a))),
        ]
        summary = summary.to_dict(rows, len(skipped))
        if win.bounded:
            summary["window"] = win.summary()  # (as analyzer.window.stamp: last, like the single pass)
        if baseline is not None:
            summary["baseline"] = baseline.summary()  # (after the window, as the command applies it to a whole document)
        _emit(document.head(), summary, sections, jsonl_out, json_out,
              (lambda: {"calls_hit": hits.rows()} | ({"trend": trends.per_day(reconnects)} if trend else {})), skipped)
    return Written(summary, sum(1 for r in rows if r["error"] is None), encrypted)


def _emit(head: dict, summary: dict, sections, jsonl_out: str | None, json_out: str | None, tail: Callable[[], dict] = dict,
          skipped: list[str] = ()) -> None:
    """One pass over the merged items into both outputs (as findings.json_lines and a compact json.dumps); ``tail``:
    the document's last keys, made after every section went by (JSON Lines has no line for them, as
    findings.json_lines); ``skipped``: the document's ``skipped``."""
    with outputs.streamed(jsonl_out, "JSON Lines") as jl, outputs.streamed(json_out, "findings JSON") as jd:
        compact = {"ensure_ascii": False, "separators": (",", ":")}
        if jl is not None:
            jl(ndjson_line({"type": "summary", **head, "summary": summary, "skipped": list(skipped)}) + "\n")
        if jd is not None:
            start = json.dumps({**head, "summary": summary}, **compact)
            jd(start[:-1])
        for kind, field, items in sections:
            if jd is not None:
                jd(f',"{field}":[')
            first = True
            for rec in items:
                if jl is not None:
                    jl(ndjson_line({"type": kind, **rec}) + "\n")
                if jd is not None:
                    jd(("" if first else ",") + json.dumps(rec, **compact))
                first = False
            if jd is not None:
                jd("]")
                if field == "inputs":
                    jd(',"skipped":' + json.dumps(list(skipped), **compact))
        last = tail()
        if jd is not None:
            for key, value in last.items():
                jd(f",{json.dumps(key)}:{json.dumps(value, **compact)}")
            jd("}\n")
