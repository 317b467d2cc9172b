"""mitmproxy addon that records MCP Streamable HTTP traffic as "proxy JSONL".

Usage::

    mitmdump -s analyzer/mitm_addon.py --mode reverse:http://127.0.0.1:8000 \\
        --listen-host 127.0.0.1 --listen-port 8080 --set mcp_jsonl=out.jsonl

(option ``mcp_jsonl``, default ``mcp-traffic.jsonl``; the file is truncated at
start and every line is flushed as soon as it is written.)

Format (one JSON object per line, see schemas/proxy-jsonl.schema.json); every record
has ``kind``, ``ts`` (RFC 3339 UTC, microseconds, ``Z``) and ``conn`` (unique in
the file per HTTP exchange: ``c<k>.<n>`` = n-th request on the k-th client
connection, so keep-alive reuse stays visible)::

    {"kind":"request","method":"GET","url":"…","headers":{lower-case: value},"body":"…"|null}
        (+ "body_b64" when the body is not UTF-8, + "client_addr")
    {"kind":"response","status":200,"headers":{…}}                at response headers
        (+ "decoded":"gzip" when the event stream's Content-Encoding is undone before parsing)
    {"kind":"sse","id":"7"|null,"event":"message"|null,"data":"…","retry":3000|null}
        one per SSE block, written with its own timestamp while the stream passes;
        a block with fields but no data line: "data":null,"dispatched":false;
        a block cut off by the end of the stream: "truncated":true (+ "partial_line");
        ignored input (retry not all digits, id with NUL, unknown field) -> "anomalies"
    {"kind":"body","data":"…"}                                     non-SSE body, once
    {"kind":"close","reason":"eof"|"reset"|"error","by":"server"|"client"|null,"detail":"…"}
        (+ "decoding":"truncated"|"invalid"|"over_limit", "decoding_detail":"…" when the
        stream's Content-Encoding did not decode to its end)

``text/event-stream`` responses are streamed (``flow.response.stream`` is a
callable): without it mitmproxy buffers an SSE response until it ends, which
hides per-event timing and blocks the client. The bytes are cut into lines as they
pass by the analyzer's own line splitter (``analyzer/decode/sse.py``: CR / LF / CRLF,
a CR at a chunk end, one leading BOM), and each block of lines becomes one record
here (comments, multi-line data, id without NUL, retry only ASCII digits): the
records keep what the analyzer's parser sums up (the field values as sent, each
ignored field with its value, an unterminated last line as ``partial_line``).
Streamed bodies are not kept by mitmproxy, so a ``hardump`` from the same process
has empty SSE bodies.

A streamed body reaches ``flow.response.stream`` still content-encoded (nginx
``gzip on`` compresses event streams too): it is decoded incrementally with
``analyzer/decode/content_coding.py`` before SSE parsing, and the bytes are passed on
unchanged.  A coding that cannot be undone is not parsed: the raw body is
written as one ``body`` record with ``"base64": true`` (the analyzer reports it
as undecodable).

Nothing is redacted here on purpose (Authorization, cookies, tokens are written
as seen): the analyzer redacts at ingest. Treat the output as secret.

Only mitmproxy, the standard library, ``decode/content_coding.py`` (with brotli and
zstandard, which mitmproxy itself depends on) and ``decode/sse.py`` (standard library
only), both loaded by path, are imported:
mitmproxy pins its own h11/cryptography versions that clash with the analyzer's
dependencies, so it runs in a separate virtualenv and must not import the
``analyzer`` package.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

from mitmproxy import ctx, http

DEFAULT_FILE = "mcp-traffic.jsonl"
RAW_KEEP = 16 << 20  # an undecodable streamed body is kept for its body record up to this many bytes


def _load(name: str, relative: str):
    """A module of the analyzer beside this file, loaded by path: the analyzer package is not installed in
    mitmproxy's virtualenv (registered in sys.modules first: mitmproxy loads scripts outside it)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).parent / relative)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


content_coding = _load("_mcp_audit_content_coding", "decode/content_coding.py")
sse_lines = _load("_mcp_audit_sse", "decode/sse.py")
_BOM = b"\xef\xbb\xbf"


