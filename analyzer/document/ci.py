"""The findings document for CI: JUnit XML for test reporters, GitHub Actions workflow commands for annotations.

Both are pure functions of the plain document (``json.load`` of ``--json``) and ``--fail-on``; the CLI writes
what they return.  What fails is what fails the exit code (:func:`analyzer.exits.fails`): a finding at or
above ``fail_on`` that is not ``"baseline": "known"``, and -- at ``--fail-on error`` or ``warning`` only --
damaged input: an ``error``-severity anomaly (an input unreadable, cut short or corrupt, a record lost; an input
row with an ``error`` has one too).  Damaged input is not a finding: it is a test *error* (the check could not
run on all of its input), a finding a test *failure*, as JUnit tells the two apart.

* :func:`junit_xml` -- one ``<testsuite>`` per session with reconnects or findings, one ``<testcase>`` per
  reconnect (boundary) and one per finding tied to no boundary.  A CI server keeps a test's history by its
  suite, class and case names, so they are names that every run gives alike (analyzer/document/names.py):
  the suite the session's name (and Mcp-Session-Id), a reconnect's case ``reconnect <its name>``, a
  finding's ``<rule> <fingerprint>``; never a position, a verdict, a file or a line.  A case fails with **one** ``<failure>`` that
  lists each of its findings at or above ``fail_on`` (type: the worst one's rule): GitLab's parser reads the
  ``failure`` key of a case as one value (two become an array) and Jenkins' CaseResult reads the first, and reporters count
  ``failures`` as failed cases (``passed = tests - failures - skipped``), so a case never carries two.  A case
  whose every failing finding is known (in the baseline) is ``<skipped message="known: in the baseline"/>``:
  the reporter shows how many accepted problems there are, and a case is never failed and skipped at once.
  At ``--fail-on error`` or ``warning`` a last suite, ``inputs``, has one case per input, in error for its
  error-severity anomalies (:func:`_input_cases`).
* :func:`github_annotations` -- one ``::error``/``::warning``/``::notice`` line per failing finding, worst
  first (GitHub shows 10 of each type per step), then one ``::error`` per damaged input (at ``--fail-on error``
  or ``warning``), then one ``::notice`` summary line.

Log content is hostile data: every string from the document goes through :func:`visible` (control, bidi and
separator characters, lone surrogates, shown as ``\\xNN``/``\\uNNNN``), so the XML is well-formed XML 1.0 and
no annotation can end its line; the workflow-command escapes are then exactly those of GitHub's toolkit.
"""
from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field

from analyzer import exits
from analyzer.document.assemble import SEV_RANK
from analyzer.document.facts import baseline_headline, plural as _plural

FAIL_ON = exits.FAIL_LEVELS
KNOWN = "known: in the baseline"
TOOL = "mcp-sse-audit"

# C0/C1 controls but tab and newline (XML 1.0 cannot carry most of them; ESC drives terminals), DEL, zero-width
# and bidi controls, U+2028/2029 (line breaks to some readers), BOM, lone surrogates (not encodable: JSON's
# "\ud800" decodes to one) and U+FFFE/U+FFFF (not XML characters).  The HTML report's set (report/common.py) and more.
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff\ufffe\uffff]")
_LINE = re.compile(r"line ([1-9][0-9]{0,11})(?: .*)?", re.S)  # JSONL: "line 12" (or "line 12 byte 30")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_NOT_FILES = ("-", "/dev/stdin")
# GitLab attaches [[ATTACHMENT|path]] found in a failed case's system-out (lib/gitlab/ci/parsers/test/junit.rb,
# ATTACHMENT_TAG_REGEX): log content must not choose what the merge request links to
_ATTACHMENT = re.compile(r"\[\[(?=ATTACHMENT\|)")


def visible(value) -> str:
    """``value`` as text with nothing invisible or line-breaking in it but tab and newline."""
    return _INVISIBLE.sub(lambda m: f"\\x{ord(m[0]):02x}" if ord(m[0]) < 0x100 else f"\\u{ord(m[0]):04x}", str(value))


