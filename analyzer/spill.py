"""Partitioned analysis that writes its outputs as it goes: memory holds one partition, not the document.

``partitions.analyze`` merges the partial documents in memory, and the document holds every exchange:
past a few million exchanges that is more than the partitions themselves.  Here each partition's
items (the rows of :func:`analyzer.partitions.analyze_group`, JSON text) are spilled to Parquet files
in a temporary folder, one per kind and partition, and only small things stay in memory: the order
keys of the exchanges (to number them as a single pass does) and counts.  The outputs are then
written in one pass, a k-way merge of the partitions' files per kind (each partition's items are
already in the global order among themselves), renumbering ``x``/``s``/``S``/``b``/``f`` on the way,
reading a bounded batch from each file at a time.

The JSON Lines written are byte-identical to ``findings.json_lines`` of the single pass's document,
and the JSON document equal to it (always compact here); ``tests/test_spill.py`` checks both.  The HTML
report needs the whole document and is not written this way.
"""
from __future__ import annotations

import gc
import heapq
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import polars as pl
import pyarrow.parquet as pq

from . import __version__, pipeline, store as store_mod, verdicts
from .findings import SEV_RANK, SEVERITIES
from .partitions import analyze_group, plan

KINDS = ("session", "exchange", "boundary", "finding", "anomaly")
BATCH = 2048  # items read from each partition's file at a time


