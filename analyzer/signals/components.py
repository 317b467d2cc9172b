"""Connected components of a graph given as an edge list: every node labelled with the least node of its
component.  One algorithm for the three places that group by them: a stream (the connections linked by
resumptions, :mod:`analyzer.signals.streams`), an incident (the per-input sessions that share an exchange,
:mod:`analyzer.signals.views`) and a partition of a store (the inputs that share a session id,
:mod:`analyzer.scale.partitions`).

FastSV (Zhang, Azad, Hu: "FastSV: a distributed-memory connected component algorithm with fast
convergence", 2020), in whole-column Polars operations per round, never a loop over nodes: each node has a
parent (at first itself); every round, each end of an edge offers its grandparent to the other end, which
takes the least offer for its parent's parent (stochastic hooking: its whole tree moves) and for its own
parent (aggressive hooking), then every parent becomes the grandparent where that is less (shortcutting);
until no parent changes.  A parent is always a node of the same component and never grows, so two
components are never joined.  When a round changes nothing, every node's parent is a root and both ends of
every edge have the same one, so it is the component's least node.  A node's parent is never above its
label in plain label propagation (each node takes the least of its own and its neighbours' labels), which
settles within the graph's diameter: ``n`` rounds (the number of nodes) always suffice, and the bound never
leaves a component split.  In practice it takes a few rounds, about log2 of the longest chain.
"""
from __future__ import annotations

import polars as pl


def least_node(n: int, a: pl.Series, b: pl.Series) -> pl.Series:
    """The label of each node ``0..n-1`` (the Series' index): the least node of its component, for the
    undirected edges ``a[i] -- b[i]`` (nodes as integers; Int64)."""
    parent = pl.int_range(n, eager=True, dtype=pl.Int64)
    if n == 0 or a.len() == 0:
        return parent
    src = pl.concat([a.cast(pl.Int64), b.cast(pl.Int64)])  # each edge both ways
    dst = pl.concat([b.cast(pl.Int64), a.cast(pl.Int64)])
    for _ in range(n):
        grand = parent.gather(parent)
        # what each end of an edge offers the other: its grandparent; only an offer below the taker's own
        # grandparent can change anything (shortcutting gives it that one anyway)
        offered = grand.gather(dst)
        offer = pl.DataFrame({"v": src, "o": offered}).filter(offered < grand.gather(src))
        if offer.is_empty() and grand.equals(parent):
            break
        offer = offer.with_columns(p=parent.gather(offer.get_column("v")))
        new = parent.clone()
        for to in ("p", "v"):  # hooking: a node's parent (its whole tree), then the node itself, takes the least offer
            least = offer.group_by(to).agg(pl.col("o").min())
            at = least.get_column(to)
            new.scatter(at, pl.select(pl.min_horizontal(least.get_column("o"), new.gather(at))).to_series())
        parent = pl.select(pl.min_horizontal(new, grand)).to_series()  # shortcutting: a node's parent becomes its grandparent
    return parent


def labels(nodes: pl.Series, a: pl.Series, b: pl.Series, name: str = "label") -> pl.DataFrame:
    """``(node, name)`` for every node of ``nodes`` and of the edges ``a[i] -- b[i]``, once each (in no
    particular order): ``name`` is the least node of its component (any type that sorts: strings by their bytes)."""
    if a.is_empty():
        keys = nodes.unique()
        return pl.DataFrame([keys, keys.alias(name)])
    keys = pl.concat([nodes, a.rename(nodes.name), b.rename(nodes.name)]).unique().sort()  # node i: the i-th least
    label = least_node(keys.len(), keys.search_sorted(a), keys.search_sorted(b))
    return pl.DataFrame([keys, keys.gather(label).alias(name)])
