"""pcap / pcapng ingester: packets -> TCP flows -> the MCP conversations -> canonical tables.

One job: drive a capture through its steps and keep what is MCP.  The steps, each its own module:
:mod:`analyzer.decode.capture` (container), :mod:`analyzer.decode.tcp` (link/IP/TCP decoding,
reassembly), then per TCP flow :mod:`analyzer.ingest.pcap_tls` (TLS followed, plaintext handed on),
:mod:`analyzer.ingest.pcap_http` (HTTP/1.1 and HTTP/2 exchanges), :mod:`analyzer.ingest.pcap_body`
(Content-Encoding, SSE bodies with their packets), and for the whole capture
:mod:`analyzer.ingest.pcap_events` (SSE events parsed column-wise, each with the packet that
completed it).  This module joins them and maps the result onto the same rows the HAR and JSONL
ingesters make: one exchange row per HTTP request (``location``: the packet of its first byte),
the events table, the anomalies (per-packet kinds capped at :data:`PER_PACKET_ROWS` rows), and notes
counting what was not analyzed.

Which flows become exchanges is decided by content, not by port: a flow is MCP when any of its
messages carries ``Mcp-Session-Id``, a ``text/event-stream`` response or a JSON-RPC body -- or, with
``ports``, exactly the flows whose server port is listed.  Other HTTP flows are counted in a note;
their bodies are freed as soon as the connection is over.
"""
from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import BinaryIO

from analyzer.ingest.reading import Reading, collector_paused
from analyzer.limits import Limits
from analyzer.anomalies import CATALOG, AnomalyLog
from analyzer.decode import tcp, tls
from analyzer.decode.capture import CaptureReader
from analyzer.ingest import pcap_events
from analyzer.ingest.pcap_body import MAX_BODY, Exchange, Run
from analyzer.ingest.pcap_events import MAX_NS, MIN_NS
from analyzer.ingest.pcap_tls import Conversation
from analyzer import tables
from analyzer.tables import SSE_MEDIA, Builder, Ingested, media_type

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
PER_PACKET_ROWS = 100  # per-packet anomaly codes: rows for the first 100, then one summary row
_PER_PACKET = ("pcap_snaplen_truncated", "packet_malformed", "ip_fragment", "pcap_bad_timestamp")
_LIMIT_KEYS = {"snaplen_gap": "tcp_seq_gap"}
# bench/pcap_ingest.py times these two stages by patching them here (``ingest_pcap._Parsing.results``,
# ``ingest_pcap._events``): the names stay, and _build calls _events through this module
_Parsing, _events = pcap_events.Parsing, pcap_events.events


