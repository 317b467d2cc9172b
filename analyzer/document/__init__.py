"""The findings document (schemas/findings.schema.json): built from the rules' frames (``build``), shaped and
numbered the same way by every engine (``assemble``), written column-wise (``records``), compared with an
earlier run (``baseline``), turned into CI outputs (``ci``) and OpenMetrics (``metrics``), and a store's
reconnects added up per day and host (``trend``; the host of a URL: ``hosts``).  This file only re-exports
``assemble``'s names.
"""
from analyzer.document.assemble import (  # noqa: F401
    ANOMALY_SEVERITIES,
    FIRST_RULES,
    Names,
    Numbering,
    SCHEMA_VERSION,
    SEVERITIES,
    SEV_RANK,
    Summary,
    assemble,
    finding_key,
    fingerprint,
    generated_at,
    head,
    number_findings,
    passed_over,
    unreadable_rows,
)
