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
    (2M tiny events)."""
    key = pl.struct(*keys).hash()
    v = pl.col(value)
    varied = (
        lf.select(key.alias("_k"), value)
        .group_by("_k")
        .agg(lo=v.min(), hi=v.max(), nulls=v.null_count(), n=pl.len())
        # as n_unique counts: a null beside a value is a second value
        .filter((pl.col("lo") != pl.col("hi")) | ((pl.col("nulls") > 0) & (pl.col("nulls") < pl.col("n"))))
        .select("_k")
    )
    return lf.join(varied, left_on=key, right_on="_k", how="semi", maintain_order="left")
