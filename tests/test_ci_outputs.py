"""CI outputs of the findings document (analyzer/document/ci.py): JUnit XML read back by junitparser, and
GitHub Actions workflow commands checked against a golden file and against injection.

Regenerate the golden annotations after an intended change, then read every line:

    python tests/test_ci_outputs.py --regenerate
"""
from __future__ import annotations

import copy
import gzip
import json
import re
import sys
import xml.dom.minidom
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from junitparser import Error, Failure, JUnitXml, Skipped

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from analyzer import exits, pipeline  # noqa: E402
from analyzer.document import ci  # noqa: E402

GOLDEN = ROOT / "tests" / "golden_ci" / "annotations.txt"
# a gap (JSONL: a line to point at), a response of another stream (HAR: an entry, no line), a call run twice
# (a finding tied to no reconnect, in a session without Mcp-Session-Id)
GOLDEN_SAMPLES = ["sample_logs/synthetic/gap.jsonl", "sample_logs/synthetic/cross_stream_response.har", "sample_logs/synthetic/stateless_reissue.jsonl"]
GOLDEN_FAIL_ON = "warning"
RANK = {"critical": 0, "error": 1, "warning": 2, "info": 3}
HOSTILE = "done]]><script>alert(1)</script>\x00\x1b[31m::error::pwned\n::set-env name=X::y\r\n%0A\u2028::warning::z & \"q\" \ud800 [[ATTACHMENT|/etc/passwd]]"


def document(paths: list[str]) -> dict:
    """The plain findings document of ``paths`` (named relative to the repository, as in the README)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(ROOT)
        return json.loads(json.dumps(pipeline.run(paths).document))


@pytest.fixture(scope="module")
def doc() -> dict:
    return document(["sample_logs"])


def cases(xml_text: str) -> dict[str, tuple]:
    """Test case name -> (suite name, case) as junitparser reads them."""
    out = {}
    for suite in JUnitXml.fromstring(xml_text.encode("utf-8")):
        for case in suite:
            assert case.name not in out, f"two cases named {case.name}"
            out[case.name] = (suite.name, case)
    return out


def failing_ids(case) -> set[str]:
    """The finding ids a case's failure lists (each finding's block starts with ``f<n> [severity]``)."""
    return {m for r in case.result if isinstance(r, Failure) for m in re.findall(r"^(f[0-9]+) \[", r.text or "", re.M)}


def at_or_above(f: dict, fail_on: str) -> bool:
    return fail_on != "never" and RANK[f["severity"]] <= RANK[fail_on]


# ------------------------------------------------------------------ JUnit


def free_case_names(doc: dict) -> dict[str, str]:
    """Finding id -> the name of its case, for the findings tied to no reconnect: ``<rule> <fingerprint>``, and
    ``#2``... for the next ones of one name in one suite (two captures of one stateless incident)."""
    seen: dict[tuple, int] = {}
    out = {}
    for f in doc["findings"]:
        if f["boundary"] is None:
            name = f"{f['rule']} {f['fingerprint']}"
            n = seen[(f["session"], name)] = seen.get((f["session"], name), 0) + 1
            out[f["id"]] = name if n == 1 else f"{name} #{n}"
    return out


