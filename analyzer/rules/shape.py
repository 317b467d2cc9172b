"""The shape every finding rule returns, and the expressions rules share to make it.

A rule is a lazy plan (analyzer/rules/registry.py lists them; document/build.py collects them at once) whose
rows have the columns of ``FINDING_COLS``: the rule name, its severity (checked against analyzer/catalog.py),
the session, one sentence, the operational effect (the catalog's), the evidence (source + location of each
record that proves it), its place in history and its ``subject`` (what it is about in the wire's terms, for
the finding's fingerprint).
"""
from __future__ import annotations

import polars as pl

from analyzer import catalog

REF = pl.Struct({"source": pl.String, "location": pl.String})
FINDING_COLS = ["rule", "severity", "session", "session_id", "boundary", "message", "effect", "evidence", "pos", "subject"]


def subject(*parts: pl.Expr | str) -> pl.Expr:
    """What a finding is about, in the wire's own terms (event ids, calls, headers): with its rule, session id
    and time it makes the finding's fingerprint (document.fingerprint), which must not change with the wording
    of the message or the place of a record in a file.  Every rule sets one."""
    cols = [(pl.col(p) if isinstance(p, str) else p).cast(pl.String).fill_null("") for p in parts]
    return pl.concat_str(cols, separator="\x1f")


def natural_order(ids: pl.Expr) -> pl.Expr:
    """String ids in the order a reader expects: the all-digit ones by number (1, 2, 10, 11, 100, not 1, 10,
    100, 11), then the others as strings."""
    digits = ids.str.contains(r"^[0-9]+$")
    # one string key, sorted, then cut back to the id: "0" + the id's length in 5 digits + the id for all-digit ids
    # (shorter numbers first, then digit by digit), "100000" + the id for the rest.  (A multi-key sort_by of a
    # unique() inside a group_by aggregation crashed Polars 1.x at 250k events: plain sort only.)
    key = pl.concat_str([
        pl.when(digits).then(pl.lit("0") + ids.str.len_chars().cast(pl.String).str.pad_start(5, "0")).otherwise(pl.lit("100000")),
        ids,
    ])
    return key.sort().str.slice(6)


def finding_frame(df: pl.LazyFrame, rule: str, severity: str) -> pl.LazyFrame:
    """Findings of ``rule``: its severity checked against the catalog, its effect the catalog's."""
    return either(df, pl.lit(True), (rule, severity), (rule, severity))


def either(df: pl.LazyFrame, cond: pl.Expr, yes: tuple[str, str], no: tuple[str, str]) -> pl.LazyFrame:
    """Findings of one plan under two (rule, severity) pairs, row by row: ``yes`` where ``cond`` holds,
    else ``no``.  One plan, not two filters of it (Polars would run a shared plan once per filter)."""
    def pick(a, b):
        return pl.when(cond).then(pl.lit(a)).otherwise(pl.lit(b)) if a != b else pl.lit(a)

    return df.select(
        pick(yes[0], no[0]).alias("rule"),
        pick(catalog.finding_severity(*yes), catalog.finding_severity(*no)).alias("severity"),
        pl.col("session"),
        pl.col("session_id"),
        pl.lit(None, dtype=pl.String).alias("boundary"),
        pl.col("message"),
        pick(catalog.FINDING[yes[0]].effect, catalog.FINDING[no[0]].effect).alias("effect"),
        pl.col("evidence"),
        pl.col("pos"),
        pl.col("subject"),
    )


def ref(source: str = "source", location: str = "location") -> pl.Expr:
    return pl.struct(pl.col(source).alias("source"), pl.col(location).alias("location"))
