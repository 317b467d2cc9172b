"""mcp-sse-audit: offline analyzer of MCP Streamable HTTP traffic for silent SSE resumption divergence.

The public names are the API (README, "From Python"): :func:`audit` returns an :class:`Audit`, whose frames have
the schemas of :data:`SCHEMAS`; :class:`Analysis` tunes the rules, :class:`Limits` bounds hostile inputs.  They load
on first use, so ``import analyzer`` loads no Polars (the command sets the allocator's options before it does).
"""

__version__ = "0.1.0"
__all__ = ["Analysis", "Audit", "Limits", "SCHEMAS", "__version__", "audit"]

_WHERE = {"audit": "analyzer.api", "Audit": "analyzer.result", "SCHEMAS": "analyzer.result", "Analysis": "analyzer.rules.registry",
          "Limits": "analyzer.limits"}


def __getattr__(name: str):
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'analyzer' has no attribute {name!r}")
