"""Grouped-query attention through PyTorch's SDPA: K/V heads handed over as they are (``enable_gqa=True``) or
repeated to every query head first (``repeat_kv``), forward + backward, time and peak memory.

    python benchmarks/gqa_sdpa.py                       # CUDA when present, else CPU (small sizes)
    python benchmarks/gqa_sdpa.py --device cpu --quick

Why it matters: on CUDA the memory-efficient kernel refuses K/V with fewer heads than Q, and flash attention
takes no mask and no float32, so float32 GQA, or GQA with a padding mask where cuDNN attention is not available,
falls back to the *math* backend, which materialises (B, H, T, S) scores. Repeating K/V costs one copy the size of
Q (per K and V) and lets the memory-efficient kernel run. ``anatomy`` is our ``kernels.sdpa_attention``, which picks
between the two (``kernels.native_gqa``); it should track the better of them.

``max |diff|`` is against ``native`` over the query rows that see at least one key (on rows that see none the
backends differ; ours is 0 by contract). Contenders are interleaved in rounds (``_common.rounds``); ratios are
time / time of ``native``; the backend each contender ran is read from the aten op dispatched (``math(decomposed)``
has no op of its own).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
for _p in (str(HERE), str(HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from _common import SdpaRecorder, environment, rounds  # noqa: E402

from anatomy.components import kernels  # noqa: E402


def backend_of(fn) -> str:
    with SdpaRecorder() as rec:
        fn()
    return rec.backend


def case(device, dtype, b, t, h, hkv, dh, padded: bool):
    g = torch.Generator(device="cpu").manual_seed(0)
    q = torch.randn(b, h, t, dh, generator=g).to(device, dtype).requires_grad_()
    k = torch.randn(b, hkv, t, dh, generator=g).to(device, dtype).requires_grad_()
    v = torch.randn(b, hkv, t, dh, generator=g).to(device, dtype).requires_grad_()
    mask = None
    if padded:  # left padding: row i hides its first i * t // (2 b) keys, causal on top
        keep = torch.arange(t)[None, :] >= (torch.arange(b)[:, None] * t // (2 * b))
        mask = keep[:, None, None, :].to(device)  # (B, 1, 1, S)
    gout = torch.randn(b, h, t, dh, generator=g).to(device, dtype)
    return q, k, v, mask, gout


def contenders(q, k, v, mask):
    """Each builds the mask it needs inside the call, as a caller would (padding & causal)."""
    scale = q.shape[-1] ** -0.5
    t, s = q.shape[-2], k.shape[-2]

    def full():
        return None if mask is None else mask & torch.ones(t, s, dtype=torch.bool, device=q.device).tril()

    def native():
        m = full()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=m is None, scale=scale, enable_gqa=True)

    def repeat():
        m, h = full(), q.shape[1]
        return F.scaled_dot_product_attention(
            q, kernels.repeat_kv(k, h), kernels.repeat_kv(v, h), attn_mask=m, is_causal=m is None, scale=scale
        )

    def ours():
        return kernels.sdpa_attention(q, k, v, kernels.AttentionArgs(mask=mask, is_causal=True, scale=scale))[0]

    return {"native": native, "repeat": repeat, "anatomy": ours}, full


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dtypes = [torch.float32, torch.bfloat16]
    if args.quick:
        shapes = [(2, 64, 4, 2, 16)]
    elif cuda:
        shapes = [(4, 1024, 16, 2, 64), (4, 4096, 16, 2, 64), (4, 4096, 16, 1, 64)]
    else:
        shapes = [(2, 512, 8, 2, 64)]
    print(f"# {environment()}, device {torch.cuda.get_device_name() if cuda else 'cpu'}")
    print(
        f"{'dtype':5s} {'B':>2s} {'T':>5s} {'H':>3s} {'Hkv':>3s} {'mask':6s} {'contender':8s} {'backend':18s} "
        f"{'ms':>8s} {'x native':>8s} {'peak MiB':>9s} {'max |diff|':>10s}"
    )
    for dtype in dtypes:
        for b, t, h, hkv, dh in shapes:
            for padded in (False, True):
                q, k, v, mask, gout = case(device, dtype, b, t, h, hkv, dh, padded)
                fns, full = contenders(q, k, v, mask)
                with torch.no_grad():
                    ref = fns["native"]().float()
                    m = full()  # rows that see no key: backends differ there (ours is 0 by contract); left out
                    seen = torch.ones(b, 1, t, 1, dtype=torch.bool, device=device) if m is None else m.any(-1, True)
                rows = {}
                for name, fn in fns.items():
                    with torch.no_grad():
                        diff = ((fn().float() - ref) * seen).abs().max().item()
                    peak = None
                    if cuda:
                        torch.cuda.empty_cache()
                        torch.cuda.reset_peak_memory_stats()
                        before = torch.cuda.memory_allocated()
                        out = fn()
                        out.backward(gout)
                        sync()
                        peak = (torch.cuda.max_memory_allocated() - before) / 2**20
                        del out
                    rows[name] = (backend_of(fn), peak, diff)

                def timed_step(fn, q=q, k=k, v=v, gout=gout):
                    def run():
                        q.grad = k.grad = v.grad = None
                        fn().backward(gout)
                        sync()

                    return run

                secs, ratios = rounds({n: timed_step(f) for n, f in fns.items()}, "native", args.rounds, repeat=3)
                for name in fns:
                    backend, peak, diff = rows[name]
                    print(
                        f"{str(dtype).split('.')[-1][:5]:5s} {b:2d} {t:5d} {h:3d} {hkv:3d} "
                        f"{'pad' if padded else 'causal':6s} {name:8s} {backend:18s} {secs[name] * 1e3:8.2f} "
                        f"{ratios[name]:8.2f} {'-' if peak is None else f'{peak:9.0f}':>9s} {diff:10.2e}",
                        flush=True,
                    )
                del q, k, v, mask, gout, fns
                if cuda:
                    torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
