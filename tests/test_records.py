"""The document's large arrays written by Polars (analyzer.document.records) are the text json.dumps writes,
and the records read from them are the dicts the list path makes."""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer import outputs, pipeline
from analyzer.document import Summary, records
from analyzer.document.records import Records
from conftest import EPOCH

SAMPLES = Path(__file__).resolve().parent.parent / "sample_logs"


def compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# Arrow strings are UTF-8: every code point but the surrogates
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=8) | st.sampled_from(
    ['"', "\\", "/", "\x00", "\x1f", "\x7f", "\u2028", "\u2029", "\n", "\r\n", "\t", "é☃𝄞", "</script>", "\ufeff"])
INT = st.integers(-(2**63), 2**63 - 1)
ROW = st.fixed_dictionaries({
    "s": st.none() | TEXT,
    "i": st.none() | INT,
    "b": st.none() | st.booleans(),
    "l": st.none() | st.lists(st.none() | INT, max_size=4),
    "ls": st.none() | st.lists(st.none() | TEXT, max_size=3),
    "st": st.none() | st.fixed_dictionaries({"x": st.none() | TEXT, "n": st.none() | INT}),
    "lst": st.lists(st.fixed_dictionaries({"k": st.none() | TEXT}), max_size=2),
})
SCHEMA = {"s": pl.String, "i": pl.Int64, "b": pl.Boolean, "l": pl.List(pl.Int64), "ls": pl.List(pl.String),
          "st": pl.Struct({"x": pl.String, "n": pl.Int64}), "lst": pl.List(pl.Struct({"k": pl.String}))}


@settings(max_examples=300, deadline=None)
@given(st.lists(ROW, max_size=6))
def test_polars_writes_what_json_dumps_writes(rows):
    frame = pl.DataFrame(rows, schema=SCHEMA)
    got = Records(frame)
    assert got.json() == compact(frame.to_dicts())
    assert got.json_bytes() == compact(frame.to_dicts()).encode("utf-8")
    assert len(got) == len(rows)
    assert got.rows() == frame.to_dicts() and got == frame.to_dicts()
    assert got.json() == compact(frame.to_dicts())  # once made, from the dicts


@settings(max_examples=150, deadline=None)
@given(st.lists(ROW, max_size=9), st.integers(1, 4))
def test_records_written_by_slices_are_the_same_text(rows, per_slice):
    """A large array is written a slice of records at a time (Polars holds the whole text of what it writes,
    twice): the bytes are the whole array's."""
    frame = pl.DataFrame(rows, schema=SCHEMA)
    whole = Records(frame).json_bytes()
    old = records.SLICE_ROWS
    records.SLICE_ROWS = per_slice
    try:
        sliced = Records(frame).json_bytes()
        planned = Records(frame.lazy(), height=frame.height)  # (a plan: each slice made as it is written)
        planned_bytes = planned.json_bytes()
    finally:
        records.SLICE_ROWS = old
    assert sliced == whole == planned_bytes == compact(frame.to_dicts()).encode("utf-8")
    assert len(planned) == len(rows) and planned.rows() == frame.to_dicts()


def test_floats_go_through_the_dicts():
    """json.dumps writes NaN and Infinity where Polars writes null: a frame with floats is written from its dicts."""
    frame = pl.DataFrame({"f": [1.5, float("nan"), float("inf"), None], "l": [[0.1], [], None, [float("-inf")]]})
    assert Records(frame).json() == compact(frame.to_dicts())
    assert "NaN" in Records(frame).json()


def test_summary_counts_records_from_their_columns():
    body_rows = {"sessions": [{}], "exchanges": [{"x": 1}, {"x": 2}], "findings": [{"severity": "error"}],
                 "boundaries": [{"verdict": "gap"}, {"verdict": "continuous"}, {"verdict": "gap"}]}
    as_records = dict(body_rows, exchanges=Records(pl.DataFrame(body_rows["exchanges"])),
                      boundaries=Records(pl.DataFrame(body_rows["boundaries"])))
    a = Summary().add_body(body_rows, []).to_dict([], 0)
    b = Summary().add_body(as_records, []).to_dict([], 0)
    assert a == b and b["verdicts"]["gap"] == 2 and b["exchanges"] == 2


