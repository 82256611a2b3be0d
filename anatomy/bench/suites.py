"""The four comparisons of ``anatomy bench``: attention, train step, decode, memory.

Each suite returns a list of comparisons ``{"name", "setup", "unit", "reference", "results": {contender:
{"value", "ratio", ...}}}``. Timings (unit ``"s"``): ``value`` is the median over interleaved rounds, with ``min``
and ``max``, and ``ratio`` is ``value / value(reference)``, the medians divided (one convention: the printed columns
divide to it); the per-round ratios' spread is kept as ``round_ratio_min/median/max``. The reference is always
ours, so a peer's ratio above 1 means ours is faster (or, for bytes, smaller). Memory (unit ``"bytes"``) is
measured once per contender.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.bench.peers import LMSize, hf_gpt2, language_models, ours_lm
from anatomy.bench.timing import Options, peak_memory, sized_comparison, timed_comparison


@dataclass(frozen=True)
class Sizes:
    attn_batch: int
    attn_heads: int
    attn_head_dim: int
    attn_seqs: tuple[int, ...]
    lm: LMSize
    block_seq: int
    prompt: int
    new_tokens: int
    window: int
    cache_new: int


FULL = Sizes(
    attn_batch=4,
    attn_heads=8,
    attn_head_dim=64,
    attn_seqs=(128, 512),
    lm=LMSize(n_layers=4, n_heads=4, d_model=256, seq=256, batch=8, vocab=4096),
    block_seq=256,
    prompt=16,
    new_tokens=200,
    window=64,
    cache_new=1000,
)
QUICK = Sizes(
    attn_batch=2,
    attn_heads=2,
    attn_head_dim=8,
    attn_seqs=(16,),
    lm=LMSize(n_layers=2, n_heads=2, d_model=32, seq=16, batch=2, vocab=64),
    block_seq=16,
    prompt=4,
    new_tokens=8,
    window=4,
    cache_new=24,
)


# --------------------------------------------------------------------------------------------------- attention


class RawSDPA(nn.Module):
    """The floor: four Linears and one ``F.scaled_dot_product_attention`` call, nothing else."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k(x).view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v(x).view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, S, Dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal)  # (B, H, T, Dh)
        merged: torch.Tensor = self.o(out.transpose(1, 2).reshape(b, t, d))  # (B, T, D)
        return merged


