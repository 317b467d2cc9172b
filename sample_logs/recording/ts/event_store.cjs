'use strict';
/**
 * Event store for the TypeScript recording server.
 *
 * `InMemoryEventStore` is the SDK's OWN example store, imported unmodified from the installed
 * package (`@modelcontextprotocol/sdk/dist/cjs/examples/shared/inMemoryEventStore.js`, the same
 * class the SDK's `simpleStreamableHttp` and `ssePollingExample` servers use). In 1.32.2 it is:
 *
 *   generateEventId(streamId)        `${streamId}_${Date.now()}_${Math.random().toString(36).substring(2, 10)}`
 *   getStreamIdFromEventId(eventId)  eventId.split('_')[0]        -> '' for '_GET_stream_…' (issues #943/#2560)
 *   replayEventsAfter(last, {send})  unknown id -> return '' (nothing replayed);
 *                                    empty stream id -> return '' (nothing replayed);
 *                                    else sorts ALL ids with localeCompare and sends the
 *                                    same-stream ids that sort after `last` (PR #1978: same-ms
 *                                    events are ordered by their random suffix)
 *
 * It has no `getStreamIdForEventId`, so the transport's 400 "Invalid event ID format" / 409
 * "Stream already has an active connection" checks never run with it.
 *
 * `TracingEventStore` only adds log lines (to the server's stdout) around the two methods; every
 * id, every replay decision and every return value is the example store's.
 */
const { InMemoryEventStore } = require('@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js');

function summary(message) {
    if (!message || Object.keys(message).length === 0) return 'priming {}';
    if (message.method) {
        const p = message.params || {};
        const what = p.message || p.data || (p.progress !== undefined ? `progress ${p.progress}` : '');
        return `${message.method} ${typeof what === 'string' ? what : JSON.stringify(what)}`;
    }
    if ('result' in message || 'error' in message) return `response id=${message.id}`;
    return JSON.stringify(message).slice(0, 80);
}

class TracingEventStore extends InMemoryEventStore {
    constructor(label, log) {
        super();
        this.label = label;
        this.log = log;
    }

    async storeEvent(streamId, message) {
        const eventId = await super.storeEvent(streamId, message);
        this.log(`STORE [${this.label}] stream=${JSON.stringify(streamId)} id=${eventId} ${summary(message)}`);
        return eventId;
    }

    async replayEventsAfter(lastEventId, { send }) {
        const known = this.events.has(lastEventId);
        const sent = [];
        const streamId = await super.replayEventsAfter(lastEventId, {
            send: async (eventId, message) => {
                sent.push(eventId);
                await send(eventId, message);
            }
        });
        this.log(
            `REPLAY [${this.label}] last-event-id=${lastEventId} known=${known} ` +
                `split('_')[0]=${JSON.stringify(lastEventId.split('_')[0])} -> stream=${JSON.stringify(streamId)} ` +
                `replayed=${JSON.stringify(sent)}`
        );
        return streamId;
    }
}

module.exports = { InMemoryEventStore, TracingEventStore };
