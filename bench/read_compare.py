"""Two versions of the reader give the same canonical tables of one input (bench/SCALE.md, issue #42's checks).

    python bench/read_compare.py damage bench/out/traffic-1000k.jsonl bench/out/damaged-1000k.jsonl   # a damaged copy
    PYTHONPATH=/work/wt-base python bench/read_compare.py dump FILE bench/out/before   # the tables, one tree ...
    PYTHONPATH=$PWD python bench/read_compare.py dump FILE bench/out/after             # ... and the other
    python bench/read_compare.py diff bench/out/before bench/out/after                 # equal, row for row?

``dump`` reads with the default ``Reading()`` (hex digests, header objects: the canonical tables, every column) and
writes the exchanges, events, messages and anomalies as Parquet, and the counts as JSON.  ``damage`` spoils one
line in 1,000 (seeded): cut in the middle, doubled on one line, given a ``\\xff``, emptied, a quote or an id's
quotes broken, or re-written spaced (Python's default ``json.dumps``), as the damaged copy of SCALE.md's read42
section was made.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path


def damage(src: Path, out: Path, every: int = 1000, seed: int = 42) -> dict:
    rng = random.Random(seed)
    counts: dict[str, int] = {}
    with open(src, "rb") as f, open(out, "wb") as g:
        for line in f:
            if rng.randrange(every):
                g.write(line)
                continue
            body = line.rstrip(b"\n")
            how = rng.choice(["cut", "double", "xff", "empty", "quote", "id_quotes", "spaced"])
            counts[how] = counts.get(how, 0) + 1
            if how == "cut":
                body = body[: len(body) // 2]
            elif how == "double":
                body = body + body
            elif how == "xff":
                at = rng.randrange(len(body) + 1)
                body = body[:at] + b"\xff" + body[at:]
            elif how == "empty":
                body = b""
            elif how == "quote":
                at = body.find(b'"', rng.randrange(len(body) + 1))
                body = body[:at] + body[at + 1 :] if at >= 0 else body
            elif how == "id_quotes":
                body = body.replace(b'"id":"', b'"id":', 1)
            else:
                try:
                    body = json.dumps(json.loads(body)).encode()
                except ValueError:
                    pass
            g.write(body + b"\n")
    return counts


def dump(path: str, out: Path) -> None:
    import polars as pl

    from analyzer.ingest import inputs
    from analyzer.ingest.reading import Reading

    got = inputs.read_one(path, Reading())
    out.mkdir(parents=True, exist_ok=True)
    for name in ("exchanges", "events", "messages", "anomalies"):
        pl.from_arrow(getattr(got, name)).write_parquet(out / f"{name}.parquet")
    (out / "counts.json").write_text(json.dumps({"records": got.records, "rejected": got.rejected, "notes": got.notes}))


def diff(a: Path, b: Path) -> bool:
    import polars as pl
    from polars.testing import assert_frame_equal

    same = json.loads((a / "counts.json").read_text()) == json.loads((b / "counts.json").read_text())
    print("counts", "equal" if same else "DIFFER")
    for name in ("exchanges", "events", "messages", "anomalies"):
        x, y = pl.read_parquet(a / f"{name}.parquet"), pl.read_parquet(b / f"{name}.parquet")
        try:
            assert_frame_equal(x, y, check_exact=True)
            print(name, x.shape, "equal")
        except AssertionError as exc:
            same = False
            print(name, x.shape, y.shape, "DIFFER", str(exc)[:400])
    return same


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("damage")
    d.add_argument("src", type=Path)
    d.add_argument("out", type=Path)
    p = sub.add_parser("dump")
    p.add_argument("path")
    p.add_argument("out", type=Path)
    c = sub.add_parser("diff")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    a = ap.parse_args()
    if a.cmd == "damage":
        print(json.dumps(damage(a.src, a.out)))
    elif a.cmd == "dump":
        dump(a.path, a.out)
    else:
        sys.exit(0 if diff(a.a, a.b) else 1)


if __name__ == "__main__":
    main()
