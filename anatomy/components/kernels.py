"""Scaled dot-product attention kernels behind one registry.

All kernels compute the same function (Vaswani et al. 2017, eq. 1)::

    Attention(Q, K, V) = softmax(Q K^T * scale + bias, masked) V        scale = 1 / sqrt(Dh) by default

and differ only in *how*:

``loop``  one head at a time, literally as the post's §2.1 describes it. For teaching; slow.
``math``  all heads in one batched matmul → mask → softmax (float32) → matmul. Returns the weights and fires the
          score/weight hooks. Can add Shaw's relative *value* term.
``sdpa``  ``torch.nn.functional.scaled_dot_product_attention``: fused (flash / memory-efficient) where available,
          memory linear in S. Cannot return weights nor add a value term; it refuses those with a clear error.
``auto``  ``sdpa`` unless weights, a score/weight hook or a value term are asked for; then ``math`` (said once in
          the log). :func:`resolve` decides; a module asks once per kind of call and setting, never per call.

Every kernel takes ``q: (B, H, T, Dh)``, ``k, v: (B, Hkv, S, Dh)`` with ``H % Hkv == 0`` (grouped-query
attention: query head ``h`` uses key/value head ``h // (H // Hkv)``), a boolean ``mask`` broadcastable to
``(B, H, T, S)`` (True = may attend), ``is_causal``, a float ``bias`` broadcastable to ``(B, H, T, S)`` (ALiBi, T5,
Shaw's key term) and ``value_bias`` ``(B|1, T, S, Dh)`` (Shaw's value term). A query row that may attend to
nothing gets weights 0 and output 0 — never NaN — in every kernel and dtype, forward and backward.

``softcap`` (Gemma 2's attention logit soft-capping, ``math`` and ``loop`` only): the scaled scores become
``softcap * tanh(scores / softcap)`` before the bias and the mask, so no logit leaves ``(-softcap, softcap)``.

Every kernel function has one signature, :class:`AttentionFunction`: ``fn(q, k, v, args)``, with the one
definition of the step's arguments, :class:`AttentionArgs`; the function reads nothing else. The math kernel is
written as its two halves, :func:`math_scores` and :func:`weighted_values`, around the masked softmax.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F

from anatomy.components.masks import causal_mask
from anatomy.shapes import compute_dtype

log = logging.getLogger("anatomy")

Hook = Callable[[torch.Tensor], torch.Tensor]

Weights = tuple[torch.Tensor, torch.Tensor | None]  # (out (B, H, T, Dh), weights (B, H, T, S) or None)


@dataclass(kw_only=True)
class AttentionArgs:
    """Everything a kernel takes besides ``q (B, H, T, Dh)`` and ``k, v (B, Hkv, S, Dh)``: the one definition of the
    attention step's arguments, built by ``MultiHeadAttention`` once per call (its ``attend`` step fills in the mask
    plan's entry and the hooks) and by whoever calls a kernel on its own (``math_attention(q, k, v,
    AttentionArgs(scale=0.125, mask=keep))``). ``mask`` is final (a module's comes from the forward's mask plan,
    ``AttentionContext.kernel_mask``); ``score_hook``, ``weight_hook`` and ``softcap`` are used by the kernels that
    materialise the scores (``math``, ``loop``); ``sdpa`` refuses them when they are not None."""

    scale: float
    mask: torch.Tensor | None = None
    is_causal: bool = False
    bias: torch.Tensor | None = None
    value_bias: torch.Tensor | None = None
    dropout_p: float = 0.0
    need_weights: bool = False
    score_hook: Hook | None = None
    weight_hook: Hook | None = None
    softcap: float | None = None


class AttentionFunction(Protocol):
    """What a registry entry's ``fn`` is: ``fn(q, k, v, args)`` → ``(out (B, H, T, Dh), weights or None)``, the
    attention arithmetic on heads already split, reading nothing but its arguments."""

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, args: AttentionArgs, /) -> Weights: ...


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, Hkv, S, Dh)`` → ``(B, H, S, Dh)``: each key/value head serves ``H // Hkv`` consecutive query heads."""
    b, hkv, s, dh = x.shape
    if hkv == n_heads:
        return x
    return x[:, :, None].expand(b, hkv, n_heads // hkv, s, dh).reshape(b, n_heads, s, dh)  # (B, H, S, Dh)


def full_mask(
    mask: torch.Tensor | None, is_causal: bool, t: int, s: int, device: torch.device | str | None
) -> torch.Tensor | None:
    """The caller's mask AND the (bottom-right aligned) causal mask, for a kernel called on its own. In a module the
    mask plan (``AttentionContext.kernel_mask``) folded the causal rule in already: no kernel builds one per layer."""
    if not is_causal:
        return mask
    causal = causal_mask(t, s, device=device)  # (T, S)
    return causal if mask is None else mask & causal


def scores_of(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """``q k^T * scale`` for ``q: (..., T, Dh)``, ``k: (..., S, Dh)``. float16 tops out at 65504, so half-precision
    inputs are multiplied in float32 (as SDPA accumulates): a score of 1e5 stays finite and the softmax that follows
    sees the true value. Other dtypes multiply as they are; autocast is held off so it cannot cast the float32 copy
    back to float16."""
    if q.dtype != torch.float16:
        return torch.matmul(q, k.transpose(-2, -1)) * scale  # (..., T, S)
    with torch.autocast(q.device.type, enabled=False):
        return torch.matmul(q.float(), k.float().transpose(-2, -1)) * scale  # (..., T, S), float32


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The math kernel's softmax step: over the last dim in float32; hidden keys get exactly 0 and fully hidden
    rows are all 0."""
    scores = scores.to(compute_dtype(scores.dtype))
    if mask is None:
        return scores.softmax(-1)
    row_has_key = mask.any(-1, keepdim=True)  # (B|1, H|1, T, 1)
    scores = scores.masked_fill(~mask, float("-inf"))
    scores = scores.masked_fill(~row_has_key, 0.0)  # a row with no key: uniform here, zeroed below; no NaN
    return scores.softmax(-1).masked_fill(~mask, 0.0)


def soft_cap(x: torch.Tensor, cap: float) -> torch.Tensor:
    """``cap * tanh(x / cap)``: about ``x`` for ``|x| << cap``, never beyond ``cap`` (Gemma 2's logit soft-capping)."""
    return torch.tanh(x / cap) * cap


def math_scores(
    q: torch.Tensor,
    k: torch.Tensor,
    *,
    scale: float,
    softcap: float | None = None,
    bias: torch.Tensor | None = None,
    score_hook: Hook | None = None,
) -> torch.Tensor:
    """The math kernel's scores ``(B, H, T, S)``: ``q k^T * scale``, soft-capped, plus the bias, through the score
    hook; ``k`` already has one head per query head."""
    scores = scores_of(q, k, scale)  # (B, H, T, S)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if bias is not None:
        scores = scores + bias
    return scores if score_hook is None else score_hook(scores)


def weighted_values(
    weights: torch.Tensor,
    v: torch.Tensor,
    *,
    value_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    weight_hook: Hook | None = None,
) -> Weights:
    """The math kernel's output from its weights ``(B, H, T, S)`` (through the weight hook) and ``v (B, H, S, Dh)``:
    ``dropout(weights) v`` plus Shaw's value term."""
    if weight_hook is not None:
        weights = weight_hook(weights)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v)  # (B, H, T, Dh)
    if value_bias is not None:
        out = out + torch.einsum("bhts,btsd->bhtd", dropped, value_bias.to(v.dtype))  # (B, H, T, Dh)
    return out, (weights if need_weights else None)


def math_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    args: AttentionArgs,
) -> Weights:
    """All heads at once: scores, the masked softmax, the weighted values."""
    t, s = q.shape[-2], k.shape[-2]
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])  # (B, H, S, Dh)
    a = args
    scores = math_scores(q, k, scale=a.scale, softcap=a.softcap, bias=a.bias, score_hook=a.score_hook)  # (B, H, T, S)
    weights = masked_softmax(scores, full_mask(a.mask, a.is_causal, t, s, q.device)).to(v.dtype)  # (B, H, T, S)
    return weighted_values(
        weights,
        v,
        value_bias=a.value_bias,
        dropout_p=a.dropout_p,
        need_weights=a.need_weights,
        weight_hook=a.weight_hook,
    )