def test_one_case_per_boundary_and_per_finding_without_one(doc):
    got = {n: sc for n, sc in cases(ci.junit_xml(doc, "error")).items() if sc[0] != "inputs"}
    free = [f for f in doc["findings"] if f["boundary"] is None]
    assert doc["boundaries"] and free
    assert len(got) == len(doc["boundaries"]) + len(free)
    # a case is named by what it is about, never by its verdict, file or line (CI keeps a test's history by its name)
    by_id = {name.removeprefix("reconnect "): (suite, case) for name, (suite, case) in got.items() if name.startswith("reconnect ")}
    assert sorted(by_id) == sorted(b["boundary_id"] for b in doc["boundaries"])
    for b in doc["boundaries"]:
        suite, case = by_id[b["boundary_id"]]
        assert case.classname == f"mcp-sse-audit.{b['session']}"
        assert suite.startswith(b["session"] + " ") and b["session_id"][:12] in suite
        assert f"verdict {b['verdict']}" in case.system_out and b["request"]["location"] in case.system_out
    for fid, name in free_case_names(doc).items():
        f = next(f for f in doc["findings"] if f["id"] == fid)
        suite, case = got[name]
        assert suite.startswith(f["session"] + " ") and f["evidence"][0]["location"] in case.system_out
    # the suites: one per session that has reconnects or findings, in the document's order, the whole id as a
    # property, then the inputs
    sessions = list(dict.fromkeys(s["session"] for s in doc["sessions"]))
    busy = {r["session"] for r in doc["boundaries"] + doc["findings"]}
    suites = list(JUnitXml.fromstring(ci.junit_xml(doc, "error").encode()))
    assert len(suites) == len(busy) + 1 and suites[-1].name == "inputs"
    assert [s.name.split(" ")[0] for s in suites[:-1]] == [k for k in sessions if k in busy]
    b = doc["boundaries"][0]
    suite = next(s for s in suites if s.name.startswith(b["session"] + " "))
    assert {p.name: p.value for p in suite.properties()} == {"session_id": b["session_id"]}


@pytest.mark.parametrize("fail_on", ["critical", "error", "warning", "never"])
def test_failures_are_the_findings_at_or_above_fail_on(doc, fail_on):
    text = ci.junit_xml(doc, fail_on)
    got = cases(text)
    by_boundary = {name.removeprefix("reconnect "): case for name, (_, case) in got.items() if name.startswith("reconnect ")}
    listed = set()
    for b in doc["boundaries"]:
        want = {f["id"] for f in doc["findings"] if f["boundary"] == b["boundary_id"] and at_or_above(f, fail_on)}
        case = by_boundary[b["boundary_id"]]
        assert failing_ids(case) == want, b["boundary_id"]
        assert case.is_failure == bool(want) and len(case.result) <= 1  # one <failure> per case, listing them all
        if want:
            worst = min((f for f in doc["findings"] if f["id"] in want), key=lambda f: RANK[f["severity"]])
            assert case.result[0].type == worst["rule"]
        listed |= want
    free = free_case_names(doc)
    for f in doc["findings"]:
        if f["boundary"] is None:
            assert failing_ids(got[free[f["id"]]][1]) == ({f["id"]} if at_or_above(f, fail_on) else set())
            listed |= {f["id"]} if at_or_above(f, fail_on) else set()
    assert listed == {f["id"] for f in doc["findings"] if at_or_above(f, fail_on)}
    root = JUnitXml.fromstring(text.encode())
    if fail_on == "never":
        assert root.failures == 0 and all(not c.is_failure for _, c in got.values())
    else:
        assert root.failures > 0


def test_counts_on_every_suite_and_the_root_are_right(doc):
    for fail_on in ("error", "warning"):
        known = mark_known(doc, {"f1", "f2", "f31"})
        root = JUnitXml.fromstring(ci.junit_xml(known, fail_on).encode())
        written = [(s.name, s.tests, s.failures, s.errors, s.skipped) for s in root]
        totals = (root.tests, root.failures, root.errors, root.skipped)
        root.update_statistics()  # junitparser's own count of the cases
        assert written == [(s.name, s.tests, s.failures, s.errors, s.skipped) for s in root]
        assert totals == (root.tests, root.failures, root.errors, root.skipped)
        assert root.skipped >= 1 and root.tests == len(doc["boundaries"]) + sum(f["boundary"] is None for f in doc["findings"]) + len(doc["inputs"])
        assert root.errors == 0  # the samples are sound: every input passes


def mark_known(doc: dict, ids: set[str]) -> dict:
    """A copy of ``doc`` as --baseline marks it: ``ids`` known, every other finding new."""
    out = copy.deepcopy(doc)
    for f in out["findings"]:
        f["baseline"] = "known" if f["id"] in ids else "new"
    return out


