"""Incremental audits: ``analyze --store STORE --audit NAME`` judges every session that inputs new to the audit
``NAME`` touch, each whole, and records them as judged only after the outputs are written.

A scheduled audit must never pass by skipping.  A window counted back from the clock (``--since 24h``) skips
every capture that arrives late (an archive of the two previous days copied in tonight), and a window counted
back from the captures' own times re-judges the same day while the archive stands still.  The audit's watermark
is not a time but the set of stored inputs it has judged, so what is new is what the store got since, whatever
its timestamps say.

The ledger, ``STORE/audits/<NAME>.parquet``, one row per input judged (``kind`` ``input``: its sha256, when) and
one per reconnect judged (``kind`` ``reconnect``: its name, session, day, host, verdict, events lost: the
store's trend, read back by the report).  Its rows' sha256 is in the file's metadata, as the manifest's is
(:mod:`analyzer.scale.manifest`): a damaged ledger is an error naming the fix, never "nothing judged yet"
(which would re-judge the archive) nor "everything judged" (which would skip it).

Crash and race safety.  The run pins one manifest snapshot (:func:`analyzer.scale.store.reading`), reads the
ledger, judges the sessions the snapshot's pending inputs touch, writes its outputs, and only then commits:

* a run killed before the commit (or whose outputs could not be written) leaves the ledger as it was: the next
  run judges the same inputs again, and the ones that came meanwhile (never skips);
* an input committed to the store after the snapshot is not in it, so it stays pending for the next run;
* two audits racing each commit what they judged as a read-merge-write of the ledger (a union of inputs, each
  reconnect's latest row): locally under ``flock`` on ``STORE/audits/<NAME>.lock`` (not the ingest lock, which
  an ingest holds for as long as it reads), on S3 by a compare-and-swap (``If-Match``) retried on conflict.
  Neither loses the other's inputs.

What stays pending.  An input that holds a *new* finding at or above ``--fail-on`` (one the baseline does not
know) is recorded as *held*, with those findings' fingerprints: every night judges it again, and fails again,
until the baseline knows them all (``mcp-sse-audit accept``) -- a night that nobody watched cannot turn green on
its own.  The first run whose baseline knows them records it without judging it again.  A damaged input fails
the night it arrives and is recorded (its damage does not heal; ``ingest`` repairs it).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.errors import AuditError, StoreError
from analyzer.scale.storage import Local, Remote, locate

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
FOLDER = "audits"
SCHEMA = pa.schema([
    ("kind", pa.string()),  # "input" | "held" | "reconnect"
    ("audited_at", pa.string()),  # RFC 3339 UTC: the run that judged it
    ("sha256", pa.string()),  # input and held rows: the stored input's sha256
    ("fingerprint", pa.string()),  # held rows: a new finding at or above --fail-on that holds the input back
    ("reconnect", pa.string()),  # reconnect rows: the reconnect's name, and what the trend needs
    ("session_id", pa.string()),
    ("day", pa.string()),
    ("host", pa.string()),
    ("verdict", pa.string()),
    ("diverged", pa.bool_()),
    ("events_lost", pa.int64()),
    ("events_duplicated", pa.int64()),
], metadata={"mcp_sse_audit_audit": "1"})
ROWS_SHA256 = b"mcp_sse_audit_rows_sha256"
CAS_TRIES = 20  # compare-and-swap rounds on an object store before giving up (each one another audit's commit)


def check_name(name: str) -> str | None:
    """Why ``name`` cannot name an audit (it becomes a file name), or None."""
    if not NAME.fullmatch(name):
        return f"--audit {name!r}: give a name of letters, digits, '.', '_' or '-' (at most 64, e.g. nightly)"
    return None


def ledger_path(name: str) -> str:
    return f"{FOLDER}/{name}.parquet"


@dataclass
class Ledger:
    """One reading of an audit's ledger."""

    name: str
    inputs: dict[str, str] = field(default_factory=dict)  # sha256 -> audited_at
    held: dict[str, frozenset[str]] = field(default_factory=dict)  # sha256 -> the fingerprints that hold it back
    reconnects: dict[str, dict] = field(default_factory=dict)  # name -> its row (the latest)

    def rows(self) -> list[dict]:
        base = dict.fromkeys(SCHEMA.names)
        return ([base | {"kind": "input", "sha256": sha, "audited_at": at} for sha, at in sorted(self.inputs.items())]
                + [base | {"kind": "held", "sha256": sha, "fingerprint": fp} for sha, fps in sorted(self.held.items()) for fp in sorted(fps)]
                + [base | r | {"kind": "reconnect", "reconnect": n} for n, r in sorted(self.reconnects.items())])

    def pending(self, shas: list[str], accepted: set[str] | None) -> tuple[list[str], list[str]]:
        """Of the stored inputs ``shas``: those to judge (never recorded, or held by a finding ``accepted`` -- the
        baseline's fingerprints, None without one -- does not hold yet) and those released (held only by
        findings accepted since: recorded without judging them again)."""
        todo, released = [], []
        for sha in shas:
            if sha in self.inputs:
                continue
            fps = self.held.get(sha)
            (released if fps and accepted is not None and fps <= accepted else todo).append(sha)
        return todo, released

    def merged(self, inputs: dict[str, str], held: dict[str, frozenset[str]], reconnects: list[dict]) -> Ledger:
        """This ledger with a run's recorded ``inputs``, ``held`` inputs and reconnect rows added (recorded wins over
        held, whichever run said it; a reconnect's later row wins)."""
        out = Ledger(self.name, dict(self.inputs), dict(self.held), dict(self.reconnects))
        for sha, at in inputs.items():
            out.inputs.setdefault(sha, at)
        for sha, fps in held.items():
            out.held[sha] = frozenset(fps)
        for sha in out.inputs:
            out.held.pop(sha, None)
        for r in reconnects:
            old = out.reconnects.get(r["reconnect"])
            if old is None or (r.get("audited_at") or "") >= (old.get("audited_at") or ""):
                out.reconnects[r["reconnect"]] = {k: r.get(k) for k in SCHEMA.names if k not in ("kind", "reconnect")}
        return out


