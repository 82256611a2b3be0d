"""The overhead of the Ray engine: ``anatomy report --cluster`` on a local 2-CPU Ray cluster against ``--jobs 2`` on
the same machine, in one run.

    python benchmarks/cluster_overhead.py [--preset quick] [--rounds 1] [--cpus 2]

Starts a Ray head as a user would (``ray start --head --num-cpus 2 --block`` on a free port; stopped with every
process it started at the end), then runs the whole report both ways in each round, in fresh ``python -m anatomy
report`` processes, the order alternating between rounds, while the head is up for both (its idle daemons cost
both the same). The first Ray round pays for the cluster's cold workers (they import torch and the package on
their first unit), as a user's first run does; later rounds find them warm. Checks that the two ``claims.json``
agree on every metric and verdict except the wall-clock ones, and prints the wall times, the median of the
per-round ratios cluster / jobs (target <= 1.10) and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from claims_speed import ROOT, disagreements, where_the_time_went  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(cpus: int, temp: str, tries: int = 3) -> tuple[subprocess.Popen, str]:
    """A head, tried again on a fresh port when it does not come up (Ray gives its raylet 30 s, which a loaded
    machine can exceed)."""
    for attempt in range(tries):
        try:
            return _start_head(cpus, temp)
        except RuntimeError as err:
            print(f"  ray start failed (attempt {attempt + 1} of {tries}): {str(err).splitlines()[-1]}", flush=True)
    raise SystemExit("ray start failed every time")


def _start_head(cpus: int, temp: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [
        shutil.which("ray") or "ray",
        "start",
        "--head",
        f"--port={port}",
        f"--num-cpus={cpus}",
        "--include-dashboard=false",
        f"--temp-dir={temp}",
        "--disable-usage-stats",
        "--block",
    ]
    log = Path(temp) / "head.log"
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT)
    while "Ray runtime started" not in log.read_text():
        if process.poll() is not None:
            raise RuntimeError(log.read_text()[-2000:].strip())
        time.sleep(0.5)
    return process, f"127.0.0.1:{port}"


def report(out: Path, preset: str, way: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    cmd = [sys.executable, "-m", "anatomy", "report", "--preset", preset, "--out", str(out), "--quiet", *way]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="quick", choices=("smoke", "quick", "full"))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cpus", type=int, default=2)
    args = parser.parse_args()
    load_before = os.getloadavg()
    print(
        f"anatomy report --preset {args.preset}: --jobs {args.cpus} vs --cluster (local Ray head, "
        f"{args.cpus} CPUs), {args.rounds} round(s), {os.cpu_count()} cores, load average "
        f"{load_before[0]:.1f} / {load_before[1]:.1f} / {load_before[2]:.1f} (1 / 5 / 15 min)",
        flush=True,
    )
    temp = tempfile.mkdtemp(prefix="rayb", dir="/tmp")  # short: Ray's socket paths must stay under 107 characters
    head, address = start_head(args.cpus, temp)
    ratios = []
    try:
        for r in range(args.rounds):
            ways = [("jobs", ["--jobs", str(args.cpus)]), ("cluster", ["--cluster", address])]
            this = {}
            for name, way in ways if r % 2 == 0 else ways[::-1]:
                out = Path(temp) / f"{name}{r}"
                this[name] = report(out, args.preset, way)
                print(
                    f"  round {r + 1}: {name:8s} {this[name]:7.1f} s · {where_the_time_went(out, this[name])}",
                    flush=True,
                )
            ratios.append(this["cluster"] / this["jobs"])
            diff = disagreements(Path(temp) / f"jobs{r}", Path(temp) / f"cluster{r}")
            print(
                f"  round {r + 1}: cluster / jobs = {ratios[-1]:.3f}; "
                + (
                    "claims.json agree on every deterministic metric and verdict"
                    if not diff
                    else f"DISAGREE on {len(diff)}: {', '.join(diff[:8])}"
                ),
                flush=True,
            )
    finally:
        head.send_signal(signal.SIGTERM)
        head.wait(timeout=60)
        shutil.rmtree(temp, ignore_errors=True)
    load_after = os.getloadavg()
    print(
        f"median cluster / jobs over {len(ratios)} round(s): {statistics.median(ratios):.3f} (target <= 1.10); "
        f"load average after {load_after[0]:.1f} / {load_after[1]:.1f} / {load_after[2]:.1f}"
    )


if __name__ == "__main__":
    main()
