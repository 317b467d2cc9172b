"""The value an analysis returns: :class:`Audit`, the findings document with its tables as Polars frames.

``analyzer.audit(...)`` returns one (analyzer/api.py), and the command line makes one of every document it holds
whole (analyzer/run.py): the outputs are written and the exit code decided from it, the same way for both.

Its frames have stable schemas, :data:`SCHEMAS`: the columns of the findings JSON's arrays (schemas/findings.schema.json),
in its order, with its times as UTC datetimes (``started``, ``ended``, ``first_seen``, ``last_seen``, ``time``,
``ts``) and ``sessions.verdicts`` a struct of every verdict's count.  ``schemas/audit-frames.json`` is this table,
written out (``python tests/test_api.py --write``).  Columns are never renamed or retyped; new ones are added at the end.
"""
from __future__ import annotations

import copy
from functools import cached_property

import polars as pl

from analyzer import exits
from analyzer.anomalies import occurrences
from analyzer.catalog import VERDICTS

_S, _I, _B = pl.String, pl.Int64, pl.Boolean
_T = pl.Datetime("us", "UTC")
_REF = pl.Struct({"source": _S, "location": _S})
_EVENT = pl.Struct({"id": _S, "event": _S, "data": _S, "digest": _S, "fate": _S, "ts": _S, "source": _S, "location": _S})

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "sessions": {
        "session": _S, "incident": _S, "session_id": _S, "protocol_version": _S, "era": _S, "id_scheme": _S, "first_seen": _T,
        "last_seen": _T, "exchanges": _I, "streams": _I, "events": _I, "boundaries": _I,
        "verdicts": pl.Struct({v.name: _I for v in VERDICTS}), "initialize_results": _I, "sources": pl.List(_S),
        "client": pl.Struct({"family": _S, "user_agent": _S, "name": _S, "version": _S}),
    },
    # one row per HTTP exchange (a POST's answer or a GET's SSE stream); ``stream`` names the stream it belongs to
    "streams": {
        "exchange_id": _S, "session": _S, "session_id": _S, "stream": _S, "source": _S, "location": _S, "conn": _S, "started": _T,
        "ended": _T, "method": _S, "url": _S, "status": _I, "content_type": _S, "last_event_id": _S, "end_reason": _S,
        "body_recorded": _B, "events": _I, "cut_off_events": _I, "first_id": _S, "last_id": _S, "event_offsets_ms": pl.List(_I),
        "cut_off_offsets_ms": pl.List(_I),
    },
    # one row per reconnect (the document's boundaries); its events are :attr:`Audit.events`
    "reconnects": {
        "boundary_id": _S, "session": _S, "session_id": _S, "stream": _S, "request": _REF, "request_exchange": _S, "resumes_exchange": _S,
        "resumes": _REF, "last_event_id": _S, "last_before": _S, "first_event_id_after": _S, "verdict": _S, "rule_id": _S, "evidence": _S,
        "reason": _S, "severity": _S, "lost_event_ids": pl.List(_S), "lost_count": _I, "duplicated_event_ids": pl.List(_S),
        "duplicated_count": _I, "handled_correctly": _B, "reaction_exchange": _S, "owed_requests": pl.List(_S), "call": _S,
        "call_answered": _B,
        "wrong_result": pl.Struct({"call": _S, "got": _S, "preview": _S, "client": _S, "outcome": _S, "resumed_call": _S}),
        "id_scheme": _S, "boundary_event_resent": _B, "started": _T,
        "http": pl.Struct({"method": _S, "status": _I, "request_session_id": _S, "response_session_id": _S, "protocol_version": _S,
                           "content_type": _S, "replay_epoch_before": _S, "replay_epoch_after": _S, "end_reason": _S}),
        "views": pl.List(_REF),
    },
    # the calls a reconnect touched, one outcome each (the document's calls_hit)
    "calls": {"call": _S, "session": _S, "session_id": _S, "outcome": _S, "said": _S, "reconnect": _S, "detail": _S, "time": _T},
    "findings": {
        "id": _S, "fingerprint": _S, "rule": _S, "severity": _S, "session": _S, "session_id": _S, "boundary": _S, "exchange": _S,
        "time": _T, "message": _S, "effect": _S, "what": _S, "next_step": _S, "evidence": pl.List(_REF), "attempts": _I,
        "attempts_span": pl.List(_S), "seen_in": pl.List(_S), "baseline": _S,
    },
    # the events around each reconnect: the last ones the resumed connection delivered (side "before"), the first ones
    # on the reconnect ("after") and the ones the disconnect cut off ("cut_off_before")
    "events": {"reconnect": _S, "session_id": _S, "side": _S, "id": _S, "event": _S, "data": _S, "digest": _S, "fate": _S, "ts": _T,
               "source": _S, "location": _S},
    "anomalies": {"source": _S, "location": _S, "code": _S, "severity": _S, "message": _S},
}
# where each frame comes from in the findings document
FIELDS = {"sessions": "sessions", "streams": "exchanges", "reconnects": "boundaries", "calls": "calls_hit", "findings": "findings",
          "anomalies": "anomalies"}
EVENT_SIDES = (("before", "events_before"), ("after", "events_after"), ("cut_off_before", "cut_off_before"))


def _times(schema: dict[str, pl.DataType]) -> list[str]:
    return [name for name, dtype in schema.items() if dtype == _T]