def loop_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    args: AttentionArgs,
) -> Weights:
    """The post's description, one head at a time: for each head, its own Q_h K_h^T, softmax, and weights @ V_h."""
    b, h, t, dh = q.shape
    hkv, s = k.shape[1], k.shape[-2]
    scale, bias, value_bias, dropout_p, softcap = args.scale, args.bias, args.value_bias, args.dropout_p, args.softcap
    full = full_mask(args.mask, args.is_causal, t, s, q.device)
    outs, all_weights = [], []
    for head in range(h):
        kv_head = head // (h // hkv)
        head_bias = None if bias is None else bias.expand(b, h, t, s)[:, head]
        scores = math_scores(q[:, head], k[:, kv_head], scale=scale, softcap=softcap, bias=head_bias)  # (B, T, S)
        head_mask = None if full is None else full.expand(b, h, t, s)[:, head]  # (B, T, S)
        w = masked_softmax(scores, head_mask).to(v.dtype)  # (B, T, S)
        all_weights.append(w)
        dropped = F.dropout(w, p=dropout_p) if dropout_p > 0 else w
        out = dropped @ v[:, kv_head]  # (B, T, Dh)
        if value_bias is not None:
            out = out + torch.einsum("bts,btsd->btd", dropped, value_bias.to(v.dtype))  # (B, T, Dh)
        outs.append(out)
    weights = torch.stack(all_weights, dim=1)  # (B, H, T, S)
    score_hook, weight_hook = args.score_hook, args.weight_hook
    if score_hook is not None or weight_hook is not None:
        # hooks observe the stacked tensors; the loop itself is the teaching path, not an editing point
        if score_hook is not None:
            scores_all = scores_of(q, repeat_kv(k, h), scale)  # (B, H, T, S)
            scores_all = scores_all if softcap is None else soft_cap(scores_all, softcap)
            score_hook(scores_all + bias if bias is not None else scores_all)
        if weight_hook is not None:
            weight_hook(weights)
    return torch.stack(outs, dim=1), (weights if args.need_weights else None)  # (B, H, T, Dh)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    args: AttentionArgs,
) -> Weights:
    mask, is_causal, bias, dropout_p = args.mask, args.is_causal, args.bias, args.dropout_p
    if args.softcap is not None:
        raise ValueError(
            "kernel='sdpa' cannot soft-cap attention logits (attn_softcap); use kernel='math' "
            "(or 'auto', which picks 'math' when the logits are soft-capped)"
        )
    if args.need_weights or args.score_hook is not None or args.weight_hook is not None:
        raise ValueError(
            "kernel='sdpa' cannot return attention weights or fire score/weight hooks; "
            "use kernel='math' (or 'auto', which switches when weights are asked for)"
        )
    if args.value_bias is not None:
        raise ValueError(
            "kernel='sdpa' cannot express Shaw relative attention's value term; "
            "use kernel='math' (or 'auto', which picks 'math' for positional='shaw')"
        )
    t, s = q.shape[-2], k.shape[-2]
    # A purely causal square mask reaches the fused kernel as is_causal (no T x S mask materialised).
    use_flag = is_causal and mask is None and bias is None and t == s
    full = None if use_flag else full_mask(mask, is_causal, t, s, q.device)
    attn_mask = full
    if bias is not None:
        attn_mask = bias.to(q.dtype)
        if full is not None:
            attn_mask = attn_mask.masked_fill(~full, float("-inf"))
    grouped = k.shape[1] != q.shape[1]
    if grouped and not native_gqa(q, k, v, attn_mask, dropout_p, use_flag):
        k, v, grouped = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1]), False
    out = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=attn_mask,
        dropout_p=dropout_p,
        is_causal=use_flag,
        scale=args.scale,
        enable_gqa=grouped,
    )  # (B, H, T, Dh)
    if full is not None:
        row_has_key = full.any(-1, keepdim=True)  # (B|1, H|1, T, 1), small
        # guarantee zeros on rows with no key. On CPU eager skips the copy when no such row exists; a compiled
        # graph cannot branch on values, and on a GPU reading the answer back would stall the queue, so they fill
        if q.device.type != "cpu" or torch.compiler.is_compiling() or not bool(row_has_key.all()):
            out = out.masked_fill(~row_has_key, 0.0)
    return out, None


