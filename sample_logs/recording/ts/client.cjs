'use strict';
/**
 * Recording client: official TypeScript MCP SDK `Client` + `StreamableHTTPClientTransport`
 * (protocol 2025-11-25, default reconnection options: initial 1000 ms, x1.5, max 30 s,
 * maxRetries 2; a server `retry:` overrides the delay). One scenario per run, bounded by --timeout.
 *
 *   resume          tools/call slow_count (closed by the server after steps in --close-at), print, DELETE.
 *   get-stream-bug  wait for the standalone GET, tools/call broadcast, listen --listen-ms, then
 *                   tools/call broadcast_status (what the server says it sent), DELETE.
 *   unknown-id      tools/call slow_count; after --abandon-after progress notifications the Client is closed
 *                   without DELETE (as a crash would); --gap-ms later a NEW session (new Client) resumes
 *                   the old call with the last resumption token (request option `resumptionToken`),
 *                   waits --resume-timeout-ms, DELETE. (Scenario cross-session = same client, shared store.)
 *   server-restart  tools/call slow_count while the harness kills + restarts the server; the transport's
 *                   own reconnects reach the new process; the call times out; DELETE.
 *
 * Scenarios against the PYTHON recording server (../server.py; record_ts.py client-*): the application
 * prints everything it gets per call (progress, log notifications, result or error/timeout) and every
 * `onerror` (set on the Client: it also receives the transport's errors). Tools: slow_count {steps},
 * add {a, b}, slow_side {steps} (server.py --extra-tools).
 *   replica-failover  (2 replicas behind rr_proxy.py) wait --pause-ms, tools/call add {a:2,b:3}, tools/list,
 *                     ping, tools/call slow_count (timeout --call-timeout-ms; its stream is cut, the
 *                     transport's own resume lands on the other replica), then ping, DELETE.
 *   resumption-token  the same requests, but the transport does not resume by itself (maxRetries 0); when
 *                     it reports the break, the APPLICATION resumes the call with the last resumption token
 *                     (callTool option `resumptionToken`, timeout --resume-timeout-ms); the first call
 *                     times out; then ping, DELETE.
 *   pair              two sessions at once: A calls tools/call --pair-tool {steps: --pair-steps}, B calls
 *                     slow_count {steps} --stagger-ms later; both wait --linger-ms after both calls are
 *                     over (so B's resumed stream can go on), then DELETE.
 *   cut-twice         tools/call slow_count {steps} (the server cuts its stream twice), DELETE.
 *
 *   NODE_PATH=/work/ts-rec/node_modules node client.cjs http://127.0.0.1:18081/mcp resume
 */
const { parseArgs } = require('node:util');
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { CallToolResultSchema, LoggingMessageNotificationSchema } = require('@modelcontextprotocol/sdk/types.js');

const { values: opt, positionals } = parseArgs({
    allowPositionals: true,
    options: {
        steps: { type: 'string', default: '6' },
        'interval-ms': { type: 'string', default: '400' },
        'close-at': { type: 'string', default: '' },
        count: { type: 'string', default: '8' },
        'close-after': { type: 'string', default: '3' },
        'listen-ms': { type: 'string', default: '3500' },
        'call-timeout-ms': { type: 'string', default: '20000' },
        'resume-timeout-ms': { type: 'string', default: '4000' },
        'abandon-after': { type: 'string', default: '2' },
        'gap-ms': { type: 'string', default: '2000' },
        'pause-ms': { type: 'string', default: '500' },
        'pair-tool': { type: 'string', default: 'slow_side' },
        'pair-steps': { type: 'string', default: '3' },
        'stagger-ms': { type: 'string', default: '500' },
        'linger-ms': { type: 'string', default: '2500' },
        timeout: { type: 'string', default: '30' }
    }
});
const [url, scenario] = positionals;
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const say = line => console.log(`${new Date().toISOString()} ${line}`);