def attention_contenders(s: Sizes, t: int, setting: str, backward: bool) -> dict[str, Any]:
    """One attention layer (B, T, D) under a causal mask or key padding (lengths T, 3T/4, T/2, T/4 cycling)."""
    from anatomy.components import MultiHeadAttention, attention_inputs
    from anatomy.components.masks import key_padding_to_attention, padding_mask, to_torch_nn

    b, h = s.attn_batch, s.attn_heads
    d = h * s.attn_head_dim
    torch.manual_seed(0)
    x = torch.randn(b, t, d, requires_grad=backward)
    lengths = torch.tensor([max(1, t * (4 - i % 4) // 4) for i in range(b)])
    keep = padding_mask(lengths, t)  # (B, S)
    causal = setting == "causal"
    ours_mask = None if causal else key_padding_to_attention(keep)  # (B, 1, 1, S)
    tri = torch.ones(t, t, dtype=torch.bool).tril()
    ours = MultiHeadAttention(d_model=d, n_heads=h, kernel="auto")
    ours_math = MultiHeadAttention(d_model=d, n_heads=h, kernel="math")
    raw = RawSDPA(d, h)
    mha = nn.MultiheadAttention(d, h, batch_first=True)

    def run(fn: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def go() -> None:
            if backward:
                fn().sum().backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
            else:
                with torch.no_grad():
                    fn()

        return go

    def torch_mha() -> torch.Tensor:
        if causal:
            out: torch.Tensor = mha(x, x, x, attn_mask=to_torch_nn(tri), is_causal=True, need_weights=False)[0]
        else:
            out = mha(x, x, x, key_padding_mask=to_torch_nn(keep), need_weights=False)[0]
        return out

    return {
        "ours": run(lambda: ours(x, attention_inputs(ours, x, mask=ours_mask, is_causal=causal))[0]),
        "ours kernel=math": run(
            lambda: ours_math(x, attention_inputs(ours_math, x, mask=ours_mask, is_causal=causal))[0]
        ),
        "raw sdpa (floor)": run(lambda: raw(x, ours_mask, causal)),
        "nn.MultiheadAttention": run(torch_mha),
    }


def attention(s: Sizes, opts: Options, status: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    out = []
    shape = f"B={s.attn_batch} H={s.attn_heads} Dh={s.attn_head_dim} float32"
    for t in s.attn_seqs:
        for setting in ("causal", "padded"):
            for backward in (False, True):
                what = "forward+backward" if backward else "forward"
                out.append(
                    timed_comparison(
                        f"attention T={t} {setting}, {what}", shape, attention_contenders(s, t, setting, backward), opts
                    )
                )
    return out


# --------------------------------------------------------------------------------------------------- train step


def _trainer(model: nn.Module, s: LMSize) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, s.vocab, (s.batch, s.seq), generator=torch.Generator().manual_seed(0))

    def step() -> None:
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def _steps(step: Callable[[], object], n: int) -> Callable[[], list[object]]:
    return lambda: [step() for _ in range(n)]


def _block_step(
    block: nn.Module, call: Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor], d: int, s: Sizes
) -> Callable[[], None]:
    opt = torch.optim.AdamW(block.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(s.lm.batch, s.block_seq, d, generator=g)
    memory = torch.randn(s.lm.batch, s.block_seq, d, generator=g)

    def step() -> None:
        call(block, x, memory).sum().backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def block_contenders(s: Sizes) -> dict[str, Any]:
    """One encoder-decoder block (causal self-attention, cross-attention, ReLU FFN, Post-LN, as in 2017):
    ours ``DecoderBlock`` against ``nn.TransformerDecoderLayer``, forward + backward + AdamW."""
    from anatomy.components.block import DecoderBlock

    d, h = s.lm.d_model, s.lm.n_heads
    torch.manual_seed(0)
    ours = DecoderBlock.build(
        d_model=d,
        n_heads=h,
        d_ff=4 * d,
        activation="relu",
        norm="layernorm",
        placement="post",
        dropout=0.0,
        kernel="sdpa",
    )
    peer = nn.TransformerDecoderLayer(d, h, dim_feedforward=4 * d, dropout=0.0, batch_first=True)
    tri = nn.Transformer.generate_square_subsequent_mask(s.block_seq)  # (T, T) float -inf above the diagonal
    return {
        "ours": _block_step(ours, lambda m, x, mem: m(x, mem)[0], d, s),  # a DecoderBlock is causal by default
        "nn.TransformerDecoderLayer": _block_step(
            peer, lambda m, x, mem: m(x, mem, tgt_mask=tri, tgt_is_causal=True), d, s
        ),
    }


def train_step(s: Sizes, opts: Options, status: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    models = language_models(s.lm, status, notes)
    tokens = s.lm.batch * s.lm.seq
    out = [
        timed_comparison(
            "LM train step (forward + backward + AdamW)",
            s.lm.describe(),
            {k: _trainer(m, s.lm) for k, m in models.items()},
            opts,
            work=tokens,
            work_unit="tokens/s",
        )
    ]
    ids = torch.randint(0, s.lm.vocab, (s.lm.batch, s.lm.seq), generator=torch.Generator().manual_seed(0))

    def forward(m: nn.Module) -> Callable[[], None]:
        def go() -> None:
            with torch.no_grad():
                m(input_ids=ids)

        return go

    out.append(
        timed_comparison(
            "LM forward (no grad)",
            s.lm.describe(),
            {k: forward(m) for k, m in models.items()},
            opts,
            work=tokens,
            work_unit="tokens/s",
        )
    )
    out.append(
        timed_comparison(
            "decoder block step (forward + backward + AdamW)",
            f"d {s.lm.d_model}, {s.lm.n_heads} heads, T {s.block_seq}, batch {s.lm.batch}, Post-LN, ReLU",
            block_contenders(s),
            opts,
            work=s.lm.batch * s.block_seq,
            work_unit="tokens/s",
        )
    )
    return out


# --------------------------------------------------------------------------------------------------- decode


def decode(s: Sizes, opts: Options, status: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    from anatomy.generation import generate

    torch.manual_seed(0)
    mine = ours_lm(s.lm).eval()
    prompt = torch.randint(0, s.lm.vocab, (1, s.prompt), generator=torch.Generator().manual_seed(0))
    n = s.new_tokens
    contenders: dict[str, Callable[[], torch.Tensor]] = {
        "ours": lambda: generate(mine, prompt, max_new_tokens=n),
        "ours fast=False": lambda: generate(mine, prompt, max_new_tokens=n, fast=False),
    }
    if status["transformers"]["installed"]:
        torch.manual_seed(0)
        hf = hf_gpt2(s.lm).eval()
        mask = torch.ones_like(prompt)

        def hf_generate() -> torch.Tensor:
            with torch.inference_mode():
                return hf.generate(  # type: ignore[no-any-return, operator]  # an HF model's generate
                    prompt,
                    attention_mask=mask,
                    max_new_tokens=n,
                    min_new_tokens=n,
                    do_sample=False,
                    pad_token_id=0,
                    eos_token_id=None,
                )

        contenders["hf_gpt2 generate"] = hf_generate
    for name, fn in contenders.items():  # every contender emits exactly n tokens (no EOS)
        if fn().shape[1] != s.prompt + n:
            raise RuntimeError(f"decode: {name} did not emit {n} new tokens")
    if status["x_transformers"]["installed"]:
        notes.append("x_transformers is not in the decode comparison (its sampler wrapper is a different loop)")
    with torch.inference_mode():
        return [
            timed_comparison(
                f"greedy decode, batch 1, prompt {s.prompt}, {n} new tokens",
                s.lm.design(),
                contenders,
                opts,
                work=n,
                work_unit="new tokens/s",
            )
        ]


# --------------------------------------------------------------------------------------------------- memory


def _cache_bytes(cache: object) -> int:
    """Bytes held by one of our KVCaches (its buffers when buffered) or by an HF cache layer (keys, values)."""
    held = [getattr(cache, n, None) for n in ("_k_buf", "_v_buf", "_pos_buf")]
    if all(t is None for t in held):
        held = [getattr(cache, n, None) for n in ("k", "v", "positions", "keys", "values")]
    return sum(t.numel() * t.element_size() for t in held if isinstance(t, torch.Tensor))


def _ours_cache_bytes(model: nn.Module, prompt: torch.Tensor, new: int) -> int:
    caches = model.new_caches(capacity=prompt.shape[1] + new)  # type: ignore[operator]  # a DecoderLM
    with torch.inference_mode():
        logits = model(prompt, kv_caches=caches, use_cache=True).logits[:, -1]
        for _ in range(new):
            logits = model(logits.argmax(-1, keepdim=True), kv_caches=caches, use_cache=True).logits[:, -1]
    return sum(_cache_bytes(c) for c in caches)


def _hf_cache_bytes(model: nn.Module, ids: torch.Tensor) -> int | None:
    with torch.inference_mode():
        out = model(ids, use_cache=True)
    cache = getattr(out, "cache", None) or out.past_key_values
    layers = getattr(cache, "layers", None)
    if layers is None:  # older transformers: a tuple of (k, v) per layer
        try:
            held: int = sum(t.numel() * t.element_size() for layer in cache for t in layer)
            return held
        except TypeError:
            return None
    return sum(_cache_bytes(layer) for layer in layers)


def memory(s: Sizes, opts: Options, status: dict[str, Any], notes: list[str]) -> list[dict[str, Any]]:
    out = []
    models = language_models(s.lm, status, notes)
    out.append(
        sized_comparison(
            "peak memory of 3 LM train steps",
            s.lm.describe(),
            {k: peak_memory(_steps(_trainer(m, s.lm), 3)) for k, m in models.items()},
        )
    )
    t = s.attn_seqs[-1]
    fns = attention_contenders(s, t, "causal", backward=True)
    out.append(
        sized_comparison(
            f"peak memory of attention forward+backward, T={t} causal",
            f"B={s.attn_batch} H={s.attn_heads} Dh={s.attn_head_dim} float32",
            {k: peak_memory(fn) for k, fn in fns.items()},
        )
    )
    total = s.prompt + s.cache_new
    torch.manual_seed(0)
    full = ours_lm(LMSize(**{**vars(s.lm), "seq": total})).eval()
    windowed = ours_lm(LMSize(**{**vars(s.lm), "seq": total}), sliding_window=s.window).eval()
    prompt = torch.randint(0, s.lm.vocab, (1, s.prompt), generator=torch.Generator().manual_seed(0))
    held = {"ours": _ours_cache_bytes(full, prompt, s.cache_new)}
    held[f"ours sliding_window={s.window}"] = _ours_cache_bytes(windowed, prompt, s.cache_new)
    if "hf_gpt2" in models:
        hf = hf_gpt2(LMSize(**{**vars(s.lm), "seq": total})).eval()
        ids = torch.randint(0, s.lm.vocab, (1, total), generator=torch.Generator().manual_seed(0))
        got = _hf_cache_bytes(hf, ids)
        if got is None:
            notes.append("hf_gpt2 KV-cache bytes: this transformers version's cache could not be read")
        else:
            held["hf_gpt2"] = got
    out.append(
        sized_comparison(
            f"KV-cache bytes after a {s.prompt}-token prompt and {s.cache_new} new tokens",
            s.lm.design() + ", batch 1 (ours: k, v and positions; HF: k and v)",
            held,
        )
    )
    return out


SUITES = {"attention": attention, "train_step": train_step, "decode": decode, "memory": memory}
