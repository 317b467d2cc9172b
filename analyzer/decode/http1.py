"""Passive HTTP/1.1 framing of one direction of a TCP flow (sans-IO).

Two :class:`MessageParser` instances follow a flow: one over the client's
bytes (requests), one over the server's (responses).  ``feed(data, ts, pkt)``
returns records: :class:`Head`, :class:`Body` pieces (de-chunked, each with
the time and packet number of the segment that carried it), :class:`BodyGap`,
:class:`Done`, :class:`Skipped`, :class:`Stop`.

Why hand-written and not h11: h11 is a sans-IO parser for *one endpoint of a
live connection*.  A passive observer needs both directions framed
independently and paired afterwards: a response's framing depends on the
request it answers (HEAD, CONNECT), which h11 learns only by sending it, and
h11 has no notion of bytes the capture lost (a gap in a Content-Length body
is still a countable body; a gap in an event stream can be resynced) nor of
joining a connection in the middle of a message.  Framing itself is small
(RFC 9112 §6: Transfer-Encoding chunked, Content-Length, or until close;
no body for HEAD, 1xx, 204, 304), and body bytes are passed on as slices of
the segment, never copied byte by byte.

Strict where it matters for forensics: a start line or header line that is
not HTTP, a bad chunk size, a missing CRLF after chunk data, conflicting
Content-Length values -> :class:`Stop` (``http_parse_error``); what was
parsed before is kept.
"""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Callable

MAX_HEAD = 1 << 16  # a header section longer than 64 KiB is not HTTP we can trust
MAX_LINE = 1 << 12  # a chunk-size or trailer line longer than 4 KiB
RESYNC_CARRY = 1 << 11  # bytes kept between pieces while looking for a message start

_TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(rb"(" + _TOKEN + rb") ([^\x00-\x20\x7f]+) HTTP/([0-9])\.([0-9])")
_STATUS_LINE = re.compile(rb"HTTP/([0-9])\.([0-9]) ([0-9]{3})(?: ([^\x00-\x08\x0a-\x1f\x7f]*))?")
_HEADER_NAME = re.compile(_TOKEN)
_REQUEST_PREFIX = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}(?: |$)")
_CHUNK_LINE = re.compile(rb"[ \t]*([0-9A-Fa-f]{1,15})[ \t]*(?:;[^\r]*)?\r?")  # size, then extensions
_LINE_SPLIT = re.compile(rb"\r?\n")
_HEAD_END = re.compile(rb"\r?\n\r?\n")
# a message start at the beginning of a line, for joining a flow in the middle of a message
_RESYNC = {
    "request": re.compile(rb"(?:^|\n)(" + _TOKEN + rb" [^\x00-\x20\x7f]+ HTTP/1\.[01]\r?\n)"),
    "response": re.compile(rb"(?:^|\n)(HTTP/1\.[01] [0-9]{3}[ \r\n])"),
}

# Anomaly details never quote what a message carried (a request line holds the query string, a
# header line an Authorization value): only header NAMES, and at most the method and the path.
_CODINGS = frozenset({"chunked", "gzip", "x-gzip", "deflate", "compress", "x-compress", "identity", "br", "zstd", "trailers"})
_START = re.compile(rb"(" + _TOKEN + rb") (/[^\x00-\x20\x7f?#;]{0,60})")


def _start_of(line: bytes, is_request: bool) -> str:
    """What may be said of a start line that did not parse: ``: GET /path ...`` (never the query),
    ``: HTTP/1.1 200 ...``, or nothing."""
    if is_request:
        m = _START.match(line)
        return f": {m.group(1)[:32].decode('ascii')} {m.group(2).decode('ascii', 'replace')} ..." if m else ""
    m = _STATUS_LINE.match(line)
    return f": HTTP/{m.group(1).decode()}.{m.group(2).decode()} {m.group(3).decode()} ..." if m else ""


