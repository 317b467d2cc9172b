"""Nothing printed lets a redacted value be guessed (issue [2/5] item 2): the event digests a document shows are
taken over the data it shows (redacted), and a finding's fingerprint does not hash a call's raw arguments.

Before, ``events_before[].digest`` was the sha256 of the raw event data, beside its redacted text: a 6-digit OTP
came back in about a second of brute force; ``reissued_request_ran_twice``'s fingerprint hashed the raw arguments,
and a 4-digit PIN came back the same way.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

from analyzer import pipeline
from analyzer.document import records

ROOT = Path(__file__).resolve().parent.parent
SYN = ROOT / "sample_logs" / "synthetic"
OTP = "492817"


def _doc(path: Path) -> dict:
    return records.plain(pipeline.run([str(path)]).document)


def test_shown_event_digests_are_of_the_shown_data(tmp_path):
    lines = [json.loads(x) for x in (SYN / "gap.jsonl").read_text().splitlines()]
    for r in lines:
        if r["kind"] == "sse" and r.get("data", "").startswith("{"):
            d = json.loads(r["data"])
            d.setdefault("params", {})["otp"] = OTP
            r["data"] = json.dumps(d)
    p = tmp_path / "otp.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    doc = _doc(p)
    shown = [e for b in doc["boundaries"] for key in ("events_before", "events_after") for e in b.get(key) or []]
    assert shown, "the gap's card shows events"
    text = json.dumps(doc)
    assert OTP not in text
    for e in shown:
        assert OTP not in e["data"]
        assert e["digest"] == hashlib.sha256(f"{e['id'] or ''}:{e['data']}".encode()).hexdigest()[:16]
    raw = {hashlib.sha256(f"{r.get('id') or ''}:{r['data']}".encode()).hexdigest()[:16] for r in lines if r["kind"] == "sse"}
    assert not raw & {e["digest"] for e in shown}  # no raw digest is printed


def test_a_reissued_calls_fingerprint_does_not_hash_its_arguments(tmp_path):
    """Two captures that differ only in a PIN among the arguments give the same fingerprint: the PIN is not in it."""
    fps = []
    for pin in ("1234", "9876"):
        text = (SYN / "stateless_reissue.jsonl").read_text().replace('\\"cents\\": 500', f'\\"cents\\": 500, \\"pin\\": \\"{pin}\\"')
        p = tmp_path / f"pin{pin}.jsonl"
        p.write_text(text)
        [f] = [f for f in _doc(p)["findings"] if f["rule"] == "reissued_request_ran_twice"]
        fps.append(f["fingerprint"])
    assert fps[0] == fps[1]
