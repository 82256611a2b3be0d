"""Parity with torch.nn's Transformer modules through anatomy.interop.torch_nn (eval mode, float32, 1e-5).

Masks are built once in our sense (True = may attend) and flipped for torch with ``masks.to_torch_nn``. torch
returns NaN on query rows that may attend to nothing; those rows are compared apart (ours: weights 0, attention
output 0, so the block output is ``o_proj.bias``). torch runs twice per case: under ``no_grad`` (its eval fast
paths: native MHA, nested tensors, fused encoder layer) and with grad on (the reference Python path).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anatomy.components import DecoderBlock, EncoderBlock, LayerNorm, MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import causal_mask, combine, key_padding_to_attention, padding_mask, to_torch_nn
from anatomy.components.positional import RotaryPositional, T5RelativeBias
from anatomy.interop.torch_nn import from_torch, to_torch
from anatomy.models import DecoderStack, EncoderDecoderStack, EncoderStack

B, T, S, D, H, F = 3, 7, 5, 32, 4, 64
TOL = 1e-5
MAX_DIFF: list[float] = []  # every compared max |diff|, for the curious (print it after a run)


# ------------------------------------------------------------------------------------------------ helpers


def _randomize(module: nn.Module, seed: int = 0) -> nn.Module:
    """Perturb every parameter so zero-initialised biases and unit norms are tested too."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return module.eval()


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    MAX_DIFF.append(diff)
    assert diff <= TOL, f"{what}: max |diff| {diff:.3g} > {TOL}"


def _keep(lengths: list[int], n: int, left: bool = False) -> torch.Tensor:
    """Our key-padding mask ``(B, n)``, True on real tokens; right padding unless ``left``."""
    m = padding_mask(lengths, n)  # (B, n)
    return m.flip(-1) if left else m


def _torch_runs(fn):
    """torch's answer on its fast path (no_grad) and on its reference path (grad on)."""
    with torch.no_grad():
        fast = fn()
    with torch.enable_grad():
        slow = fn()
    return fast, slow


def _mha_case(cross: bool, masks: str):
    """Inputs and masks (our sense) for one attention case; 'both' hides every key of some query rows."""
    torch.manual_seed(1)
    x = torch.randn(B, T, D)  # (B, T, D)
    s = S if cross else T
    c = torch.randn(B, s, D) if cross else x  # (B, S, D)
    kp = _keep([s, s - 2, s], s) if masks in ("padding", "both") else None  # (B, S)
    if kp is not None and masks == "both":
        kp[2] = _keep([s - 2], s, left=True)[0]  # left padding + causal: rows 0, 1 of sequence 2 see nothing
    am = torch.ones(T, s, dtype=torch.bool).tril() if masks in ("causal", "both") else None  # (T, S)
    return x, c, kp, am


def _torch_mha(m: nn.MultiheadAttention, x, c, kp, am, need_weights: bool):
    q = x if m.batch_first else x.transpose(0, 1)  # (B, T, D) or (T, B, D)
    kv = q if c is x else (c if m.batch_first else c.transpose(0, 1))  # self-attention: one object
    out, w = m(
        q,
        kv,
        kv,
        key_padding_mask=None if kp is None else to_torch_nn(kp),
        attn_mask=None if am is None else to_torch_nn(am),
        need_weights=need_weights,
        average_attn_weights=False,
    )
    return (out if m.batch_first else out.transpose(0, 1)), w  # (B, T, D), (B, H, T, S) or None


