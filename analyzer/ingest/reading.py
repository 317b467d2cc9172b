"""How inputs are read: one value, handed down to every reader (never a module global).

The command line makes one :class:`Reading` from its options (``--format``, ``--no-redact``, ``--port``,
the ``--max-*`` limits, ``--tls-keylog``, the terminal's progress meter) and passes it to
:func:`analyzer.pipeline.read_inputs`, which hands it to each ingester; the ingesters hand on the parts
the layers below need as plain values (a ratio to :mod:`analyzer.decode.content_coding`, ``compact`` to
:class:`analyzer.tables.Builder`).  Two reads with different options in one process -- a test, a store
ingest beside an analysis -- cannot see each other's.
"""
from __future__ import annotations

import contextlib
import gc
from dataclasses import dataclass, field

from analyzer.decode.tls_keys import KeyLog
from analyzer.limits import Limits


class Meter:
    """What a progress display is told while inputs are read (the command line draws it; tests count)."""

    def begin(self, n: int, total: int, path: str, size: int) -> None:  # input n of total, of size bytes
        pass

    def at(self, position: int) -> None:  # bytes of the current input read so far (of the file: compressed)
        pass

    def done(self, records: int) -> None:  # the current input is read: it held this many records
        pass

    def end(self, inputs: int, skipped: int, stored: int | None = None) -> None:
        """Every input read: ``inputs`` and ``skipped`` are the summary's counts of this read (the inputs with a
        row, the files passed over: :mod:`analyzer.document.facts`); ``stored``: a store's ingest, the files it
        already held (not read again)."""


@dataclass(frozen=True)
class Reading:
    """The options of a read.

    ``fmt``: ``auto`` (each file by its content), ``jsonl``, ``har`` or ``pcap``.  ``redact``: secrets
    redacted in the tables (:mod:`analyzer.redact`).  ``ports``: pcap only, the server ports analyzed
    (None: every flow that looks like MCP).  ``limits``: :class:`analyzer.limits.Limits`.  ``keys``: the
    ``--tls-keylog`` secrets (each capture reads with a copy, adding its own pcapng secrets blocks).
    ``meter``: told how far each input has been read (None: nobody asks).  ``compact``: each event's
    digest kept as its first 64 bits only, and no header objects (:class:`analyzer.tables.Builder`): for
    the single pass, whose tables go to the analysis and never to a store.  ``digest_key``: a store's secret
    (hex): the digests written into it are keyed with it (:func:`analyzer.tables.keyed_digest_expr`)."""

    fmt: str = "auto"
    redact: bool = True
    ports: frozenset[int] | None = None
    limits: Limits = Limits()
    keys: KeyLog = field(default_factory=KeyLog)
    meter: Meter | None = None
    compact: bool = False
    digest_key: str | None = None


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector paused while an input is read, then as it was.

    A read allocates millions of small objects that are not cycles (a batch's exchange tuples, the Builder's rows,
    a HAR's entries) and that live until the tables are built: the collector rescans them again and again and can
    free none (1M events' JSONL: 383 collections, 0.16 s of the read's main thread; a pcap: over a quarter of its
    run).  What a read leaves in cycles (an exception's traceback) is collected when the collector runs again."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
