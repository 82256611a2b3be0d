"""``ActivationCache``: what ``run_with_cache`` returns, answering TransformerLens names and ours.

    logits, cache = model.run_with_cache(ids)
    cache["blocks.0.attn.hook_z"]              # (B, T, H, Dh), TransformerLens's layout under its name
    cache["stack.blocks.0.attn.hook_z"]        # (B, H, T, Dh), ours under ours
    resid, labels = cache.accumulated_resid(apply_ln=True, return_labels=True)   # (L + 1, B, T, D)
    parts, labels = cache.decompose_resid(return_labels=True)                    # embed, pos_embed, 0_attn_out...
    heads, labels = cache.stack_head_results(return_labels=True)                 # (L·H, B, T, D), "L0H0", ...
    attrs = cache.logit_attrs(parts, tokens=ids[:, -1])                          # (components, B, T)

The residual methods follow TransformerLens's ``ActivationCache`` argument for argument (``layer``, ``incl_mid``,
``mlp_input``, ``mode``, ``apply_ln``, ``pos_slice``, ``incl_embeds``, ``incl_remainder``, ``return_labels``) and
its arithmetic: ``apply_ln`` centres (LayerNorm) and divides by the cached scale of the norm the stack feeds, without
the norm's weight and bias (TransformerLens assumes them folded into the next weights; our weights are not folded,
so these equal TransformerLens on an unprocessed model, ``enable_compatibility_mode(no_processing=True)``);
``accumulated_resid(apply_ln=True)`` up to the last layer runs the final norm itself, weight and bias included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from anatomy.inspection.tl_names import (
    BRIDGE_ALIAS,
    TLPoint,
    get_act_name,
    heads_last,
    model_parts,
    norm_kind,
    tl_points,
)
from anatomy.inspection.tl_weights import heads_in, tl_weight, w_o


def causal_scores_mask(
    model: nn.Module, scores: torch.Tensor, attention_mask: torch.Tensor | None
) -> torch.Tensor | None:
    """Boolean ``(B|1, 1, T, S)``, True where a query may see a key: causal (bottom-right aligned) for a language
    model, and the key padding of ``attention_mask (B, S)``; ``None`` when nothing is hidden."""
    t, s = scores.shape[-2], scores.shape[-1]
    parts = model_parts(model)
    allowed = None
    if parts is not None and parts.causal:
        q = torch.arange(t, device=scores.device)[:, None] + (s - t)  # (T, 1)
        allowed = (torch.arange(s, device=scores.device)[None, :] <= q)[None, None]  # (1, 1, T, S)
    if attention_mask is not None and attention_mask.shape[-1] == s:
        keys = attention_mask.bool()[:, None, None, :]  # (B, 1, 1, S)
        allowed = keys if allowed is None else allowed & keys
    return allowed


def _pos(x: torch.Tensor, pos_slice: Any, dim: int = -2) -> torch.Tensor:
    """TransformerLens's ``Slice``: None keeps all positions, an int picks one (the dim goes), else an index."""
    if pos_slice is None:
        return x
    index = [slice(None)] * x.dim()
    index[dim] = pos_slice
    return x[tuple(index)]