def _encode(ledger: Ledger) -> bytes:
    rows = ledger.rows()
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    meta = dict(table.schema.metadata or {})
    meta[ROWS_SHA256] = _rows_sha256(table.to_pylist()).encode()
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(meta), sink)
    return sink.getvalue().to_pybytes()


def _rows_sha256(rows: list[dict]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=True, separators=(",", ":")).encode()).hexdigest()


def _decode(name: str, raw: bytes | None, where: str) -> Ledger:
    if raw is None:
        return Ledger(name)
    fix = (f"move it aside to judge the whole store again under --audit {name} (or pick another name); nothing is "
           "skipped that way, only judged twice")
    try:
        table = pq.read_table(pa.BufferReader(raw))
        rows = table.select(SCHEMA.names).cast(SCHEMA).to_pylist()
    except Exception as exc:  # noqa: BLE001 -- any damage of the file (as the manifest's reader, analyzer/scale/manifest.py)
        raise StoreError(f"{where}: the audit ledger is damaged (not a readable ledger: {exc.__class__.__name__}); {fix}") from None
    want = (table.schema.metadata or {}).get(ROWS_SHA256)
    if want is None or _rows_sha256(rows) != want.decode("utf-8", "replace"):
        raise StoreError(f"{where}: the audit ledger is damaged (its rows do not match its checksum); {fix}")
    out = Ledger(name)
    held: dict[str, set[str]] = {}
    for r in rows:
        if r["kind"] == "input" and r["sha256"]:
            out.inputs[r["sha256"]] = r["audited_at"]
        elif r["kind"] == "held" and r["sha256"] and r["fingerprint"]:
            held.setdefault(r["sha256"], set()).add(r["fingerprint"])
        elif r["kind"] == "reconnect" and r["reconnect"]:
            out.reconnects[r["reconnect"]] = {k: r[k] for k in SCHEMA.names if k not in ("kind", "reconnect")}
    out.held = {sha: frozenset(fps) for sha, fps in held.items()}
    return out


def read(store, name: str) -> Ledger:
    """The ledger of audit ``name`` (empty when it has never committed)."""
    where = locate(store)
    if isinstance(where, Local):
        path = where.root / ledger_path(name)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raw = None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read the audit ledger ({exc.strerror})") from None
        return _decode(name, raw, str(path))
    rel = ledger_path(name)
    try:
        raw = where.read_bytes(rel) if where.exists(rel) else None
    except FileNotFoundError:
        raw = None
    except (OSError, pa.ArrowException) as exc:
        raise StoreError(where.failure(exc, f"cannot read the audit ledger {rel}")) from None
    return _decode(name, raw, where.show(rel))


def commit(store, name: str, inputs: dict[str, str], held: dict[str, frozenset[str]], reconnects: list[dict]) -> Ledger:
    """Record a run's judged ``inputs`` (sha256 -> when), ``held`` ones (sha256 -> the fingerprints of the new
    failing findings in them) and ``reconnects`` (trend rows with ``reconnect`` and ``audited_at``): a
    read-merge-write no other audit's commit can interleave with.  The ledger committed."""
    from analyzer.atomic import describe, write_file_atomically
    from analyzer.scale.store_commit import hook

    where = locate(store)
    hook("audit_before_commit")  # the crash tests kill the run here: outputs written, nothing recorded
    if isinstance(where, Local):
        folder = where.root / FOLDER
        try:
            folder.mkdir(exist_ok=True)
            fd = open(folder / f"{name}.lock", "a+")
        except OSError as exc:
            raise StoreError(f"{folder}: cannot record the audit ({describe(exc)}); the next run judges these inputs again") from None
        with fd:
            fcntl.flock(fd, fcntl.LOCK_EX)  # held for one read-merge-write: milliseconds, so waiting is bounded by it
            new = read(where, name).merged(inputs, held, reconnects)
            hook("audit_merged")
            try:
                write_file_atomically(folder / f"{name}.parquet", _encode(new))
            except OSError as exc:
                raise StoreError(f"{folder / (name + '.parquet')}: cannot record the audit ({describe(exc)}); "
                                 "the next run judges these inputs again") from None
        return new
    from analyzer.scale.store_remote import Conflict

    cond = _conditional(where)
    rel = ledger_path(name)
    for _ in range(CAS_TRIES):
        got = cond.get(rel)
        new = _decode(name, None if got is None else got[0], where.show(rel)).merged(inputs, held, reconnects)
        hook("audit_merged")
        try:
            cond.put(rel, _encode(new), None if got is None else got[1])
            return new
        except Conflict:  # another audit committed between our read and write: merge with its ledger
            time.sleep(0.05)
    raise StoreError(f"{where.show(rel)}: could not record the audit after {CAS_TRIES} tries (other audits kept committing); "
                     "the next run judges these inputs again")


def _conditional(where: Remote):
    from analyzer.scale.store_remote import Conditional

    return Conditional(where)


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def writable(store) -> None:
    """An audit that could not commit would judge the same inputs every night: refuse a store it cannot write
    (gs://, read-only here) before judging anything."""
    where = locate(store)
    if isinstance(where, Remote) and where.scheme != "s3":
        raise AuditError(f"--audit records what it judged in the store, and {where.show()} is read-only here ({where.scheme}:// has "
                         "no conditional write); audit a local or s3:// store, or use --since/--until")
