"""Content-Encoding undone incrementally (sans-IO): ``Decoder(header).feed(bytes) / close()``.

nginx with ``gzip on`` compresses ``text/event-stream`` too (it ignores ``Cache-Control:
no-transform``), so a capture's response bodies may be gzip, deflate, br or zstd, and a proxy
that streams (mitmproxy's ``flow.response.stream``) hands on the still-encoded bytes.  SSE is
parsed from what this module decodes, never from encoded bytes.

RFC 9110 §8.4: the codings are listed in the order they were applied, so they are undone in
reverse (``gzip, br``: br first, then gzip); ``x-gzip`` is gzip, ``identity`` is nothing.

A body that breaks off is the normal case for an event stream cut by a disconnect: everything
decoded up to the cut comes out (the events before it are real evidence) and the decoder ends
``truncated``.  Corrupt data ends it ``invalid`` at the encoded byte offset where it was found
(exact when fed in small pieces; otherwise the start of the piece that failed, whose own output
may be lost for br and zstd).  A coding this version does not know ends it ``unsupported``: the
body is not decodable and nothing is parsed from it.  Nothing here raises on bad data.

Decompression bombs: output beyond ``--max-gunzip-ratio`` times the encoded bytes fed so far
(and at least :data:`analyzer.limits.BODY_FLOOR`) stops the work itself, not only the memory:
zlib and brotli are asked for at most the remaining budget, zstd (which has no output bound per
call) is fed in slices small enough that one slice cannot overshoot by much.
"""
from __future__ import annotations

import sys
import zlib

import brotli
import zstandard

try:
    from .. import limits  # relative on purpose: loaded by path (no package), it fails and the fallback runs
except ImportError:  # loaded by path outside the package: analyzer/mitm_addon.py runs in mitmproxy's virtualenv
    # (and finds limits.py one folder up, in analyzer/)
    import importlib.util
    from pathlib import Path

    _spec = importlib.util.spec_from_file_location("_mcp_audit_limits", Path(__file__).parent.parent / "limits.py")
    limits = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
    sys.modules[_spec.name] = limits  # type: ignore[union-attr]  # @dataclass looks its module up there
    _spec.loader.exec_module(limits)  # type: ignore[union-attr]

SUPPORTED = ("gzip", "deflate", "br", "zstd")
_ALIASES = {"x-gzip": "gzip"}
# other codings of the IANA registry, named in anomaly rows; any other value is not quoted back
_REGISTERED = frozenset({"compress", "x-compress", "aes128gcm", "dcb", "dcz", "exi", "pack200-gzip"})
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
# RFC 9659 §3: zstd content coding uses windows of at most 8 MiB, and browsers refuse larger
# ones; the cap also bounds the memory a hostile frame header can ask for.
ZSTD_MAX_WINDOW = 8 << 20
# One zstd RLE block turns 4 encoded bytes into 128 KiB: a slice of n bytes yields at most
# about n << 15 bytes, so slices are sized from the remaining budget.
_ZSTD_EXPANSION_SHIFT = 15
_ZSTD_MIN_SLICE = 16
_ZSTD_MAX_SLICE = 64 << 10
_WHOLE_SLICE = 4 << 10
_BROTLI_SLICE = 64  # without output_buffer_limit: input slices, the budget checked after each
_BROTLI_CHUNK = 1 << 10


def _brotli_has_limit() -> bool:
    """brotli >= 1.2 bounds the output of one call; mitmproxy's virtualenv (the addon) may pin an older one."""
    try:
        brotli.Decompressor().process(b"", output_buffer_limit=1)
    except TypeError:
        return False
    except brotli.error:  # pragma: no cover - an empty input is no error
        pass
    return True


_BROTLI_LIMIT = _brotli_has_limit()