class _Ingest:
    """The capture's state while its packets are read: which flows are followed, the finished MCP
    conversations, the counts and per-packet anomaly rows, the TLS keys."""

    def __init__(self, source: str, log: AnomalyLog, ports: frozenset[int] | None, keys: tls.KeyLog | None = None,
                 ratio: int = Limits.gunzip_ratio) -> None:
        self.source = source
        self.log = log
        self.ports = ports
        self.ratio = ratio  # --max-gunzip-ratio: each body's Content-Encoding is undone within it (pcap_body)
        self.last_ts: int | None = None
        self.mcp: list[Conversation] = []  # finished connections whose exchanges become rows
        self.not_http: list[Conversation] = []  # decided at the end: error on an HTTP endpoint, else a note
        self.http_servers: set[tuple[bytes, int]] = set()
        self.other_flows = self.other_requests = 0
        self.counts = {"non_ip": 0, "non_tcp": 0, "other_ports": 0}
        self.upgraded = 0
        self.per_packet: dict[str, int] = {}
        self.unsupported: dict[int, list[int]] = {}  # link type -> [first packet, count]
        self.parsing = _Parsing()
        self.keys = keys if keys is not None else tls.KeyLog()
        self.tls_kinds: dict[tuple[str, str, str], int] = {}  # (version, suite, ALPN) -> connections decrypted

    def on_flow(self, flow: tcp.Flow) -> Conversation | None:
        if self.ports and flow.ports[0] not in self.ports and flow.ports[1] not in self.ports:
            self.counts["other_ports"] += 1
            return None
        return Conversation(self, flow)

    def conversation_done(self, conv: Conversation) -> None:
        """A connection is over: keep it if it is MCP, else only count it (its bodies are freed now)."""
        if conv.http and conv.client is not None:
            self.http_servers.add(conv.server)
        if conv.not_http is not None:
            self.not_http.append(conv)
        if not conv.exchanges:
            return
        if _is_mcp(conv, self.ports):
            self.mcp.append(conv)
            self.parsing.add(run for ex in conv.exchanges for run in ex.runs)
        else:
            self.other_flows += 1
            self.other_requests += len(conv.exchanges)
            conv.exchanges = []

    def secrets(self, kind: int, data: bytes, where: str) -> None:
        """A pcapng Decryption Secrets Block (``editcap --inject-secrets``): TLS key log text joins the keys."""
        if kind != tls.DSB_TLS_KEY_LOG:
            self.log.add("tls_keylog_invalid", where, f"a Decryption Secrets Block of type 0x{kind:08x}, not a TLS key log: not used")
            return
        before = self.keys.malformed
        self.keys.add_text(data)
        if self.keys.malformed > before:
            self.log.add("tls_keylog_invalid", where, f"{self.keys.malformed - before} line(s) of its TLS key log are not "
                         "'LABEL CLIENT_RANDOM SECRET' in hex: skipped")

    def note(self, code: str, where: str, detail: str = "", key: str | None = None) -> None:
        """Anomalies that can occur once per packet: the first rows, then one summary row per code (or ``key``)."""
        if code in _PER_PACKET or key:
            key = key or code
            n = self.per_packet.get(key, 0) + 1
            self.per_packet[key] = n
            if n > PER_PACKET_ROWS:
                if CATALOG[code].rejects:
                    self.log.rejected += 1
                return
        self.log.add(code, where, detail)

    def summaries(self) -> None:
        for key, n in self.per_packet.items():
            code = _LIMIT_KEYS.get(key, key)
            if n > PER_PACKET_ROWS:
                more = n - PER_PACKET_ROWS
                self.log.add_summary(code, "file", f"{more} more packet(s) like the rows above (rows are kept for the first {PER_PACKET_ROWS})")
        for lt, (first, n) in sorted(self.unsupported.items()):
            self.log.add("pcap_unsupported_linktype", f"packet {first}", f"{n} packet(s) on link type {lt}")
            self.log.rejected += n - 1


def _is_mcp(conv: Conversation, ports: frozenset[int] | None) -> bool:
    """The connection carried MCP: an ``Mcp-Session-Id``, an event stream or a JSON-RPC body in any of its
    exchanges (with ``ports``, every connection on them is)."""
    if ports:
        return True
    for ex in conv.exchanges:
        h = ex.req.headers
        if "mcp-session-id" in h or any(b'"jsonrpc"' in p for p in ex.req_body):
            return True
        if ex.resp is not None:
            if "mcp-session-id" in ex.resp.headers or ex.sse is not None or media_type(ex.resp.headers.get("content-type")) == SSE_MEDIA:
                return True
            if any(b'"jsonrpc"' in p for p in ex.body):
                return True
    return False