def _plain(value: str) -> str:
    """A framing header value quoted only if it is plain: digits (Content-Length) or known transfer
    codings (Transfer-Encoding); anything else only by its length."""
    parts = [p.strip().lower() for p in value.split(",")]
    if len(value) <= 40 and (all(p.isdigit() and p.isascii() for p in parts) or all(p in _CODINGS for p in parts)):
        return f" {value!r}"
    return f" ({len(value)} characters)"


def starts_like_request(data: bytes) -> bool:
    """The first bytes of a connection could be a request line (a method token, then a space)."""
    return bool(_REQUEST_PREFIX.match(data[:33])) and not data.startswith(b"HTTP/")


def starts_like_response(data: bytes) -> bool:
    return data[:7] == b"HTTP/1."[: len(data[:7])] and len(data) >= 5


# states
HEAD, LENGTH, CHUNK_SIZE, CHUNK_DATA, CHUNK_CRLF, TRAILER, UNTIL_CLOSE, WAIT, RESYNC, STOPPED = range(10)


# Headers the MCP peers read one value of.  Repeated, the FIRST is what they act on: the python SDK's server
# (Starlette's Headers.get) and client (httpx joins them, and the client tests the content type with
# startswith); the TypeScript client finds text/event-stream in any value (includes), which is the same answer
# unless the repeated values differ.  Joined as other headers are, "text/event-stream, text/event-stream" was
# "not an event stream" and "5, 5" an unknown Last-Event-ID: the events the clients read and the gap vanished.
SINGLE_VALUED = frozenset({"content-type", "last-event-id", "mcp-session-id", "mcp-protocol-version", "x-mcp-replay-epoch"})


def add_header(headers: dict[str, str], name: str, value: str) -> None:
    """One header line into ``headers`` (lower-case ``name``): a repeated name is joined with ", " (RFC 9110
    5.3; Cookie with "; ", RFC 9113 8.2.3), except :data:`SINGLE_VALUED`, which keep their first value."""
    if name not in headers:
        headers[name] = value
    elif name not in SINGLE_VALUED:
        headers[name] = f"{headers[name]}; {value}" if name == "cookie" else f"{headers[name]}, {value}"


@dataclass(frozen=True, slots=True)
class Head:
    method: str | None  # request: its method; response: the method of the request it answers (None: unpaired)
    target: str | None
    status: int | None
    version: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", " (single-valued ones: the first, add_header)
    pkt: int  # packet of the message's first byte
    ts: int | None
    interim: bool = False  # 1xx: another head follows for the same request
    paired: bool = True  # response: False when no captured request can be its request


@dataclass(frozen=True, slots=True)
class Body:
    data: bytes
    ts: int | None
    pkt: int


@dataclass(frozen=True, slots=True)
class BodyGap:
    nbytes: int  # body bytes the capture lost (framing continues)


@dataclass(frozen=True, slots=True)
class Done:
    ts: int | None
    pkt: int | None


@dataclass(frozen=True, slots=True)
class Skipped:
    nbytes: int  # bytes of a message whose start the capture does not have
    pkt: int
    found: bool  # False: no message start found before the direction ended


@dataclass(frozen=True, slots=True)
class Stop:
    kind: str  # "parse" (not HTTP) | "gap" (a gap hit framing) | "upgrade" (protocol switched) | "cut" (ended inside a head)
    detail: str
    pkt: int | None
    at_start: bool  # nothing was parsed on this direction before


Record = Head | Body | BodyGap | Done | Skipped | Stop


