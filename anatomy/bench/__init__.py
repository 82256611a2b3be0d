"""``anatomy bench``: every speed and memory comparison against every installed peer, in one run.

    anatomy bench                       # attention, train step, decode, memory at the sizes of docs/performance.md
    anatomy bench --quick --out b.json  # tiny sizes (seconds): the run the test suite makes

Suites (suites.py): one attention layer (ours vs raw SDPA vs ``nn.MultiheadAttention``), the LM train step and
forward (ours vs HF GPT-2 vs x-transformers) and one decoder block (vs ``nn.TransformerDecoderLayer``), greedy
decoding (vs HF ``generate``), and memory (peak of train steps and attention, KV-cache bytes). Contenders run in
interleaved rounds; each row prints min / median / max and the ratio of its printed median to ours' (one
convention, said in the header, so the columns cannot disagree), and a busy machine (load average) is warned
about. Peers not installed are named with their pip line (peers.py). ``benchmarks/*.py`` remain for the deeper,
hand-run variants.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch

from anatomy.bench.peers import peer_status, quiet_peers
from anatomy.bench.suites import FULL, QUICK, SUITES
from anatomy.bench.timing import Options, environment, load_average, load_warning, peak_memory, rounds, timed

SCHEMA = "anatomy-bench/1"

__all__ = ["SCHEMA", "SUITES", "environment", "format_report", "peak_memory", "rounds", "run_bench", "timed"]


def run_bench(
    *,
    quick: bool = False,
    suites: Iterable[str] | None = None,
    n_rounds: int | None = None,
    repeat: int | None = None,
    allocator: str = "default",
    progress: Callable[[str], object] | None = None,
) -> dict[str, Any]:
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
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "anatomy": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "threads": torch.get_num_threads(),
        "quick": quick,
        "rounds": opts.rounds,
        "repeat": opts.repeat,
        "allocator": allocator,
        "peers": status,
        "missing_peers": {k: v["pip"] for k, v in status.items() if not v["installed"]},
        "notes": [],
        "suites": {},
        "seconds": {},
    }
    loads = [load_average()]  # before the first suite: the others' load alone
    for name in chosen:
        if progress is not None:
            progress(name)
        t0 = time.perf_counter()
        with quiet_peers():
            report["suites"][name] = SUITES[name](sizes, opts, status, report["notes"])
        report["seconds"][name] = round(time.perf_counter() - t0, 3)
        loads.append(load_average())
    cores = os.cpu_count() or 0
    report["load"] = {"cores": cores, "samples": loads}
    report["busy"] = load_warning(loads, cores, torch.get_num_threads())
    return report


_TIME_UNITS = ((1e-3, "µs", 1e-6), (1.0, "ms", 1e-3), (float("inf"), "s", 1.0))  # (below, name, seconds)
RATIO_RULE = (
    "ratio = the row's median ÷ ours' median, divided from the printed numbers (above 1: ours is faster or smaller)"
)


def table_unit(unit: str, reference: float) -> tuple[str, float]:
    """One display unit per table, chosen from ours' value so it prints with at least 4 significant digits:
    ``(name, size in base units)``."""
    if unit == "bytes":
        return ("MiB", 2.0**20) if reference >= 2**20 else ("KiB", 2.0**10)
    for below, name, size in _TIME_UNITS:
        if reference < below:
            return name, size
    return "s", 1.0


def shown(value: float, size: float) -> float:
    """``value`` as printed: in the table's unit, 3 decimals."""
    return round(value / size, 3)


def shown_ratio(value: float, reference: float, size: float) -> float | None:
    """The ratio printed beside a row: its printed median over ours' printed median (None if ours shows 0)."""
    ref = shown(reference, size)
    return None if ref == 0 else shown(value, size) / ref


def format_row(who: str, r: dict[str, Any], unit: str, name: str, size: float, reference: float) -> str:
    """One contender: min, median, max (timings; memory has one value) and the ratio of the printed medians."""
    med = f"{shown(r['value'], size):.3f}"
    lo, hi = (f"{shown(r['min'], size):.3f}", f"{shown(r['max'], size):.3f}") if "min" in r else ("·", "·")
    ratio = shown_ratio(r["value"], reference, size)
    text = f"  {who:<32}{lo:>11}{med:>11}{hi:>11} {name:<3} {'—' if ratio is None else f'{ratio:.2f}':>6}"
    if "round_ratio_min" in r and who != "ours":
        spread = (r["round_ratio_min"], r["round_ratio_max"])
        if spread[1] > 2 * spread[0]:
            text += f"  unsteady: per-round ratios {spread[0]:.2f}-{spread[1]:.2f}"
    if "throughput" in r:
        text += f"  {r['throughput']:,.1f} {r.get('throughput_unit', '')}".rstrip()
    return text


def format_report(report: dict[str, Any]) -> str:
    """The report as text: one table per comparison, min / median / max per contender in one unit per table and the
    ratio of the printed medians to ours (``RATIO_RULE``, said in the header); a loaded machine is warned about."""
    lines = [
        f"anatomy bench · torch {report['torch']} · {report['threads']} threads · "
        f"{'quick sizes' if report['quick'] else 'full sizes'} · {report['rounds']} interleaved rounds "
        f"(best of {report['repeat']} calls each) · freed memory: {report['allocator']}",
        RATIO_RULE,
    ]
    busy = report.get("busy")
    if busy:
        lines.append(f"WARNING: {busy}")
    for module, info in report["peers"].items():
        state = f"{info['version']}" if info["installed"] else f"not installed: {info['pip']}"
        lines.append(f"  peer {module:<15} {state}")
    for suite, comparisons in report["suites"].items():
        lines.append(f"\n== {suite} ({report['seconds'][suite]:.1f} s)")
        for c in comparisons:
            ref = c["results"][c["reference"]]["value"]
            name, size = table_unit(c["unit"], ref)
            lines.append(f"{c['name']}  [{c['setup']}]")
            lines.append(f"  {'':<32}{'min':>11}{'median':>11}{'max':>11}     {'ratio':>6}")
            for who, r in c["results"].items():
                row = dict(r, throughput_unit=c.get("throughput_unit", ""))
                lines.append(format_row(who, row, c["unit"], name, size, ref))
    for note in report["notes"]:
        lines.append(f"note: {note}")
    return "\n".join(lines)


def write_json(report: dict[str, Any], path: str | os.PathLike[str], *, overwrite: bool = False) -> None:
    with open(path, "w" if overwrite else "x", encoding="utf-8") as f:  # "x": an existing file is never replaced
        json.dump(report, f, indent=1, allow_nan=False, default=str)
        f.write("\n")
