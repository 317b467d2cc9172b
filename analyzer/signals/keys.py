"""Grouping by keys with millions of distinct values (one session's ids, say) without a hash table of
their strings."""
from __future__ import annotations

import polars as pl


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
    (this: +77 MiB) on 2M tiny events, and 0.41 s (this: 0.23 s) on 1M events."""
    v = pl.col(value)
    lf = lf.with_columns(pl.struct(*keys).hash().alias("_wv_key")).cache()  # the hash once, for the three uses below
    k = pl.col("_wv_key").sort()
    again = lf.select(k.filter(k == k.shift(1))).unique()  # each key seen on two rows or more, once
    varied = (
        lf.select("_wv_key", value)
        .join(again, on="_wv_key", how="semi")
        .group_by("_wv_key")
        .agg(lo=v.min(), hi=v.max(), nulls=v.null_count(), n=pl.len())
        # as n_unique counts: a null beside a value is a second value
        .filter((pl.col("lo") != pl.col("hi")) | ((pl.col("nulls") > 0) & (pl.col("nulls") < pl.col("n"))))
        .select("_wv_key")
    )
    return lf.join(varied, on="_wv_key", how="semi", maintain_order="left").drop("_wv_key")
