"""Training (and inference) speed of our DecoderLM against Hugging Face GPT-2 (sdpa) and, when installed,
x-transformers, at one size; MFU against the matmul peak measured in the same run (benchmarks/gemm.py).

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/train_step.py [--rounds 5] [--threads 2] [--bf16-steps 60]

Size: 4 layers, 4 heads, d 256, T 256, batch 8, vocab 4096 (GPT-2's design: learned positions, Pre-LN, GELU-tanh,
tied embeddings). A training step is forward + backward + AdamW. Contenders are interleaved in rounds; the
report quotes median ratios to ours (time_peer / time_ours > 1 means we are faster). Also: peak memory of three
train steps, inference (full-sequence forward, no grad), and ``precision=bf16`` autocast against fp32 with both
loss curves side by side on the same batches.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, peak_memory, rounds  # noqa: E402
from gemm import peak_flops  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402

L, H, D, T, B, V = 4, 4, 256, 256, 8, 4096


def ours(d: int = D, v: int = V) -> torch.nn.Module:
    config = ModelConfig.from_preset("gpt2", n_layers=L, n_heads=H, d_model=d, d_ff=4 * d, vocab_size=v,
                                     max_seq_len=T, dropout=0.0, attention_dropout=0.0, kernel="sdpa")
    return build_model(config)


def hf_gpt2(d: int = D, v: int = V) -> torch.nn.Module | None:
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    config = GPT2Config(vocab_size=v, n_positions=T, n_embd=d, n_layer=L, n_head=H, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    return model


class XTransformersLM(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, labels=None):
        logits = self.net(input_ids)  # (B, T, V)
        loss = None if labels is None else torch.nn.functional.cross_entropy(
            logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())  # next-token targets (B*(T-1),)
        return type("Out", (), {"loss": loss, "logits": logits})


def x_transformers() -> torch.nn.Module | None:
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    net = TransformerWrapper(num_tokens=V, max_seq_len=T, tie_embedding=True,
                             attn_layers=Decoder(dim=D, depth=L, heads=H, attn_flash=True))
    return XTransformersLM(net)


def non_embedding_params(model: torch.nn.Module) -> int:
    embeds = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeds)


def train_flops_per_step(model: torch.nn.Module) -> float:
    """6·N per token for the matmuls with parameters (N excludes embeddings, includes the tied LM head once) +
    12·L·T·D per token for attention scores and values (PaLM's appendix B accounting)."""
    n = non_embedding_params(model) + V * D  # the (tied) output projection is a matmul too
    return B * T * (6 * n + 12 * L * T * D)


def trainer(model, precision="fp32"):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss
    return step


def inferer(model):
    ids = torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(0))

    def forward():
        with torch.no_grad():
            return model(input_ids=ids).logits
    return forward


def bf16_curves(steps: int) -> None:
    """fp32 vs bf16 autocast: the same init and batches; time per step and the loss curves side by side."""
    torch.manual_seed(0)
    a = ours()
    b = ours()
    b.load_state_dict(a.state_dict())
    data = torch.randint(0, 64, (steps, B, T), generator=torch.Generator().manual_seed(1))  # a learnable task
    result = {}
    for name, model, precision in (("fp32", a, "fp32"), ("bf16", b, "bf16")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses, t0 = [], time.perf_counter()
        for i in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(input_ids=data[i], labels=data[i]).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        result[name] = (time.perf_counter() - t0, losses)
    print(f"\nbf16 autocast vs fp32, {steps} steps: {result['fp32'][0] / result['bf16'][0]:.2f}x speed")
    print("  step   fp32 loss   bf16 loss")
    for i in range(0, steps, max(1, steps // 10)):
        print(f"  {i + 1:4d}   {result['fp32'][1][i]:9.4f}   {result['bf16'][1][i]:9.4f}")
    print(f"  {steps:4d}   {result['fp32'][1][-1]:9.4f}   {result['bf16'][1][-1]:9.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--bf16-steps", type=int, default=60)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(environment())
    torch.manual_seed(0)
    models = {"ours": ours(), "hf_gpt2_sdpa": hf_gpt2(), "x_transformers": x_transformers()}
    missing = [k for k, v in models.items() if v is None]
    models = {k: v for k, v in models.items() if v is not None}
    if missing:
        print(f"not installed, skipped: {', '.join(missing)}")
    for name, m in models.items():
        print(f"{name:15s} {sum(p.numel() for p in m.parameters()):>10,d} parameters")

    peak = peak_flops(torch.float32)
    print(f"fp32 matmul peak (2048^3): {peak / 1e9:.1f} GFLOP/s")
    steps = {k: trainer(m) for k, m in models.items()}
    seconds, ratios = rounds(steps, "ours", args.rounds, args.repeat)
    flops = train_flops_per_step(models["ours"])
    print(f"\ntraining step (B={B}, T={T}): median over {args.rounds} interleaved rounds")
    for k in models:
        print(f"  {k:15s} {B * T / seconds[k]:10,.0f} tokens/s   time / ours {ratios[k]:5.2f}   "
              f"MFU {train_flops_per_step(models[k]) / seconds[k] / peak:6.1%}")
    print(f"  ours: {flops / 1e9:.1f} GFLOP per step")

    fwd = {k: inferer(m) for k, m in models.items()}
    seconds, ratios = rounds(fwd, "ours", args.rounds, args.repeat)
    print("\ninference (full-sequence forward, no grad)")
    for k in models:
        print(f"  {k:15s} {B * T / seconds[k]:10,.0f} tokens/s   time / ours {ratios[k]:5.2f}   "
              f"MFU {train_flops_per_step(models[k]) / 3 / seconds[k] / peak:6.1%}")

    print("\npeak memory of 3 train steps")
    for k, m in models.items():
        step = trainer(m)
        print(f"  {k:15s} {peak_memory(lambda s=step: [s() for _ in range(3)]) / 2**20:8.1f} MiB")

    if args.bf16_steps:
        bf16_curves(args.bf16_steps)


if __name__ == "__main__":
    main()
