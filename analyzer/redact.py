"""Secrets never leave the ingester unless the user asks (--no-redact).

Captured traffic carries bearer tokens, cookies, API keys, signed URLs and passwords in tool
arguments.  Redaction happens once, when a record enters the canonical tables
(:class:`analyzer.tables.Builder`), so no later step (JSON, JSON Lines, HTML, the Parquet store,
the terminal) can leak what it never received.

What is secret is decided by NAME, the same way everywhere: header names (request and response),
URL query, fragment and path parameters (``;jsessionid=``), JSON object keys at any depth (request bodies,
SSE data), and ``name=value`` / ``name: value`` / ``"name": "value"`` pairs inside text that is not JSON
(and inside JSON string values).  The value goes, the name stays; JSON stays valid JSON.  URL userinfo
(``user:pass@``) always goes.  See :func:`is_secret` for the exact rule and its exemptions.

And by SHAPE, wherever it stands (under any name or none, in any text, URL, header value, JSON string or
key): JWTs, AWS access key ids and secret keys in their context, GitHub, Slack, Google, OpenAI and Anthropic
tokens, private key blocks, ASP.NET's cookieless session, and the credential after ``Bearer``/``Basic``
(see _SHAPES).  A protocol id (Mcp-Session-Id, Last-Event-ID, progressToken, sessionId) that is such a shape
as a whole is kept: the MCP spec lets a server make its session id a JWT.

The fast paths (:func:`text`'s first looks, :func:`column`'s Polars regex) skip only texts where the closer
look changes nothing: they read JSON escapes (``\\u0074oken``, ``http:\\/\\/``) and Python's case folding
(the Kelvin sign is a k) as the closer look, which decodes and folds, does.

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
_SECRET_SUBSTRINGS = ("token", "secret", "key", "auth", "password", "passwd", "passphrase", "passcode", "signature", "cookie",
                      "credential", "jwt", "session", "sessid", "bearer")
# ... or has one of these as a whole WORD (split at non-alphanumerics and camelCase humps): as
# substrings they are in everyday names ("sig" in signal and design, "pass" in bypass and passage, "pw" in
# typewriter, "otp" in footprint).
_SECRET_WORDS = frozenset({"sig", "pwd", "pass", "pw", "otp"})
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
# The protocol's own identifiers among them: a value under one of these names is kept even when it has a
# secret's shape as a whole (a server may make its Mcp-Session-Id a JWT; the spec names that as one choice).
_IDENTS = frozenset({"mcpsessionid", "sessionid", "lasteventid", "progresstoken"})
# URL parameters only: the OAuth authorization code ("code" in JSON is the JSON-RPC error code).
_URL_ONLY = frozenset({"code"})

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NORMALIZE = re.compile(r"[-_.\s]")


def _normal(name: str) -> str:
    return _NORMALIZE.sub("", name.lower())


@lru_cache(maxsize=4096)
def is_secret(name: str) -> bool:
    """Does a value under this name (header, URL parameter, JSON key, ``name=`` in text) hold a secret?"""
    low = name.lower()
    if _NORMALIZE.sub("", low) in EXEMPT:
        return False
    if any(s in low for s in _SECRET_SUBSTRINGS):
        return True
    return any(w.lower() in _SECRET_WORDS for w in _WORD.findall(name))


@lru_cache(maxsize=1024)
def _is_ident(name: str) -> bool:
    return _normal(name) in _IDENTS


def _url_param_secret(name: str) -> bool:
    return is_secret(name) or name.lower() in _URL_ONLY


# -- the shapes of two engines' patterns ----------------------------------------------------------------------------
# The candidate patterns below run in Python (re) and in Polars (Rust's regex), and both must take exactly the
# same texts.  The engines fold case differently: Python's ignore-case takes the Kelvin sign for k, the long s for
# s and the dotted and dotless I for i, Rust's takes the first two only; Python's \s takes U+001C..U+001F, Rust's
# does not.  So no pattern here has a case flag, \s or \b: letters are spelled as classes with Python's odd letters
# in them (the closer look, Python's, reads them so: _PAIR and _BEARER ignore case, and is_secret lower-cases the
# Kelvin sign to k), and white space is the ASCII set (the only one the closer look's separators take).
_FOLD = {"i": "iI\u0130\u0131", "k": "kK\u212a", "s": "sS\u017f"}


def _ci(word: str) -> str:
    """``word`` case aside, as Python's ignore-case regex reads it, spelled for both engines."""
    return "".join("[" + _FOLD.get(c, c + c.upper()) + "]" if c.isalpha() else re.escape(c) for c in word)


