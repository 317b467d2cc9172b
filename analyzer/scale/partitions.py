"""Analysis of a store in partitions, one after another: memory bounded by a partition, not the archive.

What may be split.  Every rule reads rows of one session, with two exceptions that decide the unit:

* history across captures ties a session to the same ``Mcp-Session-Id`` in other inputs (views);
* the cross-session rules compare the sessions of one input with each other (one shared event store
  replaying a session's events into another).

So a partition holds whole *inputs*, and every input that shares a session id with one of them:
the connected components of the graph "input -- session id".  Sessions never span partitions, and
neither do inputs; every rule sees exactly the rows it sees in a single pass, so the findings are the
same.  Only the document's numbering is global (``x<n>``, ``s<n>``, ``f<n>`` follow the merged
history), and :func:`merge` renumbers the partial documents by the same keys a single pass sorts by;
sessions and reconnects keep their names (analyzer.document.names), made again over every partition
only to resolve a collision of two partitions' names.  ``tests/test_partitions.py`` checks that both give the same JSON.

One function analyzes a group, for every engine: :func:`analyze_group` takes the group's canonical
Arrow tables (in any row order: it restores the store's order) and returns its partial document as rows
of ``GROUP_SCHEMA`` (group, kind, seq, json); :func:`partials_from_rows` turns any engine's collected
rows back into ``Partial``s for :func:`merge`.  The local engine below goes through both, exactly as
:mod:`analyzer.scale.engine_spark` does with ``groupBy(component).applyInArrow``, so the two cannot drift.

Components are packed into ``n`` partitions by size (largest first, each into the lightest
partition); a component larger than the memory available is the limit of this scheme (one session
id reused across every input of an archive chains them all), and the plan says how large the
largest partition is.
"""
from __future__ import annotations

import gc
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import polars as pl
import pyarrow as pa

from analyzer.rules.registry import Analysis
from analyzer import document, pipeline
from analyzer import window as windows
from analyzer.scale import store as store_mod
from analyzer.signals import components as components_
from analyzer.window import Window


@dataclass
class Plan:
    partitions: list[list[str]]  # input sha256s per partition
    sizes: list[int]  # bytes of Parquet per partition
    components: int


def _input_bytes(store) -> dict[str, int]:
    """Bytes of Parquet per input: from the manifest on an object store (no folder walk there)."""
    where = store_mod.locate(store)
    if where.remote:
        return {r["sha256"]: sum(r[f"{t}_bytes"] or 0 for t in store_mod.TABLES) for r in store_mod.manifest(where).iter_rows(named=True)}
    store = where.root
    sizes: dict[str, int] = {}
    for table in store_mod.TABLES:
        base = store / table
        if not base.is_dir():
            continue
        for folder in base.iterdir():
            if folder.name.startswith("input="):
                sha = folder.name[len("input=") :]
                sizes[sha] = sizes.get(sha, 0) + sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    return sizes


def components(store: str | Path) -> pl.DataFrame:
    """Every stored input with its component ``label`` (the least sha256 of the component) and its bytes.

    Components of the graph "input -- session id" on the driver (:mod:`analyzer.signals.components`):
    every input of a session id is tied to the least input of that id.
    The distributed engine groups by this label; :func:`plan` packs the labels into partitions."""
    store = store_mod.locate(store)
    man = store_mod.manifest(store)
    shas = sorted(man["sha256"].to_list())
    pairs = (
        store_mod.scan(store, "exchanges")
        .select(
            "input",
            sid=pl.coalesce("req_session_id", "resp_session_id"),
        )
        .filter(pl.col("sid").is_not_null() & (pl.col("sid") != ""))
        .unique()
        .collect()
    )
    edges = (
        pairs.filter(pl.col("input").is_in(shas))  # (an input committed since the manifest was read: the next run's)
        .filter(pl.col("sid").is_duplicated())  # a session id of one input ties nothing
        .with_columns(other=pl.col("input").min().over("sid"))
        .filter(pl.col("input") != pl.col("other"))
    )
    label = components_.labels(pl.Series("input", shas, dtype=pl.String), edges.get_column("input"), edges.get_column("other"))
    sizes = _input_bytes(store)
    return label.with_columns(bytes=pl.col("input").replace_strict(sizes, default=0, return_dtype=pl.Int64)).sort("input")


def plan(store: str | Path, n: int) -> Plan:
    """Group the store's inputs into ``n`` partitions that never split a session or an input."""
    comps = (
        components(store)
        .group_by("label")
        .agg(pl.col("input").sort(), pl.col("bytes").sum())
        .sort(["bytes", "label"], descending=[True, False])
    )
    bins: list[list[str]] = [[] for _ in range(max(1, n))]
    load = [0] * len(bins)
    for inputs, size in comps.select("input", "bytes").iter_rows():
        i = min(range(len(bins)), key=lambda k: (load[k], k))
        bins[i].extend(inputs)
        load[i] += size
    keep = [i for i, b in enumerate(bins) if b]
    return Plan([sorted(bins[i]) for i in keep], [load[i] for i in keep], comps.height)