def codings(header_value: str | None) -> tuple[tuple[str, ...], str | None]:
    """The codings of a Content-Encoding value in the order applied (identity dropped), and the
    first one this version cannot undo (None: all supported), quoted only when it is a registered
    coding name: a header value is hostile input and may carry anything."""
    out: list[str] = []
    for raw in (header_value or "").split(","):
        name = raw.strip().lower()
        if not name or name == "identity":
            continue
        name = _ALIASES.get(name, name)
        if name not in SUPPORTED:
            return tuple(out), repr(name) if name in _REGISTERED else "an unrecognised coding"
        out.append(name)
    return tuple(out), None


class _Stage:
    """One coding's decompressor.  ``feed``/``close`` return output and never raise; a failure sets
    ``error`` (state, detail) and the stage then returns nothing more."""

    __slots__ = ("produced", "error", "started", "at")

    def __init__(self) -> None:
        self.at = 0  # where in the input of the failing call the failure was found (0: not known more exactly)
        self.produced = 0
        self.error: tuple[str, str] | None = None
        self.started = False  # some input arrived

    def fail(self, state: str, detail: str) -> None:
        if self.error is None:
            self.error = (state, detail)


class _Zlib(_Stage):
    """gzip (wbits 31; concatenated members are read one after the other, as zcat does) or deflate:
    zlib-wrapped when the first two bytes are a zlib header, else raw -- browsers accept both."""

    __slots__ = ("gzip", "d", "head", "hold")

    def __init__(self, gzip: bool) -> None:
        super().__init__()
        self.gzip = gzip
        self.d = zlib.decompressobj(31) if gzip else None
        self.head = b""  # deflate: the first bytes, until the wrapper is known
        self.hold = b""  # bytes after a gzip member's end, until it is known whether a member follows

    def feed(self, data: bytes, budget: int) -> bytes:
        if self.error is not None or not data:
            return b""
        self.started = True
        if self.d is None:
            self.head += data
            if len(self.head) < 2:
                return b""
            data, self.head = self.head, b""
            cmf, flg = data[0], data[1]
            zlib_wrapped = cmf & 0x0F == 8 and (cmf << 8 | flg) % 31 == 0
            self.d = zlib.decompressobj(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        out: list[bytes] = []
        while data:  # bounded: each turn consumes input or ends
            if self.d.eof:
                data = self._after_end(data)
                if not data:
                    break
            if budget - sum(map(len, out)) <= 0:
                self.fail("over_limit", "")
                break
            snapshot = self.d.copy()  # a failing call returns nothing: start again from here to keep what precedes the damage
            try:
                got = self.d.decompress(data, budget - sum(map(len, out)))
            except zlib.error as exc:
                self.d = snapshot
                out.append(self._salvage(data, budget - sum(map(len, out)), str(exc)))
                break
            out.append(got)
            if self.d.unconsumed_tail:
                self.fail("over_limit", "")
                break
            data = self.d.unused_data if self.d.eof else b""
        got = b"".join(out)
        self.produced += len(got)
        return got

    def _salvage(self, data: bytes, budget: int, reason: str) -> bytes:
        """Decode ``data`` byte by byte up to the damage: its output, and the exact offset of the failure.
        (Only on corrupt data; ``budget`` still bounds the output.)"""
        out: list[bytes] = []
        d = self.d
        for i in range(len(data)):
            try:
                got = d.decompress(data[i : i + 1], max(budget, 1))
            except zlib.error:
                self.at = i
                break
            out.append(got)
            budget -= len(got)
            if d.eof or d.unconsumed_tail or budget <= 0:  # cannot happen before the failure point of the whole call
                break
        self.fail("invalid", reason)
        return b"".join(out)

    def _after_end(self, data: bytes) -> bytes:
        """Bytes after a complete stream: another gzip member starts here, or they are junk."""
        data = self.hold + data
        self.hold = b""
        if self.gzip and len(data) < 2 and GZIP_MAGIC.startswith(data):
            self.hold = data
            return b""
        if self.gzip and data[:2] == GZIP_MAGIC:
            self.d = zlib.decompressobj(31)
            return data
        self.fail("invalid", f"{len(data)} bytes after the end of the compressed data")
        return b""

    def close(self, budget: int) -> bytes:
        if self.error is not None or not self.started:
            return b""
        if self.d is None:
            self.fail("truncated", "the body ended inside the deflate header")
            return b""
        got = b""
        if not self.d.eof:
            try:
                got = self.d.flush(max(budget, 1))
            except zlib.error as exc:  # pragma: no cover - flush of a decompressor does not raise in CPython
                self.fail("invalid", str(exc))
            if not self.d.eof:
                self.fail("truncated", "")
        elif self.hold:
            self.fail("invalid", f"{len(self.hold)} bytes after the end of the compressed data")
        self.produced += len(got)
        return got


class _Brotli(_Stage):
    __slots__ = ("d",)

    def __init__(self) -> None:
        super().__init__()
        self.d = brotli.Decompressor()

    def feed(self, data: bytes, budget: int) -> bytes:
        if self.error is not None or not data:
            return b""
        self.started = True
        if not _BROTLI_LIMIT:
            return self._sliced(data, budget, _BROTLI_SLICE)
        out: list[bytes] = []
        size = 0
        # in slices: a call that meets damage returns nothing, so one slice is all the damage can cost
        for at in range(0, len(data), _BROTLI_CHUNK):
            if self.d.is_finished():
                self.fail("invalid", f"{len(data) - at} bytes after the end of the compressed data")
                break
            try:
                # output_buffer_limit (brotli >= 1.2): the decoder keeps the rest of its work for later calls
                got = self.d.process(data[at : at + _BROTLI_CHUNK], output_buffer_limit=max(budget - size, 1))
                out.append(got)
                size += len(got)
                for _ in range(1 << 16):  # bounded: each turn yields output or the loop ends
                    if self.d.can_accept_more_data():
                        break
                    if size >= budget:
                        self.fail("over_limit", "")
                        break
                    got = self.d.process(b"", output_buffer_limit=budget - size)
                    if not got:
                        break
                    out.append(got)
                    size += len(got)
            except brotli.error as exc:
                self.at = at
                self.fail("invalid", str(exc) or "corrupt")  # (the decoder answers nothing more after an error)
            if self.error is not None:
                break
        result = b"".join(out)
        self.produced += len(result)
        return result

    def _sliced(self, data: bytes, budget: int, step: int) -> bytes:
        out: list[bytes] = []
        size = 0
        for at in range(0, len(data), step):
            if size > budget:
                self.fail("over_limit", "")
                break
            if self.d.is_finished():
                self.fail("invalid", f"{len(data) - at} bytes after the end of the compressed data")
                break
            try:
                got = self.d.process(data[at : at + step])
            except brotli.error as exc:
                self.at = at
                self.fail("invalid", str(exc) or "brotli data is corrupt")
                break
            out.append(got)
            size += len(got)
        result = b"".join(out)
        self.produced += len(result)
        return result

    def close(self, budget: int) -> bytes:
        if self.error is None and self.started and not self.d.is_finished():
            self.fail("truncated", "")
        return b""


class _Zstd(_Stage):
    __slots__ = ("d", "hold", "in_frame")

    def __init__(self) -> None:
        super().__init__()
        self.d = self._new()
        self.hold = b""
        self.in_frame = False  # bytes of the current frame were fed

    @staticmethod
    def _new():
        # a frame may lack its content size (a streaming encoder): decompressobj needs none
        return zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW).decompressobj()

    def feed(self, data: bytes, budget: int) -> bytes:
        if self.error is not None or not data:
            return b""
        self.started = True
        out: list[bytes] = []
        size = 0
        held = len(self.hold)
        data = self.hold + data
        self.hold = b""
        at = 0
        while at < len(data):  # bounded: each turn consumes at least one byte or ends
            if self.d.eof:  # a frame ended: another may follow (RFC 8878 allows several)
                rest = data[at:]
                if len(rest) < 4 and ZSTD_MAGIC.startswith(rest):
                    self.hold = rest
                    break
                if rest[:4] != ZSTD_MAGIC and not (rest[1:4] == b"\x2a\x4d\x18" and rest[0] & 0xF0 == 0x50):  # skippable frames too
                    self.fail("invalid", f"{len(rest)} bytes after the end of the compressed data")
                    break
                self.d = self._new()
                self.in_frame = False
            left = budget - size
            if left <= 0:
                self.fail("over_limit", "")
                break
            step = min(_ZSTD_MAX_SLICE, max(_ZSTD_MIN_SLICE, left >> _ZSTD_EXPANSION_SHIFT))
            piece = data[at : at + step]
            try:
                got = self.d.decompress(piece)
            except zstandard.ZstdError as exc:
                self.at = max(at - held, 0)
                self.fail("invalid", str(exc))
                break
            self.in_frame = True
            used = len(piece) - len(self.d.unused_data) if self.d.eof else len(piece)
            at += used
            out.append(got)
            size += len(got)
            if size > budget:
                self.fail("over_limit", "")
                break
        result = b"".join(out)
        self.produced += len(result)
        return result

    def close(self, budget: int) -> bytes:
        if self.error is None and self.started and (self.hold or not self.d.eof):
            self.fail("truncated", "")  # inside a frame, or inside the magic number of the next one
        return b""


