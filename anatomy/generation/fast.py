"""A flattened one-token decode step for ``DecoderLM``: the modules' arithmetic, without the module machinery.

At batch 1 a decode step of a small model is mostly Python, not arithmetic: ``nn.Module.__call__``, attribute
lookups and hook points per layer. ``DecodeStep`` reads the modules' weights once and runs a step as a short list
of tensor operations per layer, on the same context as the module path (one per step, from ``build_context``) and
the same mask plan (``AttentionContext.kernel_mask``), with the registry's ``sdpa`` arithmetic:

    x (B, D)  --norm--> h --qkv--> q (B,H,1,Dh), k, v (B,Hkv,1,Dh) --QK-norm--> --rotate (RoPE)--> write k, v
              into the cache --sdpa over the cache (B,H,1,S), the window band in the context's mask-->
              (B,H,1,Dh) --> (B, H·Dh) --o_proj--> + x --norm--> FFN --> + x

The parts are the modules' own: the norms' ``forward`` (a float32 LayerNorm's op bound once), the AddNorm's
``before``/``after`` for the placements other than Pre and Post, the positional scheme's ``rotate_for`` /
``score_bias_for``, the FFN's activation, ``F.linear`` on the same weights. tests/generation/test_fast.py holds the
logits equal to the module path within float round-off and the greedy tokens identical, batched and left-padded.

It declines what it does not cover: ``refusal(model)`` names the reason (hooks attached, a training-mode model, a
teaching kernel chosen on purpose, Shaw's value term, T5's shared bias, an encoder-decoder model, a block of
another kind) and ``generate`` then uses the module path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as _module

from anatomy.components import kernels
from anatomy.components.add_norm import AddNorm
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import TransformerBlock
from anatomy.components.context import AttentionContext, build_context
from anatomy.components.embedding import InputEmbeddings, TokenEmbedding
from anatomy.components.ffn import FeedForward
from anatomy.components.kv_cache import KVCache
from anatomy.components.norms import LayerNorm
from anatomy.components.positional.base import PositionalScheme

if TYPE_CHECKING:  # for the type only: models/lm.py imports generation through models/hf_api.py
    from anatomy.models.lm import DecoderLM


def _hooked(model: nn.Module) -> bool:
    if (_module._global_forward_hooks or _module._global_forward_pre_hooks
            or _module._global_backward_hooks):
        return True
    return any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def refusal(model: nn.Module) -> str | None:
    """Why ``model`` cannot use the flattened step (``None``: it can)."""
    if getattr(model, "is_encoder_decoder", None) is not False:  # only DecoderLM carries False (HF's flag)
        return f"only DecoderLM is flattened, not {type(model).__name__}"
    if model.training:
        return "the model is in training mode"
    if _hooked(model):
        return "forward hooks are attached (inspection needs the module path)"
    if type(model.lm_head) is not nn.Linear:
        return f"the output head is a {type(model.lm_head).__name__}, not an nn.Linear"
    if type(model.embeddings) is not InputEmbeddings or type(model.embeddings.embed_tokens) is not TokenEmbedding:
        return "the input embeddings are replaced modules"
    if model.lm_head.out_features > model.embeddings.embed_tokens.num_embeddings:
        return "the output head predicts ids the input embedding does not have"
    stack = cast("DecoderLM", model).stack  # is_encoder_decoder is False: a DecoderLM (checked above)
    if stack.position_bias is not None:
        return "a stack-level position bias (T5) is computed per step by the stack"
    if getattr(model, "final_logit_softcap", None) is not None:
        return "the final logits are soft-capped (Gemma 2)"
    for i, block in enumerate(stack.blocks):
        if not isinstance(block, TransformerBlock) or block.cross_attn is not None:
            return f"block {i} is a {type(block).__name__}, not a self-attention TransformerBlock"
        attn, ffn = block.attn, block.ffn
        if type(attn) is not MultiHeadAttention or type(ffn) is not FeedForward:
            return f"block {i} has a replaced attention or feed-forward module"
        if not attn.uses_plain_sdpa():
            return f"block {i} asks for kernel={attn.kernel!r} or another step (the flattened step always uses sdpa)"
        if getattr(attn, "softcap", None) is not None:
            return f"block {i} soft-caps its attention logits (sdpa cannot)"
        if getattr(block, "parallel_residual", False):
            return f"block {i} has a parallel residual (the step runs attention then the FFN on its output)"
        pos = attn.positional
        if pos is not None and type(pos).value_bias is not PositionalScheme.value_bias:
            return f"block {i}'s positional scheme {type(pos).__name__} adds a value term (sdpa cannot)"
    return None


def _norm_fn(norm: nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """``norm.forward``; for a float32 LayerNorm, the op that ``forward`` ends in, with its arguments bound now."""
    if type(norm) is LayerNorm and norm.weight.dtype == torch.float32:
        shape, weight, bias, eps = tuple(norm.weight.shape), norm.weight, norm.bias, norm.eps
        return lambda x: torch.layer_norm(x, shape, weight, bias, eps) if x.dtype == torch.float32 else norm.forward(x)
    return norm.forward


def _add_norm_fns(add_norm: AddNorm) -> tuple[Callable[[torch.Tensor], torch.Tensor] | None,
                                             Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """``(before, after)`` of one AddNorm: ``before(x)`` is what the sub-layer sees (``None``: x itself) and
    ``after(x, out)`` the new residual stream. Pre and Post are spelled out; the others use the module's own."""
    if add_norm.placement == "pre":
        return _norm_fn(add_norm.norm), torch.add
    if add_norm.placement == "post":
        norm = _norm_fn(add_norm.norm)
        return None, lambda x, out: norm(x + out)
    return add_norm.before, add_norm.after  # sandwich, deepnorm