def fails(finding: dict, fail_on: str) -> bool:
    """Does this finding fail the run: at or above ``fail_on`` and not known from the baseline?"""
    return at_or_above(finding, fail_on) and not is_known(finding)


def at_or_above(finding: dict, fail_on: str) -> bool:
    return exits.at_or_above(finding.get("severity"), fail_on)


def is_known(finding: dict) -> bool:
    return finding.get("baseline") == "known"


def session_label(session: str | None, session_id: str | None) -> str:
    """``Sk3vq7m2a cea68db5a89b…`` as the terminal summary names a session (the whole id is a suite property)."""
    if session is None:
        return "no session"
    if not session_id:
        return f"{session} (no Mcp-Session-Id)"
    return f"{session} {session_id if len(session_id) <= 12 else session_id[:12] + '…'}"


def _where(ref: dict | None) -> str:
    return f"{ref.get('source')} {ref.get('location')}" if ref else "?"


def _session_order(doc: dict):
    """The suites' order: the document's (sessions in history order), a name it does not list after them by
    name, no session last."""
    place: dict[str, int] = {}
    for s in doc.get("sessions") or []:
        place.setdefault(s.get("session"), len(place))

    def key(name: str | None) -> tuple:
        if name is None:
            return (2, 0, "")
        return (0, place[name], "") if name in place else (1, 0, str(name))

    return key


# ---------------------------------------------------------------- JUnit XML


@dataclass
class _Case:
    name: str
    session: str | None
    findings: list[dict]
    about: list[str] = field(default_factory=list)  # system-out's first lines: what the case is


def _finding_text(f: dict) -> str:
    lines = [f"{f.get('id')} [{f.get('severity')}] {f.get('rule')}: {f.get('message')}"]
    if f.get("effect"):
        lines.append(f"effect: {f['effect']}")
    lines.append("evidence: " + "; ".join(_where(e) for e in f.get("evidence") or []))
    if f.get("seen_in"):
        lines.append("seen in: " + ", ".join(f["seen_in"]))
    if f.get("fingerprint"):
        lines.append(f"fingerprint: {f['fingerprint']}")
    return "\n".join(lines)


def later_attempts(boundaries: list[dict], findings: list[dict]) -> dict[str, tuple[int, int, dict]]:
    """Boundary id -> (k, n, the finding) for the later attempts of a retried reconnect: attempt k of n, whose
    finding is reported once, on its first attempt (``attempts``: how many); the others are the next ones of its
    stream (rules/reconnects.py runs are consecutive reconnects of one stream)."""
    of_stream: dict[tuple, list[str]] = defaultdict(list)
    for b in boundaries:
        of_stream[(b.get("session"), b.get("stream"))].append(b["boundary_id"])
    stream_of = {b["boundary_id"]: (b.get("session"), b.get("stream")) for b in boundaries}
    out: dict[str, tuple[int, int, dict]] = {}
    for f in findings:
        n, first = f.get("attempts") or 1, f.get("boundary")
        if n > 1 and first in stream_of:
            run = of_stream[stream_of[first]]
            at = run.index(first)
            for k, bid in enumerate(run[at + 1: at + n], start=2):
                out.setdefault(bid, (k, n, f))
    return out


def _repeats(boundaries: list[dict], findings: list[dict]) -> dict[str, str]:
    """Boundary id -> a note for the later attempts of a retried reconnect, which pass: the finding is counted once."""
    return {bid: f"attempt {k} of {n} of the reconnect {f.get('boundary')}: its finding {f.get('id')} ({f.get('rule')}) is reported there, once"
            for bid, (k, n, f) in later_attempts(boundaries, findings).items()}