def _stage(name: str) -> _Stage:
    if name == "gzip":
        return _Zlib(True)
    if name == "deflate":
        return _Zlib(False)
    if name == "br":
        return _Brotli()
    return _Zstd()


class Decoder:
    """Undo a body's Content-Encoding as its bytes arrive.

    ``state``: ``open`` (before close), ``complete``, ``truncated`` (the body ended before the
    compressed stream did), ``invalid`` (corrupt from ``error_at``), ``over_limit`` (the
    decompression-bomb limit stopped it at ``error_at``), ``unsupported`` (nothing decoded).
    ``fed`` / ``produced``: encoded bytes in, decoded bytes out.
    """

    __slots__ = ("codings", "label", "stages", "state", "detail", "error_at", "fed", "produced", "ratio", "floor", "closed", "reported")

    def __init__(self, header_value: str | None, ratio: int | None = None, floor: int | None = None) -> None:
        self.codings, unknown = codings(header_value)
        self.label = ", ".join(self.codings)
        self.stages = [_stage(name) for name in reversed(self.codings)] if unknown is None else []
        self.state = "open"
        self.detail = ""
        self.error_at: int | None = None
        self.fed = self.produced = 0
        self.ratio = ratio if ratio is not None else limits.Limits.gunzip_ratio  # the --max-gunzip-ratio default
        self.floor = floor if floor is not None else limits.BODY_FLOOR
        self.closed = False
        self.reported = False  # for callers: the anomaly row of this body was written
        if unknown is not None:
            self.state, self.error_at = "unsupported", 0
            self.detail = f"Content-Encoding {unknown}; this version undoes gzip, x-gzip, deflate, br, zstd and identity"

    @property
    def active(self) -> bool:
        """There is something to undo (or a coding that cannot be undone): the body is not plain."""
        return bool(self.stages) or self.state == "unsupported"

    @property
    def failed(self) -> bool:
        return self.state in ("invalid", "over_limit", "unsupported")

    @property
    def undecodable(self) -> bool:
        """Nothing of the body can be known: a coding that cannot be undone, or damage before the first
        decoded byte.  (A stream cut early decoded as far as it went: that is a short body, not an unknown one.)"""
        return self.state == "unsupported" or (self.state == "invalid" and not self.produced)

    def feed(self, data: bytes) -> bytes:
        if not self.stages:
            return data if self.state == "open" else b""
        if self.state != "open" or not data:
            return b""
        before = self.fed
        self.fed += len(data)
        cap = max(self.ratio * self.fed, self.floor)
        for st in self.stages:
            data = st.feed(data, cap - st.produced)
        self.produced += len(data)
        self._check(before)
        return data

    def close(self) -> bytes:
        """The body ended: what the decoders still held, and the final state."""
        if self.closed:
            return b""
        self.closed = True
        if not self.stages:
            if self.state == "open":
                self.state = "complete"
            return b""
        if self.state != "open":
            return b""
        cap = max(self.ratio * self.fed, self.floor)
        out = b""
        for st in self.stages:
            if out:
                out = st.feed(out, cap - st.produced)
            out += st.close(cap - st.produced)
        self.produced += len(out)
        self._check(self.fed)
        if self.state == "open":
            self.state = "complete"
        return out

    def lost(self, nbytes: int) -> None:
        """The capture lost ``nbytes`` of the encoded body: nothing after them can be decoded."""
        if self.stages and self.state == "open":
            self.state, self.error_at = "truncated", self.fed
            self.detail = f"the capture lost {nbytes} bytes of the encoded body after byte {self.fed}: what followed cannot be decoded"

    def _check(self, at: int) -> None:
        for i, st in enumerate(self.stages):
            if st.error is not None:
                state, detail = st.error
                if i == 0 and state == "invalid":  # the outermost stage reads the encoded bytes themselves
                    at += st.at
                self.state, self.error_at = state, at
                if state == "over_limit":
                    self.detail = (f"stopped after {self.produced} decoded bytes from {self.fed} encoded, more than {self.ratio} times "
                                   "(raise --max-gunzip-ratio if the body is genuine)")
                elif state == "truncated":
                    self.detail = f"the {self.label} stream ended unfinished after {self.fed} encoded bytes ({self.produced} decoded)"
                else:
                    self.detail = f"corrupt {self.label} data at or after encoded byte {at}" + (f": {detail}" if detail else "")
                return

    def anomaly(self) -> tuple[str, str] | None:
        """The catalog code and detail of how decoding ended (None: complete, or nothing to undo)."""
        code = {"truncated": "body_encoding_truncated", "invalid": "body_encoding_invalid",
                "over_limit": "body_decoded_over_limit", "unsupported": "body_encoding_unsupported"}.get(self.state)
        return (code, self.detail) if code else None


