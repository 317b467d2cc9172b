"""HAR 1.2 ingester (Chrome/Firefox DevTools, Playwright recordHar, mitmproxy hardump).

Producer quirks handled here:
- Entries are written in completion order by several producers; a long SSE
  stream started early is written late.  We order by ``startedDateTime`` (stable
  on the file's order) and keep the file's entry number as the location.
- Bodies may be base64 (``content.encoding == "base64"``; mitmproxy does this for
  bytes that are not valid UTF-8).
- Aborted requests: ``response.status == 0`` (Chrome, mitmproxy), ``_error``
  (Chrome, mitmproxy: the error text), ``_failureText`` (Playwright),
  ``_wasAborted`` (Playwright).
- SSE bodies: browsers keep the body only of requests that finished, and
  mitmproxy's HAR of a streamed response is empty.  An empty or missing body on
  a ``200 text/event-stream`` entry therefore means "not recorded", never "no
  events" (``body_recorded = false`` and a ``har_sse_body_not_recorded`` row).
- No producer keeps per-event times for SSE: events get ``ts = null``.
"""
from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime, timedelta, timezone
from typing import BinaryIO

from .anomalies import AnomalyLog
from .errors import InputError
from .ingest_jsonl import parse_ts
from .sse import SSEParser
from .tables import SSE_MEDIA, Builder, Ingested, media_type


def _headers(items: object) -> dict[str, str] | None:
    if items is None:
        return {}
    if not isinstance(items, list):
        return None
    out: dict[str, str] = {}
    for h in items:
        if not isinstance(h, dict) or not isinstance(h.get("name"), str):
            return None
        name = h["name"].lower()
        if name.startswith(":"):  # HTTP/2 pseudo-headers (Chrome)
            continue
        value = str(h.get("value", ""))
        out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def _body_bytes(content: dict, log: AnomalyLog, where: str) -> bytes | None:
    text = content.get("text")
    if not isinstance(text, str) or text == "":
        return None
    if content.get("encoding") == "base64":
        try:
            return base64.b64decode(text, validate=False)
        except (binascii.Error, ValueError) as exc:
            log.add("har_bad_base64", where, str(exc))
            return None
    return text.encode("utf-8", "surrogatepass")


def load(source: str, stream: BinaryIO) -> list:
    raw = stream.read()
    try:
        doc = json.loads(raw.decode("utf-8", "replace"))
    except json.JSONDecodeError as exc:
        raise InputError(
            source,
            f"not a complete HAR document (JSON error at line {exc.lineno} column {exc.colno}: {exc.msg}); "
            "expected a HAR 1.2 file — was it truncated while being written?",
        ) from None
    except RecursionError:
        raise InputError(source, "JSON nested too deeply to be a HAR document") from None
    entries = doc.get("log", {}).get("entries") if isinstance(doc, dict) and isinstance(doc.get("log"), dict) else None
    if not isinstance(entries, list):
        raise InputError(source, "JSON without `log.entries`: expected a HAR 1.2 file")
    return entries


def read(source: str, stream: BinaryIO, redact_secrets: bool = True) -> Ingested:
    entries = load(source, stream)
    log = AnomalyLog(source)
    b = Builder(source, log, redact_secrets)
    far_future = datetime.max.replace(tzinfo=timezone.utc)

    ordered = []
    for n, entry in enumerate(entries, start=1):
        where = f"entry {n}"
        if not isinstance(entry, dict) or not isinstance(entry.get("request"), dict) or not isinstance(entry.get("response"), dict):
            log.add("har_entry_invalid", where, "needs `request` and `response` objects")
            continue
        started = parse_ts(entry.get("startedDateTime"))
        if started is None:
            log.add("har_bad_timestamp", where, repr(entry.get("startedDateTime"))[:60])
        ordered.append((started or far_future, n, entry))
    ordered.sort(key=lambda t: (t[0], t[1]))

    notes: list[str] = []
    not_recorded = 0
    for started, n, entry in ordered:
        where = f"entry {n}"
        req, resp = entry["request"], entry["response"]
        req_headers = _headers(req.get("headers"))
        resp_headers = _headers(resp.get("headers"))
        if req_headers is None or resp_headers is None or not isinstance(req.get("method"), str):
            log.add("har_entry_invalid", where, "request.method and name/value header lists are required")
            continue
        post = req.get("postData")
        body = post.get("text") if isinstance(post, dict) and isinstance(post.get("text"), str) else None
        row = b.exchange(
            conn=str(entry.get("connection") or f"entry-{n}"),
            location=where,
            started=None if started.year == 9999 else started,
            method=req["method"],
            url=req.get("url") if isinstance(req.get("url"), str) else None,
            req_headers=req_headers,
            request_body=body,
        )
        status = resp.get("status")
        status = status if isinstance(status, int) and not isinstance(status, bool) else None
        error = entry.get("_error") or resp.get("_error") or resp.get("_failureText") or entry.get("_failureText")
        if status in (0, None):
            b.response(row, None, {})
            row["end_reason"] = "aborted"
        else:
            b.response(row, status, resp_headers)
            row["end_reason"] = "aborted" if entry.get("_wasAborted") else ("error" if error else "complete")
        elapsed = entry.get("time")
        if row["started"] is not None and isinstance(elapsed, (int, float)) and elapsed >= 0:
            row["ended"] = row["started"] + timedelta(milliseconds=elapsed)

        content = resp.get("content") if isinstance(resp.get("content"), dict) else {}
        if row["content_type"] is None:
            row["content_type"] = media_type(content.get("mimeType"))
        data = _body_bytes(content, log, where)
        if row["content_type"] == SSE_MEDIA and row["status"] is not None and 200 <= row["status"] < 300:
            if data is None:
                row["body_recorded"] = False
                not_recorded += 1
                log.add("har_sse_body_not_recorded", where)
                continue
            if isinstance(content.get("size"), int) and content["size"] > len(data):
                log.add("har_body_truncated", where, f"{len(data)} of {content['size']} bytes recorded")
            parser = SSEParser()
            for ev in parser.feed(data) + parser.close():
                at = f"{where} byte {ev.offset}"
                for code in ev.anomalies:
                    log.add(code, at)
                if ev.fate == "cut_off":
                    log.add("sse_unterminated_event", at)
                b.event(row, location=at, ts=None, event_id=ev.id, event_type=ev.event, data=ev.data, retry=ev.retry, fate=ev.fate)
        elif data is not None and row["status"] is not None:
            b.body(row, data.decode("utf-8", "replace"), where)
    if not_recorded:
        notes.append(
            f"{not_recorded} text/event-stream response(s) have no recorded body: their events are unknown, not absent "
            "(mitmproxy's HAR of streamed responses is empty; browsers keep bodies only of finished requests). "
            "Record with the mitmproxy addon (proxy JSONL) to see every event."
        )
    notes.append("HAR keeps no per-event times: SSE events are ordered by their position in the body.")
    if not entries:
        log.add("input_empty", "file")
    return b.finish("har", len(entries), notes)
