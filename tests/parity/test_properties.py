"""Properties every correct Transformer has, checked on random small cases (Hypothesis, float64).

1. causality of decoder-only LMs          5. the sinusoidal shift law PE(p + k) = M(k) PE(p)
2. padding invariance (left and right)     6. RoPE scores depend only on the offset s - p
3. batch invariance                        7. KV-cache decoding equals the full forward
4. permutation equivariance without PE     8. the attention kernels agree (forward and backward)

Models are tiny and built with a larger ``init_std`` than the presets so that every path carries signal: a
leak of one position into another shows up far above float64 rounding.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import anatomy
from anatomy.components import MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import causal_mask, combine, padding_mask
from anatomy.components.positional import (
    ALiBiPositional,
    RotaryPositional,
    ShawRelativePositional,
    T5RelativeBias,
    sinusoidal_table,
)

VOCAB = 23
SCHEMES = ("none", "sinusoidal", "learned", "rope", "alibi", "shaw", "t5")
EXACT = 1e-12  # "the same computation": only float64 rounding of differently batched matmuls
CLOSE = 1e-10  # the same function computed another way (kernel, cache, padding)


@cache
def model(
    architecture: str,
    positional: str = "none",
    *,
    kernel: str = "auto",
    n_heads: int = 2,
    n_kv_heads: int | None = None,
    d_model: int = 8,
    n_layers: int = 2,
    pooling: str = "cls",
    fused_qkv: bool = False,
    seed: int = 0,
) -> torch.nn.Module:
    """A tiny float64 model in eval mode, cached (tests only run it forward, under no_grad)."""
    config = anatomy.ModelConfig(
        architecture=architecture,
        vocab_size=VOCAB,
        d_model=d_model,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        n_layers=n_layers,
        d_ff=2 * d_model,
        max_seq_len=64,
        positional=positional,
        kernel=kernel,
        dropout=0.0,
        init_std=0.3,
        pooling=pooling,
        max_relative_distance=4,
        t5_num_buckets=8,
        t5_max_distance=16,
        fused_qkv=fused_qkv,
    )
    torch.manual_seed(seed)
    return anatomy.build_model(config).double().eval()


def kernel_for(positional: str, kernel: str) -> str:
    return "auto" if positional == "shaw" and kernel == "sdpa" else kernel


def run(m: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The per-token (or per-sequence) output of any architecture."""
    with torch.no_grad():
        if isinstance(m, anatomy.models.Seq2Seq):
            return m(ids, mask, decoder_input_ids=ids, decoder_attention_mask=mask).logits
        out = m(ids, mask)
    return out.last_hidden_state if isinstance(m, anatomy.models.Encoder) else out.logits


