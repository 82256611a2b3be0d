"""One prepared run on a GPU: correctness of our attention, generation and bf16 training on the device, then speed
against Hugging Face GPT-2, with every result in one JSON file.

    python3 benchmarks/gpu_check.py --out $OUT/gpu.json                 # CUDA; 111 s on an H200 (budget 7.5 min)
    python3 benchmarks/gpu_check.py --out gpu.json --skip-speed         # correctness only (15 s on an H200)
    python benchmarks/gpu_check.py --device cpu --quick --out /tmp/g.json   # the CPU smoke test (same checks)

It needs no install: the repository root is put on ``sys.path``. ``transformers`` is optional (the Hugging Face
peers are skipped, with a printed note, when it is missing). Exit status: 0 all checks passed, 1 a correctness check
failed, 2 the device is not available.

Correctness (each a PASS/FAIL line: the measured max abs difference against its tolerance; the JSON keeps them all)

* ``attn``: ``MultiHeadAttention`` on kernels ``sdpa``, ``math`` and ``loop`` against a float32 ``math`` reference
  built from the *same* (already rounded) weights and inputs, for three cases — causal GQA (H=8, Hkv=2; reaches
  SDPA as ``is_causal``), causal GQA with left padding (a boolean mask; some query rows see no key), padding-only
  full MHA — in float32, bfloat16 and float16, forward output and input gradient. Tolerances are relative to the
  reference's largest magnitude: float32 ``1e-5`` (everything is float32 arithmetic; only summation order
  differs, ~1e-7 measured). Low precision: ``4·eps`` for outputs and ``8·eps`` for gradients (bf16 eps = 2^-7:
  3.1e-2 / 6.3e-2; fp16 eps = 2^-10: 3.9e-3 / 7.8e-3). The forward rounds to the dtype at about five places —
  input, q/k/v projections, attention probabilities (flash rounds P before P·V), P·V, output projection — each
  within eps/2 of its own magnitude, with float32 accumulation inside matmuls and softmax, so the end-to-end error
  stays below ~2.5 eps of the output scale; the backward goes through about twice as many rounded tensors
  (dO·V^T, the softmax Jacobian, dS·K and three projections' transposes). Measured on CPU (torch 2.13, default
  sizes): ≤ 0.5 eps forward and ≤ 1.1 eps backward, so the margin is ~8x; float32 ≤ 5e-7 relative.
* ``masked``: every query row that may attend to nothing has output exactly 0 (the modules have no bias, so the
  output projection of a zero row stays 0), and output and input gradient are finite — per kernel and dtype.
* ``sdpa-backend``: the ``sdpa`` kernel under ``torch.nn.attention.sdpa_kernel`` forced to FLASH_ATTENTION,
  EFFICIENT_ATTENTION, CUDNN_ATTENTION and MATH, for each case and dtype: a backend that refuses the call is
  reported with PyTorch's reason (not a failure, except MATH, which must take everything); one that accepts must
  agree with the reference as above and keep masked rows at 0. ``sdpa_dispatch`` in the JSON records which backend
  the default dispatch actually ran (the aten op seen by a dispatch mode).
* ``generate``: ``anatomy.generation.generate`` on the flattened fast path vs ``fast=False``, token-identical in
  float32 on the device (GPT-2 and Llama-GQA presets, left-padded batch of 3, weights perturbed so the logits are
  peaked and greedy ties are not an issue).
* ``lm-bf16``: a ``DecoderLM`` (GPT-2 and Llama-GQA presets, one left-padded row, labels -100 on the padding)
  forward + backward under bf16 autocast: loss and every gradient finite; loss within 0.5% of float32's (the
  logits carry ≲ eps relative error from the bf16 matmuls, cross-entropy moves by at most that much per token, and
  the per-token errors average out: measured 5e-6 relative on CPU); relative L2 error of all parameter gradients
  ≤ 0.05 (≈ 6 eps: gradients of a 2-layer model pass through ~10 bf16 matmuls; measured 0.006-0.007 on CPU).

Speed (skipped by ``--skip-speed``; interleaved rounds from ``_common.rounds``, medians; every timed callable ends
with ``torch.cuda.synchronize()`` so the wall clock covers the queued kernels; ``ratio`` = time_peer / time_ours,
> 1 means we are faster)

* training step tokens/s (forward + backward + AdamW, bf16 autocast), ours vs HF ``GPT2LMHeadModel`` (sdpa), at
  train_step.py's size (4 layers, d 256, T 256, batch 8, vocab 4096) and GPT-2 small (12 layers, d 768, T 1024,
  batch 8, vocab 50257);
* greedy decode new tokens/s vs HF ``generate`` (GPT-2 small size, float32, prompt 16, 128 new tokens) at batch 1
  and 16, and our fast path vs ``fast=False``;
* ``torch.compile`` (default mode) of our GPT-2-small training step: compile time (first step) and speedup over
  eager; a failure is a clean skip that prints the exception type and first line.

A time budget (``--budget-s``, default 450 s) skips speed sections that would not fit, with a note. The JSON is
rewritten after every section, so a run cut short still leaves its results.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import logging
import math
import platform
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from anatomy.components.inputs import attention_inputs

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent)):  # _common, and the package without an install
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _common import SdpaRecorder, rounds  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.components import MultiHeadAttention  # noqa: E402
from anatomy.generation import generate  # noqa: E402
from anatomy.generation.fast import refusal  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
KERNELS = ("sdpa", "math", "loop")
FP32_REL = 1e-5
LOW_OUT_EPS, LOW_GRAD_EPS = 4, 8  # multiples of the dtype's eps, relative to the reference's max magnitude
LM_LOSS_REL, LM_GRAD_REL = 0.005, 0.05
REJECTED = ("No available kernel", "No viable backend")  # sdpa_kernel's refusal when the forced backend can't run


@dataclass(frozen=True)
class Sizes:
    attn: tuple[int, int, int, int, int]  # B, T, H, Hkv, Dh
    lm: tuple[int, int, int, int, int, int]  # layers, d, heads, T, B, vocab
    gen: tuple[int, int, int, int, int, int]  # layers, d, heads, vocab, prompt T, new tokens
    train_small: tuple[int, int, int, int, int, int, int]  # L, H, D, T, B, V, steps per timed call
    train_large: tuple[int, int, int, int, int, int, int]
    decode: tuple[int, int, int, int, int, int]  # L, H, D, V, prompt, new tokens
    decode_batches: tuple[int, ...]
    rounds: int
    repeat: int


FULL = Sizes(
    attn=(4, 256, 8, 2, 64),
    lm=(2, 256, 4, 128, 4, 1024),
    gen=(2, 64, 4, 128, 10, 32),
    train_small=(4, 4, 256, 256, 8, 4096, 10),
    train_large=(12, 12, 768, 1024, 8, 50257, 2),
    decode=(12, 12, 768, 50257, 16, 128),
    decode_batches=(1, 16),
    rounds=5,
    repeat=2,
)
QUICK = Sizes(
    attn=(3, 12, 4, 2, 8),
    lm=(2, 32, 4, 16, 3, 64),
    gen=(2, 32, 4, 50, 7, 12),
    train_small=(2, 2, 32, 32, 2, 128, 2),
    train_large=(2, 4, 64, 64, 2, 256, 1),
    decode=(2, 4, 64, 256, 8, 16),
    decode_batches=(1, 16),
    rounds=2,
    repeat=1,
)


# --- the record -----------------------------------------------------------------------------------------------------


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2e}" if x and (abs(x) < 1e-2 or abs(x) >= 1e4) else f"{x:.4g}"
    return str(x)


class Report:
    def __init__(self, out: Path | None) -> None:
        self.out = out
        self.data: dict = {
            "environment": {},
            "checks": [],
            "speed": [],
            "sdpa_dispatch": [],
            "sdpa_backends": [],
            "notes": [],
        }

    def check(self, name: str, passed: bool, value, tolerance, note: str = "", *, echo: bool = True) -> bool:
        entry = {"name": name, "passed": bool(passed), "value": value, "tolerance": tolerance}
        if note:
            entry["note"] = note
        self.data["checks"].append(entry)
        if echo:
            print(
                f"{'PASS' if passed else 'FAIL'}  {name}: {_fmt(value)} (tol {_fmt(tolerance)})"
                + (f"  {note}" if note else ""),
                flush=True,
            )
        return bool(passed)

    def error(self, name: str, err: BaseException) -> None:
        """A check that raised: a FAIL with the exception, and the run goes on."""
        first = (str(err).strip().splitlines() or [""])[0][:200]
        self.check(name, False, None, None, f"raised {type(err).__name__}: {first}")
        traceback.print_exc(limit=3)

    def speed(self, name: str, ours, peer, ratio, unit: str, note: str = "") -> None:
        entry = {"name": name, "ours": ours, "peer": peer, "ratio": ratio, "unit": unit}
        if note:
            entry["note"] = note
        self.data["speed"].append(entry)

    def note(self, text: str) -> None:
        print(f"NOTE  {text}", flush=True)
        self.data["notes"].append(text)

    def failed(self) -> list[str]:
        return [c["name"] for c in self.data["checks"] if not c["passed"]]

    def save(self) -> None:
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.out.with_suffix(self.out.suffix + ".tmp")
            tmp.write_text(json.dumps(self.data, indent=1, default=str))
            tmp.replace(self.out)


# --- helpers --------------------------------------------------------------------------------------------------------


def sync(device: torch.device) -> None:
    """Wait for the queued kernels: a wall-clock timer around a CUDA call otherwise sees only the launches."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def environment(device: torch.device, quick: bool) -> dict:
    env: dict = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "device": str(device),
        "quick": quick,
        "threads": torch.get_num_threads(),
    }
    try:
        import transformers

        env["transformers"] = transformers.__version__
    except ImportError:
        env["transformers"] = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env.update(
            device_name=props.name,
            capability=".".join(map(str, torch.cuda.get_device_capability(device))),
            sm_count=props.multi_processor_count,
            memory_gib=round(props.total_memory / 2**30, 1),
            cudnn=torch.backends.cudnn.version(),
            tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
            tf32_cudnn=torch.backends.cudnn.allow_tf32,
            sdp_enabled={
                n: getattr(torch.backends.cuda, f"{n}_sdp_enabled")()
                for n in ("flash", "mem_efficient", "cudnn", "math")
                if hasattr(torch.backends.cuda, f"{n}_sdp_enabled")
            },
        )
    else:
        env.update(device_name=platform.processor() or platform.machine(), capability=None)
    return env


