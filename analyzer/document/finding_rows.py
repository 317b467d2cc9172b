"""The document's findings: the reconnect findings kept as the rule's frame, their dicts made a slice at a time.

A reconnect that loses events is a critical finding: 60,000 such reconnects are 60,000 findings, each a dict with
its evidence list of ``{source, location}`` dicts (the file name a new string in each): made at once, +140 MiB, the
analysis' peak (bench/SCALE.md).  :class:`FindingRecords` keeps them as the frame the rule made, knows their place
among the history findings (``assemble.finding_key``'s order, from the few keys it reads), and makes the dicts of
:data:`~analyzer.document.records.LIST_SLICE` findings at a time when the document is written or read by keys; a key
it holds as written (:data:`PLAIN`: rule, severity) is read from the frame and the history findings without a dict
(the summary counts severities, calls_hit chooses the findings of its rules).  Whoever reads the findings as a list
(the report, a baseline, JSON Lines, the terminal) gets every dict, made once and kept (:meth:`FindingRecords.rows`),
as with any :class:`~analyzer.document.records.Records` array.

Every finding, of a frame or a dict, is finished by the same two functions (:func:`identify`, :func:`numbered`): the
findings written from the frame are the bytes the list of dicts gives (tests/test_finding_rows.py).
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence

import polars as pl

from analyzer import catalog
from analyzer.document import records
from analyzer.document.assemble import _canonical, fingerprint, key_head, order_of
from analyzer.document.records import Records

# the keys of a finding a reader looks for first, in this order (then attempts, seen_in when present)
FINDING_FIRST = ("id", "fingerprint", "rule", "severity", "session", "session_id", "boundary", "exchange", "time", "message", "effect",
                 "what", "next_step", "evidence")


def identify(r: dict, time: str | None) -> None:
    """A finding's time (its exchange's start, given), catalog text, ``fingerprint`` (assemble.fingerprint) and the captures
    that show it (``seen_in``, when more than one does: a reconnect's views, a merged finding), in place; the rules'
    ``subject`` is used up here."""
    boundary = r["boundary"] is not None
    r["time"] = time
    r["what"] = catalog.what(r["rule"], boundary)
    r["next_step"] = catalog.next_step(r["rule"], boundary)
    r["fingerprint"] = fingerprint(r["rule"], r["session_id"], r["time"], r.pop("subject", None))
    sources = sorted({e["source"] for e in r["evidence"]})
    if len(sources) > 1:
        r["seen_in"] = sources


def numbered(r: dict, i: int, pos, key: dict, keep_pos: bool) -> dict:
    """The finding ``r`` (identified, its ``pos`` taken out) as the document's ``i``-th (0-based): its id and exchange,
    its keys in the reader's order, its session's name (``key``); ``keep_pos``: its place in history as ``_pos``."""
    r["exchange"] = f"x{pos + 1}" if pos is not None and pos >= 0 else None  # where in history: the exchange it is found at
    r["id"] = f"f{i + 1}"
    r = {k: r[k] for k in FINDING_FIRST} | r
    if keep_pos:  # analyzer.scale.partitions merges partitions by it
        r["_pos"] = pos
    r["session"] = key.get(r["session"])
    return r


# the keys of a finding that its frame row or history dict holds as the document writes them (identify and numbered
# leave them as they are): read for every finding without making its dict
PLAIN = ("rule", "severity")


class FindingRecords(Records):
    """The findings array: the reconnect findings (``recon``: the rule's frame, with ``_time``, the start of each one's
    exchange) and the history findings (``hist``: dicts, identified, their ``pos`` taken out into ``hist_pos``), in
    the document's order (``assemble.finding_key``), their dicts made :data:`records.LIST_SLICE` at a time."""

    __slots__ = ("_recon", "_hist", "_hist_pos", "_order", "_key", "_keep_pos")

    def __init__(self, recon: pl.DataFrame, hist: list[dict], hist_pos: list, key: dict, keep_pos: bool = False) -> None:
        super().__init__(pl.DataFrame())
        self._recon, self._hist, self._hist_pos, self._key, self._keep_pos = recon, hist, hist_pos, key, keep_pos
        n = recon.height
        heads = [key_head(s, r, p, m) for s, r, p, m in recon.select("severity", "rule", "pos", "message").iter_rows()]
        heads += [key_head(h["severity"], h["rule"], p, h["message"]) for h, p in zip(hist, hist_pos)]
        # (the canonical JSON that breaks ties: of the findings that tie alone, made from the frame for a reconnect's)
        self._order = order_of(heads, lambda i: _canonical(self._one(i)[0] if i < n else hist[i - n]))
        self._height = len(self._order)

    def _reconnect(self, r: dict) -> tuple[dict, int | None]:
        """A row of the reconnect findings' frame as a finding, identified; and its place in history."""
        if r["attempts"] == 1:  # the attempts are told only for a reconnect retried
            del r["attempts"], r["attempts_span"]
        pos, time = r.pop("pos"), r.pop("_time")
        identify(r, time)
        return r, pos

    def _one(self, i: int) -> tuple[dict, int | None]:
        return self._reconnect(self._recon.row(i, named=True))

    def _made(self, at: int, end: int) -> list[dict]:
        """The findings ``at`` to ``end`` (0-based, in the document's order) as the document's dicts."""
        return self._made_at(range(at, min(end, len(self._order))))

    def _made_at(self, ks: Sequence[int]) -> list[dict]:
        """The findings at the document's places ``ks`` (0-based, ascending) as the document's dicts."""
        n = self._recon.height
        idx = [self._order[k] for k in ks]
        mine = [i for i in idx if i < n]
        rows = iter(self._recon.select(pl.all().gather(mine)).to_dicts() if mine else ())
        out = []
        for k, i in zip(ks, idx):
            # (a history finding is copied: numbered() names its session, and the dicts are made again on each read)
            r, pos = self._reconnect(next(rows)) if i < n else (dict(self._hist[i - n]), self._hist_pos[i - n])
            out.append(numbered(r, k, pos, self._key, self._keep_pos))
        return out

    def _plain(self, name: str) -> list:
        """A key of :data:`PLAIN` in the document's order, read from the frame and the history findings (no dict made)."""
        values = self._recon.get_column(name).to_list() + [h[name] for h in self._hist]
        return [values[i] for i in self._order]

    def _slices(self) -> Iterator[list[dict]]:
        if self._rows is not None:
            yield self._rows
            return
        step = records.LIST_SLICE
        for at in range(0, len(self._order), step):
            yield self._made(at, at + step)

    def rows(self) -> list[dict]:
        """The findings as dicts (made once and kept; the frame is let go then)."""
        if self._rows is None:
            self._rows = [r for piece in self._slices() for r in piece]
            self._recon, self._hist, self._hist_pos = self._recon.clear(), [], []
        return self._rows

    def __len__(self) -> int:
        return len(self._rows) if self._rows is not None else self._height

    def column(self, name: str) -> list:
        """One key's values in the findings' order (None where a finding has no such key): a key of :data:`PLAIN` from
        the frame and the history findings, any other a slice of dicts at a time."""
        if self._rows is None and name in PLAIN:
            return self._plain(name)
        return [r.get(name) for piece in self._slices() for r in piece]

    def some(self, names: Sequence[str], keep: pl.Expr | None = None):
        """The findings' keys ``names`` (those each has), one finding at a time, a slice of dicts made at a time; ``keep``:
        only the findings it chooses, an expression of keys in :data:`PLAIN` (the summary and calls_hit read a few
        findings or a few keys: neither makes the dict of every finding).  Findings already made as dicts are given
        every one, as by :meth:`Records.some`."""
        if keep is not None and not set(keep.meta.root_names()) <= set(PLAIN):
            raise ValueError(f"FindingRecords.some chooses findings by {', '.join(PLAIN)} only")
        if keep is None or self._rows is not None:
            for piece in self._slices():
                for r in piece:
                    yield {k: r[k] for k in names if k in r}
            return
        chosen = pl.DataFrame({c: self._plain(c) for c in PLAIN}, schema={c: pl.String for c in PLAIN}).select(
            pl.arg_where(keep)).to_series().to_list()
        for at in range(0, len(chosen), records.LIST_SLICE):
            for r in self._made_at(chosen[at:at + records.LIST_SLICE]):
                yield {k: r[k] for k in names if k in r}

    def write_json(self, out) -> None:
        """``json.dumps(list(self), ensure_ascii=False, separators=(",", ":"))``'s UTF-8 bytes, a slice of dicts made and
        encoded at a time (the same bytes as records._write_list)."""
        out.write(b"[")
        first = True
        for piece in self._slices():
            for at in range(0, len(piece), records.LIST_SLICE):  # (dicts made already: encoded a slice at a time too)
                text = records._COMPACT(piece[at:at + records.LIST_SLICE])
                out.write((("" if first else ",") + text[1:-1]).encode("utf-8"))
                first = False
        out.write(b"]")