def ids_from(seed: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    assert a.shape == b.shape, (a.shape, b.shape)
    return 0.0 if a.numel() == 0 else float((a - b).abs().max().detach())


seeds = st.integers(0, 2**31 - 1)
kernels = st.sampled_from(["auto", "math", "loop", "sdpa"])


# 1. causality ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("positional", SCHEMES)
@given(b=st.integers(1, 3), t=st.integers(2, 9), data=st.data(), seed=seeds, kernel=kernels)
def test_decoder_lm_is_causal(positional, b, t, data, seed, kernel):
    m = model("decoder_lm", positional, kernel=kernel_for(positional, kernel))
    j = data.draw(st.integers(0, t - 1), label="changed position")
    ids = ids_from(seed, b, t)
    changed = ids.clone()
    changed[:, j] = (ids[:, j] + data.draw(st.integers(1, VOCAB - 1), label="delta")) % VOCAB
    before, after = run(m, ids), run(m, changed)
    assert max_diff(before[:, :j], after[:, :j]) <= EXACT, f"token {j} leaked into earlier positions"
    assert max_diff(before[:, j], after[:, j]) > 1e-6  # the change itself is visible: the check has teeth


# 2. padding invariance -------------------------------------------------------------------------------------------
def padded_batch(seqs: list[torch.Tensor], side: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad with *random* tokens (not a pad id), so only the mask can hide them."""
    t = max(len(s) for s in seqs)
    ids = ids_from(seed + 1, len(seqs), t)
    mask = torch.zeros(len(seqs), t, dtype=torch.long)
    for i, s in enumerate(seqs):
        where = slice(0, len(s)) if side == "right" else slice(t - len(s), t)
        ids[i, where], mask[i, where] = s, 1
    return ids, mask


def real(out: torch.Tensor, mask: torch.Tensor, i: int) -> torch.Tensor:
    return out[i][mask[i].bool()]


padded_cases = dict(
    lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    seed=seeds,
    side=st.sampled_from(["left", "right"]),
    kernel=kernels,
)


@pytest.mark.parametrize("positional", SCHEMES)
@given(**padded_cases)
def test_decoder_lm_padding_invariance(positional, lengths, seed, side, kernel):
    m = model("decoder_lm", positional, kernel=kernel_for(positional, kernel))
    seqs = [ids_from(seed + i, 1, n)[0] for i, n in enumerate(lengths)]
    ids, mask = padded_batch(seqs, side, seed)
    out = run(m, ids, mask)
    for i, s in enumerate(seqs):
        assert max_diff(real(out, mask, i), run(m, s[None])[0]) <= CLOSE, f"row {i} ({side} padding)"


@pytest.mark.parametrize("positional", SCHEMES)
@given(**padded_cases)
def test_encoder_padding_invariance(positional, lengths, seed, side, kernel):
    m = model("encoder", positional, kernel=kernel_for(positional, kernel))
    seqs = [ids_from(seed + i, 1, n)[0] for i, n in enumerate(lengths)]
    ids, mask = padded_batch(seqs, side, seed)
    out = run(m, ids, mask)
    for i, s in enumerate(seqs):
        assert max_diff(real(out, mask, i), run(m, s[None])[0]) <= CLOSE, f"row {i} ({side} padding)"


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("positional", ["none", "learned", "rope", "t5"])
@given(**padded_cases)
def test_classifier_padding_invariance(pooling, positional, lengths, seed, side, kernel):
    m = model("classifier", positional, kernel=kernel_for(positional, kernel), pooling=pooling)
    seqs = [ids_from(seed + i, 1, n)[0] for i, n in enumerate(lengths)]
    ids, mask = padded_batch(seqs, side, seed)
    out = run(m, ids, mask)
    for i, s in enumerate(seqs):
        assert max_diff(out[i], run(m, s[None])[0]) <= CLOSE, f"row {i} ({side} padding, {pooling} pooling)"


# 3. batch invariance ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("architecture", ["decoder_lm", "encoder", "classifier", "seq2seq"])
@given(
    b=st.integers(2, 3),
    t=st.integers(1, 9),
    seed=seeds,
    positional=st.sampled_from(SCHEMES),
    padded=st.booleans(),
    kernel=kernels,
)
def test_batch_rows_are_independent(architecture, b, t, seed, positional, padded, kernel):
    m = model(architecture, positional, kernel=kernel_for(positional, kernel))
    ids = ids_from(seed, b, t)
    mask = None
    if padded:
        lengths = torch.randint(1, t + 1, (b,), generator=torch.Generator().manual_seed(seed))
        mask = padding_mask(lengths, t).long()
    out = run(m, ids, mask)
    for i in range(b):
        alone = run(m, ids[i : i + 1], None if mask is None else mask[i : i + 1])
        assert max_diff(out[i : i + 1], alone) <= EXACT, f"row {i} depends on the other rows"


# 4. permutation equivariance -------------------------------------------------------------------------------------
@given(b=st.integers(1, 3), t=st.integers(2, 9), data=st.data(), seed=seeds, kernel=kernels, padded=st.booleans())
def test_encoder_without_positions_is_permutation_equivariant(b, t, data, seed, kernel, padded):
    m = model("encoder", "none", kernel=kernel)
    perm = torch.tensor(data.draw(st.permutations(range(t)), label="permutation"))
    ids = ids_from(seed, b, t)
    mask = None
    if padded:  # padding anywhere: the mask is permuted with the tokens
        mask = (torch.rand(b, t, generator=torch.Generator().manual_seed(seed)) < 0.7).long()
    out = run(m, ids, mask)
    permuted = run(m, ids[:, perm], None if mask is None else mask[:, perm])
    assert max_diff(permuted, out[:, perm]) <= CLOSE


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "shaw", "t5"])
@given(b=st.integers(1, 3), t=st.integers(2, 9), data=st.data(), seed=seeds)
def test_positional_encoding_breaks_permutation_equivariance(positional, b, t, data, seed):
    m = model("encoder", positional)
    perm = data.draw(st.permutations(range(t)), label="permutation")
    assume(perm != list(range(t)))
    perm = torch.tensor(perm)
    ids = ids_from(seed, b, t)
    assert max_diff(run(m, ids[:, perm]), run(m, ids)[:, perm]) > 1e-6


@given(b=st.integers(1, 3), t=st.integers(3, 9), seed=seeds)
def test_alibi_is_blind_to_reversal_but_not_to_order(b, t, seed):
    """ALiBi's bias -m|i - j| is symmetric: reversing the sequence maps it onto itself, so an ALiBi encoder
    (bidirectional, no other positional signal) is reversal-equivariant. A rotation of the tokens is not."""
    m = model("encoder", "alibi")
    ids = ids_from(seed, b, t)
    out = run(m, ids)
    reverse = torch.arange(t - 1, -1, -1)
    assert max_diff(run(m, ids[:, reverse]), out[:, reverse]) <= CLOSE
    roll = torch.roll(torch.arange(t), 1)
    assert max_diff(run(m, ids[:, roll]), out[:, roll]) > 1e-6


# 5. sinusoidal shift law -----------------------------------------------------------------------------------------
@given(d=st.sampled_from([2, 4, 8, 16]), k=st.integers(-50, 300), seed=seeds)
def test_sinusoidal_shift_is_one_block_rotation(d, k, seed):
    positions = torch.randint(0, 6000, (48,), generator=torch.Generator().manual_seed(seed)).double()
    pe = sinusoidal_table(positions, d, dtype=torch.float64)  # (P, D)
    shifted = sinusoidal_table(positions + k, d, dtype=torch.float64)  # (P, D)
    assert torch.linalg.matrix_rank(pe) == d
    m_t = torch.linalg.lstsq(pe, shifted).solution  # shifted = pe @ M^T
    m = m_t.T  # (D, D): PE(p + k) = M(k) PE(p)
    assert max_diff(pe @ m.T, shifted) <= 1e-8, "no single M(k) maps PE(p) to PE(p + k) for every p"
    # a second, independent set of positions gives the same M(k): it does not depend on p
    other = torch.arange(0, 600, 7).double()
    assert (
        max_diff(
            sinusoidal_table(other, d, dtype=torch.float64) @ m.T, sinusoidal_table(other + k, d, dtype=torch.float64)
        )
        <= 1e-8
    )
    # block-diagonal 2x2 rotations: (sin, cos) of frequency w_i turn by k * w_i
    blocks = torch.block_diag(*[m[i : i + 2, i : i + 2] for i in range(0, d, 2)])
    assert max_diff(m, blocks) <= 1e-8, "M(k) mixes different frequencies"
    freqs = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    for i, w in enumerate(freqs):
        c, s = torch.cos(k * w), torch.sin(k * w)
        assert (
            max_diff(m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2], torch.stack([torch.stack([c, s]), torch.stack([-s, c])]))
            <= 1e-8
        )


# 6. RoPE: scores depend only on the offset -----------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@given(
    dh=st.sampled_from([2, 4, 8]),
    t=st.integers(1, 9),
    s=st.integers(1, 9),
    c=st.integers(-200, 2000),
    seed=seeds,
    data=st.data(),
)
def test_rope_scores_depend_only_on_offset(layout, dh, t, s, c, seed, data):
    rope = RotaryPositional(head_dim=dh, layout=layout, base=100.0)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 2, t, dh, dtype=torch.float64, generator=g)
    k = torch.randn(1, 2, s, dh, dtype=torch.float64, generator=g)
    q_pos = torch.randint(0, 100, (1, t), generator=g)
    k_pos = torch.randint(0, 100, (1, s), generator=g)

    def scores(shift: int) -> torch.Tensor:
        rq, rk = rope.rotate(q, k, q_pos + shift, k_pos + shift)
        assert rq.dtype == torch.float64
        return rq @ rk.transpose(-2, -1)  # (1, 2, T, S)

    assert max_diff(scores(0), scores(c)) <= 1e-10
    # rotation preserves norms, and a nonzero offset does change the score: the law is not vacuous
    rq, _ = rope.rotate(q, k, q_pos + c, k_pos)
    assert max_diff(rq.norm(dim=-1), q.norm(dim=-1)) <= 1e-10
    if c:
        assert max_diff(rq @ k.transpose(-2, -1), q @ k.transpose(-2, -1)) > 1e-6


# 7. KV cache ------------------------------------------------------------------------------------------------------
def chunks(t: int, cuts: list[int]) -> list[slice]:
    edges = sorted({0, t, *[c for c in cuts if 0 < c < t]})
    return [slice(a, z) for a, z in zip(edges, edges[1:])]


@pytest.mark.parametrize("positional", SCHEMES)
@given(
    b=st.integers(1, 3),
    t=st.integers(1, 9),
    seed=seeds,
    kernel=kernels,
    cuts=st.one_of(st.just("tokens"), st.lists(st.integers(1, 8), max_size=3)),
    left_pad=st.booleans(),
    gqa=st.booleans(),
    fused=st.booleans(),
)
def test_decoder_lm_kv_cache_matches_full_forward(positional, b, t, seed, kernel, cuts, left_pad, gqa, fused):
    m = model(
        "decoder_lm",
        positional,
        kernel=kernel_for(positional, kernel),
        n_heads=4,
        n_kv_heads=2 if gqa else None,
        fused_qkv=fused,
    )
    ids = ids_from(seed, b, t)
    mask = None
    if left_pad:
        lengths = torch.randint(1, t + 1, (b,), generator=torch.Generator().manual_seed(seed))
        mask = padding_mask(lengths, t).flip(-1).long()  # (B, T) real tokens on the right
    full = run(m, ids, mask)
    pieces = chunks(t, list(range(1, t)) if cuts == "tokens" else cuts)
    caches, outs = None, []
    with torch.no_grad():
        for piece in pieces:
            step_mask = None if mask is None else mask[:, : piece.stop]  # cached + new tokens
            out = m(ids[:, piece], step_mask, kv_caches=caches, use_cache=True)
            caches = out.kv_caches
            outs.append(out.logits)
    assert len(caches[0]) == t
    assert max_diff(torch.cat(outs, dim=1), full) <= CLOSE


@pytest.mark.parametrize("positional", SCHEMES)
@given(
    b=st.integers(1, 3),
    s=st.integers(1, 7),
    t=st.integers(1, 7),
    seed=seeds,
    cuts=st.lists(st.integers(1, 6), max_size=3),
    src_padded=st.booleans(),
    tgt_left_padded=st.booleans(),
    fused=st.booleans(),
)
def test_seq2seq_kv_cache_matches_full_forward(positional, b, s, t, seed, cuts, src_padded, tgt_left_padded, fused):
    m = model("seq2seq", positional, fused_qkv=fused)
    src, tgt = ids_from(seed, b, s), ids_from(seed + 1, b, t)
    g = torch.Generator().manual_seed(seed)
    src_mask = padding_mask(torch.randint(1, s + 1, (b,), generator=g), s) if src_padded else None
    tgt_mask = padding_mask(torch.randint(1, t + 1, (b,), generator=g), t).flip(-1) if tgt_left_padded else None
    with torch.no_grad():
        full = m(src, src_mask, decoder_input_ids=tgt, decoder_attention_mask=tgt_mask)
        enc = anatomy.models.EncoderOutput(last_hidden_state=full.encoder_last_hidden_state)
        caches, outs = m.new_caches(), []
        for piece in chunks(t, cuts):
            step_mask = None if tgt_mask is None else tgt_mask[:, : piece.stop]  # cached + new tokens
            outs.append(
                m(
                    attention_mask=src_mask,
                    decoder_input_ids=tgt[:, piece],
                    decoder_attention_mask=step_mask,
                    encoder_outputs=enc,
                    kv_caches=caches,
                ).logits
            )
    assert len(caches[0][0]) == t and len(caches[0][1]) == s  # self cache grows, cross cache holds the memory
    assert max_diff(torch.cat(outs, dim=1), full.logits) <= CLOSE


# 8. kernel agreement ---------------------------------------------------------------------------------------------
ATTENTION_SCHEMES = st.sampled_from(["none", "rope", "alibi", "shaw", "t5"])


@st.composite
def attention_cases(draw, positional=ATTENTION_SCHEMES):
    """Shapes, a mask (with fully hidden rows likely), an optional cross context, a positional scheme."""
    b, t = draw(st.integers(1, 3), label="B"), draw(st.integers(1, 9), label="T")
    h = draw(st.sampled_from([1, 2, 4]), label="H")
    hkv = draw(st.sampled_from([d for d in (1, 2, 4) if h % d == 0]), label="Hkv")
    dh = draw(st.sampled_from([2, 4, 8]), label="Dh")
    cross = draw(st.booleans(), label="cross")
    s = draw(st.integers(1, 9), label="S") if cross else t
    pos = "none" if cross else draw(positional, label="positional")
    kind = draw(st.sampled_from(["none", "padding", "random", "causal", "causal+padding", "all hidden"]), label="mask")
    if kind.startswith("causal") and s < t:  # a causal mask needs S >= T (queries are the last T keys)
        kind = "random"
    g = torch.Generator().manual_seed(draw(seeds, label="mask seed"))
    mask = None
    if kind in ("padding", "causal+padding"):
        lengths = torch.randint(0, s + 1, (b,), generator=g)  # length 0: a row of pure padding
        mask = padding_mask(lengths, s)[:, None, None]  # (B, 1, 1, S)
    elif kind == "random":
        shape = (draw(st.sampled_from([1, b])), draw(st.sampled_from([1, h])), t, s)
        mask = torch.rand(shape, generator=g) < draw(st.sampled_from([0.2, 0.5, 0.9]), label="keep")
    elif kind == "all hidden":
        mask = torch.zeros(b, 1, t, s, dtype=torch.bool)
    return dict(
        b=b,
        t=t,
        s=s,
        h=h,
        hkv=hkv,
        dh=dh,
        cross=cross,
        positional=pos,
        mask=mask,
        is_causal=kind.startswith("causal"),
        seed=draw(seeds, label="seed"),
        kind=kind,
    )


def attention_module(case: dict, kernel: str, dtype=torch.float64, bias: bool = True) -> MultiHeadAttention:
    h, dh = case["h"], case["dh"]
    scheme = {
        "rope": lambda: RotaryPositional(head_dim=dh, base=100.0),
        "alibi": lambda: ALiBiPositional(n_heads=h),
        "shaw": lambda: ShawRelativePositional(head_dim=dh, max_relative_distance=3),
    }.get(case["positional"])
    torch.manual_seed(case["seed"])
    m = MultiHeadAttention(
        d_model=h * dh,
        n_heads=h,
        n_kv_heads=case["hkv"],
        kernel=kernel,
        bias=bias,
        positional=None if scheme is None else scheme(),
    )
    if case["positional"] == "shaw":  # larger than the 0.02 default so the relative terms matter
        torch.nn.init.normal_(m.positional.key_embeddings, std=0.5)
        torch.nn.init.normal_(m.positional.value_embeddings, std=0.5)
    return m.to(dtype)


def case_inputs(case: dict, dtype=torch.float64) -> dict:
    g = torch.Generator().manual_seed(case["seed"] + 1)
    d = case["h"] * case["dh"]
    x = torch.randn(case["b"], case["t"], d, generator=g).to(dtype)
    context = torch.randn(case["b"], case["s"], d, generator=g).to(dtype) if case["cross"] else None
    positions = torch.randint(0, 50, (1, case["t"]), generator=g) + torch.arange(case["t"])
    attn_bias = None
    if case["positional"] == "t5":
        t5 = T5RelativeBias(n_heads=case["h"], bidirectional=not case["is_causal"], num_buckets=8, max_distance=16)
        torch.nn.init.normal_(t5.relative_attention_bias.weight, std=0.5, generator=g)
        with torch.no_grad():
            attn_bias = t5.score_bias(None, positions, positions, 1.0).to(dtype)  # (1, H, T, T)
    return dict(x=x, context=context, positions=positions, attn_bias=attn_bias)


def run_attention(m: MultiHeadAttention, case: dict, inputs: dict, need_weights: bool = False):
    """Forward and backward of one kernel: output, kernel output z, weights and every gradient."""
    x = inputs["x"].clone().requires_grad_(True)
    context = None if inputs["context"] is None else inputs["context"].clone().requires_grad_(True)
    seen = {}
    handle = m.hook_z.register_forward_hook(lambda mod, args, out: seen.__setitem__("z", out))
    try:
        out, weights = m(
            x,
            ctx=attention_inputs(
                m,
                x,
                context,
                mask=case["mask"],
                is_causal=case["is_causal"],
                positions=None if case["cross"] else inputs["positions"],
                attn_bias=inputs["attn_bias"],
            ),
            context=context,
            need_weights=need_weights,
        )
    finally:
        handle.remove()
    m.zero_grad(set_to_none=True)
    g = torch.Generator().manual_seed(case["seed"] + 2)
    (out * torch.randn(out.shape, generator=g).to(out.dtype)).sum().backward()
    grads = {"x": x.grad, **({"context": context.grad} if context is not None else {})}
    grads.update({n: p.grad for n, p in m.named_parameters() if p.grad is not None})
    return out.detach(), seen["z"].detach(), weights, grads


def visible_rows(case: dict) -> torch.Tensor:
    """``(B, H, T)`` True where a query row may attend to at least one key."""
    b, h, t, s = case["b"], case["h"], case["t"], case["s"]
    full = combine(case["mask"], causal_mask(t, s) if case["is_causal"] else None)
    if full is None:
        return torch.ones(b, h, t, dtype=torch.bool)
    return full.expand(b, h, t, s).any(-1)


@settings(max_examples=max(60, settings.default.max_examples))
@given(case=attention_cases())
def test_kernels_agree_forward_and_backward(case):
    ref = attention_module(case, "math")
    inputs = case_inputs(case)
    want_out, want_z, want_w, want_grads = run_attention(ref, case, inputs, need_weights=True)
    hidden = ~visible_rows(case)
    assert torch.all(want_z.masked_select(hidden[..., None]) == 0), "a row with no visible key must be 0"
    assert torch.all(want_w.masked_select(hidden[..., None]) == 0)
    for kernel in ("loop", "sdpa"):
        m = attention_module(case, kernel)
        m.load_state_dict(ref.state_dict())
        if kernel == "sdpa" and case["positional"] == "shaw":
            with pytest.raises(ValueError, match="Shaw"):
                run_attention(m, case, inputs)
            continue
        out, z, weights, grads = run_attention(m, case, inputs, need_weights=kernel == "loop")
        assert max_diff(out, want_out) <= CLOSE, kernel
        assert torch.all(z.masked_select(hidden[..., None]) == 0), f"{kernel}: hidden rows must be exactly 0"
        if weights is not None:
            assert max_diff(weights, want_w) <= CLOSE
        assert grads.keys() == want_grads.keys()
        for name, grad in grads.items():
            assert max_diff(grad, want_grads[name]) <= 1e-8, f"{kernel}: gradient of {name}"


@given(case=attention_cases(positional=st.just("shaw")).filter(lambda c: not c["cross"]))
def test_shaw_refuses_the_sdpa_kernel(case):
    m = attention_module(case, "sdpa")
    with pytest.raises(ValueError, match="kernel='sdpa'"):
        run_attention(m, case, case_inputs(case))