def _check_mha(m: nn.MultiheadAttention, ours: MultiHeadAttention, cross: bool, masks: str) -> None:
    x, c, kp, am = _mha_case(cross, masks)
    mask = combine(None if kp is None else key_padding_to_attention(kp), am)  # (B|1, 1, T, S)
    visible = torch.ones(B, T, dtype=torch.bool) if mask is None else mask.any(-1).expand(B, 1, T)[:, 0]
    with torch.no_grad():
        out, _ = ours(
            x, ctx=attention_inputs(ours, x, c if cross else None, mask=mask), context=c if cross else None
        )  # sdpa kernel
        out_w, w = ours(
            x,
            ctx=attention_inputs(ours, x, c if cross else None, mask=mask),
            context=c if cross else None,
            need_weights=True,
        )  # math kernel
    fast, slow = _torch_runs(lambda: _torch_mha(m, x, c, kp, am, need_weights=False))
    _, ref_w = _torch_runs(lambda: _torch_mha(m, x, c, kp, am, need_weights=True))[1]
    for name, ref in (("fast path", fast[0]), ("reference path", slow[0])):
        _close(out[visible], ref[visible], f"output vs torch {name}")
        _close(out_w[visible], ref[visible], f"output (math kernel) vs torch {name}")
    _close(w.transpose(1, 2)[visible], ref_w.transpose(1, 2)[visible], "weights")  # rows of (B, T, H, S)
    if masks == "both":
        assert not visible.all(), "the 'both' case must hide every key of some query rows"
        bias = torch.zeros(D) if ours.o_proj.bias is None else ours.o_proj.bias.detach()
        assert torch.isfinite(out).all() and torch.isfinite(w).all()
        assert torch.equal(w.transpose(1, 2)[~visible], torch.zeros_like(w.transpose(1, 2)[~visible]))
        _close(out[~visible], bias.expand_as(out[~visible]), "fully masked rows give o_proj.bias (z = 0)")


# ------------------------------------------------------------------------------------------------ 1. attention

MASK_CASES = ["none", "padding", "causal", "both"]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", MASK_CASES)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_mha_from_torch(cross, masks, batch_first, bias):
    torch.manual_seed(0)
    m = _randomize(nn.MultiheadAttention(D, H, bias=bias, batch_first=batch_first))
    ours = from_torch(m).eval()
    assert isinstance(ours, MultiHeadAttention) and ours.n_heads == H and ours.kernel == "auto"
    _check_mha(m, ours, cross, masks)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("masks", MASK_CASES)
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_mha_to_torch(cross, masks, batch_first, bias):
    torch.manual_seed(0)
    ours = _randomize(MultiHeadAttention(d_model=D, n_heads=H, bias=bias))
    m = to_torch(ours).eval()
    assert isinstance(m, nn.MultiheadAttention) and m.batch_first
    m.batch_first = batch_first  # a layout flag only: the weights are the same either way
    _check_mha(m, ours, cross, masks)


def test_mha_to_torch_from_fused_qkv():
    ours = _randomize(MultiHeadAttention(d_model=D, n_heads=H, fused_qkv=True))
    m = to_torch(ours).eval()
    _check_mha(m, ours, cross=True, masks="both")
    back = from_torch(m)
    assert torch.equal(back.k_proj.weight, ours.qkv_proj.weight[D : 2 * D])


# ------------------------------------------------------------------------------------------------ 2. layers


def _enc_layer_pair(direction: str, norm_first: bool, activation: str):
    if direction == "from_torch":
        layer = _randomize(
            nn.TransformerEncoderLayer(
                D, H, F, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
            )
        )
        return layer, from_torch(layer).eval()
    block = _randomize(
        EncoderBlock.build(
            d_model=D, n_heads=H, d_ff=F, activation=activation, placement="pre" if norm_first else "post"
        )
    )
    return to_torch(block).eval(), block


def _dec_layer_pair(direction: str, norm_first: bool, activation: str):
    if direction == "from_torch":
        layer = _randomize(
            nn.TransformerDecoderLayer(
                D, H, F, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
            )
        )
        return layer, from_torch(layer).eval()
    block = _randomize(
        DecoderBlock.build(
            d_model=D, n_heads=H, d_ff=F, activation=activation, placement="pre" if norm_first else "post"
        )
    )
    return to_torch(block).eval(), block


LAYER_GRID = pytest.mark.parametrize(
    "direction,norm_first,activation",
    [(d, n, a) for d in ("from_torch", "to_torch") for n in (False, True) for a in ("relu", "gelu")],
)


@LAYER_GRID
def test_encoder_layer(direction, norm_first, activation):
    layer, block = _enc_layer_pair(direction, norm_first, activation)
    assert isinstance(layer, nn.TransformerEncoderLayer) and isinstance(block, EncoderBlock)
    assert block.attn_add_norm.placement == ("pre" if norm_first else "post")
    assert block.ffn.activation == activation
    torch.manual_seed(2)
    x = torch.randn(B, T, D)  # (B, T, D)
    keep = _keep([T, 4, 6], T)  # (B, T)
    with torch.no_grad():
        out, _ = block(x, ctx=attention_inputs(block, x, mask=key_padding_to_attention(keep)))
    for ref in _torch_runs(lambda: layer(x, src_key_padding_mask=to_torch_nn(keep))):
        _close(out[keep], ref[keep], "encoder layer, real tokens")