@dataclass
class Written:
    summary: dict
    readable: int

    def fails(self, fail_on: str) -> bool:
        return pipeline.fails(self.summary, fail_on)


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
) -> Written:
    store = Path(store)
    p = plan(store, n)
    store_mod.input_rows(store)  # no store here: fail before reading anything
    with tempfile.TemporaryDirectory(prefix="mcp-sse-audit-spill-", dir=spill_dir) as tmp:
        tmp = Path(tmp)
        keys, used = [], set()
        events = messages = 0
        verdict_counts = {v: 0 for v in verdicts.VERDICT_ORDER}
        by_sev = {s: 0 for s in SEVERITIES}
        anomaly_sev = {s: 0 for s in pipeline.ANOMALY_SEVERITIES}
        counts = {k: 0 for k in KINDS}
        parts = 0
        for i, shas in enumerate(p.partitions):
            tables, rows = store_mod.load(store, since, until, sessions, inputs=shas)
            used.update(r["path"] for r in rows)
            if progress:
                progress(f"partition {i + 1}/{len(p.partitions)}: {len(shas)} input(s), {tables['exchanges'].num_rows} exchanges, {tables['events'].num_rows} events")
            g = pl.from_arrow(analyze_group(f"p{i:06d}", tables))
            del tables
            if g.height == 0:
                continue
            part = parts
            parts += 1
            for kind in KINDS:
                items = g.filter(pl.col("kind") == kind).sort("seq").select("json")
                counts[kind] += items.height
                items.write_parquet(tmp / f"{kind}-{part:06d}.parquet", compression="lz4")
            for text in g.filter(pl.col("kind") == "boundary")["json"]:
                verdict_counts[json.loads(text)["verdict"]] += 1
            for text in g.filter(pl.col("kind") == "finding")["json"]:
                by_sev[json.loads(text)["severity"]] += 1
            for text in g.filter(pl.col("kind") == "anomaly")["json"]:
                anomaly_sev[json.loads(text)["severity"]] += 1
            c = json.loads(g.filter(pl.col("kind") == "counts")["json"][0])
            events += c["events"]
            messages += c["messages"]
            k = [json.loads(t) for t in g.filter(pl.col("kind") == "keys").sort("seq")["json"]]
            keys.append(pl.DataFrame(k, schema={"lpos": pl.Int64, "_t": pl.Int64, "source": pl.String, "xid": pl.Int64}, orient="row")
                        .with_columns(part=pl.lit(part, pl.Int64)))
            del g
            gc.collect()
        allkeys = (pl.concat(keys) if keys else pl.DataFrame(schema={"lpos": pl.Int64, "_t": pl.Int64, "source": pl.String, "xid": pl.Int64, "part": pl.Int64}))
        allkeys = allkeys.sort(["_t", "source", "xid"], nulls_last=False).with_row_index("gpos")
        # gpos[part][lpos]: local positions are 0..n-1 in each partition
        gpos: list[list[int]] = []
        for part in range(parts):
            sub = allkeys.filter(pl.col("part") == part).sort("lpos")
            gpos.append(sub["gpos"].cast(pl.Int64).to_list())
        del allkeys, keys

        def xg(part: int, ref: str | None) -> int:
            return gpos[part][int(ref[1:]) - 1]  # type: ignore[index]

        # sessions are numbered by their first exchange in the merged history
        first: list[dict[str, int]] = [{} for _ in range(parts)]
        for part in range(parts):
            f = first[part]
            for e in _items(tmp / f"exchange-{part:06d}.parquet"):
                s = e["session"]
                if s is not None:
                    g_ = xg(part, e["exchange_id"])
                    if s not in f or g_ < f[s]:
                        f[s] = g_
        order = sorted((g_, part, s) for part in range(parts) for s, g_ in first[part].items())
        s_key: list[dict[str, str]] = [{} for _ in range(parts)]
        for n_, (_, part, s) in enumerate(order, start=1):
            s_key[part][s] = f"S{n_}"
        del order

        rows = store_mod.input_rows(store, used if (since or until or sessions) else None)
        man = store_mod.manifest(store)
        sha_rank = {sha: r for r, sha in enumerate(sorted(man["sha256"].to_list()))}
        sha_of = dict(zip(man["path"].to_list(), man["sha256"].to_list()))
        summary = {
            "inputs": len(rows),
            "inputs_unreadable": 0,
            "records": sum(r["records"] for r in rows),
            "rejected": sum(r["rejected"] for r in rows),
            "sessions": counts["session"],
            "exchanges": counts["exchange"],
            "events": events,
            "messages": messages,
            "boundaries": counts["boundary"],
            "verdicts": verdict_counts,
            "findings_by_severity": by_sev,
            "anomalies": counts["anomaly"],
            "anomalies_by_severity": anomaly_sev,
        }
        head = {"schema_version": pipeline.SCHEMA_VERSION, "tool": {"name": "mcp-sse-audit", "version": __version__},
                "generated_at": pipeline.generated_at()}

        def merged(kind: str, key, fix) -> Iterator[dict]:
            def one(part: int):
                for n_, rec in enumerate(_items(tmp / f"{kind}-{part:06d}.parquet")):
                    rec = fix(part, rec)
                    yield key(part, n_, rec), rec

            for _, rec in heapq.merge(*(one(part) for part in range(parts)), key=lambda t: t[0]):
                yield rec

        def fix_session(part, s):
            s["session"] = s_key[part][s["session"]]
            return s

        def fix_exchange(part, e):
            e["exchange_id"] = f"x{xg(part, e['exchange_id']) + 1}"
            e["stream"] = None if e["stream"] is None else f"s{xg(part, e['stream']) + 1}"
            e["session"] = s_key[part].get(e["session"]) if e["session"] is not None else None
            return e

        b_new: list[dict[str, str]] = [{} for _ in range(parts)]

        def fix_boundary(part, b):
            b["_old"] = b["boundary_id"]
            b["request_exchange"] = f"x{xg(part, b['request_exchange']) + 1}"
            b["resumes_exchange"] = None if b["resumes_exchange"] is None else f"x{xg(part, b['resumes_exchange']) + 1}"
            b["stream"] = None if b["stream"] is None else f"s{xg(part, b['stream']) + 1}"
            b["session"] = s_key[part].get(b["session"]) if b["session"] is not None else None
            return b

        def fix_finding(part, f):
            f["session"] = s_key[part].get(f["session"]) if f["session"] is not None else None
            pos = f.pop("_pos", None)
            f["_g"] = gpos[part][pos] if pos is not None else -1
            if f.get("boundary"):
                f["boundary"] = b_new[part][f["boundary"]]
            return f

        def tag(kind_fix):
            def fix(part, rec):
                rec = kind_fix(part, rec)
                rec["_part"] = part
                return rec
            return fix

        def boundaries_tagged() -> Iterator[dict]:
            n_ = 0
            for b in merged("boundary", lambda part, i, b: int(b["request_exchange"][1:]), tag(fix_boundary)):
                n_ += 1
                b_new[b.pop("_part")][b.pop("_old")] = f"b{n_}"
                b["boundary_id"] = f"b{n_}"
                yield b

        def findings() -> Iterator[dict]:
            n_ = 0
            for f in merged("finding", lambda part, i, f: (SEV_RANK[f["severity"]], f["_g"], f["rule"], f["message"]), fix_finding):
                n_ += 1
                del f["_g"]
                f["id"] = f"f{n_}"
                yield f

        def anomalies() -> Iterator[dict]:
            yield from merged("anomaly", lambda part, i, a: (sha_rank.get(sha_of.get(a["source"], ""), -1), part, i), lambda part, a: a)

        sections = [
            ("input", "inputs", iter(rows)),
            ("session", "sessions", merged("session", lambda part, i, s: int(s["session"][1:]), fix_session)),
            ("exchange", "exchanges", merged("exchange", lambda part, i, e: int(e["exchange_id"][1:]), fix_exchange)),
            ("boundary", "boundaries", boundaries_tagged()),
            ("finding", "findings", findings()),
            ("anomaly", "anomalies", anomalies()),
        ]
        _emit(head, summary, sections, jsonl_out, json_out)
    return Written(summary, sum(1 for r in rows if r["error"] is None))


