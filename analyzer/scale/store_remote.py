"""The store's writer on an object store (``s3://``): a lease for the lock, a compare-and-swap for the commit.

An object store has no rename and no flock, but it has two things that are enough:

* a PUT of one object is atomic for readers (they get the old object or the whole new one), and
* S3's conditional writes: ``If-None-Match: *`` (create only if absent) and ``If-Match: <etag>``
  (replace only the version I read), on PutObject and DeleteObject; AWS S3 enforces both since
  2024, and the test server (moto, ``tests/test_store_s3.py``) too.

The commit of one input (the layout and manifest are those of :mod:`analyzer.scale.store` and :mod:`analyzer.scale.manifest`):

1. its four parts are PUT under fresh keys ``<table>/input=<sha>/part-<gen>.parquet`` (``gen``
   random: no key is ever written twice, so no reader ever sees a part change);
2. the previous manifest is copied to ``inputs.parquet.prev`` (a backup, like the local one);
3. the new manifest is PUT with ``If-Match: <the ETag of the manifest this writer read>`` (or
   ``If-None-Match: *`` for the first one).  That PUT is the commit.

Readers list parts only from the manifest, so parts of an interrupted commit are invisible, as on disk.

The lock is a *lease*: the object ``STORE/.lock`` (holder pid, host, start, expiry), created with
``If-None-Match: *``, renewed every third of its duration with ``If-Match`` on its own ETag by a
background thread, deleted with ``If-Match`` at the end.  A writer killed with ``kill -9`` cannot
release it, so a lease is *stale* when its expiry (holder's clock) has passed, or when this writer has
watched the same ETag for a whole lease duration (its own clock: no clock skew involved); a stale lease
is taken over with ``If-Match`` on its ETag, so of two writers taking it over one wins.  The duration
is ``MCP_SSE_AUDIT_LEASE_SECONDS`` (default 60): a killed writer blocks the store that long.

A lease can be broken (a writer paused past its expiry, a clock far off), so it is not what keeps the
data safe; the manifest's compare-and-swap is.  Every commit names the manifest version this writer
last saw; a writer whose ETag is stale (someone else committed) stops with an exit-2 error and commits
nothing more, and a writer removes unlisted parts only after a compare-and-swap of the manifest that
lists none of them succeeded, so a stalled writer that wakes up cannot publish parts another one
deleted: its own compare-and-swap fails first.  Two writers can therefore never lose each other's
inputs or list one twice, whatever the lease does.

What this costs: each input's parts are held in memory to be PUT (the local writer stages them on
disk), and a writer killed mid-upload may leave an incomplete multipart upload, which S3 keeps (and
bills) until a bucket lifecycle rule ``AbortIncompleteMultipartUpload`` removes it.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import threading
import time
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from analyzer.errors import StoreError
from analyzer.scale.manifest import MANIFEST, PREVIOUS, TABLES, Snapshot, manifest_table, read_manifest
from analyzer.scale.storage import ATTEMPTS, CONNECT_TIMEOUT, Remote, explain, redact, request_timeout

LEASE_ENV = "MCP_SSE_AUDIT_LEASE_SECONDS"
LOCK = ".lock"
INSTALL = "pip install 'mcp-sse-audit[s3]'"
PART = re.compile(r"(?P<table>[a-z]+)/input=[0-9a-f]{64}/part-[0-9a-z]+\.parquet")


class Conflict(Exception):
    """A conditional write's precondition failed: the object is not the version we named."""


class RemoteIOError(OSError):
    """An object store request failed; ``strerror`` says why and what to do."""


def lease_seconds() -> float:
    try:
        return max(1.0, float(os.environ.get(LEASE_ENV, "60")))
    except ValueError:
        raise StoreError(f"{LEASE_ENV}={os.environ[LEASE_ENV]!r}: give the lease duration in seconds (default 60)") from None


