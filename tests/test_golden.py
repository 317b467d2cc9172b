"""Golden findings for every sample log, read by a person before each commit.

Regenerate after an intended change, then read every diff:

    python tests/test_golden.py --regenerate

The golden file is a projection of the findings document that a person can
check against the capture: per boundary the verdict, the branch that decided it
and the ids; per finding its rule, severity, time and the records it rests on;
per input its counts and anomalies.  It pins behaviour, not prose: messages and
reasons are not in it (a rewording would regenerate every file and could hide a
lost count); each rule's wording is pinned where it is made,
tests/test_rule_messages.py.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from analyzer import pipeline  # noqa: E402
from analyzer.decode import tls  # noqa: E402
from analyzer.ingest.reading import Reading

GOLDEN = ROOT / "tests" / "golden"
SAMPLES = sorted(
    p for p in (ROOT / "sample_logs").rglob("*")
    if p.is_file() and p.suffix in (".jsonl", ".har", ".pcap", ".pcapng", ".gz") and "recording" not in p.parts
)
SCHEMA = json.loads((ROOT / "schemas" / "findings.schema.json").read_text())


def project(doc: dict) -> dict:
    return {
        "inputs": [{k: i[k] for k in ("format", "records", "rejected")} for i in doc["inputs"]],
        "sessions": [{k: s[k] for k in ("session_id", "protocol_version", "id_scheme", "exchanges", "streams", "events", "boundaries")} for s in doc["sessions"]],
        "boundaries": [
            {
                k: b[k]
                for k in (
                    "boundary_id", "session_id", "last_event_id", "last_before", "first_event_id_after", "verdict", "rule_id", "evidence",
                    "lost_event_ids", "lost_count", "duplicated_event_ids", "duplicated_count", "handled_correctly", "severity",
                )
            }
            | {"request": b["request"]["location"], "resumes": b["resumes"] and b["resumes"]["location"], "status": b["http"]["status"]}
            for b in doc["boundaries"]
        ],
        "findings": [{k: f[k] for k in ("severity", "rule", "session_id", "boundary", "time")}
                     | {"evidence": [e["location"] for e in f["evidence"]]} for f in doc["findings"]],
        "anomalies": [{k: a[k] for k in ("code", "location")} for a in doc["anomalies"]],
    }


def golden_path(sample: Path) -> Path:
    rel = sample.relative_to(ROOT / "sample_logs")
    return GOLDEN / (str(rel).replace("/", "__") + ".findings.json")


def analyze(sample: Path) -> dict:
    """A pcap with a key log beside it (x.pcap + x.keylog, sample_logs/tls/) is read with it, as --tls-keylog
    x.keylog would; a pcapng carries its secrets itself (Decryption Secrets Blocks)."""
    keys = tls.KeyLog()
    if sample.suffix == ".pcap" and sample.with_suffix(".keylog").exists():
        keys.add_text(sample.with_suffix(".keylog").read_bytes())
    doc = pipeline.run([str(sample.relative_to(ROOT))], Reading(keys=keys)).document
    jsonschema.validate(doc, SCHEMA)
    return doc


@pytest.fixture(autouse=True)
def _cwd(monkeypatch):
    monkeypatch.chdir(ROOT)  # sources are named relative to the repository, as in the README


def test_every_sample_has_a_golden_file():
    assert SAMPLES, "no sample logs found"
    missing = [str(s) for s in SAMPLES if not golden_path(s).exists()]
    assert not missing, f"no golden file for {missing}; run python tests/test_golden.py --regenerate and read it"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: str(p.relative_to(ROOT / "sample_logs")))
def test_golden(sample):
    want = json.loads(golden_path(sample).read_text())
    got = json.loads(json.dumps(project(analyze(sample))))
    assert got == want


def test_har_and_jsonl_twins_agree():
    """Each synthetic scenario is written as JSONL and HAR from one description: same verdicts.

    Read from the golden files, which hold every field compared here: test_golden pins each of them to its
    sample's analysis, so the twins agree in the analysis exactly when they agree here (no second analysis)."""
    synthetic = ROOT / "sample_logs" / "synthetic"
    names = sorted(p.stem for p in synthetic.glob("*.jsonl"))
    assert names
    key = lambda d: [(x["verdict"], x["last_event_id"], x["first_event_id_after"], x["lost_event_ids"], x["duplicated_event_ids"], x["handled_correctly"]) for x in d["boundaries"]]  # noqa: E731
    compared = 0
    for name in names:
        a, b = (json.loads(golden_path(synthetic / f"{name}{ext}").read_text()) for ext in (".jsonl", ".har"))
        assert key(a) == key(b), name
        compared += len(key(a))
    assert compared > 10  # (the goldens hold the boundaries: the comparison compared something)


if __name__ == "__main__":
    if "--regenerate" not in sys.argv:
        sys.exit("usage: python tests/test_golden.py --regenerate")
    import os

    os.chdir(ROOT)
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for s in SAMPLES:
        out = golden_path(s)
        out.write_text(json.dumps(project(analyze(s)), indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {out.relative_to(ROOT)} — read it before committing")
