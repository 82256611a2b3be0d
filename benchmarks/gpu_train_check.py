"""The user's path on a GPU, through the command line: `anatomy train` (fp32, bf16, --compile), a SIGKILL in the
middle of a run and `--resume`, then `anatomy generate` from the checkpoint. One JSON with every result.

    python3 benchmarks/gpu_train_check.py --out $OUT/train.json          # CUDA (device=auto picks it)
    python benchmarks/gpu_train_check.py --quick --out /tmp/t.json        # CPU smoke test, a few steps
    (--skip-compile, --skip-fp16: leave out the runs that are slow on a CPU, as the test suite does)

Checks (exit 1 if any fails):

* ``char-shakespeare`` at its preset (nanoGPT's CPU settings: 4 layers, 4 heads, d 128, block 64, batch 12, 2000
  steps) reaches val loss <= 1.9 nats/char in fp32, ``precision=bf16`` and ``precision=fp16`` (loss-scaled: fewer
  than 10% of the steps may overflow and be skipped); wall time and tokens/s reported.
* Resume: a run killed with SIGKILL right after its middle checkpoint is written, then ``--resume``d, logs the same
  losses as the uninterrupted run for every step after the checkpoint (max abs difference reported; on CPU the
  test suite holds this to bit-identity, on CUDA atomics in some backward kernels may differ in the last bits).
* ``compile=true``: the run trains (finite losses, same loss curve as eager within 2% at the end) and the log says
  whether torch.compile was used; tokens/s against eager.
* ``anatomy generate --checkpoint`` continues a prompt (exit 0, text out).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def anatomy(*args: str, env_extra: dict | None = None) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", PYTHONUNBUFFERED="1")
    env.update(env_extra or {})
    return subprocess.Popen(
        [sys.executable, "-m", "anatomy", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def metrics(run: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r for r in rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--work",
        type=Path,
        default=None,
        help="a folder for the run directories (a new temporary folder inside it; never cleared)",
    )
    parser.add_argument("--quick", action="store_true", help="a few steps (the CPU smoke test)")
    parser.add_argument("--skip-compile", action="store_true", help="no compile=true run (its compile is slow on CPU)")
    parser.add_argument("--skip-fp16", action="store_true", help="no fp16 run (CPUs emulate fp16 matmuls: slow)")
    args = parser.parse_args(argv)
    steps = 40 if args.quick else 2000
    half = steps // 2
    common = [
        "--preset",
        "char-shakespeare",
        "progress=false",
        f"steps={steps}",
        f"save_every={half}",
        f"eval_every={half}",
        "log_every=10",
    ]
    results: dict = {"checks": [], "runs": {}}
    failed: list[str] = []

    def check(name: str, ok: bool, detail: str) -> None:
        results["checks"].append({"name": name, "passed": bool(ok), "detail": detail})
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {detail}", flush=True)
        if not ok:
            failed.append(name)
        args.out.write_text(json.dumps(results, indent=1))

    def train(name: str, *extra: str, timeout: float = 900) -> tuple[Path, float, str]:
        run = args.work / name
        start = time.monotonic()
        rc, out = finish(anatomy("train", *common, "--out", str(run), *extra), timeout)
        took = time.monotonic() - start
        head = next((line for line in out.splitlines() if line.startswith("training ")), "")
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
        logged = metrics(run) if (run / "metrics.jsonl").exists() else {}
        tps = [r["tokens_per_s"] for s, r in logged.items() if s > 10]
        results["runs"][name] = dict(
            rc=rc,
            wall_s=round(took, 1),
            header=head,
            summary=summary,
            median_tokens_per_s=sorted(tps)[len(tps) // 2] if tps else None,
            log_tail=out.splitlines()[-6:],
        )
        print(f"  {name}: rc {rc}, {took:.1f} s, {head}; {summary}", flush=True)
        if rc != 0:
            print(out[-3000:], flush=True)
        return run, took, out

    if args.work is not None:
        args.work.mkdir(parents=True, exist_ok=True)
    args.work = Path(tempfile.mkdtemp(prefix="anatomy-gpu-train-", dir=args.work))
    print(f"# run directories in {args.work}", flush=True)
    import torch

    results["environment"] = dict(
        torch=torch.__version__,
        cuda=torch.cuda.is_available(),
        device=torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
    )
    print(f"# {results['environment']}", flush=True)

    fp32, _, _ = train("fp32")
    train("bf16", "precision=bf16")
    if not args.skip_fp16:
        fp16, _, _ = train("fp16", "precision=fp16")
    for name in ("fp32", "bf16") + (() if args.skip_fp16 else ("fp16",)):
        val = results["runs"][name]["summary"].get("best_val_loss", math.inf)
        limit = 1.9 if not args.quick else 4.0
        check(
            f"char-shakespeare {name} val loss",
            results["runs"][name]["rc"] == 0 and val <= limit,
            f"{val:.4f} (<= {limit}), {results['runs'][name]['wall_s']} s, "
            f"{results['runs'][name]['median_tokens_per_s']} tokens/s",
        )

    if not args.skip_fp16:
        rows = metrics(fp16) if (fp16 / "metrics.jsonl").exists() else {}
        skipped = sorted(s for s, r in rows.items() if r.get("skipped"))
        scales = [r["loss_scale"] for r in rows.values() if "loss_scale" in r]
        results["runs"]["fp16"]["skipped_steps"] = skipped
        check(
            "fp16 loss scaling",
            bool(scales) and len(skipped) < steps // 10,
            f"{len(skipped)} overflowing steps skipped {skipped[:10]}; loss scale {scales[0] if scales else None} -> "
            f"{scales[-1] if scales else None}",
        )

    # Resume: kill right after the middle checkpoint lands, resume, compare with the uninterrupted fp32 run.
    killed = args.work / "killed"
    proc = anatomy("train", *common, "--out", str(killed))
    middle = killed / "checkpoints" / f"step-{half:06d}"
    deadline = time.monotonic() + 900
    while not (middle / "trainer_state.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    was_running = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    rc, out = finish(anatomy("train", "--resume", str(killed), "progress=false"), 900)
    ref, got = metrics(fp32), metrics(killed)
    after = [s for s in ref if s > half]
    diffs = [abs(ref[s]["loss"] - got[s]["loss"]) for s in after if s in got]
    same = len(diffs) == len(after) and len(after) > 0
    check(
        "SIGKILL after the middle checkpoint, then --resume",
        rc == 0 and same and max(diffs) <= 1e-3,
        f"killed while running: {was_running}; resume rc {rc}; {len(diffs)}/{len(after)} steps logged after "
        f"step {half}; max |loss diff| {max(diffs) if diffs else 'n/a'}; bit-identical {same and max(diffs) == 0}",
    )
    if rc != 0:
        print(out[-3000:], flush=True)

    if args.skip_compile:
        print("  compile: skipped (--skip-compile)", flush=True)
    else:
        comp, _, out = train("compile", "compile=true")
        used = [line for line in out.splitlines() if "compile" in line.lower()][:3] or ["(no compile message)"]
        got, ref = metrics(comp), metrics(fp32)
        end = max(got) if got else 0
        close = bool(got) and end in ref and abs(got[end]["loss"] - ref[end]["loss"]) <= 0.02 * ref[end]["loss"]
        finite = bool(got) and all(math.isfinite(r["loss"]) for r in got.values())
        eager_tps = results["runs"]["fp32"]["median_tokens_per_s"] or 1
        speed = (results["runs"]["compile"]["median_tokens_per_s"] or 0) / eager_tps
        check(
            "compile=true trains like eager",
            results["runs"]["compile"]["rc"] == 0 and finite and close,
            f"final loss {got[end]['loss'] if got else 'n/a'} vs eager {ref.get(end, {}).get('loss')}; "
            f"tokens/s x{speed:.2f} of eager; log: {used}",
        )

    rc, out = finish(
        anatomy("generate", "--checkpoint", str(fp32), "--prompt", "ROMEO:", "--max-new-tokens", "80", "--seed", "1"),
        300,
    )
    results["generate"] = out
    check("anatomy generate from the checkpoint", rc == 0 and len(out.strip()) > len("ROMEO:"), repr(out.strip()[:120]))

    print(f"#### {len(results['checks'])} checks, {len(failed)} failed: {failed}", flush=True)
    args.out.write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
