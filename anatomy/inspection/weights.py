"""Attention weights while the model keeps running the fused kernel.

``F.scaled_dot_product_attention`` never materialises the ``(B, H, T, S)`` weights; switching the whole model to
the math kernel to see them changes what runs (and costs memory in every layer). Instead, for the layers and
heads asked for, we record what each attention module used and recompute the weights next to it:

* ``hook_q`` and ``hook_k`` outputs: q ``(B, H, T, Dh)`` and k ``(B, Hkv, S, Dh)``, already rotated by RoPE and
  already holding the KV cache, i.e. exactly what the kernel received;
* the keyword arguments the module was called with (``mask``, ``is_causal``, ``positions``, ``attn_bias``,
  ``context``, ``kv_cache``), recorded by a forward pre-hook (``with_kwargs=True``);
* the positional scheme's score bias (ALiBi, Shaw's key term) from the module itself.

Then :func:`anatomy.components.kernels.math_attention` computes ``softmax(q k^T * scale + bias, masked)`` for the
chosen heads only. Score/weight hooks are not attached, so ``kernel="auto"`` stays on SDPA::

    with attention_weights(model, layers=[0], heads=[1, 3]) as maps:
        model(ids)
    maps[0].weights                      # (B, 2, T, S): heads 1 and 3 of the first attention layer

Layers are numbered in the order of :func:`attention_modules` (module order: for seq2seq models the encoder's
layers, then each decoder block's self- and cross-attention). One forward inside the block fills the maps; a
later forward overwrites them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from anatomy.components import kernels
from anatomy.components.attention import MultiHeadAttention
from anatomy.inspection.capture import capture


@dataclass
class LayerWeights:
    """The recomputed weights of one attention layer."""

    index: int  # position in attention_modules(model)
    name: str  # module path, e.g. "stack.blocks.0.attn"
    heads: tuple[int, ...]  # query heads, in the order of weights' second dimension
    weights: torch.Tensor  # (B, len(heads), T, S)
    cross: bool  # cross-attention (keys from the encoder memory)

    def entropy(self, batch: int | None = None) -> torch.Tensor:
        """Mean entropy (nats) of each head's query rows ``(len(heads),)``: of batch row ``batch``, or averaged
        over the batch."""
        w = self.weights if batch is None else self.weights[batch : batch + 1]
        return head_entropy(w).mean(0)  # (h,)


def head_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Mean entropy in nats over the query rows of ``weights: (..., T, S)`` → ``(...)``; all-zero rows count 0."""
    w = weights.double()
    return (-(w * torch.where(w > 0, w.log(), torch.zeros_like(w))).sum(-1)).mean(-1)


