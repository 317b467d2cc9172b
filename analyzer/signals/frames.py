"""The analysis tables: the canonical tables as :func:`analyzer.signals.streams.build` leaves them, with
sessions, streams and positions, handed to every signal and rule as one :class:`Frames`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

# the anomalies of a TLS connection that no key decrypted (decode/tls.py): its HTTP is not in the tables
UNDECRYPTED = ("tls_no_key", "tls_not_decrypted")
HIDDEN_SCHEMA = {"source": pl.String, "packet": pl.Int64}


@dataclass(frozen=True)
class Frames:
    exchanges: pl.DataFrame  # + gx, pos, session, sk (the session as an integer: streams.session_key), stream, n_events, first_id, last_cursor, sent_retry
    events: pl.DataFrame  # + gx, pos, session, sk, stream, visible, has_id, idh, id_scheme, seq, sprefix; - xid, cursor, retry; sorted by pos, ordinal
    messages: pl.DataFrame  # + gx, pos, session, sk
    # TLS connections of a capture that no key decrypted: ``source`` and the ``packet`` its anomaly names
    # (where its encrypted HTTP began); a stream, a request or a response may lie in them, unseen
    hidden: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=HIDDEN_SCHEMA))

    def pick(self, where: pl.Expr, *columns: str | pl.Expr, among: pl.DataFrame | None = None, **named: pl.Expr) -> pl.DataFrame:
        """The events ``where`` holds, only ``columns``: filtered and narrowed in one plan, so the rows are
        copied with the few columns asked for (an eager filter first copies all two dozen of them).
        ``among``: only events whose values in its columns are one of its rows (a semi-join, in the same
        plan): the events of the few connections or streams a check looks at, not all of history."""
        plan = self.events.lazy().filter(where)
        if among is not None:
            plan = plan.join(among.lazy().unique(), on=among.columns, how="semi")
        return plan.select(*columns, **named).collect()

    def gathered(self, rows: pl.Series, *columns: str) -> list[pl.Series]:
        """The events' ``columns`` at the rows ``rows`` (their indices), each in one chunk.

        Gathered through a plan, never by ``events.get_column(c).gather(...)``: a column that holds one value for
        every row (``source`` for one input; ``session``, ``view`` on a log of one session) is kept as that value,
        and ``get_column`` makes it a whole column that then stays in the frame until the analysis ends (2M tiny
        records: +50 MiB for each of ``session``, ``view`` and ``source``)."""
        return self.events.select(pl.col(c).gather(rows) for c in columns).rechunk().get_columns()

    def lazy(self) -> Frames:
        """The same tables as LazyFrames: the finding rules build plans over them, and the document
        (document/build.py) collects all of them at once, so Polars plans the shared scans together."""
        return Frames(self.exchanges.lazy(), self.events.lazy(), self.messages.lazy(), self.hidden.lazy())  # type: ignore[arg-type]


def hidden(anomalies) -> pl.DataFrame:
    """:attr:`Frames.hidden` from the anomalies table (pyarrow or None): the undecrypted TLS connections of pcaps."""
    if anomalies is None or anomalies.num_rows == 0:
        return pl.DataFrame(schema=HIDDEN_SCHEMA)
    return (
        pl.from_arrow(anomalies.select(["source", "code", "location"]))
        .filter(pl.col("code").is_in(UNDECRYPTED))
        .select("source", packet=pl.col("location").str.extract(r"^packet ([0-9]{1,18})$", 1).cast(pl.Int64))
        .filter(pl.col("packet").is_not_null())
        .cast(HIDDEN_SCHEMA)
    )


def in_order(x: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """``x.sort(by, nulls_last=False)`` (stable), without the copy of every column when ``x`` is in that order
    already (one log whose exchanges start in their own order: 500k exchanges, 117 MiB a copy)."""
    order = x.select(pl.arg_sort_by(by, nulls_last=False, maintain_order=True)).to_series()
    if order.equals(pl.int_range(x.height, dtype=order.dtype, eager=True), check_names=False):
        return x
    return x.sort(by, nulls_last=False, maintain_order=True)