class MessageParser:
    """One direction of HTTP/1.1 (``role`` "request" or "response").

    A response parser pairs each final response with the oldest request it
    was told about (:meth:`expect`); when a response head arrives before its
    request was parsed (the request's bytes still held by reassembly) it
    waits, keeping the pieces, until :meth:`expect` or :meth:`requests_done`.
    """

    def __init__(self, role: str, midstream: bool = False, request_pending: Callable[[], bool] | None = None) -> None:
        self.role = role
        self.is_request = role == "request"
        self.state = RESYNC if midstream else HEAD
        self.buf = bytearray()  # head, chunk-size line or trailer bytes gathered so far
        self.head_pkt = 0
        self.head_ts: int | None = None
        self.remaining = 0
        self.cr = False  # CHUNK_CRLF: the CR was seen
        self.messages = 0
        self.requests: deque[tuple[str, int]] = deque()  # response role: (method, first packet) not yet answered
        self.request_pending = request_pending or (lambda: False)
        self.no_more_requests = False
        self.pending: list[tuple] = []  # WAIT: pieces kept until the request is known
        self.carry = b""  # RESYNC: tail of the skipped bytes
        self.skipped = 0
        self.skip_pkt = 0
        self.last_pkt: int | None = None
        self._status: tuple = ()  # response head waiting to be paired: (status, version, headers, ts, pkt of its end)

    # -- pairing (response role) -------------------------------------------------
    def expect(self, method: str, pkt: int) -> list[Record]:
        self.requests.append((method, pkt))
        return self._resume()

    def requests_done(self) -> list[Record]:
        self.no_more_requests = True
        return self._resume()

    def _resume(self) -> list[Record]:
        if self.state != WAIT:
            return []
        out: list[Record] = []
        if not self._pair(out):
            return out
        pending, self.pending = self.pending, []
        for item in pending:
            out += self.gap(item[1], item[2]) if item[0] == "gap" else self.feed(*item)
        return out

    # -- input ---------------------------------------------------------------------
    def feed(self, data: bytes, ts: int | None, pkt: int) -> list[Record]:
        out: list[Record] = []
        if not data:
            return out
        state = self.state
        if state == WAIT:
            self.pending.append((data, ts, pkt))
            return out
        self.last_pkt = pkt
        if state == UNTIL_CLOSE:  # the event-stream fast path: the whole segment is body
            out.append(Body(data, ts, pkt))
            return out
        body: list[bytes] = []  # body bytes of this segment, handed on as one Body (chunks joined)
        i, n = 0, len(data)
        while i < n:
            state = self.state
            if state == LENGTH or state == CHUNK_DATA:
                take = min(self.remaining, n - i)
                body.append(data[i : i + take] if take != n else data)
                i += take
                self.remaining -= take
                if not self.remaining:
                    if state == LENGTH:
                        self._flush(body, out, ts, pkt)
                        self._done(out, ts, pkt)
                    else:
                        self.state, self.cr = CHUNK_CRLF, False
                continue
            if state == CHUNK_CRLF:
                if not self.cr and data[i : i + 2] == b"\r\n":
                    i += 2
                    self.state = CHUNK_SIZE
                    continue
                b = data[i]
                i += 1
                if b == 0x0D and not self.cr:
                    self.cr = True
                elif b == 0x0A:
                    self.state = CHUNK_SIZE
                else:
                    self._flush(body, out, ts, pkt)
                    self._stop(out, "parse", f"chunk data not followed by CRLF (byte 0x{b:02x})", pkt)
                    return out
                continue
            if state == CHUNK_SIZE and not self.buf:
                # Fast path: whole chunks (size line, data, CRLF) inside this segment, one loop turn
                # each -- an event stream sends one chunk per event.  Anything else (a chunk that
                # goes on in the next segment, the last chunk, a bad line) falls to the states below.
                find, match = data.find, _CHUNK_LINE.fullmatch
                while True:
                    j = find(b"\n", i)
                    if j < 0:
                        break
                    m = match(data, i, j)
                    if m is None:
                        break
                    size = int(m.group(1), 16)
                    end = j + 1 + size
                    if not size or end + 2 > n or data[end] != 0x0D or data[end + 1] != 0x0A:
                        break
                    body.append(data[j + 1 : end])
                    i = end + 2
                if i >= n:
                    break
            if state == CHUNK_SIZE or state == TRAILER:
                j = data.find(b"\n", i)
                if j < 0:
                    self.buf += data[i:]
                    if len(self.buf) > MAX_LINE:
                        self._flush(body, out, ts, pkt)
                        self._stop(out, "parse", "chunk-size or trailer line longer than 4 KiB", pkt)
                    break
                if self.buf:
                    self.buf += data[i:j]
                    line = bytes(self.buf)
                    self.buf.clear()
                else:
                    line = data[i:j]
                i = j + 1
                if state == CHUNK_SIZE:
                    m = _CHUNK_LINE.fullmatch(line)  # chunk extensions (after ";") are ignored
                    if m is None:
                        self._flush(body, out, ts, pkt)
                        size_line = line.rstrip(b"\r")
                        self._stop(out, "parse", f"bad chunk size line ({len(size_line)} bytes, not a hex size)", pkt)
                        return out
                    self.remaining = int(m.group(1), 16)
                    self.state = CHUNK_DATA if self.remaining else TRAILER
                elif line == b"" or line == b"\r":  # the empty line after the trailers
                    self._flush(body, out, ts, pkt)
                    self._done(out, ts, pkt)
                continue
            self._flush(body, out, ts, pkt)
            if state == UNTIL_CLOSE:
                out.append(Body(data[i:], ts, pkt))
                return out
            if state == HEAD:
                if not self.buf:
                    while i < n and data[i] in b"\r\n":  # RFC 9112 §2.2: empty lines before a message are ignored
                        i += 1
                    if i == n:
                        return out
                    self.head_pkt, self.head_ts = pkt, ts
                i = self._head(data, i, ts, pkt, out)
                if self.state == WAIT and i < n:
                    self.pending.append((data[i:], ts, pkt))
                    return out
            elif state == RESYNC:
                i = self._resync(data, i, ts, pkt, out)
            else:  # STOPPED
                return out
        self._flush(body, out, ts, pkt)
        return out

    @staticmethod
    def _flush(body: list[bytes], out: list[Record], ts: int | None, pkt: int) -> None:
        if body:
            out.append(Body(body[0] if len(body) == 1 else b"".join(body), ts, pkt))
            body.clear()

    def gap(self, nbytes: int, pkt: int | None = None) -> list[Record]:
        """``nbytes`` of this direction were lost by the capture."""
        out: list[Record] = []
        state = self.state
        if state == WAIT:
            self.pending.append(("gap", nbytes, pkt))
        elif state == UNTIL_CLOSE:
            out.append(BodyGap(nbytes))
        elif state == LENGTH or state == CHUNK_DATA:
            take = min(nbytes, self.remaining)
            out.append(BodyGap(take))
            self.remaining -= take
            if state == LENGTH and not self.remaining:
                self._done(out, None, None)
                if nbytes > take:
                    self._stop(out, "gap", f"{nbytes - take} bytes lost after the end of a body, where the next message starts", pkt)
            elif state == CHUNK_DATA and nbytes > take:
                self._stop(out, "gap", "bytes lost across a chunk-size line: the chunk framing cannot be followed", pkt)
            elif state == CHUNK_DATA and not self.remaining:
                self.state, self.cr = CHUNK_CRLF, False
        elif state == RESYNC:
            self.skipped += nbytes
            self.carry = b""
        elif state == HEAD:
            where = "inside a message head" if self.buf else "where a message head starts"
            self._stop(out, "gap", f"{nbytes} bytes lost {where}", pkt)
        elif state in (CHUNK_SIZE, CHUNK_CRLF, TRAILER):
            self._stop(out, "gap", f"{nbytes} bytes lost at a chunk-size line", pkt)
        return out

    def close(self) -> list[Record]:
        """The direction ended.  A body that runs until close is complete now; anything else was cut."""
        out: list[Record] = []
        if self.state == RESYNC and self.skipped:
            out.append(Skipped(self.skipped, self.skip_pkt, False))
        elif self.state == HEAD and self.buf:
            self._stop(out, "cut", f"the connection ended {len(self.buf)} bytes into a message head", self.last_pkt)
        elif self.state == WAIT:
            self.no_more_requests = True
            out += self._resume()
            out += self.close()
        return out

    @property
    def partial_head(self) -> bool:
        """Some bytes of a message head arrived, not all of it."""
        return self.state == HEAD and bool(self.buf)

    # -- internals ---------------------------------------------------------------
    def _stop(self, out: list[Record], kind: str, detail: str, pkt: int | None) -> None:
        out.append(Stop(kind, detail, pkt, self.messages == 0))
        self.state = STOPPED
        self.buf = bytearray()
        self.pending = []

    def _done(self, out: list[Record], ts: int | None, pkt: int | None) -> None:
        out.append(Done(ts, pkt))
        self.messages += 1
        self.state = HEAD

    def _head(self, data: bytes, i: int, ts: int | None, pkt: int, out: list[Record]) -> int:
        old = len(self.buf)
        self.buf += data[i:] if i else data
        buf = self.buf
        m = _HEAD_END.search(buf, max(0, old - 3))
        if m is None:
            if not self._plausible_start(buf):
                self._stop(out, "parse", f"not an HTTP {self.role} line{_start_of(bytes(buf[:200]), self.is_request)}", self.head_pkt)
            elif len(buf) > MAX_HEAD:
                self._stop(out, "parse", "header section longer than 64 KiB", self.head_pkt)
            return len(data)
        used = m.end() - old  # bytes of this piece that belong to the head
        raw = bytes(buf[: m.start()])
        self.buf = bytearray()
        self._parse_head(raw, ts, pkt, out)
        return i + used

    def _plausible_start(self, buf: bytearray) -> bool:
        line = bytes(buf[:64]).split(b"\n", 1)[0]
        if self.is_request:
            return bool(_REQUEST_PREFIX.match(line))
        return line[:7] == b"HTTP/1."[: len(line[:7])]

    def _parse_head(self, raw: bytes, ts: int | None, pkt: int, out: list[Record]) -> None:
        lines = _LINE_SPLIT.split(raw)
        start = lines[0]
        m = (_REQUEST_LINE if self.is_request else _STATUS_LINE).fullmatch(start)
        if m is None:
            what = "request line" if self.is_request else "status line"
            if start.startswith(b"PRI * HTTP/2.0"):
                what = "HTTP/1.x request line (this is HTTP/2 with prior knowledge, which is not supported)"
            self._stop(out, "parse", f"not an HTTP {what}{_start_of(start, self.is_request)}", self.head_pkt)
            return
        headers: dict[str, str] = {}
        last = None
        for n, line in enumerate(lines[1:], start=2):
            if line[:1] in (b" ", b"\t") and last is not None:  # obsolete line folding: part of the previous value
                headers[last] += " " + line.strip(b" \t").decode("utf-8", "replace")
                continue
            name, sep, value = line.partition(b":")
            if not sep or not _HEADER_NAME.fullmatch(name):
                self._stop(out, "parse", f"not an HTTP header line: line {n} of the head ({len(line)} bytes, {'the name is not a token' if sep else 'no colon'})", self.head_pkt)
                return
            key = name.decode("ascii").lower()
            val = value.strip(b" \t").decode("utf-8", "replace")
            add_header(headers, key, val)
            last = key
        if self.is_request:
            method, target = m.group(1).decode("ascii"), m.group(2).decode("utf-8", "replace")
            head = Head(method, target, None, f"{m.group(3).decode()}.{m.group(4).decode()}", headers, self.head_pkt, self.head_ts)
            out.append(head)
            self._frame_request(head, ts, pkt, out)
        else:
            status = int(m.group(3))
            version = f"{m.group(1).decode()}.{m.group(2).decode()}"
            self._status = (status, version, headers, ts, pkt)
            if 100 <= status < 200 and status != 101:
                out.append(Head(None, None, status, version, headers, self.head_pkt, self.head_ts, interim=True))
                return  # the final response follows for the same request
            self.state = WAIT
            self.pending = []
            self._pair(out)

    def _frame_request(self, head: Head, ts: int | None, pkt: int, out: list[Record]) -> None:
        te = head.headers.get("transfer-encoding")
        if te is not None:
            if te.rsplit(",", 1)[-1].strip().lower() != "chunked":
                self._stop(out, "parse", f"request Transfer-Encoding{_plain(te)} does not end with chunked (RFC 9112 §6.3: 400)", head.pkt)
                return
            self.state = CHUNK_SIZE
            return
        length = self._content_length(head.headers, out, head.pkt)
        if length is None:
            return
        if length:
            self.state, self.remaining = LENGTH, length
        else:
            self._done(out, ts, pkt)

    def _content_length(self, headers: dict[str, str], out: list[Record], pkt: int) -> int | None:
        cl = headers.get("content-length")
        if cl is None:
            return 0
        values = {v.strip() for v in cl.split(",")}
        if len(values) != 1 or not next(iter(values)).isdigit() or not next(iter(values)).isascii():
            self._stop(out, "parse", f"bad Content-Length{_plain(cl)}", pkt)
            return None
        return int(next(iter(values)))

    def _pair(self, out: list[Record]) -> bool:
        """Response head parsed (state WAIT): find its request and frame its body.  False: still waiting."""
        status, version, headers, ts, pkt = self._status
        paired = False
        method = None
        if self.requests:
            method, rpkt = self.requests[0]
            if rpkt <= self.head_pkt:  # a request captured after the response started cannot be its request
                self.requests.popleft()
                paired = True
            else:
                method = None
        elif not self.no_more_requests and self.request_pending():
            return False  # the request may still be on its way (held behind a hole)
        out.append(Head(method, None, status, version, headers, self.head_pkt, self.head_ts, paired=paired))
        self.state = HEAD
        if status == 101 or (method == "CONNECT" and 200 <= status < 300):
            self._stop(out, "upgrade", f"HTTP {status}: the connection left HTTP/1.1 (protocol switch or tunnel)", self.head_pkt)
            return True
        if method == "HEAD" or status in (204, 304):
            self._done(out, ts, pkt)
            return True
        te = headers.get("transfer-encoding")
        if te is not None:
            self.state = CHUNK_SIZE if te.rsplit(",", 1)[-1].strip().lower() == "chunked" else UNTIL_CLOSE
            return True
        length = self._content_length(headers, out, self.head_pkt)
        if length is None:
            return True
        if "content-length" in headers:
            if length:
                self.state, self.remaining = LENGTH, length
            else:
                self._done(out, ts, pkt)
        else:
            self.state = UNTIL_CLOSE
        return True

    def _resync(self, data: bytes, i: int, ts: int | None, pkt: int, out: list[Record]) -> int:
        """Joined mid-message: skip to the first message start at the beginning of a line."""
        if not self.skipped and not self.carry:
            self.skip_pkt = pkt
            head = data[i : i + 64]
            if self._plausible_start(bytearray(head)) and (b" " in head or len(head) >= 7):
                self.state = HEAD  # the capture starts at a message boundary after all
                return i
        piece = data[i:] if i else data
        carried = len(self.carry)
        window = self.carry + piece
        m = _RESYNC[self.role].search(window)
        if m is None:
            self.skipped += len(piece)
            self.carry = window[-RESYNC_CARRY:]
            return len(data)
        start = m.start(1)
        self.skipped += start - carried  # negative when the start was already in the carried (counted) bytes
        out.append(Skipped(self.skipped, self.skip_pkt, True))
        self.skipped, self.carry = 0, b""
        self.state = HEAD
        self.head_pkt, self.head_ts = pkt, ts
        if start < carried:
            self.buf = bytearray(window[start:carried])
            return i
        return i + start - carried