class Conditional:
    """The conditional requests pyarrow does not expose, through botocore (same endpoint and region)."""

    def __init__(self, where: Remote) -> None:
        if where.scheme != "s3":
            raise StoreError(
                f"{where.show()}: writing a store to {where.scheme}:// is not supported: pyarrow exposes no conditional "
                f"write (generation precondition) for it, so neither the lock nor the commit could be made safe. "
                f"Ingest into a local store or s3://, then copy it; analyze reads {where.scheme}:// stores"
            )
        try:
            import botocore.session
            from botocore.config import Config
        except ImportError:
            raise StoreError(f"{where.show()}: writing to s3:// needs botocore for its conditional writes: {INSTALL}") from None
        import botocore.exceptions

        self.where = where
        self.errors = botocore.exceptions
        config = Config(
            connect_timeout=min(CONNECT_TIMEOUT, request_timeout()), read_timeout=request_timeout(),
            retries={"max_attempts": ATTEMPTS, "mode": "standard"},
            s3={"addressing_style": "path"} if where.endpoint else {},
        )
        session = botocore.session.get_session()
        self.client = session.create_client("s3", region_name=where.region, endpoint_url=where.endpoint, config=config)

    def _call(self, doing: str, fn, **kwargs):
        try:
            return fn(Bucket=self.where.bucket, **kwargs)
        except self.errors.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                raise Conflict(code) from None
            if code in ("NoSuchKey", "404") or status == 404 and code != "NoSuchBucket":
                raise FileNotFoundError(doing) from None
            raise RemoteIOError(0, f"{doing}: {explain(exc, self.where)}") from None
        except self.errors.BotoCoreError as exc:
            raise RemoteIOError(0, f"{doing}: {explain(exc, self.where)}") from None

    def get(self, rel: str) -> tuple[bytes, str] | None:
        """The object's bytes and their ETag (one response, so they belong together), or None."""
        try:
            got = self._call(f"cannot read {rel}", self.client.get_object, Key=self.where.objkey(rel))
        except FileNotFoundError:
            return None
        return got["Body"].read(), got["ETag"]

    def put(self, rel: str, data: bytes, etag: str | None) -> str:
        """PUT ``rel`` if it is still the version ``etag`` (None: only if absent); its new ETag, or Conflict."""
        cond = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
        try:
            return self._call(f"cannot write {rel}", self.client.put_object, Key=self.where.objkey(rel), Body=data, **cond)["ETag"]
        except FileNotFoundError:  # If-Match on an object that is gone
            raise Conflict("gone") from None

    def remove(self, rel: str) -> None:
        """Delete ``rel`` (absent: nothing to do).  Not pyarrow's delete_file: that leaves an empty
        ``folder/`` marker object behind when it removes a folder's last object."""
        self._call(f"cannot delete {rel}", self.client.delete_object, Key=self.where.objkey(rel))

    def delete(self, rel: str, etag: str) -> None:
        try:
            self._call(f"cannot delete {rel}", self.client.delete_object, Key=self.where.objkey(rel), IfMatch=etag)
        except FileNotFoundError:
            pass


# --- the lease -------------------------------------------------------------------------------------


