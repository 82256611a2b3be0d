"""Training and inference speed of our DecoderLM against a bare GPT with the same arithmetic and against the
bare GPT in nanoGPT's configuration (benchmarks/bare_gpt.py), at the claims lab's sizes and at the benchmark
size; each speed lever of ours switched off in turn; peak memory; bf16 autocast beside fp32 with the loss curves.

    GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
        python benchmarks/train_step.py [--rounds 7] [--repeat 2] [--threads 2] [--bf16-steps 60] [--sizes all]

Contenders (every one starts from the same weights, checked to give the same logits before anything is timed):

``ours``         DecoderLM, gpt2 preset (learned positions, Pre-LN, fused QKV, GELU-tanh), no bias, no dropout,
                 tied embeddings, the AdamW of ``anatomy train`` (anatomy.training.loop.make_optimizer: fused)
``bare``         the same arithmetic written plainly (no checks, no hooks), ``torch.optim.AdamW`` as is
``ours_exact``   ours with exact GELU: nanoGPT's arithmetic
``nanogpt``      the bare GPT in nanoGPT's configuration (fused c_attn, SDPA is_causal, LayerNorm without bias,
                 exact GELU, tied), targets shifted by the data loader, nanoGPT's AdamW (decay groups, not fused
                 on CPU: its model.py asks for fused only on CUDA)

At the benchmark size, Hugging Face GPT-2 (sdpa) and x-transformers (flash) join when installed (their own
weights, plain AdamW). Sizes: the claims lab's tiny models (one thread, as the lab runs them) and the benchmark
size: 4 layers, 4 heads, d 256, d_ff 1024, T 256, batch 8, vocab 4096 (``--threads``, default 2). A train step
is forward + loss + backward + AdamW step + zero_grad; inference is a full-sequence forward without grad.
Contenders run in interleaved rounds (rotating order), best of ``--repeat`` calls per round; a ratio is the
median of the per-round ratios.
Targets (issue 14): ours / bare <= 1.05 (time); ours_exact vs nanogpt >= 1.10 (tokens/s).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import environment, peak_memory, timed  # noqa: E402
from bare_gpt import BareGPT, shifted_targets  # noqa: E402

from anatomy import ModelConfig, build_model  # noqa: E402
from anatomy.models import lm as lm_module  # noqa: E402
from anatomy.training.fused_loss import lm_linear_cross_entropy  # noqa: E402
from anatomy.training.loop import make_optimizer  # noqa: E402
from anatomy.training.options import TrainOptions  # noqa: E402

L, H, D, T, B, V = 4, 4, 256, 256, 8, 4096
# name: (layers, heads, d_model, T, batch, vocab, threads); threads None = --threads
SIZES = {
    "lab d32 L2": (2, 4, 32, 64, 32, 64, 1),
    "lab d64 L6": (6, 4, 64, 64, 32, 64, 1),
    "lab d128 L12": (12, 4, 128, 64, 16, 256, 1),
    "benchmark": (L, H, D, T, B, V, None),
}


def ours(
    d: int = D,
    v: int = V,
    *,
    layers: int = L,
    heads: int = H,
    t: int = T,
    activation: str = "gelu_tanh",
    bias: bool = False,
) -> torch.nn.Module:
    config = ModelConfig.from_preset(
        "gpt2",
        n_layers=layers,
        n_heads=heads,
        d_model=d,
        d_ff=4 * d,
        vocab_size=v,
        max_seq_len=t,
        dropout=0.0,
        attention_dropout=0.0,
        kernel="sdpa",
        activation=activation,
        bias=bias,
    )
    return build_model(config)


def hf_gpt2(d: int = D, v: int = V) -> torch.nn.Module | None:
    """Hugging Face GPT-2 (sdpa) at the benchmark size (used by benchmarks/decode.py)."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        return None
    config = GPT2Config(
        vocab_size=v,
        n_positions=T,
        n_embd=d,
        n_layer=L,
        n_head=H,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel._from_config(config, attn_implementation="sdpa")
    assert model.config._attn_implementation == "sdpa"
    return model


class XTransformersLM(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input_ids, labels=None):
        logits = self.net(input_ids)  # (B, T, V)
        loss = (
            None
            if labels is None
            else torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        )  # next-token targets (B*(T-1),)
        return type("Out", (), {"loss": loss, "logits": logits})


def x_transformers() -> torch.nn.Module | None:
    try:
        from x_transformers import Decoder, TransformerWrapper
    except ImportError:
        return None
    net = TransformerWrapper(
        num_tokens=V, max_seq_len=T, tie_embedding=True, attn_layers=Decoder(dim=D, depth=L, heads=H, attn_flash=True)
    )
    return XTransformersLM(net)


def peers() -> dict[str, tuple[torch.nn.Module, object, str]]:
    """Installed libraries at the benchmark size (their own weights; plain AdamW), beside the bare references."""
    out = {}
    for name, make in (("hf_gpt2_sdpa", hf_gpt2), ("x_transformers", x_transformers)):
        model = make()
        if model is not None:
            out[name] = (model, lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4), "labels")
        else:
            print(f"  {name}: not installed, skipped")
    return out


