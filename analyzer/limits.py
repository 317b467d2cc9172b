"""Resource limits for hostile or broken inputs: documented options with safe defaults.

A :class:`Limits` value is part of each read's options (:attr:`analyzer.ingest.reading.Reading.limits`),
handed down to the readers; nothing here is global state.

One pathological input must neither exhaust memory nor hang the run, and never cost the other
inputs.  Each limit is an option of ``analyze`` and ``ingest`` (see ``--help``); when one is hit the
input's anomaly rows say which, where, and which option raises it:

* ``line_bytes`` (``--max-line-mb``, 64): a JSONL line longer than this is rejected unread (skipped in
  1 MiB steps, never held whole): one record, one ``jsonl_line_too_long`` row.
* ``document_bytes`` (``--max-har-mb``, 2048): a well-formed HAR is streamed entry by entry, so this
  bounds what is held whole: one entry, or the document around the entries.  A HAR that breaks off
  after a whole entry (cut short, or invalid JSON there) is streamed up to the break too, and the rest
  of the file after its last whole entry is held.  One that breaks before its first entry, nests an
  entry too deeply or has its entries elsewhere than at ``log.entries`` is parsed whole (about ten
  times its size in memory), so it is refused past this size.  Refusals name the option; the other
  inputs go on.
* ``gunzip_ratio`` (``--max-gunzip-ratio``, 200): a ``.gz`` stops decompressing once it has produced
  more than this many times its compressed size (and at least ``GUNZIP_FLOOR``): a decompression bomb
  reads as an input cut at that point, with an ``input_unreadable`` row naming the limit.  Real logs
  compress 5-30x.  The same ratio bounds every HTTP body decoded from its Content-Encoding
  (``analyzer.decode.content_coding``: gzip, deflate, br, zstd), with a floor of ``BODY_FLOOR`` per body:
  decoding stops there (the work, not only the memory) with a ``body_decoded_over_limit`` row.

Counts are never limited: a million tiny SSE events in one connection are a million rows, read in
one linear pass (``tests/test_limits.py``).  A JSONL log is held at most three batches at a time (at
most ``jsonl.BATCH_LINES`` lines and about ``jsonl.BATCH_BYTES`` each, or one line of ``line_bytes``):
the next ones are read and decoded column-wise in a worker thread while this one is read line by line.
"""
from __future__ import annotations

from dataclasses import dataclass

GUNZIP_FLOOR = 256 << 20  # below this, any ratio is fine (tiny files of repetitive JSON)
# per HTTP body: a capture holds many bodies, so the floor is lower than a whole file's; an event
# stream of pings compresses far better than 200x, but 8 MiB of them is weeks of heartbeats
BODY_FLOOR = 8 << 20


@dataclass(frozen=True)
class Limits:
    line_bytes: int = 64 << 20
    document_bytes: int = 2048 << 20
    gunzip_ratio: int = 200
