"""A pure (sans-IO), WHATWG-exact Server-Sent Events parser, built for forensics.

Spec: HTML Living Standard, "Server-sent events", §9.2.5 "Parsing an event
stream" and §9.2.6 "Interpreting an event stream"
(https://html.spec.whatwg.org/multipage/server-sent-events.html).

Shape (h11 / httpx-sse style): bytes go in through :meth:`SSEParser.feed`,
records come out; nothing here touches a socket or a file.  Two small
decoders do the work:

* :class:`_LineSplitter` -- bytes to lines.  It strips the one leading BOM,
  ends lines at CRLF, LF or CR, carries a partial line over to the next chunk,
  and knows each line's byte offset in the whole stream.
* :class:`_EventAssembler` -- lines to event records, one WHATWG step per
  branch: decode, comment, field/value split, "process the field",
  "dispatch the event".

Unlike a browser, which silently drops what the spec tells it to drop, this
parser also *records* the blocks a client never turns into an event:

* ``fate="dispatched"``: the spec fires a ``MessageEvent`` for the block.
* ``fate="no_data"``: the block ended with a blank line but had no ``data``
  field, so the spec fires nothing (dispatch step 2).  It is still evidence:
  an ``id``-only block moves the Last-Event-ID a client will resume from.
* ``fate="cut_off"``: the stream ended inside the block (no blank line after
  it).  "Once the end of the file is reached, any pending data must be
  discarded"; we keep it as evidence.  (Callers log the catalog's
  ``sse_unterminated_event`` from the fate; it is not in ``anomalies``.)

A block of comments only, or a blank line with no field line before it,
produces no record (there is nothing a client could have acted on).

Decoding.  The spec decodes the whole stream with "UTF-8 decode" and *then*
splits lines.  We split the *bytes* first and decode each line; the result is
identical, because CR (0x0D) and LF (0x0A) are ASCII: they never occur inside
a well-formed multi-byte sequence, and a UTF-8 decoder that replaces
ill-formed input "per maximal subpart" (WHATWG Encoding, which Python's
``errors="replace"`` follows) never lets an ASCII byte be swallowed by a
broken sequence before it.  Splitting bytes first is what makes the byte
offsets exact, and a multi-byte character split across chunks simply waits
in the carried-over partial line until its line is complete -- the same job
an incremental decoder would do.  Likewise, "UTF-8 decode" strips one
leading BOM (EF BB BF); that is done here at the byte level, only at offset 0
of the stream, only once.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["SSEEvent", "SSEParser", "parse_all"]

_BOM = b"\xef\xbb\xbf"
# "a U+000D CARRIAGE RETURN U+000A LINE FEED (CRLF) character pair, a single
# U+000A LINE FEED (LF) character not preceded by a U+000D CARRIAGE RETURN (CR)
# character, and a single U+000D CARRIAGE RETURN (CR) character not followed by
# a U+000A LINE FEED (LF) character being the ways in which a line can end."
# Alternation order matters: CRLF must be tried before a lone CR.
_EOL = re.compile(rb"(\r\n|\r|\n)")

# Python refuses int(str) beyond 4300 digits (CVE-2020-10735 guard); the spec's
# integer is unbounded, so longer values are converted piecewise.
_INT_DIGITS_SAFE = 4000


@dataclass(frozen=True, slots=True)
class SSEEvent:
    # value of an `id` field accepted in THIS block ("" = explicit reset by an
    # empty `id:`); None = no accepted id field in this block
    id: str | None
    # the WHATWG "last event ID buffer" after this block: what a client would
    # send as Last-Event-ID (persists across blocks).  For a cut_off block it
    # includes the block's own id lines -- see SSEParser.close().
    last_event_id: str
    # event type; "message" when the block set none (or set it to empty)
    event: str
    # data buffer with the single trailing LF removed (multi-line data joined with LF)
    data: str
    # reconnection time set by a `retry` field in this block (all ASCII digits only)
    retry: int | None
    # "dispatched" | "no_data" | "cut_off"
    fate: str
    # byte offset in the whole stream (counting the BOM if any) where this
    # block's first line (comment lines included) started
    offset: int
    # anomaly codes noticed in this block, in order of appearance, no duplicates
    anomalies: tuple[str, ...] = ()
    # byte offset of the blank line that dispatched the block (its first byte: the event is complete
    # once that byte has arrived); None for cut_off.  Not part of equality: it says when, not what.
    end: int | None = field(default=None, compare=False)


def _digits_to_int(digits: str) -> int:
    """Base-ten value of an all-ASCII-digit string of any length, exactly."""
    n = len(digits)
    if n <= _INT_DIGITS_SAFE:
        return int(digits)
    stripped = digits.lstrip("0")
    if len(stripped) <= _INT_DIGITS_SAFE:
        return int(stripped) if stripped else 0
    half = n // 2  # divide and conquer: ~1 s for a (hostile) 1 MB value
    return _digits_to_int(digits[:-half]) * 10**half + _digits_to_int(digits[-half:])


class _LineSplitter:
    """Bytes -> ``(line_bytes, stream_offset)`` pairs; terminators not included.

    A CR at the very end of a chunk ends its line *now* (a CR always ends a
    line) but the splitter cannot yet know whether it is a lone CR or the
    first half of a CRLF.  It remembers that (``_skip_lf``) and, if the next
    non-empty chunk starts with LF, swallows that LF as the second half of the
    same terminator instead of reading it as a blank line.  Processing the line
    early rather than holding it back changes nothing in the results (the
    line's content is complete; only the next line's offset depends on the LF)
    and lets a block ended by a trailing CR dispatch without waiting.
    """

    __slots__ = ("_head", "_bom_done", "_parts", "_line_start", "_skip_lf")

    def __init__(self) -> None:
        self._head = b""  # first bytes of the stream while they may still be a BOM
        self._bom_done = False
        self._parts: list[bytes] = []  # the partial (unterminated) current line
        self._line_start = 0  # stream offset of the current line's first byte
        self._skip_lf = False  # the previous chunk ended with a CR

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        if not self._bom_done:
            # "The UTF-8 decode algorithm strips one leading UTF-8 Byte Order
            # Mark (BOM), if any."  Only at the very start, only once: wait
            # until three bytes are in, or until they cannot be a BOM.
            head = self._head + chunk
            if len(head) < 3 and _BOM.startswith(head):
                self._head = head
                return []
            self._head = b""
            self._bom_done = True
            if head.startswith(_BOM):
                chunk = head[3:]
                self._line_start = 3
            else:
                chunk = head
        if not chunk:
            return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:  # ... CR | LF ...: one CRLF terminator
                self._line_start += 1
                chunk = chunk[1:]
                if not chunk:
                    return []

        eols: list[bytes] | None = None  # None: every line end is eol_len bytes
        eol_len = 1
        crs = chunk.count(b"\r")
        if not crs:
            if b"\n" not in chunk:
                self._parts.append(chunk)  # no line end yet: carry over
                return []
            lines = chunk.split(b"\n")  # fast path: LF-only
        elif crs == chunk.count(b"\r\n") == chunk.count(b"\n"):
            lines = chunk.split(b"\r\n")  # fast path: CRLF-only
            eol_len = 2
        else:
            pieces = _EOL.split(chunk)  # mixed: [line, eol, line, eol, ..., tail]
            lines = pieces[0::2]
            eols = pieces[1::2]

        tail = lines.pop()  # bytes after the last terminator (a partial line)
        if self._parts:
            self._parts.append(lines[0])
            lines[0] = b"".join(self._parts)
            self._parts = []
        out: list[tuple[bytes, int]] = []
        start = self._line_start
        if eols is None:
            for line in lines:
                out.append((line, start))
                start += len(line) + eol_len
        else:
            for line, eol in zip(lines, eols):
                out.append((line, start))
                start += len(line) + len(eol)
            if not tail and eols[-1] == b"\r":
                self._skip_lf = True  # the chunk ended with a CR: maybe CRLF
        self._line_start = start
        if tail:
            self._parts.append(tail)
        return out

    def close(self) -> tuple[bytes, int] | None:
        """The unterminated last line, if any bytes of one were received."""
        if not self._bom_done:  # 1-2 bytes that began like a BOM: plain content
            self._bom_done = True
            if self._head:
                self._parts = [self._head]
                self._head = b""
        if not self._parts:
            return None
        line = b"".join(self._parts)
        self._parts = []
        return line, self._line_start


class _EventAssembler:
    """Lines -> :class:`SSEEvent` records (WHATWG §9.2.6, step by step)."""

    __slots__ = ("last_event_id", "_data", "_event", "_id", "_retry", "_fields", "_start", "_anomalies")

    def __init__(self) -> None:
        # "When a stream is parsed, a data buffer, an event type buffer, and a
        # last event ID buffer must be associated with it. They must be
        # initialized to the empty string."
        self.last_event_id = ""
        self._reset()

    def _reset(self) -> None:
        # The data buffer is kept as the list of `data` values: "append the
        # field value ..., then append a single LF" followed by dispatch step 3
        # "remove the last character" is exactly "\n".join(values), and
        # "the data buffer is an empty string" is exactly "no value appended".
        self._data: list[str] = []
        self._event = ""  # event type buffer
        self._id: str | None = None  # id accepted in this block (record only)
        self._retry: int | None = None
        self._fields = False  # this block has at least one field line
        self._start = -1  # offset of the block's first line; -1 = none yet
        self._anomalies: list[str] = []

    def _note(self, code: str) -> None:
        if code not in self._anomalies:
            self._anomalies.append(code)

    def line(self, raw: bytes, start: int) -> SSEEvent | None:
        """Process one line ("Lines must be processed, in the order they are received")."""
        # "If the line is empty (a blank line): Dispatch the event."
        if not raw:
            return self._dispatch(start)
        if self._start < 0:
            self._start = start
        # "Streams must be decoded using the UTF-8 decode algorithm" (errors
        # become U+FFFD; see the module docstring for why per line is exact).
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", "replace")
            self._note("sse_invalid_utf8")
        # "If the line starts with a U+003A COLON character (:): Ignore the line."
        if text[0] == ":":
            return None
        colon = text.find(":")
        if colon < 0:
            # "Otherwise, the string is not empty but does not contain a U+003A
            # COLON character (:): Process the field using the whole line as the
            # field name, and the empty string as the field value."
            name, value = text, ""
        else:
            # "Collect the characters on the line before the first U+003A COLON
            # character (:), and let field be that string.  Collect the
            # characters on the line after [it] ... If value starts with a
            # U+0020 SPACE character, remove it from value."  -- one space only.
            name = text[:colon]
            value = text[colon + 1 :]
            if value[:1] == " ":
                value = value[1:]
        self._field(name, value)
        return None

    def _field(self, name: str, value: str) -> None:
        # "Field names must be compared literally, with no case folding performed."
        self._fields = True
        if name == "data":
            # "Append the field value to the data buffer, then append a single
            # U+000A LINE FEED (LF) character to the data buffer."
            self._data.append(value)
        elif name == "event":
            # "Set the event type buffer to the field value."
            self._event = value
        elif name == "id":
            # "If the field value does not contain U+0000 NULL, then set the last
            # event ID buffer to the field value. Otherwise, ignore the field."
            # The buffer is set *now*, not at dispatch: an empty value resets it.
            if "\x00" in value:
                self._note("sse_id_contains_nul")
            else:
                self.last_event_id = value
                self._id = value
        elif name == "retry":
            # "If the field value consists of only ASCII digits, then interpret
            # the field value as an integer in base ten ... Otherwise, ignore the
            # field."  ASCII digits are 0-9 only: str.isdigit() alone would take
            # "５" or "²", hence isascii() too.  The empty string is not "only
            # ASCII digits" (there is no integer to interpret).
            if value and value.isascii() and value.isdigit():
                self._retry = _digits_to_int(value)
            else:
                self._note("sse_retry_invalid")
        else:
            # "Otherwise: The field is ignored."
            self._note("sse_unknown_field")

    def _record(self, fate: str, end: int | None = None) -> SSEEvent:
        return SSEEvent(
            id=self._id,
            # Dispatch step 1: "Set the last event ID string of the event source
            # to the value of the last event ID buffer" -- regardless of data.
            last_event_id=self.last_event_id,
            # Step 5/6: type "message" unless the event type buffer is non-empty.
            event=self._event or "message",
            # Step 3: "If the data buffer's last character is a U+000A LINE FEED
            # (LF) character, then remove the last character from the data buffer."
            data="\n".join(self._data),
            retry=self._retry,
            fate=fate,
            offset=self._start,
            anomalies=tuple(self._anomalies),
            end=end,
        )

    def _dispatch(self, end: int) -> SSEEvent | None:
        if not self._fields:
            # A blank line after nothing, or after comments only: no buffer was
            # touched, nothing for a client to act on, nothing to record.
            self._reset()
            return None
        # Step 2: "If the data buffer is an empty string, set the data buffer and
        # the event type buffer to the empty string and return."  No event
        # fires; we record the block as no_data.  Otherwise steps 3-8 fire it.
        record = self._record("dispatched" if self._data else "no_data", end)
        # Step 7: "Set the data buffer and the event type buffer to the empty
        # string."  The last event ID buffer "does not get reset".
        self._reset()
        return record

    def close(self) -> SSEEvent | None:
        # "Once the end of the file is reached, any pending data must be
        # discarded. (If the file ends in the middle of an event, before the
        # final empty line, the incomplete event is not dispatched.)"
        # The fate says it all: the catalog's ``sse_unterminated_event`` is
        # logged by the caller from ``fate == "cut_off"``, so it is not
        # repeated in ``anomalies`` (which would log it twice).
        record = self._record("cut_off") if self._fields else None
        self._reset()
        return record


class SSEParser:
    """Incremental ``text/event-stream`` parser: ``feed()`` bytes, then ``close()``.

    Any chunking of the same bytes -- one call, one byte at a time, any split
    point -- yields the same records in the same order (concatenating what
    every ``feed()`` and the final ``close()`` return).  No input bytes raise;
    only calling ``feed()`` after ``close()`` does (``ValueError``).
    """

    __slots__ = ("_lines", "_events", "_closed")

    def __init__(self) -> None:
        self._lines = _LineSplitter()
        self._events = _EventAssembler()
        self._closed = False

    @property
    def last_event_id(self) -> str:
        """The current WHATWG last event ID buffer (what Last-Event-ID would carry)."""
        return self._events.last_event_id

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if self._closed:
            raise ValueError("SSEParser.feed() called after close()")
        out: list[SSEEvent] = []
        process = self._events.line
        for raw, start in self._lines.feed(bytes(chunk)):
            record = process(raw, start)
            if record is not None:
                out.append(record)
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream (disconnect).  Returns the cut-off block, if any.

        Interpretation, for forensics: an unterminated last line is processed
        as a line first (its bytes were received), so its fields count --
        including an ``id`` line, which sets the last event ID buffer at once,
        as the spec's "process the field" does for every line.  The spec then
        discards the block; we return it with ``fate="cut_off"``.  Note that a
        browser would only have copied the buffer to the EventSource's "last
        event ID string" (what it actually sends on reconnect) at a dispatch
        that never came, so for a cut_off block ``last_event_id`` (and the
        parser's ``last_event_id`` after close) is the buffer as the server
        left it, not necessarily what that client would resume from; the last
        non-cut_off record's ``last_event_id`` is.

        Idempotent: a second call returns ``[]``.
        """
        if self._closed:
            return []
        self._closed = True
        out: list[SSEEvent] = []
        pending = self._lines.close()
        if pending is not None:
            record = self._events.line(*pending)  # non-empty: never a dispatch
            if record is not None:  # pragma: no cover - defensive
                out.append(record)
        record = self._events.close()
        if record is not None:
            out.append(record)
        return out


def parse_all(data: bytes) -> list[SSEEvent]:
    """Parse a whole, finished stream: ``feed(data)`` then ``close()``."""
    parser = SSEParser()
    return parser.feed(data) + parser.close()
