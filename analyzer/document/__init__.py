"""The findings document (schemas/findings.schema.json): built from the rules' frames (``build``), shaped and
numbered the same way by every engine (``assemble``), written column-wise (``records``), compared with an
earlier run (``baseline``) and turned into CI outputs (``ci``).  This file only re-exports ``assemble``'s names.
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
    unreadable_rows,
)