def test_known_findings_are_never_failures(doc):
    # a reconnect with two findings at or above error (in the samples: a wrong result and its verdict's finding),
    # and a finding tied to no reconnect
    two = [b["boundary_id"] for b in doc["boundaries"]
           if sum(f["boundary"] == b["boundary_id"] and at_or_above(f, "error") for f in doc["findings"]) == 2]
    bid = two[0]
    pair = {f["id"] for f in doc["findings"] if f["boundary"] == bid}
    free = next(f for f in doc["findings"] if f["boundary"] is None and f["severity"] in ("critical", "error"))
    assert len(pair) == 2
    first = sorted(pair, key=lambda i: int(i[1:]))[0]

    got = cases(ci.junit_xml(mark_known(doc, {first}), "error"))
    case = got[f"reconnect {bid}"][1]
    assert failing_ids(case) == pair - {first}  # the new one still fails
    assert f"{first} [" in case.system_out and "known (in the baseline)" in case.system_out

    got = cases(ci.junit_xml(mark_known(doc, pair | {free["id"]}), "error"))
    case = got[f"reconnect {bid}"][1]
    assert not case.is_failure and case.is_skipped
    assert [(type(r), r.message) for r in case.result] == [(Skipped, "known: in the baseline")]
    own = got[free_case_names(doc)[free["id"]]][1]
    assert own.is_skipped and not own.is_failure

    # everything known: nothing fails, whatever fail_on
    root = JUnitXml.fromstring(ci.junit_xml(mark_known(doc, {f["id"] for f in doc["findings"]}), "warning").encode())
    assert root.failures == 0 and root.skipped > 0


def test_same_document_same_bytes_and_the_document_untouched(doc):
    before = json.dumps(doc, sort_keys=True)
    a = ci.junit_xml(doc, "error")
    assert a == ci.junit_xml(json.loads(json.dumps(doc)), "error")
    assert ci.github_annotations(doc, "warning") == ci.github_annotations(copy.deepcopy(doc), "warning")
    assert json.dumps(doc, sort_keys=True) == before
    stamp = doc["generated_at"].removesuffix("Z")
    root = JUnitXml.fromstring(a.encode())
    assert root._elem.get("timestamp") == stamp and all(s.timestamp == stamp for s in root)


def hostile_doc(text: str) -> dict:
    """One session with one reconnect and two findings (one on it, one on none), ``text`` in every string
    that comes from the capture."""
    ref = {"source": f"logs/{text}.jsonl", "location": "line 3"}
    base = {"session": "S1", "session_id": text, "severity": "critical", "effect": text, "evidence": [ref]}
    return {
        "generated_at": "2026-11-13T09:00:00Z",
        "boundaries": [{"boundary_id": "b1", "session": "S1", "session_id": text, "stream": "s1", "verdict": "gap", "severity": "critical",
                        "reason": text, "request": ref, "resumes": ref, "lost_count": 1, "duplicated_count": 0}],
        "findings": [
            base | {"id": "f1", "rule": "gap", "boundary": "b1", "message": text},
            base | {"id": "f2", "rule": "request_unanswered", "boundary": None, "message": text, "severity": "warning"},
        ],
    }


def test_hostile_text_round_trips_through_the_xml():
    out = ci.junit_xml(hostile_doc(HOSTILE), "critical")
    assert all(c in "\t\n" or 0x20 <= ord(c) < 0x7f or ord(c) >= 0xa0 for c in out)  # nothing invisible was written
    out.encode("utf-8")  # no lone surrogate
    dom = xml.dom.minidom.parseString(out.encode("utf-8"))  # expat: strict XML 1.0
    tags = {n.tagName for n in dom.getElementsByTagName("*")}
    assert tags == {"testsuites", "testsuite", "properties", "property", "testcase", "failure", "system-out"}
    got = cases(out)
    assert len(got) == 2
    seen = ci.visible(HOSTILE)
    (suite, b1), (_, f2) = (got[n] for n in sorted(got))
    assert suite == "S1 " + seen[:12] + "…"
    fail = b1.result[0]
    assert seen in fail.message and f"f1 [critical] gap: {seen}" in fail.text
    assert "<script>" in fail.text and "\\x00" in fail.text and "\\x1b" in fail.text and "\\ud800" in fail.text
    assert "::error::pwned\n::set-env" in fail.text  # a newline is a newline in XML, harmless there
    assert "[[ATTACHMENT|" not in b1.system_out and "[ [ATTACHMENT|" in b1.system_out  # GitLab links none
    assert not f2.is_failure and "below --fail-on critical" in f2.system_out