async function connect(label) {
    const client = new Client({ name: `sse-audit-ts-client-${label}`, version: '0.0.0' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(url));
    transport.onerror = err => say(`[${label}] transport error: ${err.message}`);
    client.setNotificationHandler(LoggingMessageNotificationSchema, n => say(`[${label}] log ${n.params.level}: ${n.params.data}`));
    await client.connect(transport);
    say(`[${label}] initialized: session ${transport.sessionId} protocol ${transport.protocolVersion}`);
    return { client, transport };
}

async function bye({ client, transport }, label) {
    try {
        await transport.terminateSession();
        say(`[${label}] DELETE sent`);
    } catch (err) {
        say(`[${label}] terminateSession failed: ${err.message}`);
    }
    await client.close();
}

function text(result) {
    return result.content.map(c => c.text).join(' ');
}

async function resume() {
    const s = await connect('c1');
    const closeAt = opt['close-at'].split(',').filter(Boolean).map(Number);
    const result = await s.client.callTool(
        { name: 'slow_count', arguments: { steps: Number(opt.steps), interval_ms: Number(opt['interval-ms']), close_at: closeAt } },
        CallToolResultSchema,
        {
            timeout: Number(opt['call-timeout-ms']),
            onprogress: p => say(`[c1] progress ${p.progress}/${p.total} ${p.message}`),
            onresumptiontoken: t => say(`[c1] resumption token ${t}`)
        }
    );
    say(`[c1] result: ${text(result)}`);
    await bye(s, 'c1');
}

async function getStreamBug() {
    const s = await connect('c1');
    await sleep(500); // the transport opens the standalone GET after notifications/initialized, without awaiting it
    const count = Number(opt.count);
    let received = 0;
    s.client.setNotificationHandler(LoggingMessageNotificationSchema, n => {
        received++;
        say(`[c1] log ${n.params.level}: ${n.params.data}`);
    });
    const r1 = await s.client.callTool({ name: 'broadcast', arguments: { count, interval_ms: 300, close_after: Number(opt['close-after']) } });
    say(`[c1] broadcast: ${text(r1)}`);
    await sleep(Number(opt['listen-ms']));
    const r2 = await s.client.callTool({ name: 'broadcast_status', arguments: {} });
    say(`[c1] broadcast_status: ${text(r2)}`);
    say(`[c1] received ${received} of ${count} broadcast notifications`);
    await bye(s, 'c1');
}

function slowCountParams() {
    return { name: 'slow_count', arguments: { steps: Number(opt.steps), interval_ms: Number(opt['interval-ms']), close_at: [] } };
}

// The first session's tools/call, until `abandonAfter` progress notifications (then the Client is
// closed without DELETE, as a crashed client would leave it) or until the call times out.
async function firstCall(s1, abandonAfter) {
    let token;
    try {
        const result = await s1.client.callTool(slowCountParams(), CallToolResultSchema, {
            timeout: Number(opt['call-timeout-ms']),
            onprogress: p => {
                say(`[c1] progress ${p.progress}/${p.total} ${p.message}`);
                if (p.progress === abandonAfter) {
                    setTimeout(() => {
                        say('[c1] abandoning the session: Client.close() without DELETE (aborts the open streams)');
                        s1.client.close();
                    }, 100);
                }
            },
            onresumptiontoken: t => {
                token = t;
                say(`[c1] resumption token ${t}`);
            }
        });
        say(`[c1] result (unexpected): ${text(result)}`);
    } catch (err) {
        say(`[c1] tools/call failed: ${err.message}`);
    }
    return token;
}

// unknown-id / cross-session: the client gives up its first session mid-call, opens a new session and
// resumes the old call with the last resumption token it saw. With a per-session event store the new
// session's store has never seen that id; with a shared store (ssePollingExample) it has.
async function unknownId() {
    const s1 = await connect('c1');
    const token = await firstCall(s1, Number(opt['abandon-after']));
    await sleep(Number(opt['gap-ms']));
    if (!token) {
        say('[c2] no resumption token was seen, nothing to resume');
        return;
    }
    const s2 = await connect('c2');
    say(`[c2] resuming the old tools/call with resumptionToken ${token} in the new session`);
    try {
        const result = await s2.client.request({ method: 'tools/call', params: slowCountParams() }, CallToolResultSchema, {
            timeout: Number(opt['resume-timeout-ms']),
            resumptionToken: token,
            onresumptiontoken: t => say(`[c2] resumption token ${t}`)
        });
        say(`[c2] result: ${text(result)}`);
    } catch (err) {
        say(`[c2] resumed tools/call failed: ${err.message}`);
    }
    await sleep(500); // let a cancellation (sent on timeout) reach the wire
    await bye(s2, 'c2');
}

// server-restart: the harness SIGKILLs and restarts the server during the call; the transport's own
// reconnects reach the new process (no sessions, empty store); the call times out.
async function serverRestart() {
    const s1 = await connect('c1');
    await firstCall(s1, -1);
    await sleep(500); // let the cancellation (sent on timeout) reach the wire
    await bye(s1, 'c1');
}

// ---- Scenarios against the python recording server (record_ts.py client-*) ----

// A session whose application logs everything it receives. `client.onerror` gets the transport's errors
// too (Protocol.connect chains them), so no transport.onerror is set: every error is printed once.
async function connectApp(label, transportOptions = {}) {
    const client = new Client({ name: `sse-audit-ts-client-${label}`, version: '0.0.0' }, { capabilities: {} });
    const transport = new StreamableHTTPClientTransport(new URL(url), transportOptions);
    const app = { client, transport, label, errorWaiters: [] };
    client.onerror = err => {
        say(`[${label}] onerror: ${err.message}`);
        for (const w of app.errorWaiters) w(err);
    };
    client.setNotificationHandler(LoggingMessageNotificationSchema, n =>
        say(`[${label}] log notification ${n.params.level}: ${JSON.stringify(n.params.data)}`)
    );
    await client.connect(transport);
    say(`[${label}] initialized: session ${transport.sessionId} protocol ${transport.protocolVersion}`);
    return app;
}

// The JSON-RPC id the SDK will give the next request (Protocol's own counter; printed so the log
// can be matched with the wire).
const nextId = app => app.client._requestMessageId;

function describeResult(result) {
    return `isError=${result.isError ?? false} content=${JSON.stringify(text(result))} structuredContent=${JSON.stringify(result.structuredContent)}`;
}

// tools/call as the application sees it: each progress notification, the resumption tokens, then the
// result or the error (timeout, ...). Returns the result or undefined.
async function appCall(app, name, args, { timeout, resumptionToken, onToken } = {}) {
    const what = `tools/call ${name} ${JSON.stringify(args)}`;
    say(`[${app.label}] calling ${what} (JSON-RPC id ${nextId(app)}, timeout ${timeout} ms` +
        (resumptionToken ? `, resumptionToken ${resumptionToken})` : ')'));
    try {
        const result = await app.client.callTool({ name, arguments: args }, CallToolResultSchema, {
            timeout,
            resumptionToken,
            onprogress: p => say(`[${app.label}] ${name}: progress ${p.progress}/${p.total} ${JSON.stringify(p.message)}`),
            onresumptiontoken: t => {
                say(`[${app.label}] ${name}: resumption token ${t}`);
                onToken?.(t);
            }
        });
        say(`[${app.label}] ${what} -> RESULT ${describeResult(result)}`);
        return result;
    } catch (err) {
        say(`[${app.label}] ${what} -> FAILED ${err.constructor?.name ?? 'Error'}: ${err.message}`);
        return undefined;
    }
}

async function appPing(app) {
    const id = nextId(app);
    try {
        await app.client.ping();
        say(`[${app.label}] ping (JSON-RPC id ${id}) -> ok`);
    } catch (err) {
        say(`[${app.label}] ping (JSON-RPC id ${id}) -> FAILED ${err.message}`);
    }
}

async function appListTools(app) {
    const id = nextId(app);
    try {
        const r = await app.client.listTools();
        say(`[${app.label}] tools/list (JSON-RPC id ${id}) -> ${r.tools.map(t => t.name).join(', ')}`);
    } catch (err) {
        say(`[${app.label}] tools/list (JSON-RPC id ${id}) -> FAILED ${err.message}`);
    }
}

// The requests before the slow call in replica-failover / resumption-token. With the round-robin proxy
// (1, 2, 1, 2 ... per request): initialize -> 1, initialized -> 2, standalone GET -> 1, add -> 2,
// tools/list -> 1, ping -> 2, slow_count -> 1, the resume GET -> 2 (which holds add's and ping's events).
async function replicaPrelude(app) {
    await sleep(Number(opt['pause-ms'])); // the standalone GET (opened after initialized, not awaited) goes first
    await appCall(app, 'add', { a: 2, b: 3 }, { timeout: 5000 });
    await appListTools(app);
    await appPing(app);
}

async function replicaFailover() {
    const app = await connectApp('c1');
    await replicaPrelude(app);
    await appCall(app, 'slow_count', { steps: Number(opt.steps) }, { timeout: Number(opt['call-timeout-ms']) });
    await sleep(500); // let the cancellation (sent on timeout) reach the wire
    await appPing(app);
    await bye(app, 'c1');
}

async function resumptionToken() {
    const app = await connectApp('c1', { reconnectionOptions: { initialReconnectionDelay: 1000, maxReconnectionDelay: 30000, reconnectionDelayGrowFactor: 1.5, maxRetries: 0 } });
    say('[c1] transport reconnectionOptions.maxRetries = 0: the application resumes broken calls itself');
    await replicaPrelude(app);
    let token;
    let broke;
    const brokeP = new Promise(resolve => (broke = resolve));
    app.errorWaiters.push(err => {
        if (/Maximum reconnection attempts/.test(err.message)) broke('stream broke');
    });
    const first = appCall(app, 'slow_count', { steps: Number(opt.steps) }, {
        timeout: Number(opt['call-timeout-ms']),
        onToken: t => (token = t)
    });
    const why = await Promise.race([brokeP, first.then(() => 'call over')]);
    if (why !== 'stream broke' || !token) {
        say(`[c1] nothing to resume (${why}, token ${token})`);
    } else {
        await sleep(Number(opt['gap-ms']));
        say(`[c1] the call's stream broke; the application resumes it with resumptionToken ${token}`);
        await appCall(app, 'slow_count', { steps: Number(opt.steps) }, { timeout: Number(opt['resume-timeout-ms']), resumptionToken: token });
    }
    await first;
    await sleep(500); // let the cancellation (sent on timeout) reach the wire
    await appPing(app);
    await bye(app, 'c1');
}

async function pair() {
    const [a, b] = await Promise.all([connectApp('A'), connectApp('B')]);
    await sleep(Number(opt['pause-ms']));
    const aCall = appCall(a, opt['pair-tool'], { steps: Number(opt['pair-steps']) }, { timeout: Number(opt['call-timeout-ms']) });
    await sleep(Number(opt['stagger-ms']));
    const bCall = appCall(b, 'slow_count', { steps: Number(opt.steps) }, { timeout: Number(opt['call-timeout-ms']) });
    await Promise.all([aCall, bCall]);
    say(`both calls are over; both sessions stay open ${opt['linger-ms']} ms more`);
    await sleep(Number(opt['linger-ms']));
    await Promise.all([bye(a, 'A'), bye(b, 'B')]);
}

async function cutTwice() {
    const app = await connectApp('c1');
    await appCall(app, 'slow_count', { steps: Number(opt.steps) }, { timeout: Number(opt['call-timeout-ms']) });
    await bye(app, 'c1');
}

const scenarios = {
    resume,
    'get-stream-bug': getStreamBug,
    'unknown-id': unknownId,
    'server-restart': serverRestart,
    'replica-failover': replicaFailover,
    'resumption-token': resumptionToken,
    pair,
    'cut-twice': cutTwice
};
if (!url || !scenarios[scenario]) {
    console.error(`usage: client.cjs URL {${Object.keys(scenarios).join('|')}} [options]`);
    process.exit(2);
}
const deadline = setTimeout(() => {
    say(`client: overall timeout ${opt.timeout}s`);
    process.exit(3);
}, Number(opt.timeout) * 1000);
scenarios[scenario]()
    .then(() => {
        clearTimeout(deadline);
        say('client: done');
        setTimeout(() => process.exit(0), 200).unref();
    })
    .catch(err => {
        say(`client error: ${err.stack || err}`);
        process.exit(1);
    });
