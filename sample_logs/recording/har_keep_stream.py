"""mitmproxy helper for the HAR-writing proxy (B) of the recording chain.

Plain `mitmdump --set hardump=FILE` buffers a `text/event-stream` response until
it ends. With MCP that deadlocks: the python SDK client closes a resumed GET
stream only after it has *received* the JSON-RPC response, and the server ends
that stream only when the client goes away; a server killed mid-stream would
also never let a single event through. Streaming (`flow.response.stream`)
fixes the flow of bytes, but mitmproxy then keeps no body, so the HAR entry
would have an empty `content.text` (mitmproxy issue #7010 shows the same hack).

This addon streams SSE responses and copies the bytes that passed back into
`flow.response` when the response ends (or fails), so `hardump` writes them.
Only mitmproxy and the standard library are imported.

    mitmdump -s har_keep_stream.py --set hardump=out.har --mode reverse:http://127.0.0.1:PORT ...
"""

from __future__ import annotations

from mitmproxy import http


class KeepStreamedBodies:
    def __init__(self) -> None:
        self._buffers: dict[str, bytearray] = {}

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        assert flow.response is not None
        content_type = flow.response.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type != "text/event-stream":
            return
        buf = self._buffers[flow.id] = bytearray()

        def keep(chunk: bytes) -> bytes:
            buf.extend(chunk)
            return chunk

        flow.response.stream = keep

    def _store(self, flow: http.HTTPFlow) -> None:
        buf = self._buffers.pop(flow.id, None)
        if buf is not None and flow.response is not None:
            flow.response.raw_content = bytes(buf)

    def response(self, flow: http.HTTPFlow) -> None:
        self._store(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        self._store(flow)


addons = [KeepStreamedBodies()]
