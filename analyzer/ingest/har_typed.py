"""HAR entries decoded by msgspec: the fast half of :mod:`analyzer.ingest.har`.

A HAR is one JSON document, and its entries are most of it.  :func:`entries` reads ``log.entries`` entry
by entry from the file's bytes, as :func:`analyzer.ingest.har.stream_entries` does with Python's ``json``,
but each entry becomes an :class:`Entry` ``Struct`` that holds only the fields the reader reads: the
others (timings, cookies, cache, query strings, sizes, a producer's own ``_`` fields) are skipped in C,
never made into Python objects.  The fields read keep the values ``json.loads`` gives (they are ``Any``:
the reader's own rules judge their types, as before).

Where an entry ends is found by msgspec too: decoding the bytes from the entry's ``{`` as
``msgspec.Raw`` stops after the entry with "trailing characters (byte N)", N the entry's length (a scan
of the brackets and strings, in C).

msgspec and Python's ``json`` disagree on some documents; for each, the result stays ``json``'s:

* an entry whose end msgspec finds but whose fields it refuses (a number past a float, invalid UTF-8 in a
  field read, a duplicate key whose first value is of another type) is decoded by ``json.loads`` of its
  text (invalid UTF-8 replaced, as the ``json`` reader does), converted by :func:`typed` and cleaned of
  lone surrogates by the reader;
* a document msgspec cannot follow as ``json`` would raises :class:`Refused`, and the caller reads it
  again with :func:`analyzer.ingest.har.stream_entries` (then :func:`~analyzer.ingest.har.load`): the
  same entries, anomalies and errors as before, at the cost of a second read of a damaged file.  These
  are the documents that break off or are not JSON between or after their entries, those with ``NaN``,
  ``Infinity``, a lone surrogate escape or an entry nested past the recursion limit anywhere in an entry
  (msgspec cannot even find where that entry ends), an entry ``json`` refuses too, an entries array that
  is not the first ``"entries": [`` outside a string or not ``log.entries``, and an entry or document head
  larger than the cap.

Invalid UTF-8 in a field msgspec skips is not checked: ``json`` would replace it, in a value no one reads.
"""
from __future__ import annotations

import json
import re
import uuid
from typing import Any, BinaryIO

import msgspec


class Request(msgspec.Struct):
    method: Any = None
    url: Any = None
    headers: Any = None
    postData: Any = None  # noqa: N815 (HAR's names)


class Response(msgspec.Struct):
    status: Any = None
    headers: Any = None
    content: Any = None
    error: Any = msgspec.field(default=None, name="_error")  # Chrome, mitmproxy
    failure: Any = msgspec.field(default=None, name="_failureText")  # Playwright


class Entry(msgspec.Struct):
    """One HAR entry, as far as the reader reads it.  A missing field and a null one are both None, as
    ``dict.get`` read them; ``request`` and ``response`` must be objects (else the entry is invalid)."""

    request: Request
    response: Response
    startedDateTime: Any = None  # noqa: N815
    connection: Any = None
    time: Any = None
    error: Any = msgspec.field(default=None, name="_error")
    failure: Any = msgspec.field(default=None, name="_failureText")
    aborted: Any = msgspec.field(default=None, name="_wasAborted")


def typed(entry: object) -> Entry | None:
    """An entry as ``json.loads`` gave it, as an :class:`Entry`; None when it is not an object with
    ``request`` and ``response`` objects."""
    if not isinstance(entry, dict):
        return None
    req, resp = entry.get("request"), entry.get("response")
    if not isinstance(req, dict) or not isinstance(resp, dict):
        return None
    return Entry(
        Request(req.get("method"), req.get("url"), req.get("headers"), req.get("postData")),
        Response(resp.get("status"), resp.get("headers"), resp.get("content"), resp.get("_error"), resp.get("_failureText")),
        entry.get("startedDateTime"), entry.get("connection"), entry.get("time"), entry.get("_error"),
        entry.get("_failureText"), entry.get("_wasAborted"),
    )


class Refused(Exception):
    """The document is not one this reader reads as ``json`` would: read it with the ``json`` reader."""


_RAW = msgspec.json.Decoder(msgspec.Raw).decode
_ENTRY = msgspec.json.Decoder(Entry).decode
_TRAILING = re.compile(r"JSON is malformed: trailing characters \(byte (\d+)\)")
ENTRIES = re.compile(r'"entries"\s*:\s*\[')  # where log.entries opens (the first one outside a string)
_ENTRIES_BYTES = re.compile(rb'"entries"[ \t\r\n]*:[ \t\r\n]*\[')
STRUCTURE = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]', re.S)  # a whole string, or a bracket
_BLANK = b" \t\r\n"


def outside_strings(text: str, at: int) -> bool:
    """``text[at]`` is not inside a JSON string (the strings before it skipped whole, one regex pass)."""
    for tok in STRUCTURE.finditer(text):
        if tok.start() >= at:
            return True
        if tok.end() > at:  # a string that began before ``at`` and goes on past it
            return False
    return True