def test_unknown_fail_on_is_refused(doc):
    for fn in (ci.junit_xml, ci.github_annotations):
        with pytest.raises(ValueError, match="fail_on"):
            fn(doc, "info")


# ----------------------------------------------------- GitHub annotations

# what the runner accepts as one command: ::name key=value,key=value::data, on one line
COMMAND = re.compile(r"::(error|warning|notice)( [a-z]+=[^:,\r\n]*(?:,[a-z]+=[^:,\r\n]*)*)?::([^\r\n]*)")


def unescape(s: str, props: bool = False) -> str:
    """The runner's unescaping (ActionCommand.cs): %25 last, so an escaped escape stays data."""
    for esc, ch in (("%0D", "\r"), ("%0A", "\n")) + ((("%3A", ":"), ("%2C", ",")) if props else ()) + (("%25", "%"),):
        s = s.replace(esc, ch)
    return s


def parse(line: str) -> tuple[str, dict, str]:
    m = COMMAND.fullmatch(line)
    assert m, line
    props = dict(kv.split("=", 1) for kv in m[2].strip().split(",")) if m[2] else {}
    return m[1], {k: unescape(v, props=True) for k, v in props.items()}, unescape(m[3])


def test_escapes_are_the_toolkits():
    assert ci.escape_data("50% a\r\nb: c, d") == "50%25 a%0D%0Ab: c, d"
    assert ci.escape_property("50% a\r\nb: c, d") == "50%25 a%0D%0Ab%3A c%2C d"


def test_golden_annotations():
    want = GOLDEN.read_text(encoding="utf-8")
    assert ci.github_annotations(document(GOLDEN_SAMPLES), GOLDEN_FAIL_ON) == want


def test_annotations_one_per_failing_finding_worst_first(doc):
    for fail_on in ("critical", "error", "warning"):
        lines = ci.github_annotations(mark_known(doc, {"f1"}), fail_on).splitlines()
        parsed = [parse(line) for line in lines]
        *findings, (kind, props, summary) = parsed
        want = [f for f in doc["findings"] if at_or_above(f, fail_on) and f["id"] != "f1"]
        assert len(findings) == len(want)
        assert [k for k, _, _ in findings] == ["error" if f["severity"] in ("critical", "error") else "warning" for f in want]
        assert [p["title"] for _, p, _ in findings] == [f"mcp-sse-audit: {f['rule']} ({f['severity']})" for f in want]
        assert kind == "notice" and props == {"title": "mcp-sse-audit"}
        assert summary.startswith(f"{len(want)} finding") and "(1 known, in the baseline: not annotated)" in summary
    assert ci.github_annotations(doc, "never").splitlines() == [
        f"::notice title=mcp-sse-audit::{len(doc['findings'])} findings; none fails the job (--fail-on never)"]


def test_file_and_line_only_where_they_are():
    doc = hostile_doc("x")
    finding = doc["findings"][0]
    cases_ = [
        ({"source": "logs/a.jsonl", "location": "line 7"}, {"file": "logs/a.jsonl", "line": "7"}, ""),
        ({"source": "logs/a.har", "location": "entry 4"}, {"file": "logs/a.har"}, "entry 4; "),
        ({"source": "logs/a.pcap", "location": "packet 95"}, {"file": "logs/a.pcap"}, "packet 95; "),
        ({"source": "-", "location": "line 2"}, {}, "line 2 of -; "),
        ({"source": "s3://bucket/x.jsonl", "location": "entry 1"}, {}, "entry 1 of s3://bucket/x.jsonl; "),
        ({"source": "C:\\logs\\a,b.jsonl", "location": "line 12 byte 40"}, {"file": "C:\\logs\\a,b.jsonl", "line": "12"}, ""),
    ]
    for ref, want, where in cases_:
        finding["evidence"] = [ref]
        kind, props, message = parse(ci.annotation(finding))
        assert kind == "error" and props == want | {"title": "mcp-sse-audit: gap (critical)"}
        assert message == f"x [{where}session S1 x]"


