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

const scenarios = { resume, 'get-stream-bug': getStreamBug, 'unknown-id': unknownId, 'server-restart': serverRestart };
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