def frame(rows: list[dict], schema: dict[str, pl.DataType]) -> pl.DataFrame:
    """Document records as a frame of ``schema``: missing keys null, the RFC 3339 times parsed."""
    times = _times(schema)
    raw = {name: (_S if name in times else dtype) for name, dtype in schema.items()}
    df = pl.DataFrame(rows, schema=raw, strict=False)
    return df.with_columns(pl.col(t).str.to_datetime("%Y-%m-%dT%H:%M:%S%.fZ", time_unit="us", time_zone="UTC", strict=False)
                           for t in times)


class Audit:
    """One analysis: the findings document and its tables as Polars frames.

    ``document``: the findings document (``--json``'s); ``readable``: inputs that yielded records; ``notes``: what the
    analysis warned about; ``lost``: an input named that could not go into a store; ``store``: it read a store (a store
    holding no record is not "empty captures")."""

    def __init__(self, document: dict, readable: int = 1, notes: list[str] | tuple = (), lost: bool = False, store: bool = False) -> None:
        self.document = document
        self.readable = readable
        self.notes = list(notes)
        self.lost = lost
        self.store = store

    def __repr__(self) -> str:
        s = self.summary
        return (f"Audit({s.get('inputs', 0)} inputs, {s.get('sessions', 0)} sessions, {s.get('boundaries', 0)} reconnects, "
                f"{sum((s.get('findings_by_severity') or {}).values())} findings)")

    @property
    def summary(self) -> dict:
        """The document's summary: counts of inputs, sessions, exchanges, reconnects by verdict, findings by severity..."""
        return self.document.get("summary") or {}

    def _plain(self, field: str) -> list[dict]:
        from analyzer.document.records import Records

        items = self.document.get(field) or []
        return items.rows() if isinstance(items, Records) else items

    def _frame(self, kind: str) -> pl.DataFrame:
        return frame(self._plain(FIELDS[kind]), SCHEMAS[kind])

    sessions = cached_property(lambda self: self._frame("sessions"))
    streams = cached_property(lambda self: self._frame("streams"))
    reconnects = cached_property(lambda self: self._frame("reconnects"))
    calls = cached_property(lambda self: self._frame("calls"))
    findings = cached_property(lambda self: self._frame("findings"))
    anomalies = cached_property(lambda self: self._frame("anomalies"))

    @cached_property
    def events(self) -> pl.DataFrame:
        rows = [{"reconnect": b["boundary_id"], "session_id": b["session_id"], "side": side, **e}
                for b in self._plain("boundaries") for side, key in EVENT_SIDES for e in b.get(key) or ()]
        return frame(rows, SCHEMAS["events"])

    # --- the exit code --------------------------------------------------------------------------------------

    def decision(self, fail_on: str = "error", lost: bool | None = None) -> tuple[int, str | None]:
        """:func:`analyzer.exits.analyze` of this document: the exit code and the line that explains a 2."""
        doc = self.document if self.document.get("summary") else None
        encrypted = occurrences(doc["anomalies"], "tls_not_decrypted") if doc else 0
        lost = exits.lost_input(self.lost if lost is None else lost, fail_on)
        hollow = self.readable > 0 and not self.store and doc is not None and doc["summary"].get("records", 0) == 0
        return exits.analyze(doc and doc["summary"], fail_on, encrypted, lost, readable=self.readable > 0, hollow=hollow)

    def exit_code(self, fail_on: str = "error", baseline: str | None = None) -> int:
        """The exit code ``mcp-sse-audit analyze`` would end with: 0 clean, 1 findings at or above ``fail_on`` (with
        ``baseline``, a findings file of an earlier run: new ones only) or damaged input at error or warning, 2 nothing
        readable or nothing to judge.  The document is left as it is (see :meth:`with_baseline`)."""
        audit = self if baseline is None else self.with_baseline(baseline)
        return audit.decision(fail_on)[0]

    def with_baseline(self, baseline: str) -> "Audit":
        """A copy whose findings are marked ``new`` or ``known`` against ``baseline`` (a findings JSON or JSON Lines of
        an earlier run, or an accepted baseline), its summary tallied: what ``--baseline`` does."""
        from analyzer.document import baseline as baselines

        doc = dict(self.document)
        doc["summary"] = copy.deepcopy(self.summary)
        doc["findings"] = [dict(f) for f in self._plain("findings")]
        baselines.apply(doc, baselines.load(baseline))
        return Audit(doc, self.readable, self.notes, self.lost, self.store)

    # --- the outputs ----------------------------------------------------------------------------------------

    def write_json(self, path: str = "-") -> None:
        """The findings JSON (``--json``), whole or not at all; ``-``: standard output."""
        from analyzer import outputs

        outputs.write_one(self.document, "json", path)

    def write_json_lines(self, path: str = "-") -> None:
        """The findings as JSON Lines (``--json-lines``): a summary line, then one line per record, with ``type``."""
        from analyzer import outputs

        outputs.write_one(self.document, "json_lines", path)

    def write_html(self, path: str = "-") -> None:
        """The HTML incident report (``--html``)."""
        from analyzer import outputs

        outputs.write_one(self.document, "html", path)

    def write_junit(self, path: str = "-", fail_on: str = "error") -> None:
        """JUnit XML (``--junit``): a case per reconnect, failed by its findings at or above ``fail_on``."""
        from analyzer import outputs

        outputs.write_one(self.document, "junit", path, fail_on)