_WS = "[ \t\n\r\f\v]"  # the white space a separator may have around it (ASCII: see above)
# ... and in JSON text inside a JSON string it may stand escaped
_WS_OR_ESC = r"(?:[ \t\n\r\f\v]|\\[nrtf])"
_NAME_CHAR = "[A-Za-z0-9_.\\-\u0130\u0131\u017f\u212a]"  # _PAIR's name characters, as its ignore-case reads them
# A JSON escape that decodes to a character a candidate is made of (a letter, a digit, a separator, white space,
# the odd letters): the closer look decodes it, so a text that has one is always looked at closer.  Left out, as
# the patterns take their escaped forms where they matter: \u0022 and \u0027 (quotes), \u002b (+), \/ ; and
# \u0026, \u003c, \u003e, \u0060, which no candidate needs (.NET escapes all of these in every string).
_HIDDEN_RX = (r"\\u(?:00(?:[01][0-9a-fA-F]|2[013-589aAc-fC-F]|3[0-9abdfABDF]|[45][0-9a-fA-F]|6[1-9a-fA-F]|7[0-9a-fA-F])"
              r"|212[aA]|017[fF]|013[01])")

# -- secrets by shape: redacted wherever they stand, under any name or none (as gitleaks and detect-secrets do) ----
# Each is written once for the candidate (no look-around: Polars has none) and read by _SHAPES, the closer look,
# with the boundaries the candidate leaves out.  They are case-sensitive, as the tokens are.
_PAD = "(?:=|%3[dD]){0,2}"  # base64 padding, percent-encoded too in a URL
_JWT_RX = "eyJ[A-Za-z0-9_\\-]{13,}" + _PAD + "\\.[A-Za-z0-9_\\-]*" + _PAD + "\\.[A-Za-z0-9_\\-]*" + _PAD  # JWS; a JWE's first three parts
_AWS_ID_RX = "(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16}"  # AWS access key ids
_VENDOR_RX = ("gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
              "|xox[abposr]-[A-Za-z0-9\\-]{10,}|xapp-[0-9]-[A-Za-z0-9\\-]{10,}"  # Slack
              "|AIza[A-Za-z0-9_\\-]{35}|ya29\\.[A-Za-z0-9_\\-]{20,}"  # Google API key, OAuth access token
              "|sk-(?:proj|ant|svcacct|admin)-[A-Za-z0-9_\\-]{20,}")  # OpenAI, Anthropic
_PEM_RX = "-----BEGIN[ A-Z0-9]{0,40}PRIVATE KEY-----"
_COOKIELESS_RX = "\\([SAF]\\([A-Za-z0-9_\\-]{20,}\\)\\)"  # ASP.NET's session in the path: /(S(lit3py55t21z5v55vlm25s55))/
# An AWS secret access key (40 characters of base64) in its context: the word "secret", a name's tail ("AccessKey",
# "_access_key", " Access Key"), maybe a bracket ("[None]" in `aws configure`), a few separator characters (">", ": ",
# '" = "'), then the key: <SecretAccessKey>...</SecretAccessKey>, "AWS Secret Access Key [None]: ...".  (Under a
# secret name it already goes as a pair.)  In the candidate every character of the bracket and the separator may
# stand escaped, so that it counts what the closer look, which reads decoded strings, counts.
_ESC_UNIT = r"(?:\\u[0-9a-fA-F]{4}|\\[^u])"
_B64_UNIT = r"(?:[A-Za-z0-9+/]|\\/|\\u002[bB])"
_AWS_CTX_CAND = (_ci("secret") + "[A-Za-z _.\\-\u0130\u0131\u017f\u212a]{0,24}"
                 + r"(?:(?:[ \t]|\\t){0,4}\[(?:" + _ESC_UNIT + r"|[^\]\\\r\n]){0,40}\])?"
                 + r"(?:" + _ESC_UNIT + r"|[^A-Za-z0-9/+\\\r\n]){1,8}" + _B64_UNIT + "{40}")