class Lease:
    """``STORE/.lock`` held by this process, renewed in the background (see the module docstring)."""

    def __init__(self, where: Remote, cond: Conditional, ttl: float) -> None:
        self.where, self.cond, self.ttl = where, cond, ttl
        self.etag: str | None = None
        self.lost: str | None = None
        self.took_over: str | None = None  # the holder of a stale lease this one replaced
        self.started = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _body(self) -> bytes:
        return json.dumps({
            "holder": f"pid {os.getpid()} on {socket.gethostname()}, started {self.started}",
            "pid": os.getpid(), "host": socket.gethostname(), "started": self.started,
            "ttl": self.ttl, "expires": time.time() + self.ttl,
        }).encode()

    def acquire(self, timeout: float, poll: float) -> None:
        deadline = time.monotonic() + max(0.0, timeout)
        watched: dict[str, float] = {}  # ETag -> when this writer first saw it
        holder = "a writer"
        while True:
            try:
                self.etag = self.cond.put(LOCK, self._body(), None)
                break
            except Conflict:
                pass
            got = self.cond.get(LOCK)
            if got is not None:
                raw, etag = got
                try:
                    info = json.loads(raw)
                    holder, expires, ttl = str(info["holder"]), float(info["expires"]), float(info["ttl"])
                except (ValueError, KeyError, TypeError):
                    holder, expires, ttl = "an unreadable lease", 0.0, 0.0
                first = watched.setdefault(etag, time.monotonic())
                if expires < time.time() or time.monotonic() - first >= ttl:
                    try:
                        self.etag = self.cond.put(LOCK, self._body(), etag)
                        self.took_over = holder
                        break
                    except Conflict:
                        continue  # another writer took it over first, or the holder renewed it: look again
            if time.monotonic() >= deadline:
                waited = f" after waiting {timeout:g} s" if timeout > 0 else ""
                raise StoreError(
                    f"{self.where.show()}: another ingest is writing to this store ({holder}); gave up{waited}. "
                    f"Wait for it to finish, or give --lock-timeout SECONDS to wait for it (a writer that died frees "
                    f"the store when its lease expires, at most {LEASE_ENV} seconds, default 60, after it last renewed it)"
                )
            time.sleep(poll)
        self._thread = threading.Thread(target=self._renew_loop, name="store-lease", daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        with self._mutex:
            if self.lost:
                return
            try:
                self.etag = self.cond.put(LOCK, self._body(), self.etag)
            except Conflict:
                self.lost = "another writer took the store's lease over"

    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self._renew()
            except OSError:
                continue  # the endpoint hiccuped: try again; confirm() before a commit decides
            if self.lost:
                return

    def confirm(self) -> None:
        """Renew now; a StoreError if the lease is no longer this writer's (then nothing more is committed)."""
        self._renew()
        if self.lost:
            raise StoreError(
                f"{self.where.show()}: this ingest lost the store's lease ({self.lost}: it stalled longer than the lease, "
                f"{self.ttl:g} s); it stopped before committing more. Run ingest again"
            )

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.ttl)
        with self._mutex:
            if self.etag and not self.lost:
                try:
                    self.cond.delete(LOCK, self.etag)
                except (Conflict, OSError):
                    pass  # taken over meanwhile, or unreachable: it expires by itself


# --- the commit ------------------------------------------------------------------------------------


