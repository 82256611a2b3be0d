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

Every kernel function has one signature, :class:`AttentionFunction`; a module passes every argument explicitly
and the function reads nothing else. A :class:`Wrapper` (the bug zoo's faults, the weight recorder) takes such a
function and returns one: it changes one thing around it (another scale, the output laid out differently, the
weights written down) and calls it; :func:`assemble` stacks a kernel and its wrappers into what a module calls.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, cast

import torch
import torch.nn.functional as F

from anatomy.components.masks import causal_mask
from anatomy.shapes import compute_dtype

log = logging.getLogger("anatomy")

Hook = Callable[[torch.Tensor], torch.Tensor]


Weights = tuple[torch.Tensor, torch.Tensor | None]  # (out (B, H, T, Dh), weights (B, H, T, S) or None)


class AttentionFunction(Protocol):
    """What a registry entry's ``fn`` is, and what a :class:`Wrapper` takes and returns: the attention arithmetic
    on heads already split (``q (B, H, T, Dh)``, ``k, v (B, Hkv, S, Dh)``), the mask already final (the forward's
    mask plan, ``AttentionContext.kernel_mask``). ``score_hook``, ``weight_hook`` and ``softcap`` are used by the
    kernels that materialise the scores (``math``, ``loop``); ``sdpa`` refuses them when they are not None.
    Returns ``(out (B, H, T, Dh), weights (B, H, T, S) or None)``."""

    def __call__(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        mask: torch.Tensor | None = None,
        is_causal: bool = False,
        scale: float,
        bias: torch.Tensor | None = None,
        value_bias: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        need_weights: bool = False,
        score_hook: Hook | None = None,
        weight_hook: Hook | None = None,
        softcap: float | None = None,
    ) -> Weights: ...


def repeat_kv(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """``(B, Hkv, S, Dh)`` → ``(B, H, S, Dh)``: each key/value head serves ``H // Hkv`` consecutive query heads."""
    b, hkv, s, dh = x.shape
    if hkv == n_heads:
        return x
    return x[:, :, None].expand(b, hkv, n_heads // hkv, s, dh).reshape(b, n_heads, s, dh)  # (B, H, S, Dh)


def full_mask(
    mask: torch.Tensor | None, is_causal: bool, t: int, s: int, device: torch.device | str | None
) -> torch.Tensor | None:
    """The caller's mask AND the (bottom-right aligned) causal mask, for a kernel function called on its own
    (``math_attention(q, k, v, is_causal=True)``). Inside a module the forward's mask plan
    (``AttentionContext.kernel_mask``) has folded the causal rule already and ``is_causal`` arrives False (or True
    only to SDPA's fused path), so no kernel builds a mask per layer."""
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


def math_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float,
    bias: torch.Tensor | None = None,
    value_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    score_hook: Hook | None = None,
    weight_hook: Hook | None = None,
    softcap: float | None = None,
    mask_step: Callable[..., torch.Tensor | None] = full_mask,
    softmax_step: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor] = masked_softmax,
) -> Weights:
    """All heads at once. ``mask_step(mask, is_causal, t, s, device)`` and ``softmax_step(scores, mask)`` are the
    two steps a bug-zoo fault may replace (anatomy.pitfalls); the defaults are the correct ones."""
    b, h, t, dh = q.shape
    s = k.shape[-2]
    k, v = repeat_kv(k, h), repeat_kv(v, h)  # (B, H, S, Dh)
    scores = scores_of(q, k, scale)  # (B, H, T, S)
    if softcap is not None:
        scores = soft_cap(scores, softcap)
    if bias is not None:
        scores = scores + bias
    if score_hook is not None:
        scores = score_hook(scores)
    weights = softmax_step(scores, mask_step(mask, is_causal, t, s, q.device)).to(v.dtype)  # (B, H, T, S)
    if weight_hook is not None:
        weights = weight_hook(weights)
    dropped = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    out = torch.matmul(dropped, v)  # (B, H, T, Dh)
    if value_bias is not None:
        out = out + torch.einsum("bhts,btsd->bhtd", dropped, value_bias.to(v.dtype))  # (B, H, T, Dh)
    return out, (weights if need_weights else None)


def loop_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float,
    bias: torch.Tensor | None = None,
    value_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    score_hook: Hook | None = None,
    weight_hook: Hook | None = None,
    softcap: float | None = None,
) -> Weights:
    """The post's description, one head at a time: for each head, its own Q_h K_h^T, softmax, and weights @ V_h."""
    b, h, t, dh = q.shape
    hkv, s = k.shape[1], k.shape[-2]
    full = full_mask(mask, is_causal, t, s, q.device)
    outs, all_weights = [], []
    for head in range(h):
        kv_head = head // (h // hkv)
        scores = scores_of(q[:, head], k[:, kv_head], scale)  # (B, T, S)
        if softcap is not None:
            scores = soft_cap(scores, softcap)
        if bias is not None:
            scores = scores + bias.expand(b, h, t, s)[:, head]
        head_mask = None if full is None else full.expand(b, h, t, s)[:, head]  # (B, T, S)
        w = masked_softmax(scores, head_mask).to(v.dtype)  # (B, T, S)
        all_weights.append(w)
        dropped = F.dropout(w, p=dropout_p) if dropout_p > 0 else w
        out = dropped @ v[:, kv_head]  # (B, T, Dh)
        if value_bias is not None:
            out = out + torch.einsum("bts,btsd->btd", dropped, value_bias.to(v.dtype))  # (B, T, Dh)
        outs.append(out)
    weights = torch.stack(all_weights, dim=1)  # (B, H, T, S)
    if score_hook is not None or weight_hook is not None:
        # hooks observe the stacked tensors; the loop itself is the teaching path, not an editing point
        if score_hook is not None:
            scores_all = scores_of(q, repeat_kv(k, h), scale)  # (B, H, T, S)
            scores_all = scores_all if softcap is None else soft_cap(scores_all, softcap)
            score_hook(scores_all + bias if bias is not None else scores_all)
        if weight_hook is not None:
            weight_hook(weights)
    return torch.stack(outs, dim=1), (weights if need_weights else None)  # (B, H, T, Dh)