_AWS_CTX = (_ci("secret") + "[A-Za-z _.\\-\u0130\u0131\u017f\u212a]{0,24}" + r"(?:[ \t]{0,4}\[(?!REDACTED\])[^\]\r\n]{0,40}\])?"
            + r"[^A-Za-z0-9/+\r\n]{1,8}(?P<awskey>[A-Za-z0-9+/]{40})(?![A-Za-z0-9+/=])")
_SHAPE_RX = "|".join([_JWT_RX, _AWS_ID_RX, _VENDOR_RX, _PEM_RX, _COOKIELESS_RX])
_SHAPE_WHOLE = re.compile("(?:" + _JWT_RX + "|" + _AWS_ID_RX + "|" + _VENDOR_RX + ")")  # a protocol id kept by fullmatch
_SHAPES = re.compile(
    "(?P<jwt>" + _JWT_RX + ")"
    "|(?<![A-Za-z0-9])(?:" + _AWS_ID_RX + ")(?![A-Za-z0-9])"
    "|(?<![A-Za-z0-9_\\-])(?:" + _VENDOR_RX + ")"
    "|" + _PEM_RX + r"(?:[\s\S]{0,65536}?-----END[ A-Z0-9]{0,40}PRIVATE KEY-----|[A-Za-z0-9+/=\s:,\-]*)"
    "|" + _COOKIELESS_RX
    + "|" + _AWS_CTX
)


_PADDING = re.compile("(?:=|%3[dD])+")


def _shape_out(m: re.Match) -> str:
    if m.group("awskey") is not None:
        return m.group()[: m.start("awskey") - m.start()] + REDACTED
    jwt = m.group("jwt")
    if jwt is not None and _PADDING.sub("", jwt).endswith(".."):  # "eyJ...==.." (a base64 cursor before two dots): no token
        return jwt
    return REDACTED


# every shape starts with one of these, or has "secret" (the AWS context; any case, and lower() leaves "ecret" of it):
# looked for before _SHAPES, whose alternatives Python's regex engine tries at every position (30 µs for 450
# characters of prose, against 4)
_SHAPE_START = re.compile("eyJ|A(?:KIA|SIA|BIA|CCA|3T|Iza)|gh[pousr]_|github_pat_|xox|xapp-|ya29\\.|sk-|-----BEGIN|\\([SAF]\\(")


def _may_have_shape(s: str) -> bool:
    return _SHAPE_START.search(s) is not None or "ecret" in s.lower()


def _shapes(s: str) -> str:
    """Every secret shape in ``s`` replaced by the marker (again, while a marker's brackets give a neighbour the
    boundary it lacked: ``AKIA...eyJ...`` is an AWS key id once the JWT after it has gone)."""
    if not _may_have_shape(s):
        return s
    while True:
        new = _SHAPES.sub(_shape_out, s)
        if new == s:
            return s
        s = new


# -- a cheap first look: most text holds no secret-like name at all ----------------------------
# A secret is only ever a *named* value (a JSON key, ``name=value``, ``name: value``), URL userinfo, a
# Bearer/Basic credential or a secret's shape: prose that merely mentions "token" or "key" (event data is full of
# it) is not looked at closer, which keeps the pass over a large capture's event data a regex, not a JSON parse per row.
_WORDS = ("token", "secret", "key", "auth", "passw", "passphrase", "passcode", "signature", "cookie", "credential", "jwt",
          "session", "sessid", "bearer")  # every name is_secret takes has one of these (case aside) ...
_SUBSTR_RX = "(?:" + "|".join(_ci(w) for w in _WORDS) + ")"


