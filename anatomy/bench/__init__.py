"""``anatomy bench``: every speed and memory comparison against every installed peer, in one run.

    anatomy bench                       # attention, train step, decode, memory at the sizes of docs/performance.md
    anatomy bench --quick --out b.json  # tiny sizes (seconds): the run the test suite makes

Suites (suites.py): one attention layer (ours vs raw SDPA vs ``nn.MultiheadAttention``), the LM train step and
forward (ours vs HF GPT-2 vs x-transformers) and one decoder block (vs ``nn.TransformerDecoderLayer``), greedy
decoding (vs HF ``generate``), and memory (peak of train steps and attention, KV-cache bytes). Contenders run in
interleaved rounds and the report quotes medians of per-round ratios to ours (timing.py). Peers not installed are
named with their pip line (peers.py). ``benchmarks/*.py`` remain for the deeper, hand-run variants.
"""

from __future__ import annotations

import json
import platform
import time
from collections.abc import Iterable

import torch

from anatomy.bench.peers import peer_status, quiet_peers
from anatomy.bench.suites import FULL, QUICK, SUITES, Options
from anatomy.bench.timing import environment, peak_memory, rounds, timed

SCHEMA = "anatomy-bench/1"

__all__ = ["SCHEMA", "SUITES", "environment", "format_report", "peak_memory", "rounds", "run_bench", "timed"]


def run_bench(*, quick: bool = False, suites: Iterable[str] | None = None, n_rounds: int | None = None,
              repeat: int | None = None, allocator: str = "default", progress=None) -> dict:
    """Run the chosen suites (default all) and return the report as a JSON-ready dict."""
    asked = list(SUITES) if suites is None else list(suites)
    unknown = [name for name in asked if name not in SUITES]
    if unknown:
        raise ValueError(f"unknown suite {unknown[0]!r}; valid names: {', '.join(SUITES)}")
    chosen = [name for name in SUITES if name in asked]  # always in the same order
    sizes = QUICK if quick else FULL
    opts = Options(rounds=n_rounds or (3 if quick else 5), repeat=repeat or (1 if quick else 2))
    if opts.rounds < 1 or opts.repeat < 1:
        raise ValueError(f"--rounds and --repeat must be positive integers, got {opts.rounds} and {opts.repeat}")
    from anatomy import __version__

    status = peer_status()
    report = {
        "schema": SCHEMA, "anatomy": __version__, "torch": torch.__version__, "python": platform.python_version(),
        "machine": platform.machine(), "threads": torch.get_num_threads(), "quick": quick, "rounds": opts.rounds,
        "repeat": opts.repeat, "allocator": allocator, "peers": status,
        "missing_peers": {k: v["pip"] for k, v in status.items() if not v["installed"]},
        "notes": [], "suites": {}, "seconds": {},
    }
    for name in chosen:
        if progress is not None:
            progress(name)
        t0 = time.perf_counter()
        with quiet_peers():
            report["suites"][name] = SUITES[name](sizes, opts, status, report["notes"])
        report["seconds"][name] = round(time.perf_counter() - t0, 3)
    return report


def _value(v: float, unit: str) -> str:
    if unit == "bytes":
        return f"{v / 2**20:10.2f} MiB" if v >= 2**20 else f"{v / 2**10:10.2f} KiB"
    return f"{v * 1e3:10.3f} ms " if v < 1 else f"{v:10.3f} s  "


def format_report(report: dict) -> str:
    """The report as text: one table per comparison, ratios first (``× ours``: above 1, ours is faster/smaller)."""
    lines = [f"anatomy bench · torch {report['torch']} · {report['threads']} threads · "
             f"{'quick sizes' if report['quick'] else 'full sizes'} · median of {report['rounds']} interleaved rounds "
             f"(best of {report['repeat']} each) · freed memory: {report['allocator']}"]
    for module, info in report["peers"].items():
        state = f"{info['version']}" if info["installed"] else f"not installed: {info['pip']}"
        lines.append(f"  peer {module:<15} {state}")
    for suite, comparisons in report["suites"].items():
        lines.append(f"\n== {suite} ({report['seconds'][suite]:.1f} s)")
        for c in comparisons:
            lines.append(f"{c['name']}  [{c['setup']}]")
            for who, r in c["results"].items():
                extra = f"   {r['throughput']:12,.1f} {c['throughput_unit']}" if "throughput" in r else ""
                ratio = "—" if r["ratio"] is None else f"{r['ratio']:.2f}"
                lines.append(f"  {who:<34}{_value(r['value'], c['unit'])}  × ours {ratio:>6}{extra}")
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def write_json(report: dict, path, *, overwrite: bool = False) -> None:
    with open(path, "w" if overwrite else "x", encoding="utf-8") as f:  # "x": an existing file is never replaced
        json.dump(report, f, indent=1, allow_nan=False, default=str)
        f.write("\n")