def _cases(doc: dict) -> list[_Case]:
    boundaries = list(doc.get("boundaries") or [])
    findings = list(doc.get("findings") or [])
    ids = {b["boundary_id"] for b in boundaries}
    attached: dict[str, list[dict]] = defaultdict(list)
    for f in findings:
        if f.get("boundary") in ids:
            attached[f["boundary"]].append(f)
    repeats = _repeats(boundaries, findings)
    cases = []
    for b in boundaries:
        about = [
            f"reconnect {b['boundary_id']}: verdict {b.get('verdict')}, severity {b.get('severity') or 'none'}",
            f"reason: {b.get('reason')}",
            f"request: {_where(b.get('request'))}",
        ]
        if b.get("resumes"):
            about.append(f"resumes: {_where(b['resumes'])}")
        if b.get("lost_count") or b.get("duplicated_count"):
            about.append(f"events lost: {b.get('lost_count') or 0}, duplicated: {b.get('duplicated_count') or 0}")
        if b["boundary_id"] in repeats:
            about.append(repeats[b["boundary_id"]])
        # named by the reconnect's name alone: the same in every run (its verdict, file and line are in system-out)
        cases.append(_Case(f"reconnect {b['boundary_id']}", b.get("session"), attached.get(b["boundary_id"], []), about))
    for f in findings:  # tied to no reconnect: a case of its own, named by its rule and fingerprint (its identity across runs)
        if f.get("boundary") not in ids:
            ev = (f.get("evidence") or [None])[0]
            about = [f"finding {f.get('id')} (tied to no reconnect) at {_where(ev)}"]
            cases.append(_Case(f"{f.get('rule')} {f.get('fingerprint') or f.get('id')}", f.get("session"), [f], about))
    return cases


def _testcase(suite: ET.Element, case: _Case, classname: str, name: str, fail_on: str) -> str:
    """Append ``case``'s element; returns its outcome: ``failed``, ``skipped`` or ``passed``."""
    el = ET.SubElement(suite, "testcase", {"name": visible(name), "classname": visible(classname), "time": "0"})
    failing = [f for f in case.findings if fails(f, fail_on)]
    known = [f for f in case.findings if at_or_above(f, fail_on) and is_known(f)]
    rest = [f for f in case.findings if not at_or_above(f, fail_on)]
    outcome = "passed"
    if failing:
        worst = failing[0]  # the document lists findings worst first
        more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
        failure = ET.SubElement(el, "failure", {"message": visible(f"[{worst.get('severity')}] {worst.get('message')}{more}"),
                                                "type": visible(worst.get("rule"))})
        failure.text = visible("\n\n".join(_finding_text(f) for f in failing))
        outcome = "failed"
    elif known:
        ET.SubElement(el, "skipped", {"message": KNOWN})
        outcome = "skipped"
    out = list(case.about)
    if known:
        out += ["", f"known (in the baseline), not failing at --fail-on {fail_on}:"] + [_finding_text(f) for f in known]
    if rest:
        out += ["", "not failing (--fail-on never):" if fail_on == "never" else f"below --fail-on {fail_on}:"] + [_finding_text(f) for f in rest]
    ET.SubElement(el, "system-out").text = _ATTACHMENT.sub("[ [", visible("\n".join(out)))
    return outcome


def _count(el: ET.Element, outcomes: list[str], timestamp: str | None) -> None:
    for key, value in (("tests", len(outcomes)), ("failures", outcomes.count("failed")), ("errors", outcomes.count("error")),
                       ("skipped", outcomes.count("skipped")), ("time", 0)):
        el.set(key, str(value))
    if timestamp:
        el.set("timestamp", timestamp)


