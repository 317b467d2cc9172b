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
    "jsonl_bad_record": Kind("error", True, "a record lacks a required field or has one of the wrong type"),
    "jsonl_unknown_kind": Kind("info", True, "a record of a kind this version does not know; kept out of the analysis"),
    "jsonl_orphan_record": Kind("error", True, "a response/sse/body/close record on a connection with no request before it"),
    "jsonl_bad_timestamp": Kind("warning", False, "a `ts` that is not RFC 3339; the record is kept without a time"),
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
    # --- SSE (from analyzer.sse)
    "sse_invalid_utf8": Kind("warning", False, "SSE bytes that are not UTF-8 were replaced by U+FFFD"),
    "sse_id_contains_nul": Kind("warning", False, "an `id` field containing NUL was ignored, as the spec says"),
    "sse_retry_invalid": Kind("warning", False, "a `retry` field that is not all ASCII digits was ignored"),
    "sse_unknown_field": Kind("info", False, "an SSE field name the spec does not define was ignored"),
    "sse_unterminated_event": Kind(
        "warning", False,
        "the stream ended inside an event: the server emitted it, the client never processed it",
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


class AnomalyLog:
    """Collects anomaly rows for one input; checked against the catalog."""

    __slots__ = ("source", "rows", "rejected")

    def __init__(self, source: str) -> None:
        self.source = source
        self.rows: list[dict[str, str]] = []
        self.rejected = 0

    def add(self, code: str, location: str, detail: str = "") -> None:
        kind = CATALOG[code]  # KeyError here is a programming error: names are not invented at call sites
        if kind.rejects:
            self.rejected += 1
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

    def table(self) -> pa.Table:
        return pa.Table.from_pylist(self.rows, schema=SCHEMA)
