"""This tree's HAR reader against another tree's (a worktree of an older commit), table for table, on damaged and
mutated copies of the sample HARs and on any HARs named.

    python bench/har_readers.py --before /path/to/worktree-of-9677037                  # the corpus alone
    python bench/har_readers.py --before /path/to/old bench/out/traffic-250k.har        # and a generated HAR

The corpus (deterministic, about 1,800 files in a temporary folder): every ``sample_logs`` HAR; per sample 6 cuts,
10 fuzz-like mutations (values of every type set in random places, keys removed, indents), 6 byte-damaged copies
(invalid UTF-8 inserted, a byte changed), a BOM and trailing garbage; one sample with each entry field set to each
of 28 odd values or removed; base64 bodies good and bad, lone surrogates, duplicate and escaped keys, ``NaN``,
``1e400``, nesting 400/900/3000 deep, an ``entries`` of a page, whitespace and CRLF variants.

Each tree reads every file with ``analyzer.ingest.har.read`` in its own process; the records, rejected count, every
row of the exchanges, events, messages and anomalies tables and the notes (or the refusal's text) are compared by
the sha256 of their pickle.  Prints the files that differ; exit status 1 if any.  (issue [4/5]: bench/SCALE.md
2026-12-06.)
"""
from __future__ import annotations

import argparse
import base64
import copy
import hashlib
import json
import os
import pickle
import random
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ODD = [None, 0, -1, 2**64, -(2**70), 10**30, 1e308, float("inf"), float("nan"), "\ud800", "\udfff x", "text/event-stream", "base64",
       "2026-11-13T09:00:00Z", "9999-12-31T23:00:00-05:00", "data: x\n\n", [], {}, [{"name": "content-type"}], [{"name": 1}],
       [{"name": "x", "value": {"a": [1]}}], "id: 1\ndata: " + "[" * 5000 + "\n\n", "200", True, 1.5, {"text": "x"}, "😀", "é\u2028"]
ENTRY_FIELDS = ["request", "response", "startedDateTime", "connection", "time", "_error", "_failureText", "_wasAborted"]
PART_FIELDS = [("request", ["method", "url", "headers", "postData"]), ("response", ["status", "headers", "content", "_error", "_failureText"])]


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, prefix + (i,))


