"""Grouping by keys with millions of distinct values (one session's ids, say) without a hash table of
their strings."""
from __future__ import annotations

import polars as pl


def repeated(lf: pl.LazyFrame, keys: list[str]) -> pl.Expr:
    """A filter of the rows whose ``keys`` may occur on more than one row of ``lf``: every such row, and now and then
    one whose keys only share 32 bits of hash with another row's (the caller's exact grouping drops it).  For a rule
    about duplicates, which groups the few repeated keys with their evidence: grouping all of them first (2M
    answers, each id once) cost a hash table of every key's strings.  The hashes are found as in
    :func:`where_varies`, from ``lf`` alone (collected here, a column of 4 bytes a row, sorted)."""
    key = (pl.struct(*keys).hash() & 0xFFFFFFFF).cast(pl.UInt32)
    hashes = lf.select(key.alias("_rp_key")).collect(engine="streaming").to_series().sort()
    again = hashes.filter(hashes == hashes.shift(1)).unique()
    del hashes
    return key.is_in(again.implode())


def where_varies(lf: pl.LazyFrame, keys: list[str], value: str) -> pl.LazyFrame:
    """The rows of ``lf`` whose group of ``keys`` may hold more than one ``value``: every row of such a
    group, and now and then the rows of a group that only shares the hash of its keys with one.  The
    caller's exact grouping of these few rows drops the latter.

    A group with two values has two values under the hash of its keys too, so grouping by that one
    integer misses none.  Grouped by their strings instead, a session's 2M distinct ids cost +390 MiB
    (2M tiny events).

    Only a key seen on two rows can have two values, and most keys are seen once (a session's ids): the
    keys seen again are found by sorting the one column of hashes (a copy of it, no hash table), and only
    their rows are grouped.  Grouping every row's hash instead: ``history.digest_conflicts`` +155 MiB
    (this: +77 MiB) on 2M tiny events, and 0.41 s (this: 0.23 s) on 1M events.

    The hashes are made first, on their own (the streaming engine, a piece at a time: one column of 4 bytes
    a row, then its sorted copy), and the few keys that vary are found from them before ``lf``'s own columns
    are touched: the plan returned filters ``lf`` by them, so only those rows are ever copied.  (Holding
    ``lf`` with a 64-bit hash column for three uses, as a cached plan, cost +77 MiB on 2M tiny events; this
    +17 MiB.)"""
    # 32 bits of the hash: half the memory of the sort below.  Keys that share them (2M distinct keys:
    # some 470 pairs) only add a few rows for the caller's exact grouping to drop.
    key = (pl.struct(*keys).hash() & 0xFFFFFFFF).cast(pl.UInt32)
    v = pl.col(value)
    hashes = lf.select(key.alias("_wv_key")).collect(engine="streaming").to_series().sort()
    again = hashes.filter(hashes == hashes.shift(1)).unique()  # each key seen on two rows or more, once
    del hashes
    varied = (
        lf.select(key.alias("_wv_key"), value)
        .filter(pl.col("_wv_key").is_in(again.implode()))
        .group_by("_wv_key")
        .agg(lo=v.min(), hi=v.max(), nulls=v.null_count(), n=pl.len())
        # as n_unique counts: a null beside a value is a second value
        .filter((pl.col("lo") != pl.col("hi")) | ((pl.col("nulls") > 0) & (pl.col("nulls") < pl.col("n"))))
        .collect()
        .get_column("_wv_key")
    )
    return lf.filter(key.is_in(varied.implode()))
