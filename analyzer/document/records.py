"""A document array kept as the Polars frame it was made from, and written as JSON by Polars.

The findings document is JSON values, but its two large arrays -- ``exchanges`` (one record per HTTP
exchange, with every event's offset) and ``boundaries`` (one per reconnect, with its evidence) -- are
made as frames.  Turned into Python dicts (``to_dicts``, 1.9 s) and then into text (``json.dumps``, 1.2 s), a
million-event capture's 87 MB of them cost 3 s in Python.  :class:`Records` keeps the frame: the
compact JSON of an archive run is written from it by Polars' JSON writer (0.2 s; the same bytes as
``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``: tests/test_records.py), and the dicts
are made only when someone reads the records (the report, JSON Lines, a test), once.
"""
from __future__ import annotations

import io
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import polars as pl

_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
SLICE_ROWS = 32_768  # records Polars writes as JSON at a time (Records.write_json)
SLICE_BYTES = 8 * 2**20  # ... or fewer: about this much of a frame's memory a slice (Records._slice_rows)


class Records(Sequence):
    """The records of one document array: a frame whose rows are the records, its columns their keys in order.

    The frame may be given as a lazy plan with its number of rows (``height``): it is then made only when someone
    reads it whole (:attr:`frame`, the dicts), and :meth:`write_json` writes it a slice at a time, each slice made
    from the plan as it is written -- the records are never all held (500k exchange records: 216 MiB, made while the
    rules ran, was the analysis' peak)."""

    __slots__ = ("_frame", "_plan", "_height", "_rows")

    def __init__(self, frame: pl.DataFrame | pl.LazyFrame, height: int | None = None) -> None:
        if isinstance(frame, pl.LazyFrame):
            self._frame, self._plan, self._height = None, frame, height
        else:
            self._frame, self._plan, self._height = frame, None, frame.height
        self._rows: list[dict] | None = None

    @property
    def frame(self) -> pl.DataFrame:
        """The records' frame (a plan is made now, once)."""
        if self._frame is None:
            self._frame, self._plan = self._plan.collect(), None
        return self._frame

    @frame.setter
    def frame(self, frame: pl.DataFrame) -> None:
        self._frame, self._plan = frame, None

    def rows(self) -> list[dict]:
        """The records as dicts (made once; the frame is let go then)."""
        if self._rows is None:
            self._rows = self.frame.to_dicts()
            self.frame = self.frame.clear()  # the schema stays: column() still answers
        return self._rows

    def __len__(self) -> int:
        if self._rows is not None:
            return len(self._rows)
        return self._height if self._frame is None and self._height is not None else self.frame.height

    def __getitem__(self, i):
        return self.rows()[i]

    def __iter__(self):
        return iter(self.rows())

    def __eq__(self, other) -> bool:
        if isinstance(other, Records):
            other = other.rows()
        return isinstance(other, list) and self.rows() == other

    __hash__ = None  # a mutable sequence, as a list is

    def __repr__(self) -> str:
        return f"Records({len(self)} rows)"

    def column(self, name: str) -> list:
        """One key's values in record order (without making the dicts)."""
        if self._rows is not None:
            return [r[name] for r in self._rows]
        return self.frame.get_column(name).to_list()

    def some(self, names: Sequence[str], keep: pl.Expr | None = None):
        """The records' keys ``names`` alone (those the records have), as dicts, for the records ``keep`` (a Polars
        expression over them) chooses, one at a time: neither every record's dict nor every column of it is made,
        and nothing is kept (60,000 reconnects' records as dicts for the few keys calls_hit reads: +300 MiB, then
        the whole JSON text made from them).  Records already made as dicts are given whole, every one."""
        if self._rows is not None:
            yield from self._rows
            return
        plan = self._frame.lazy() if self._frame is not None else self._plan
        have = plan.collect_schema().names()
        if keep is not None and set(keep.meta.root_names()) <= set(have):  # (records without those keys: all of them)
            plan = plan.filter(keep)
        yield from plan.select([n for n in names if n in have]).collect().iter_rows(named=True)

    def json(self) -> str:
        """The records as a compact JSON array: ``json.dumps(list(self), ensure_ascii=False, separators=(",", ":"))``."""
        return self.json_bytes().decode("utf-8")

    def json_bytes(self) -> bytes:
        """:meth:`json` in UTF-8."""
        buf = io.BytesIO()
        self.write_json(buf)
        return buf.getvalue()

    def write_json(self, out) -> None:
        """:meth:`json`'s UTF-8 bytes to a binary file object (Polars' row-array writer), a slice of
        :data:`SLICE_ROWS` records at a time: Polars makes the whole text of what it writes in memory first,
        and then a copy of it for a Python file object (500k records of 270 bytes: +382 MiB for 136 MiB of
        JSON; by slices, +79 MiB).  The same bytes: the slices' arrays joined into one."""
        if self._rows is not None or not _polars_writes_it(self._frame.schema if self._frame is not None else self._plan.collect_schema()):
            out.write(_COMPACT(self.rows()).encode("utf-8"))
            return
        whole = self._frame if self._frame is not None else self._plan
        height = len(self)
        step = self._slice_rows()
        if self._frame is not None and height <= step:
            whole.write_json(out)
            return

        def text(at: int) -> bytes:
            piece = whole.slice(at, step)
            return (piece if self._frame is not None else piece.collect()).write_json().encode("utf-8")

        # Polars makes a slice's text without the GIL: the slices are made two at a time, one in this thread and the
        # next in a worker (1M events: the boundaries' 54 MB 0.30-0.32 -> 0.22-0.26 s), and written in order; two
        # slices' texts at most are held
        starts = range(0, height, step)
        out.write(b"[")
        with ThreadPoolExecutor(1, thread_name_prefix="records-json") as pool:
            ahead = None
            for n, at in enumerate(starts):
                if ahead is None:
                    following = pool.submit(text, starts[n + 1]) if n + 1 < len(starts) else None
                    done = text(at)
                    ahead = following
                else:
                    done, ahead = ahead.result(), None
                out.write(b"," if at else b"")
                out.write(memoryview(done)[1:-1])  # (the slice's records, without its brackets)
                del done
        out.write(b"]")


    def _slice_rows(self) -> int:
        """The records written at a time: :data:`SLICE_ROWS`, fewer when a frame's records are large (about
        :data:`SLICE_BYTES` of the frame a slice): a boundary with its event previews is ten times an exchange, and
        32,768 of them were 80 MB of text, held with its UTF-8 copy (60,000 reconnects: +146 MiB, bench/SCALE.md)."""
        if self._frame is None or not self._frame.height:
            return SLICE_ROWS
        per = max(1, self._frame.estimated_size() // self._frame.height)
        return max(256, min(SLICE_ROWS, SLICE_BYTES // per))


def _floats(dtype) -> bool:
    if dtype.is_float():
        return True
    if isinstance(dtype, (pl.List, pl.Array)):
        return _floats(dtype.inner)
    if isinstance(dtype, pl.Struct):
        return any(_floats(f.dtype) for f in dtype.fields)
    return False


def _polars_writes_it(schema: pl.Schema) -> bool:
    """Does Polars' JSON writer give json.dumps' text for this frame?  It does for strings (the same escapes),
    integers, booleans, nulls, lists and structs, and for finite floats; json.dumps writes NaN and Infinity
    where Polars writes null, so a frame with a float column goes through the dicts.  A key is never
    escaped by json.dumps' rules here: column names are the document's own, plain ASCII."""
    return not any(_floats(t) for t in schema.values()) and all(
        name.isascii() and name.isidentifier() for name in schema.names())


def document_json(doc: dict, end: bytes = b"") -> bytes:
    """``json.dumps(doc, ensure_ascii=False, separators=(",", ":"))`` in UTF-8 followed by ``end``, its
    :class:`Records` arrays written by Polars into the one buffer (87 MB of them at 1M events: every copy of
    the text is a tenth of a second)."""
    buf = io.BytesIO()
    write_document_json(doc, buf, end)
    return buf.getvalue()


def write_document_json(doc: dict, out, end: bytes = b"") -> None:
    """:func:`document_json`'s bytes to the binary file object ``out``, as they are made (the document's text is
    never held whole: 500k exchanges are 232 MiB of it)."""
    out.write(b"{")
    for n, (key, value) in enumerate(doc.items()):
        out.write((("," if n else "") + _COMPACT(key) + ":").encode("utf-8"))
        if isinstance(value, Records):
            value.write_json(out)
        elif isinstance(value, list) and len(value) > LIST_SLICE:
            _write_list(value, out)
        else:
            out.write(_COMPACT(value).encode("utf-8"))
    out.write(b"}" + end)


LIST_SLICE = 1_024  # records of a list (the findings) encoded at a time by write_document_json


def _write_list(value: list, out) -> None:
    """``_COMPACT(value)``'s UTF-8 bytes, :data:`LIST_SLICE` records at a time: the text of 60,000 reconnect findings
    is never one string and its bytes beside it (bench/SCALE.md).  The same bytes: the slices' arrays joined into one."""
    out.write(b"[")
    for at in range(0, len(value), LIST_SLICE):
        text = _COMPACT(value[at:at + LIST_SLICE])
        out.write((("," if at else "") + text[1:-1]).encode("utf-8"))
    out.write(b"]")


def plain(doc: dict) -> dict:
    """The document with every :class:`Records` array as a list of dicts (for json.dumps with other options)."""
    return {k: (v.rows() if isinstance(v, Records) else v) for k, v in doc.items()}
