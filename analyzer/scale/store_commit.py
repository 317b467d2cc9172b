"""The store's writer: one atomic commit per input, under a writer lock; cleaning and repair.

A commit is only as good as its order on disk: data fsync'd before the rename that publishes it,
the directory fsync'd after it, so that after a power cut or a ``kill -9`` the name points either at
the old bytes or at the whole new ones.  The protocol (layout: :mod:`analyzer.scale.store`; manifest: :mod:`analyzer.scale.manifest`):

1. the input's four parts are written and fsync'd in ``STORE/.staging/<pid>-<random>/``;
2. renamed to fresh names ``<table>/input=<sha>/part-<gen>.parquet`` (a repair first deletes the
   damaged parts), and their folders fsync'd;
3. the new manifest is written and fsync'd in the staging folder, the old one hard-linked to
   ``inputs.parquet.prev``, the new one ``os.replace``d over ``inputs.parquet``, the store fsync'd.

Step 3 is the commit.  Before it, what steps 1-2 left is listed by no manifest row, so readers never
see it, and the next writer (under the lock, so no live writer owns it) removes it.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import secrets
import signal
import socket
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.atomic import describe, fsync_dir, fsync_file, write_file_atomically  # noqa: F401 (describe: re-exported)
from analyzer.ingest.reading import Reading
from analyzer.errors import StoreError
from analyzer.pipeline import read_inputs
from analyzer.scale import store_remote
from analyzer.scale.manifest import DIGEST_KEY, MANIFEST, PREVIOUS, TABLES, Snapshot, damage, key_text, manifest_table, read_manifest  # noqa: F401 (DIGEST_KEY: re-exported)
from analyzer.scale.storage import Local, Remote, file_sha256, locate

LOCK = ".lock"
STAGING = ".staging"
LOCK_POLL = 0.1  # seconds between two tries while waiting for the lock

# Test hooks, read only here: MCP_SSE_AUDIT_TEST_KILL_AT="point[:n]" sends SIGKILL to this process the
# n-th time (default 1st) it reaches ``point``; MCP_SSE_AUDIT_TEST_PAUSE_AT="point" waits there until
# the file MCP_SSE_AUDIT_TEST_RELEASE exists (at most 60 s), after creating "<that file>.waiting".
KILL_ENV = "MCP_SSE_AUDIT_TEST_KILL_AT"
PAUSE_ENV = "MCP_SSE_AUDIT_TEST_PAUSE_AT"
RELEASE_ENV = "MCP_SSE_AUDIT_TEST_RELEASE"
_reached: dict[str, int] = {}


def hook(point: str) -> None:
    """A named point of the commit protocol, where the crash tests kill or pause the writer."""
    _reached[point] = _reached.get(point, 0) + 1
    kill = os.environ.get(KILL_ENV, "")
    if kill:
        name, _, nth = kill.partition(":")
        if name == point and _reached[point] == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(PAUSE_ENV) == point and os.environ.get(RELEASE_ENV):
        release = Path(os.environ[RELEASE_ENV])
        Path(str(release) + ".waiting").write_text(str(os.getpid()))
        deadline = time.monotonic() + 60
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@contextmanager
def writer_lock(store: Path, timeout: float = 0.0) -> Iterator[None]:
    """Hold ``STORE/.lock`` (fcntl.flock) for the whole block; one writer per store.

    The holder writes its pid, host and start time into the file, so that a second writer that
    gives up after ``timeout`` seconds can name it.  The kernel drops the lock when the holder dies,
    even by ``kill -9``: there is no stale lock to clean up.  (flock is local: not for NFS.)"""
    path = store / LOCK
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise StoreError(f"{path}: cannot open the store's lock file: {describe(exc)}") from None
    try:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 512, 0).decode("utf-8", "replace").strip() or "a process that has not written its pid yet"
                    waited = f" after waiting {timeout:g} s" if timeout > 0 else ""
                    raise StoreError(
                        f"{store}: another ingest is writing to this store ({holder}); gave up{waited}. "
                        f"Wait for it to finish, or give --lock-timeout SECONDS to wait for it"
                    ) from None
                time.sleep(LOCK_POLL)
        started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, started {started}\n".encode(), 0)
        hook("after_lock")
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a stale pid would mislead the next message
    finally:
        os.close(fd)  # releases the flock


def clean_staging(store: Path) -> list[str]:
    """Remove what dead writers left: ``STORE/.staging/*`` and the previous version's ``*.tmp`` files.

    Only called under the writer lock, so nothing here belongs to a live writer."""
    removed: list[str] = []
    staging = store / STAGING
    if staging.is_dir():
        for entry in sorted(staging.iterdir()):
            _remove_tree(entry)
            removed.append(str(entry))
    for tmp in sorted(store.glob("*.tmp")) + sorted(store.glob("*/input=*/*.tmp")):
        tmp.unlink()
        removed.append(str(tmp))
    return removed


def _remove_tree(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir():
            _remove_tree(child)
        path.rmdir()
    else:
        path.unlink()


def new_staging(store: Path) -> Path:
    staging = store / STAGING
    staging.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(dir=staging, prefix=f"{os.getpid()}-"))


def remove_staging(folder: Path) -> None:
    try:
        _remove_tree(folder)
    except OSError:
        pass  # best effort: the next ingest removes what is left, under the lock


# --- the commit of one input --------------------------------------------------------------------------


@dataclass
class IngestReport:
    added: list[str]
    already: list[str]
    unreadable: list[str]
    skipped: list[str]
    repaired: list[str] = field(default_factory=list)
    unrepairable: list[str] = field(default_factory=list)  # messages: input, part, why not
    cleaned: list[str] = field(default_factory=list)  # staging leftovers of dead writers
    orphans: list[str] = field(default_factory=list)  # part files no manifest row lists, removed
    migrated: int = 0  # inputs of a version-1 store given checksums
    duplicates: int = 0  # duplicate manifest rows dropped
    dropped: list[str] = field(default_factory=list)  # unrepairable inputs removed (drop_unrepairable)
    reread: list[str] = field(default_factory=list)  # stored inputs read again: the key log decrypts more of them
    unkeyed: bool = False  # a store made before its digests were keyed: they stay unkeyed (see DIGEST_KEY)




# An input is known by the sha256 of its bytes, but what the store holds of a capture with TLS depends on the
# key log it was read with.  With a key log (--tls-keylog), a stored input whose copy lists TLS connections it
# could not decrypt is read again, and its copy replaced only if the keys decrypt more of them; otherwise it is
# "already" stored, as before.  (Without a key log nothing changes: the store never re-reads for keys.)
UNDECRYPTED = frozenset(("tls_not_decrypted", "tls_no_key"))


def _undecrypted(codes) -> int:
    return sum(1 for c in codes if c in UNDECRYPTED)


def _stored_undecrypted(loc: Local | Remote, row: dict) -> int:
    """TLS connections the stored copy could not decrypt (rows of its anomalies part; 0 when unreadable)."""
    try:
        return _undecrypted(loc.read_table(row["anomalies_file"]).column("code").to_pylist())
    except (OSError, pa.ArrowException, KeyError):
        return 0


def _commit_manifest(store: Path, rows: list[dict], staging: Path) -> None:
    """The one atomic step that publishes: a whole new manifest replaces the old one."""
    tmp = staging / MANIFEST
    pq.write_table(manifest_table(rows), tmp)
    fsync_file(tmp)
    hook("before_manifest_replace")
    if (store / MANIFEST).exists():  # keep the previous commit: the fix for a manifest damaged later
        os.link(store / MANIFEST, staging / PREVIOUS)
        os.replace(staging / PREVIOUS, store / PREVIOUS)
    os.replace(tmp, store / MANIFEST)
    fsync_dir(store)
    hook("after_manifest_replace")


def _remove_orphans(store: Path, rows: list[dict]) -> list[str]:
    """Part files in ``<table>/input=*/`` that no manifest row lists: parts of a commit that never happened."""
    listed = {r[f"{t}_file"] for r in rows for t in TABLES}
    removed = []
    for t in TABLES:
        base = store / t
        if not base.is_dir():
            continue
        for folder in sorted(base.glob("input=*")):
            for f in sorted(folder.iterdir()):
                if f.is_file() and f.name.endswith((".parquet", ".tmp")) and f"{t}/{folder.name}/{f.name}" not in listed:
                    f.unlink()
                    removed.append(str(f))
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
    return removed


class LocalCommit:
    """The writer's operations on a local folder (the protocol of this module's docstring); the object
    store's are :class:`analyzer.scale.store_remote.RemoteCommit`, and :func:`_ingest_locked` drives either."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.loc = Local(store)
        self.published = False

    def describe(self, exc: OSError) -> str:
        return describe(exc)

    def read(self) -> Snapshot:
        return read_manifest(self.store)

    def clean(self) -> list[str]:
        return clean_staging(self.store)

    def commit_rows(self, rows: list[dict]) -> None:
        staging = new_staging(self.store)
        try:
            _commit_manifest(self.store, rows, staging)
        finally:
            remove_staging(staging)

    def remove_orphans(self, rows: list[dict]) -> list[str]:
        return _remove_orphans(self.store, rows)

    def digest_key(self, new_store: bool) -> str | None:
        """The store's digest key (:data:`DIGEST_KEY`), made now for a new store; None for an older one without."""
        path = self.store / DIGEST_KEY
        try:
            return key_text(path.read_bytes(), str(path))
        except FileNotFoundError:
            if not new_store:
                return None
        key = secrets.token_hex(32)
        write_file_atomically(path, key.encode() + b"\n")
        os.chmod(path, 0o600)
        return key

    def publish(self, digest: str, part, got: dict, old: dict | None, others: list[dict]) -> dict:
        """One input committed: parts aside, renamed in, then the manifest; a crash loses at most this input."""
        store = self.store
        self.published = False
        staging = new_staging(store)
        placed: list[Path] = []
        try:
            gen = secrets.token_hex(6)
            for name, schema in TABLES.items():
                table = getattr(part, name).cast(schema)
                tmp = staging / f"{name}.parquet"
                pq.write_table(table, tmp, compression="zstd")
                fsync_file(tmp)
                got |= {f"{name}_file": f"{name}/input={digest}/part-{gen}.parquet", f"{name}_bytes": tmp.stat().st_size,
                        f"{name}_rows": table.num_rows, f"{name}_sha256": file_sha256(tmp)}
            hook("after_staging")
            if old is not None:  # a repair: the damaged parts go first, so no folder ever holds two
                for name in TABLES:
                    (store / old[f"{name}_file"]).unlink(missing_ok=True)
            for name in TABLES:
                dest = store / got[f"{name}_file"]
                dest.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / f"{name}.parquet", dest)
                placed.append(dest)
                hook("after_part")
            for name in TABLES:
                fsync_dir(store / name / f"input={digest}")
                fsync_dir(store / name)
            hook("after_parts")
            _commit_manifest(store, others + [got], staging)
            self.published = True
        except OSError:
            if not self.published:
                for p in placed:  # not listed: invisible anyway, but leave no orphans behind
                    p.unlink(missing_ok=True)
            raise
        finally:
            remove_staging(staging)
        return got