class ActivationCache(Mapping[str, torch.Tensor]):
    """Our recorded activations (``raw``, our names and layouts) and, computed when first read, the same under
    TransformerLens names and layouts (``tl_names.tl_points``)."""

    def __init__(
        self,
        model: nn.Module,
        raw: dict[str, torch.Tensor],
        *,
        attention_mask: torch.Tensor | None = None,
        keep: Callable[[str], bool] | None = None,
    ) -> None:
        self.model = model
        self.raw = raw
        self.attention_mask = attention_mask
        self.table = tl_points(model)
        self._keep = keep or (lambda _name: True)
        self._tl: dict[str, torch.Tensor] = {}
        parts = model_parts(model)
        self.n_layers = 0 if parts is None else len(parts.stack.blocks)
        self.n_heads = 0 if parts is None or not self.n_layers else parts.stack.blocks[0].attn.n_heads
        self.has_batch_dim = True

    # ----------------------------------------------------------------------------------------- the mapping

    def _available(self, point: TLPoint) -> bool:
        if point.kind == "result":
            return point.source.rsplit(".", 1)[0] + ".hook_z" in self.raw
        return point.source in self.raw and (not point.stream or point.stream in self.raw)

    def keys(self) -> list[str]:  # type: ignore[override]
        tl = [n for n, p in self.table.points.items() if self._available(p) and self._keep(n)]
        return tl + [n for n in self.raw if self._keep(n)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: object) -> bool:
        try:
            self[key]
        except KeyError:
            return False
        return True

    def _name(self, key: Any) -> str:
        if isinstance(key, tuple):
            if len(key) > 1 and isinstance(key[1], int) and key[1] < 0:
                key = (key[0], self.n_layers + key[1], *key[2:])
            return get_act_name(*key)
        if not isinstance(key, str):
            raise KeyError(f"cache keys are names or (name, layer[, layer_type]) tuples, got {key!r}")
        return key if key in self.raw or key in self.table.points else get_act_name(key)

    def __getitem__(self, key: Any) -> torch.Tensor:
        name = self._name(key)
        if name in self.raw and self._keep(name):
            return self.raw[name]
        point = self.table.points.get(name)
        if point is None and name in self.raw:
            raise KeyError(f"{name!r} was left out by names_filter")
        if point is None:
            if name in self.table.refused:
                raise KeyError(f"{name}: {self.table.refused[name]}")
            if name.endswith((".hook_in", ".hook_out", ".hook_hidden_states")) or name == "hook_unembed":
                if not name.startswith(("embeddings.", "stack.", "encoder.")):
                    raise KeyError(f"{name}: {BRIDGE_ALIAS}")
            if self.table.why_none is not None and name.split(".")[0] not in ("embeddings", "stack", "encoder"):
                raise KeyError(f"{name}: {self.table.why_none}")
            raise KeyError(
                f"{name!r} is not in the cache (neither a TransformerLens name of this model nor one of our hook names)"
            )
        if not self._keep(name):
            raise KeyError(f"{name!r} was left out by names_filter")
        if not self._available(point):
            raise KeyError(
                f"{name}: our hook point {point.source} did not fire in this run (kernel='sdpa' set by "
                "hand gives no scores or weights; use kernel='auto' or 'math')"
            )
        if name not in self._tl:
            self._tl[name] = self._compute(point)
        return self._tl[name]

    def _compute(self, point: TLPoint) -> torch.Tensor:
        if point.kind == "result":
            attn_name = point.source.rsplit(".", 1)[0]
            z = heads_last(self.raw[f"{attn_name}.hook_z"])  # (B, T, H, Dh)
            weight = w_o(self.model.get_submodule(attn_name))  # (H, Dh, D)
            with torch.set_grad_enabled(z.requires_grad):
                return torch.einsum("bthd,hdm->bthm", z, weight.to(z.dtype))  # (B, T, H, D)
        x = self.raw[point.source]
        if point.kind == "scores":
            allowed = causal_scores_mask(self.model, x, self.attention_mask)
            return x if allowed is None else x.masked_fill(~allowed, float("-inf"))
        if point.kind == "normalized":
            stream = self.raw[point.stream]  # (B, T, D)
            if norm_kind(self.model) == "LN":
                stream = stream - stream.mean(-1, keepdim=True)
            return stream * x  # our scale is 1/sqrt(var + eps): (B, T, D)
        if point.kind.startswith("mlp_pre:"):
            proj = point.kind.split(":")[1]
            linear: nn.Module = self.model.get_submodule(point.source.rsplit(".", 1)[0] + f".ffn.{proj}")
            with torch.set_grad_enabled(x.requires_grad):
                pre: torch.Tensor = linear(x)  # (B, T, F)
                return pre
        if point.kind.startswith("unrotated_"):
            attn = self.model.get_submodule(point.source.rsplit(".", 1)[0] + ".attn")
            w, b = heads_in(attn, point.kind[-1])  # (H|Hkv, D, Dh), (H|Hkv, Dh)
            with torch.set_grad_enabled(x.requires_grad):
                return torch.einsum("btd,hdk->bthk", x, w.to(x.dtype)) + b.to(x.dtype)  # (B, T, H|Hkv, Dh)
        return point.to_tl(x)

    def __repr__(self) -> str:
        return f"ActivationCache with keys {self.keys()}"

    # ------------------------------------------------------------------------------------ residual stream

    def _layer(self, layer: int | None) -> int:
        if layer is None or layer == -1:
            return self.n_layers
        if not 0 <= layer <= self.n_layers:
            raise ValueError(f"layer must be in 0..{self.n_layers} (or -1/None: all), got {layer}")
        return layer

    def accumulated_resid(
        self,
        layer: int | None = None,
        incl_mid: bool = False,
        apply_ln: bool = False,
        pos_slice: Any = None,
        mlp_input: bool = False,
        return_labels: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream at the input of each layer up to ``layer`` (then the final one): ``(n, B, T, D)``,
        labels ``0_pre, 1_pre, ..., final_post`` (``i_mid`` with ``incl_mid``; ``layer``'s own mid with
        ``mlp_input``)."""
        layer = self._layer(layer)
        parts, labels = [], []
        for i in range(layer + 1):
            if i == self.n_layers:
                parts.append(self["resid_post", self.n_layers - 1])
                labels.append("final_post")
                continue
            parts.append(self["resid_pre", i])
            labels.append(f"{i}_pre")
            if (incl_mid and i < layer) or (mlp_input and i == layer):
                parts.append(self["resid_mid", i])
                labels.append(f"{i}_mid")
        stack = torch.stack([_pos(p, pos_slice) for p in parts])  # (n, B, T, D)
        if apply_ln:
            stack = self.apply_ln_to_stack(
                stack, layer, mlp_input=mlp_input, pos_slice=pos_slice, recompute_ln=layer == self.n_layers
            )
        return (stack, labels) if return_labels else stack

    def decompose_resid(
        self,
        layer: int | None = None,
        mlp_input: bool = False,
        mode: str = "all",
        apply_ln: bool = False,
        pos_slice: Any = None,
        incl_embeds: bool = True,
        return_labels: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """The residual stream at the input of ``layer`` as the sum of its parts: ``embed``, ``pos_embed``, then
        ``i_attn_out`` and ``i_mlp_out`` per earlier layer (``mode`` ``"attn"`` or ``"mlp"`` keeps one kind)."""
        if mode not in ("all", "mlp", "attn"):
            raise ValueError(f"mode must be 'all', 'mlp' or 'attn', got {mode!r}")
        layer = self._layer(layer)
        parts, labels = [], []
        if incl_embeds:
            for name, label in (("hook_embed", "embed"), ("hook_pos_embed", "pos_embed")):
                if name in self:
                    parts.append(self[name])
                    labels.append(label)
        for i in range(layer):
            if mode != "mlp":
                parts.append(self["attn_out", i])
                labels.append(f"{i}_attn_out")
            if mode != "attn":
                parts.append(self["mlp_out", i])
                labels.append(f"{i}_mlp_out")
        if mlp_input and mode != "mlp":
            parts.append(self["attn_out", layer])
            labels.append(f"{layer}_attn_out")
        stack = torch.stack([_pos(p, pos_slice) for p in parts])  # (n, B, T, D)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input=mlp_input, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def compute_head_results(self) -> None:
        """TransformerLens computes ``hook_result`` here; ours is computed when first read."""

    def stack_head_results(
        self,
        layer: int = -1,
        return_labels: bool = False,
        incl_remainder: bool = False,
        pos_slice: Any = None,
        apply_ln: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, list[str]]:
        """Every head's output before ``layer``: ``(layer·H, B, T, D)``, labels ``L0H0, L0H1, ...``
        (``remainder``: the rest of the residual stream)."""
        layer = self._layer(layer)
        heads, labels = [], []
        for i in range(layer):
            heads.append(_pos(self["result", i, "attn"], pos_slice, dim=-3))  # (B, T, H, D)
            labels += [f"L{i}H{h}" for h in range(self.n_heads)]
        if heads:
            stack = torch.cat(heads, dim=-2).movedim(-2, 0)  # (layer·H, B, T, D)
            if incl_remainder:
                rest = _pos(self["resid_post", layer - 1], pos_slice) - stack.sum(0)
                stack = torch.cat([stack, rest[None]])
                labels.append("remainder")
        elif incl_remainder:
            stack = _pos(self["resid_post", layer - 1], pos_slice)[None]
            labels.append("remainder")
        else:
            empty = _pos(self["hook_embed"], pos_slice)
            stack = empty.new_zeros((0, *empty.shape))
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def apply_ln_to_stack(
        self,
        residual_stack: torch.Tensor,
        layer: int | None = None,
        mlp_input: bool = False,
        pos_slice: Any = None,
        batch_slice: Any = None,
        has_batch_dim: bool = True,
        recompute_ln: bool = False,
    ) -> torch.Tensor:
        """Each component as the norm feeding ``layer`` (``n_layers``: the final norm) would see it: centred
        (LayerNorm) and divided by the cached scale of the whole stream; with ``recompute_ln`` at the final layer,
        the final norm module itself on each component."""
        layer = self._layer(layer)
        if has_batch_dim and batch_slice is not None:
            residual_stack = _pos(residual_stack, batch_slice, dim=1)
        parts = model_parts(self.model)
        if parts is None:
            raise ValueError(f"apply_ln: {type(self.model).__name__} has no single stack of blocks")
        final = parts.stack.final_norm
        if layer == self.n_layers and final is None:
            return residual_stack  # no final norm (Post-Norm): the stream meets the unembedding as it is
        if recompute_ln and layer == self.n_layers:
            return torch.stack([final(c) for c in residual_stack])
        if norm_kind(self.model) == "LN":
            residual_stack = residual_stack - residual_stack.mean(-1, keepdim=True)
        key = (
            "ln_final.hook_scale" if layer == self.n_layers else f"blocks.{layer}.ln{2 if mlp_input else 1}.hook_scale"
        )
        scale = _pos(self[key], pos_slice)
        if batch_slice is not None and has_batch_dim:
            scale = _pos(scale, batch_slice, dim=0)
        return residual_stack / scale

    def logit_attrs(
        self,
        residual_stack: torch.Tensor,
        tokens: int | torch.Tensor,
        incorrect_tokens: int | torch.Tensor | None = None,
        pos_slice: Any = None,
        batch_slice: Any = None,
        has_batch_dim: bool = True,
    ) -> torch.Tensor:
        """How much each component of ``residual_stack`` ``(n, B, T, D)`` writes along the unembedding direction of
        ``tokens`` (an id, ``(B,)`` or ``(B, T)``), minus ``incorrect_tokens``'s when given, after the final norm's
        cached scale (``apply_ln_to_stack``): ``(n, B, T)``. Token strings need a tokenizer: give ids."""
        directions = self.tokens_to_residual_directions(tokens)
        if incorrect_tokens is not None:
            if torch.as_tensor(tokens).shape != torch.as_tensor(incorrect_tokens).shape:
                raise ValueError(
                    f"tokens and incorrect_tokens must have the same shape, got "
                    f"{tuple(torch.as_tensor(tokens).shape)} and "
                    f"{tuple(torch.as_tensor(incorrect_tokens).shape)}"
                )
            directions = directions - self.tokens_to_residual_directions(incorrect_tokens)
        scaled = self.apply_ln_to_stack(
            residual_stack, -1, pos_slice=pos_slice, batch_slice=batch_slice, has_batch_dim=has_batch_dim
        )
        if (
            has_batch_dim
            and not isinstance(batch_slice, int)
            and scaled.dim() == 4
            and directions.dim() == 2
            and directions.shape[0] == scaled.shape[1]
        ):
            directions = directions.unsqueeze(-2)  # (B, 1, D): one token per example, every position
        return (scaled * directions).sum(-1)

    def tokens_to_residual_directions(self, tokens: int | torch.Tensor) -> torch.Tensor:
        """``W_U[:, tokens]`` with the model dimension last: ``(D,)`` for one id, ``(..., D)`` for a tensor."""
        if isinstance(tokens, str):
            raise ValueError(f"tokens: give token ids (our models carry no tokenizer), not the string {tokens!r}")
        w_u = tl_weight(self.model, "W_U")  # (D, V)
        if isinstance(tokens, int) or (isinstance(tokens, torch.Tensor) and tokens.dim() == 0):
            return w_u[:, int(tokens)]  # (D,)
        return w_u[:, tokens].movedim(0, -1)  # (..., D)