def corpus(out: Path) -> None:
    rnd = random.Random(42)
    samples = sorted((ROOT / "sample_logs").rglob("*.har"))

    def write(name: str, data: bytes) -> None:
        (out / name).write_bytes(data)

    for s in samples:
        data, base = s.read_bytes(), s.stem
        doc = json.loads(data)
        write(f"sample-{base}.har", data)
        for k in range(6):
            write(f"cut-{base}-{k}.har", data[: rnd.randrange(1, len(data))])
        for k in range(10):
            d = copy.deepcopy(doc)
            for _ in range(rnd.randrange(1, 6)):
                paths = [p for p in _paths(d) if len(p) > 2]
                p = rnd.choice(paths)
                parent = d
                for key in p[:-1]:
                    parent = parent[key]
                if isinstance(parent, dict) and rnd.random() < 0.2:
                    parent.pop(p[-1], None)
                else:
                    parent[p[-1]] = copy.deepcopy(rnd.choice(ODD))
            text = json.dumps(d, ensure_ascii=rnd.random() < 0.5, allow_nan=True, indent=rnd.choice([None, 1, 2]))
            write(f"mut-{base}-{k}.har", text.encode("utf-8", "surrogatepass"))
        for k in range(3):
            at = rnd.randrange(len(data))
            write(f"badutf8-{base}-{k}.har", data[:at] + b"\xff\xfe" + data[at:])
            at = rnd.randrange(len(data))
            write(f"flip-{base}-{k}.har", data[:at] + bytes([rnd.randrange(256)]) + data[at + 1 :])
        write(f"garbage-{base}.har", data + b" x")
        write(f"bom-{base}.har", b"\xef\xbb\xbf" + data)

    src = json.loads((ROOT / "sample_logs" / "real-go-client-resume.har").read_bytes())

    def changed(name: str, change) -> None:
        d = copy.deepcopy(src)
        change(d["log"]["entries"])
        write(name, json.dumps(d, allow_nan=True).encode("utf-8", "surrogatepass"))

    for key in ENTRY_FIELDS:
        for i, v in enumerate(ODD):
            changed(f"t-entry-{key}-{i}.har", lambda es, key=key, v=v: es[0].__setitem__(key, copy.deepcopy(v)))
        changed(f"t-entry-{key}-missing.har", lambda es, key=key: es[0].pop(key, None))
    for part, keys in PART_FIELDS:
        for key in keys:
            for i, v in enumerate(ODD):
                changed(f"t-{part}-{key}-{i}.har", lambda es, part=part, key=key, v=v: es[-1][part].__setitem__(key, copy.deepcopy(v)))
            changed(f"t-{part}-{key}-missing.har", lambda es, part=part, key=key: es[-1][part].pop(key, None))

    def base64_bodies(es, good=True):
        for e in es:
            c = e["response"].setdefault("content", {})
            if isinstance(c.get("text"), str):
                c["text"] = base64.b64encode(c["text"].encode()).decode() if good else "!!notbase64=="
                c["encoding"] = "base64"

    changed("t-base64.har", base64_bodies)
    changed("t-base64-bad.har", lambda es: base64_bodies(es, good=False))

    def surrogates(es):
        es[0]["request"]["url"] += "\ud800"
        es[1]["request"]["headers"].append({"name": "x-s\udc00", "value": "\ud83d"})

    changed("t-surrogates.har", surrogates)
    raw = json.dumps(src).encode()
    for name, (old, new) in {
        "dupkey": (b'"request": {', b'"request": 5, "request": {'),
        "dupkey2": (b'"request": {', b'"request": {"method": "X"}, "request": {'),
        "escaped-key": (b'"request": {', b'"\\u0072equest": {'),
        "nan-skipped": (b'"request": {', b'"timings": NaN, "request": {'),
        "inf": (b'"request": {', b'"time": 1e400, "request": {'),
        "deep-3000": (b'"request": {', b'"x": ' + b"[" * 3000 + b"]" * 3000 + b', "request": {'),
        "deep-900": (b'"request": {', b'"x": ' + b"[" * 900 + b"]" * 900 + b', "request": {'),
        "deep-400": (b'"request": {', b'"x": ' + b"[" * 400 + b"]" * 400 + b', "request": {'),
        "badutf8-skipped": (b'"request": {', b'"x": "\xff\xfe", "request": {'),
        "badutf8-read": (b'"method": "', b'"method": "\xff'),
        "control": (b'"method": "', b'"method": "\x01'),
        "page-entries": (b'"log": {', b'"log": {"pages": [{"entries": [1, 2]}], '),
        "entries-in-string": (b'"log": {', b'"log": {"comment": "\\"entries\\": [", '),
        "trailing-comma": (b"}]", b"},]"),
    }.items():
        write(f"t-{name}.har", raw.replace(old, new, 1))
    write("t-empty.har", b"")
    write("t-no-entries.har", b'{"log": {"pages": []}}')
    write("t-entries-empty.har", b'{"log": {"entries": []}}')
    write("t-entries-later-dup.har", raw[:-2] + b', "entries": []}}')
    write("t-ws.har", json.dumps(src, indent="\t", separators=(" , ", " : ")).encode())
    write("t-crlf.har", json.dumps(src, indent=2).replace("\n", "\r\n").encode())


def dump(out: str, paths: list[str]) -> None:
    """(In the tree on PYTHONPATH) every file's tables as the sha256 of their pickled rows."""
    from analyzer.errors import InputError
    from analyzer.ingest import har
    from analyzer.ingest.reading import Reading

    got = {}
    for p in paths:
        try:
            with open(p, "rb") as f:
                ing = har.read("x.har", f, Reading())
            rows = (ing.records, ing.rejected, ing.exchanges.to_pylist(), ing.events.to_pylist(), ing.messages.to_pylist(),
                    ing.anomalies.to_pylist(), ing.notes)
        except InputError as exc:
            rows = ("refused", str(exc))
        got[Path(p).name] = hashlib.sha256(pickle.dumps(rows)).hexdigest()
    Path(out).write_text(json.dumps(got))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the other tree (its analyzer/ is imported from there)")
    ap.add_argument("har", nargs="*", help="more HAR files to compare (read by both trees)")
    ap.add_argument("--dump", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dump:
        dump(a.dump, a.har)
        return 0
    with tempfile.TemporaryDirectory(prefix="har-readers-") as tmp:
        folder = Path(tmp) / "corpus"
        folder.mkdir()
        corpus(folder)
        paths = sorted(str(p) for p in folder.iterdir()) + [os.path.abspath(p) for p in a.har]
        results = []
        for tree in (a.before, str(ROOT)):
            out = Path(tmp) / f"{len(results)}.json"
            subprocess.run([sys.executable, __file__, "--before", tree, "--dump", str(out), *paths], check=True,
                           env={**os.environ, "PYTHONPATH": tree}, cwd=tree)
            results.append(json.loads(out.read_text()))
    before, after = results
    differ = sorted(k for k in before if before[k] != after.get(k))
    print(f"{len(before)} files; {len(differ)} differ")
    for name in differ[:40]:
        print("  ", name)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
