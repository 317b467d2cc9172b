"""The server a request went to, as the metrics (``--metrics``) and the trend name it: its URL's authority.

The document keeps every exchange's URL, absolute wherever the capture has the server's name: the pcap reader
builds it from the Host header (HTTP/2: ``:authority``) or else the server's address, HAR stores absolute URLs,
and the proxy JSONL has the URL its proxy logged (mitmproxy's addon logs it absolute; a proxy that logs only the
path gives no host: ``""``).  The authority is taken without its userinfo (redaction already replaces it by a
marker; with ``--no-redact`` it would be a credential), lower-cased (host names are case-insensitive) and cut
to :data:`MAX_HOST` characters: it names time series and table rows, so it must carry no secret and a hostile
capture must not blow them up.  Control characters and quotes stay: each output escapes them its own way.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

MAX_HOST = 255  # a DNS name is at most 253 characters; a port and brackets fit in the rest
_AUTHORITY = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://([^/?#]*)")  # RFC 3986: scheme "://" authority


def of_url(url: str | None) -> str:
    """The host (and port) ``url`` names, without userinfo; ``""`` for a URL without an authority."""
    if not url:
        return ""
    m = _AUTHORITY.match(url)
    if m is None:
        return ""
    # (a "#" cannot stand in an authority; percent-encoded, no host label can carry "##[", a CI workflow command)
    host = m.group(1).rpartition("@")[2].lower().replace("#", "%23")
    return host if len(host) <= MAX_HOST else host[:MAX_HOST] + "…"


def column(records: Sequence[dict], name: str) -> list:
    """One key of a document array, in order (a :class:`~analyzer.document.records.Records` answers from its frame,
    without making a dict per record)."""
    col = getattr(records, "column", None)
    return col(name) if col is not None else [r.get(name) for r in records]


def by_exchange(exchanges: Sequence[dict]) -> dict[str, str]:
    """Each exchange's host, by its ``exchange_id`` (``x<n>``)."""
    seen: dict[str | None, str] = {}  # one parse per distinct URL
    out = {}
    for xid, url in zip(column(exchanges, "exchange_id"), column(exchanges, "url"), strict=True):
        host = seen.get(url)
        if host is None:
            host = seen[url] = of_url(url)
        out[xid] = host
    return out