def decode_all(header_value: str | None, data: bytes, ratio: int | None = None) -> tuple[bytes, Decoder]:
    """A whole recorded body (HAR text, a JSONL body record) decoded at once (``ratio``: see :class:`Decoder`)."""
    dec = Decoder(header_value, ratio)
    # in slices: a brotli call that meets damage returns nothing, so a slice is all it can cost
    out = [dec.feed(data[i : i + _WHOLE_SLICE]) for i in range(0, len(data), _WHOLE_SLICE)]
    out.append(dec.close())
    return b"".join(out), dec


def looks_encoded(header_value: str | None, data: bytes, ratio: int | None = None) -> bool:
    """Whether a recorded body is still encoded by its outermost coding.  Producers usually keep the
    decoded body (browsers; mitmproxy except for a stream cut mid-way, which it keeps as raw gzip):
    gzip and zstd tell by their magic bytes; br and deflate have none, so a trial decode must
    succeed -- completely, or up to a cut of bytes that are not already text."""
    names, unknown = codings(header_value)
    if unknown is not None or not names or not data:
        return False
    last = names[-1]
    if last == "gzip":
        return data[:2] == GZIP_MAGIC
    if last == "zstd":
        return data[:4] == ZSTD_MAGIC
    out, dec = decode_all(last, data, ratio)
    if dec.state == "complete":
        return True
    if dec.state != "truncated" or not out:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False
