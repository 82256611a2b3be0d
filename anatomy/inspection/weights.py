"""Attention weights while the model keeps running the fused kernel.

``F.scaled_dot_product_attention`` never materialises the ``(B, H, T, S)`` weights; switching the whole model to
the math kernel to see them changes what runs (and costs memory in every layer). Instead, the chosen layers' own
``attend`` step is wrapped on those instances (:func:`recorder`, through ``anatomy.components.wrapping``): it
receives exactly what the layer's kernel receives (q ``(B, H, T, Dh)`` and k ``(B, Hkv, S, Dh)`` after RoPE and with
the KV cache, the forward context's mask for this layer, the scale, the score bias), computes
:func:`anatomy.components.kernels.math_attention`'s ``softmax(q k^T * scale + bias, masked)`` for the chosen heads
only, and then runs the layer's own step for the output. No score/weight hook is attached, so ``kernel="auto"``
stays on SDPA::

    with attention_weights(model, layers=[0], heads=[1, 3]) as maps:
        model(ids)
    maps[0].weights                      # (B, 2, T, S): heads 1 and 3 of the first attention layer

Layers are numbered in the order of :func:`attention_modules` (module order: for seq2seq models the encoder's
layers, then each decoder block's self- and cross-attention). One forward inside the block fills the maps; a
later forward overwrites them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from anatomy.components import kernels, wrapping
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.context import AttentionContext


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


def _head_rows(x: torch.Tensor | None, heads: list[int]) -> torch.Tensor | None:
    """Keep ``heads`` on dim 1 of a tensor broadcastable to ``(B, H, T, S)`` (size-1 head dims broadcast)."""
    return x if x is None or x.shape[1] == 1 else x[:, heads]


def recorder(heads: Sequence[int], sink: Callable[[torch.Tensor], None]) -> wrapping.Wrapper:
    """A wrapper of ``MultiHeadAttention.attend`` (step ``observe``): ``sink`` receives the weights
    ``(B, len(heads), T, S)`` of query heads ``heads``, the math kernel's ``softmax(q k^T * scale + bias, masked)``
    on exactly the q, k, mask, scale and bias the step receives; then the step in place runs, and its output is the
    call's: what runs is unchanged (SDPA under ``auto``)."""
    rows = list(heads)

    def wrap(inner: Callable[..., kernels.Weights]) -> Callable[..., kernels.Weights]:
        def record(
            self: MultiHeadAttention,
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            ctx: AttentionContext,
            args: kernels.AttentionArgs,
        ) -> kernels.Weights:
            mask, is_causal = self.kernel_mask(ctx, k.shape[-2])
            with torch.no_grad():
                k_sel = kernels.repeat_kv(k, q.shape[1])[:, rows]  # (B, h, S, Dh)
                mine = kernels.AttentionArgs(
                    mask=_head_rows(mask, rows),
                    is_causal=is_causal,
                    scale=args.scale,
                    bias=_head_rows(args.bias, rows),
                    need_weights=True,
                    softcap=self.softcap,
                )
                _, weights = kernels.math_attention(q[:, rows], k_sel, k_sel, mine)  # output discarded
            assert weights is not None  # need_weights=True
            sink(weights)
            return inner(self, q, k, v, ctx, args)

        return record

    return wrap


@contextmanager
def attention_weights(
    model: nn.Module, *, layers: int | Iterable[int] | None = None, heads: int | Iterable[int] | None = None
) -> Iterator[dict[int, LayerWeights]]:
    """Yield a dict ``layer index → LayerWeights`` that each forward inside the block fills.

    The model runs its own kernel (SDPA under ``kernel="auto"``); the weights are computed beside it from what
    that kernel receives. ``heads`` apply to every chosen layer. Each layer's kernel is restored on exit, also on
    errors.
    """
    modules = attention_modules(model)
    if not modules:
        raise ValueError(f"model {type(model).__name__} has no MultiHeadAttention layer")
    chosen = _select(
        None if layers is None else ([layers] if isinstance(layers, int) else list(layers)),
        len(modules),
        "layers",
        f"{type(model).__name__}'s list of attention layers",
    )
    heads_list = None if heads is None else ([heads] if isinstance(heads, int) else list(heads))
    per_layer = {}
    for i in chosen:
        name, module = modules[i]
        per_layer[i] = _select(heads_list, module.n_heads, "heads", f"attention layer {i} ({name})")
    maps: dict[int, LayerWeights] = {}
    pending: dict[int, torch.Tensor] = {}  # a layer's weights count once its forward has finished

    def sink(index: int) -> Callable[[torch.Tensor], None]:
        def record(weights: torch.Tensor) -> None:
            pending[index] = weights

        return record

    def done(index: int, name: str) -> Callable[..., None]:
        def hook(_module: nn.Module, _args: Any, kwargs: dict[str, Any], _out: Any) -> None:
            if index in pending:  # keys from the encoder memory: the call had a context (as forward decides)
                maps[index] = LayerWeights(
                    index=index,
                    name=name,
                    heads=tuple(per_layer[index]),
                    weights=pending.pop(index),
                    cross=kwargs.get("context") is not None,
                )

        return hook

    undo, handles = [], []
    try:
        for i in chosen:
            name, module = modules[i]
            undo.append(wrapping.wrap_method(module, "attend", "observe", recorder(per_layer[i], sink(i))))
            handles.append(module.register_forward_hook(done(i, name), with_kwargs=True))
        yield maps
    finally:
        for handle in handles:
            handle.remove()
        for put_back in reversed(undo):
            put_back()
        pending.clear()