def our_optimizer(model):
    return make_optimizer(model, TrainOptions(lr=1e-4, weight_decay=0.1), torch.device("cpu"))


def nanogpt_optimizer(model):
    """nanoGPT's configure_optimizers on CPU: decay on >= 2-D tensors, AdamW not fused (fused only on CUDA)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.99))


def contenders(size: tuple) -> dict[str, tuple[torch.nn.Module, object, str]]:
    """name → (model, optimizer factory, loss input: "labels" or "targets"), all from one set of weights."""
    layers, heads, d, t, _, v, _ = size
    torch.manual_seed(0)
    mine = ours(d, v, layers=layers, heads=heads, t=t)
    exact = ours(d, v, layers=layers, heads=heads, t=t, activation="gelu")
    exact.load_state_dict(mine.state_dict())
    bare = BareGPT(vocab=v, d=d, h=heads, layers=layers, d_ff=4 * d, max_len=t, gelu="tanh").load_from(mine)
    nano = BareGPT(vocab=v, d=d, h=heads, layers=layers, d_ff=4 * d, max_len=t, design="nanogpt").load_from(mine)
    return {
        "ours": (mine, our_optimizer, "labels"),
        "bare": (
            bare,
            lambda m: torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.99)),
            "labels",
        ),
        "ours_exact": (exact, our_optimizer, "labels"),
        "nanogpt": (nano, nanogpt_optimizer, "targets"),
    }


def batch(size: tuple) -> torch.Tensor:
    _, _, _, t, b, v, _ = size
    return torch.randint(0, v, (b, t), generator=torch.Generator().manual_seed(0))


def trainer(model, make_opt, kind: str, ids: torch.Tensor, precision: str = "fp32"):
    opt = make_opt(model)
    kwargs = {"labels": ids} if kind == "labels" else {"targets": shifted_targets(ids)}  # the loader's work

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = model(input_ids=ids, **kwargs).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def inferer(model, ids: torch.Tensor):
    def forward():
        with torch.no_grad():
            return model(input_ids=ids).logits

    return forward


def interleaved(fns: dict[str, object], n_rounds: int, repeat: int) -> dict[str, list[float]]:
    """Seconds per round per contender (best of ``repeat`` calls), contenders in a rotating order."""
    names = list(fns)
    for fn in fns.values():  # warm-up
        fn()
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(n_rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(timed(fns[n], repeat))
    return times


def ratio(times: dict[str, list[float]], a: str, b: str) -> float:
    """Median over rounds of time(a) / time(b)."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def check_same_function(models: dict, ids: torch.Tensor) -> None:
    with torch.no_grad():
        ref = models["ours"][0](input_ids=ids).logits
        assert torch.allclose(models["bare"][0](input_ids=ids).logits, ref, atol=1e-5), "bare != ours"
        nano = models["nanogpt"][0](input_ids=ids).logits
        assert torch.allclose(models["ours_exact"][0](input_ids=ids).logits, nano, atol=1e-5), "ours_exact != nano"
        losses = {
            k: m(
                input_ids=ids, **({"labels": ids} if kind == "labels" else {"targets": shifted_targets(ids)})
            ).loss.item()
            for k, (m, _, kind) in models.items()
        }
    assert abs(losses["ours"] - losses["bare"]) < 1e-4 and abs(losses["ours_exact"] - losses["nanogpt"]) < 1e-4


def compare(name: str, size: tuple, args) -> None:
    threads = size[6] or args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    models = contenders(size)
    ids = batch(size)
    check_same_function(models, ids)
    if name == "benchmark":
        models.update(peers())
    tokens = ids.numel()
    print(
        f"\n== {name}: {size[0]} layers, {size[1]} heads, d {size[2]}, T {size[3]}, batch {size[4]}, "
        f"vocab {size[5]}, {threads} thread(s); {sum(p.numel() for p in models['ours'][0].parameters()):,} "
        "parameters; same logits checked"
    )
    train = interleaved({k: trainer(m, o, kind, ids) for k, (m, o, kind) in models.items()}, args.rounds, args.repeat)
    infer = interleaved({k: inferer(m, ids) for k, (m, _, _) in models.items()}, args.rounds, args.repeat)
    for what, times in (("train step", train), ("inference", infer)):
        speed = {k: tokens / statistics.median(v) for k, v in times.items()}
        print(
            f"  {what:10s} ours/bare time {ratio(times, 'ours', 'bare'):5.3f} (target <= 1.05)   "
            f"ours_exact vs nanogpt tokens/s {ratio(times, 'nanogpt', 'ours_exact'):5.3f} (target >= 1.10)"
        )
        print(
            "             tokens/s "
            + "  ".join(f"{k} {s:,.0f}" for k, s in speed.items())
            + "   time / ours "
            + "  ".join(f"{k} {ratio(times, k, 'ours'):.3f}" for k in times if k != "ours")
        )
    if args.memory:
        mem = {}
        for k, (m, o, kind) in models.items():
            if k not in ("ours", "bare", "ours_exact", "nanogpt"):
                continue
            step = trainer(m, o, kind, ids)
            mem[k] = peak_memory(lambda s=step: [s() for _ in range(3)])
        print(
            f"  peak memory of 3 train steps: ours/bare {mem['ours'] / mem['bare']:5.3f}   ours_exact/nanogpt "
            f"{mem['ours_exact'] / mem['nanogpt']:5.3f}   "
            + "  ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in mem.items())
        )


