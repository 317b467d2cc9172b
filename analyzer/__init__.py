"""mcp-sse-audit: offline analyzer of MCP Streamable HTTP traffic for silent SSE resumption divergence."""

__version__ = "0.1.0"
