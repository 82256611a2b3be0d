"""Measurements on a model: loss per position, the residual stream's size and gradient, attention statistics,
a head ablated, one attention layer's saturation."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from anatomy.inspection import capture


@torch.no_grad()
def loss_per_position(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Next-token cross-entropy of a causal LM per position ``t`` (predicting token ``t + 1``), averaged over the
    batch: ``(T - 1,)``, NaN where every label is -100."""
    model.eval()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch.get("attention_mask")).logits
    labels = batch["labels"][:, 1:]
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2).float(), labels.clamp_min(0), reduction="none"
    )  # (B, T-1)
    valid = (labels != -100).float()
    return (ce * valid).sum(0) / valid.sum(0)  # 0/0 = NaN where nothing is scored


def hook_output(model: torch.nn.Module, name: str, **inputs: torch.Tensor) -> torch.Tensor:
    """The output of the one hook point ``name`` on a forward ``model(**inputs)`` without gradients (the mode,
    train or eval, is the caller's)."""
    with torch.no_grad(), capture(model, name) as cache:
        model(**inputs)
    return cache[name]


def residual_rms(
    model: torch.nn.Module, inputs: dict[str, torch.Tensor], pattern: str = "stack.blocks.*.hook_resid_post"
) -> list[float]:
    """RMS of the residual stream after each block (over tokens and features), one value per layer."""
    model.eval()
    with torch.no_grad(), capture(model, pattern) as cache:
        model(**inputs)
    return [t.float().pow(2).mean().sqrt().item() for t in cache.values()]


def residual_grad_norms(
    model: torch.nn.Module, batch: dict[str, torch.Tensor], pattern: str = "stack.blocks.*.hook_resid_pre"
) -> list[float]:
    """‖∂loss/∂x_l‖ for the residual stream entering each block (RMS per token), one value per layer: how much
    gradient reaches each depth. Parameter gradients are cleared afterwards."""
    model.eval()
    with capture(model, pattern, detach=False) as cache:
        loss = model(**batch).loss
        tensors = list(cache.values())
        for t in tensors:
            t.retain_grad()
        loss.backward()
    out = [t.grad.float().pow(2).mean().sqrt().item() if t.grad is not None else float("nan") for t in tensors]
    model.zero_grad(set_to_none=True)
    return out


def attention_entropy(weights: torch.Tensor, first: int, stop: int) -> torch.Tensor:
    """Normalised entropy ``H / log(n)`` of causal attention rows ``first..stop-1``, per head:
    ``weights (B, H, T, T)`` → ``(H,)``. Row ``t`` sees ``n = t + 1`` keys (``first >= 1``). 1 = uniform over the
    visible keys (diffuse), 0 = all the mass on one key."""
    if first < 1:
        raise ValueError(f"first must be >= 1 (row 0 sees a single key), got {first}")
    w = weights.double()[:, :, first:stop]  # (B, H, R, T)
    n = torch.arange(first, stop, dtype=torch.float64, device=weights.device) + 1
    h = -(w * w.clamp_min(1e-300).log()).sum(-1)  # (B, H, R)
    return (h / n.log()).mean(dim=(0, 2))


def offset_profile(weights: torch.Tensor, max_offset: int, rows: slice | None = None) -> torch.Tensor:
    """Mean attention mass at each backward offset ``0..max_offset`` (key = query - offset), per head:
    ``weights (B, H, T, T)`` → ``(H, max_offset + 1)``, over query rows ``rows`` (default: rows ``>= max_offset``)."""
    t = weights.shape[-1]
    q = torch.arange(t, device=weights.device)[rows if rows is not None else slice(max_offset, None)]
    out = [weights[:, :, q, q - k].mean(dim=(0, 2)) for k in range(max_offset + 1)]  # each (H,)
    return torch.stack(out, dim=-1).double()


@contextmanager
def ablate_head(attn: torch.nn.Module, head: int) -> Iterator[torch.nn.Module]:
    """Zero one head's output ``z`` (before the heads are merged) inside the block; restored on exit."""

    def hook(_module: torch.nn.Module, _args: Any, out: torch.Tensor) -> torch.Tensor:
        out = out.clone()
        out[:, head] = 0.0
        return out

    hook_z = attn.hook_z
    assert isinstance(hook_z, torch.nn.Module), "the attention module places a hook_z HookPoint"
    handle = hook_z.register_forward_hook(hook)
    try:
        yield attn
    finally:
        handle.remove()


def probe_attention(model: Any, batch: dict[str, torch.Tensor]) -> dict[str, float]:  # model: a DecoderLM
    """One forward/backward at this state: ``maxp`` (mean max attention prob over rows with >= 8 keys), ``gradq``
    (‖∂L/∂W_q‖), ``score_std`` (std of the scores the softmax sees, causal part) and ``passthrough``
    (‖∂L/∂scores‖ / ‖∂L/∂weights‖ on the visible entries: how much gradient the softmax lets through)."""
    attn = model.stack.blocks[0].attn
    model.zero_grad(set_to_none=True)
    names = ["stack.blocks.0.attn.hook_weights", "stack.blocks.0.attn.hook_scores"]
    with capture(model, names, detach=False) as cache:
        loss = model(**batch).loss
        weights, scores = (cache[n] for n in names)
        weights.retain_grad()
        scores.retain_grad()
        loss.backward()
    causal = torch.ones(scores.shape[-2:], dtype=torch.bool, device=scores.device).tril()
    q_grad, s_grad, w_grad = attn.q_proj.weight.grad, scores.grad, weights.grad
    assert q_grad is not None and s_grad is not None and w_grad is not None, "the backward reached them all"
    out = {
        "maxp": weights[:, :, 7:].detach().max(-1).values.mean().item(),
        "gradq": q_grad.norm().item(),
        "score_std": scores.detach()[..., causal].std().item(),
        "passthrough": (s_grad[..., causal].norm() / w_grad[..., causal].norm()).item(),
    }
    model.zero_grad(set_to_none=True)
    return out
