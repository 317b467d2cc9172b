"""The catalog: every verdict, every finding rule and every anomaly kind, with its severity and effect.

One place says what each name means.  The code that decides reads from here (``verdicts`` takes its
priority order, ``history._frame`` its severities and effects), the README's tables are generated from
here and checked by ``tests/test_catalog.py``, and the report shows what is written here.  Which branch
of the decision chain gave a verdict is ``verdicts.decision_chain`` (each boundary records it as
``rule_id``); the anomaly kinds are :data:`analyzer.anomalies.CATALOG`.
"""
from __future__ import annotations

from dataclasses import dataclass

from analyzer.anomalies import CATALOG as ANOMALIES  # noqa: F401  (the anomaly kinds, re-exported as part of the catalog)

SEVERITIES = ("critical", "error", "warning", "info")


@dataclass(frozen=True)
class Verdict:
    """A boundary verdict.  Their order in :data:`VERDICTS` is their priority (worst first)."""

    name: str
    meaning: str
    cause: str  # the typical cause
    effect: str  # what it does to the client, operationally
    decisive: frozenset[str]  # the HTTP facts of a reconnect that decide it (marked in the report's cards)
    next_step: str = ""  # what to check or change, on the server, the client or the proxy (report and README)


# the severity of a boundary, as verdicts.judge gives it (README quotes this sentence; tests/test_catalog.py checks)
VERDICT_SEVERITY = (
    "a divergence the client did not handle is **critical**, handled is a **warning**, unknown handling is an "
    "**error**; `unverifiable` is a warning (info for a polling client owed nothing); `continuous` has none"
)

VERDICTS: tuple[Verdict, ...] = (
    Verdict('session_invalid', 'the server refused the reconnect or answered for another session',
            'session evicted, server restarted',
            'The server no longer knows the session: the client must start a new one with initialize (the spec says MUST on 404); anything it keeps sending under the old id is rejected or lost.',
            frozenset(['response_session_id', 'status']),
            "Server: find why the session was dropped (a restart, an eviction or TTL, a load balancer without session affinity sending the reconnect to another replica); keep sessions in shared storage or pin them by Mcp-Session-Id. Client: on 404 start a new session with initialize and re-send what was pending; if it went on with the old id, its SDK's 404 handling is the bug."),
    Verdict('session_resurrected', 'the server accepted the old session id but no longer has the session',
            'a restarted process with a permissive session table',
            'Phantom state: the server answers under the old session id but has none of its state (capabilities, subscriptions, pending requests).',
            frozenset(['request_session_id', 'status']),
            "Server: a restarted or other process accepted an Mcp-Session-Id it never issued; answer unknown ids with 404 so the client re-initializes (look for a check of the header's format only). Client: after an error like 'not initialized' on an old session, re-initialize."),
    Verdict('epoch_change', 'the replay epoch the server advertises changed',
            'replay buffer reset',
            "The server's replay buffer was reset: events from before the change can no longer be replayed.",
            frozenset(['replay_epoch']),
            'Server: the replay buffer was reset (restart, eviction): size or persist the event store to outlive the reconnect window. Client: treat the change as loss and re-fetch the state the missing events carried (resources, tool results).'),
    Verdict('replay_reset', 'events the client had already processed were delivered again',
            'a replica without the replay buffer starts from 1',
            'Duplicate side effects: events the client had already processed were delivered again (tool calls, sampling or elicitation requests handled twice).',
            frozenset(['last_event_id']),
            'Server: the replica that answered had no replay buffer for the stream and started over; share the event store between replicas or route reconnects to the same one (affinity by Mcp-Session-Id). Client: de-duplicate by event id, and check the calls listed as delivered twice for double side effects.'),
    Verdict('cross_stream_replay', 'events of another stream, or of another session, were delivered',
            'replay keyed by the wrong stream, or a store shared by sessions',
            'Events of another stream were delivered here: responses reach the wrong request.',
            frozenset(['last_event_id']),
            'Server: the event store looks Last-Event-ID up without its stream (or session): key it by session and stream and put the stream in the event id (as the go and typescript SDKs do). Check each response delivered here against the request it answers.'),
    Verdict('gap', "events emitted after the client's Last-Event-ID never arrived",
            'events emitted while disconnected were never replayed',
            'Unbounded latency and stale state: events emitted while disconnected never arrived; a request whose response was among them hangs until it times out.',
            frozenset(['last_event_id']),
            "Server: events emitted while the client was away were not stored or not replayed: check the event store's retention and that the reconnect reached the replica that holds it. Client: re-send or cancel the requests the stream still owed (listed on the card) instead of waiting for them."),
    Verdict('unverifiable', 'nothing proves continuity either way',
            'the reference\'s "undetectable by the client alone"',
            "Continuity cannot be proven from the captures: the reference's rule is to treat the session as untrusted and re-initialize.",
            frozenset(['last_event_id']),
            'Capture more: a proxy or server-side log of the same session (another view proves continuity) or integer event ids decide it. Until then treat the session as untrusted and re-initialize.'),
    Verdict('continuous', 'the reconnect provably continues where the client stopped',
            '',
            'None: the client received every event once, in order.',
            frozenset(['last_event_id']),
            'Nothing to do.'),
)