def _ts(t: float | None) -> str:
    moment = datetime.fromtimestamp(t if t is not None else time.time(), timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _headers(headers: http.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.items(multi=True):
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


def _text_fields(raw: bytes | None, key: str) -> dict[str, Any]:
    """`{key: text}` if UTF-8, else `{key: None, key_b64: …}`; empty -> None."""
    if not raw:
        return {key: None}
    try:
        return {key: raw.decode("utf-8")}
    except UnicodeDecodeError:
        return {key: None, f"{key}_b64": base64.b64encode(raw).decode("ascii")}


class SSEParser:
    """Proxy JSONL ``sse`` records from raw chunks: `feed(bytes)` / `close()` -> record dicts.

    The lines come from ``decode/sse.py``'s line splitter, the one the analyzer parses with; the records
    are this format's, not the analyzer's events: the ``event`` field as sent (null when absent), ``data``
    null without a data line, each ignored field named with its value, and an unterminated last line
    kept whole as ``partial_line`` instead of processed."""

    def __init__(self) -> None:
        self._lines = sse_lines._LineSplitter()
        self._new_block()

    def _new_block(self) -> None:
        self._fields = 0
        self._data: list[str] = []
        self._id: str | None = None
        self._event: str | None = None
        self._retry: int | None = None
        self._anomalies: list[str] = []

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for line, _ in self._lines.feed(chunk):
            record = self._line(line.decode("utf-8", errors="replace"))
            if record is not None:
                out.append(record)
        return out

    def _line(self, line: str) -> dict[str, Any] | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment (sse-starlette keep-alive pings look like this)
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        self._fields += 1
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" in value:
                self._anomalies.append("id_with_nul")
            else:
                self._id = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
            else:
                self._anomalies.append(f"retry_not_digits:{value}")
        else:
            self._anomalies.append(f"unknown_field:{name}")
        return None

    def _record(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "kind": "sse",
            "id": self._id,
            "event": self._event,
            "data": "\n".join(self._data) if self._data else None,
            "retry": self._retry,
        }
        if self._anomalies:
            record["anomalies"] = self._anomalies
        return record

    def _dispatch(self) -> dict[str, Any] | None:
        if not self._fields:
            return None  # blank line after nothing (or only comments)
        record = self._record()
        if not self._data:
            record["dispatched"] = False  # WHATWG fires no event without a data line
        self._new_block()
        return record

    def close(self) -> list[dict[str, Any]]:
        """End of stream: a pending block (or partial line) is reported as truncated."""
        pending = self._lines.close()
        partial = pending[0] if pending is not None else b""
        if pending is not None and pending[1] == 0 and len(partial) < len(_BOM) and _BOM.startswith(partial):
            partial = b""  # the stream was 1-2 bytes that began like a BOM: nothing to record, as ever
        if not self._fields and not partial:
            return []
        record = self._record()
        record["truncated"] = True
        if partial:
            record["partial_line"] = partial.decode("utf-8", errors="replace")
        self._new_block()
        return [record]


class EventStream:
    """An event stream's raw bytes as mitmproxy streams them: Content-Encoding undone, then SSE records.

    ``feed(chunk)`` / ``close()`` -> record dicts (``close`` adds a ``body`` record for a body that could
    not be decoded).  ``decoding``: how the coding's stream ended (None: nothing to undo, or complete)."""

    __slots__ = ("parser", "decoder", "raw", "raw_size")

    def __init__(self, content_encoding: str | None) -> None:
        self.parser = SSEParser()
        dec = content_coding.Decoder(content_encoding)
        self.decoder = dec if dec.active else None
        self.raw: list[bytes] = []  # an undecodable body, for its base64 body record
        self.raw_size = 0

    @property
    def decoded(self) -> str | None:
        """The coding undone before parsing (for the response record)."""
        dec = self.decoder
        return dec.label if dec is not None and dec.state != "unsupported" else None

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        dec = self.decoder
        if dec is None:
            return self.parser.feed(chunk)
        if dec.state == "unsupported":
            if self.raw_size < RAW_KEEP:
                self.raw.append(chunk[: RAW_KEEP - self.raw_size])
                self.raw_size += len(self.raw[-1])
            return []
        data = dec.feed(chunk)
        return self.parser.feed(data) if data else []

    def close(self) -> list[dict[str, Any]]:
        dec = self.decoder
        if dec is not None and dec.state == "unsupported":
            record: dict[str, Any] = {"kind": "body", "data": base64.b64encode(b"".join(self.raw)).decode("ascii"), "base64": True}
            if self.raw_size >= RAW_KEEP:
                record["partial"] = True
            return [record]
        out: list[dict[str, Any]] = []
        if dec is not None:
            tail = dec.close()
            if tail:
                out += self.parser.feed(tail)
        return out + self.parser.close()

    @property
    def decoding(self) -> dict[str, Any]:
        """Fields for the close record when decoding did not end complete."""
        dec = self.decoder
        if dec is None or dec.state in ("complete", "open", "unsupported"):
            return {}
        return {"decoding": dec.state, "decoding_detail": dec.detail}


class _Exchange:
    # A plain class: mitmproxy loads scripts outside sys.modules, which @dataclass cannot handle.
    __slots__ = ("conn", "request_written", "closed", "parser")

    def __init__(self, conn: str) -> None:
        self.conn = conn
        self.request_written = False
        self.closed = False
        self.parser: EventStream | None = None


class McpJsonlRecorder:
    def __init__(self) -> None:
        self._out: IO[str] | None = None
        self._path: str | None = None
        self._exchanges: dict[str, _Exchange] = {}
        self._client_numbers: dict[str, int] = {}
        self._requests_per_client: dict[str, int] = {}

    # -- lifecycle -------------------------------------------------------
    def load(self, loader: Any) -> None:
        loader.add_option("mcp_jsonl", str, DEFAULT_FILE, "Write MCP proxy JSONL records to this file.")

    def configure(self, updated: set[str]) -> None:
        if "mcp_jsonl" in updated and ctx.options.mcp_jsonl != self._path:
            if self._out is not None:
                self._out.close()
            self._path = ctx.options.mcp_jsonl
            self._out = open(self._path, "w", encoding="utf-8")  # noqa: SIM115 - lives until done()

    def done(self) -> None:
        # Exchanges still open get no close record: the capture ended, not the exchange.
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- writing ---------------------------------------------------------
    def _write(self, kind: str, ts: float | None, conn: str, **fields: Any) -> None:
        if self._out is None:
            return
        record = {"kind": kind, "ts": _ts(ts), "conn": conn, **fields}
        self._out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        self._out.flush()

    def _exchange(self, flow: http.HTTPFlow) -> _Exchange:
        ex = self._exchanges.get(flow.id)
        if ex is None:
            client = flow.client_conn.id
            k = self._client_numbers.setdefault(client, len(self._client_numbers) + 1)
            n = self._requests_per_client[client] = self._requests_per_client.get(client, 0) + 1
            ex = self._exchanges[flow.id] = _Exchange(conn=f"c{k}.{n}")
        return ex

    def _write_request(self, flow: http.HTTPFlow, ex: _Exchange) -> None:
        if ex.request_written:
            return
        ex.request_written = True
        try:
            body = flow.request.content
        except ValueError:  # undecodable content-encoding: keep the raw bytes
            body = flow.request.raw_content
        peer = flow.client_conn.peername
        self._write(
            "request",
            flow.request.timestamp_start,
            ex.conn,
            method=flow.request.method,
            url=flow.request.url,
            headers=_headers(flow.request.headers),
            **_text_fields(body, "body"),
            client_addr=f"{peer[0]}:{peer[1]}" if peer else None,
        )

    def _write_sse(self, ex: _Exchange, records: list[dict[str, Any]], ts: float | None = None) -> None:
        for record in records:
            kind = record.pop("kind")
            self._write(kind, ts, ex.conn, **record)

    def _close(self, ex: _Exchange, ts: float | None, reason: str, by: str | None, detail: str) -> None:
        decoding: dict[str, Any] = {}
        if ex.parser is not None:
            self._write_sse(ex, ex.parser.close(), ts)
            decoding = ex.parser.decoding
            ex.parser = None
        if not ex.closed:
            ex.closed = True
            self._write("close", ts, ex.conn, reason=reason, by=by, detail=detail, **decoding)

    # -- hooks -----------------------------------------------------------
    def request(self, flow: http.HTTPFlow) -> None:
        self._write_request(flow, self._exchange(flow))

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        assert flow.response is not None
        ex = self._exchange(flow)
        self._write_request(flow, ex)
        content_type = flow.response.headers.get("content-type", "").split(";")[0].strip().lower()
        stream = EventStream(flow.response.headers.get("content-encoding")) if content_type == "text/event-stream" else None
        decoded = {"decoded": stream.decoded} if stream is not None and stream.decoded else {}
        self._write("response", flow.response.timestamp_start, ex.conn, status=flow.response.status_code,
                    headers=_headers(flow.response.headers), **decoded)
        if stream is not None:
            # the chunks are still content-encoded here (mitmproxy decodes only bodies it buffers)
            parser = ex.parser = stream

            def passthrough(chunk: bytes) -> bytes:
                if chunk:  # b"" marks the end of the body; response() handles it
                    self._write_sse(ex, parser.feed(chunk))
                return chunk

            flow.response.stream = passthrough

    def response(self, flow: http.HTTPFlow) -> None:
        assert flow.response is not None
        ex = self._exchange(flow)
        end = flow.response.timestamp_end
        if ex.parser is None and not flow.response.stream:
            try:
                body = flow.response.content
            except ValueError:
                body = flow.response.raw_content
            if body:
                self._write("body", end, ex.conn, **_text_fields(body, "data"))
        self._close(ex, end, "eof", "server", "response complete")
        self._exchanges.pop(flow.id, None)

    def error(self, flow: http.HTTPFlow) -> None:
        ex = self._exchange(flow)
        self._write_request(flow, ex)
        msg = flow.error.msg if flow.error else "unknown error"
        low = msg.lower()
        if "client disconnected" in low or "client closed" in low:
            reason, by = "reset", "client"
        elif flow.response is not None and ("peer closed" in low or "incomplete" in low or "server closed" in low
                                            or "server disconnected" in low or "protocol error" in low):
            reason, by = "reset", "server"  # the server went away in the middle of the body
        elif "killed" in low:
            reason, by = "error", None
        else:  # connect failures, timeouts, unparsable responses: the upstream side failed
            reason, by = "error", "server"
        self._close(ex, None, reason, by, msg)
        self._exchanges.pop(flow.id, None)


addons = [McpJsonlRecorder()]
