"""The Go and Java SDK clients (signals/clients.py; sample_logs/real-{go,java}-client-*, recorded by
sample_logs/recording/record_peers.py): the family is told by the User-Agent, and what the analyzer says about
each recording is what the client's own log (sample_logs/recording/<go|java>/client-logs/) shows the application
got: the Last-Event-ID of every resume and its status, which result each call completed with, or that it timed out."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest

from analyzer import pipeline
from analyzer.signals import clients
from conftest import rpc_note
from test_wrong_result import call, replica_start_over, tool_result

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("jsonl", "har", "pcap")


@pytest.mark.parametrize("agent, family", [
    ("Go-http-client/1.1", clients.GO),
    ("Go-http-client/2.0", clients.GO),
    ("go-http-client/1.1", clients.GO),
    ("Java-http-client/17.0.15", clients.JAVA),
    ("Java-http-client/21.0.2", clients.JAVA),
    ("python-httpx/0.28.1", clients.PYTHON),
    ("node", clients.TYPESCRIPT),
    ("Go-http-client-fork/1.0", clients.UNKNOWN),   # not net/http's agent
    ("my-Go-http-client/1.1", clients.UNKNOWN),     # the product must come first
    ("Java-http-clientx", clients.UNKNOWN),
    ("Apache-HttpClient/5.3 (Java/17.0.15)", clients.UNKNOWN),  # another Java HTTP stack: not the SDK's transport
    ("", clients.UNKNOWN),
])
def test_the_family_is_told_by_the_user_agent(agent, family):
    got = pl.select(clients.family_of(pl.lit(agent))).item()
    assert got == family


def test_every_family_has_a_behaviour_row_in_the_readme_table():
    table = clients.clients_markdown()
    for fam in clients.FAMILIES:
        assert clients.BEHAVIOUR[fam]["label"] in table
    assert "Go SDK client (tested: go-sdk v1.8.0)" in table and "Java SDK client (tested: mcp 2.2.0)" in table


def client_log(name: str) -> str:
    lang, rest = name.removeprefix("real-").split("-", 1)  # real-go-client-resume -> go, client-resume
    return (ROOT / "sample_logs" / "recording" / lang / "client-logs" / f"{rest}.txt").read_text()


def resumes_in_log(log: str, tag: str = "") -> list[tuple[str, int]]:
    """(Last-Event-ID, status) of every resume the Go client's transport sent (its `http:` lines)."""
    return [(m[1], int(m[2])) for m in re.finditer(re.escape(tag) + r"http: GET Last-Event-ID=(\S+) -> (\d+)", log)]


def results_in_log(log: str, tool: str, tag: str = "") -> list[str]:
    """What the application got from each call of ``tool``: the result's text, or FAILED."""
    out = []
    for m in re.finditer(re.escape(tag) + rf"tools/call {tool} \S+ -> (RESULT isError=\w+ content=\"([^\"]*)\"|FAILED)", log):
        out.append(m[2] if m[2] is not None else "FAILED")
    return out


def analyze(name: str, fmt: str, monkeypatch) -> dict:
    monkeypatch.chdir(ROOT)
    return pipeline.run([f"sample_logs/{name}.{fmt}"]).document


def rules(doc, *names):
    return [f for f in doc["findings"] if f["rule"] in names]


