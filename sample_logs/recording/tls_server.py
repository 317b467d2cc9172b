"""Recording server over TLS: server.py's MCP app (python SDK 2.x) under uvicorn (HTTP/1.1) or hypercorn (h2).

The same tool, event stores and options as server.py (``build`` is reused), served with a self-signed
certificate on 127.0.0.1: uvicorn speaks HTTP/1.1 only; hypercorn offers ALPN ``h2, http/1.1`` so an
HTTP/2 client gets h2. Neither writes a key log: the client does (SSLKEYLOGFILE), which is enough to
decrypt both directions.

    python tls_server.py --port 18443 --cert c.pem --key k.pem --server uvicorn --store dense --close-at 2

Only 127.0.0.1 is ever bound.
"""

from __future__ import annotations

import argparse
import sys

import server as plain  # server.py: build(), STORES


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
    # server.build() reads these too; the TLS scenarios leave them off
    parser.set_defaults(close_first_only=False, tagged=False, log_calls=False)
    args = parser.parse_args()
    mcp = plain.build(args)
    app = mcp.streamable_http_app(event_store=plain.STORES[args.store](), retry_interval=args.retry_ms)
    print(f"server: {args.server} tls port={args.port} store={args.store} close_at={args.close_at}", flush=True)
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