def is_log_entries(head: str, tail: str) -> bool | None:
    """Whether the array between ``head`` (up to its ``[``) and ``tail`` (from its ``]``) is the document's
    ``log.entries`` (not a page's, nor one a later duplicate key overrides): the document with a marker in
    its place parses, the marker there.  None: the document is no JSON there (it breaks off after its entries).
    Raises ValueError or RecursionError as ``json.loads`` does."""
    marker = f"\\u0000streamed entries {uuid.uuid4()}"
    try:
        doc = json.loads(f'{head}"{marker}"{tail}')
    except json.JSONDecodeError:
        return None
    return isinstance(doc, dict) and isinstance(doc.get("log"), dict) and doc["log"].get("entries") == [json.loads(f'"{marker}"')]


def _decoded(raw: memoryview) -> object:
    """One entry's bytes as an :class:`Entry`, or, where msgspec refuses them, as ``json.loads`` reads them
    (the reader then converts them with :func:`typed` and cleans their strings of lone surrogates);
    :class:`Refused` when ``json`` would not read them either."""
    try:
        return _ENTRY(raw)
    except (msgspec.DecodeError, RecursionError):
        pass  # JSON of another shape, or JSON that msgspec refuses (json may take it)
    try:
        return json.loads(bytes(raw).decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise Refused from None  # json would stop here too: the document breaks (or nests too deeply) here


def entries(stream: BinaryIO, cap: int, chunk: int):
    """``log.entries`` of a well-formed HAR, one entry at a time: an :class:`Entry`, or the value ``json.loads``
    gives for an entry msgspec refuses (:func:`_decoded`).  Holds one entry and a read buffer of at least ``chunk``
    bytes.  Raises :class:`Refused` (possibly after yielding entries) for any document it does not read
    as the ``json`` reader does."""
    buf, eof = b"", False

    def grow() -> bool:  # at least doubles what is held: one long entry costs linear time, not quadratic
        nonlocal buf, eof
        if eof:
            return False
        if len(buf) > cap:
            raise Refused  # the json reader says which limit
        got = stream.read(max(chunk, len(buf)))
        if not got:
            eof = True
            return False
        buf += got
        return True

    def ws(pos: int) -> int:  # the first non-blank at or after pos, reading on as needed (len(buf) at the end)
        while True:
            n = len(buf)
            while pos < n and buf[pos] in _BLANK:
                pos += 1
            if pos < n or not grow():
                return pos

    m = _ENTRIES_BYTES.search(buf)
    while m is None:
        if not grow():
            raise Refused
        m = _ENTRIES_BYTES.search(buf)
    head = buf[: m.end()].decode("utf-8", "replace")
    first = ENTRIES.search(head)  # the json reader's own look (its `\s` is wider than JSON's blanks)
    if first is None or first.end() != len(head) or not outside_strings(head, first.start()):
        raise Refused
    pos = ws(m.end())
    count = 0
    while True:
        if pos >= len(buf):
            raise Refused  # the document ends inside the array
        if buf[pos] == 0x5D:  # "]"
            if count:  # a comma before it: `[..., ]` is no JSON
                raise Refused
            break
        end = _entry_end(buf, pos)
        if end is None:
            if grow():
                continue  # an entry the buffer cuts
            raise Refused
        with memoryview(buf) as view:
            entry = _decoded(view[pos:end])
        yield entry
        count += 1
        pos = ws(end)
        if pos >= len(buf):
            raise Refused
        if buf[pos] == 0x5D:
            break
        if buf[pos] != 0x2C:  # ","
            raise Refused
        if pos > chunk and pos > len(buf) // 2:  # drop what was read, now and then (not per entry: a copy)
            buf, pos = buf[pos:], 0
        pos = ws(pos + 1)
    while grow():  # the rest of the document
        pass
    try:
        whole = is_log_entries(head, buf[pos:].decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        raise Refused from None
    if not whole:
        raise Refused


def _entry_end(buf: bytes, pos: int) -> int | None:
    """Where the JSON value starting at ``buf[pos]`` ends; None when the buffer may cut it (the caller reads
    on).  :class:`Refused` when msgspec finds no JSON value there (``json`` may: ``NaN``, a lone surrogate)."""
    with memoryview(buf) as view:
        try:
            _RAW(view[pos:])
        except msgspec.DecodeError as exc:
            said = str(exc)
            m = _TRAILING.fullmatch(said)
            if m is not None:  # (N counts from 1: the first character after the value and its blanks)
                end = pos + int(m.group(1)) - 1
                if not pos < end < len(buf) or buf[end] in _BLANK:
                    raise Refused from None  # (not the message's meaning this reader was written for)
                return end
            if said == "Input data was truncated":
                return None
            raise Refused from None
        except RecursionError:
            raise Refused from None
    return None  # the value runs to the end of the buffer: what follows it is not read yet