def test_a_hostile_message_cannot_start_a_command():
    out = ci.github_annotations(hostile_doc(HOSTILE), "warning")
    lines = out.split("\n")
    assert lines[-1] == "" and len(lines) == 4  # two findings, the summary, the final newline
    assert not re.search("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", out)
    (k1, p1, m1), (k2, p2, m2), _ = (parse(line) for line in lines[:-1])
    assert (k1, k2) == ("error", "warning")
    seen = ci.visible(HOSTILE)
    assert p1["file"] == f"logs/{seen}.jsonl" and p1["line"] == "3"
    assert m1 == f"{seen} [session S1 {seen[:12]}…]"
    assert "::error::pwned\n::set-env" in m1  # the runner shows a newline inside the one annotation
    assert "%0A" in m1 and "\\u2028" in m1  # literal text stays literal


@settings(max_examples=200, deadline=None)
@given(st.text(), st.sampled_from(["line 5", "entry 2", "packet 9", ""]))
def test_any_text_gives_one_line_per_finding(text, location):
    doc = hostile_doc(text)
    for f in doc["findings"]:
        f["evidence"][0] = {"source": text, "location": location}
    lines = ci.github_annotations(doc, "warning").split("\n")
    assert len(lines) == 4 and lines[-1] == ""
    for line in lines[:-1]:
        kind, props, message = parse(line)
        if "file" in props:
            assert props["file"] == ci.visible(text)
    assert parse(lines[0])[2].startswith(ci.visible(text))
    junit = ci.junit_xml(doc, "warning")
    assert cases(junit)  # well-formed whatever the text
    xml.dom.minidom.parseString(junit.encode("utf-8"))


# ---------------------------------------------------------- damaged input
# What fails the exit code besides findings (exits.fails): at --fail-on error or warning, an error-severity
# anomaly.  The inputs: a missing path (an input row with an error, and its input_unreadable anomaly), a copy of
# gap.jsonl with line 5 replaced by "{not json" (jsonl_bad_line, then jsonl_orphan_record for the two lines of
# the connection it opened), a gzip cut in half (jsonl_bad_line for the cut line, input_unreadable for the
# stream), 25 bad lines after gap.jsonl (more than LISTED_PER_INPUT), and gap.jsonl itself, sound.

