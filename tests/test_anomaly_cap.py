"""Anomalies are aggregated: memory grows with the kinds of damage, not with the number of bad records
(issue [2/6] item 2; the memory figures are in bench/README.md, measured by bench/memory_faults.py)."""
from __future__ import annotations

from analyzer import anomalies, pipeline


def test_log_keeps_examples_and_counts_the_rest():
    log = anomalies.AnomalyLog("x.jsonl")
    for n in range(1, 1001):
        log.add("jsonl_bad_line", f"line {n}", "not JSON")
    log.add("jsonl_bad_timestamp", "line 1001")
    rows = log.table().to_pylist()
    assert log.rejected == 1000 and log.counts == {"jsonl_bad_line": 1000, "jsonl_bad_timestamp": 1}
    bad = [r for r in rows if r["code"] == "jsonl_bad_line"]
    assert len(bad) == anomalies.EXAMPLES_PER_KIND + 1
    assert [r["location"] for r in bad[:3]] == ["line 1", "line 2", "line 3"]
    summary = bad[-1]
    assert summary["location"] == "+900 more" and "1,000 in all" in summary["message"] and "line 1000" in summary["message"]
    assert [r["code"] for r in rows].count("jsonl_bad_timestamp") == 1


def test_a_file_of_bad_lines_is_accounted_for_exactly_in_bounded_rows(tmp_path):
    p = tmp_path / "bad.jsonl"
    good = '{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c1","method":"GET","url":"http://x/mcp","headers":{"mcp-session-id":"s"}}\n'
    p.write_text(good + "x\n" * 5000 + good.replace('"c1"', '"c2"'))
    doc = pipeline.run([str(p)]).document
    (inp,) = doc["inputs"]
    assert (inp["records"], inp["rejected"]) == (5002, 5000)
    assert len(doc["exchanges"]) == 2  # the good records around the damage are read
    rows = [a for a in doc["anomalies"] if a["code"] == "jsonl_bad_line"]
    assert len(rows) == anomalies.EXAMPLES_PER_KIND + 1 and rows[-1]["location"] == "+4900 more"


def test_events_flushed_in_chunks_equal_one_chunk(tmp_path, monkeypatch):
    """Builder.flush_values keeps a long JSONL log's Python objects to one chunk: the tables are the same."""
    from analyzer.ingest import inputs
    from analyzer import tables
    import analyzer.ingest.jsonl as ij

    lines = []
    for c in range(3):
        lines.append('{"kind":"request","ts":"2026-01-01T00:00:00Z","conn":"c%d","method":"GET","url":"http://x/mcp","headers":{"mcp-session-id":"s"}}' % c)
        lines.append('{"kind":"response","ts":"2026-01-01T00:00:00Z","conn":"c%d","status":200,"headers":{"content-type":"text/event-stream"}}' % c)
    for i in range(1, 1001):
        lines.append('{"kind":"sse","ts":"2026-01-01T00:00:01Z","conn":"c%d","id":"%d","data":"{\\"n\\":%d}"}' % (i % 3, i, i))
    p = tmp_path / "many.jsonl"
    p.write_text("\n".join(lines) + "\n")
    whole = inputs.read_one(str(p))
    monkeypatch.setattr(ij, "VALUE_CHUNK", 7)
    monkeypatch.setattr(tables, "VALUE_CHUNK", 7)
    chunked = inputs.read_one(str(p))
    assert chunked.events.equals(whole.events) and chunked.messages.equals(whole.messages)
    assert whole.events.num_rows == 1000


def test_add_many_leaves_the_log_as_add_one_by_one_would():
    for before, count in ((0, 0), (0, 1), (0, 100), (0, 250), (40, 30), (40, 90), (100, 5), (130, 7)):
        one, bulk = anomalies.AnomalyLog("s"), anomalies.AnomalyLog("s")
        for log in (one, bulk):
            for i in range(before):
                log.add("jsonl_bad_line", f"line {i}")
        locs = [f"line {before + i}" for i in range(count)]
        for loc in locs:
            one.add("jsonl_bad_line", loc, "x")
        bulk.add_many("jsonl_bad_line", count, locs[: anomalies.EXAMPLES_PER_KIND], locs[-1] if locs else None, "x")
        assert bulk.table().to_pylist() == one.table().to_pylist()
        assert (bulk.rejected, bulk.counts) == (one.rejected, one.counts)


def test_occurrences_counts_what_the_capped_rows_stand_for():
    """The CLI's "nothing to judge: N TLS connection(s)" reads this: exact past the examples kept."""
    log = anomalies.AnomalyLog("x.pcap")
    for i in range(anomalies.EXAMPLES_PER_KIND + 37):
        log.add("tls_not_decrypted", f"packet {i}")
    log.add("tcp_seq_gap", "packet 1")
    rows = log.table().to_pylist()
    assert len([r for r in rows if r["code"] == "tls_not_decrypted"]) == anomalies.EXAMPLES_PER_KIND + 1
    assert anomalies.occurrences(rows, "tls_not_decrypted") == anomalies.EXAMPLES_PER_KIND + 37
    assert anomalies.occurrences(rows, "tcp_seq_gap") == 1
    assert anomalies.occurrences(rows, "tls_no_key") == 0