FOREIGN = ("wrong_result_delivered", "foreign_response_dropped", "foreign_response_on_resume")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name", ["real-go-client-resume", "real-go-client-cut-twice"])
def test_go_healthy_resumes(name, fmt, monkeypatch):
    """A correct store: every resume the log shows is a continuous boundary with the same Last-Event-ID and status,
    in the same order (cut-twice: 5, then 9 -- the last id received, not the first resume's cursor), and the call
    completed with its own result ("counted to N"): no finding claims damage."""
    doc, log = analyze(name, fmt, monkeypatch), client_log(name)
    assert [s["client"]["family"] for s in doc["sessions"]] == ["go"]
    assert [(b["last_event_id"], b["http"]["status"]) for b in doc["boundaries"]] == resumes_in_log(log)
    assert {b["verdict"] for b in doc["boundaries"]} == {"continuous"}
    (got,) = results_in_log(log, "slow_count")
    assert re.fullmatch(r"counted to \d+", got)
    assert rules(doc, *FOREIGN, "request_unanswered") == []
    assert [f for f in doc["findings"] if f["severity"] in ("critical", "error")] == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_go_server_restart(fmt, monkeypatch):
    """The resume got 404: the Go client failed the call at once (no second GET); the analyzer says the session is
    invalid at that reconnect and the call never got its response."""
    name = "real-go-client-server-restart"
    doc, log = analyze(name, fmt, monkeypatch), client_log(name)
    (resume,) = resumes_in_log(log)
    assert resume[1] == 404
    (b,) = doc["boundaries"]
    assert (b["last_event_id"], b["http"]["status"], b["verdict"]) == (resume[0], 404, "session_invalid")
    assert results_in_log(log, "slow_count") == ["FAILED"]
    (u,) = rules(doc, "request_unanswered")
    assert "tools/call slow_count (id 2)" in u["message"]
    assert rules(doc, *FOREIGN) == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_go_replica_failover(fmt, monkeypatch):
    """The resume landed on the other replica, which replayed initialize's and ping's answers (ids 1 and 3, answered
    long before): the Go client dropped them without a word, resumed again and completed with its own result
    ("counted to 5"), and the application got the first log notification twice.  The analyzer: the foreign answer
    was dropped (a warning: its own came later), no wrong result, one event delivered twice."""
    name = "real-go-client-replica-failover"
    doc, log = analyze(name, fmt, monkeypatch), client_log(name)
    assert [(b["last_event_id"], b["http"]["status"]) for b in doc["boundaries"]] == resumes_in_log(log)
    assert results_in_log(log, "slow_count") == ["counted to 5"]
    (f,) = rules(doc, *FOREIGN)
    assert (f["rule"], f["severity"]) == ("foreign_response_dropped", "warning")
    assert "the Go client (Go-http-client/1.1)" in f["message"] and "dropped without a word" in f["message"]
    w = doc["boundaries"][0]["wrong_result"]
    assert (w["client"], w["outcome"], w["call"]) == ("go", "own_result", "tools/call slow_count (id 4)")



# real-go-client-replica-failover: two replicas number the events of one stream each their own way; the client's
# Last-Event-ID 4 (replica 1's ping answer, replayed) names replica 2's progress 1, so replica 2 replays its log note
# 5 a second time.  Reading that as a duplicate for contiguous ids (an id the stream delivered before the cursor's
# delivery) was tried and reverted: on bench/generate.py's traffic it turned 134 of 3,929 reconnects (114 continuous,
# 20 gaps) into replay_reset.  Pinned, strict, until a rule tells an ambiguous cursor (one id, two payloads) apart.

def test_go_replica_failover_second_resume_delivers_a_log_note_twice(monkeypatch):
    """The second resume's Last-Event-ID 4 named two events of the stream (replica 1's progress, replica 2's ping
    answer); the replica that read it replayed after its own 4, so the log note the POST stream had delivered came
    again, same id 5 and payload: the application got it twice (the client log), though the ids go up from 4."""
    name = "real-go-client-replica-failover"
    doc, log = analyze(name, "jsonl", monkeypatch), client_log(name)
    assert log.count('log notification info: "slow_count step 1"') == 2  # the application got it twice
    second = doc["boundaries"][1]
    assert (second["verdict"], second["rule_id"]) == ("replay_reset", "cursor_named_two_events")
    assert second["duplicated_event_ids"] == ["5"] and second["duplicated_count"] == 1 and second["lost_count"] == 0


def test_go_replica_failover_first_resume_went_back_and_lost_nothing(monkeypatch):
    """The first resume's replay (2, 4 after the cursor 5) went back: the 3 between them is no loss."""
    doc = analyze("real-go-client-replica-failover", "jsonl", monkeypatch)
    first = doc["boundaries"][0]
    assert (first["verdict"], first["rule_id"]) == ("replay_reset", "ids_went_back")
    assert first["lost_event_ids"] == [] and first["duplicated_event_ids"] == ["2", "4"]


def test_go_replica_failover_is_no_resurrection(monkeypatch):
    """The other replica replayed the session's initialize answer on the resumed GET (the client dropped it: no
    call waited for id 1) and no initialize was sent again: ids that went back, not a new process."""
    name = "real-go-client-replica-failover"
    doc, log = analyze(name, "jsonl", monkeypatch), client_log(name)
    assert log.count("initialized: session") == 1
    assert rules(doc, "session_resurrected") == []


