"""Signals: per-exchange and per-boundary facts computed over the canonical tables."""
