"""Decoding: capture files, TCP, HTTP/1.1, content codings, SSE and JSON-RPC, byte-exact."""