class RemoteCommit:
    """The writer's operations on an object store, as :class:`analyzer.scale.store_commit.LocalCommit` has them on disk."""

    def __init__(self, where: Remote, cond: Conditional, lease: Lease, hook) -> None:
        self.where, self.cond, self.lease, self.hook = where, cond, lease, hook
        self.loc = where
        self.etag: str | None = None  # the manifest version this writer last read or wrote
        self.raw: bytes | None = None
        self.published = False

    def describe(self, exc: OSError) -> str:
        return exc.strerror if isinstance(exc, RemoteIOError) else explain(exc, self.where)

    def read(self) -> Snapshot:
        got = self.cond.get(MANIFEST)
        if got is None:
            self.etag, self.raw = None, None
            return Snapshot(self.where, [])
        self.raw, self.etag = got
        return read_manifest(self.where, self.raw)

    def digest_key(self, new_store: bool) -> str | None:
        """The store's digest key (store_commit.DIGEST_KEY), made now for a new store (If-None-Match: one maker wins)."""
        from analyzer.scale.manifest import DIGEST_KEY, key_text
        import secrets

        got = self.cond.get(DIGEST_KEY)
        if got is not None:
            return key_text(got[0], self.where.show(DIGEST_KEY))
        if not new_store:
            return None
        try:
            self.cond.put(DIGEST_KEY, secrets.token_hex(32).encode() + b"\n", None)
        except Conflict:  # another writer made it first: its key
            pass
        got = self.cond.get(DIGEST_KEY)
        return key_text(got[0] if got else None, self.where.show(DIGEST_KEY))

    def clean(self) -> list[str]:
        return []  # nothing is staged: parts go straight to fresh keys; unlisted ones are orphans

    def _put_manifest(self, rows: list[dict]) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(manifest_table(rows), sink)
        data = sink.getvalue().to_pybytes()
        self.lease.confirm()
        if self.raw is not None:  # keep the previous commit: the fix for a manifest damaged later
            self.where.write_bytes(PREVIOUS, self.raw)
        try:
            self.etag = self.cond.put(MANIFEST, data, self.etag)
        except Conflict:
            raise StoreError(
                f"{self.where.show()}: another writer committed to this store while this ingest was writing (its lease was "
                f"taken over); this run stopped and did not commit its current input, so nothing was lost or listed twice. "
                f"Run ingest again"
            ) from None
        self.raw = data

    def commit_rows(self, rows: list[dict]) -> None:
        self.hook("before_manifest_replace")
        self._put_manifest(rows)
        self.hook("after_manifest_replace")

    def remove_orphans(self, rows: list[dict]) -> list[str]:
        """Parts no row lists, removed only after a compare-and-swap of the manifest that lists none of them."""
        listed = {r[f"{t}_file"] for r in rows for t in TABLES}
        found = []
        for t in TABLES:
            for info in self.where.list(t):
                rel = self.where.rel(info.path)
                if PART.fullmatch(rel) and rel.split("/", 1)[0] == t and rel not in listed:
                    found.append(rel)
        if found:
            self._put_manifest(rows)  # fence: a stalled writer that still means to list them now fails its CAS
            for rel in sorted(found):
                self.cond.remove(rel)
        return [self.where.show(r) for r in sorted(found)]

    def publish(self, digest: str, part, got: dict, old: dict | None, others: list[dict]) -> dict:
        """PUT the parts under fresh keys, then the manifest (the commit); an old damaged input's parts go after."""
        self.published = False
        gen = secrets.token_hex(6)
        blobs = {}
        for name, schema in TABLES.items():
            table = getattr(part, name).cast(schema)
            sink = pa.BufferOutputStream()
            pq.write_table(table, sink, compression="zstd")
            data = sink.getvalue().to_pybytes()
            rel = f"{name}/input={digest}/part-{gen}.parquet"
            blobs[rel] = data
            got |= {f"{name}_file": rel, f"{name}_bytes": len(data), f"{name}_rows": table.num_rows,
                    f"{name}_sha256": hashlib.sha256(data).hexdigest()}
        self.hook("after_staging")
        placed = []
        try:
            for rel, data in blobs.items():
                self.where.write_bytes(rel, data)
                placed.append(rel)
                self.hook("after_part")
            self.hook("after_parts")
            self.commit_rows(others + [got])
            self.published = True
        except BaseException:
            if not self.published:
                for rel in placed:  # unlisted: invisible anyway, but leave no orphans behind
                    try:
                        self.cond.remove(rel)
                    except OSError:
                        pass
            raise
        if old is not None:  # a repair: the damaged parts, now listed by no row
            for name in TABLES:
                try:
                    self.cond.remove(old[f"{name}_file"])
                except OSError:
                    pass  # an orphan the next ingest removes
        return got


def open_writer(where: Remote, lock_timeout: float, poll: float, hook) -> RemoteCommit:
    """The lease taken (waiting up to ``lock_timeout``), and the writer over it; call ``close`` after."""
    cond = Conditional(where)  # first: gs:// is refused before any request
    where.check()
    lease = Lease(where, cond, lease_seconds())
    try:
        lease.acquire(lock_timeout, poll)
    except OSError as exc:
        raise StoreError(f"{where.show()}: cannot take the store's lease: {exc.strerror if isinstance(exc, RemoteIOError) else redact(str(exc))}") from None
    hook("after_lock")
    return RemoteCommit(where, cond, lease, hook)