def ingest(
    paths: list[str],
    store,
    reading: Reading = Reading(),
    progress: Callable[[str], None] | None = None,
    lock_timeout: float = 0.0,
    drop_unrepairable: bool = False,
) -> IngestReport:
    """Parse the inputs the store does not hold yet and add their tables, one atomic commit per input (read as
    ``reading`` says; its key log also decides which stored inputs are re-read: see ``retry`` below).

    Holds the writer lock throughout (waits up to ``lock_timeout`` seconds for it).  Before adding
    anything it cleans dead writers' leftovers, adds checksums to a version-1 store, and re-reads the
    inputs whose parts are damaged from their source files (``drop_unrepairable``: removes those it
    cannot, rows and parts, so that the store can be analyzed without them).  ``store``: a folder, or
    an object store URI (:mod:`analyzer.scale.storage`; the commit there: :mod:`analyzer.scale.store_remote`)."""
    where = locate(store)
    if isinstance(where, Remote):
        ops = store_remote.open_writer(where, lock_timeout, LOCK_POLL, hook)
        try:
            return _ingest_locked(paths, ops, reading, progress, drop_unrepairable)
        except OSError as exc:  # outside an input's commit: cleaning, migrating
            raise StoreError(f"{where.show()}: cannot update the store: {ops.describe(exc)}; no input was half-committed") from None
        finally:
            ops.lease.release()
    store = where.root
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"{store}: cannot create the store folder: {describe(exc)}") from None
    with writer_lock(store, lock_timeout):
        try:
            return _ingest_locked(paths, LocalCommit(store), reading, progress, drop_unrepairable)
        except OSError as exc:  # outside an input's commit: cleaning, migrating
            raise StoreError(f"{store}: cannot update the store: {describe(exc)}; no input was half-committed") from None


