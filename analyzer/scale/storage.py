"""Where a store lives: a local folder, or a prefix of an object store, through ``pyarrow.fs``.

``--store`` takes a path or a URI:

* ``DIR`` or ``file:///abs/dir``: a local folder (:class:`Local`); the writer keeps its fsync / rename /
  flock protocol (:mod:`analyzer.scale.store_commit`).
* ``s3://bucket/prefix``: S3 or any S3-compatible server (:class:`Remote`).  The endpoint comes from
  the URI's query (``?endpoint_override=host:port&scheme=http``, as ``pyarrow.fs.FileSystem.from_uri``
  spells it) or else from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``; the region from ``?region=``,
  ``AWS_REGION`` or ``AWS_DEFAULT_REGION``; credentials only from the standard chain
  (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``~/.aws``, instance
  roles).  Credentials in the URI are refused: a store's URI is printed in every message about it.
  Reads and part writes go through ``pyarrow.fs.S3FileSystem``; the two conditional writes pyarrow does
  not expose (``If-None-Match: *`` and ``If-Match: <etag>`` on PutObject and DeleteObject, for the lease
  and the manifest's compare-and-swap, :mod:`analyzer.scale.store_remote`) go through botocore.
* ``gs://bucket/prefix``: Google Cloud Storage through ``pyarrow.fs.GcsFileSystem`` (its own
  credentials chain, or none with ``?anonymous=true``; ``?endpoint_override=`` and ``?scheme=`` as
  pyarrow spells them).  Read only:
  pyarrow exposes no generation precondition, so no writer could commit safely (see the README).

Every failure of the object store (no such bucket, refused credentials, an endpoint that does not
answer) is one :class:`~analyzer.errors.StoreError` line naming the store and the fix; secrets that
appear in the environment are blanked out of any message before it is shown.
"""
from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from analyzer.errors import StoreError

REMOTE_SCHEMES = {"s3": "s3", "gs": "gs", "gcs": "gs"}
QUERY_KEYS = {"s3": {"endpoint_override", "scheme", "region"}, "gs": {"endpoint_override", "scheme", "anonymous"}}
SECRET_KEYS = {"access_key", "secret_key", "session_token", "credentials", "token"}
SECRET_ENV = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID", "GOOGLE_APPLICATION_CREDENTIALS")
CONNECT_TIMEOUT = 5.0  # seconds: an endpoint that does not answer fails the command quickly, with its name
# seconds an object store may stay silent in one request (a read of a large part keeps it alive while bytes
# flow); a request that never answers (a stalled PUT of the manifest, a GET of a part) fails after ATTEMPTS
# of it instead of holding the store's lease and the analysis for minutes.  MCP_SSE_AUDIT_S3_TIMEOUT sets it.
TIMEOUT_ENV = "MCP_SSE_AUDIT_S3_TIMEOUT"
REQUEST_TIMEOUT = 20.0
ATTEMPTS = 2  # tries per request (transient 5xx and throttling); each bounded by the timeouts above


def request_timeout() -> float:
    """The silence an object store request may take (:data:`REQUEST_TIMEOUT`, or the environment's)."""
    raw = os.environ.get(TIMEOUT_ENV)
    if not raw:
        return REQUEST_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0.1 <= value <= 3600:
        raise StoreError(f"{TIMEOUT_ENV}={raw[:40]!r}: give the seconds an object store request may stay silent (0.1 to 3600; default {REQUEST_TIMEOUT:g})")
    return value