def _open(path: str | None):
    """A temp file beside ``path`` (renamed over it only when the output is whole: a crash or a full
    disk never leaves a truncated file there); stdout and other non-regular targets are written directly."""
    if path is None:
        return None
    if path == "-":
        return sys.stdout
    target = Path(os.path.realpath(path))
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists() and not target.is_file():
        return open(target, "w", encoding="utf-8")
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    fh = os.fdopen(fd, "w", encoding="utf-8")
    fh._commit_to = (tmp, target)  # type: ignore[attr-defined]
    return fh


def _close(fh, ok: bool) -> None:
    if fh is None or fh is sys.stdout:
        return
    commit = getattr(fh, "_commit_to", None)
    try:
        if ok and commit is not None:
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        fh.close()
    if commit is None:
        return
    tmp, target = commit
    if ok:
        mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    else:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _emit(head: dict, summary: dict, sections, jsonl_out: str | None, json_out: str | None) -> None:
    """One pass over the merged items into both outputs (as findings.json_lines and a compact json.dumps)."""
    jl, jd = _open(jsonl_out), _open(json_out)
    compact = {"ensure_ascii": False, "separators": (",", ":")}
    ok = False
    try:
        if jl is not None:
            jl.write(json.dumps({"type": "summary", **head, "summary": summary, "skipped": []}, ensure_ascii=False) + "\n")
        if jd is not None:
            start = json.dumps({**head, "summary": summary}, **compact)
            jd.write(start[:-1])
        for kind, field, items in sections:
            if jd is not None:
                jd.write(f',"{field}":[')
            first = True
            for rec in items:
                if jl is not None:
                    jl.write(json.dumps({"type": kind, **rec}, ensure_ascii=False) + "\n")
                if jd is not None:
                    jd.write(("" if first else ",") + json.dumps(rec, **compact))
                first = False
            if jd is not None:
                jd.write("]")
                if field == "inputs":
                    jd.write(',"skipped":[]')
        if jd is not None:
            jd.write("}\n")
        ok = True
    finally:
        for fh in (jl, jd):
            _close(fh, ok)

