"""One deliberately configurable math kernel: each knob reproduces one of the post's masking/scaling mistakes.

With every knob at its default it computes exactly what ``anatomy.components.kernels.math_attention`` computes
(tested), so a difference in a model's output is the knob's doing and nothing else.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from anatomy.components.kernels import repeat_kv
from anatomy.components.masks import combine


def faulty_attention(
    q, k, v, *, mask=None, is_causal=False, scale, bias=None, value_bias=None, dropout_p=0.0, need_weights=False,
    score_hook=None, weight_hook=None,
    fill: float = float("-inf"), guard: bool = True, after_softmax: bool = False, on_queries: bool = False,
    causal_offset: int = 0,
):
    """``fill``: value written into hidden scores; ``guard``: zero rows with no visible key; ``after_softmax``:
    softmax over everything, then zero the hidden weights (no renormalisation); ``on_queries``: a key-padding
    mask ``(B, 1, 1, S)`` applied to query rows instead; ``causal_offset``: the causal diagonal moved by this many
    positions (+1 lets each token see the next one)."""
    b, h, t, _ = q.shape
    s = k.shape[-2]
    k, v = repeat_kv(k, h), repeat_kv(v, h)  # (B, H, S, Dh)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, T, S)
    if bias is not None:
        scores = scores + bias
    if score_hook is not None:
        scores = score_hook(scores)
    if on_queries and mask is not None and mask.shape[-2] == 1 and s == t:
        mask = mask.transpose(-1, -2)  # (B, 1, T, 1): hides padded *queries*, every key stays visible
    causal = torch.ones(t, s, dtype=torch.bool, device=q.device).tril(s - t + causal_offset) if is_causal else None
    full = combine(mask, causal)
    dtype = torch.promote_types(scores.dtype, torch.float32)
    if full is None:
        weights = scores.to(dtype).softmax(-1)
    elif after_softmax:
        weights = scores.to(dtype).softmax(-1) * full  # rows no longer sum to 1
    else:
        scores = scores.masked_fill(~full, fill).to(dtype)
        if guard:
            row_has_key = full.any(-1, keepdim=True)
            scores = scores.masked_fill(~row_has_key, 0.0)
            weights = scores.softmax(-1).masked_fill(~full, 0.0)
        else:
            weights = scores.softmax(-1)
    weights = weights.to(v.dtype)  # (B, H, T, S)
    if weight_hook is not None:
        weights = weight_hook(weights)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v)  # (B, H, T, Dh)
    if value_bias is not None:
        out = out + torch.einsum("bhts,btsd->bhtd", dropped, value_bias.to(v.dtype))  # (B, H, T, Dh)
    return out, (weights if need_weights else None)
