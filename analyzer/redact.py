"""Secrets never leave the ingester unless the user asks (--no-redact).

Captured traffic carries bearer tokens, cookies and API keys.  Redaction
happens once, when a record enters the canonical tables, so no later step
(JSON, HTML, terminal) can leak what it never received.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "[REDACTED]"

SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
        "x-api-key",
        "api-key",
        "x-auth-token",
        "x-access-token",
        "x-amz-security-token",
        "x-goog-api-key",
    }
)
# query parameter names that carry credentials (matched case-insensitively, whole name)
_SECRET_PARAM = re.compile(
    r"^(access_?token|id_?token|refresh_?token|token|auth|api_?key|apikey|key|secret|client_secret|password|passwd|sig|signature|code)$",
    re.IGNORECASE,
)


def headers(h: dict[str, str], enabled: bool = True) -> dict[str, str]:
    if not enabled:
        return h
    return {k: (REDACTED if k in SECRET_HEADERS else v) for k, v in h.items()}


def url(u: str | None, enabled: bool = True) -> str | None:
    if not enabled or not u or "?" not in u:
        return u
    try:
        parts = urlsplit(u)
        pairs = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:
        return u.split("?", 1)[0] + "?" + REDACTED
    if not any(_SECRET_PARAM.match(k) for k, _ in pairs):
        return u
    query = urlencode([(k, REDACTED if _SECRET_PARAM.match(k) else v) for k, v in pairs], safe="[]")
    return urlunsplit(parts._replace(query=query))