def file_sha256(path: str | Path) -> str:
    """sha256 of a regular file's bytes (a FIFO or a device would block or never end: refused)."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise StoreError(f"{path}: not a regular file; only regular files are stored")
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def redact(text: str) -> str:
    """``text`` without the values of the credential variables of this environment."""
    for name in SECRET_ENV:
        value = os.environ.get(name, "")
        if len(value) >= 4:
            text = text.replace(value, "[REDACTED]")
    return text


def locate(store) -> "Local | Remote":
    """The store named by a path or a URI (see the module docstring)."""
    if isinstance(store, (Local, Remote)):
        return store
    if isinstance(store, Path):
        return Local(store)
    text = str(store)
    m = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", text)
    if not m:
        return Local(Path(text))
    scheme = m.group(1).lower()
    if scheme == "file":
        parts = urlsplit(text)
        if parts.netloc not in ("", "localhost"):
            raise StoreError(f"{text}: a file:// store names a local folder (file:///abs/path); for another host use its object store URI")
        return Local(Path(parts.path))
    if scheme not in REMOTE_SCHEMES:
        raise StoreError(f"{redact(text)}: unknown store scheme {scheme}://; give a folder, file:///abs/path, s3://bucket/prefix or gs://bucket/prefix")
    return _remote(text)


@lru_cache(maxsize=16)
def _remote(uri: str) -> "Remote":
    return Remote.from_uri(uri)


# --- a local folder ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Local:
    """A store in a local folder: the paths are the store's as given (messages show them so)."""

    root: Path
    # a manifest Snapshot this handle reads through (analyzer.scale.store.reading): not part of its identity
    pinned: object = field(default=None, compare=False, repr=False)
    remote = False

    def __str__(self) -> str:
        return str(self.root)

    @property
    def key(self):
        return self.root.resolve()

    def show(self, rel: str = "") -> str:
        return str(self.root / rel) if rel else str(self.root)

    def exists(self, rel: str) -> bool:
        return (self.root / rel).exists()

    def stat(self, rel: str) -> tuple[int, tuple]:
        """Size and what identifies this version of the file (raises FileNotFoundError, OSError)."""
        st = (self.root / rel).stat()
        return st.st_size, (st.st_mtime_ns, st.st_ino)

    def sha256(self, rel: str) -> str:
        return file_sha256(self.root / rel)

    def num_rows(self, rel: str) -> int:
        return pq.read_metadata(self.root / rel).num_rows

    def read_table(self, rel: str) -> pa.Table:
        return pq.read_table(self.root / rel)

    def scan(self, rels: list[str], schema: dict) -> pl.LazyFrame:
        # (a part written before a column was added -- exchanges.user_agent -- reads it as null)
        return pl.scan_parquet([str(self.root / r) for r in rels], hive_partitioning=True, schema=schema, missing_columns="insert")


# --- an object store ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Remote:
    """A store under ``scheme://bucket/prefix`` of an object store."""

    uri: str  # as given, with its (credential-free) query: what executors reopen it from
    scheme: str  # s3 | gs
    bucket: str
    prefix: str  # no leading or trailing slash; may be ""
    endpoint: str | None  # scheme://host:port, or None for the provider's own
    region: str | None
    fs: pafs.FileSystem = field(compare=False, repr=False)
    pinned: object = field(default=None, compare=False, repr=False)  # as Local's
    remote = True

    @classmethod
    def from_uri(cls, uri: str) -> "Remote":
        parts = urlsplit(uri)
        scheme = REMOTE_SCHEMES[parts.scheme.lower()]
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        secret = sorted(k for k in query if k.lower() in SECRET_KEYS)
        shown = f"{scheme}://{parts.netloc}{parts.path}"
        if secret:
            raise StoreError(
                f"{shown}: credentials in the store URI ({', '.join(secret)}) are refused, since the URI is printed in messages; "
                f"set them in the environment instead (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY for s3://)"
            )
        unknown = sorted(set(query) - QUERY_KEYS[scheme])
        if unknown:
            raise StoreError(f"{shown}: unknown URI parameter(s) {', '.join(unknown)}; {scheme}:// takes {', '.join(sorted(QUERY_KEYS[scheme]))}")
        if not parts.netloc:
            raise StoreError(f"{shown}: no bucket in the store URI; give {scheme}://bucket/prefix")
        bucket, prefix = parts.netloc, parts.path.strip("/")
        endpoint, region = None, None
        if scheme == "s3":
            endpoint = _s3_endpoint(query)
            region = query.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
            ep = urlsplit(endpoint) if endpoint else None
            fs = pafs.S3FileSystem(
                region=region,
                endpoint_override=ep.netloc if ep else None,
                scheme=ep.scheme if ep else "https",
                connect_timeout=min(CONNECT_TIMEOUT, request_timeout()),
                request_timeout=request_timeout(),
                retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=ATTEMPTS),
            )
        else:
            endpoint = query.get("endpoint_override")
            try:
                fs = pafs.GcsFileSystem(
                    anonymous=query.get("anonymous", "").lower() in ("1", "true", "yes"),  # emulators, public buckets
                    endpoint_override=endpoint, scheme=query.get("scheme") or None,
                    retry_time_limit=timedelta(seconds=request_timeout()),  # bounded: an unreachable endpoint fails
                )
            except (OSError, pa.ArrowException) as exc:
                raise StoreError(f"{shown}: cannot open Google Cloud Storage: {redact(str(exc))}") from None
        return cls(uri, scheme, bucket, prefix, endpoint, region, fs)

    def __str__(self) -> str:
        return self.show()

    @property
    def key(self):
        return (self.scheme, self.endpoint, self.bucket, self.prefix)

    def show(self, rel: str = "") -> str:
        """The store (or one of its objects) as a URI, for messages: never a credential."""
        base = f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        return f"{base}/{rel}" if rel else base

    def path(self, rel: str = "") -> str:
        """The pyarrow path of an object: ``bucket/prefix/rel``."""
        base = f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket
        return f"{base}/{rel}" if rel else base

    def objkey(self, rel: str) -> str:
        """The object key of ``rel`` in the bucket."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    # reads ---------------------------------------------------------------------------------------

    def check(self) -> None:
        """The bucket exists and these credentials can see it, or one StoreError line saying which fix."""
        try:
            info = self.fs.get_file_info(self.bucket)
        except (OSError, pa.ArrowException) as exc:
            raise StoreError(self.failure(exc, "cannot reach the store")) from None
        if info.type == pafs.FileType.NotFound:
            raise StoreError(
                f"{self.show()}: the bucket {self.bucket} does not exist (or these credentials cannot see it); "
                f"create it, or fix the bucket name in --store"
            )

    def exists(self, rel: str) -> bool:
        return self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound

    def stat(self, rel: str) -> tuple[int, tuple]:
        info = self.fs.get_file_info(self.path(rel))
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(self.show(rel))
        return info.size, (info.mtime_ns,)

    def sha256(self, rel: str) -> str:
        h = hashlib.sha256()
        with self.fs.open_input_stream(self.path(rel)) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
        return h.hexdigest()

    def num_rows(self, rel: str) -> int:
        return pq.read_metadata(self.path(rel), filesystem=self.fs).num_rows

    def read_table(self, rel: str) -> pa.Table:
        return pq.read_table(self.path(rel), filesystem=self.fs)

    def read_bytes(self, rel: str) -> bytes:
        with self.fs.open_input_stream(self.path(rel)) as fh:
            return fh.read()

    def scan(self, rels: list[str], schema: dict) -> pl.LazyFrame:
        """The parts, lazily, through a pyarrow dataset (Polars pushes simple filters into it); the
        ``input`` column from the ``input=<sha>`` folder, as the local scan's hive partitioning gives it."""
        table = rels[0].split("/", 1)[0]
        dataset = ds.dataset(
            [self.path(r) for r in rels], filesystem=self.fs, format="parquet",
            partitioning=ds.partitioning(pa.schema([("input", pa.string())]), flavor="hive"),
            partition_base_dir=self.path(table),
        )
        have = set(dataset.schema.names)  # (a part written before a column was added reads it as null)
        return (pl.scan_pyarrow_dataset(dataset)
                .select([pl.col(c) if c in have else pl.lit(None, dtype=t).alias(c) for c, t in schema.items()]).cast(schema))

    def list(self, sub: str) -> list[pafs.FileInfo]:
        """Every object under ``sub`` (recursive; none when it does not exist)."""
        sel = pafs.FileSelector(self.path(sub), recursive=True, allow_not_found=True)
        return [i for i in self.fs.get_file_info(sel) if i.type == pafs.FileType.File]

    def rel(self, path: str) -> str:
        return path[len(self.path()) + 1 :]

    # writes (parts: immutable objects under fresh keys; conditional writes and deletes: store_remote) ---------

    def write_bytes(self, rel: str, data: bytes) -> None:
        with self.fs.open_output_stream(self.path(rel)) as fh:  # one PUT (or a multipart upload) completed on close
            fh.write(data)

    def failure(self, exc: BaseException, doing: str) -> str:
        """One line for a failed request: what was being done, why, and the fix."""
        return f"{self.show()}: {doing}: {explain(exc, self)}"


