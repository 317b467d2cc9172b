"""Secrets never leave the ingester unless the user asks (--no-redact).

Captured traffic carries bearer tokens, cookies, API keys, signed URLs and passwords in tool
arguments.  Redaction happens once, when a record enters the canonical tables
(:class:`analyzer.tables.Builder`), so no later step (JSON, JSON Lines, HTML, the Parquet store,
the terminal) can leak what it never received.

What is secret is decided by NAME, the same way everywhere: header names (request and response),
URL query and fragment parameters, JSON object keys at any depth (request bodies, SSE data), and
``name=value`` / ``name: value`` / ``"name": "value"`` pairs inside text that is not JSON (and inside
JSON string values).  The value goes, the name stays; JSON stays valid JSON.  URL userinfo
(``user:pass@``) always goes.  See :func:`is_secret` for the exact rule and its exemptions.

Digests are NOT taken from redacted text: ``events.digest`` and ``messages.params_digest`` are
computed from the raw text first (so the analysis is the same with and without --no-redact, and
two calls that differ only in a secret argument are still two different calls); only the text
columns are redacted before the tables leave the Builder.
"""
from __future__ import annotations

import json
import re
from functools import lru_cache
from urllib.parse import unquote_plus, urlsplit, urlunsplit

REDACTED = "[REDACTED]"

# -- the name rule ------------------------------------------------------------------------------
# A name is secret when, lower-cased, it CONTAINS one of these substrings ...
_SECRET_SUBSTRINGS = ("token", "secret", "key", "auth", "password", "passwd", "passphrase", "signature", "cookie",
                      "credential", "jwt", "session", "bearer")