def _ingest_locked(paths, ops, reading: Reading, progress, drop_unrepairable=False) -> IngestReport:
    """The ingest under the lock, on either backend (``ops``: LocalCommit or RemoteCommit)."""
    loc = ops.loc
    report = IngestReport([], [], [], [])
    report.cleaned = ops.clean()
    snap = ops.read()
    key = ops.digest_key(new_store=not snap.rows)
    report.unkeyed = key is None
    reading = dataclasses.replace(reading, digest_key=key)
    current: dict[str, dict] = {r["sha256"]: r for r in snap.rows}
    broken = {d.sha: d for d in reversed(damage(snap))}  # the first damaged part of each input
    if snap.legacy or snap.duplicates:  # migrate: record the parts as found (damaged ones stay unchecked)
        for r in current.values():
            if r["sha256"] in broken:
                continue
            for t in TABLES:
                rel = r[f"{t}_file"]
                r |= {f"{t}_bytes": loc.stat(rel)[0], f"{t}_sha256": loc.sha256(rel), f"{t}_rows": loc.num_rows(rel)}
        ops.commit_rows(list(current.values()))
        report.migrated = len(current) - len(broken) if snap.legacy else 0
        report.duplicates = snap.duplicates
    report.orphans = ops.remove_orphans(list(current.values()))
    given = set(paths)
    extra = []
    for sha, d in broken.items():  # re-read from the source path, when it still has these bytes
        try:
            same = os.path.isfile(d.path) and file_sha256(d.path) == sha
        except OSError:
            same = False
        if same and d.path not in given:
            extra.append(d.path)
    known = set(current) - set(broken)
    sha: dict[str, str] = {}
    fixed: set[str] = set()
    keys = len(reading.keys) > 0
    retry: dict[str, int] = {}  # path -> TLS connections its stored copy could not decrypt

    def new(path: str) -> bool:
        try:
            digest = file_sha256(path)
        except OSError:
            return True  # let the reader report it, with its reason
        if digest in known and keys and digest not in sha.values():
            before = _stored_undecrypted(loc, current[digest])
            if before:
                retry[path] = before
                sha[path] = digest
                return True
        if digest in known or digest in sha.values():
            report.already.append(path)
            return False
        sha[path] = digest
        return True

    def write(part, row: dict) -> None:
        """One input committed (``ops.publish``); a crash loses at most this input."""
        digest = sha[part.source]
        if part.source in retry and _undecrypted(part.anomalies.column("code").to_pylist()) >= retry[part.source]:
            report.already.append(row["path"])  # the key log decrypts nothing more of it: the stored copy stays
            return
        old = current.get(digest)
        got = {"sha256": digest, "path": row["path"], "format": row["format"], "records": row["records"],
               "rejected": row["rejected"], "notes": json.dumps(row["notes"])}
        try:
            got = ops.publish(digest, part, got, old, [r for s, r in current.items() if s != digest])
        except OSError as exc:
            published = ops.published
            state = "was committed but not flushed to disk" if published else "was not committed (nothing of it is in the store)"
            done = len(report.added) + len(report.repaired)
            raise StoreError(f"{loc.show()}: cannot store {row['path']}: {ops.describe(exc)}; it {state}; the {done} input(s) stored before it in this run are complete") from None
        current.pop(digest, None)
        current[digest] = got
        if digest in broken:
            fixed.add(digest)
        (report.repaired if digest in broken else report.reread if part.source in retry else report.added).append(row["path"])

    # streaming: each input is committed as soon as it is read, and only one is held in memory
    got = read_inputs(list(paths) + extra, dataclasses.replace(reading, compact=False), progress, only=new, sink=write)
    report.unreadable = [e.source for e in got.errors]
    report.skipped = got.skipped
    for digest, d in broken.items():
        if digest in fixed:
            continue
        if not os.path.isfile(d.path):
            why = f"its file {d.path} is gone"
        elif d.path in sha and sha[d.path] == digest or d.path in extra:
            why = f"its file {d.path} could not be read again"
        else:
            why = f"its file {d.path} now has other bytes"
        if drop_unrepairable:
            report.dropped.append(f"{d.path} (sha256 {digest[:16]}): {why}")
        else:
            report.unrepairable.append(f"{d}; cannot repair it: {why} (give a copy with the same bytes to ingest, or drop it with --drop-unrepairable)")
    gone = [current.pop(digest) for digest in broken if digest not in fixed] if drop_unrepairable else []
    if gone:
        ops.commit_rows(list(current.values()))
        ops.remove_orphans(list(current.values()))  # their parts, now listed by no row
    return report