MISSING = "/nonexistent.jsonl"
SOUND = "sample_logs/synthetic/gap.jsonl"


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("damaged")
    lines = (ROOT / SOUND).read_bytes().splitlines(keepends=True)
    (tmp / "bad_line.jsonl").write_bytes(b"".join(lines[:4] + [b"{not json\n"] + lines[5:]))
    packed = gzip.compress(b"".join(lines))
    (tmp / "cut.jsonl.gz").write_bytes(packed[: len(packed) // 2])
    (tmp / "many.jsonl").write_bytes(b"".join(lines) + b"{not json\n" * 25)
    return document([MISSING, str(tmp / "bad_line.jsonl"), str(tmp / "cut.jsonl.gz"), str(tmp / "many.jsonl"), SOUND])


def errors_of(doc: dict, path: str) -> list[dict]:
    return [a for a in doc["anomalies"] if a["source"] == path and a["severity"] == "error"]


def path_of(doc: dict, name: str) -> str:
    return next(i["path"] for i in doc["inputs"] if i["path"].endswith(name))


def check_the_damage(damaged: dict) -> None:
    """The anomalies the assertions rely on, read off the pipeline rather than assumed."""
    codes = {i["path"]: [a["code"] for a in errors_of(damaged, i["path"])] for i in damaged["inputs"]}
    assert codes[MISSING] == ["input_unreadable"] and next(i for i in damaged["inputs"] if i["path"] == MISSING)["error"]
    assert codes[path_of(damaged, "bad_line.jsonl")] == ["jsonl_bad_line", "jsonl_orphan_record", "jsonl_orphan_record"]
    assert sorted(codes[path_of(damaged, "cut.jsonl.gz")]) == ["input_unreadable", "jsonl_bad_line"]
    assert codes[path_of(damaged, "many.jsonl")] == ["jsonl_bad_line"] * 25
    assert codes[SOUND] == []
    assert all(i["error"] is None for i in damaged["inputs"] if i["path"] != MISSING)
    assert exits.fails(damaged["summary"], "error") and damaged["summary"]["anomalies_by_severity"]["error"] == 1 + 3 + 2 + 25


@pytest.mark.parametrize("fail_on", ["error", "warning"])
def test_damaged_inputs_are_errors_of_an_inputs_suite(damaged, fail_on):
    check_the_damage(damaged)
    root = JUnitXml.fromstring(ci.junit_xml(damaged, fail_on).encode())
    suites = list(root)
    inputs = suites[-1]
    assert inputs.name == "inputs" and [s.name for s in suites].count("inputs") == 1
    got = {c.name: c for c in inputs}
    assert list(got) == [i["path"] for i in damaged["inputs"]]  # one case per input, in the document's order
    assert all(c.classname == "mcp-sse-audit.inputs" for c in got.values())
    for path, case in got.items():
        errs = errors_of(damaged, path)
        if path == SOUND:
            assert case.is_passed and not case.result
            continue
        assert len(case.result) == 1 and isinstance(case.result[0], Error) and not case.is_failure
        error = case.result[0]
        assert error.type == ("unreadable" if path == MISSING else errs[0]["code"])
        for a in errs[: ci.LISTED_PER_INPUT]:
            assert f"{a['location']} [{a['code']}] {a['message']}" in error.text
    missing = got[MISSING].result[0]
    assert missing.message.startswith("unreadable: does not exist") and "unreadable: does not exist" in missing.text
    bad = got[path_of(damaged, "bad_line.jsonl")].result[0]
    assert bad.message.startswith("3 error-severity anomalies, the first (line 5): [jsonl_bad_line] a line is not a JSON object")
    # bounded: 20 listed, then how many more
    many = got[path_of(damaged, "many.jsonl")].result[0].text
    assert many.count("[jsonl_bad_line]") == ci.LISTED_PER_INPUT and "and 5 more" in many
    # the counts: junitparser counts <error> as errors, on the suite and the root
    written = [(s.name, s.tests, s.failures, s.errors, s.skipped) for s in root]
    totals = (root.tests, root.failures, root.errors, root.skipped)
    root.update_statistics()
    assert written == [(s.name, s.tests, s.failures, s.errors, s.skipped) for s in root]
    assert totals == (root.tests, root.failures, root.errors, root.skipped)
    assert (inputs.tests, inputs.errors, inputs.failures) == (5, 4, 0) and root.errors == 4


def test_a_sound_inputs_warnings_are_counted_not_failed(doc):
    root = JUnitXml.fromstring(ci.junit_xml(doc, "warning").encode())
    inputs = next(s for s in root if s.name == "inputs")
    warned = next(a["source"] for a in doc["anomalies"] if a["code"] == "har_sse_body_not_recorded")
    case = next(c for c in inputs if c.name == warned)
    n = sum(a["source"] == warned and a["code"] == "har_sse_body_not_recorded" for a in doc["anomalies"])
    assert case.is_passed and f"{n} warning har_sse_body_not_recorded" in case.system_out


def test_the_junit_is_red_exactly_when_the_exit_code_is(doc, damaged):
    # damaged input alone (no finding): red at error and warning, green at critical and never
    only_damage = copy.deepcopy(damaged)
    only_damage["findings"], only_damage["boundaries"] = [], []
    only_damage["summary"]["findings_by_severity"] = dict.fromkeys(RANK, 0)
    for d in (doc, damaged, only_damage):
        for fail_on in ci.FAIL_ON:
            root = JUnitXml.fromstring(ci.junit_xml(d, fail_on).encode())
            assert bool(root.failures + root.errors) == exits.fails(d["summary"], fail_on), fail_on
            # no inputs suite where anomalies do not fail the run: neither red for a green job nor damage called sound
            assert ("inputs" in [s.name for s in root]) == (fail_on in ("error", "warning")), fail_on
    assert not exits.fails(only_damage["summary"], "critical") and exits.fails(only_damage["summary"], "error")


@pytest.mark.parametrize("fail_on", ["error", "warning"])
def test_one_annotation_per_damaged_input(damaged, fail_on):
    parsed = [parse(line) for line in ci.github_annotations(damaged, fail_on).splitlines()]
    ours = [(k, p, m) for k, p, m in parsed if p.get("title") == "mcp-sse-audit: damaged input"]
    assert [p["file"] for _, p, _ in ours] == [i["path"] for i in damaged["inputs"] if i["path"] != SOUND]
    assert all(k == "error" for k, _, _ in ours)
    by_file = {p["file"]: (p, m) for _, p, m in ours}
    assert by_file[MISSING][1].startswith("unreadable: does not exist") and "line" not in by_file[MISSING][0]
    props, message = by_file[path_of(damaged, "bad_line.jsonl")]
    first = errors_of(damaged, props["file"])[0]
    assert props["line"] == "5" and message == f"3 error-severity anomalies, the first (line 5): [jsonl_bad_line] {first['message']}"
    assert by_file[path_of(damaged, "many.jsonl")][1].startswith("25 error-severity anomalies")
    kind, props, summary = parsed[-1]
    assert kind == "notice" and "damaged inputs failing the job: 4" in summary
    assert parsed.index(ours[0]) > max((i for i, (_, p, _) in enumerate(parsed) if p.get("title", "").endswith(")")), default=-1)
    for quiet in ("critical", "never"):  # damaged input does not fail the run: named in the summary only
        *rest, (_, _, summary) = (parse(line) for line in ci.github_annotations(damaged, quiet).splitlines())
        assert all(p.get("title") != "mcp-sse-audit: damaged input" for _, p, _ in rest)
        assert summary.endswith(f"; damaged inputs: 4, not failing at --fail-on {quiet}")


def test_hostile_text_in_a_damaged_input():
    doc = hostile_doc(HOSTILE)
    source = f"logs/{HOSTILE}.jsonl"
    doc["inputs"] = [{"path": source, "format": "jsonl", "records": 1, "rejected": 1, "error": HOSTILE, "notes": []}]
    doc["anomalies"] = [{"source": source, "location": "line 2", "code": "jsonl_bad_line", "severity": "error", "message": HOSTILE},
                        {"source": f"s3://b/{HOSTILE}", "location": "file", "code": "input_unreadable", "severity": "error", "message": HOSTILE}]
    out = ci.junit_xml(doc, "error")
    assert all(c in "\t\n" or 0x20 <= ord(c) < 0x7f or ord(c) >= 0xa0 for c in out)
    xml.dom.minidom.parseString(out.encode("utf-8"))
    got = cases(out)
    seen = ci.visible(HOSTILE)
    suite, case = got[f"logs/{seen}.jsonl"]
    assert suite == "inputs" and case.result[0].type == "unreadable"
    assert case.result[0].message == f"unreadable: {seen}" and f"line 2 [jsonl_bad_line] {seen}" in case.result[0].text
    _, other = got[f"s3://b/{seen}"]  # a source no input row names: a case of its own, not dropped
    assert other.result[0].type == "input_unreadable" and "not a listed input" in other.system_out
    lines = ci.github_annotations(doc, "warning").split("\n")
    assert lines[-1] == "" and len(lines) == 2 + 2 + 2  # the two findings, the two damaged sources, the summary, the final newline
    assert not re.search("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]", "\n".join(lines))
    (_, p1, m1), (_, p2, m2) = (parse(line) for line in lines[2:4])
    assert p1 == {"file": f"logs/{seen}.jsonl", "title": "mcp-sse-audit: damaged input"} and m1.startswith(f"unreadable: {seen}")
    assert p2 == {"title": "mcp-sse-audit: damaged input"} and m2.endswith(f" [in s3://b/{seen}]")


if __name__ == "__main__":
    if "--regenerate" not in sys.argv:
        sys.exit("usage: python tests/test_ci_outputs.py --regenerate")
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    GOLDEN.write_text(ci.github_annotations(document(GOLDEN_SAMPLES), GOLDEN_FAIL_ON), encoding="utf-8")
    print(f"wrote {GOLDEN.relative_to(ROOT)} — read every line before committing")
