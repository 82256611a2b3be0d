"""Wall time of the main job, ``anatomy report``, serial (``--jobs 1``) against parallel (``--jobs N``), in one run.

    python benchmarks/claims_speed.py [--preset quick] [--jobs 2] [--rounds 1]

Each round runs the whole report twice, once each way, in fresh ``python -m anatomy report`` processes (the
order alternates between rounds), and checks that the two ``claims.json`` agree on every verdict and every metric
except the wall-clock ones the runner names. Prints the wall times and the median ratio parallel / serial (the
target on 2 cores is <= 0.5). A quick report takes minutes per run: time it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def report(out: Path, preset: str, jobs: int, seeds: int | None) -> float:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [
        sys.executable,
        "-m",
        "anatomy",
        "report",
        "--preset",
        preset,
        "--out",
        str(out),
        "--jobs",
        str(jobs),
        "--quiet",
    ] + ([] if seeds is None else ["--seeds", str(seeds)])
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def disagreements(a: Path, b: Path) -> list[str]:
    """What differs between two claims.json beyond the metrics (and verdicts) declared nondeterministic."""
    x, y = (json.loads((p / "claims.json").read_text(encoding="utf-8")) for p in (a, b))
    out = []
    for s, p in zip(x["claims"], y["claims"]):
        odd = set(s.get("nondeterministic", {}).get("metrics", []))
        out += [
            f"{s['id']} {m}"
            for m in s["metrics"]
            if m not in odd and s["metrics"][m]["values"] != p["metrics"][m]["values"]
        ]
        if not odd and s["verdict"] != p["verdict"]:
            out.append(f"{s['id']} verdict {s['verdict']} vs {p['verdict']}")
    return out


def where_the_time_went(out: Path, wall: float) -> str:
    """One line from claims.json's ``schedule``: start-up and report writing outside the runs, and per worker
    its busy seconds, its wait for its first run and its idle tail after its last one."""
    doc = json.loads((out / "claims.json").read_text(encoding="utf-8"))
    sched = doc.get("schedule")
    if not sched:
        return "(no schedule in claims.json)"
    rows = ", ".join(
        f"{w['runs']} runs busy {w['busy_s']:.1f} s (first at {w['start_s']:.1f} s, tail {w['tail_s']:.1f} s)"
        for w in sched["workers"]
    )
    return (
        f"outside the runs {wall - sched['wall_s']:.1f} s (process start, imports, reports); runs "
        f"{sched['wall_s']:.1f} s, utilisation {sched['utilisation']:.3f}: {rows}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick", choices=("smoke", "quick", "full"))
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--seeds", type=int, default=None)
    args = parser.parse_args()
    print(
        f"anatomy report --preset {args.preset}: --jobs 1 vs --jobs {args.jobs}, {args.rounds} round(s), "
        f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}"
    )
    ratios, times = [], {"serial": [], "parallel": []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = [("serial", 1), ("parallel", args.jobs)]
            this = {}
            for name, jobs in order if r % 2 == 0 else order[::-1]:
                this[name] = report(Path(tmp) / f"{name}{r}", args.preset, jobs, args.seeds)
                times[name].append(this[name])
                print(f"  round {r + 1}: {name:8s} {this[name]:7.1f} s", flush=True)
            ratios.append(this["parallel"] / this["serial"])
            diff = disagreements(Path(tmp) / f"serial{r}", Path(tmp) / f"parallel{r}")
            print(f"  round {r + 1}: claims.json " + ("agree" if not diff else f"DISAGREE on {diff}"))
            for name in ("serial", "parallel"):
                print(f"  round {r + 1}: {name:8s} {where_the_time_went(Path(tmp) / f'{name}{r}', this[name])}")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    print(
        f"serial {statistics.median(times['serial']):.1f} s, --jobs {args.jobs} "
        f"{statistics.median(times['parallel']):.1f} s: parallel / serial = {statistics.median(ratios):.2f} "
        f"(median over {args.rounds} round(s); target <= 0.5 on 2 cores)"
    )


if __name__ == "__main__":
    main()
