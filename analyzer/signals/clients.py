"""Which client made a session, and what that client does with a foreign or repeated event.

The wire is the same for every client; what the application gets is not (shared/reference/mcp-transport-facts.md,
point 3, and README "Clients"):

- the python SDK client (2.3.0; ``User-Agent: python-httpx/…`` or ``python-httpx2/…``) overwrites the id of any
  response that arrives on a resumed stream with the id of the request that opened the stream
  (``message.id = original_request_id``), on its own automatic reconnects too, and then closes that stream: the
  call completes with whatever answer came first -- another call's result included;
- the TypeScript SDK client (1.32.2, on node: ``User-Agent: node`` or ``undici``; mcp-remote bundles it) rewrites
  only when the application resumed with a ``resumptionToken`` itself; on its automatic reconnect a foreign
  response keeps its own id: a pending request with that id takes it, anything else is dropped as an
  "unknown message ID" and the resumed call waits on (times out unless its own response comes later);
- the Go SDK client (go-sdk v1.8.0; ``User-Agent: Go-http-client/1.1``, net/http's default) never rewrites ids:
  its jsonrpc2 layer gives a response to the pending call with that id and drops any other without a word
  (``readIncoming``: "TODO: How should we report unexpected responses?"); it resumes a cut stream with GET +
  Last-Event-ID (the last id it received, up to 5 attempts without progress) and on a 404 to that GET fails the
  whole session at once (``ErrSessionMissing``: no retry, no DELETE);
- the Java SDK client (mcp 2.2.0; ``User-Agent: Java-http-client/<jdk>``, java.net.http's default) does not resume
  a cut stream at all: each SSE event gets its own ``DefaultMcpTransportStream`` over a one-event Flux, so the
  stream's reconnect-on-error never fires; the cut call waits for its request timeout.  A 404 invalidates the
  session (DELETE, and a new ``initialize`` at the next request);
- any other client: not known here.  A finding that depends on it says both outcomes and is not critical.

The python client also resumes a *resumed* stream that breaks again with the cursor of its previous resume, not
the last id it received (``_handle_reconnection``'s ``except`` branch): a correct store then replays events the
application already had.  The TypeScript client resumes from the last id it received.

The client is told by the session's ``User-Agent`` (first request that carries one) and shown with the
``initialize`` request's ``clientInfo`` (name and version: the application's own words, not the SDK's).
"""
from __future__ import annotations

import polars as pl

from analyzer.signals.streams import Frames

PYTHON, TYPESCRIPT, GO, JAVA, UNKNOWN = "python", "typescript", "go", "java", "unknown"
FAMILIES = (PYTHON, TYPESCRIPT, GO, JAVA, UNKNOWN)

# what each client does (README's client table is made from this: tests/test_readme.py keeps them equal)
BEHAVIOUR = {
    PYTHON: {
        "label": "python SDK client (tested: mcp 2.3.0)",
        "agents": "`python-httpx/…`, `python-httpx2/…`",
        "foreign_response": "takes it as the resumed call's result (rewrites its id), then closes the stream: "
                            "**wrong result delivered**",
        "stale_cursor": "a resumed stream that breaks again is resumed with the previous resume's `Last-Event-ID`: "
                        "a correct store replays events the application already had (**delivered twice**)",
        "not_found_on_resume": "tries the resume again (real-python-server-restart: 2 more GETs, each 404), then gives up: "
                               "the pending call never gets its result",
    },
    TYPESCRIPT: {
        "label": "TypeScript SDK client (tested: 1.32.2; also mcp-remote)",
        "agents": "`node`, `undici`",
        "foreign_response": "automatic reconnect: a pending request with the response's id takes it, any other id is "
                            "dropped (\"unknown message ID\") and the resumed call **never completes** (times out); "
                            "an application resume with `resumptionToken` rewrites the id as python does",
        "stale_cursor": "resumes from the last id it received: a repeated `Last-Event-ID` means it received nothing since",
        "not_found_on_resume": "the resume, the cancellation and the DELETE get 404 (real-ts-server-restart): the pending "
                               "call times out",
    },
    GO: {
        "label": "Go SDK client (tested: go-sdk v1.8.0)",
        "agents": "`Go-http-client/…` (net/http's default: another Go client that keeps it looks the same)",
        "foreign_response": "keeps its id (no rewrite): an answer with the resumed call's own id is taken as its result "
                            "(real-go-client-foreign-same-id: **wrong result delivered**); an id no call waits for is "
                            "dropped without a word and the client reads on (real-go-client-replica-failover: two foreign "
                            "answers dropped, the call completed with its own result after a second resume); an id "
                            "another waiting call has goes to that call by the source, not recorded: both readings given",
        "stale_cursor": "resumes from the last id it received, up to 5 attempts without progress "
                        "(real-go-client-cut-twice: Last-Event-ID 5, then 9)",
        "not_found_on_resume": "fails the whole session at once: the pending call errors with \"session not found\", "
                               "no retry, no DELETE, later requests fail without reaching the wire "
                               "(real-go-client-server-restart)",
    },
    JAVA: {
        "label": "Java SDK client (tested: mcp 2.2.0)",
        "agents": "`Java-http-client/…` (java.net.http's default, likewise)",
        "foreign_response": "never resumes a cut stream (no GET with `Last-Event-ID`), so none reaches it that way; "
                            "a response to no pending id is dropped with a warning (\"Unexpected response for unknown id\")",
        "stale_cursor": "never resumes: the cut call waits for its request timeout (real-java-client-resume: 8 s, then "
                        "the session goes on)",
        "not_found_on_resume": "no resume to refuse; the next request's 404 invalidates the session: DELETE, then a new "
                               "`initialize` at the request after (real-java-client-server-restart)",
    },
    UNKNOWN: {
        "label": "any other client",
        "agents": "anything else, or none",
        "foreign_response": "either outcome: the findings say both and are not critical",
        "stale_cursor": "a repeated `Last-Event-ID` after events were delivered is reported as a warning, both readings given",
        "not_found_on_resume": "not known",
    },
}