VERDICT_ORDER = [v.name for v in VERDICTS]
VERDICT = {v.name: v for v in VERDICTS}

# the verdicts that prove the stream diverged: what the terminal, the report, the trend and the metrics count as
# "diverged" (unverifiable is counted apart: nothing proves it either way)
DIVERGED = tuple(v for v in VERDICT_ORDER if v not in ("unverifiable", "continuous"))


def verdict_severities(verdict: str) -> tuple[str, ...]:
    """The severities a reconnect's finding (named by its verdict) can be reported with: VERDICT_SEVERITY as data
    (rules/verdicts.judge decides which one).  ``continuous`` has no finding."""
    if verdict == "continuous":
        return ()
    return ("warning", "info") if verdict == "unverifiable" else ("critical", "error", "warning")


@dataclass(frozen=True)
class FindingRule:
    """A check over the whole history (not one boundary's verdict)."""

    rule: str
    severities: tuple[str, ...]  # the severities it is reported with (more than one: the rule decides per finding)
    decided_by: str  # the function that finds it
    what: str
    effect: str
    next_step: str = ""  # what to check or change (report and README)
    # for a finding that claims damage to the application: the clients it applies to (signals/clients.py; README "Clients")
    clients: str = ""


FINDING_RULES: tuple[FindingRule, ...] = (
    FindingRule('wrong_result_delivered', ('critical',), 'signals.rpc.wrong_results',
                "another call's result handed to a call, from a resumed stream",
                "A tool call completed with another call's result, and nothing on the client shows it: the application took someone "
                "else's answer (another tool's, or another session's: a data leak) as its own.",
                "Server: replay only the resumed stream's own events after the client's Last-Event-ID (a store keyed by session and "
                "stream; a replica that does not know the id must refuse it, not start over). Client application: treat that call's "
                "result as wrong; re-run the call if it is safe to, and check what was done with the result it got.",
                clients="python SDK client (rewrites the id of the first response on a resumed stream to the resumed call's); "
                        "TypeScript SDK client only when the answer's id is that of a request still pending (the resumed call's own "
                        "id, from another session's store) or when the application resumed with a resumptionToken; Go SDK "
                        "client when the answer's id is the resumed call's own (real-go-client-foreign-same-id)"),
    FindingRule('foreign_response_dropped', ('error', 'warning'), 'signals.rpc.wrong_results',
                "another call's response on a resumed stream, dropped by the client",
                "Another call's response arrived on the resumed stream; the client kept its id, found no pending request with it and "
                "dropped it (\"unknown message ID\"): the resumed call waits for an answer that never comes and times out "
                "(error), unless its own response came later (warning).",
                "Server: replay only the resumed stream's own events after the client's Last-Event-ID (a replica that does not "
                "know the id must refuse it, not start over). Client application: the call timed out; re-run it if it is safe to.",
                clients="TypeScript SDK client on its automatic reconnect (1.32.2, also mcp-remote): it rewrites ids only when the "
                        "application resumed with a resumptionToken; Go SDK client (v1.8.0: it never rewrites ids, and drops the "
                        "answer without a word)"),
    FindingRule('foreign_response_on_resume', ('error',), 'signals.rpc.wrong_results',
                "another call's response on a resumed stream, client not known",
                "Another call's response arrived on the resumed stream of a call. What the application got depends on the client, "
                "which the capture does not name as a known one: either the call completed with that foreign result (a client "
                "that rewrites ids, as the python SDK's) or the response was dropped and the call never completed (as the "
                "TypeScript SDK's automatic reconnect).",
                "Check the client's log for that call: a result that is not its own, or a timeout. Server: replay only the resumed "
                "stream's own events.",
                clients="clients other than the python, TypeScript and Go SDKs' (User-Agent not python-httpx/…, node, undici or "
                        "Go-http-client/…), and the Go SDK client when another waiting call has the answer's id (not recorded)"),
    FindingRule('id_not_monotonic', ('error',), 'rules.event_ids.id_order',
                'an event id below the one before it inside one connection',
                'Event ids went backwards or repeated inside one connection: a client de-duplicating by id drops new events or processes old ones twice.',
                'Server: ids must rise within a stream: look for a counter that restarted or two processes (workers) writing one stream.'),
    FindingRule('id_repeated', ('error',), 'rules.event_ids.id_order',
                'the same event id twice inside one connection',
                'The same event id was delivered twice on one connection: a repeated message is processed twice.',
                'Server: find what sends one event twice (a retried append to the event store). Client: de-duplicate by event id.'),
    FindingRule('digest_conflict', ('error',), 'rules.event_ids.digest_conflicts',
                'one (session, id) with two different payloads on one stream',
                "Two different events carry the same id in one session: proof that the server's ids restarted or that another process answered (the 'gap with continuous ids' signature).",
                'Server: a restarted counter or a second process issued ids already used for other events: make ids unique per session (a persistent counter, or a per-process prefix).'),
    FindingRule('id_reused_across_streams', ('warning',), 'rules.event_ids.digest_conflicts',
                'one (session, id) on two streams of a session, which the spec forbids',
                'The server numbers events per stream, although the spec requires ids unique across all streams of a session: a Last-Event-ID cannot say which stream to resume, and a server may replay the wrong one.',
                'Server: number events across all streams of a session, or put the stream in the id: the spec requires ids unique within the session.'),
    FindingRule('stale_last_event_id', ('warning',), 'rules.cursors.cursor_claims',
                'a Last-Event-ID older than what the client had already received',
                'The client resumed from an older point than it had reached: already-processed events are replayed to it.',
                'Client: send the id of the last event it processed; check that its cursor is updated per event, not per batch or per request.',
                clients="any client, both readings given (events lost after the capture point, or an old cursor); the python SDK client's "
                        "reuse of its previous resume's cursor is judged at the reconnect itself (replay_reset, branch stale_last_event_id)"),
    FindingRule('unknown_last_event_id', ('warning',), 'rules.cursors.cursor_claims',
                'a Last-Event-ID no capture shows being delivered',
                'The resume names an event no capture shows being delivered: which stream it resumes cannot be proven.',
                'Capture the whole session (the event may be on a stream the capture missed); otherwise check where the client stores its cursor.'),
    FindingRule('last_event_id_of_other_session', ('error',), 'rules.cursors.cross_session',
                'a Last-Event-ID that another session was delivered',
                "The client resumed with an event id of another session: a server that accepts it may replay that session's events (responses, tool results) into this one.",
                'Client: keep one cursor per session and stream. Server: refuse a Last-Event-ID that is not of this session.'),
    FindingRule('cross_session_replay', ('critical',), 'rules.cursors.cross_session',
                "another session's events (same id and payload) replayed into this one",
                "Another session's events were replayed into this one: its tool results and notifications reach the wrong client (a data leak across sessions; fastmcp PR #4402, GHSA-84j6-jc92-77jm).",
                "Server: the event store is shared by sessions and keyed by stream only: key it by session too (fastmcp PR #4402, GHSA-84j6-jc92-77jm). Treat it as a data leak: find which clients received the other session's results."),
    FindingRule('get_stream_resume_lost', ('error',), 'rules.cursors.ts_get_stream',
                "the typescript example store's lost `_GET_stream` resume (issues #943/#2560)",
                'Server notifications after this reconnect are silently dropped while the stream looks healthy (kept alive): list changes, log messages and progress never arrive.',
                'Server: the typescript-sdk example event store files a resumed `_GET_stream_` id under the wrong stream (issues #943, #2560): use a store that keeps the stream id.'),
    FindingRule('reissued_after_break', ('critical', 'error'), 'rules.reissue.findings',
                "the same call sent again under a new id after the first attempt's stream broke without a response (critical when progress showed work)",
                'Possible duplicate side effects: the first attempt had started on the server when its stream broke, and the client sent the same call again; nothing on the wire shows that the first was rolled back.',
                'Server: make the tool idempotent (an idempotency key in its arguments), or keep resumption working so the client need not re-send; check whether the first attempt completed.'),
    FindingRule('request_unanswered', ('error', 'warning'), 'rules.calls.findings',
                'a request whose stream broke, ended or was resumed without its response (a warning when the response may lie in a TLS connection no key decrypted)',
                'Unbounded latency: the client waits for a response that will never be sent, until it times out.',
                'Server: the response was lost with the stream (not stored for replay). Client: time out and re-send or cancel (notifications/cancelled) instead of waiting forever.'),
    FindingRule('duplicate_response', ('error',), 'rules.calls.findings',
                'one request answered twice',
                'The same response came twice. The python and TypeScript SDK clients drop the second one (its request is already '
                'answered: an unknown id); a client that does not track request ids acts on a tool result twice.',
                "Client: act on one response per request id. Server: the replay should start after the client's Last-Event-ID, not before.",
                clients="clients that do not drop a response to an answered request (the python and TypeScript SDK clients drop it: no damage to them)"),
    FindingRule('duplicate_side_effect', ('critical',), 'rules.calls.findings',
                'a server request (sampling, elicitation, roots) delivered and answered twice',
                'Duplicate side effects: a server request (sampling, elicitation, roots) was delivered and answered twice.',
                'Server: do not replay server requests the client already answered. Client: de-duplicate sampling, elicitation and roots requests by id before acting.'),
    FindingRule('duplicate_server_request', ('warning',), 'rules.calls.findings',
                'a server request delivered twice, answered at most once',
                'A server request (sampling, elicitation, roots) was delivered twice; answering it twice would run it twice.',
                'Client: answer each server request id once. Server: check the replay for requests already answered.'),
    FindingRule('response_without_request', ('error', 'warning'), 'rules.calls.findings',
                'a response to no request of this session (a warning when the request may lie in a TLS connection no key decrypted)',
                "A response this session never asked for: another session's or another process's messages were replayed here.",
                "Server: the replay delivered messages of another session or process: check the event store's keys."),
    FindingRule('cross_stream_replay', ('error',), 'rules.calls.findings',
                "a response delivered on a stream other than its request's",
                'Events of another stream were delivered here: responses reach the wrong request.',
                "Server: send each response on the stream its request opened; check the event store's stream key."),
    FindingRule('stateless_server_minted_session', ('warning',), 'rules.stateless.findings',
                'a 2026-07-28 server that still hands out Mcp-Session-Id',
                'Revision 2026-07-28 removed sessions: clients of that revision ignore the id, so state the server keeps per session is state nobody can reach again.',
                'Server: on revision 2026-07-28 drop the session manager (or upgrade the server SDK): its clients never send the id back.'),
    FindingRule('stateless_server_honoured_resumption', ('warning',), 'rules.stateless.findings',
                'a 2026-07-28 server that still replays on Last-Event-ID',
                'Revision 2026-07-28 removed resumption: clients re-issue the request instead, so a replayed stream delivers its results a second time.',
                'Server: turn Last-Event-ID replay off for 2026-07-28 clients; they re-issue the request instead, and a replay delivers results twice.'),
    FindingRule('reissued_request_ran_twice', ('critical',), 'rules.stateless.findings',
                "a 2026-07-28 client's re-issued call that the server ran a second time",
                'Duplicate side effects: the client re-issued a call after a broken stream (as revision 2026-07-28 requires) but the server had not cancelled the first one.',
                'Server: cancel a call whose stream broke, or make the tool idempotent; check the side effects of both runs.'),
    FindingRule('reconnect_storm', ('warning',), 'rules.storm.findings', 'more than N reconnects of one stream within a minute (N: --reconnect-storm, the Analysis value)', 'Load and risk without a visible failure: each reconnect costs the server a replay and the client a chance to lose or repeat events, and a client that never backs off keeps doing it.', 'Client: back off between reconnects (the SSE retry field, growing delays). Proxy or server: find what cuts the stream each time (an idle or buffering timeout, a close after each event).'),
)

