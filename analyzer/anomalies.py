"""The catalog of input anomalies: stable snake_case names, one severity each.

Ingesters never raise on bad records; they append a row to the anomalies
table (like Zeek's ``weird.log``): where it happened, which catalog entry,
and a human sentence.  One bad record costs one row, never the file.
"""
from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True, slots=True)
class Kind:
    severity: str  # "error" | "warning" | "info"
    rejects: bool  # True when the record it names was not read
    meaning: str


CATALOG: dict[str, Kind] = {
    # --- whole inputs
    "input_unreadable": Kind("error", True, "the file could not be opened or decompressed"),
    "input_unknown_format": Kind("error", True, "the file is none of the supported formats"),
    "input_empty": Kind("warning", False, "the file holds no records"),
    # --- proxy JSONL
    "jsonl_bad_line": Kind("error", True, "a line is not a JSON object"),
    "jsonl_invalid_utf8": Kind("warning", False, "a line held bytes that are not UTF-8; they were replaced"),
    "jsonl_line_too_long": Kind("error", True, "a line longer than the line limit was skipped unread"),
    "text_lone_surrogate": Kind("warning", False, "a JSON string held a lone surrogate escape (\\ud800-\\udfff), which no UTF-8 text can carry; it became U+FFFD"),
    "jsonl_bad_record": Kind("error", True, "a record lacks a required field or has one of the wrong type"),
    "jsonl_unknown_kind": Kind("info", True, "a record of a kind this version does not know; kept out of the analysis"),
    "jsonl_orphan_record": Kind("error", True, "a response/sse/body/close record on a connection with no request before it"),
    "jsonl_sse_not_decoded": Kind(
        "error", True,
        "an sse record of a compressed event stream parsed without undoing its Content-Encoding (mitm_addon.py before it "
        "decoded): noise, not read; the stream's events are unknown (record again with the current addon)",
    ),
    "jsonl_bad_timestamp": Kind("warning", False, "a `ts` that is not RFC 3339; the record is kept without a time"),
    # --- any format
    "time_in_future": Kind(
        "warning", False,
        "an exchange starts more than a day after the clock of the run that read it: the capturing host's clock was wrong "
        "(or the record is forged); it is judged as any other, and moves no window (windows count from the clock)",
    ),
    # --- HAR
    "har_invalid": Kind("error", True, "the document is not HAR (no log.entries)"),
    "har_entry_invalid": Kind("error", True, "an entry lacks request/response fields it needs"),
    "har_bad_base64": Kind("error", False, "a base64 body could not be decoded; the body is treated as not recorded"),
    "har_bad_timestamp": Kind("warning", False, "an entry's startedDateTime is not ISO 8601"),
    "har_sse_body_not_recorded": Kind(
        "warning", False,
        "a 200 text/event-stream response has no recorded body: its events are unknown, not absent "
        "(mitmproxy's HAR of streamed responses is empty; browsers keep bodies only of finished requests)",
    ),
    "har_body_truncated": Kind("warning", False, "the producer says the recorded body is shorter than the response"),
    # --- SSE (from analyzer.decode.sse)
    "sse_invalid_utf8": Kind("warning", False, "SSE bytes that are not UTF-8 were replaced by U+FFFD"),
    "sse_id_contains_nul": Kind("warning", False, "an `id` field containing NUL was ignored, as the spec says"),
    "sse_retry_invalid": Kind("warning", False, "a `retry` field that is not all ASCII digits was ignored"),
    "sse_unknown_field": Kind("info", False, "an SSE field name the spec does not define was ignored"),
    "sse_unterminated_event": Kind(
        "warning", False,
        "the stream ended inside an event: the server emitted it, the client never processed it",
    ),
    # --- pcap / pcapng (analyzer.decode.capture, analyzer.decode.tcp, analyzer.decode.http1, analyzer.ingest.pcap)
    "pcap_truncated_record": Kind(
        "error", True, "the file ends inside a packet record (the capture was cut while being written); reading stopped, every packet before it is kept",
    ),
    "pcap_bad_record": Kind(
        "error", True,
        "a record header that cannot be one (impossible length, sub-second field or time): the file is damaged here; "
        "reading resumed at the next plausible record header (or stopped when none followed)",
    ),
    "pcap_record_repaired": Kind(
        "warning", False,
        "a damaged length field between sound records (a classic pcap record header's, a pcapng block's head or "
        "trailer): the record was read with the length where the next sound record starts (in pcapng, the one its "
        "trailer or head repeats); or a pcapng block type one bit from an Enhanced Packet Block's, with that block's "
        "fields, read as one; nothing was lost, but the file is damaged there",
    ),
    "pcapng_corrupt_block": Kind(
        "error", True,
        "a pcapng block with a bad length, a trailer length that does not match, or fields that do not fit; "
        "reading resumed at the next valid block (or stopped when none followed)",
    ),
    "pcap_unsupported_linktype": Kind("warning", True, "packets on a link type this version cannot decode"),
    "pcap_bad_timestamp": Kind(
        "warning", False,
        "a packet time outside the years 1-9999, or a pcapng packet time before 1970 or after 2262 (what 64-bit nanoseconds "
        "hold): a corrupt timestamp; kept without a time",
    ),
    "pcap_snaplen_truncated": Kind(
        "warning", False, "the capture kept only the start of a packet (snaplen); its missing TCP bytes are treated as a gap",
    ),
    "packet_malformed": Kind("error", True, "a frame whose link, IP or TCP header cannot be decoded"),
    "ip_fragment": Kind("warning", False, "an IP fragment: fragments are not reassembled, so the TCP bytes it carries become a gap"),
    "tcp_seq_gap": Kind(
        "error", False,
        "TCP bytes the capture lost (the next data is beyond the expected sequence number and nothing filled the hole): "
        "what they carried is unknown; parsing resumes after them where the framing allows",
    ),
    "tcp_overlap_conflict": Kind(
        "error", False, "a retransmission carried different bytes for the same sequence numbers; the first copy was kept",
    ),
    "tls_not_decrypted": Kind(
        "warning", False,
        "a TLS connection not decrypted: no key log was given (--tls-keylog, or pcapng decryption secrets), or the capture "
        "lacks its handshake (it was open before the capture started)",
    ),
    "tls_no_key": Kind(
        "error", False,
        "a TLS connection whose client random the key log does not hold (the message names the random, never a secret): "
        "its HTTP is not analyzed; add the key log of the process that made it",
    ),
    "tls_unsupported": Kind(
        "warning", False,
        "a TLS connection with a protocol version or cipher suite this version does not decrypt (only TLS 1.2 and 1.3 with "
        "AES-GCM or ChaCha20-Poly1305): its HTTP is not analyzed",
    ),
    "tls_decrypt_failed": Kind(
        "error", False,
        "a TLS record that does not authenticate with the key log's secret (a wrong key, or corrupt bytes): "
        "that direction is not decrypted further",
    ),
    "tls_record_skipped": Kind(
        "error", False,
        "a damaged TLS record (a header with an impossible type, version or length, or a record that does not "
        "authenticate after records with the same keys did): its bytes were skipped and what it carried is unknown; "
        "decryption resumed at the next record that authenticates",
    ),
    "tls_record_repaired": Kind(
        "warning", False,
        "a damaged TLS record header between records that authenticate: the record decrypted with the length where the "
        "next record starts, or the damaged bytes were no record; nothing was lost, but the capture is damaged there",
    ),
    "tls_record_cut": Kind(
        "error", False,
        "TLS records the capture cut (bytes lost, snaplen, or the capture or connection ended inside a record): "
        "what they carried is unknown; decryption resumes at the next record that authenticates, when there is one",
    ),
    "tls_record_invalid": Kind(
        "error", False, "bytes that are not a TLS record, or a handshake message that does not parse: the connection "
        "(or that direction) is not decrypted further",
    ),
    "tls_keylog_invalid": Kind(
        "warning", False, "a pcapng decryption secrets block that is not a TLS key log, or key log lines that do not parse: skipped",
    ),
    "h2_protocol_error": Kind(
        "error", False,
        "HTTP/2 bytes that do not frame or decode (frame, HPACK header block, connection preface), or a connection that "
        "ended inside a frame: that direction is not parsed further",
    ),
    "h2_gap": Kind(
        "error", False,
        "HTTP/2 bytes the capture lost: frames and the HPACK table cannot be followed after them, so that direction "
        "is not parsed further; its open streams end with the connection",
    ),
    "h2_header_list_too_large": Kind(
        "warning", False,
        "an HTTP/2 header block that decodes to more than 64 KiB of headers (counted as SETTINGS_MAX_HEADER_LIST_SIZE: "
        "name + value + 32 per field), or a connection whose decoded headers reach their limit (16 MiB, and 100 times the "
        "connection's bytes past 256 KiB): HPACK lets one byte stand for a whole header, a header compression bomb? Of "
        "such a block, and of every block after the connection's limit, only the headers the analysis reads were kept "
        "(the others are missing from the exchange's headers); the connection is read on",
    ),
    "http_parse_error": Kind(
        "error", False, "bytes that are not HTTP/1.1 where a message was expected; that direction of the connection is not parsed further",
    ),
    "http_head_cut_off": Kind("warning", False, "the connection ended inside a message's start line or headers: the message is not analyzed"),
    "http_midstream": Kind(
        "warning", False,
        "the connection was already open when the capture started: bytes of a message whose start was not captured cannot be framed and were skipped",
    ),
    "http_response_without_request": Kind(
        "warning", False,
        "a response to no request in the capture (the connection was already open when the capture started, "
        "or what the client sent was not a request); it is not analyzed",
    ),
    "http_body_not_kept": Kind("info", False, "a non-SSE response body over 32 MiB was not kept: JSON-RPC messages in it are not analyzed"),
    # --- Content-Encoding of bodies (analyzer.decode.content_coding; every format)
    "body_encoding_truncated": Kind(
        "warning", False,
        "a compressed body (Content-Encoding gzip, deflate, br, zstd) ended before its compressed stream did: "
        "what was decoded up to the cut is kept and parsed, the rest was never seen",
    ),
    "body_encoding_invalid": Kind(
        "error", False,
        "a compressed body is corrupt from a byte offset on: what was decoded before it is kept and parsed, the rest is unknown",
    ),
    "body_encoding_unsupported": Kind(
        "error", False,
        "a Content-Encoding this version cannot undo: the body is not parsed, its events and JSON-RPC messages are unknown, not absent",
    ),
    "body_decoded_over_limit": Kind(
        "error", False,
        "a compressed body decoded to more than --max-gunzip-ratio times its size (a decompression bomb?): "
        "decoding stopped there, what came before is kept",
    ),
    # --- JSON-RPC
    "jsonrpc_invalid": Kind("info", False, "a body or SSE data field that should hold JSON-RPC does not parse as it"),
}