def attention_modules(model: nn.Module) -> list[tuple[str, MultiHeadAttention]]:
    """Every ``MultiHeadAttention`` of ``model`` with its module path, in module order."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, MultiHeadAttention)]


def _select(items: Sequence[int] | None, count: int, what: str, owner: str) -> list[int]:
    """``items`` checked against ``range(count)`` (all of them when ``None``)."""
    if items is None:
        return list(range(count))
    items = list(items)
    if not items:
        raise ValueError(f"{what} must name at least one, got an empty list")
    for i in items:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count:
            raise ValueError(f"{what} holds {i!r}, but {owner} has {count} (valid: 0..{count - 1})")
    return items


def _heads_slice(x: torch.Tensor | None, heads: list[int]) -> torch.Tensor | None:
    """Keep ``heads`` on dim 1 of a tensor broadcastable to ``(B, H, T, S)`` (size-1 head dims broadcast)."""
    if x is None or x.shape[1] == 1:
        return x
    return x[:, heads]


def recompute(module: MultiHeadAttention, q: torch.Tensor, k: torch.Tensor, call: dict,
              heads: list[int]) -> torch.Tensor:
    """The weights ``(B, len(heads), T, S)`` ``module`` computed (or would have) from what it received.

    ``q: (B, H, T, Dh)`` and ``k: (B, Hkv, S, Dh)`` are the outputs of its ``hook_q`` / ``hook_k``; ``call`` holds
    the keyword arguments of the call and ``past`` (cache length before the call).
    """
    b, h, t, _ = q.shape
    s = k.shape[-2]
    cross = call.get("context") is not None
    mask, is_causal = module.kernel_mask(call.get("mask"), bool(call.get("is_causal", False)), b, t, s, cross=cross,
                                         device=q.device, kv_cache=None if cross else call.get("kv_cache"))
    # ^ exactly what the module handed its kernel
    bias = call.get("attn_bias")
    if module.positional is not None and not cross:
        positions = call.get("positions")
        past = call["past"]
        if positions is None:
            positions = torch.arange(past, past + t, device=q.device)[None]  # (1, T)
        cache = call.get("kv_cache")
        k_pos = positions if cache is None else cache.positions[..., :s]  # (B|1, S)
        extra = module.positional.score_bias(q, positions, k_pos, module.scale)
        if extra is not None:
            bias = extra if bias is None else bias + extra
    k = kernels.repeat_kv(k, h)  # (B, H, S, Dh)
    q_sel, k_sel = q[:, heads], k[:, heads]  # (B, h, T|S, Dh)
    _, weights = kernels.math_attention(
        q_sel, k_sel, k_sel, mask=_heads_slice(mask, heads), is_causal=is_causal, scale=module.scale,
        bias=_heads_slice(bias, heads), need_weights=True,
        **({"softcap": module.softcap} if getattr(module, "softcap", None) is not None else {}),
    )  # the output (weights @ k) is discarded; only the weights are wanted
    return weights  # (B, h, T, S)


@contextmanager
def attention_weights(model: nn.Module, *, layers: int | Iterable[int] | None = None,
                      heads: int | Iterable[int] | None = None) -> Iterator[dict[int, LayerWeights]]:
    """Yield a dict ``layer index → LayerWeights`` that each forward inside the block fills.

    The model runs its own kernel (SDPA under ``kernel="auto"``); the weights are recomputed beside it from the
    captured q and k. ``heads`` apply to every chosen layer. All hooks are removed on exit, also on errors.
    """
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"model {type(model).__name__} has no MultiHeadAttention layer")
    chosen = _select(None if layers is None else ([layers] if isinstance(layers, int) else list(layers)),
                     len(modules), "layers", f"{type(model).__name__}'s list of attention layers")
    heads_list = None if heads is None else ([heads] if isinstance(heads, int) else list(heads))
    per_layer = {}
    for i in chosen:
        name, module = modules[i]
        per_layer[i] = _select(heads_list, module.n_heads, "heads", f"attention layer {i} ({name})")
    names = [f"{modules[i][0]}.hook_{x}" for i in chosen for x in ("q", "k")]
    maps: dict[int, LayerWeights] = {}
    calls: dict[int, dict] = {}

    def before(index: int):
        def hook(_module, _args, kwargs):
            cache = kwargs.get("kv_cache")
            calls[index] = {**kwargs, "past": 0 if cache is None else cache.seen}

        return hook

    def after(index: int, cache: dict[str, torch.Tensor]):
        name, module = modules[index]

        def hook(_module, _args, _output):
            call = calls.pop(index)
            q, k = cache.pop(f"{name}.hook_q"), cache.pop(f"{name}.hook_k")
            with torch.no_grad():
                w = recompute(module, q, k, call, per_layer[index])
            maps[index] = LayerWeights(index=index, name=name, heads=tuple(per_layer[index]), weights=w,
                                       cross=call.get("context") is not None)

        return hook

    with ExitStack() as stack:
        cache = stack.enter_context(capture(model, names=names))
        handles = []
        try:
            for i in chosen:
                module = modules[i][1]
                handles.append(module.register_forward_pre_hook(before(i), with_kwargs=True))
                handles.append(module.register_forward_hook(after(i, cache)))
            yield maps
        finally:
            for handle in handles:
                handle.remove()
            calls.clear()
            cache.clear()