def _dt(ns: int | None) -> datetime | None:
    if ns is None or not MIN_NS <= ns <= MAX_NS:
        return None
    return EPOCH + timedelta(microseconds=ns // 1000)


def read(source: str, stream: BinaryIO, reading: Reading = Reading()) -> Ingested:
    # (its segments, events and rows: see collector_paused; here the collector took over a quarter of the run time
    # on a 100 MB capture)
    with collector_paused():
        return _read(source, stream, reading)


def _read(source: str, stream: BinaryIO, reading: Reading) -> Ingested:
    log = AnomalyLog(source)
    # the --tls-keylog files (reading.keys), plus this capture's own Decryption Secrets Blocks (copied:
    # one capture's secrets are not another's)
    ing = _Ingest(source, log, reading.ports, reading.keys.copy(), reading.limits.gunzip_ratio)
    try:
        return _packets(source, stream, reading, log, ing)
    finally:
        ing.parsing.close()


def _packets(source: str, stream: BinaryIO, reading: Reading, log: AnomalyLog, ing: "_Ingest") -> Ingested:
    reader = CaptureReader(source, stream, ing.note, ing.secrets)
    reasm = tcp.Reassembler(ing.on_flow, ing.note)
    decode, segment = tcp.decode, reasm.segment
    counts = ing.counts
    last_ts = None
    for pkt, ts, linktype, data, wirelen in reader.packets():
        last_ts = ts if ts is not None else last_ts
        seg = decode(linktype, data, wirelen)
        if type(seg) is tuple:
            if seg[8]:
                detail = f"{len(data)} of {wirelen} bytes captured; {seg[8]} TCP payload bytes missing, treated as a gap"
                ing.note("pcap_snaplen_truncated", f"packet {pkt}", detail)
            ing.last_ts = last_ts
            segment(seg, ts, pkt)
        elif type(seg) is str:
            if wirelen > len(data) and "cut short" in seg:
                ing.note("packet_malformed", f"packet {pkt}", f"{seg} (the capture kept {len(data)} of {wirelen} bytes)")
            else:
                ing.note("packet_malformed", f"packet {pkt}", seg)
        elif seg == tcp.NOT_TCP:
            counts["non_tcp"] += 1
        elif seg == tcp.NOT_IP:
            counts["non_ip"] += 1
        elif seg == tcp.FRAGMENT:
            ing.note("ip_fragment", f"packet {pkt}", "IP fragments are not reassembled; the TCP bytes it carries become a gap")
        else:  # UNSUPPORTED_LINK
            got = ing.unsupported.setdefault(linktype, [pkt, 0])
            got[1] += 1
    ing.last_ts = last_ts
    reasm.finish(last_ts)
    ing.summaries()
    return _build(source, log, ing, reader, reading)


def _build(source: str, log: AnomalyLog, ing: _Ingest, reader: CaptureReader, reading: Reading) -> Ingested:
    b = Builder(source, log, reading.redact, reading.compact, reading.digest_key)
    b.seal_chunk = min(tables.SEAL_CHUNK, tables.VALUE_CHUNK)  # (every row is sealed at once below: a smaller chunk holds fewer dicts)
    not_http = 0
    for conv in ing.not_http:
        # Garbage towards an endpoint that spoke HTTP in other connections (or a selected port) is an
        # error; another protocol on another endpoint (SSH, a database) is only counted.
        if ing.ports or conv.server in ing.http_servers:
            pkt, detail = conv.not_http  # type: ignore[misc]
            log.add("http_parse_error", f"packet {pkt}" if pkt is not None else "file", f"{detail}; the connection is not parsed further")
        else:
            not_http += 1
    mcp: list[Exchange | None] = [ex for conv in ing.mcp for ex in conv.exchanges]
    for conv in ing.mcp:  # the list above holds them now: each is let go once its row is made
        conv.exchanges, conv.streams = [], {}
    mcp.sort(key=lambda ex: (ex.req.pkt, ex.conv.flow.first_pkt, ex.index))  # type: ignore[union-attr]
    runs: list[tuple[int, str, Run]] = []
    for i, ex in enumerate(mcp):
        mcp[i] = None
        row = _emit(b, ex, ing.note)  # type: ignore[arg-type]
        b.seal(row)  # complete: it leaves the Python rows (an Arrow chunk every few thousand)
        runs.extend((row["xid"], ex.conn, run) for run in ex.runs if run.size)  # type: ignore[union-attr]
    ex = None  # (the last one too)
    _events(b, runs, ing.parsing.results(), ing.note)
    notes = []
    if ing.other_flows:
        notes.append(
            f"{ing.other_flows} HTTP connection(s) with {ing.other_requests} request(s) carried no MCP traffic "
            "(no Mcp-Session-Id, event stream or JSON-RPC body) and were not analyzed."
        )
    if not_http:
        notes.append(f"{not_http} TCP connection(s) did not speak HTTP/1.x and were not analyzed.")
    if ing.counts["other_ports"]:
        notes.append(f"{ing.counts['other_ports']} TCP connection(s) on ports not selected were skipped.")
    if ing.counts["non_tcp"] or ing.counts["non_ip"]:
        notes.append(f"{ing.counts['non_tcp']} non-TCP IP packet(s) and {ing.counts['non_ip']} non-IP frame(s) were ignored.")
    if ing.tls_kinds:
        kinds = ", ".join(f"{n} {v} {suite} {alpn}" for (v, suite, alpn), n in sorted(ing.tls_kinds.items()))
        notes.append(f"{sum(ing.tls_kinds.values())} TLS connection(s) decrypted with the key log: {kinds}.")
    if ing.upgraded:
        notes.append(f"{ing.upgraded} connection(s) switched protocols (101 / CONNECT); what followed was not parsed.")
    if reader.count == 0:
        log.add("input_empty", "file")
    return b.finish("pcap", reader.count, notes)


def _text(parts: list[bytes]) -> str:
    return b"".join(parts).decode("utf-8", "replace")


def _emit(b: Builder, ex: Exchange, note) -> dict:
    req = ex.req

    last: list = [None, None]  # events of one segment share its time: convert once

    def when(ns: int | None, where: str) -> datetime | None:
        if ns == last[0]:
            return last[1]
        got = _dt(ns)
        if got is None and ns is not None:
            note("pcap_bad_timestamp", where, f"{ns} ns since 1970")
        last[0], last[1] = ns, got
        return got

    host = req.headers.get("host")
    target = req.target or ""
    if target.startswith("/"):  # origin-form: the authority is the Host header (else the server's address)
        url = f"{ex.conv.scheme}://{host or tcp.endpoint(*ex.conv.server)}{target}"
    else:
        url = target
    where = f"packet {req.pkt}"
    dec = ex.req_dec
    if dec is not None and not dec.closed:  # the request body never ended (the connection did first)
        tail = dec.close()
        if tail:
            ex.req_body.append(tail)
        got = dec.anomaly()
        if got is not None and not dec.reported:
            dec.reported = True
            b.log.add(got[0], where, f"request body of {ex.conn}: {got[1]}")
    row = b.exchange(
        conn=ex.conn,
        location=where,
        started=when(req.ts, where),
        method=req.method,
        url=url,
        req_headers=req.headers,
        request_body=_text(ex.req_body) if ex.req_body else None,
    )
    resp = ex.resp
    if resp is not None:
        b.response(row, resp.status, resp.headers)
        if ex.dec is not None and ex.dec.undecodable:
            row["body_recorded"] = False  # its events are unknown, not absent (the anomaly row says why)
        if ex.runs:
            pass  # events: column-wise, for all streams at once (_events)
        elif ex.body and not ex.body_gap and ex.body_size <= MAX_BODY:
            b.body(row, _text(ex.body), f"packet {ex.body_pkt}")
        elif ex.keep and ex.body_size > MAX_BODY:
            b.log.add("http_body_not_kept", f"packet {ex.body_pkt}", f"{ex.conn}: {ex.body_size} bytes")
    row["end_reason"] = ex.end_reason if ex.end_reason != "open" else "capture_end"
    row["end_by"] = ex.end_by
    row["ended"] = _dt(ex.ended)
    return row