def sdpa_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float,
    bias: torch.Tensor | None = None,
    value_bias: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    need_weights: bool = False,
    score_hook: Hook | None = None,
    weight_hook: Hook | None = None,
    softcap: float | None = None,
) -> Weights:
    if softcap is not None:
        raise ValueError(
            "kernel='sdpa' cannot soft-cap attention logits (attn_softcap); use kernel='math' "
            "(or 'auto', which picks 'math' when the logits are soft-capped)"
        )
    if need_weights or score_hook is not None or weight_hook is not None:
        raise ValueError(
            "kernel='sdpa' cannot return attention weights or fire score/weight hooks; "
            "use kernel='math' (or 'auto', which switches when weights are asked for)"
        )
    if value_bias is not None:
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
        scale=scale,
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


# --- wrappers: one change around the function in place ---------------------------------------------------------
# The steps a wrapper can take, innermost first. A module holds at most one wrapper per step (a second one of the
# same step takes the place of the first); wrappers of different steps compose, in this order whatever the order
# they came in:
#   arithmetic  the math kernel's arithmetic with one step changed (the bug zoo's mask and softmax faults); it
#               takes the place of the kernel's arithmetic, so a module resolves 'math' under it
#   record      the weights of chosen heads written down, then the function in place (inspection.weights)
#   scale       the function in place called with another scale (the bug zoo's scaling faults)
#   split       the projections laid out before the module's standard split (split_without_transpose): it acts on
#               the projections, not on this function (``before_split``), so QK-norm, RoPE and the cache see the
#               heads it makes
#   merge       the function's output laid out for the module's standard merge (merge_wrong_transpose)
WRAP_STEPS = ("arithmetic", "record", "scale", "split", "merge")


def _unchanged(inner: AttentionFunction) -> AttentionFunction:
    return inner


@dataclass(frozen=True)
class Wrapper:
    """One change around a module's attention function. ``wrap(inner)`` returns the function to call instead of
    ``inner`` (the kernel's, or the next wrapper's); ``fold_causal=False`` asks the mask plan to keep the causal
    rule apart (``is_causal`` True, for a fault that moves the diagonal); ``before_split(x (B, T, n·Dh), n)``
    rearranges each projection before the module's split (n = H for q, Hkv for k and v)."""

    name: str
    step: str  # one of WRAP_STEPS
    wrap: Callable[[AttentionFunction], AttentionFunction] = _unchanged
    fold_causal: bool = True
    before_split: Callable[[torch.Tensor, int], torch.Tensor] | None = None

    def __post_init__(self) -> None:
        if self.step not in WRAP_STEPS:
            raise ValueError(f"Wrapper step must be one of {', '.join(WRAP_STEPS)}, got {self.step!r}")


