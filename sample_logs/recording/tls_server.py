"""Recording server over TLS: server.py's MCP app (python SDK 2.x) under uvicorn (HTTP/1.1) or hypercorn (h2).

The same tool, event stores and options as server.py (``build`` is reused), served with a self-signed
certificate on 127.0.0.1: uvicorn speaks HTTP/1.1 only; hypercorn offers ALPN ``h2, http/1.1`` so an
HTTP/2 client gets h2. Neither writes a key log: the client does (SSLKEYLOGFILE), which is enough to
decrypt both directions.

    python tls_server.py --port 18443 --cert c.pem --key k.pem --server uvicorn --store dense --close-at 2

``--post-sse-connection-close`` (off by default) adds ``Connection: close`` to every POST response that is an
event stream (``text/event-stream``), as a server or proxy that does not keep streamed responses alive does:
uvicorn (h11) then closes the TCP/TLS connection when the stream ends (after ``close_sse_stream`` too), and the
client's resume GET with Last-Event-ID has to open a new TLS connection (a new client random).

Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import argparse
import sys

import server as plain  # server.py: build(), STORES


def post_sse_connection_close(app):
    """ASGI wrapper: ``Connection: close`` on a POST's ``text/event-stream`` response; everything else untouched."""

    async def wrapped(scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await app(scope, receive, send)

        async def send_closing(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers") or [])
                if any(k.lower() == b"content-type" and v.lower().startswith(b"text/event-stream") for k, v in headers):
                    headers = [(k, v) for k, v in headers if k.lower() != b"connection"] + [(b"connection", b"close")]
                    message = dict(message, headers=headers)
            await send(message)

        return await app(scope, receive, send_closing)

    return wrapped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--server", choices=("uvicorn", "hypercorn"), default="uvicorn")
    parser.add_argument("--store", choices=tuple(plain.STORES), default="dense")
    parser.add_argument("--retry-ms", type=int, default=500)
    parser.add_argument("--close-at", default="")
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--post-sse-connection-close", action="store_true",
                        help="send Connection: close on POST event streams (the resume then needs a new connection)")
    # server.build() reads these too; the TLS scenarios leave them off (server.py's defaults; the options added to
    # server.py after the TLS harness are listed here too, or build() fails on the missing attributes)
    parser.set_defaults(close_first_only=False, tagged=False, log_calls=False, close_after_progress=False,
                        close_pause=0.1, log_every_step=False, extra_tools="")
    args = parser.parse_args()
    mcp = plain.build(args)
    app = mcp.streamable_http_app(event_store=plain.STORES[args.store](), retry_interval=args.retry_ms)
    if args.post_sse_connection_close:
        app = post_sse_connection_close(app)
    print(f"server: {args.server} tls port={args.port} store={args.store} close_at={args.close_at}"
          f"{' post-sse-connection-close' if args.post_sse_connection_close else ''}", flush=True)
    if args.server == "uvicorn":
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=args.port, ssl_certfile=args.cert, ssl_keyfile=args.key,
                    log_level="info")
    else:
        import asyncio

        from hypercorn.asyncio import serve
        from hypercorn.config import Config

        config = Config()
        config.bind = [f"127.0.0.1:{args.port}"]
        config.certfile, config.keyfile = args.cert, args.key
        config.alpn_protocols = ["h2", "http/1.1"]
        asyncio.run(serve(app, config))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
