"""``attention_inputs``: a layer called on its own gets the context a model would build, checked under the names of
the arguments the caller gave; a layer given the removed keywords says the new form in one line."""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.components import (
    AttentionContext,
    DecoderBlock,
    EncoderBlock,
    KVCache,
    MultiHeadAttention,
    attention_inputs,
    build_context,
)
from anatomy.components.masks import causal_mask
from anatomy.models.decoder import DecoderStack
from anatomy.models.encoder import EncoderStack

D, H = 16, 4


def _x(b: int = 2, t: int = 5) -> torch.Tensor:
    return torch.randn(b, t, D, generator=torch.Generator().manual_seed(t))


def test_the_helper_is_exported_where_the_layers_are():
    assert anatomy.attention_inputs is attention_inputs and "attention_inputs" in anatomy.__all__


@torch.no_grad()
def test_it_builds_what_build_context_builds_and_the_layer_reads_it():
    attn = MultiHeadAttention(d_model=D, n_heads=H, kernel="math").eval()
    x, keep = _x(), torch.tensor([[True] * 5, [False, True, True, True, True]])
    ctx = attention_inputs(attn, x, is_causal=True, key_padding_mask=keep)
    want = build_context(b=2, t=5, s=5, device="cpu", padding=keep, is_causal=True)
    assert isinstance(ctx, AttentionContext) and ctx.positions.tolist() == [[0, 1, 2, 3, 4]]
    assert torch.equal(ctx.mask, want.mask) and ctx.is_causal
    out, weights = attn(x, ctx, need_weights=True)
    assert weights is not None and float(weights[1, :, :, 0].abs().max()) == 0.0  # the padded key is hidden
    mask = causal_mask(5)[None, None] & keep[:, None, None, :]
    torch.testing.assert_close(out, attn(x, attention_inputs(attn, x, mask=mask))[0], atol=0, rtol=0)
    plain = attention_inputs(attn, x)
    torch.testing.assert_close(attn(x)[0], attn(x, plain)[0], atol=0, rtol=0)  # ctx=None is the plain call


def test_positions_continue_after_the_cache_and_the_block_keeps_its_causal_default():
    attn = MultiHeadAttention(d_model=D, n_heads=H).eval()
    cache, x = KVCache(), _x(t=6)
    attn(x[:, :4], attention_inputs(attn, x[:, :4], is_causal=True, kv_cache=cache), kv_cache=cache)
    ctx = attention_inputs(attn, x[:, 4:], is_causal=True, kv_cache=cache)
    assert ctx.past == 4 and ctx.positions.tolist() == [[4, 5]] and ctx.s == 6
    dec = DecoderBlock.build(d_model=D, n_heads=H).eval()
    memory = _x(t=3)
    ctx = attention_inputs(dec, x, memory)
    assert ctx.is_causal and ctx.cross_ctx is not None and ctx.cross_ctx.s == 3
    torch.testing.assert_close(dec(x, memory)[0], dec(x, memory, ctx)[0], atol=0, rtol=0)
    assert not attention_inputs(EncoderBlock.build(d_model=D, n_heads=H), x).is_causal


def test_the_stack_takes_the_helpers_names_and_adds_a_bias_to_its_own():
    stack = EncoderStack(blocks=[EncoderBlock.build(d_model=D, n_heads=H) for _ in range(2)]).eval()
    x = _x()
    bias = torch.zeros(1, H, 5, 5)
    bias[..., 0] = -1e9  # hides key 0 from every query
    ctx = attention_inputs(stack, x, attn_bias=bias)
    keep = torch.tensor([[False, True, True, True, True]] * 2)
    want = stack(x, ctx=attention_inputs(stack, x, key_padding_mask=keep))[0]
    torch.testing.assert_close(stack(x, ctx=ctx)[0], want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mask": torch.ones(2, 7, dtype=torch.bool)}, r"^mask of shape \(2, 7\) does not broadcast"),
        ({"key_padding_mask": torch.ones(2, 4, dtype=torch.bool)}, r"^key_padding_mask must have shape \(B=2, S=5\)"),
        ({"positions": torch.zeros(1, 4, dtype=torch.long)}, r"^positions must have T=5 columns"),
        ({"attn_bias": torch.zeros(3, 5, 5)}, r"^attn_bias of shape \(3, 5, 5\) does not broadcast .*H=4"),
        ({"attn_bias": torch.zeros(5, 5, dtype=torch.bool)}, r"^attn_bias must be a float tensor"),
        ({"memory_mask": torch.ones(5, 5, dtype=torch.bool)}, r"^memory_mask masks an encoder memory; Multi"),
    ],
)
def test_a_bad_argument_is_named_as_the_caller_gave_it(kwargs, message):
    attn = MultiHeadAttention(d_model=D, n_heads=H)
    with pytest.raises((ValueError, TypeError), match=message):
        attention_inputs(attn, _x(), **kwargs)