def _s3_endpoint(query: dict) -> str | None:
    if query.get("endpoint_override"):
        ep = query["endpoint_override"]
        return ep if "://" in ep else f"{query.get('scheme') or 'https'}://{ep}"
    env = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if env:
        return env if "://" in env else f"https://{env}"
    return None


def explain(exc: BaseException, where: "Remote") -> str:
    """Why an object store request failed, in words, with the fix; credentials never shown."""
    text = redact(" ".join(str(exc).split()))
    low = text.lower()
    code = ""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
    ep = where.endpoint or f"the default {where.scheme} endpoint"
    if code in ("NoSuchBucket",) or "no_such_bucket" in low or "nosuchbucket" in low:
        return f"the bucket {where.bucket} does not exist; create it, or fix the bucket name in --store"
    if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken") or any(
        s in low for s in ("access_denied", "accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "invalid_access_key", "signature_does_not_match", "expired_token", "http status 403", "forbidden")
    ):
        return "the credentials were refused (AccessDenied or an unknown key); check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or the profile) for this store"
    if "nocredentials" in low or "unable to locate credentials" in low or type(exc).__name__ == "NoCredentialsError":
        return "no credentials found; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile)"
    if type(exc).__name__ in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError") or any(
        s in low for s in ("network_connection", "couldn't connect", "could not connect", "connection refused", "curl error", "timed out", "timeout", "failed to connect")
    ):
        return f"cannot reach {ep} (connection refused or timed out); check AWS_ENDPOINT_URL / ?endpoint_override= and that the server runs"
    return text or type(exc).__name__
