"""analyzer/formatted.py: pl.format's text, made by pl.concat_str (Polars 2.1's native pl.format panics after a filter
on a frame cut into several chunks)."""
from __future__ import annotations

import datetime as dt
import pathlib

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.formatted import formatted

ROOT = pathlib.Path(__file__).resolve().parent.parent

VALUES = pl.DataFrame({
    "s": ["a", None, "é\u2028{}", "", "x}{"],
    "i": [1, -2, None, 2**62, 0],
    "u": pl.Series([1, 2, None, 4, 5], dtype=pl.UInt32),
    "f": [1.0, 2.5, None, float("nan"), -0.0],
    "g": [1e20, 1e-7, float("inf"), 3.0, 123456789.123],
    "b": [True, False, None, True, False],
    "t": [dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc), None, dt.datetime(2026, 1, 1, 1, 2, 3, 456789, tzinfo=dt.timezone.utc),
          dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc), dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)],
    "e": pl.Series(["integer", "opaque", None, "uuid", "none"], dtype=pl.Enum(["integer", "opaque", "uuid", "none"])),
    "c": pl.Series(["x", "y", None, "x", "z"], dtype=pl.Categorical),
})


@pytest.mark.parametrize("column", VALUES.columns)
def test_the_same_text_as_pl_format_for_every_type_the_analysis_formats(column):
    for template in ("{}", "<{}>", "a {} b", "{{{}}}", "{} and {}"):
        args = [column] * template.replace("{{", "").replace("}}", "").count("{}")
        want = VALUES.select(pl.format(template, *args)).to_series()
        assert VALUES.select(formatted(template, *args)).to_series().equals(want), (template, column)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["{}", "{{", "}}", "a", " ", "é", ":"]), max_size=12),
       st.lists(st.one_of(st.none(), st.text(max_size=4)), min_size=3, max_size=3))
def test_any_template_of_placeholders_and_escaped_braces(pieces, texts):
    template = "".join(pieces)
    n = pieces.count("{}")
    df = pl.DataFrame({"x": texts}, schema={"x": pl.String})
    args = [pl.col("x")] * n
    assert df.select(formatted(template, *args)).to_series().equals(df.select(pl.format(template, *args)).to_series(), check_names=False)


def test_other_placeholders_and_wrong_counts_are_errors():
    for template, args in (("{0}", ["s"]), ("{name}", []), ("{} {}", ["s"]), ("{", []), ("a}", [])):
        with pytest.raises(ValueError):
            formatted(template, *args)


def test_after_a_filter_on_a_frame_of_many_chunks():
    """The case Polars 2.1's pl.format panics on (assertion failed: i < self.len()); formatted gives its text."""
    parts = [pl.DataFrame({"ok": [j % 3 == 0 for j in range(n)], "v": [j + 0.5 * (j % 2) for j in range(n)]},
                          schema={"ok": pl.Boolean, "v": pl.Float64}) for n in (0, 3, 200, 1, 0, 50) * 2]
    df = pl.concat(parts, rechunk=False)
    assert df.n_chunks() > 1
    got = df.lazy().filter(~pl.col("ok")).select(t=formatted("{} was {}", pl.col("v").cast(pl.String), pl.col("ok"))).collect()
    want = df.rechunk().filter(~pl.col("ok")).select(t=pl.format("{} was {}", pl.col("v").cast(pl.String), pl.col("ok")))
    assert got.equals(want) and got.height == 336


def test_the_analyzer_uses_formatted_not_pl_format():
    """So that no rule brings the panic back: pl.format appears in analyzer/formatted.py's text alone."""
    users = [str(p.relative_to(ROOT)) for p in (ROOT / "analyzer").rglob("*.py")
             if "pl.format(" in p.read_text(encoding="utf-8") and p.name != "formatted.py"]
    assert users == []
