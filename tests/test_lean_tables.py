"""Memory properties of the single pass that can be checked without timing (issue #40, the 2M tiny JSON-RPC lines;
bench/memory_faults.py rpc-post measures them): a log of many short exchanges holds its finished exchanges
and its messages as Arrow chunks while it is read, not as Python rows; the canonical tables are let go once
the frames exist; the frames' coded message columns are Enums."""
from __future__ import annotations

import io
import json

import polars as pl
import pytest
import pyarrow as pa

from analyzer import pipeline, tables as canonical
from analyzer.ingest import inputs, jsonl as ingest_jsonl
from analyzer.ingest.reading import Reading
from analyzer.signals import streams
from test_fuzz import rows


def _log(n: int) -> bytes:
    """A GET stream kept open across ``n`` short POST exchanges (each closed), then one left open."""
    def line(**rec) -> str:
        return json.dumps(rec, separators=(",", ":")) + "\n"
    ts = "2026-01-01T00:00:01Z"
    out = [line(kind="request", ts=ts, conn="g", method="GET", url="http://x/mcp", headers={"mcp-session-id": "s"}),
           line(kind="response", ts=ts, conn="g", status=200, headers={"content-type": "text/event-stream"})]
    for i in range(n):
        c = f"c{i}"
        out.append(line(kind="request", ts=ts, conn=c, method="POST", url="http://x/mcp", headers={"mcp-session-id": "s"},
                        body=json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"})))
        out.append(line(kind="sse", ts=ts, conn="g", id=str(i), data=json.dumps({"jsonrpc": "2.0", "method": "notifications/progress"})))
        out.append(line(kind="response", ts=ts, conn=c, status=200, headers={"content-type": "application/json"}))
        out.append(line(kind="body", ts=ts, conn=c, data=json.dumps({"jsonrpc": "2.0", "id": i, "result": {}})))
        if i % 3:  # the others end when the next request on the same connection begins (keep-alive)
            out.append(line(kind="close", ts=ts, conn=c, reason="eof", by="server"))
        else:
            out.append(line(kind="request", ts=ts, conn=c, method="POST", url="http://x/mcp", headers={"mcp-session-id": "s"},
                            body=json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled"})))
    out.append(line(kind="request", ts=ts, conn="last", method="POST", url="http://x/mcp", headers={}, body=None))
    return "".join(out).encode()


def _read(data: bytes, columns: bool = True, reading: Reading = Reading(compact=True)):
    return ingest_jsonl.read("x.jsonl", io.BytesIO(data), reading, columns=columns)


def test_finished_exchanges_and_messages_leave_python_while_the_log_is_read(monkeypatch):
    monkeypatch.setattr(canonical, "VALUE_CHUNK", 8)
    held = []
    finish = canonical.Builder.finish

    def spy(self, *args, **kwargs):
        held.append((sum(r is not None for r in self.exchanges), sum(c.num_rows for c in self._exchange_chunks),
                     len(self._sealed), len(self.messages["xid"]), sum(c.num_rows for c in self._message_chunks)))
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(canonical.Builder, "finish", spy)
    got = _read(_log(40))
    rows_held, in_chunks, waiting, messages_held, messages_in_chunks = held[0]
    # of 56 exchanges, the GET stream, the last request and the 14 keep-alive requests still open stay rows; the 40
    # that ended are Arrow chunks, but for fewer than a chunk of them waiting as tuples (the per-record reader seals
    # them in chunks of 8; the compact reading's state machine, jsonl_machine.run, makes a batch's ended ones one chunk
    # by gathers); the 94 body messages in Arrow chunks, fewer than a chunk of 8 waiting as lists (the machine's: one
    # chunk a batch); the 40 of the events come column-wise, after the read
    assert got.exchanges.num_rows == 56 and rows_held == 16 and in_chunks + waiting == 40 and waiting < 8
    assert got.messages.num_rows == 94 + 40 and messages_held < 8 and messages_in_chunks + messages_held == 94


def test_sealed_rows_give_the_same_tables(monkeypatch):
    data = _log(30)
    for reading in (Reading(compact=True), Reading()):
        monkeypatch.setattr(canonical, "VALUE_CHUNK", 4)
        sealed = [_read(data, columns, reading) for columns in (True, False)]
        monkeypatch.setattr(canonical.Builder, "seal", lambda self, row: None)  # every row a dict until finish
        monkeypatch.setattr(canonical, "VALUE_CHUNK", 65_536)
        whole = _read(data, True, reading)
        monkeypatch.undo()
        for got in sealed:
            for name in ("exchanges", "messages", "anomalies"):
                assert rows(getattr(got, name)) == rows(getattr(whole, name)), name
            assert got.events_polars().equals(whole.events_polars())


def test_renumbered_exchanges_are_the_same_sealed_or_not():
    """A reader that meets exchanges out of order renumbers them (Builder.renumber): the rows already sealed (in a
    chunk, or waiting as values to make one) take their new numbers as the rows still open do."""
    from analyzer.anomalies import AnomalyLog

    def built(seal: bool):
        b = canonical.Builder("x", AnomalyLog("x"))
        b.seal_chunk = 2
        made = [b.exchange(conn=f"c{i}", location=f"entry {i}", started=None, method="POST", url="http://x/mcp",
                           req_headers={"mcp-session-id": "s"}, request_body=json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}))
                for i in range(5)]
        if seal:
            for row in made[:3]:  # one chunk of two, one row waiting as values, two open
                b.seal(row)
            assert len(b._exchange_chunks) == 1 and len(b._sealed) == 1
        b.renumber([4, 2, 0, 3, 1])
        return b.finish("har", 5)

    sealed, open_ = built(True), built(False)
    assert rows(sealed.exchanges) == rows(open_.exchanges)
    assert sealed.exchanges.column("location").to_pylist() == ["entry 4", "entry 2", "entry 0", "entry 3", "entry 1"]
    assert rows(sealed.messages) == rows(open_.messages)

def test_the_canonical_tables_are_let_go_once_the_frames_exist():
    got = _read(_log(5))
    tables = inputs.concat([got])
    pipeline.analyze_tables(tables, [], [], [], 1, consume=True)
    assert tables["events"] is None and tables["exchanges"] is None and tables["messages"] is None
    kept = inputs.concat([_read(_log(5))])
    messages = kept["messages"]
    pipeline.analyze_tables(kept, [], [], [], 1)  # not handed over: the caller's tables stay
    assert isinstance(kept["exchanges"], pa.Table) and kept["messages"] is messages and len(messages) > 0
    # (the single pass's messages are the Builder's Polars frame, never made Arrow on the way: tables.Ingested)
    assert isinstance(messages, pl.DataFrame)


def test_the_single_pass_keeps_its_messages_polars_and_they_are_the_canonical_table():
    """The single pass's messages stay the Polars frame the Builder made (no copy into Arrow with 32-bit offsets and
    back into Polars); asked for, the Arrow table is MESSAGES, row for row the canonical reading's."""
    data = _log(5)
    lean, canonical_read = _read(data), _read(data, reading=Reading())
    assert isinstance(lean.messages_frame, pl.DataFrame) and dict(lean.messages_frame.schema) == canonical.MESSAGES_POLARS
    assert canonical.MESSAGES_POLARS == dict(pl.from_arrow(canonical.MESSAGES.empty_table()).schema)  # (written out twice)
    assert isinstance(canonical_read.messages_frame, pa.Table)
    table = lean.messages
    assert table.schema == canonical.MESSAGES and lean.messages is table  # (made once)
    assert table.num_rows > 5 and rows(table) == rows(canonical_read.messages)
    frames, _ = streams.build(inputs.concat([_read(data)]))
    assert frames.messages.height == table.num_rows


def test_the_frames_code_a_message_s_origin_direction_and_kind():
    frames, _ = streams.build(inputs.concat([_read(_log(5))]))
    m = frames.messages
    for name, values in streams.MESSAGE_CODES.items():
        assert m.schema[name] == pl.Enum(values), name
    assert set(m.get_column("kind").cast(pl.String)) == {"request", "notification", "response"}


def test_a_coded_column_is_the_cast_of_its_strings_and_a_value_outside_its_codes_fails_as_the_cast_does():
    codes = streams.MESSAGE_CODES["kind"]
    column = pa.chunked_array([pa.array(["error", None, "request"]), pa.array(["notification", "response", None, "error"])])
    got = streams._coded(column, codes)
    assert got.dtype == pl.Enum(codes) and got.to_list() == ["error", None, "request", "notification", "response", None, "error"]
    assert got.equals(pl.from_arrow(column).cast(pl.Enum(codes)), check_names=False)
    with pytest.raises(pl.exceptions.InvalidOperationError):  # ("bogus" is no kind: never a null in its place)
        streams._coded(pa.chunked_array([pa.array(["request", "bogus"])]), codes)
    for other in (pa.chunked_array([pa.array(["error", None], pa.large_string())]), pa.chunked_array([], pa.string()),
                  pa.chunked_array([pa.array([None], pa.null())])):  # (other string types, none, all null)
        assert streams._coded(other, codes).equals(pl.from_arrow(other).cast(pl.Enum(codes)), check_names=False), other.type


# ---------------------------------------------------------------------------- the facts about reconnects read their sessions
# Issue #40's 2M tiny JSON-RPC lines peaked at 4.3x their size, then 5.6x once the reconnect facts of issue #41 came:
# the cross-stream check grouped every request of history by its id with its record (a log whose answers are JSON
# bodies has no answer on a stream to check), the resumed call's answer grouped every answer of history by its id,
# and every session's client was told twice more by reading every request body.  Counted, not timed.


def _calls_and_one_reconnect(n: int) -> bytes:
    """Session "a": ``n`` POST calls, each answered by a JSON body on its own connection; session "b": a GET stream
    cut after event 1 and resumed from it (one reconnect)."""
    def line(**rec) -> str:
        return json.dumps(rec, separators=(",", ":")) + "\n"
    ts = "2026-01-01T00:00:01Z"
    out = []
    for i in range(n):
        c = f"c{i}"
        out += [line(kind="request", ts=ts, conn=c, method="POST", url="http://x/mcp", headers={"mcp-session-id": "a"},
                     body=json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"})),
                line(kind="response", ts=ts, conn=c, status=200, headers={"content-type": "application/json"}),
                line(kind="body", ts=ts, conn=c, data=json.dumps({"jsonrpc": "2.0", "id": i, "result": {}})),
                line(kind="close", ts=ts, conn=c, reason="eof", by="server")]
    for conn, last, eid in (("g1", None, "1"), ("g2", "1", "2")):
        headers = {"mcp-session-id": "b", **({"last-event-id": last} if last else {})}
        out += [line(kind="request", ts=ts, conn=conn, method="GET", url="http://x/mcp", headers=headers),
                line(kind="response", ts=ts, conn=conn, status=200, headers={"content-type": "text/event-stream"}),
                line(kind="sse", ts=ts, conn=conn, id=eid, data="{}"),
                line(kind="close", ts=ts, conn=conn, reason="reset", by="client")]
    return "".join(out).encode()


def test_the_cross_stream_check_reads_only_the_calls_of_ids_answered_on_a_stream(monkeypatch):
    from analyzer.rules import calls

    frames, _ = streams.build(inputs.concat([_read(_calls_and_one_reconnect(50))]))
    seen = []
    real = calls.sent_elsewhere

    def spy(requests, responses, *cols):
        seen.append((requests.select(pl.len()).collect().item(), responses.select(pl.len()).collect().item()))
        return real(requests, responses, *cols)

    monkeypatch.setattr(calls, "sent_elsewhere", spy)
    assert calls.findings(frames.lazy()).collect().height == 0
    assert seen == [(0, 0)]  # (the code before: the 50 calls, for no answer on a stream)


def test_the_reconnect_facts_tell_the_client_of_the_reconnects_sessions_alone_once(monkeypatch):
    from analyzer.rules import verdicts
    from analyzer.signals import clients, eras

    frames, links = streams.build(inputs.concat([_read(_calls_and_one_reconnect(50))]))
    told = []
    real = clients.sessions

    def spy(f, *args, **kwargs):
        out = real(f, *args, **kwargs)
        told.append(out.height)
        return out

    monkeypatch.setattr(clients, "sessions", spy)
    b = verdicts.judge(frames, links, eras.revisions(frames))
    assert b.height == 1 and told == [1]  # (the code before: [2, 2], both sessions, for each of two facts)


def test_the_resumed_call_s_answers_are_looked_for_in_the_reconnects_sessions_alone(monkeypatch):
    """rpc.wrong_results groups the answers by id (each id's first answer) only in the sessions with a reconnect: not
    the 50 answers of session "a"."""
    from analyzer.signals import boundaries, rpc

    frames, links = streams.build(inputs.concat([_read(_calls_and_one_reconnect(50))]))
    grouped = []
    real = pl.LazyFrame.group_by

    def spy(self, *by, **kwargs):
        names = [b.meta.output_name() if isinstance(b, pl.Expr) else b for b in by]
        if "v_id" in names:
            grouped.append(self.select(pl.len()).collect().item())
        return real(self, *by, **kwargs)

    b = boundaries.boundaries(frames, links)
    monkeypatch.setattr(pl.LazyFrame, "group_by", spy)
    rpc.wrong_results(frames, b, boundaries.foreign_deliveries(frames, b))
    assert grouped == [0]  # (the code before: [50], every answer of history)


# ---------------------------------------------------------------------------- many HTTP/2 streams (issue [2/5] item 5)
# bench/many_streams.py --h2 sse 60000 peaked at 1,174 MiB (bound: 821): the captured exchanges' rows were all dicts
# until the read's end, and the document's calls_hit made every reconnect's record a dict (then --json wrote the
# whole text from those dicts).  Counted, not timed.


def test_a_capture_s_exchanges_leave_python_as_their_rows_are_made(monkeypatch):
    from analyzer.ingest import pcap

    monkeypatch.setattr(canonical, "SEAL_CHUNK", 4, raising=False)
    held = []
    finish = canonical.Builder.finish

    def spy(self, *args, **kwargs):
        held.append((sum(r is not None for r in self.exchanges), len(self._exchange_chunks)))
        return finish(self, *args, **kwargs)

    monkeypatch.setattr(canonical.Builder, "finish", spy)
    with open("sample_logs/real-python-resume-dense.pcap", "rb") as f:
        got = pcap.read("x.pcap", f, Reading(compact=True))
    n = got.exchanges.num_rows
    rows_held, chunks = held[0]
    assert n >= 8 and rows_held == 0 and chunks == n // 4  # (the code before: every row a dict, no chunk)
    monkeypatch.undo()
    with open("sample_logs/real-python-resume-dense.pcap", "rb") as f:
        assert rows(pcap.read("x.pcap", f, Reading(compact=True)).exchanges) == rows(got.exchanges)


def test_calls_hit_reads_the_boundaries_without_making_their_records(tmp_path):
    from analyzer.document.records import Records

    path = tmp_path / "x.jsonl"
    path.write_bytes(_calls_and_one_reconnect(3))
    doc = pipeline.run([str(path)], Reading(), columnar=True).document
    assert isinstance(doc["boundaries"], Records) and len(doc["boundaries"]) == 1
    assert doc["boundaries"]._rows is None  # (the code before: calls_hit.of made every boundary's dict, kept)
    assert doc["calls_hit"] == []