def _whole(word: str, rust: bool) -> str:
    """``word`` where _WORD can read it as a whole word: a lower-case start not after a lower-case letter, or a
    capital anywhere (the next character is left to the caller: no lower-case letter).  Python's form looks behind
    after the word, so that its alternative starts with a letter (Python's engine tries each alternative at each
    position: a start that any character but a lower-case letter takes made text() 2.5 times slower); Polars has no
    look-around and runs an automaton, which cares for neither."""
    if rust:
        return "(?:(?:^|[^a-z])" + _ci(word) + "|" + word[0].upper() + _ci(word[1:]) + ")"
    return "(?:" + _ci(word) + "(?<![a-z]" + _ci(word) + ")|" + word[0].upper() + _ci(word[1:]) + ")"


# ... or one of _SECRET_WORDS as a whole word ("pass" in db_pass, userPass, PASS; not in passed, bypass or passage)
_WHOLE_RX = "(?:" + "|".join(_whole(w, rust=False) for w in sorted(_SECRET_WORDS)) + ")"
_WHOLE_RUST_RX = "(?:" + "|".join(_whole(w, rust=True) for w in sorted(_SECRET_WORDS)) + ")"
_NOT_LOWER_NAME_CHAR = "[A-Z0-9_.\\-\u0130\u0131\u017f\u212a]"
# The candidate regex's alternatives, named once: a name (name characters, as _PAIR reads them) with a separator;
# a JSON key of any characters (a key is looked up whole: "api key!" is secret; up to 1 KiB of it after the word,
# so that Python's regex stays linear), its quote escaped too inside JSON in a string; userinfo; a credential
# after its scheme word; a secret's shape; an AWS secret key in its context; an escape that hides any of these
_KEY_UNIT = r"(?:[^\"\\\r\n]|\\[^\"\r\n])"
_KEY_UNIT_NOT_LOWER = r"(?:[^a-z\"\\\r\n]|\\[^\"\r\n])"
_NAME_END = r"(?:\\?[\"']|\\u002[27])?" + _WS_OR_ESC + "*[:=]"
_KEY_END = r"(?:\\?\"|\\u0022)" + _WS_OR_ESC + "*:"
_OTHER_ALT = (r":(?:/|\\/)(?:/|\\/)[^ \t\n\r\f\v/@]+@|(?:" + _ci("bearer") + "|" + _ci("basic") + ")" + _WS_OR_ESC
              + r"+(?:[A-Za-z0-9\-._~+/" + "\u0130\u0131\u017f\u212a" + r"]|\\/|\\u002[bB]){8,}")
_REST_ALT = _SHAPE_RX + "|" + _AWS_CTX_CAND + "|" + _HIDDEN_RX
# Python's: the name and the key alternatives share their word (its engine tries each alternative at each position:
# one word alternation instead of two halves the search, 54 against 28 µs for a 135-byte tools/call)
_CANDIDATE_RX = (
    "(?:" + _SUBSTR_RX + "(?:" + _NAME_CHAR + "*" + _NAME_END + "|" + _KEY_UNIT + "{0,1024}" + _KEY_END + ")"
    + "|" + _WHOLE_RX + "(?:(?:" + _NOT_LOWER_NAME_CHAR + _NAME_CHAR + "*)?" + _NAME_END
    + "|(?:" + _KEY_UNIT_NOT_LOWER + _KEY_UNIT + "{0,1023})?" + _KEY_END + "))"
    + "|" + _OTHER_ALT + "|" + _REST_ALT
)
_CANDIDATE = re.compile(_CANDIDATE_RX)
# Polars' regex engine (Rust) runs the 1 KiB-bounded key alternative very slowly: its automaton holds a
# thousand copies of the loop.  Over 100 MB of event data whose prose names tokens and keys ("... shard token
# leaf build cache ..."), the bounded regex took 9 s.  The column-wise look runs the other alternatives and the key
# alternative unbounded (0.26 s; linear in Rust), and only the rows the unbounded one alone takes are read by
# _CANDIDATE (Python, the bound): the same rows as _CANDIDATE_RX (see _is_candidate).
_NAME_ALT = ("(?:" + _SUBSTR_RX + _NAME_CHAR + "*|" + _WHOLE_RUST_RX + "(?:" + _NOT_LOWER_NAME_CHAR + _NAME_CHAR + "*)?)" + _NAME_END)
_CANDIDATE_FAST_RX = _NAME_ALT + "|" + _OTHER_ALT + "|" + _REST_ALT
_KEY_UNBOUNDED_RX = "(?:" + _SUBSTR_RX + _KEY_UNIT + "*|" + _WHOLE_RUST_RX + "(?:" + _KEY_UNIT_NOT_LOWER + _KEY_UNIT + "*)?)" + _KEY_END
_EITHER_RX = "(?:" + _CANDIDATE_FAST_RX + ")|(?:" + _KEY_UNBOUNDED_RX + ")"  # both, in one pass (_is_candidate)
# every candidate has one of these (case aside; the odd letters mapped as below), or an escape (``\\u``), or a secret's
# shape (15 characters at least; _SHAPE_START, case-sensitive as the shapes are): Python's regex engine tries each
# alternative at each position, a substring test of the lower-cased text is C's (a 200-byte JSON body: 1 against 23 µs)
_FIRST = _WORDS + tuple(_SECRET_WORDS) + ("basic", ":/", ":\\/")