FINDING = {r.rule: r for r in FINDING_RULES}


def finding_severity(rule: str, severity: str) -> str:
    """``severity`` for a finding of ``rule``, checked against the catalog (a rule never invents its own)."""
    allowed = FINDING[rule].severities
    if severity not in allowed:
        raise ValueError(f"finding {rule!r} is reported as {allowed}, not {severity!r} (analyzer/catalog.py)")
    return severity


def effect(name: str) -> str:
    """The operational effect of a verdict (a boundary's finding is named by its verdict) or else of a history
    rule.  (``cross_stream_replay`` is both; history findings take theirs from :data:`FINDING`.)"""
    return VERDICT[name].effect if name in VERDICT else FINDING[name].effect


def what(name: str, boundary: bool) -> str:
    """What a finding's rule means, in one line: a boundary's is its verdict's meaning, a history rule's its ``what``."""
    return VERDICT[name].meaning if boundary and name in VERDICT else FINDING[name].what if name in FINDING else ""


def next_step(name: str, boundary: bool) -> str:
    """What to do about a finding: a boundary's is named by its verdict, a history rule's by its rule."""
    return VERDICT[name].next_step if boundary and name in VERDICT else FINDING[name].next_step if name in FINDING else ""


def next_steps_markdown() -> str:
    """README's "What to do with a finding", one line per verdict and rule."""
    rows = [f"- **`{v.name}`** (verdict): {v.next_step}" for v in VERDICTS if v.name != "continuous"]
    rows += [f"- **`{r.rule}`**: {r.next_step}" for r in FINDING_RULES]
    return "\n".join(rows) + "\n"


