"""``formatted``: what ``pl.format`` gives, made by ``pl.concat_str``.

Polars 2.1's own ``pl.format`` (the native ``str.format`` expression) panics after a filter in the same plan on a
frame cut into several chunks (``assertion failed: i < self.len()`` in polars-arrow's binview;
tests/test_formatted.py makes one).  A frame a plan collects is cut into about one chunk per thread of Polars'
pool: the 1M-event analysis died so with ``POLARS_MAX_THREADS=8``, as on any machine with eight cores, in
``signals/progress.py``'s doubts; with two threads its frames had fewer chunks and it ran.  ``pl.concat_str`` of
the template's pieces as literals and the arguments gives the same text for every type the analysis formats
(strings, integers, floats, booleans, times, enums, categoricals: tests/test_formatted.py), and null where an
argument is null.
"""
from __future__ import annotations

import polars as pl


def formatted(template: str, *args: pl.Expr | str) -> pl.Expr:
    """``pl.format(template, *args)``: each ``{}`` of ``template`` takes the next argument (an expression, or a
    column's name), ``{{`` and ``}}`` are braces; the result is null where an argument is null.  Another
    placeholder (``{0}``, ``{name}``) or a count of ``{}`` other than the arguments' is a ValueError, as it is
    ``pl.format``'s."""
    pieces = _pieces(template)
    if len(pieces) - 1 != len(args):
        raise ValueError(f"formatted: {len(pieces) - 1} placeholder(s) in {template!r} for {len(args)} argument(s)")
    parts: list[pl.Expr] = []
    for n, piece in enumerate(pieces):
        if piece:
            parts.append(pl.lit(piece, pl.String))
        if n < len(args):
            arg = args[n]
            parts.append(pl.col(arg) if isinstance(arg, str) else arg)
    if not parts:
        return pl.lit("", pl.String)
    return pl.concat_str(parts, ignore_nulls=False)


def _pieces(template: str) -> list[str]:
    """The literal text around each ``{}`` of ``template``, the doubled braces made single."""
    pieces, cur, i = [], [], 0
    while i < len(template):
        c = template[i]
        two = template[i:i + 2]
        if two in ("{{", "}}"):
            cur.append(c)
            i += 2
        elif two == "{}":
            pieces.append("".join(cur))
            cur = []
            i += 2
        elif c in "{}":
            raise ValueError(f"formatted: only {{}} placeholders, and {{{{ }}}} for braces: {template!r}")
        else:
            cur.append(c)
            i += 1
    pieces.append("".join(cur))
    return pieces