def _may_be_candidate(s: str) -> bool:
    """False when ``s`` has no candidate for sure (a cheap test before _CANDIDATE's search)."""
    if s.isascii():
        low = s.lower()
    else:  # the letters an ignore-case regex takes for i, s and k that lower() leaves apart (K lowers to k)
        low = s.replace("\u0130", "i").replace("\u0131", "i").replace("\u017f", "s").lower()
    if any(w in low for w in _FIRST):
        return True
    return len(s) > 5 and ("\\u" in s or (len(s) >= 15 and _SHAPE_START.search(s) is not None))


# Exempt names trigger the first look too: the bulk of MCP traffic is JSON with "progressToken" in every
# tool call and progress notification.  A second look masks each exempt name that is a whole JSON string
# (an unescaped quote before it, its quote after it) and asks again: only text with a candidate left is
# looked at closer.  The mask hides no candidate the closer look acts on: such a string is an exempt key
# (its value keeps its own candidates) or a value that is a name alone, and to the pair rule it is a whole
# name (quotes are no name characters).  A name inside a longer string ("a progressToken b" may be a key,
# and a key is looked up whole), after an escaped quote (JSON text inside a string) or unquoted
# ("progressToken=5") is not masked.  (The quote before it is matched, not looked behind: Polars' regex
# engine has no look-around.)  Its letters are those is_secret lower-cases to the exempt name's: the Kelvin sign
# is a k there, but the long s is no s (a key "progre\u017fsToken" is no exempt name but holds "token": not masked).
_EXEMPT_LETTERS = {"k": "kK\u212a"}
_EXEMPT_RX = r'(^|[^\\])"(?:' + "|".join(
    "".join("[" + _EXEMPT_LETTERS.get(c, c + c.upper()) + "]" if c.isalpha() else c for c in name)
    for name in ("progress_?token", "mcp-session-id", "session_?id", "last-event-id")) + ')"'
_EXEMPT = re.compile(_EXEMPT_RX)
_MASK = '"________"'


def _only_exempt(s: str) -> bool:
    """Is every candidate of ``s`` (it has one) inside an exempt name?  (The second look; see _EXEMPT_RX.)"""
    return _CANDIDATE.search(_EXEMPT.sub(r"\g<1>" + _MASK, s)) is None


# -- text that is not JSON ------------------------------------------------------------------------
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^\s/?#@\"'<>]+@")
# a credential after its scheme word, wherever it stands ("sent Bearer eyJhbGciOi..."): at least
# 8 characters with a digit, so that prose ("basic usage") is left alone
_BEARER = re.compile(r"(?i)\b(bearer|basic)" + _WS + r"+(?=[A-Za-z0-9\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*")
_STOP = r"[^\s&,;\"'<>#)}\]]"
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_.\-])(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P=q)(?P<sep>" + _WS + "*[:=]" + _WS + "*)"
    r"(?P<val>\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|(?:(?:bearer|basic|digest|token|negotiate)\s+)?" + _STOP + r"+)",
    re.IGNORECASE,
)


