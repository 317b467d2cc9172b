"""The rows of the largest join an analysis makes: a test of linear cost counts them for N and 2N (tests/test_h2.py,
tests/test_views.py), the same on every machine, where a peak of memory or a time would not be."""
from __future__ import annotations


def largest_join(path, monkeypatch, reading=None) -> tuple[int, dict]:
    """The most rows any join of the analysis of ``path`` made (an eager join's result; a lazy one's counted when
    its plan is made, over the same inputs), and the document."""
    import polars as pl

    from analyzer import pipeline

    most = [0]
    eager, lazy = pl.DataFrame.join, pl.LazyFrame.join

    def eager_join(self, *a, **kw):
        out = eager(self, *a, **kw)
        most[0] = max(most[0], out.height)
        return out

    def lazy_join(self, *a, **kw):
        out = lazy(self, *a, **kw)
        most[0] = max(most[0], out.select(pl.len()).collect().item())
        return out

    with monkeypatch.context() as m:
        m.setattr(pl.DataFrame, "join", eager_join)
        m.setattr(pl.LazyFrame, "join", lazy_join)
        got = pipeline.run([str(path)], *([reading] if reading is not None else []), columnar=True)
    return most[0], got.document