def family_of(agent: pl.Expr) -> pl.Expr:
    """The client family a ``User-Agent`` names (UNKNOWN for none)."""
    a = agent.str.to_lowercase()
    return (
        pl.when(a.str.contains(r"^python-httpx2?(/|$)")).then(pl.lit(PYTHON))
        .when(a.str.contains(r"^(node|undici)(/|$)")).then(pl.lit(TYPESCRIPT))
        .when(a.str.contains(r"^go-http-client(/|$)")).then(pl.lit(GO))
        .when(a.str.contains(r"^java-http-client(/|$)")).then(pl.lit(JAVA))
        .otherwise(pl.lit(UNKNOWN))
    )


def sessions(f: Frames, among: pl.LazyFrame | pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per session: ``session``, ``client`` (family), ``user_agent``, ``client_name``, ``client_version``.
    ``among`` (a frame with a ``session`` column): those sessions alone -- a rule about reconnects asks only about
    the sessions that have one, not every request body of history (None: every session, as the document lists them)."""
    x = f.exchanges.lazy()
    if among is not None:
        x = x.filter(pl.col("session").is_in(among.lazy().select("session").unique().collect().to_series().implode()))
    agent = (
        x.filter(pl.col("user_agent").is_not_null() & (pl.col("user_agent") != ""))
        .sort("pos")
        .group_by("session")
        .agg(user_agent=pl.col("user_agent").first())
    )
    body = pl.col("request_body")
    info = (
        x.filter(body.is_not_null() & body.str.contains('"initialize"', literal=True))
        .with_columns(_m=body.str.json_path_match("$.method"))
        .filter(pl.col("_m") == "initialize")
        .sort("pos")
        .group_by("session")
        .agg(
            client_name=body.str.json_path_match("$.params.clientInfo.name").first(),
            client_version=body.str.json_path_match("$.params.clientInfo.version").first(),
        )
    )
    return (
        x.select("session").unique()
        .join(agent, on="session", how="left")
        .join(info, on="session", how="left")
        .with_columns(client=family_of(pl.col("user_agent").fill_null("")))
        .select("session", "client", "user_agent", "client_name", "client_version")
        .collect()
    )


def clients_markdown() -> str:
    """README's client table (tests/test_catalog.py keeps the two equal)."""
    rows = ["| client | told by `User-Agent` | a foreign response on a resumed stream | a resumed stream cut again | 404 on resume |",
            "|---|---|---|---|---|"]
    for fam in FAMILIES:
        b = BEHAVIOUR[fam]
        rows.append(f"| {b['label']} | {b['agents']} | {b['foreign_response']} | {b['stale_cursor']} | {b['not_found_on_resume']} |")
    return "\n".join(rows) + "\n"