# a protocol id's name and separator right before a value (as _PAIR reads them): "Mcp-Session-Id: ", "sessionId="
_IDENT_BEFORE = re.compile(r"(?:^|[^A-Za-z0-9_.\-])(?P<q>[\"']?)(?P<name>[A-Za-z_][A-Za-z0-9_.\-]{0,63})(?P=q)" + _WS + "*[:=]" + _WS
                           + r"*(?P<vq>[\"']?)\Z", re.IGNORECASE)
_STOP_CHAR = re.compile(_STOP)


def _ident_value(s: str, m: re.Match) -> bool:
    """Is the shape ``m`` the whole value of a protocol id's pair (``Mcp-Session-Id: eyJ...``)?  Kept then."""
    if not _SHAPE_WHOLE.fullmatch(m.group()):
        return False
    b = _IDENT_BEFORE.search(s, max(0, m.start() - 80), m.start())
    if b is None or not _is_ident(b.group("name")):
        return False
    after = s[m.end() : m.end() + 1]
    return after == b.group("vq") if b.group("vq") else not after or _STOP_CHAR.match(after) is None


def _shapes_outside_ids(s: str) -> tuple[str, list[tuple[int, int]]]:
    """:func:`_shapes` of ``s``, and the spans of the result that are protocol ids' values, kept."""
    if not _may_have_shape(s):
        return s, []
    while True:
        out, keep, last, n = [], [], 0, 0
        for m in _SHAPES.finditer(s):
            rep = _shape_out(m)
            if rep == m.group():
                continue
            if _ident_value(s, m):
                keep.append((n + m.start() - last, n + m.end() - last))
                continue
            out.append(s[last : m.start()])
            out.append(rep)
            n += m.start() - last + len(rep)
            last = m.end()
        if not out:
            return s, keep
        out.append(s[last:])
        s = "".join(out)


def _pairs(s: str) -> str:
    """Secret shapes go (but a protocol id's value that is one as a whole: ``Mcp-Session-Id: eyJ...``); then URL
    userinfo; then in ``name=value``, ``name: value`` and ``"name": "value"`` with a secret name the value goes;
    then every credential after Bearer/Basic.  Scanning resumes right after the separator of a pair that is kept,
    so a secret inside its value (``redirect=https://h/?token=x``) is still found.  (Shapes go first: each later
    step sees on a second pass the text it saw on the first, so redaction stays idempotent.)"""
    s, keep = _shapes_outside_ids(s)
    if "://" in s:
        u = _USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", s)
        if u != s:
            s, keep = _shapes_outside_ids(u)  # (the kept spans, moved)
    out, pos = [], 0
    while True:
        m = _PAIR.search(s, pos)
        if m is None:
            break
        inside = next((b for a, b in keep if a <= m.start() < b), None)
        if inside is not None:  # a kept protocol id: nothing in it is a pair
            out.append(s[pos:inside])
            pos = inside
            continue
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


def _walk(obj, keep: bool = False, ident: bool = False):
    """(redacted copy, changed?) of a parsed JSON value.  ``keep``: the value of a _KEEP_VALUE key (only secret
    shapes go); ``ident``: the value of a protocol id (kept when it is a secret's shape as a whole)."""
    if isinstance(obj, dict):
        changed = False
        out = {}
        for k, v in obj.items():
            k2 = _shapes(k) if len(k) > 15 else k  # a key that is a token (every shape is longer than 15 characters)
            changed = changed or k2 != k
            if is_secret(k):
                out[k2] = REDACTED
                changed = changed or v != REDACTED
            else:
                out[k2], c = _walk(v, k in _KEEP_VALUE, _is_ident(k))
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
    if isinstance(obj, str):
        if ident and _SHAPE_WHOLE.fullmatch(obj):
            return obj, False
        if keep:
            new = _shapes(obj) if len(obj) > 15 else obj
        elif _CANDIDATE.search(obj):
            new = _pairs(obj)
        else:
            return obj, False
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