# What on the wire a boundary's verdict rests on: the boundary's ``evidence``, one per branch of the decision chain
# (verdicts.EVIDENCE says which).  A ``continuous`` verdict always names a proof; ``none`` is never continuous.
EVIDENCE_KINDS: tuple[tuple[str, str], ...] = (
    ("ids", "the event ids alone: contiguous ids that continue from the client's Last-Event-ID, jump or go back; an opaque id the stream had delivered, delivered again; ids that name another stream"),
    ("second_view", "another view of the same stream: another capture or hop, or the old connection's own tail, shows what the server sent after the client's Last-Event-ID, compared with what arrived"),
    ("progress_and_response", "opaque ids: the call's own progress notifications (one progressToken) go on from their last value before the cursor by the step they keep, with no jump, repeat or step back, and the call's own response arrives after the reconnect; when every step carries the same other notifications (a log at each step), the step the reconnect cut carries them too. A lost log of a tool that logs at some steps only is not seen"),
    ("progress_skipped", "opaque ids: the call's own progress notifications (one progressToken) keep one fixed step, shown by at least two values before the cursor and two after the reconnect, and jump at the reconnect by a whole number of steps (1, 2, 3, then 5, 6, 7): the values in between were sent and never arrived. Uneven progress (1, 2, 5, 6, 10) proves nothing"),
    ("content", "the events' payloads: the same id and payload (digest) that another session had been delivered"),
    ("jsonrpc", "JSON-RPC messages: a response to a request of another stream, a response the stream still owed that never came, or the server's answers showing it forgot the session"),
    ("http", "the HTTP answer to the reconnect: its status, Mcp-Session-Id, Content-Type or replay epoch"),
    ("none", "nothing on the wire decides it: no response, no recorded body, no event after the reconnect, or opaque ids that nothing else vouches for"),
)
EVIDENCE = dict(EVIDENCE_KINDS)