HEADERS = {"FLASH": "Flash attention", "EFFICIENT": "Memory efficient", "CUDNN": "cuDNN attention"}


def _reason(err: BaseException, caught: list, backend: str = "") -> str:
    """PyTorch's own reason for refusing the forced ``backend``: its warnings come as a header per backend ("Flash
    attention kernel not used because:") followed by that backend's reasons; keep the forced backend's reasons
    (all of them when none is headed so), else the error's first line."""
    by_header: dict[str, list[str]] = {}
    header, loose = "", []
    for w in caught:
        text = str(w.message).split("(Triggered internally")[0].strip()
        if not text or "No available kernel" in text:
            continue
        if text.endswith("not used because:"):
            header = text
            by_header.setdefault(header, [])
        elif header:
            by_header[header].append(text)
        else:
            loose.append(text)
    prefix = HEADERS.get(backend, "\0")
    own = [r for h, rs in by_header.items() if h.startswith(prefix) for r in rs]
    lines = own or loose or [r for rs in by_header.values() for r in rs]
    return ("; ".join(dict.fromkeys(lines)) or (str(err).strip().splitlines() or [""])[0])[:300]


# --- correctness: attention -----------------------------------------------------------------------------------------


def attention_cases(sizes: Sizes, device: torch.device):
    b, t, h, hkv, dh = sizes.attn
    lengths = torch.tensor([t, t - t // 3, 0, t - 1, t // 2][:b])  # rows: full, left-padded, pure padding, ...
    pad = torch.arange(t)[None] >= (t - lengths)[:, None]  # (B, T) left padding: True on the last `length` tokens
    key_pad = pad[:, None, None, :].to(device)  # (B, 1, 1, S)
    return {
        "causal-gqa": dict(n_kv=hkv, mask=None, causal=True),
        "causal+pad-gqa": dict(n_kv=hkv, mask=key_pad, causal=True),
        "pad-mha": dict(n_kv=h, mask=key_pad, causal=False),
    }


def hidden_rows(mask: torch.Tensor | None, causal: bool, b: int, t: int, device) -> torch.Tensor:
    """``(B, T)`` True where a query may attend to no key (the mask is the same for every head here)."""
    full = torch.ones(b, 1, t, t, dtype=torch.bool, device=device)
    if mask is not None:
        full = full & mask
    if causal:
        full = full & torch.ones(t, t, dtype=torch.bool, device=device).tril()
    return ~full.any(-1)[:, 0]  # (B, T)


def _rel_tol(dtype: torch.dtype, grad: bool) -> float:
    if dtype == torch.float32:
        return FP32_REL
    return (LOW_GRAD_EPS if grad else LOW_OUT_EPS) * torch.finfo(dtype).eps


def _run_attention(module: MultiHeadAttention, x: torch.Tensor, gout: torch.Tensor, case: dict, kernel: str):
    """Forward + backward; returns ``(out, x.grad, backend that ran)``."""
    module.kernel = kernel
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    with SdpaRecorder() as rec:
        out, _ = module(x, ctx=attention_inputs(module, x, mask=case["mask"], is_causal=case["causal"]))
    out.backward(gout)
    return out.detach(), x.grad.detach(), rec.backend


def _compare(
    report: Report, name: str, out, grad, ref_out, ref_grad, dtype, hidden, *, echo_prefix: str, extra: str = ""
) -> bool:
    """Record the out / grad / masked-row checks of one run and print one line for them."""
    ok = True
    line = []
    for what, got, ref in (("out", out, ref_out), ("grad", grad, ref_grad)):
        scale = float(ref.abs().max()) or 1.0
        tol = _rel_tol(dtype, what == "grad") * scale
        diff = float((got.float() - ref).abs().max()) if torch.isfinite(got).all() else float("nan")
        passed = diff <= tol  # NaN fails
        ok &= report.check(f"{name} {what}", passed, diff, tol, echo=False)
        line.append(f"{what} {_fmt(diff)}/{_fmt(tol)}")
    if hidden.any():
        leak = float(out[hidden].abs().max().float())
        finite = bool(torch.isfinite(out).all() and torch.isfinite(grad).all())
        passed = leak == 0.0 and finite
        ok &= report.check(
            f"masked {name}", passed, leak, 0.0, "" if finite else "non-finite output or gradient", echo=False
        )
        line.append(f"masked {int(hidden.sum())} rows: {_fmt(leak)}{'' if finite else ' NON-FINITE'}")
    print(f"{'PASS' if ok else 'FAIL'}  {echo_prefix:34s} " + "  ".join(line) + extra, flush=True)
    return ok


def check_attention(report: Report, sizes: Sizes, device: torch.device) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, t, h, _, dh = sizes.attn
    backends = [
        (n, getattr(SDPBackend, n))
        for n in ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
        if hasattr(SDPBackend, n)
    ]
    print(f"\n== attention: B={b} T={t} H={h} Dh={dh}, reference = float32 'math' on the same rounded weights")
    for case_name, case in attention_cases(sizes, device).items():
        hidden = hidden_rows(case["mask"], case["causal"], b, t, device)
        torch.manual_seed(0)
        base = MultiHeadAttention(d_model=h * dh, n_heads=h, n_kv_heads=case["n_kv"], bias=False, kernel="math")
        g = torch.Generator().manual_seed(1)
        x0 = torch.randn(b, t, h * dh, generator=g)
        g0 = torch.randn(b, t, h * dh, generator=g)
        for dname, dtype in DTYPES.items():
            name = f"{case_name} {dname}"
            try:
                module = copy.deepcopy(base).to(device=device, dtype=dtype)
                x, gout = x0.to(device, dtype), g0.to(device, dtype)
                ref = copy.deepcopy(module).float()  # the same rounded weights, float32 arithmetic
                ref_out, ref_grad, _ = _run_attention(ref, x.float(), gout.float(), case, "math")
            except Exception as err:  # noqa: BLE001
                report.error(f"attn {name} setup", err)
                continue
            for kernel in KERNELS:
                try:
                    out, grad, ran = _run_attention(module, x, gout, case, kernel)
                    if kernel == "sdpa":
                        report.data["sdpa_dispatch"].append({"case": case_name, "dtype": dname, "ran": ran})
                    _compare(
                        report,
                        f"attn {name} {kernel}",
                        out,
                        grad,
                        ref_out,
                        ref_grad,
                        dtype,
                        hidden,
                        echo_prefix=f"attn {name} {kernel}",
                        extra=f"   [{ran}]" if kernel == "sdpa" else "",
                    )
                except Exception as err:  # noqa: BLE001
                    report.error(f"attn {name} {kernel}", err)
            for bname, backend in backends:
                short = bname.split("_")[0]
                label = f"sdpa-backend {short} {name}"
                row = {"case": case_name, "dtype": dname, "backend": short}
                report.data["sdpa_backends"].append(row)
                try:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        try:
                            with sdpa_kernel([backend]):
                                out, grad, ran = _run_attention(module, x, gout, case, "sdpa")
                        except RuntimeError as err:
                            if not any(r in str(err) for r in REJECTED):
                                raise  # the backend took the call and then failed: a real failure
                            reason = _reason(err, caught, short)
                            row.update(accepted=False, reason=reason)
                            report.check(label, bname != "MATH", None, None, f"rejected: {reason}", echo=False)
                            print(
                                f"{'----' if bname != 'MATH' else 'FAIL'}  {label:34s} rejected: {reason[:80]}",
                                flush=True,
                            )
                            continue
                    row.update(accepted=True, ran=ran)
                    row["agrees"] = _compare(
                        report,
                        label,
                        out,
                        grad,
                        ref_out,
                        ref_grad,
                        dtype,
                        hidden,
                        echo_prefix=label,
                        extra=f"  [{ran}]",
                    )
                except Exception as err:  # noqa: BLE001
                    row.update(accepted=None, reason=f"{type(err).__name__}: {err}"[:300])
                    report.error(label, err)
        report.save()


# --- correctness: generation, bf16 LM -------------------------------------------------------------------------------


def _lm(preset: str, layers: int, d: int, heads: int, vocab: int, max_len: int, **extra) -> torch.nn.Module:
    kv = dict(n_kv_heads=max(1, heads // 2)) if preset == "llama" else {}
    config = ModelConfig.from_preset(
        preset,
        n_layers=layers,
        d_model=d,
        n_heads=heads,
        d_ff=4 * d,
        vocab_size=vocab,
        max_seq_len=max_len,
        dropout=0.0,
        attention_dropout=0.0,
        **kv,
        **extra,
    )
    return build_model(config)


def check_generation(report: Report, sizes: Sizes, device: torch.device) -> None:
    layers, d, heads, vocab, t, new = sizes.gen
    print(f"\n== generate: fast path vs fast=False, float32, batch 3 left-padded, prompt {t}, {new} new tokens")
    for preset in ("gpt2", "llama"):
        name = f"generate {preset}{'-gqa' if preset == 'llama' else ''} fast==modules"
        try:
            torch.manual_seed(0)
            model = _lm(preset, layers, d, heads, vocab, t + new + 8)
            with torch.no_grad():
                for p in model.parameters():  # peaked logits: greedy never hinges on a near-tie
                    p.add_(0.3 * torch.randn_like(p))
            model = model.to(device).eval()
            why = refusal(model)
            g = torch.Generator().manual_seed(1)
            ids = torch.randint(1, vocab, (3, t), generator=g)
            mask = torch.ones(3, t, dtype=torch.long)
            for row, n in enumerate((0, 2, t // 2)):
                mask[row, :n] = 0
                ids[row, :n] = 0
            ids, mask = ids.to(device), mask.to(device)
            fast = generate(model, ids, mask, max_new_tokens=new)
            slow = generate(model, ids, mask, max_new_tokens=new, fast=False)
            differ = int((fast != slow).sum()) if fast.shape == slow.shape else -1
            note = "fast path refused: " + why if why else f"{fast.shape[1] - t} new tokens per row"
            report.check(name, differ == 0 and why is None and fast.shape[1] == t + new, differ, 0, note)
        except Exception as err:  # noqa: BLE001
            report.error(name, err)
    report.save()


def check_lm_bf16(report: Report, sizes: Sizes, device: torch.device) -> None:
    layers, d, heads, t, b, vocab = sizes.lm
    print(f"\n== DecoderLM forward+backward, bf16 autocast vs float32: {layers} layers, d {d}, T {t}, batch {b}")
    for preset in ("gpt2", "llama"):
        name = f"lm-bf16 {preset}{'-gqa' if preset == 'llama' else ''}"
        try:
            torch.manual_seed(0)
            model = _lm(preset, layers, d, heads, vocab, t).to(device)
            g = torch.Generator().manual_seed(2)
            ids = torch.randint(0, vocab, (b, t), generator=g)
            mask = torch.ones(b, t, dtype=torch.long)
            mask[1, : t // 4] = 0  # a left-padded row: its first queries see no key
            labels = ids.masked_fill(mask == 0, -100)
            ids, mask, labels = ids.to(device), mask.to(device), labels.to(device)
            results = {}
            for precision in ("fp32", "bf16"):
                model.zero_grad(set_to_none=True)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16"):
                    loss = model(ids, mask, labels=labels).loss
                loss.backward()
                loss = loss.detach()
                grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
                results[precision] = (float(loss), grads)
            (l32, g32), (l16, g16) = results["fp32"], results["bf16"]
            bad = int((~torch.isfinite(g16)).sum()) + (0 if math.isfinite(l16) else 1)
            report.check(f"{name} finite (non-finite count)", bad == 0, bad, 0)
            report.check(
                f"{name} loss |bf16-fp32|",
                abs(l16 - l32) <= LM_LOSS_REL * abs(l32),
                abs(l16 - l32),
                LM_LOSS_REL * abs(l32),
                f"fp32 loss {l32:.4f}",
            )
            rel = float((g16 - g32).norm() / g32.norm())
            report.check(f"{name} grad rel L2", rel <= LM_GRAD_REL, rel, LM_GRAD_REL)
        except Exception as err:  # noqa: BLE001
            report.error(name, err)
    report.save()


# --- speed ----------------------------------------------------------------------------------------------------------


def gpt2_ours(layers, heads, d, t, vocab) -> torch.nn.Module:
    """train_step.py's model at any size (GPT-2's design; sdpa kernel)."""
    config = ModelConfig.from_preset(
        "gpt2",
        n_layers=layers,
        n_heads=heads,
        d_model=d,
        d_ff=4 * d,
        vocab_size=vocab,
        max_seq_len=t,
        dropout=0.0,
        attention_dropout=0.0,
        kernel="sdpa",
    )
    return build_model(config)


def gpt2_hf(layers, heads, d, t, vocab) -> torch.nn.Module | None:
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    config = GPT2Config(
        vocab_size=vocab,
        n_positions=t,
        n_embd=d,
        n_layer=layers,
        n_head=heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    return model


def trainer(model, ids, device, steps: int) -> Callable[[], None]:
    """``steps`` bf16-autocast training steps (forward + backward + AdamW), then a device sync."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def run():
        for _ in range(steps):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        sync(device)

    return run


def _time(contenders: dict, sizes: Sizes, device, warmup: int = 1, repeat: int | None = None):
    """``_common.rounds`` (its own warm-up call included); each callable ends with a device sync."""
    for fn in contenders.values():
        for _ in range(warmup):
            fn()
    sync(device)
    return rounds(contenders, "ours", sizes.rounds, sizes.repeat if repeat is None else repeat)


def speed_train(report: Report, sizes: Sizes, device, label: str, shape) -> None:
    layers, heads, d, t, b, vocab, steps = shape
    print(f"\n== training step, bf16 autocast ({label}: {layers} layers, d {d}, T {t}, batch {b}, vocab {vocab})")
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(0)).to(device)
    models = {"ours": gpt2_ours(layers, heads, d, t, vocab).to(device)}
    hf = gpt2_hf(layers, heads, d, t, vocab)
    if hf is None:
        report.note("transformers not installed: HF GPT-2 training peer skipped")
    else:
        models["hf"] = hf.to(device)
    contenders = {k: trainer(m, ids, device, steps) for k, m in models.items()}
    seconds, ratios = _time(contenders, sizes, device)
    tokens = steps * b * t
    ours = tokens / seconds["ours"]
    peer = tokens / seconds["hf"] if "hf" in seconds else None
    ratio = ratios.get("hf")
    report.speed(f"train step bf16 {label} (L{layers} d{d} T{t} B{b}) vs HF GPT-2", ours, peer, ratio, "tokens/s")
    print(
        f"  ours {ours:12,.0f} tokens/s"
        + (f"   HF GPT-2 sdpa {peer:12,.0f} tokens/s   time HF / ours {ratio:.2f}" if peer else ""),
        flush=True,
    )
    del models, contenders
    free(device)


def speed_compile(report: Report, sizes: Sizes, device, shape) -> None:
    layers, heads, d, t, b, vocab, steps = shape
    print(f"\n== torch.compile (mode default) of our training step ({layers} layers, d {d}, T {t}, batch {b})")
    torch.manual_seed(0)
    ids = torch.randint(0, vocab, (b, t), generator=torch.Generator().manual_seed(0)).to(device)
    model = gpt2_ours(layers, heads, d, t, vocab).to(device)
    eager = trainer(model, ids, device, steps)
    breaks: dict[str, int] = {}
    try:
        from torch._dynamo.utils import counters

        counters.clear()
        torch._logging.set_logs(dynamo=logging.ERROR)  # graph breaks are summarised below, not logged in full
        compiled_model = torch.compile(model)
        compiled = trainer(compiled_model, ids, device, 1)
        t0 = time.perf_counter()
        compiled()  # compiles forward and backward
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        compiled()
        second = time.perf_counter() - t0
        breaks = {(str(k).strip().splitlines() or [""])[0][:160]: int(v) for k, v in counters["graph_break"].items()}
    except Exception as err:  # noqa: BLE001
        first_line = (str(err).strip().splitlines() or [""])[0][:200]
        report.note(f"torch.compile skipped: {type(err).__name__}: {first_line}")
        report.speed(
            "torch.compile train step", None, None, None, "tokens/s", f"skipped: {type(err).__name__}: {first_line}"
        )
        return
    compiled = trainer(compiled_model, ids, device, steps)
    seconds, ratios = _time({"ours": eager, "compiled": compiled}, sizes, device)
    tokens = steps * b * t
    speedup = 1.0 / ratios["compiled"]  # time eager / time compiled
    note = f"second step {second:.3f} s; graph breaks: {sum(breaks.values())}" + "".join(
        f"; {n}x {reason}" for reason, n in breaks.items()
    )
    report.speed("torch.compile time (first step incl. compile)", first, None, None, "s", note)
    report.speed(
        f"torch.compile speedup train bf16 (L{layers} d{d} T{t} B{b}): compiled vs eager",
        tokens / seconds["compiled"],
        tokens / seconds["ours"],
        speedup,
        "tokens/s",
    )
    print(
        f"  compile + first step {first:.1f} s (second step {second:.3f} s); compiled "
        f"{tokens / seconds['compiled']:,.0f} vs eager {tokens / seconds['ours']:,.0f} tokens/s: "
        f"speedup {speedup:.2f}x",
        flush=True,
    )
    for reason, n in breaks.items():
        print(f"  graph break x{n}: {reason}")
    del model, compiled_model
    free(device)


def speed_decode(report: Report, sizes: Sizes, device) -> None:
    layers, heads, d, vocab, t, new = sizes.decode
    print(f"\n== greedy decode, float32 ({layers} layers, d {d}, vocab {vocab}; prompt {t}, {new} new tokens)")
    torch.manual_seed(0)
    ours = gpt2_ours(layers, heads, d, t + new, vocab).to(device).eval()
    hf = gpt2_hf(layers, heads, d, t + new, vocab)
    if hf is None:
        report.note("transformers not installed: HF generate peer skipped")
    else:
        hf = hf.to(device).eval()
    for batch in sizes.decode_batches:
        prompt = torch.randint(0, vocab, (batch, t), generator=torch.Generator().manual_seed(batch)).to(device)

        def run(fn):
            def call():
                with torch.inference_mode():
                    out = fn()
                sync(device)
                return out

            return call

        contenders = {
            "ours": run(lambda p=prompt: generate(ours, p, max_new_tokens=new)),
            "ours_modules": run(lambda p=prompt: generate(ours, p, max_new_tokens=new, fast=False)),
        }
        if hf is not None:
            mask = torch.ones_like(prompt)
            contenders["hf"] = run(
                lambda p=prompt, m=mask: hf.generate(
                    p,
                    attention_mask=m,
                    max_new_tokens=new,
                    min_new_tokens=new,
                    do_sample=False,
                    pad_token_id=0,
                    eos_token_id=None,
                )
            )
            assert contenders["hf"]().shape == (batch, t + new)
        a, m = contenders["ours"](), contenders["ours_modules"]()
        same = bool(torch.equal(a, m))
        if not same:
            report.note(
                f"decode batch {batch}: fast and fast=False tokens differ on random weights "
                f"({int((a != m).sum())} tokens; near-ties) — timing still compared"
            )
        seconds, ratios = _time(contenders, sizes, device, warmup=0, repeat=1)
        tok = batch * new
        ours_tps = tok / seconds["ours"]
        report.speed(
            f"decode batch {batch}: ours fast vs fast=False",
            ours_tps,
            tok / seconds["ours_modules"],
            ratios["ours_modules"],
            "new tokens/s",
        )
        line = f"  batch {batch:3d}: ours {ours_tps:10,.0f} new tokens/s  fast=False time x{ratios['ours_modules']:.2f}"
        if hf is not None:
            report.speed(
                f"decode batch {batch}: ours vs HF generate",
                ours_tps,
                tok / seconds["hf"],
                ratios["hf"],
                "new tokens/s",
            )
            line += f"   HF generate {tok / seconds['hf']:10,.0f} new tokens/s (time HF / ours {ratios['hf']:.2f})"
        print(line, flush=True)
    ours = hf = contenders = None  # free the models before the next section
    free(device)


# --- summary ---


def summary(report: Report) -> None:
    """The end of the output (what a tool that keeps only the tail shows): environment, SDPA backends, speed."""
    env = report.data["environment"]
    print(
        f"\n#### summary: torch {env.get('torch')}, {env.get('device_name')} (capability {env.get('capability')}), "
        f"transformers {env.get('transformers')}"
    )
    dispatch = {(d["case"], d["dtype"]): d["ran"] for d in report.data["sdpa_dispatch"]}
    table: dict[tuple[str, str], dict[str, str]] = {}
    for row in report.data["sdpa_backends"]:
        state = (
            ("ok" if row.get("agrees") else "FAIL")
            if row.get("accepted")
            else ("rej" if row.get("accepted") is False else "ERR")
        )
        table.setdefault((row["case"], row["dtype"]), {})[row["backend"]] = state
    if table:
        names = list(next(iter(table.values())))
        print("sdpa backends forced (ok: accepted and agrees; rej: refused; FAIL: disagrees) and the default's pick:")
        print(f"  {'case':16s} {'dtype':5s} " + " ".join(f"{n:9s}" for n in names) + " default")
        for (case, dtype), states in table.items():
            print(
                f"  {case:16s} {dtype:5s} "
                + " ".join(f"{states.get(n, '-'):9s}" for n in names)
                + f" {dispatch.get((case, dtype), '-')}"
            )
    if report.data["speed"]:
        print("speed (ratio = time peer / time ours; > 1: ours faster):")
        for e in report.data["speed"]:

            def num(x):
                return "-" if x is None else f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"

            ratio = "-" if e["ratio"] is None else f"{e['ratio']:.2f}"
            print(
                f"  {e['name'][:70]:70s} ours {num(e['ours']):>10s}  peer {num(e['peer']):>10s}  "
                f"ratio {ratio:>5s}  {e['unit']}"
            )


# --- main -----------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) | cuda:N | cpu (the smoke test)")
    parser.add_argument("--quick", action="store_true", help="small sizes (for --device cpu)")
    parser.add_argument("--skip-speed", action="store_true", help="correctness only")
    parser.add_argument("--skip-compile", action="store_true", help="no torch.compile section")
    parser.add_argument(
        "--budget-s",
        type=float,
        default=450.0,
        help="skip speed sections that would end past this many seconds (default 450)",
    )
    parser.add_argument("--out", type=Path, default=None, help="JSON results (rewritten after every section)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report = Report(args.out)
    device = torch.device(args.device)

    if device.type == "cuda" and not torch.cuda.is_available():
        msg = (
            f"CUDA is not available: torch {torch.__version__} (built for CUDA {torch.version.cuda}) sees no GPU. "
            "On a machine without one, run the smoke test: --device cpu --quick"
        )
        print(f"ERROR  {msg}", file=sys.stderr, flush=True)
        report.data["environment"] = {"torch": torch.__version__, "error": msg}
        report.save()
        return 2
    if device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device() if device.index is None else device.index)
        torch.cuda.set_device(device)
        # correctness in float32 means float32: no TF32 in our matmuls (PyTorch's default, made explicit)
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    sizes = QUICK if args.quick else FULL
    env = environment(device, args.quick)
    report.data["environment"] = env
    print("environment: " + ", ".join(f"{k} {v}" for k, v in env.items() if k != "sdp_enabled"))
    if "sdp_enabled" in env:
        print(f"sdp backends enabled: {env['sdp_enabled']}")
    if env["transformers"] is None:
        report.note("transformers is not installed: the Hugging Face peers are skipped")
    report.save()

    print("\n#### correctness")
    check_attention(report, sizes, device)
    check_generation(report, sizes, device)
    check_lm_bf16(report, sizes, device)
    dispatch = {}
    for d in report.data["sdpa_dispatch"]:
        dispatch.setdefault(d["case"], []).append(f"{d['dtype']}->{d['ran']}")
    print("\nsdpa default dispatch: " + "; ".join(f"{c}: {', '.join(v)}" for c, v in dispatch.items()))
    t_correct = time.perf_counter() - start
    print(f"correctness: {len(report.data['checks'])} checks, {len(report.failed())} failed ({t_correct:.1f} s)")
    report.save()

    if not args.skip_speed:
        print("\n#### speed (median over interleaved rounds; ratio = time peer / time ours, > 1: ours faster)")
        small, large = ("quick small", "quick large") if args.quick else ("train_step.py size", "GPT-2 small")
        sections = [
            ("train small", 40, lambda: speed_train(report, sizes, device, small, sizes.train_small)),
            ("train large", 60, lambda: speed_train(report, sizes, device, large, sizes.train_large)),
            ("decode", 60, lambda: speed_decode(report, sizes, device)),
        ]
        if not args.skip_compile:
            sections.append(("compile", 150, lambda: speed_compile(report, sizes, device, sizes.train_large)))
        for name, needs_s, fn in sections:
            elapsed = time.perf_counter() - start
            if not args.quick and elapsed + needs_s > args.budget_s:
                report.note(
                    f"speed section '{name}' skipped: {elapsed:.0f} s elapsed, it needs ~{needs_s} s, "
                    f"budget {args.budget_s:.0f} s"
                )
                continue
            t0 = time.perf_counter()
            try:
                fn()
            except Exception as err:  # noqa: BLE001  (speed is measured, never a correctness failure)
                first = (str(err).strip().splitlines() or [""])[0][:200]
                report.note(f"speed section '{name}' failed: {type(err).__name__}: {first}")
                traceback.print_exc(limit=3)
                free(device)
            print(f"  ({name}: {time.perf_counter() - t0:.1f} s)", flush=True)
            report.save()

    failed = report.failed()
    summary(report)
    total = time.perf_counter() - start
    report.data["environment"]["runtime_s"] = round(total, 1)
    report.save()
    print(
        f"\n#### {len(report.data['checks'])} checks, {len(failed)} failed; {len(report.data['speed'])} speed "
        f"results; {total:.1f} s" + (f"; results in {args.out}" if args.out else "")
    )
    for name in failed:
        print(f"  FAILED: {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
