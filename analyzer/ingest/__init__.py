"""Ingest: each input format read into the canonical tables, every record read or rejected."""