_Weights = tuple[torch.Tensor, torch.Tensor | None]  # an nn.Linear's (weight, bias)


class _Layer:
    """The tensors and callables of one block, looked up once (``nn.Module`` attribute lookups are slow)."""

    def __init__(self, block: TransformerBlock) -> None:
        attn, ffn = block.attn, cast(FeedForward, block.ffn)  # refusal: type(block.ffn) is FeedForward
        self.h, self.hkv, self.dh, self.d = attn.n_heads, attn.n_kv_heads, attn.head_dim, attn.inner_dim  # d: H·Dh
        # the registry's sdpa entry: its arithmetic, with the scale and mask the entry would give it (decided once
        # here: eval mode, no dropout, no soft-cap, no fault steps, all refused above)
        self.attend, self.window = kernels.KERNELS["sdpa"].fn, attn.sliding_window
        self.scale, self.positional = attn.scale, attn.positional
        self.qkv: _Weights | None
        self.q: _Weights | None
        self.k: _Weights | None
        self.v: _Weights | None
        if attn.fused_qkv:
            self.qkv = (attn.qkv_proj.weight, attn.qkv_proj.bias)
            self.q = self.k = self.v = None
        else:
            self.qkv = None
            self.q, self.k, self.v = ((p.weight, p.bias) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        self.o = (attn.o_proj.weight, attn.o_proj.bias)
        self.up = (ffn.up_proj.weight, ffn.up_proj.bias)
        self.gate = (ffn.gate_proj.weight, ffn.gate_proj.bias) if ffn.gated else None
        self.down = (ffn.down_proj.weight, ffn.down_proj.bias)
        self.act = ffn.act
        self.q_norm = None if attn.qk_norm is None else _norm_fn(attn.q_norm)
        self.k_norm = None if attn.qk_norm is None else _norm_fn(attn.k_norm)
        self.attn_before, self.attn_after = _add_norm_fns(block.attn_add_norm)
        self.ffn_before, self.ffn_after = _add_norm_fns(block.ffn_add_norm)
        kv_dim = self.hkv * self.dh
        self.sizes = [self.d, kv_dim, kv_dim]

    def __call__(self, x: torch.Tensor, cache: KVCache, ctx: AttentionContext) -> torch.Tensor:
        b = x.shape[0]
        h = x if self.attn_before is None else self.attn_before(x)  # (B, D)
        if self.qkv is not None:
            q, k, v = F.linear(h, *self.qkv).split_with_sizes(self.sizes, dim=-1)
        else:
            assert self.q is not None and self.k is not None and self.v is not None  # set when qkv is None
            q, k, v = F.linear(h, *self.q), F.linear(h, *self.k), F.linear(h, *self.v)
        q = q.view(b, self.h, 1, self.dh)  # (B, H, 1, Dh)
        k = k.view(b, self.hkv, 1, self.dh)  # (B, Hkv, 1, Dh)
        v = v.view(b, self.hkv, 1, self.dh)  # (B, Hkv, 1, Dh)
        if self.q_norm is not None:  # QK-norm over Dh, before RoPE
            assert self.k_norm is not None  # set with q_norm
            q, k = self.q_norm(q), self.k_norm(k)
        if self.positional is not None:
            q, k = self.positional.rotate_for(ctx, q, k)  # the step's RoPE table, computed once for every layer
        k, v, k_pos = cache.update(k, v, ctx.positions)  # (B, Hkv, S, Dh), (B|1, S)
        bias = None if self.positional is None else self.positional.score_bias_for(ctx, q, k_pos, self.scale)
        mask, is_causal = ctx.kernel_mask(self.window, k.shape[-2], self.h)  # the window's band folded in, memoised
        out, _ = self.attend(q, k, v, mask=mask, is_causal=is_causal, scale=self.scale, bias=bias)  # (B, H, 1, Dh)
        x = self.attn_after(x, F.linear(out.reshape(b, self.d), *self.o))  # (B, D)
        h = x if self.ffn_before is None else self.ffn_before(x)
        hidden = self.act(F.linear(h, *self.up)) if self.gate is None else (
            self.act(F.linear(h, *self.gate)) * F.linear(h, *self.up))  # (B, F)
        return self.ffn_after(x, F.linear(hidden, *self.down))  # (B, D)


class DecodeStep:
    """``step(token (B,), positions (B|1, 1), mask (B, S) | None) -> logits (B, V)`` for one new token per row,
    appending to ``caches`` (one ``KVCache`` per block, filled by the module path's prefill)."""

    def __init__(self, model: DecoderLM, caches: list[KVCache]) -> None:
        reason = refusal(model)
        if reason is not None:
            raise ValueError(f"DecodeStep cannot flatten this model: {reason}")
        if len(caches) != len(model.stack.blocks):
            raise ValueError(f"caches must hold one KVCache per block ({len(model.stack.blocks)}), got {len(caches)}")
        self.model, self.caches = model, caches
        blocks = [cast(TransformerBlock, block) for block in model.stack.blocks]  # refusal: TransformerBlocks
        self.layers = [_Layer(block) for block in blocks]
        self.first, self.heads = caches[0], blocks[0].attn.n_heads
        emb = model.embeddings
        self.embeddings = emb if emb.token_types is not None else None  # token types: the module, unchanged
        self.token_weight, self.multiplier = emb.embed_tokens.weight, emb.embed_tokens.multiplier
        self.positional, self.embedding_norm = emb.positional, emb.norm
        final = model.stack.final_norm
        self.final_norm = None if final is None else _norm_fn(final)
        self.head = (model.lm_head.weight, model.lm_head.bias)

    def _embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``InputEmbeddings.forward`` without its id range check (ids come from this model's own logits) and
        without dropout (eval mode): ``(B, 1)`` → ``(B, 1, D)``."""
        if self.embeddings is not None:
            embedded: torch.Tensor = self.embeddings(ids, positions)  # (B, 1, D)
            return embedded
        x = F.embedding(ids, self.token_weight)  # (B, 1, D)
        if self.multiplier != 1.0:
            x = x * self.multiplier
        if self.positional is not None:
            x = self.positional.add_to_embeddings(x, positions)
        return x if self.embedding_norm is None else self.embedding_norm(x)

    def __call__(self, token: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b = token.shape[0]
        past = self.first.seen
        ctx = build_context(b=b, t=1, s=past + 1, heads=self.heads, device=token.device, past=past,
                            positions=positions, key_padding_mask=mask, is_causal=True,
                            cache_positions=self.first.positions)  # the stack's context, once for every layer
        x = self._embed(token[:, None], positions).view(b, -1)  # (B, D)
        for layer, cache in zip(self.layers, self.caches):
            x = layer(x, cache, ctx)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return F.linear(x, *self.head)  # (B, V)
