"""JSON-RPC 2.0 messages out of request bodies, JSON response bodies and SSE data.

This is parsing (one ``json.loads`` per body, at ingest), not analysis: the
rules only ever see the resulting ``messages`` table.  Batches (allowed by
protocol revision 2025-03-26) yield one message per element.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

META_VERSION = "io.modelcontextprotocol/protocolVersion"  # params._meta key of revision 2026-07-28


@dataclass(frozen=True, slots=True)
class Message:
    kind: str  # request | notification | response | error
    rpc_id: str | None  # JSON text of the id: 1 and "1" stay distinct
    method: str | None
    error_code: int | None
    error_message: str | None
    protocol_version: str | None  # initialize params/result protocolVersion, or params._meta (2026-07-28)
    params_digest: str | None  # sha256 of the canonical JSON of params: the same call re-issued under a new id


class NotJsonRpc(ValueError):
    """The text is not JSON-RPC (the caller records ``jsonrpc_invalid``)."""


def _one(obj: object) -> Message:
    if not isinstance(obj, dict):
        raise NotJsonRpc("element is not an object")
    rid = obj.get("id")
    rpc_id = None if rid is None else json.dumps(rid, ensure_ascii=False, separators=(",", ":"))
    method = obj.get("method")
    if method is not None and not isinstance(method, str):
        raise NotJsonRpc("method is not a string")
    version = None
    for holder in ("params", "result"):
        part = obj.get(holder)
        if isinstance(part, dict) and isinstance(part.get("protocolVersion"), str):
            version = part["protocolVersion"]
    params = obj.get("params")
    if version is None and isinstance(params, dict) and isinstance(params.get("_meta"), dict):
        meta = params["_meta"].get(META_VERSION)
        version = meta if isinstance(meta, str) else None
    if method is not None:
        digest = None
        # only requests are compared by their arguments (a re-issued call, a renumbered server
        # request); notifications are the bulk of SSE traffic and never are
        if params is not None and "id" in obj:
            canon = json.dumps(params, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
            digest = hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()
        return Message("request" if "id" in obj else "notification", rpc_id, method, None, None, version, digest)
    if "error" in obj:
        err = obj["error"]
        code = err.get("code") if isinstance(err, dict) else None
        msg = err.get("message") if isinstance(err, dict) else None
        return Message(
            "error",
            rpc_id,
            None,
            code if isinstance(code, int) and not isinstance(code, bool) else None,
            msg if isinstance(msg, str) else None,
            None,
            None,
        )
    if "result" in obj:
        return Message("response", rpc_id, None, None, None, version, None)
    raise NotJsonRpc("object has neither method, result nor error")


def extract(text: str) -> list[Message]:
    """All JSON-RPC messages in ``text``; ``[]`` for blank text (e.g. a priming event)."""
    if not text or text.isspace():
        return []
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise NotJsonRpc(f"not JSON ({exc.__class__.__name__})") from None
    if isinstance(obj, list):
        return [_one(o) for o in obj]
    return [_one(obj)]