def test_the_memorys_arguments_are_named_too():
    dec, x, memory = DecoderBlock.build(d_model=D, n_heads=H), _x(), _x(t=3)
    with pytest.raises(ValueError, match=r"^memory_mask of shape \(5, 4\) does not broadcast to .*S=3"):
        attention_inputs(dec, x, memory, memory_mask=torch.ones(5, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^memory_key_padding_mask must have shape \(B=2, S=3\)"):
        attention_inputs(dec, x, memory, memory_key_padding_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^memory_mask masks an encoder memory; EncoderBlock has no cross"):
        attention_inputs(EncoderBlock.build(d_model=D, n_heads=H), x, memory_mask=torch.ones(5, 3, dtype=torch.bool))
    stack = DecoderStack(blocks=[DecoderBlock.build(d_model=D, n_heads=H)])
    with pytest.raises(ValueError, match=r"^kv_cache must hold one \(self, cross\) pair per block \(1\), got 2"):
        attention_inputs(stack, x, memory, kv_cache=stack.new_caches() * 2)
    with pytest.raises(ValueError, match=r"^kv_caches must hold one \(self, cross\) pair per block"):
        stack(x, memory, kv_caches=stack.new_caches() * 2)  # the stack's own argument, under its own name
    with pytest.raises(TypeError, match="^attention_inputs builds the context of a MultiHeadAttention"):
        attention_inputs(torch.nn.Linear(2, 2), x)


@pytest.mark.parametrize(
    ("layer", "call", "message"),
    [
        (
            MultiHeadAttention(d_model=D, n_heads=H),
            lambda m, x: m(x, mask=None),
            "MultiHeadAttention takes its mask through ctx: attn(x, attention_inputs(attn, x, mask=...))",
        ),
        (
            EncoderBlock.build(d_model=D, n_heads=H),
            lambda m, x: m(x, is_causal=True, positions=None),
            "EncoderBlock takes its is_causal, positions through ctx: "
            "block(x, ctx=attention_inputs(block, x, is_causal=..., positions=...))",
        ),
        (
            DecoderBlock.build(d_model=D, n_heads=H),
            lambda m, x: m(x, x, memory_mask=None),
            "DecoderBlock takes its memory_mask through ctx: "
            "block(x, memory, attention_inputs(block, x, memory, memory_mask=...))",
        ),
        (
            EncoderStack(blocks=[EncoderBlock.build(d_model=D, n_heads=H)]),
            lambda m, x: m(x, attn_mask=None),
            "EncoderStack takes its attn_mask (now mask) through ctx: "
            "stack(x, ctx=attention_inputs(stack, x, mask=...))",
        ),
    ],
)
def test_a_removed_keyword_says_the_new_form_in_one_line(layer, call, message):
    with pytest.raises(TypeError) as err:
        call(layer, _x())
    assert str(err.value) == message


def test_other_mistakes_get_one_line_too():
    attn, x = MultiHeadAttention(d_model=D, n_heads=H), _x()
    with pytest.raises(TypeError, match=r"^MultiHeadAttention.forward\(\) got an unexpected keyword argument 'maks'"):
        attn(x, maks=None)
    with pytest.raises(ValueError, match="^context .memory. given with a self-attention ctx"):
        attn(x, attention_inputs(attn, x), context=_x(t=3))
    with pytest.raises(TypeError, match="^EncoderBlock's second argument is the encoder memory; give the context as"):
        EncoderBlock.build(d_model=D, n_heads=H)(x, attention_inputs(attn, x))