# ... or has one of these as a whole WORD (split at non-alphanumerics and camelCase humps): as
# substrings they are in everyday names ("sig" in signal and design, "pwd" in cwd-like names).
_SECRET_WORDS = frozenset({"sig", "pwd"})
# ... unless its normalized form (lower case, without "-", "_", "." and spaces) is one of these.
# They are the analysis keys (Mcp-Session-Id, Last-Event-ID, progressToken pairs progress
# notifications with their request) or common names that only look like secrets.
EXEMPT = frozenset({
    "mcpsessionid", "sessionid",  # the MCP session: the key every finding is grouped by
    "lasteventid",  # the SSE resumption cursor
    "progresstoken",  # params._meta.progressToken / notifications/progress params.progressToken
    "author", "authors", "authority",  # "auth" in names that are no credentials
    "maxtokens", "inputtokens", "outputtokens", "totaltokens", "prompttokens", "completiontokens",  # counts
    "keyword", "keywords",
})
# URL parameters only: the OAuth authorization code ("code" in JSON is the JSON-RPC error code).
_URL_ONLY = frozenset({"code"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NORMALIZE = re.compile(r"[-_.\s]")


@lru_cache(maxsize=4096)
def is_secret(name: str) -> bool:
    """Does a value under this name (header, URL parameter, JSON key, ``name=`` in text) hold a secret?"""
    low = name.lower()
    if _NORMALIZE.sub("", low) in EXEMPT:
        return False
    if any(s in low for s in _SECRET_SUBSTRINGS):
        return True
    return any(w.lower() in _SECRET_WORDS for w in _WORD.findall(name))


def _url_param_secret(name: str) -> bool:
    return is_secret(name) or name.lower() in _URL_ONLY


# -- a cheap first look: most text holds no secret-like name at all ----------------------------
# A secret is only ever a *named* value (a JSON key, ``name=value``, ``name: value``), URL userinfo or a
# Bearer/Basic credential: prose that merely mentions "token" or "key" (event data is full of it) is not
# looked at closer, which keeps the pass over a large capture's event data a regex, not a JSON parse per row.
_SECRET_WORD_RX = r"(?:token|secret|key|auth|passw|passphrase|pwd|sig|cookie|credential|jwt|session|bearer)"
# The candidate regex's alternatives, named once: a name (name characters, as _PAIR reads them) with a separator;
# a JSON key of any characters (a key is looked up whole: "api key!" is secret; up to 1 KiB of it after the word,
# so that Python's regex stays linear), its quote escaped too inside JSON in a string; userinfo; a credential
# after its scheme word
_NAME_ALT = _SECRET_WORD_RX + r"[A-Za-z0-9_.\-]*\\?[\"']?\s*[:=]"
_KEY_ALT = _SECRET_WORD_RX + r"(?:[^\"\\\r\n]|\\[^\"\r\n]){BOUND}\\?\"\s*:"
_OTHER_ALT = r"://[^\s/@]+@|\b(?:bearer|basic)\s+[A-Za-z0-9\-._~+/]{8,}"
_CANDIDATE_RX = r"(?i)" + _NAME_ALT + "|" + _KEY_ALT.replace("{BOUND}", "{0,1024}") + "|" + _OTHER_ALT
_CANDIDATE = re.compile(_CANDIDATE_RX)
# Polars' regex engine (Rust) runs the 1 KiB-bounded key alternative very slowly: its automaton holds a
# thousand copies of the loop.  Over 100 MB of event data whose prose names tokens and keys ("... shard token
# leaf build cache ..."), _CANDIDATE_RX took 9 s.  The column-wise look runs the other alternatives and the key
# alternative unbounded (0.26 s; linear in Rust), and only the rows the unbounded one alone takes are read by
# _CANDIDATE (Python, the bound): the same rows as _CANDIDATE_RX (see _is_candidate).
_CANDIDATE_FAST_RX = r"(?i)" + _NAME_ALT + "|" + _OTHER_ALT
_KEY_UNBOUNDED_RX = r"(?i)" + _KEY_ALT.replace("{BOUND}", "*")
# every candidate starts with one of these (case aside): Python's regex engine tries each alternative at
# each position, a substring test of the lower-cased text is C's (a 200-byte JSON body: 1 against 23 µs)
_FIRST = ("token", "secret", "key", "auth", "passw", "passphrase", "pwd", "sig", "cookie", "credential", "jwt", "session",
          "bearer", "basic", "://")


def _may_be_candidate(s: str) -> bool:
    """False when ``s`` has no candidate for sure (a cheap test before _CANDIDATE's search)."""
    if s.isascii():
        low = s.lower()
    else:  # the letters an ignore-case regex takes for i, s and k that lower() leaves apart (K lowers to k)
        low = s.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()
    return any(w in low for w in _FIRST)


# Exempt names trigger the first look too: the bulk of MCP traffic is JSON with "progressToken" in every
# tool call and progress notification.  A second look masks each exempt name that is a whole JSON string
# (an unescaped quote before it, its quote after it) and asks again: only text with a candidate left is
# looked at closer.  The mask hides no candidate the closer look acts on: such a string is an exempt key
# (its value keeps its own candidates) or a value that is a name alone, and to the pair rule it is a whole
# name (quotes are no name characters).  A name inside a longer string ("a progressToken b" may be a key,
# and a key is looked up whole), after an escaped quote (JSON text inside a string) or unquoted
# ("progressToken=5") is not masked.  (The quote before it is matched, not looked behind: Polars' regex
# engine has no look-around.)
_EXEMPT_RX = r'(?i)(^|[^\\])"(?:progress_?token|mcp-session-id|session_?id|last-event-id)"'
_EXEMPT = re.compile(_EXEMPT_RX)
_MASK = '"________"'


def _only_exempt(s: str) -> bool:
    """Is every candidate of ``s`` (it has one) inside an exempt name?  (The second look; see _EXEMPT_RX.)"""
    return _CANDIDATE.search(_EXEMPT.sub(r"\g<1>" + _MASK, s)) is None


# -- text that is not JSON ------------------------------------------------------------------------
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
# a credential after its scheme word, wherever it stands ("sent Bearer eyJhbGciOi..."): at least
# 8 characters with a digit, so that prose ("basic usage") is left alone
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+(?=[A-Za-z0-9\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*")
_STOP = r"[^\s&,;\"'<>#)}\]]"
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P=q)(?P<sep>\s*[:=]\s*)"
    r"(?P<val>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|(?:(?:bearer|basic|digest|token|negotiate)\s+)?" + _STOP + r"+)",
    re.IGNORECASE,
)


def _pairs(s: str) -> str:
    """``name=value``, ``name: value`` and ``"name": "value"`` with a secret name: the value goes.
    Scanning resumes right after the separator of a pair that is kept, so a secret inside its
    value (``redirect=https://h/?token=x``) is still found."""
    s = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", s)
    out, pos = [], 0
    while True:
        m = _PAIR.search(s, pos)
        if m is None:
            break
        if not is_secret(m.group("name")):
            out.append(s[pos : m.end("sep")])
            pos = m.end("sep")
            continue
        if s.startswith(REDACTED, m.start("val")):  # already redacted: the marker holds a "]" the value stops at
            out.append(s[pos : m.start("val") + len(REDACTED)])
            pos = m.start("val") + len(REDACTED)
            continue
        val = m.group("val")
        quote = val[0] if val[0] in "\"'" else ""
        out.append(s[pos : m.start("val")] + quote + REDACTED + quote)
        pos = m.end("val")
    out.append(s[pos:])
    s = "".join(out)
    return _BEARER.sub(lambda m: m.group(1) + " " + REDACTED, s) if _BEARER.search(s) else s


# -- JSON -------------------------------------------------------------------------------------------
# values of these keys are identifiers the analysis reads (JSON-RPC id and method, the tool name):
# never scanned for pairs ("session:create" is a tool name, not a secret)
_KEEP_VALUE = frozenset({"jsonrpc", "id", "method", "name", "protocolVersion"})
_NOT_JSON = object()
_SURROGATE = re.compile("[\ud800-\udfff]")


def _walk(obj, keep: bool = False):
    """(redacted copy, changed?) of a parsed JSON value."""
    if isinstance(obj, dict):
        changed = False
        out = {}
        for k, v in obj.items():
            if is_secret(k):
                out[k] = REDACTED
                changed = changed or v != REDACTED
            else:
                out[k], c = _walk(v, k in _KEEP_VALUE)
                changed = changed or c
        return out, changed
    if isinstance(obj, list):
        changed = False
        out = []
        for v in obj:
            v2, c = _walk(v)
            out.append(v2)
            changed = changed or c
        return out, changed
    if isinstance(obj, str) and not keep and _CANDIDATE.search(obj):
        new = _pairs(obj)
        return new, new != obj
    return obj, False


def _dumps(obj, like: str) -> str:
    # keep the producer's spacing where it is one of json.dumps' two (compact: the MCP SDKs)
    seps = (", ", ": ") if '": ' in like else (",", ":")
    out = json.dumps(obj, ensure_ascii=False, separators=seps)
    if _SURROGATE.search(out):  # lone surrogates (\ud800 escapes) cannot be stored as UTF-8: keep them escaped
        out = json.dumps(obj, ensure_ascii=True, separators=seps)
    return out


def text(s: str | None, enabled: bool = True) -> str | None:
    """A body, an SSE data field, a header value or a message: JSON has the values of secret keys
    replaced at any depth (and secret pairs inside its strings), other text its secret pairs.
    Text without any secret comes back unchanged (the same object)."""
    if not enabled or not s or not _may_be_candidate(s) or not _CANDIDATE.search(s) or _only_exempt(s):
        return s
    return _closer(s)


def _closer(s: str) -> str:
    """:func:`text` of a text with a candidate for a secret (the closer look)."""
    if s.lstrip()[:1] in ("{", "["):
        try:
            obj = json.loads(s)
        except (ValueError, RecursionError):
            obj = _NOT_JSON
        if obj is not _NOT_JSON:
            try:
                new, changed = _walk(obj)
            except RecursionError:  # nesting deeper than Python recurses: keep nothing of it
                return REDACTED
            return _dumps(new, s) if changed else s
    return _pairs(s)


# -- headers and URLs ---------------------------------------------------------------------------------
# header values the analysis reads; never rewritten
_KEEP_HEADERS = frozenset({"mcp-session-id", "last-event-id", "mcp-protocol-version", "x-mcp-replay-epoch", "content-type"})


def headers(h: dict[str, str], enabled: bool = True) -> dict[str, str]:
    """Values of secret header names go; other values lose secret pairs and URL userinfo
    (a Referer or Location with ``?token=``)."""
    if not enabled:
        return h
    cache = _HEADER_CACHE
    out = {}
    for k, v in h.items():
        got = cache.get((k, v))
        if got is None:
            if len(cache) >= _HEADER_CACHE_SIZE:
                cache.clear()
            got = cache[(k, v)] = REDACTED if is_secret(k) else v if k in _KEEP_HEADERS else text(v)
        out[k] = got
    return out


# a log repeats the same headers (host, accept, user-agent, content-type) on every request: the decision
# for a (name, value) pair is made once (a pure function of the pair), up to this many pairs at a time
_HEADER_CACHE: dict[tuple[str, str], str] = {}
_HEADER_CACHE_SIZE = 4096


def _params(part: str) -> str:
    """Query or fragment ``a=1&b=2``: values of secret names go, the rest stays byte for byte."""
    if "=" not in part:
        return part
    out = []
    for piece in part.split("&"):
        name, eq, _ = piece.partition("=")
        out.append(name + "=" + REDACTED if eq and _url_param_secret(unquote_plus(name)) else piece)
    return "&".join(out)


def url(u: str | None, enabled: bool = True) -> str | None:
    """Userinfo, and values of secret query and fragment parameters, replaced by the marker."""
    if not enabled or not u:
        return u
    if u.isascii() and "@" not in u and "=" not in u and "[" not in u and "]" not in u:
        # no userinfo, no parameter, and one urlsplit takes (no IPv6 brackets; nothing NFKC could turn into a
        # delimiter): nothing below would change it (4 of a JSONL request line's 26 µs went to the split)
        return u
    try:
        parts = urlsplit(u)
    except ValueError:  # not a URL urllib can split (a bad IPv6 literal): redact it as text
        return _pairs(u)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rpartition("@")[2]
    new = parts._replace(netloc=netloc, query=_params(parts.query), fragment=_params(parts.fragment))
    if new == parts:
        return u
    return urlunsplit(new)


# -- columns (the Builder's events and messages) -----------------------------------------------------

def _is_candidate(series):
    """``series.str.contains(_CANDIDATE_RX)`` (nulls false), without running its bounded alternative in Polars."""
    import polars as pl

    got = series.str.contains(_CANDIDATE_FAST_RX).fill_null(False)
    key = series.str.contains(_KEY_UNBOUNDED_RX).fill_null(False) & ~got
    if key.any():
        idx = key.arg_true()
        exact = pl.Series([_CANDIDATE.search(v) is not None for v in series.gather(idx).to_list()], dtype=pl.Boolean)
        got = got.scatter(idx, exact)
    return got


def column(series):
    """:func:`text` of each value of a Polars string Series, looking closer only at the values a
    regex pass over the whole column finds a secret-like name in (and not only exempt ones)."""
    import polars as pl

    first = _is_candidate(series)
    if not first.any():
        return series
    idx = first.arg_true()
    cand = series.gather(idx)
    second = _is_candidate(cand.str.replace_all(_EXEMPT_RX, "${1}" + _MASK))
    if not second.any():
        return series
    idx = idx.filter(second)
    vals = [_closer(v) for v in series.gather(idx).to_list()]
    return series.clone().scatter(idx, pl.Series(vals, dtype=pl.String))  # scatter writes in place: not into the caller's