def junit_xml(doc: dict, fail_on: str) -> str:
    """JUnit XML of the document: a suite per session, a test case per reconnect and per finding tied to no
    reconnect, failing for its findings at or above ``fail_on`` that the baseline does not know.  The same
    document gives the same text (no clock, no host, document order throughout).

    At ``fail_on`` ``error`` or ``warning`` a last suite, ``inputs``, has a case per input, in error when the
    input is damaged (:func:`_input_cases`).  At ``critical`` or ``never`` there is no ``inputs`` suite: the exit
    code ignores anomalies then, and a suite of passing inputs would call damaged ones sound, one of errors
    would show a red report for a green job."""
    exits.check(fail_on)  # even for a document without findings
    # the Ant JUnit schema's timestamp is ISO 8601 without a zone: generated_at is UTC ("...Z")
    stamp = visible(doc["generated_at"]).removesuffix("Z") if doc.get("generated_at") else None
    sids: dict[str | None, str | None] = {}
    for rec in list(doc.get("boundaries") or []) + list(doc.get("findings") or []):
        sids.setdefault(rec.get("session"), rec.get("session_id"))
    by_session: dict[str | None, list[_Case]] = defaultdict(list)
    for case in _cases(doc):
        by_session[case.session].append(case)
    root = ET.Element("testsuites", {"name": visible(_title(doc))})
    everything: list[str] = []
    for session in sorted(by_session, key=_session_order(doc)):
        suite = ET.SubElement(root, "testsuite", {"name": visible(session_label(session, sids.get(session)))})
        if sids.get(session):  # before the cases, as the schema orders them
            props = ET.SubElement(suite, "properties")
            ET.SubElement(props, "property", {"name": "session_id", "value": visible(sids[session])})
        classname = f"{TOOL}.{session or 'no-session'}"
        seen: dict[str, int] = {}
        outcomes = []
        for case in by_session[session]:
            # two findings of one rule at one place would be one test to a reporter that keys by name
            seen[case.name] = seen.get(case.name, 0) + 1
            name = case.name if seen[case.name] == 1 else f"{case.name} #{seen[case.name]}"
            outcomes.append(_testcase(suite, case, classname, name, fail_on))
        _count(suite, outcomes, stamp)
        everything += outcomes
    if exits.damage_fails(fail_on):
        damage = _damage(doc)
        if damage:
            suite = ET.SubElement(root, "testsuite", {"name": "inputs"})
            outcomes = _input_cases(suite, damage, fail_on)
            _count(suite, outcomes, stamp)
            everything += outcomes
    _count(root, everything, stamp)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _title(doc: dict) -> str:
    """The ``<testsuites>`` name, which reporters show as the run's title (junitparser's ``JUnitXml.name``): with a
    baseline it leads with what is new, as the terminal and the report do; the known findings are the skipped cases."""
    base = (doc.get("summary") or {}).get("baseline")
    if base is None:
        return TOOL
    return f"{TOOL}: {baseline_headline(base)} against the baseline {base.get('source')}; known findings are skipped cases"


# ----------------------------------------------------------- damaged input

LISTED_PER_INPUT = 20  # a pcap cut every few packets can have thousands of anomalies: the JSON has them all


@dataclass
class _Input:
    path: str
    row: dict | None  # None: a source of anomalies that no input row names
    errors: list[dict] = field(default_factory=list)  # its error-severity anomalies, in document order
    others: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # "warning jsonl_invalid_utf8" -> count

    @property
    def unreadable(self):
        return (self.row or {}).get("error")

    @property
    def damaged(self) -> bool:
        return bool(self.errors or self.unreadable)


def _damage(doc: dict) -> list[_Input]:
    """Every input (document order), then every other source of an error anomaly, with its anomalies.  An
    anomaly belongs to the input whose ``path`` is its ``source``; one whose source is no input's (none is
    known today) still fails the run, so it gets a case of its own rather than being dropped."""
    by_path: dict[str, _Input] = {}
    for row in doc.get("inputs") or []:
        by_path.setdefault(row.get("path"), _Input(row.get("path"), row))
    for a in doc.get("anomalies") or []:
        src = a.get("source")
        if src not in by_path:
            if a.get("severity") != "error":
                continue  # a warning of no input: nothing to fail, nowhere to count it
            by_path[src] = _Input(src, None)
        if a.get("severity") == "error":
            by_path[src].errors.append(a)
        else:
            by_path[src].others[f"{a.get('severity')} {a.get('code')}"] += 1
    return list(by_path.values())


