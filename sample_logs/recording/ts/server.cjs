'use strict';
/**
 * Recording server: official TypeScript MCP SDK (@modelcontextprotocol/sdk, pinned in package.json),
 * Streamable HTTP, stateful sessions, the SDK's example InMemoryEventStore, `retryInterval`.
 *
 * Session routing is the SDK example's (`examples/server/ssePollingExample.ts`): one
 * StreamableHTTPServerTransport + McpServer per session in a Map; a request with an unknown
 * Mcp-Session-Id -> 404 {"code":-32001,"message":"Session not found"}; no session id and not
 * initialize -> 400. `--store per-session` (default) gives each session its own store like
 * `simpleStreamableHttp.ts`; `--store shared` shares one like `ssePollingExample.ts`.
 *
 * Tools:
 *   slow_count {steps, interval_ms, close_at[]}  per step: notifications/progress + notifications/message
 *       sent back to back on the tool's POST stream (relatedRequestId), then after the steps in
 *       close_at: extra.closeSSEStream() (SDK server-side close for 2025-11-25 SSE polling).
 *   broadcast {count, interval_ms, close_after}  returns at once; in the background sends `count`
 *       notifications/message with NO related request (-> standalone GET stream, stream id
 *       '_GET_stream'), and after `close_after` of them calls extra.closeStandaloneSSEStream().
 *   broadcast_status {}  what the server sent so far, with the event ids the store gave them.
 *
 * Lines on stdout (flushed; a harness waits for them): `EVENT <step>`, `CLOSE ...`, `BROADCAST <i>`,
 * `STORE ...` / `REPLAY ...` (event_store.cjs), `HTTP ...` (one per request).
 *
 *   NODE_PATH=/work/ts-rec/node_modules node server.cjs --port 18080 --retry-ms 500
 *
 * CommonJS on purpose: node_modules lives outside the repo and only require() honours NODE_PATH.
 * Only 127.0.0.1 is ever bound.
 */
const { randomUUID } = require('node:crypto');
const { parseArgs } = require('node:util');
const { McpServer } = require('@modelcontextprotocol/sdk/server/mcp.js');
const { createMcpExpressApp } = require('@modelcontextprotocol/sdk/server/express.js');
const { StreamableHTTPServerTransport } = require('@modelcontextprotocol/sdk/server/streamableHttp.js');
const { isInitializeRequest } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');
const { TracingEventStore } = require('./event_store.cjs');

const { values: opt } = parseArgs({
    options: {
        port: { type: 'string' },
        'retry-ms': { type: 'string', default: '500' },
        'keepalive-ms': { type: 'string', default: '15000' },
        store: { type: 'string', default: 'per-session' }
    }
});
const PORT = Number(opt.port);
const RETRY_MS = Number(opt['retry-ms']);
const KEEPALIVE_MS = Number(opt['keepalive-ms']);
if (!PORT || !['per-session', 'shared'].includes(opt.store)) {
    console.error('usage: server.cjs --port N [--retry-ms 500] [--keepalive-ms 15000] [--store per-session|shared]');
    process.exit(2);
}

const log = line => console.log(`${new Date().toISOString()} ${line}`);
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));
const sharedStore = opt.store === 'shared' ? new TracingEventStore('shared', log) : undefined;