def _order_keys(exchanges: pl.DataFrame) -> pl.DataFrame:
    """Local ``pos`` with the key it was sorted by (the same sort as ``streams._ordered_exchanges``)."""
    return (
        exchanges.select("source", "xid", "started")
        .sort(["source", "xid"])
        .with_columns(_t=pl.col("started").forward_fill().over("source"))
        .sort(["_t", "source", "xid"], nulls_last=False)
        .with_row_index("lpos")
        .select(pl.col("lpos").cast(pl.Int64), "_t", "source", "xid")
    )


@dataclass
class Partial:
    doc: dict
    keys: pl.DataFrame  # lpos, _t, source, xid
    events: int
    messages: int
    anomalies: list[dict]


# --- the one per-group function both engines call -------------------------------------------------
#
# In: the canonical rows of one group (whole components; Spark: one component, local: a partition of
# them).  Out: an Arrow table of exactly GROUP_SCHEMA, one row per document item, sorted by (kind,
# seq), so that neither engine's row order can change anything.  Each item travels as JSON text that
# json.loads gives back equal (ints stay ints, floats are written as repr, the shortest text that
# reads back the same float), so the local engine, which goes through the same serialization, and
# Spark rebuild the very same Partials.

GROUP_SCHEMA = pa.schema([("group", pa.string()), ("kind", pa.string()), ("seq", pa.int64()), ("json", pa.string())])
ITEMS = {"exchange": "exchanges", "session": "sessions", "boundary": "boundaries", "finding": "findings"}
KINDS = (*ITEMS, "anomaly", "keys", "counts")  # every kind a group may emit
ORDER_COLUMNS = ("input", "row")  # optional on the way in: the stored order (input folder, row in its file)