def native_gqa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None, dropout_p: float, is_causal: bool
) -> bool:
    """Hand K/V with fewer heads than Q to SDPA as they are (``enable_gqa=True``), or repeat them to every query head
    first? On CPU: as they are (every CPU backend takes grouped heads). On CUDA only flash and cuDNN attention take
    grouped heads; the memory-efficient kernel refuses them, and flash takes no mask and cuDNN no float32. When
    neither fused kernel would run, a grouped call falls to the *math* backend, which materialises the (B, H, T, S)
    scores: repeating K/V (one copy the size of Q each) lets the memory-efficient kernel run instead.
    benchmarks/gqa_sdpa.py measures both ways."""
    if q.device.type != "cuda":
        return True
    flash_could = q.dtype in (torch.float16, torch.bfloat16) and attn_mask is None  # the rule without probing
    if torch.compiler.is_compiling():  # no probing inside a graph
        return flash_could
    cuda = torch.backends.cuda
    try:
        params = cuda.SDPAParams(q, k, v, attn_mask, dropout_p, is_causal, True)
        flash, cudnn = cuda.flash_sdp_enabled(), cuda.cudnn_sdp_enabled()  # type: ignore[no-untyped-call]
        return bool(
            (flash and cuda.can_use_flash_attention(params)) or (cudnn and cuda.can_use_cudnn_attention(params))
        )
    except (AttributeError, TypeError, RuntimeError):  # a torch without the probes
        return flash_could