def _old_lm_loss(logits, labels):
    """The loss before the lever: the logits of every position but the last copied into a new tensor."""
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), labels[:, 1:].flatten(), ignore_index=-100
    )


class FusedHeadLM(torch.nn.Module):
    """Ours with the output head and the loss fused (anatomy.training.fused_loss): the model's head replaced by
    the identity, so its "logits" are the final hidden states, and the loss computed from them and the tied weight
    chunk by chunk. Prototyped here (the wiring belongs in DecoderLM.forward); same loss to round-off."""

    def __init__(self, model: torch.nn.Module, chunk: int = 256) -> None:
        super().__init__()
        self.weight = model.lm_head.weight  # tied: the embedding's parameter
        model.lm_head = torch.nn.Identity()
        self.model, self.chunk = model, chunk

    def forward(self, input_ids, labels=None):
        hidden = self.model(input_ids=input_ids).logits  # (B, T, D): the head is the identity
        if labels is None:
            return type("Out", (), {"loss": None, "logits": hidden @ self.weight.t()})  # (B, T, V)
        loss = lm_linear_cross_entropy(hidden, self.weight, labels, chunk=self.chunk)
        return type("Out", (), {"loss": loss, "logits": None})


def levers(name: str, size: tuple, args) -> None:
    """Each lever switched off alone, against ours with all of them: time without / time with (> 1: it helps)."""
    threads = size[6] or args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    layers, heads, d, t, _, v, _ = size
    ids = batch(size)
    torch.manual_seed(0)
    base = ours(d, v, layers=layers, heads=heads, t=t)

    def twin(unmirror: bool = False):
        m = ours(d, v, layers=layers, heads=heads, t=t)
        m.load_state_dict(base.state_dict())
        if unmirror:  # submodules found through nn.Module.__getattr__ again
            for mod in m.modules():
                for key in list(mod._modules):
                    mod.__dict__.pop(key, None)
        return m

    def plain_adamw(m):
        return torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.99))

    with_all = trainer(twin(), our_optimizer, "labels", ids)
    no_fused = trainer(twin(), plain_adamw, "labels", ids)
    no_mirror = trainer(twin(unmirror=True), our_optimizer, "labels", ids)
    old_loss_model = twin()
    old_step = trainer(old_loss_model, our_optimizer, "labels", ids)

    def no_loss_lever():
        lm_module.lm_loss, saved = _old_lm_loss, lm_module.lm_loss
        try:
            return old_step()
        finally:
            lm_module.lm_loss = saved

    fused = FusedHeadLM(twin())
    with torch.no_grad():
        exact = twin()(input_ids=ids, labels=ids).loss.item()
        assert abs(fused(input_ids=ids, labels=ids).loss.item() - exact) < 1e-5, "the fused loss differs"
    fused_step = trainer(fused, lambda m: our_optimizer(m.model), "labels", ids)
    times = interleaved(
        {"all": with_all, "adamw": no_fused, "mirror": no_mirror, "loss": no_loss_lever, "fused_head": fused_step},
        args.rounds,
        args.repeat,
    )
    fwd = interleaved(
        {"all": inferer(twin(), ids), "mirror": inferer(twin(unmirror=True), ids)}, args.rounds, args.repeat
    )
    print(
        f"  levers at {name} (time without / with, train step): fused AdamW {ratio(times, 'adamw', 'all'):5.3f}   "
        f"loss without the logits copy {ratio(times, 'loss', 'all'):5.3f}   submodules as plain attributes "
        f"{ratio(times, 'mirror', 'all'):5.3f} (inference {ratio(fwd, 'mirror', 'all'):5.3f})"
    )
    mem = {
        k: peak_memory(lambda s=step: [s() for _ in range(3)])
        for k, step in (("all", with_all), ("fused_head", fused_step))
    }
    print(
        f"  a lever tried, not in: head + loss fused, chunks of 256 rows (time without / with) "
        f"{ratio(times, 'all', 'fused_head'):5.3f}; peak memory of 3 steps {mem['all'] / 2**20:.1f} -> "
        f"{mem['fused_head'] / 2**20:.1f} MiB"
    )