@pytest.mark.parametrize("fmt", FORMATS)
def test_go_foreign_answer_with_the_resumed_calls_id(fmt, monkeypatch):
    """Two Go sessions on one store keyed without the session, both calls JSON-RPC id 2: B's resume got A's events
    and A's result with B's own id, and B's slow_count returned "slow_side done" (the client log).  The analyzer: a
    wrong result delivered to B's call, naming A's call and the Go client."""
    name = "real-go-client-foreign-same-id"
    doc, log = analyze(name, fmt, monkeypatch), client_log(name)
    assert results_in_log(log, "slow_count", tag="[B] ") == ["slow_side done"]
    assert results_in_log(log, "slow_side", tag="[A] ") == ["slow_side done"]
    (b,) = doc["boundaries"]
    assert [(b["last_event_id"], b["http"]["status"])] == resumes_in_log(log, tag="[B] ")
    (f,) = rules(doc, *FOREIGN)
    assert (f["rule"], f["severity"]) == ("wrong_result_delivered", "critical")
    assert "the Go client (Go-http-client/1.1) gives a response to the pending request with its id" in f["message"]
    assert b["wrong_result"]["client"] == "go" and b["wrong_result"]["preview"] == "slow_side done"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("name, sessions", [("real-java-client-resume", 1), ("real-java-client-server-restart", 2)])
def test_java_never_resumes(name, sessions, fmt, monkeypatch):
    """The Java client sent no GET with Last-Event-ID (its log: no resume, the call timed out); the analyzer finds no
    reconnect, and says the call never got its response.  After the restart the next request's 404 made the client
    initialize a second session."""
    doc, log = analyze(name, fmt, monkeypatch), client_log(name)
    assert "Last-Event-ID" not in log
    assert results_in_log(log, "slow_count") == ["FAILED"] and "TimeoutException" in log
    assert doc["boundaries"] == []
    assert [s["client"]["family"] for s in doc["sessions"]] == ["java"] * sessions
    assert log.count('"method":"initialize"') == sessions
    (u,) = rules(doc, "request_unanswered")
    assert "tools/call slow_count" in u["message"]
    assert rules(doc, *FOREIGN) == []


GO_AGENT = "Go-http-client/1.1"


def test_the_go_client_drops_an_answer_nobody_waits_for(capture, analyze):
    """Synthetic, the replica-failover shape without the call's own answer later: add (id 3) was answered before the
    reconnect, so nothing waits for id 3; the Go client drops it and slow_count (id 4) never completes (an error,
    not a wrong result)."""
    doc = analyze(replica_start_over(capture, [("e1", ""), ("e2", tool_result(3, "sum=5"))], agent=GO_AGENT))
    assert rules(doc, "wrong_result_delivered") == []
    (f,) = rules(doc, *FOREIGN)
    assert (f["rule"], f["severity"]) == ("foreign_response_dropped", "error")
    assert "the Go client (Go-http-client/1.1) keeps a response's id" in f["message"] and "never completed" in f["message"]
    assert doc["boundaries"][0]["wrong_result"]["outcome"] == "never_completed"


def test_the_go_client_and_a_waiting_calls_answer_is_not_recorded_so_both_readings(capture, analyze):
    """An answer whose id another waiting call has: by the Go SDK's source that call takes it, but no recording shows
    it, so the finding gives both readings and is not critical (as for a client not known)."""
    capture.user_agent = GO_AGENT
    cap = capture.initialize()
    call(cap, 3, "add", [("e1", "")], close="reset")  # add (id 3) is still waiting
    call(cap, 4, "slow_count", [("e3", ""), ("e4", rpc_note(1))], close="reset")
    doc = analyze(cap.stream(last="e4", events=[("e2", tool_result(3, "sum=5"))], close="eof"))
    (f,) = rules(doc, *FOREIGN)
    assert (f["rule"], f["severity"]) == ("foreign_response_on_resume", "error")
    assert doc["sessions"][0]["client"]["family"] == "go"


@pytest.mark.parametrize("fmt", FORMATS)
def test_go_server_healthy_resume(fmt, monkeypatch):
    """The Go SDK's server (its MemoryEventStore, ids <stream>_<n>) closed the call's stream after step 2; the python
    client resumed and its application got progress 1-5 once each and "counted to 5" (client-logs/server-resume.txt,
    the APP summary line): one continuous reconnect, no finding."""
    name = "real-go-server-resume"
    doc = analyze(name, fmt, monkeypatch)
    log = (ROOT / "sample_logs" / "recording" / "go" / "client-logs" / "server-resume.txt").read_text()
    assert "APP summary: progress=['1', '2', '3', '4', '5'] logs=[] outcome=result isError=False ['counted to 5']" in log
    (b,) = doc["boundaries"]
    assert (b["verdict"], b["http"]["status"], b["lost_count"], b["duplicated_count"]) == ("continuous", 200, 0, 0)
    assert re.fullmatch(r"[A-Z2-7]+_\d+", b["last_event_id"])  # the Go SDK's <stream>_<index>
    assert doc["findings"] == []
    assert [s["client"]["family"] for s in doc["sessions"]] == ["python"]