def _anomaly_text(a: dict) -> str:
    return f"{a.get('location')} [{a.get('code')}] {a.get('message')}"


def _anomalies(n: int) -> str:
    return _plural(n, "error-severity anomaly", "error-severity anomalies")


def _damage_message(item: _Input) -> str:
    """One line: what is wrong with the input, and how much more."""
    if item.unreadable:
        head, rest = f"unreadable: {item.unreadable}", [a for a in item.errors if a.get("message") != item.unreadable]
        return head + (f" (and {_anomalies(len(rest))})" if rest else "")
    first = item.errors[0]
    return f"{_anomalies(len(item.errors))}, the first ({first.get('location')}): [{first.get('code')}] {first.get('message')}"


def _input_cases(suite: ET.Element, damage: list[_Input], fail_on: str) -> list[str]:
    """A case per input: in ``<error>`` when it is damaged (type: ``unreadable`` for an input that could not be
    read at all, else its first error anomaly's code), listing at most :data:`LISTED_PER_INPUT` anomalies;
    passing otherwise, its warning and info anomalies counted in ``system-out``."""
    classname = f"{TOOL}.inputs"
    outcomes = []
    for item in damage:  # one per path (_damage keys by it): the names are distinct
        el = ET.SubElement(suite, "testcase", {"name": visible(item.path), "classname": classname, "time": "0"})
        row = item.row
        about = [f"{row.get('format')}: {row.get('records')} records, {row.get('rejected')} rejected" if row else
                 "not a listed input: the source of anomalies that no input row names"]
        if item.damaged:
            error = ET.SubElement(el, "error", {"message": visible(_damage_message(item)),
                                               "type": visible("unreadable" if item.unreadable else item.errors[0].get("code"))})
            lines = [f"unreadable: {item.unreadable}"] if item.unreadable else []
            if item.errors:
                lines.append(f"{_anomalies(len(item.errors))}; damaged input fails --fail-on {fail_on} like an error finding")
            lines += [_anomaly_text(a) for a in item.errors[:LISTED_PER_INPUT]]
            if len(item.errors) > LISTED_PER_INPUT:
                lines.append(f"and {len(item.errors) - LISTED_PER_INPUT} more (the findings JSON lists every one under anomalies)")
            error.text = visible("\n".join(lines))
            outcomes.append("error")
        else:
            outcomes.append("passed")
        if item.others:
            about.append("not failing: " + ", ".join(f"{n} {kind}" for kind, n in item.others.items()))
        ET.SubElement(el, "system-out").text = _ATTACHMENT.sub("[ [", visible("\n".join(about)))
    return outcomes


def damaged_annotation(item: _Input) -> str:
    """One damaged input as ``::error file=F,line=N,title=mcp-sse-audit: damaged input::MESSAGE``."""
    props, where = [], ""
    if _is_file(item.path):
        props.append(("file", item.path))
        line = _LINE.fullmatch(item.errors[0].get("location") or "") if item.errors and not item.unreadable else None
        if line:
            props.append(("line", line[1]))
    else:
        where = f" [in {item.path}]"
    props.append(("title", f"{TOOL}: damaged input"))
    head = ",".join(f"{k}={escape_property(visible(v))}" for k, v in props)
    return f"::error {head}::{escape_data(visible(_damage_message(item) + where))}"


# ---------------------------------------------------------- GitHub Actions

# Escapes of @actions/core, packages/core/src/command.ts (actions/toolkit, commit a944251):
#   escapeData:     % -> %25, \r -> %0D, \n -> %0A
#   escapeProperty: the same, then : -> %3A and , -> %2C
# The runner undoes exactly these.  A command is read from the start of a log line; with \r and \n escaped (and
# every other line-breaking character made visible first) a message is one line, and "::" inside it is data.


def escape_data(s: str) -> str:
    # (and "##[", which the runner reads as a command anywhere in a line: its "[" as %5B, shown so, never acted on)
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A").replace("##[", "##%5B")


