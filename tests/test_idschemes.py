"""analyzer/signals/idschemes.py: which scheme a session's ids follow, and each id's reading in it."""
from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_series_equal

from analyzer.signals import idschemes

# ids of every scheme, and the odd ones at their edges (too long, a separator alone, empty, null)
ODD = ["17", "0", "999999999999999999", "9999999999999999999", "", None, "a_1", "a_b_12", "_5", "x_", "abc",
       "YQ==:Yg==:12", "YQ:Yg:x", "a:b:3", "u_1764671400123_k3j9a0x1", "u_17646714_k", "é_3",
       "f44bb41b-1234-1234-1234-123456789abc", "K7QZC_4", "K7QZC_4_5"]


@pytest.mark.parametrize("scheme", idschemes.SCHEMES)
def test_readings_are_seq_and_prefix_of_every_id(scheme):
    """readings (each scheme's pattern over its own rows) gives what the seq and prefix expressions give."""
    ids = pl.Series("id", ODD * 2, dtype=pl.String)
    schemes = pl.Series([scheme, "integer"] * len(ODD)).cast(pl.Enum(idschemes.SCHEMES))
    want = pl.DataFrame({"id": ids, "s": schemes}).select(
        seq=idschemes.seq(pl.col("id"), pl.col("s")), sprefix=idschemes.prefix(pl.col("id"), pl.col("s")))
    seqs, prefixes = idschemes.readings(ids, schemes)
    assert_series_equal(seqs, want["seq"])
    assert_series_equal(prefixes, want["sprefix"])
    assert seqs.null_count() < len(seqs)  # (the integers of the other half are read, whatever this scheme)


def test_readings_of_no_ids():
    seqs, prefixes = idschemes.readings(pl.Series("id", [], dtype=pl.String), pl.Series([], dtype=pl.Enum(idschemes.SCHEMES)))
    assert (seqs.dtype, prefixes.dtype, len(seqs), len(prefixes)) == (pl.Int64, pl.String, 0, 0)


def _classified(sessions: dict[str, list[tuple[int, str | None]]]) -> dict[str, str]:
    rows = [(s, stream, i) for s, ids in sessions.items() for stream, i in ids]
    ev = pl.DataFrame(rows, schema={"session": pl.String, "stream": pl.Int64, "id": pl.String}, orient="row")
    ev = ev.with_columns(has_id=pl.col("id").is_not_null() & (pl.col("id") != ""))
    return dict(idschemes.classify(ev).iter_rows())


def test_classify_every_scheme_and_mixtures():
    got = _classified({
        "int": [(0, "1"), (0, "2"), (0, None)],
        "shared": [(0, "1"), (1, "2"), (0, "3")],
        "per_stream": [(0, "1"), (1, "1")],
        "csharp": [(0, "YQ==:Yg==:1"), (0, "YQ==:Yg==:2")],
        "ts": [(0, "u_1764671400123_k3j9a0x1")],
        "go": [(0, "K7QZC_4"), (0, "K7QZC_5")],
        "uuid": [(0, "f44bb41b-1234-1234-1234-123456789abc")],
        # an integer among ids of another scheme: no scheme holds both
        "int_and_go": [(0, "5"), (0, "K7QZC_5")],
        "int_and_uuid": [(0, "f44bb41b-1234-1234-1234-123456789abc"), (0, "7")],
        "go_and_uuid": [(0, "K7QZC_5"), (0, "f44bb41b-1234-1234-1234-123456789abc")],
        "too_long": [(0, "1"), (0, "9999999999999999999")],
        # an id of both the ts_stream_ms and the go form beside a go id: go holds both, ts one
        "ts_and_go": [(0, "u_1764671400123_12345"), (0, "K7QZC_5")],
        "ts_or_go": [(0, "u_1764671400123_12345")],
        "no_ids": [(0, None), (0, "")],
    })
    assert got == {"int": "integer", "shared": "integer_shared", "per_stream": "integer", "csharp": "csharp", "ts": "ts_stream_ms",
                   "go": "stream_seq", "uuid": "uuid", "int_and_go": "opaque", "int_and_uuid": "opaque", "go_and_uuid": "opaque",
                   "too_long": "opaque", "ts_and_go": "stream_seq", "ts_or_go": "ts_stream_ms"}
