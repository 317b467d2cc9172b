"""Compare the analyzer's boundaries (findings JSON) with a truth file from bench/generate.py.

    python bench/truthcheck.py bench/out/findings-125k-har.json bench/out/truth-125k.json har

A reconnect is matched by (session id, its ordinal among the session's reconnects); the
``Last-Event-ID`` must agree too, otherwise the pair counts as misaligned.  Reports right/wrong
per expected verdict, the first wrong ones, boundaries the analyzer found that the truth does not
have (and the reverse), and the same for ``handled_correctly``.
"""
from __future__ import annotations

import json
import sys
from collections import Counter, defaultdict

FIRST_WRONG = 12


def check(boundaries: list[dict], truth: list[dict], fmt: str = "jsonl") -> dict:
    """``fmt``: the format analyzed; a truth row's ``verdict_<fmt>`` overrides its ``verdict``."""
    got = defaultdict(list)
    for b in boundaries:
        got[b["session_id"]].append(b)
    want = defaultdict(list)
    for t in truth:
        want[t["session_id"]].append(t)
    right, wrong = Counter(), Counter()
    confusion = Counter()
    wrong_rows, missing, extra, misaligned = [], [], [], []
    h_right, h_wrong, h_conf = 0, 0, Counter()
    h_examples = []
    for sid, ts in want.items():
        gs = got.get(sid, [])
        for t in ts:
            t = dict(t, verdict=t.get(f"verdict_{fmt}", t["verdict"]))
            if t["k"] >= len(gs):
                missing.append(t)
                wrong[t["verdict"]] += 1
                continue
            g = gs[t["k"]]
            if g.get("last_event_id") != t["last_event_id"]:
                misaligned.append({"truth": t, "got": _short(g)})
                wrong[t["verdict"]] += 1
                continue
            confusion[(t["verdict"], g["verdict"])] += 1
            if g["verdict"] == t["verdict"]:
                right[t["verdict"]] += 1
            else:
                wrong[t["verdict"]] += 1
                if len(wrong_rows) < FIRST_WRONG:
                    wrong_rows.append({"truth": t, "got": _short(g)})
            if g["verdict"] != "continuous" or t["verdict"] != "continuous":
                if g.get("handled_correctly") == t.get("handled"):
                    h_right += 1
                else:
                    h_wrong += 1
                    h_conf[(str(t.get("handled")), str(g.get("handled_correctly")))] += 1
                    if len(h_examples) < 5:
                        h_examples.append({"truth": t, "got": _short(g)})
        for g in gs[len(ts):]:
            extra.append(_short(g))
    for sid, gs in got.items():
        if sid not in want:
            extra.extend(_short(g) for g in gs)
    verdicts = sorted(set(right) | set(wrong))
    return {
        "boundaries_expected": len(truth),
        "boundaries_reported": len(boundaries),
        "right": sum(right.values()),
        "wrong": sum(wrong.values()),
        "per_verdict": {v: {"right": right[v], "wrong": wrong[v]} for v in verdicts},
        "confusion": {f"{a} -> {b}": n for (a, b), n in sorted(confusion.items()) if a != b},
        "first_wrong": wrong_rows,
        "missing": missing[:FIRST_WRONG],
        "missing_count": len(missing),
        "extra": extra[:FIRST_WRONG],
        "extra_count": len(extra),
        "misaligned": misaligned[:FIRST_WRONG],
        "misaligned_count": len(misaligned),
        "handled": {"right": h_right, "wrong": h_wrong,
                    "confusion (truth -> analyzer)": {f"{a} -> {b}": n for (a, b), n in sorted(h_conf.items())},
                    "examples": h_examples},
    }


def _short(g: dict) -> dict:
    return {k: g.get(k) for k in ("boundary_id", "session_id", "last_event_id", "last_before", "first_event_id_after",
                                  "verdict", "reason", "handled_correctly", "request")}


def main() -> None:
    doc = json.load(open(sys.argv[1]))
    truth = json.load(open(sys.argv[2]))["truth"]
    fmt = sys.argv[3] if len(sys.argv) > 3 else "jsonl"
    print(json.dumps(check(doc["boundaries"], truth, fmt), indent=1))


if __name__ == "__main__":
    main()