SCHEMA = pa.schema(
    [
        ("source", pa.string()),
        ("location", pa.string()),
        ("code", pa.string()),
        ("severity", pa.string()),
        ("message", pa.string()),
    ]
)


EXAMPLES_PER_KIND = 100  # rows kept per anomaly kind and input; the rest are counted in one summary row


def occurrences(rows: list[dict], code: str) -> int:
    """How many anomalies of ``code`` the rows stand for: one each, and N for a counting row (``"+N more"``,
    :meth:`AnomalyLog.table`), so the figure stays exact past the examples kept."""
    n = 0
    for r in rows:
        if r["code"] == code:
            loc = r["location"]
            n += int(loc[1:].split(" ", 1)[0]) if loc.startswith("+") and loc.endswith(" more") else 1
    return n


class AnomalyLog:
    """Collects anomaly rows for one input; checked against the catalog.

    Memory is bounded by the number of kinds, not of bad records: a file of two
    million broken lines keeps the first ``EXAMPLES_PER_KIND`` rows of each kind
    with their locations, and one more row per kind that counts the others
    (location ``"+N more"``).  ``rejected`` and ``counts`` stay exact.
    """

    __slots__ = ("source", "rows", "rejected", "counts", "_last")

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows: list[dict[str, str]] = []
        self.rejected = 0
        self.counts: dict[str, int] = {}
        self._last: dict[str, str] = {}

    def add(self, code: str, location: str, detail: str = "") -> None:
        kind = CATALOG[code]  # KeyError here is a programming error: names are not invented at call sites
        if kind.rejects:
            self.rejected += 1
        n = self.counts.get(code, 0) + 1
        self.counts[code] = n
        if n > EXAMPLES_PER_KIND:
            self._last[code] = location
            return
        message = kind.meaning if not detail else f"{kind.meaning}: {detail}"
        self.rows.append(
            {
                "source": self.source,
                "location": location,
                "code": code,
                "severity": kind.severity,
                "message": message,
            }
        )

    def add_many(self, code: str, count: int, locations: list[str], last: str | None, detail: str = "") -> None:
        """``count`` rows of one kind at once, as ``count`` calls of :meth:`add` would leave the log:
        ``locations`` are (at least) the first EXAMPLES_PER_KIND of them in order, ``last`` the last one."""
        if count <= 0:
            return
        room = max(0, EXAMPLES_PER_KIND - self.counts.get(code, 0))
        for loc in locations[:room]:
            self.add(code, loc, detail)
        left = count - min(room, len(locations), count)
        if left > 0:
            if CATALOG[code].rejects:
                self.rejected += left
            self.counts[code] = self.counts.get(code, 0) + left
            self._last[code] = last

    def add_summary(self, code: str, location: str, detail: str) -> None:
        """A row that already sums up others (an ingester's own per-key cap): kept whatever the cap, counts nothing."""
        self.rows.append({"source": self.source, "location": location, "code": code, "severity": CATALOG[code].severity,
                          "message": f"{CATALOG[code].meaning}: {detail}"})

    def table(self) -> pa.Table:
        rows = list(self.rows)
        for code, n in self.counts.items():
            if n > EXAMPLES_PER_KIND:
                more = n - EXAMPLES_PER_KIND
                rows.append(
                    {
                        "source": self.source,
                        "location": f"+{more} more",
                        "code": code,
                        "severity": CATALOG[code].severity,
                        "message": f"{CATALOG[code].meaning}: {more:,} more of this kind in this input after the "
                        f"{EXAMPLES_PER_KIND} listed ({n:,} in all; the last at {self._last[code]})",
                    }
                )
        return pa.Table.from_pylist(rows, schema=SCHEMA)