def escape_property(s: str) -> str:
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


# GitHub shows at most 10 error, 10 warning and 10 notice annotations per step, 50 per job (actions/toolkit
# docs/problem-matchers.md, "Limitations"; users report the first ones printed are shown): every line is written,
# worst first, so the ones shown are the worst and the log keeps the rest.
SHOWN_PER_KIND = 10
_COMMAND = {"critical": "error", "error": "error", "warning": "warning", "info": "notice"}


def _is_file(source) -> bool:
    """A path GitHub can point at: not standard input, not a URL of a store."""
    return isinstance(source, str) and bool(source) and source not in _NOT_FILES and not _SCHEME.match(source)


def annotation(f: dict) -> str:
    """One finding as a workflow command: ``::error file=F,line=N,title=T::MESSAGE``."""
    ev = (f.get("evidence") or [{}])[0]
    source, location = ev.get("source"), ev.get("location") or ""
    props, where = [], []
    line = _LINE.fullmatch(location)
    if not _is_file(source):  # standard input, a store's URL: nothing in the repository to point at
        where.append(f"{location} of {source}" if location else f"in {source}")
    else:
        props.append(("file", source))
        if line:
            props.append(("line", line[1]))
        elif location:
            where.append(location)  # HAR "entry N", pcap "packet N": no line to point at
    where.append(f"session {session_label(f.get('session'), f.get('session_id'))}")
    props.append(("title", f"{TOOL}: {f.get('rule')} ({f.get('severity')})"))
    head = ",".join(f"{k}={escape_property(visible(v))}" for k, v in props)
    message = f"{f.get('message')} [{'; '.join(where)}]"
    return f"::{_COMMAND.get(f.get('severity'), 'error')} {head}::{escape_data(visible(message))}"


def github_annotations(doc: dict, fail_on: str) -> str:
    """A workflow command per finding that fails the run (at or above ``fail_on``, not known from the
    baseline), worst first, then one ``::notice`` that counts them.  Lines end with a newline."""
    exits.check(fail_on)
    findings = list(doc.get("findings") or [])
    failing = sorted((f for f in findings if fails(f, fail_on)), key=lambda f: SEV_RANK.get(f.get("severity"), len(SEV_RANK)))
    lines = [annotation(f) for f in failing]
    # after the findings: they say what the server did, and GitHub shows the first 10 errors
    damaged = [d for d in _damage(doc) if d.damaged]
    if exits.damage_fails(fail_on):
        lines += [damaged_annotation(d) for d in damaged]
    n = len(failing)
    base = (doc.get("summary") or {}).get("baseline")
    lead = f"{baseline_headline(base)} against the baseline; " if base is not None else ""  # as JUnit's title and the terminal
    if fail_on == "never":
        text = f"{_plural(len(findings), 'finding')}; none fails the job (--fail-on never)"
    else:
        text = f"{_plural(n, 'finding')} at or above {fail_on}"
        known = sum(1 for f in findings if at_or_above(f, fail_on) and is_known(f))
        if known:
            text += f" ({known} known, in the baseline: not annotated)"
        kinds = defaultdict(int)
        for f in failing:
            kinds[_COMMAND.get(f.get("severity"), "error")] += 1
        if damaged and exits.damage_fails(fail_on):
            text += f"; damaged inputs failing the job: {len(damaged)} (error-severity anomalies)"
            kinds["error"] += len(damaged)
        if any(k > SHOWN_PER_KIND for k in kinds.values()):
            text += f"; GitHub shows the first {SHOWN_PER_KIND} of each kind, the log has them all"
    if damaged and not exits.damage_fails(fail_on):
        text += f"; damaged inputs: {len(damaged)}, not failing at --fail-on {fail_on}"
    lines.append(f"::notice title={escape_property(TOOL)}::{escape_data(visible(lead) + text)}")
    return "\n".join(lines) + "\n"

