"""Compare two claims runs: verdicts, metric values, reasons and rule texts, claim by claim.

A developer script for refactors of the claims lab: the verdicts and metrics of a run before and after a change
must be equal (wall-clock metrics such as ``*_ms_*``, ``speedup_*`` and ``time_ratio_*`` vary from run to run,
and so may the verdicts of the claims that read them, C11 and C13)::

    PYTHONPATH=$PWD python -m anatomy claims run --all --preset smoke --out /tmp/before --quiet
    ... change the code ...
    PYTHONPATH=$PWD python -m anatomy claims run --all --preset smoke --out /tmp/after --quiet
    python tools/compare_claims.py /tmp/before/claims.json /tmp/after/claims.json [--text]

Claims of ``after`` must be a subset of ``before`` (a run of a few claims compares against a full one). Exit
status 1 if a verdict or a metric differs, 0 otherwise; ``--text`` also prints the reasons and rule texts that
changed.
"""

from __future__ import annotations

import json
import math
import sys


def _same(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def compare(before: dict, after: dict, *, text: bool = False) -> tuple[int, int, int, int]:
    old = {c["id"]: c for c in before["claims"]}
    new = {c["id"]: c for c in after["claims"]}
    if not set(new) <= set(old):
        raise SystemExit(f"claims only in the second run: {', '.join(sorted(set(new) - set(old)))}")
    verdicts = metrics = reasons = rules = 0
    for cid, y in new.items():
        x = old[cid]
        if x["verdict"] != y["verdict"]:
            verdicts += 1
            print(f"VERDICT {cid}: {x['verdict']} -> {y['verdict']}")
        for name in sorted(set(x["metrics"]) | set(y["metrics"])):
            u, v = x["metrics"].get(name, {}).get("values"), y["metrics"].get(name, {}).get("values")
            if u is None or v is None or len(u) != len(v) or not all(_same(p, q) for p, q in zip(u, v)):
                metrics += 1
                print(f"METRIC {cid}.{name}: {u} -> {v}")
        if (x["reason_en"], x["reason_zh"]) != (y["reason_en"], y["reason_zh"]):
            reasons += 1
            if text:
                print(f"REASON {cid}:\n  {x['reason_en']}\n  {y['reason_en']}\n  {x['reason_zh']}\n  {y['reason_zh']}")
        if x["rule"] != y["rule"]:
            rules += 1
            if text:
                print(f"RULE {cid}:\n  {x['rule']}\n  {y['rule']}")
    print(
        f"{len(new)} claims: {verdicts} verdicts, {metrics} metrics differ; {reasons} reasons, {rules} rule texts "
        "differ"
    )
    return verdicts, metrics, reasons, rules


def main(argv: list[str]) -> int:
    paths = [a for a in argv if not a.startswith("--")]
    if len(paths) != 2:
        print("usage: python tools/compare_claims.py BEFORE/claims.json AFTER/claims.json [--text]", file=sys.stderr)
        return 2
    docs = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as err:
            print(f"{path}: cannot read a claims.json ({err})", file=sys.stderr)
            return 2
    verdicts, metrics, _, _ = compare(*docs, text="--text" in argv)
    return 1 if verdicts or metrics else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