function buildServer(store) {
    const server = new McpServer({ name: 'sse-audit-ts-recorder', version: '0.0.0' }, { capabilities: { logging: {} } });
    const sent = []; // broadcast notifications: {n, eventId}

    server.registerTool(
        'slow_count',
        {
            description: 'Count to steps, reporting progress and a log line per step; may close its SSE stream mid-way.',
            inputSchema: {
                steps: z.number().int().default(6),
                interval_ms: z.number().int().default(400),
                close_at: z.array(z.number().int()).default([])
            }
        },
        async ({ steps, interval_ms, close_at }, extra) => {
            const token = extra._meta?.progressToken;
            for (let step = 1; step <= steps; step++) {
                if (token !== undefined) {
                    await extra.sendNotification({
                        method: 'notifications/progress',
                        params: { progressToken: token, progress: step, total: steps, message: `step ${step}/${steps}` }
                    });
                }
                await extra.sendNotification({
                    method: 'notifications/message',
                    params: { level: 'info', logger: 'slow_count', data: `slow_count step ${step}` }
                });
                log(`EVENT ${step}`);
                if (close_at.includes(step)) {
                    log(`CLOSE request ${extra.requestId} stream via extra.closeSSEStream (${extra.closeSSEStream ? 'available' : 'NOT available'})`);
                    extra.closeSSEStream?.();
                }
                await sleep(interval_ms);
            }
            return { content: [{ type: 'text', text: `counted to ${steps}` }] };
        }
    );

    server.registerTool(
        'broadcast',
        {
            description: 'Send `count` server-initiated log notifications (standalone GET stream) in the background.',
            inputSchema: {
                count: z.number().int().default(8),
                interval_ms: z.number().int().default(300),
                close_after: z.number().int().default(3)
            }
        },
        async ({ count, interval_ms, close_after }, extra) => {
            const closeStandalone = extra.closeStandaloneSSEStream;
            const run = async () => {
                for (let n = 1; n <= count; n++) {
                    const before = store.events.size;
                    await server.sendLoggingMessage({ level: 'info', logger: 'broadcast', data: `broadcast ${n}/${count}` });
                    const ids = [...store.events.keys()].slice(before).filter(id => store.events.get(id).streamId === '_GET_stream');
                    sent.push({ n, eventIds: ids });
                    log(`BROADCAST ${n} stored as ${ids.join(',')}`);
                    if (n === close_after) {
                        log(`CLOSE standalone GET stream via extra.closeStandaloneSSEStream (${closeStandalone ? 'available' : 'NOT available'})`);
                        closeStandalone?.();
                    }
                    await sleep(interval_ms);
                }
                log('BROADCAST done');
            };
            run().catch(err => log(`BROADCAST error ${err}`));
            return { content: [{ type: 'text', text: `broadcasting ${count} notifications every ${interval_ms} ms` }] };
        }
    );

    server.registerTool('broadcast_status', { description: 'What broadcast has sent so far.', inputSchema: {} }, async () => ({
        content: [
            {
                type: 'text',
                text: `server sent ${sent.length} broadcast notifications: ` + sent.map(s => `#${s.n}=${s.eventIds.join('|')}`).join(' ')
            }
        ]
    }));
    return server;
}

const app = createMcpExpressApp({ host: '127.0.0.1' });
const sessions = new Map();

app.all('/mcp', async (req, res) => {
    const sessionId = req.headers['mcp-session-id'];
    const lastEventId = req.headers['last-event-id'];
    const body = req.body && req.body.method ? ` ${req.body.method}` : '';
    res.on('finish', () =>
        log(`HTTP ${req.method}${body} session=${sessionId ?? '-'} last-event-id=${lastEventId ?? '-'} -> ${res.statusCode} (finished)`)
    );
    res.on('close', () => {
        if (!res.writableFinished) log(`HTTP ${req.method}${body} session=${sessionId ?? '-'} -> connection closed before the response finished`);
    });
    const session = sessionId ? sessions.get(sessionId) : undefined;
    if (session) {
        await session.transport.handleRequest(req, res, req.body);
        return;
    }
    if (sessionId) {
        res.status(404).json({ jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
        return;
    }
    if (!isInitializeRequest(req.body)) {
        res.status(400).json({ jsonrpc: '2.0', error: { code: -32000, message: 'Bad Request: No valid session ID provided' }, id: null });
        return;
    }
    const store = sharedStore ?? new TracingEventStore(`session ${sessions.size + 1}`, log);
    const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        eventStore: store,
        retryInterval: RETRY_MS,
        keepAliveMs: KEEPALIVE_MS,
        onsessioninitialized: id => {
            log(`SESSION ${id} initialized`);
            sessions.set(id, { transport });
        }
    });
    transport.onclose = () => {
        const sid = transport.sessionId;
        log(`SESSION ${sid} closed`);
        if (sid) sessions.delete(sid);
    };
    await buildServer(store).connect(transport);
    await transport.handleRequest(req, res, req.body);
});

const httpServer = app.listen(PORT, '127.0.0.1', () =>
    log(`listening on 127.0.0.1:${PORT} pid=${process.pid} retry=${RETRY_MS} keepalive=${KEEPALIVE_MS} store=${opt.store}`)
);
for (const sig of ['SIGINT', 'SIGTERM']) {
    process.on(sig, () => {
        log(`${sig}: exiting`);
        httpServer.closeAllConnections?.();
        process.exit(0);
    });
}