def test_the_sample_logs_document_is_the_same(monkeypatch, samples_run, tmp_path):
    """`analyze`'s document (columnar) is the list path's, in both of --json's layouts and as dicts."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", EPOCH)  # the shared list-path document's
    fast = pipeline.run([str(SAMPLES)], columnar=True).document
    slow = samples_run  # pipeline.run([str(SAMPLES)]).document, analyzed once per session (tests/conftest.py)
    assert isinstance(fast["exchanges"], Records) and isinstance(fast["boundaries"], Records)
    assert len(fast["exchanges"]) == len(slow["exchanges"]) > 500 and len(fast["boundaries"]) == len(slow["boundaries"]) > 50
    for pretty in (10**9, 0):  # indented (from the dicts) and compact (by Polars)
        monkeypatch.setattr(outputs, "PRETTY_UP_TO", pretty)
        assert outputs.document_json(fast) == outputs.document_json(slow)
    assert outputs.document_json(slow) == (compact(slow) + "\n").encode("utf-8")
    # --json to a file: the compact document written as it is made, by slices of records, never held whole
    monkeypatch.setattr(records, "SLICE_ROWS", 100)
    writer = outputs._document_json_to(fast)
    assert callable(writer)
    outputs.emit(str(tmp_path / "doc.json"), writer, "findings JSON")
    assert (tmp_path / "doc.json").read_bytes() == outputs.document_json(slow)
    assert records.plain(fast) == slow


def test_large_records_are_written_in_smaller_slices(monkeypatch):
    # 2,000 records of 10 KB each: 32,768 of them a slice would make the whole text at once (and its UTF-8 copy);
    # about SLICE_BYTES of the frame a slice instead (60,000 reconnects' boundaries: bench/SCALE.md, 2026-12-05)
    rows = [{"n": i, "data": f"{i}" + "x" * 10_000} for i in range(2_000)]
    texts = []
    real = pl.DataFrame.write_json

    def counted(self, *a, **k):
        got = real(self, *a, **k)
        texts.append(self.height)
        return got

    monkeypatch.setattr(pl.DataFrame, "write_json", counted)
    buf = __import__("io").BytesIO()
    Records(pl.DataFrame(rows)).write_json(buf)
    assert buf.getvalue().decode("utf-8") == compact(rows)
    assert len(texts) == 3 and max(texts) * 10_000 <= records.SLICE_BYTES  # (on the code before: one, of 2,000)


def test_a_long_list_of_the_document_is_encoded_in_slices(monkeypatch):
    # the findings (a list of dicts): 3,000 of them encoded LIST_SLICE at a time, the same bytes as the whole list
    doc = {"findings": [{"id": f"f{i}", "message": "é\u2028" * (i % 5)} for i in range(3_000)], "n": 1}
    lengths = []
    real = records._COMPACT

    def counted(value):
        if isinstance(value, list):
            lengths.append(len(value))
        return real(value)

    monkeypatch.setattr(records, "_COMPACT", counted)
    assert records.document_json(doc) == compact(doc).encode("utf-8")
    assert lengths == [1_024, 1_024, 952]  # (on the code before: [3000])


@pytest.mark.parametrize("failing", ["MainThread", "records-json"])
def test_a_slice_that_fails_fails_the_writing(monkeypatch, failing):
    """Records.write_json makes two slices' text at a time, one in a worker: a slice that cannot be made, in this
    thread or in the worker, raises its error where the array is written (no hang, no array cut short)."""
    import threading

    monkeypatch.setattr(records, "SLICE_ROWS", 2)
    made = []

    def check(batch: pl.Series) -> pl.Series:
        made.append(threading.current_thread().name)
        if made[-1].startswith(failing):
            raise ValueError(f"a slice failed in {failing}")
        return batch

    plan = pl.DataFrame({"i": range(6)}).lazy().with_columns(pl.col("i").map_batches(check, return_dtype=pl.Int64))
    with pytest.raises(Exception, match=f"a slice failed in {failing}"):
        Records(plan, height=6).json_bytes()
    assert any(name.startswith(failing) for name in made)