@LAYER_GRID
def test_decoder_layer(direction, norm_first, activation):
    layer, block = _dec_layer_pair(direction, norm_first, activation)
    assert isinstance(layer, nn.TransformerDecoderLayer) and isinstance(block, DecoderBlock)
    torch.manual_seed(3)
    y, mem = torch.randn(B, T, D), torch.randn(B, S, D)  # (B, T, D), (B, S, D)
    tkeep, mkeep = _keep([T, 5, 3], T), _keep([S, 2, 4], S)  # (B, T), (B, S)
    with torch.no_grad():
        out, _ = block(
            y,
            mem,
            ctx=attention_inputs(
                block,
                y,
                mem,
                mask=key_padding_to_attention(tkeep),
                memory_mask=key_padding_to_attention(mkeep),
                is_causal=True,
            ),
        )
    for ref in _torch_runs(
        lambda: layer(
            y,
            mem,
            tgt_mask=to_torch_nn(causal_mask(T)),
            tgt_key_padding_mask=to_torch_nn(tkeep),
            memory_key_padding_mask=to_torch_nn(mkeep),
            tgt_is_causal=True,
        )
    ):
        _close(out[tkeep], ref[tkeep], "decoder layer, real tokens")


@pytest.mark.parametrize(
    "act,name", [(nn.functional.relu, "relu"), (nn.functional.gelu, "gelu"), (nn.ReLU(), "relu"), (nn.GELU(), "gelu")]
)
def test_activation_detected_from_function_or_module(act, name):
    layer = nn.TransformerEncoderLayer(D, H, F, activation=act, batch_first=True)
    assert from_torch(layer).ffn.activation == name


# ------------------------------------------------------------------------------------------------ 3. stacks


def _our_seq2seq(norm_first: bool) -> EncoderDecoderStack:
    kw = dict(d_model=D, n_heads=H, d_ff=F, placement="pre" if norm_first else "post")
    enc = EncoderStack(blocks=[EncoderBlock.build(**kw) for _ in range(2)], final_norm=LayerNorm(D))
    dec = DecoderStack(blocks=[DecoderBlock.build(**kw) for _ in range(2)], final_norm=LayerNorm(D))
    return _randomize(EncoderDecoderStack(encoder=enc, decoder=dec))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True", "ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("direction", ["from_torch", "to_torch"])
def test_transformer(direction, norm_first):
    torch.manual_seed(0)
    if direction == "from_torch":
        t = _randomize(nn.Transformer(D, H, 2, 2, F, dropout=0.0, batch_first=True, norm_first=norm_first))
        ours = from_torch(t).eval()
    else:
        ours = _our_seq2seq(norm_first)
        t = to_torch(ours).eval()
    assert isinstance(t, nn.Transformer) and isinstance(ours, EncoderDecoderStack)
    assert ours.encoder.final_norm is not None and t.decoder.norm is not None
    torch.manual_seed(4)
    src, tgt = torch.randn(B, S, D), torch.randn(B, T, D)  # (B, S, D), (B, T, D)
    skeep, tkeep = _keep([S, 3, 4], S), _keep([T, 6, 2], T)  # (B, S), (B, T)
    with torch.no_grad():
        out = ours(
            src,
            tgt,
            src_key_padding_mask=skeep,
            tgt_key_padding_mask=tkeep,
            memory_key_padding_mask=skeep,
            tgt_is_causal=True,
        )
    call = lambda: t(  # noqa: E731
        src,
        tgt,
        tgt_mask=to_torch_nn(causal_mask(T)),
        src_key_padding_mask=to_torch_nn(skeep),
        tgt_key_padding_mask=to_torch_nn(tkeep),
        memory_key_padding_mask=to_torch_nn(skeep),
        tgt_is_causal=True,
    )
    for ref in _torch_runs(call):
        _close(out[tkeep], ref[tkeep], "nn.Transformer, real target tokens")


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
@pytest.mark.parametrize("nested", [True, False])
def test_encoder_stack_with_src_mask(nested):
    """nn.TransformerEncoder with a final norm, padding and an attention mask (``mask=``); nested tensors zero
    torch's padded positions, so only real tokens are compared."""
    layer = nn.TransformerEncoderLayer(D, H, F, dropout=0.0, batch_first=True)
    enc = _randomize(nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=nested))
    ours = from_torch(enc).eval()
    torch.manual_seed(5)
    x = torch.randn(B, T, D)  # (B, T, D)
    keep = _keep([T, 3, 5], T)  # (B, T)
    # Every row must keep a real key: a padded query row whose keys are all hidden is NaN in torch, and the
    # next layer's matmul spreads that NaN to real tokens (0 * NaN). Causal + right padding keeps key 0.
    src_mask = causal_mask(T)  # (T, T)
    with torch.no_grad():
        out, _ = ours(x, ctx=attention_inputs(ours, x, key_padding_mask=keep, mask=src_mask))
    for ref in _torch_runs(lambda: enc(x, mask=to_torch_nn(src_mask), src_key_padding_mask=to_torch_nn(keep))):
        _close(out[keep], ref[keep], "nn.TransformerEncoder, real tokens")


