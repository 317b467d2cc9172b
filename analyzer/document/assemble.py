"""The findings document's shape, decided once for every engine: its order, its numbering, its summary, its top level.

The single pass (``build.build_document`` + :func:`assemble`), the in-memory merge of partitions
(``partitions.merge``) and the spilling writer (``spill.write``) all build the same document; what
decides its shape is here:

* :func:`finding_key` -- the order of findings (worst first, then in history order, then a key that
  does not depend on how the document was assembled);
* :func:`fingerprint` -- a finding's identity across runs, from its content;
* :class:`Numbering` -- the ``x``/``s``/``f`` references of partial documents renumbered as a single pass
  numbers them (exchanges in history order), their sessions and reconnects named over all of them
  (:class:`Names`; a name is the thing's own, :mod:`analyzer.document.names`);
* :class:`Summary` -- the counts of ``summary``, added up item by item (so a writer that never holds
  the document can count as it goes);
* :func:`assemble` -- the document's top level, in its order.
"""
from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timezone

from analyzer import __version__, catalog
from analyzer.document import calls_hit
from analyzer.document import names
from analyzer.errors import AuditError, InputError

SCHEMA_VERSION = "1"
SEVERITIES = list(catalog.SEVERITIES)
SEV_RANK = {s: i for i, s in enumerate(SEVERITIES)}
ANOMALY_SEVERITIES = ("error", "warning", "info")
# references renumbered (or, for a collision, renamed) between partial documents and the whole: not part of what orders findings
_RENUMBERED = frozenset({"id", "session", "boundary", "exchange"})


# within a severity, what the application got wrong comes before how the stream broke
FIRST_RULES = frozenset({"wrong_result_delivered"})


def finding_key(rec: dict, pos: int) -> tuple:
    """Where a finding goes: worst first (within a severity, the rules of FIRST_RULES first), then where its history is (``pos``: its exchange's place, -1
    for none), then rule and message, and at last the rest of the record as canonical JSON, without the
    references each engine numbers its own way, so the order never depends on the order the rules
    produced rows in or on how the document was assembled (audit jobs diff two runs)."""
    return _key_head(rec, pos) + (_canonical(rec),)


def _key_head(rec: dict, pos: int) -> tuple:
    return key_head(rec["severity"], rec["rule"], pos, rec["message"])


def key_head(severity: str, rule: str, pos, message: str) -> tuple:
    """:func:`finding_key` without its last part, from the four keys it reads."""
    return (SEV_RANK[severity], rule not in FIRST_RULES, pos, rule, message)


def _canonical(rec: dict) -> str:
    rest = {k: v for k, v in rec.items() if k not in _RENUMBERED and not k.startswith("_")}
    return json.dumps(rest, sort_keys=True, default=str)


def finding_order(recs: list[dict], positions: list) -> list[int]:
    """The places of ``recs`` (``positions``: each one's ``pos``) in :func:`finding_key` order, the same order, but the
    canonical JSON of a record (its last part) made only for the records that tie on everything before it: a key per
    finding held through the sort was a copy of every finding as text (60,000 reconnect findings, one per reconnect
    and each at its own exchange, none tied: bench/SCALE.md)."""
    return order_of([_key_head(r, p) for r, p in zip(recs, positions)], lambda i: _canonical(recs[i]))


def order_of(heads: list[tuple], canonical: Callable[[int], str]) -> list[int]:
    """:func:`finding_order` from each finding's :func:`key_head` (``heads``) and the canonical JSON of the ``i``-th
    (``canonical(i)``), asked only of the findings that tie on their heads (document/finding_rows.py makes it from a frame)."""
    order = sorted(range(len(heads)), key=heads.__getitem__)
    out, at = [], 0
    while at < len(order):  # bounded: each pass moves past one run of equal heads
        end = at + 1
        while end < len(order) and heads[order[end]] == heads[order[at]]:
            end += 1
        run = order[at:end]
        if len(run) > 1:  # (a stable sort: records equal in every part keep their order, as with the whole key)
            run.sort(key=canonical)
        out += run
        at = end
    return out


def fingerprint(rule: str, session_id: str | None, time: str | None, subject: str | None) -> str:
    """A finding's identity across runs: its rule, its Mcp-Session-Id, the time of the exchange it is found at and
    what it is about in the wire's terms (``subject``: event ids, the Last-Event-ID sent, the calls hit; each rule
    says, rules/shape.subject).  Not its place (``f3``, a line number, a file name: the same traffic in a moved
    or re-ingested archive keeps its fingerprints) and not its wording (a reworded message keeps them too).
    24 hex digits of a sha256: 96 bits, no collision in any archive's findings."""
    text = "\x1e".join((rule, session_id or "", time or "", subject or ""))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]