@dataclass(frozen=True)
class Resolved:
    """What a module calls for one kind of call: the kernel's function inside its wrappers, and what the mask plan
    must hand it (``ctx.kernel_mask(window, S, H, fold_causal, causal_flag and no bias)``)."""

    fn: AttentionFunction
    returns_weights: bool  # pass the score/weight hooks
    fold_causal: bool
    causal_flag: bool


def assemble(kernel: Kernel, wrappers: Sequence[Wrapper], args: Mapping[str, Any] | None = None) -> Resolved:
    """``kernel``'s function (with ``args`` bound, a module's ``kernel_args``) inside ``wrappers``, innermost
    first."""
    fn: AttentionFunction = cast(AttentionFunction, partial(kernel.fn, **args)) if args else kernel.fn
    for wrapper in wrappers:
        fn = wrapper.wrap(fn)
    return Resolved(fn, kernel.returns_weights, all(w.fold_causal for w in wrappers), kernel.causal_flag)


def _head_rows(x: torch.Tensor | None, heads: list[int]) -> torch.Tensor | None:
    """Keep ``heads`` on dim 1 of a tensor broadcastable to ``(B, H, T, S)`` (size-1 head dims broadcast)."""
    return x if x is None or x.shape[1] == 1 else x[:, heads]


def recorder(heads: Sequence[int], sink: Callable[[torch.Tensor], None]) -> Wrapper:
    """The ``record`` wrapper: ``sink`` receives the weights ``(B, len(heads), T, S)`` of query heads ``heads``,
    the math kernel's ``softmax(q k^T * scale + bias, masked)`` on exactly the q, k, mask, scale and bias the
    function in place receives; then that function runs, and its output is the call's: what runs is unchanged
    (SDPA under ``auto``; ``anatomy.inspection.weights.attention_weights``)."""
    rows = list(heads)

    def wrap(inner: AttentionFunction) -> AttentionFunction:
        def record(
            q: torch.Tensor,
            k: torch.Tensor,
            v: torch.Tensor,
            *,
            mask: torch.Tensor | None = None,
            is_causal: bool = False,
            scale: float,
            bias: torch.Tensor | None = None,
            value_bias: torch.Tensor | None = None,
            dropout_p: float = 0.0,
            need_weights: bool = False,
            score_hook: Hook | None = None,
            weight_hook: Hook | None = None,
            softcap: float | None = None,
        ) -> Weights:
            with torch.no_grad():
                k_sel = repeat_kv(k, q.shape[1])[:, rows]  # (B, h, S, Dh)
                _, weights = math_attention(
                    q[:, rows],
                    k_sel,
                    k_sel,
                    mask=_head_rows(mask, rows),
                    is_causal=is_causal,
                    scale=scale,
                    bias=_head_rows(bias, rows),
                    need_weights=True,
                    softcap=softcap,
                )  # output discarded
            assert weights is not None  # need_weights=True
            sink(weights)
            return inner(
                q,
                k,
                v,
                mask=mask,
                is_causal=is_causal,
                scale=scale,
                bias=bias,
                value_bias=value_bias,
                dropout_p=dropout_p,
                need_weights=need_weights,
                score_hook=score_hook,
                weight_hook=weight_hook,
                softcap=softcap,
            )

        return record

    return Wrapper("record", "record", wrap)


def entry(name: str) -> Kernel:
    """The registry entry ``name`` (one line naming the valid ones otherwise)."""
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid names: {', '.join(KERNEL_NAMES)}")
    return KERNELS[name]


class kernel_setting:  # noqa: N801 (used like ``property``)
    """A module attribute that chooses its kernel (``kernel``, ``kernel_args``): reading it gives the value, setting
    it stores the value and has the module resolve again (``MultiHeadAttention._resolve``), so a call never
    resolves; a value the module refuses leaves the old one in place."""

    def __init__(self, slot: str) -> None:
        self.slot = slot

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        return self if obj is None else obj.__dict__[self.slot]

    def __set__(self, obj: Any, value: Any) -> None:
        old = obj.__dict__[self.slot]
        obj.__dict__[self.slot] = value
        try:
            obj._resolve()
        except ValueError:
            obj.__dict__[self.slot] = old
            obj._resolve()
            raise


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
    if name not in KERNELS:
        raise ValueError(f"unknown kernel {name!r}; valid names: {', '.join(KERNEL_NAMES)}")
    kernel = KERNELS[name]
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