def test_encoder_stack_to_torch_matches_every_position():
    ours = _randomize(EncoderStack(blocks=[EncoderBlock.build(d_model=D, n_heads=H, d_ff=F) for _ in range(2)]))
    enc = to_torch(ours).eval()
    assert isinstance(enc, nn.TransformerEncoder) and enc.norm is None and not enc.enable_nested_tensor
    x, keep = torch.randn(B, T, D), _keep([T, 3, 5], T)
    with torch.no_grad():
        out, _ = ours(x, ctx=attention_inputs(ours, x, key_padding_mask=keep))
        ref = enc(x, src_key_padding_mask=to_torch_nn(keep))
    _close(out, ref, "every position, padded ones included")


# ------------------------------------------------------------------------------------------------ 4. round trip


def _torch_modules():
    enc_layer = nn.TransformerEncoderLayer(D, H, F, activation="gelu", batch_first=True, norm_first=True)
    dec_layer = nn.TransformerDecoderLayer(D, H, F, batch_first=False, bias=False)
    return {
        "mha": nn.MultiheadAttention(D, H, batch_first=False),
        "mha_nobias": nn.MultiheadAttention(D, H, bias=False, batch_first=True),
        "encoder_layer": enc_layer,
        "decoder_layer": dec_layer,
        "encoder": nn.TransformerEncoder(enc_layer, 2, norm=nn.LayerNorm(D), enable_nested_tensor=False),
        "decoder": nn.TransformerDecoder(dec_layer, 2),
        "transformer": nn.Transformer(D, H, 2, 2, F, batch_first=True),
    }


@pytest.mark.parametrize("name", list(_torch_modules()))
def test_round_trip_torch_ours_torch(name):
    src = _randomize(_torch_modules()[name], seed=7)
    back = to_torch(from_torch(src))
    assert type(back) is type(src)
    a, b = src.state_dict(), back.state_dict()
    assert list(a) == list(b)
    for key in a:
        assert torch.equal(a[key], b[key]), key


def test_round_trip_ours_torch_ours():
    ours = _our_seq2seq(norm_first=True)
    back = from_torch(to_torch(ours))
    a, b = ours.state_dict(), back.state_dict()
    assert list(a) == list(b) and all(torch.equal(a[k], b[k]) for k in a)


def test_copies_never_share_storage_and_keep_dtype():
    src = _randomize(nn.Transformer(D, H, 1, 1, F, batch_first=True)).double()
    ours = from_torch(src)
    back = to_torch(ours)
    ptrs = [{p.data_ptr() for p in m.parameters()} for m in (src, ours, back)]
    assert not (ptrs[0] & ptrs[1]) and not (ptrs[1] & ptrs[2])
    assert all(p.dtype == torch.float64 for p in (*ours.parameters(), *back.parameters()))
    with torch.no_grad():
        next(ours.parameters()).add_(1.0)
    assert not torch.equal(next(ours.parameters()), next(src.parameters()))


