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


def test_a_stores_digests_are_keyed_with_its_own_secret(tmp_path):
    """A new store keys the event and argument digests it keeps with its secret (STORE/digest.key, mode 0600): no
    stored digest is the sha256 of a raw event, and the analysis over the store gives the single pass's verdicts."""
    import os

    import polars as pl

    from analyzer.scale import store
    from analyzer.scale.store_commit import DIGEST_KEY

    src = SYN / "gap.jsonl"
    st = tmp_path / "st"
    store.ingest([str(src)], st)
    key = (st / DIGEST_KEY).read_text().strip()
    assert len(key) == 64 and (os.stat(st / DIGEST_KEY).st_mode & 0o777) == 0o600
    stored = store.scan(st, "events").select("id", "digest").collect()
    raw = {hashlib.sha256(f"{r.get('id') or ''}:{r['data']}".encode()).hexdigest()
           for r in map(json.loads, src.read_text().splitlines()) if r["kind"] == "sse"}
    assert stored.height and not raw & set(stored["digest"].to_list())
    tables, rows = store.load(st)
    via_store = pipeline.analyze_tables(tables, rows, [], [], len(rows)).document
    assert [b["verdict"] for b in via_store["boundaries"]] == [b["verdict"] for b in _doc(src)["boundaries"]] == ["gap"]
    # a second ingest keeps the key; another store has its own
    store.ingest([str(SYN / "continuous.jsonl")], st)
    assert (st / DIGEST_KEY).read_text().strip() == key
    store.ingest([str(src)], tmp_path / "other")
    assert (tmp_path / "other" / DIGEST_KEY).read_text().strip() != key
    other = store.scan(tmp_path / "other", "events").select("digest").collect()
    assert set(other["digest"].to_list()).isdisjoint(stored["digest"].to_list())
    assert pl.Series(stored["digest"]).str.len_chars().unique().to_list() == [64]


def test_a_store_made_before_keying_stays_unkeyed_and_says_so(tmp_path):
    """Keying only its new inputs would make one traffic's proxy log and pcap differ: an older store stays unkeyed,
    and ingest says how to key it."""
    from click.testing import CliRunner

    from analyzer.cli import main
    from analyzer.scale import store
    from analyzer.scale.store_commit import DIGEST_KEY

    st = tmp_path / "st"
    store.ingest([str(SYN / "continuous.jsonl")], st)
    (st / DIGEST_KEY).unlink()  # as a store of the previous version has none
    r = CliRunner().invoke(main, ["ingest", str(SYN / "gap.jsonl"), "--store", str(st)])
    assert r.exit_code == 0 and "keeps them unkeyed" in r.stderr and "into a new store" in r.stderr, r.output
    assert not (st / DIGEST_KEY).exists()
    raw = {hashlib.sha256(f"{r.get('id') or ''}:{r['data']}".encode()).hexdigest()
           for r in map(json.loads, (SYN / "gap.jsonl").read_text().splitlines()) if r["kind"] == "sse"}
    assert raw <= set(store.scan(st, "events").select("digest").collect()["digest"].to_list())