def _canonical(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The rows in the order a single pass reads them from the store, with exactly the declared schema.

    An engine that does not keep order (Spark) sends ``input`` and ``row`` along; large strings and
    the engine's timestamp zone are cast back to the declared types."""
    if all(c in table.column_names for c in ORDER_COLUMNS):
        table = table.sort_by([(c, "ascending") for c in ORDER_COLUMNS])
    return table.select(schema.names).cast(schema)


def analyze_group(group: str, tables: dict[str, pa.Table], analysis: Analysis | None = None) -> pa.Table:
    """One group's canonical tables → its partial document as rows of GROUP_SCHEMA (``analysis``: the rules'
    thresholds, as :func:`analyzer.pipeline.run` takes them)."""
    tables = {name: _canonical(tables[name], schema) for name, schema in store_mod.TABLES.items()}
    if tables["exchanges"].num_rows == 0 and tables["anomalies"].num_rows == 0:
        return GROUP_SCHEMA.empty_table()  # nothing of this group survived the narrowing
    doc = pipeline.analyze_tables(tables, [], [], [], 0, keep_pos=True, analysis=analysis).document
    keys = _order_keys(pl.from_arrow(tables["exchanges"]))
    out: list[tuple[str, int, str]] = []

    def emit(kind: str, items) -> None:
        out.extend((kind, n, json.dumps(item, ensure_ascii=False)) for n, item in enumerate(items))

    for kind, field_ in ITEMS.items():
        emit(kind, doc[field_])
    emit("anomaly", doc["anomalies"])
    t_us = keys["_t"].dt.epoch("us").to_list()
    emit("keys", ([l, t, s, x] for l, t, s, x in zip(keys["lpos"].to_list(), t_us, keys["source"].to_list(), keys["xid"].to_list(), strict=True)))
    emit("counts", [{"events": int(tables["events"].num_rows), "messages": int(tables["messages"].num_rows)}])
    out.sort(key=lambda r: (r[0], r[1]))
    kinds, seqs, texts = (list(c) for c in zip(*out, strict=True))
    return pa.table({"group": [group] * len(texts), "kind": kinds, "seq": seqs, "json": texts}, schema=GROUP_SCHEMA)


KEYS_SCHEMA = {"lpos": pl.Int64, "_t": pl.Int64, "source": pl.String, "xid": pl.Int64}


def partials_from_rows(rows: pa.Table) -> list[Partial]:
    """The inverse of :func:`analyze_group` over any number of groups, in any row order: one Partial per
    group, by group label."""
    rows = rows.cast(GROUP_SCHEMA).sort_by([("group", "ascending"), ("kind", "ascending"), ("seq", "ascending")])
    by_group: dict[str, dict[str, list]] = {}
    for group, kind, text in zip(rows["group"].to_pylist(), rows["kind"].to_pylist(), rows["json"].to_pylist(), strict=True):
        by_group.setdefault(group, {k: [] for k in KINDS})[kind].append(json.loads(text))
    partials = []
    for group in sorted(by_group):
        got = by_group[group]
        keys = pl.DataFrame(got["keys"], schema=KEYS_SCHEMA, orient="row").with_columns(
            pl.col("_t").cast(pl.Datetime("us", "UTC"))
        )
        counts = got["counts"][0]
        doc = {field_: got[kind] for kind, field_ in ITEMS.items()}
        partials.append(Partial(doc, keys, counts["events"], counts["messages"], got["anomaly"]))
    return partials


def document_of(partials: list[Partial], store, used: set[str] | None, window: Window | None = None) -> pipeline.Result:
    """The merged document; ``used``: the paths that still contribute after narrowing (None: all);
    ``window``: the (resolved) window applied, recorded in the summary."""
    rows = store_mod.input_rows(store, used)
    man = store_mod.manifest(store)
    sha_of = dict(zip(man["path"].to_list(), man["sha256"].to_list()))
    return pipeline.Result(windows.stamp(merge(partials, rows, sha_of), window), sum(1 for r in rows if r["error"] is None))


def analyze(
    store: str | Path,
    n: int,
    since=None,
    until=None,
    sessions: tuple[str, ...] = (),
    progress: Callable[[str], None] | None = None,
    analysis: Analysis | None = None,
) -> pipeline.Result:
    """The findings document of the store, analyzed in ``n`` partitions one after another.

    ``since``/``until``: as :func:`analyzer.scale.store.load` (resolved once, against the whole store)."""
    store = store_mod.locate(store)
    p = plan(store, n)
    if progress:
        mb = [s / 1e6 for s in p.sizes]
        progress(f"{p.components} independent group(s) of inputs in {len(p.partitions)} partition(s); largest {max(mb, default=0):.0f} MB of Parquet")
    store_mod.input_rows(store)  # no store here: fail before reading anything
    win = store_mod.window(store, since, until)
    partials: list[Partial] = []
    used: set[str] = set()
    for i, shas in enumerate(p.partitions, start=1):
        tables, rows = store_mod.load(store, win.since, win.until, sessions, inputs=shas)
        used.update(r["path"] for r in rows)
        if progress:
            progress(f"partition {i}/{len(p.partitions)}: {len(shas)} input(s), {tables['exchanges'].num_rows} exchanges, {tables['events'].num_rows} events")
        partials.extend(partials_from_rows(analyze_group(f"p{i:06d}", tables, analysis)))
        del tables
        gc.collect()
    narrowed = win.bounded or bool(sessions)
    return document_of(partials, store, used if narrowed else None, win)


def merge(partials: list[Partial], input_rows: list[dict], sha_of: dict[str, str]) -> dict:
    """One document from partial ones, numbered as a single pass numbers it (analyzer.document)."""
    keys = pl.concat(
        [pt.keys.with_columns(part=pl.lit(i, pl.Int64)) for i, pt in enumerate(partials)]
        or [pl.DataFrame(schema={"lpos": pl.Int64, "_t": pl.Datetime("us", "UTC"), "source": pl.String, "xid": pl.Int64, "part": pl.Int64})]
    )
    seen = document.Names()
    for i, pt in enumerate(partials):
        for s in pt.doc["sessions"]:
            seen.see_session(i, s)
        for b in pt.doc["boundaries"]:
            seen.see_boundary(i, b)
    num = document.Numbering(global_positions(keys, len(partials)), seen.make())
    sessions = sorted((num.session(i, dict(s)) for i, pt in enumerate(partials) for s in pt.doc["sessions"]), key=lambda t: t[0])
    exchanges = sorted((num.exchange(i, dict(e)) for i, pt in enumerate(partials) for e in pt.doc["exchanges"]),
                       key=lambda e: int(e["exchange_id"][1:]))
    boundaries = sorted((num.boundary(i, dict(b)) for i, pt in enumerate(partials) for b in pt.doc["boundaries"]),
                        key=lambda b: int(b["request_exchange"][1:]))
    found = [num.finding(i, dict(f)) for i, pt in enumerate(partials) for f in pt.doc["findings"]]
    found.sort(key=lambda f: document.finding_key(f, f["_g"]))
    body = {
        "sessions": [s for _, s in sessions],
        "exchanges": exchanges,
        "boundaries": boundaries,
        "findings": list(document.number_findings(found)),
    }
    # anomalies in the order a single pass reads them from the store: by input folder, then as stored
    order = {sha: n for n, sha in enumerate(sorted(sha_of.values()))}
    anomalies = [a for pt in partials for a in pt.anomalies]
    anomalies = [a for _, _, a in sorted(((order.get(sha_of.get(a["source"], ""), -1), n, a) for n, a in enumerate(anomalies)), key=lambda t: (t[0], t[1]))]
    return document.assemble(
        input_rows=input_rows,
        errors=[],
        skipped=[],
        body=body,
        events=sum(pt.events for pt in partials),
        messages=sum(pt.messages for pt in partials),
        anomaly_rows=anomalies,
    )


def global_positions(keys: pl.DataFrame, parts: int) -> list[list[int]]:
    """``[part][lpos]``: each partition's exchanges' places in the merged history, ordered by
    (start time, source, xid) as a single pass orders them (local positions are 0..n-1 per partition)."""
    ordered = keys.sort(["_t", "source", "xid"], nulls_last=False).with_row_index("gpos")
    out: list[list[int]] = []
    for part in range(parts):
        out.append(ordered.filter(pl.col("part") == part).sort("lpos")["gpos"].cast(pl.Int64).to_list())
    return out