# branches of the decision chain that are unverifiable because the capture lacks what the client received (no
# body recorded, the reconnect's or that of the stream it reopens without a cursor; the resumed stream in TLS no key
# decrypted): the client saw its events and may rightly have gone on, so its reaction is not judged (handled_correctly
# null), unlike an unverifiable the client could not verify either
CAPTURE_BLIND = frozenset({"body_not_recorded", "resumed_not_recorded", "resumed_undecrypted"})


def evidence_markdown() -> str:
    """README's list of the boundary ``evidence`` values."""
    return "".join(f"- **`{name}`**: {meaning}\n" for name, meaning in EVIDENCE_KINDS)


def verdicts_markdown() -> str:
    """README's verdict table."""
    rows = ["| verdict | meaning | typical cause |", "|---|---|---|"]
    rows += [f"| `{v.name}` | {v.meaning} |{f' {v.cause} ' if v.cause else ' '}|" for v in VERDICTS]
    return "\n".join(rows) + "\n"


def findings_markdown() -> str:
    """README's table of the history rules."""
    rows = ["| finding | severity | what | clients it applies to | found by |", "|---|---|---|---|---|"]
    rows += [f"| `{r.rule}` | {' or '.join(r.severities)} | {r.what} | {r.clients or 'any'} | `{r.decided_by}` |" for r in FINDING_RULES]
    return "\n".join(rows) + "\n"