def compiled(name: str, size: tuple, args) -> None:
    """torch.compile (inductor, default mode) of ours_exact and of the nanoGPT-style bare, beside their eager
    selves: the compiled ratio is the honest one when both sides compile. Compile time printed."""
    threads = size[6] or args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    models = contenders(size)
    ids = batch(size)
    tokens = ids.numel()
    train, infer, took = {}, {}, {}
    for k in ("ours_exact", "nanogpt"):
        m, o, kind = models[k]
        train[k], infer[k] = trainer(m, o, kind, ids), inferer(m, ids)
        twin = contenders(size)[k][0]
        twin.load_state_dict(m.state_dict())
        c = torch.compile(twin)
        train[k + "_compiled"], infer[k + "_compiled"] = trainer(c, o, kind, ids), inferer(c, ids)
        t0 = time.perf_counter()
        train[k + "_compiled"]()
        infer[k + "_compiled"]()
        took[k] = time.perf_counter() - t0
    tr = interleaved(train, args.rounds, args.repeat)
    inf = interleaved(infer, args.rounds, args.repeat)
    print(
        f"  torch.compile at {name} ({threads} thread(s)); compile time (first train step + first forward): "
        + ", ".join(f"{k} {v:.0f} s" for k, v in took.items())
    )
    for what, times in (("train step", tr), ("inference", inf)):
        print(
            f"    {what:10s} tokens/s "
            + "  ".join(f"{k} {tokens / statistics.median(v):,.0f}" for k, v in times.items())
        )
        print(
            f"               compiled vs eager: ours_exact {ratio(times, 'ours_exact', 'ours_exact_compiled'):5.3f}"
            f"  nanogpt {ratio(times, 'nanogpt', 'nanogpt_compiled'):5.3f};  ours_exact vs nanogpt: both "
            f"compiled {ratio(times, 'nanogpt_compiled', 'ours_exact_compiled'):5.3f}, ours compiled vs "
            f"nanogpt eager {ratio(times, 'nanogpt', 'ours_exact_compiled'):5.3f}"
        )


def bf16_curves(steps: int, threads: int | None) -> None:
    """fp32 vs bf16 autocast: the same init and batches; time per step and the loss curves side by side."""
    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    a = ours()
    b = ours()
    b.load_state_dict(a.state_dict())
    data = torch.randint(0, 64, (steps, B, T), generator=torch.Generator().manual_seed(1))  # a learnable task
    result = {}
    for name, model, precision in (("fp32", a, "fp32"), ("bf16", b, "bf16")):
        opt = our_optimizer(model)
        losses, t0 = [], time.perf_counter()
        for i in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
                loss = model(input_ids=data[i], labels=data[i]).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        result[name] = (time.perf_counter() - t0, losses)
    print(
        f"\nbf16 autocast vs fp32 at the benchmark size, {steps} steps: "
        f"{result['fp32'][0] / result['bf16'][0]:.2f}x speed (not exact: a separate result)"
    )
    print("  step   fp32 loss   bf16 loss")
    for i in range(0, steps, max(1, steps // 10)):
        print(f"  {i + 1:4d}   {result['fp32'][1][i]:9.4f}   {result['bf16'][1][i]:9.4f}")
    print(f"  {steps:4d}   {result['fp32'][1][-1]:9.4f}   {result['bf16'][1][-1]:9.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2, help="threads at the benchmark size (the lab: 1)")
    parser.add_argument("--bf16-steps", type=int, default=60)
    parser.add_argument("--sizes", default="all", help=f"comma-separated among {', '.join(SIZES)} (default all)")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory pass")
    parser.add_argument("--no-levers", dest="levers", action="store_false", help="skip the per-lever pass")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="also torch.compile ours_exact and nanogpt (inductor; minutes of compiling on a CPU)",
    )
    args = parser.parse_args()
    chosen = list(SIZES) if args.sizes == "all" else [s.strip() for s in args.sizes.split(",")]
    unknown = [s for s in chosen if s not in SIZES]
    if unknown:
        parser.error(f"--sizes: unknown {unknown}; valid: {', '.join(SIZES)}")
    print(environment() + f"; rounds {args.rounds}, best of {args.repeat} per round")
    for name in chosen:
        compare(name, SIZES[name], args)
        if args.levers and name in ("lab d32 L2", "benchmark"):
            levers(name, SIZES[name], args)
        if args.compile:
            compiled(name, SIZES[name], args)
    if args.bf16_steps:
        bf16_curves(args.bf16_steps, args.threads)


if __name__ == "__main__":
    main()