_PARAM_SPLIT = re.compile("([&;])")


def _params(part: str) -> str:
    """Query or fragment ``a=1&b=2`` (or ``;`` between them): values of secret names go, and secret shapes
    wherever they stand (a protocol id's value that is one as a whole stays); the rest stays byte for byte."""
    shaped = len(part) > 15 and _may_have_shape(part)
    if "=" not in part and not shaped:
        return part
    out = []
    for piece in _PARAM_SPLIT.split(part) if ";" in part else part.split("&"):
        name, eq, value = piece.partition("=")
        if eq:
            name = unquote_plus(name)
            if _url_param_secret(name):
                piece = piece[: piece.index("=")] + "=" + REDACTED
            elif shaped and not (_is_ident(name) and _SHAPE_WHOLE.fullmatch(unquote_plus(value))):
                piece = _shapes(piece)
        elif shaped:
            piece = _shapes(piece)
        out.append(piece)
    return "".join(out) if ";" in part else "&".join(out)


_PATH_PARAM = re.compile(r";([^;/=?#]*)=([^;/?#]*)")
# in a path, a session id goes under any of its names (the exempt "sessionid" is MCP's in a query or a header)
_PATH_SESSION = frozenset({"sessionid", "sid"})


def _path(path: str) -> str:
    """Path parameters (``/cart;jsessionid=ABC123``) with a secret name lose their value; secret shapes go."""
    if ";" in path:
        path = _PATH_PARAM.sub(
            lambda m: ";" + m.group(1) + "=" + REDACTED
            if _url_param_secret(unquote_plus(m.group(1))) or _normal(unquote_plus(m.group(1))) in _PATH_SESSION else m.group(), path)
    return _shapes(path) if len(path) > 15 else path


def url(u: str | None, enabled: bool = True) -> str | None:
    """Userinfo, values of secret query, fragment and path parameters, and secret shapes, replaced by the marker."""
    if not enabled or not u:
        return u
    if u.isascii() and "@" not in u and "=" not in u and "[" not in u and "]" not in u and not _may_have_shape(u):
        # no userinfo, no parameter, no secret shape, and one urlsplit takes (no IPv6 brackets; nothing NFKC could turn
        # into a delimiter): nothing below would change it (4 of a JSONL request line's 26 µs went to the split)
        return u
    return _url_whole(u)


def _url_whole(u: str) -> str:
    """:func:`url` without its first look."""
    try:
        parts = urlsplit(u)
    except ValueError:  # not a URL urllib can split (a bad IPv6 literal): redact it as text
        return _pairs(u)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = REDACTED + "@" + netloc.rpartition("@")[2]
    new = parts._replace(netloc=netloc, path=_path(parts.path), query=_params(parts.query), fragment=_params(parts.fragment))
    if new == parts:
        return u
    return urlunsplit(new)


# -- columns (the Builder's events and messages) -----------------------------------------------------

def _is_candidate(series):
    """``series.str.contains(_CANDIDATE_RX)`` (nulls false), without running its bounded alternative in Polars."""
    import polars as pl

    # one pass over every value with both alternatives, and the fast one alone over the values that pass takes: the
    # rest of those the key alternative alone takes (1M events' data, 326k taken: 0.34 -> 0.25 s; both alternatives
    # over every value before)
    got = series.str.contains(_EITHER_RX).fill_null(False)
    if not got.any():
        return got
    taken = got.arg_true()
    fast = series.gather(taken).str.contains(_CANDIDATE_FAST_RX).fill_null(False)
    if not fast.all():
        idx = taken.filter(~fast)
        exact = pl.Series([_CANDIDATE.search(v) is not None for v in series.gather(idx).to_list()], dtype=pl.Boolean)
        got = got.scatter(idx, exact)  # (in place: ``got`` is this function's own)
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