def generated_at() -> str:
    """The document's time: SOURCE_DATE_EPOCH when set (reproducible output), else now.

    Per https://reproducible-builds.org/specs/source-date-epoch/ the value is an ASCII decimal count of
    seconds since 1970-01-01 UTC; a malformed one is an error, never silently replaced by the clock
    (a job that sets it wants byte-identical output).  Empty counts as unset.
    """
    epoch = os.environ.get("SOURCE_DATE_EPOCH", "")
    if not epoch:
        return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if not (epoch.isascii() and epoch.isdigit()):
        raise AuditError(f"SOURCE_DATE_EPOCH={epoch[:40]!r} is not a number of seconds since 1970-01-01 UTC (unset it, or set e.g. 1767225600)")
    try:
        when = datetime.fromtimestamp(int(epoch), timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise AuditError(f"SOURCE_DATE_EPOCH={epoch[:40]} is past the year 9999") from None
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def head() -> dict:
    """The document's first keys."""
    return {"schema_version": SCHEMA_VERSION, "tool": {"name": "mcp-sse-audit", "version": __version__}, "generated_at": generated_at()}


class Summary:
    """``summary``'s counts, added up one item at a time."""

    def __init__(self) -> None:
        from analyzer.catalog import VERDICT_ORDER

        self.items = {"session": 0, "exchange": 0, "boundary": 0, "anomaly": 0}
        self.verdicts = {v: 0 for v in VERDICT_ORDER}
        self.findings = {s: 0 for s in SEVERITIES}
        self.anomalies = {s: 0 for s in ANOMALY_SEVERITIES}
        self.events = self.messages = 0

    def add(self, kind: str, rec: dict) -> None:
        """One item of the document (``kind``: session, exchange, boundary, finding, anomaly)."""
        if kind == "boundary":
            self.verdicts[rec["verdict"]] += 1
        elif kind == "finding":
            self.findings[rec["severity"]] += 1
            return
        elif kind == "anomaly":
            self.anomalies[rec["severity"]] += 1
        self.items[kind] += 1

    def add_body(self, body: dict, anomaly_rows: list[dict]) -> "Summary":
        from analyzer.document.records import Records

        for kind, key in (("session", "sessions"), ("exchange", "exchanges"), ("boundary", "boundaries"), ("finding", "findings")):
            records = body[key]
            if isinstance(records, Records):  # counted from its columns, without making its dicts (or a slice of them)
                if kind == "finding":
                    for severity in records.column("severity"):
                        self.findings[severity] += 1
                    continue
                self.items[kind] += len(records)
                if kind == "boundary":
                    for verdict in records.column("verdict"):
                        self.verdicts[verdict] += 1
                continue
            for rec in records:
                self.add(kind, rec)
        for rec in anomaly_rows:
            self.add("anomaly", rec)
        return self

    def to_dict(self, input_rows: list[dict], skipped: int) -> dict:
        """The summary; ``skipped``: the files passed over (``skipped[]``).  How each count is defined, and worded by
        every output: :mod:`analyzer.document.facts`."""
        return {
            "inputs": len(input_rows),
            "inputs_unreadable": sum(1 for r in input_rows if r.get("error")),
            "inputs_skipped": skipped,
            "records": sum(r["records"] for r in input_rows),
            "rejected": sum(r["rejected"] for r in input_rows),
            "sessions": self.items["session"],
            "exchanges": self.items["exchange"],
            "events": self.events,
            "messages": self.messages,
            "boundaries": self.items["boundary"],
            "verdicts": self.verdicts,
            "findings_by_severity": self.findings,
            "anomalies": self.items["anomaly"],
            "anomalies_by_severity": self.anomalies,
        }


def unreadable_rows(errors: list[InputError]) -> list[dict]:
    """An anomaly row for each input that could not be read at all."""
    return [{"source": e.source, "location": "file", "code": "input_unreadable", "severity": "error", "message": e.reason} for e in errors]


def assemble(
    input_rows: list[dict], errors: list[InputError], skipped: list[str], body: dict, events: int, messages: int, anomaly_rows: list[dict]
) -> dict:
    """The findings document around ``body`` (sessions, exchanges, boundaries, findings), with its summary."""
    anomaly_rows = list(anomaly_rows) + unreadable_rows(errors)
    summary = Summary().add_body(body, anomaly_rows)
    summary.events, summary.messages = events, messages
    return {
        **head(),
        "summary": summary.to_dict(input_rows, len(skipped)),
        "inputs": input_rows,
        "skipped": skipped,
        **body,
        "anomalies": anomaly_rows,
        "calls_hit": calls_hit.of(body),
    }


def passed_over(doc: dict, skipped: list[str]) -> None:
    """The files a run passed over (a store's analysis: those of the PATHs it ingested first) put in its document,
    which counts them as a run over the files does (``summary.inputs_skipped``: :mod:`analyzer.document.facts`)."""
    doc["skipped"] = sorted(skipped)
    doc["summary"]["inputs_skipped"] = len(doc["skipped"])


class Names:
    """The names of partial documents' sessions and reconnects, made again over all of them (names.py).

    A partition names what it holds as a single pass would; only where two partitions hold different
    identities with one short name (a collision :func:`analyzer.document.names.shortest` resolves) does
    the whole give another name.  :meth:`see_session` and :meth:`see_boundary` every partial record
    (a boundary with the ``_identity`` of ``keep_pos``), then :meth:`make`."""

    def __init__(self) -> None:
        self._sids: dict[tuple[int, str], str] = {}  # (part, local name) -> Mcp-Session-Id
        self._b: list[tuple[int, str, str, str, str | None, str]] = []  # part, local id, local session, identity, started, where
        self.session: dict[tuple[int, str], str] = {}
        self.boundary: dict[tuple[int, str], str] = {}

    def see_session(self, part: int, s: dict) -> None:
        self._sids[(part, s["session"])] = s["session_id"]

    def see_boundary(self, part: int, b: dict) -> None:
        req = b.get("request") or {}
        self._b.append((part, b["boundary_id"], b["session"], b["_identity"], b.get("started"), f"{req.get('source')}\x1f{req.get('location')}"))

    def make(self) -> "Names":
        named = names.session_names(self._sids.values())
        self.session = {k: named[sid or ""] for k, sid in self._sids.items()}
        got = names.reconnect_names([self.session[(p, s)] for p, _, s, _, _, _ in self._b], [i for *_, i, _, _ in self._b],
                                    [t for *_, t, _ in self._b], [w for *_, w in self._b])
        self.boundary = {(p, old): new for (p, old, *_), new in zip(self._b, got, strict=True)}
        return self


class Numbering:
    """Partial documents' references made global: ``x``/``s``/``f`` renumbered as a single pass numbers the
    whole (exchanges in history order), sessions and reconnects by their names (:class:`Names`).

    ``gpos[part][lpos]``: the global history position of partition ``part``'s exchange ``x<lpos+1>``."""

    def __init__(self, gpos: list[list[int]], names: Names) -> None:
        self.gpos = gpos
        self.names = names

    def x(self, part: int, ref: str | None) -> int | None:
        """The global position of a local ``x``/``s`` reference."""
        return None if ref is None else self.gpos[part][int(ref[1:]) - 1]

    def _ref(self, part: int, ref: str | None, prefix: str) -> str | None:
        g = self.x(part, ref)
        return None if g is None else f"{prefix}{g + 1}"

    def _session(self, part: int, local: str | None) -> str | None:
        return None if local is None else self.names.session[(part, local)]

    def session(self, part: int, s: dict) -> tuple[int, dict]:
        """A session with its global name, and its first exchange's global position (sessions are in that order);
        its ``_pos`` is dropped."""
        g = self.gpos[part][s.pop("_pos")]
        s["incident"] = self._session(part, s["incident"])  # (the name of its first session: a session of its partition)
        s["session"] = self._session(part, s["session"])
        return g, s

    def exchange(self, part: int, e: dict) -> dict:
        e["exchange_id"] = self._ref(part, e["exchange_id"], "x")
        e["stream"] = self._ref(part, e["stream"], "s")
        e["session"] = self._session(part, e["session"])
        return e

    def boundary(self, part: int, b: dict) -> dict:
        """A boundary with global references and name; its ``_identity`` is dropped."""
        del b["_identity"]
        b["boundary_id"] = self.names.boundary[(part, b["boundary_id"])]
        b["request_exchange"] = self._ref(part, b["request_exchange"], "x")
        b["resumes_exchange"] = self._ref(part, b["resumes_exchange"], "x")
        b["reaction_exchange"] = self._ref(part, b.get("reaction_exchange"), "x")
        b["owed_requests"] = sorted((self._ref(part, r, "x") for r in b.get("owed_requests") or []), key=lambda r: int(r[1:]))
        b["stream"] = self._ref(part, b["stream"], "s")
        b["session"] = self._session(part, b["session"])
        return b

    def finding(self, part: int, f: dict) -> dict:
        """A finding with global references and its history place as ``_g``."""
        f["session"] = self._session(part, f["session"])
        pos = f.pop("_pos", None)
        f["_g"] = self.gpos[part][pos] if pos is not None else -1
        f["exchange"] = self._ref(part, f.get("exchange"), "x")
        if f.get("boundary"):
            f["boundary"] = self.names.boundary[(part, f["boundary"])]
        return f


def number_findings(findings: Iterable[dict]) -> Iterator[dict]:
    """Findings (with ``_g``) in :func:`finding_key` order, given ``f<n>`` ids; the ``_g`` is dropped."""
    for n, f in enumerate(findings, start=1):
        del f["_g"]
        f["id"] = f"f{n}"
        yield f