@dataclass(frozen=True)
class Kernel:
    """A registry entry: ``fn`` is the arithmetic (an :class:`AttentionFunction`); the capability flags say what
    ``auto`` and the error messages need to know, and ``causal_flag`` what the mask plan hands it (SDPA's
    ``is_causal`` flag instead of a causal mask on square calls with no bias)."""

    name: str
    fn: AttentionFunction
    returns_weights: bool
    supports_value_bias: bool
    causal_flag: bool = False


KERNELS: dict[str, Kernel] = {
    "loop": Kernel("loop", loop_attention, returns_weights=True, supports_value_bias=True),
    "math": Kernel("math", math_attention, returns_weights=True, supports_value_bias=True),
    "sdpa": Kernel("sdpa", sdpa_attention, returns_weights=False, supports_value_bias=False, causal_flag=True),
}
KERNEL_NAMES = (*KERNELS, "auto")  # the names a user chooses; :func:`register` adds more


def entry(name: str) -> Kernel:
    """The registry entry ``name`` (one line naming the valid ones otherwise)."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid names: {', '.join(KERNEL_NAMES)}")
    return KERNELS[name]


def register(kernel: Kernel) -> Kernel:
    """Add an entry (a kernel of your own: ``fn`` an :class:`AttentionFunction`); ``resolve`` then finds it by
    name."""
    KERNELS[kernel.name] = kernel
    return kernel


_said: set[str] = set()


def resolve(
    name: str, *, need_weights: bool, value_bias: bool, hooked: bool, where: str = "", softcap: bool = False
) -> Kernel:
    """Pick the kernel for one kind of call. ``auto`` → ``sdpa`` unless weights/hooks/value term/soft-cap need
    ``math``."""
    if not (need_weights or hooked or value_bias or softcap):  # the usual call, decided at once
        hit = KERNELS.get("sdpa" if name == "auto" else name)
        if hit is not None:
            return hit
    if name == "auto":
        reasons = [
            r
            for r, on in (
                ("weights were requested", need_weights),
                ("a score/weight hook is attached", hooked),
                ("the positional scheme adds a value term", value_bias),
                ("the attention logits are soft-capped", softcap),
            )
            if on
        ]
        if not reasons:
            return KERNELS["sdpa"]
        key = f"{where}:{reasons[0]}"
        if key not in _said:
            _said.add(key)
            log.info("attention %s: kernel 'auto' uses 'math' because %s", where or "", reasons[0])
        return KERNELS["math"]
    kernel = entry(name)
    if value_bias and not kernel.supports_value_bias:
        raise ValueError(
            f"kernel={name!r} cannot express Shaw relative attention's value term; use kernel='math' or 'auto'"
        )
    if softcap and not kernel.returns_weights:  # the fused kernel has no place for tanh between matmul and softmax
        raise ValueError(
            f"kernel={name!r} cannot soft-cap attention logits (attn_softcap); use kernel='math' or 'auto'"
        )
    if (need_weights or hooked) and not kernel.returns_weights:
        raise ValueError(
            f"kernel={name!r} cannot return attention weights or fire score/weight hooks; use kernel='math' or 'auto'"
        )
    return kernel
