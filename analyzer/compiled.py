"""The compiled core (``analyzer._native``, built from analyzer/native, Rust through PyO3), where the install built it.

pyproject.toml builds it with setuptools-rust when cargo is on PATH, as an optional extension: an install without
cargo has none, and every reader then takes its Python paths, to the same tables (analyzer/native/README.md).
``MCP_SSE_AUDIT_NATIVE=0`` in the environment turns it off for a run; tests turn :data:`ENABLED` off to compare.
"""
from __future__ import annotations

import os

try:
    from analyzer import _native as core
except ImportError:  # pragma: no cover - an install without cargo
    core = None

ENABLED = core is not None and os.environ.get("MCP_SSE_AUDIT_NATIVE", "1") != "0"