def test_dropout_probabilities_travel():
    layer = nn.TransformerDecoderLayer(D, H, F, dropout=0.25, batch_first=True)
    block = from_torch(layer)
    assert block.attn.dropout == block.cross_attn.dropout == 0.25
    assert block.ffn.dropout.p == block.attn_add_norm.dropout.p == block.ffn_add_norm.dropout.p == 0.25
    block.ffn.dropout.p = 0.5
    assert to_torch(block).dropout.p == 0.5


# ------------------------------------------------------------------------------------------------ 5. bad input


def test_unsupported_class_lists_supported():
    with pytest.raises(TypeError, match="supported: nn.MultiheadAttention, nn.TransformerEncoderLayer"):
        from_torch(nn.Linear(D, D))
    with pytest.raises(TypeError, match="supported: MultiHeadAttention, EncoderBlock"):
        to_torch(nn.Linear(D, D))


@pytest.mark.parametrize(
    "module,match",
    [
        (lambda: nn.MultiheadAttention(D, H, kdim=16, vdim=16), "kdim=16, vdim=16 differ from embed_dim=32"),
        (lambda: nn.MultiheadAttention(D, H, add_bias_kv=True), "add_bias_kv"),
        (lambda: nn.MultiheadAttention(D, H, add_zero_attn=True), "add_zero_attn"),
        (lambda: nn.TransformerEncoderLayer(D, H, F, activation=nn.SiLU()), "unsupported activation"),
        (lambda: nn.TransformerDecoderLayer(D, H, F, activation=nn.GELU(approximate="tanh")), "unsupported activation"),
    ],
    ids=["kdim", "add_bias_kv", "add_zero_attn", "silu", "gelu_tanh"],
)
def test_from_torch_refuses(module, match):
    with pytest.raises(ValueError, match=match):
        from_torch(module())


def _block(**kw):
    return EncoderBlock.build(d_model=D, n_heads=H, d_ff=F, **kw)


def _mixed_bias_block():
    block = _block(bias=False)
    block.attn_add_norm.norm = LayerNorm(D, bias=True)
    return block


@pytest.mark.parametrize(
    "module,match",
    [
        (lambda: MultiHeadAttention(d_model=D, n_heads=H, n_kv_heads=2), "grouped-query attention"),
        (
            lambda: MultiHeadAttention(d_model=D, n_heads=H, positional=RotaryPositional(head_dim=D // H)),
            "positional scheme inside attention \\(RotaryPositional\\)",
        ),
        (lambda: MultiHeadAttention(d_model=D, n_heads=H, scale=1.0), "non-default attention scale"),
        (lambda: MultiHeadAttention(d_model=D, n_heads=H, head_dim=2 * D // H), "heads split d_model"),
        (lambda: MultiHeadAttention(d_model=D, n_heads=H, sliding_window=4), "sliding-window attention"),
        (lambda: MultiHeadAttention(d_model=D, n_heads=H, qk_norm="rmsnorm"), "QK-norm"),
        (lambda: _block(norm="rmsnorm"), "RMSNorm"),
        (lambda: _block(activation="swiglu"), "activation 'swiglu'"),
        (lambda: _block(activation="silu"), "activation 'silu'"),
        (lambda: _block(placement="sandwich"), "placement sandwich"),
        (lambda: _block(placement="deepnorm", alpha=2.0), "placement deepnorm"),
        (_mixed_bias_block, "bias on some projections or norms and not on others"),
        (
            lambda: EncoderStack(blocks=[_block(), _block(activation="gelu")]),
            "block 1 differs from block 0 in activation",
        ),
        (
            lambda: DecoderStack(blocks=[DecoderBlock.build(d_model=D, n_heads=H, d_ff=F, n_kv_heads=1)]),
            "grouped-query attention",
        ),
        (lambda: EncoderStack(blocks=[_block()], position_bias=T5RelativeBias(n_heads=H)), "T5RelativeBias"),
    ],
    ids=[
        "gqa",
        "rope",
        "scale",
        "head_dim",
        "window",
        "qk_norm",
        "rmsnorm",
        "swiglu",
        "silu",
        "sandwich",
        "deepnorm",
        "mixed_bias",
        "mixed_stack",
        "gqa_in_stack",
        "t5_bias",
    ],
)
def test_to_torch_refuses(module, match):
    with pytest.raises(ValueError, match=match):
        to_torch(module())
