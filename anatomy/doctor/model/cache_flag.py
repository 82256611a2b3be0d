"""A forward with a ``use_cache`` flag (keys and values kept on the model between calls) against plain forwards:
from an empty cache, the prompt and one more token must give a plain forward's logits."""

from __future__ import annotations

import inspect

import torch

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import ForwardError
from anatomy.doctor.model.found import ModelFinding
from anatomy.doctor.model.generate import CACHE_REL

__anatomy_transparent__ = True


CACHE_FLAGS = ("use_cache",)  # forward(ids, use_cache=True): keys and values kept on the model between calls
RESETS = ("reset_kv_cache", "reset_cache", "clear_cache", "clear_kv_cache")


def cache_flag_findings(ctx: Context) -> list[ModelFinding]:
    """A forward with a ``use_cache`` flag and a method that empties the cache (LLMs-from-scratch's GPTModelKV):
    from an empty cache, the prompt through the cache must give the logits of a plain forward, and one more token
    through the cache the last logits of a plain forward on the longer sequence."""
    lm = ctx.lm
    try:
        names = inspect.signature(lm.module.forward).parameters
    except (TypeError, ValueError):
        names = {}  # type: ignore[assignment]
    flag = next((n for n in CACHE_FLAGS if n in names), None)
    reset = next((getattr(lm.module, n) for n in RESETS if callable(getattr(lm.module, n, None))), None)
    if flag is None or reset is None or lm.last_only or lm.labels_inside:
        ctx.skip("lm_cache", "forward has no use_cache flag with a reset", "forward 没有可重置的 use_cache 开关")
        return []
    ids = lm.ids()
    nxt = lm.ids(1, seed=5)
    try:
        full, longer = lm.logits(ids), lm.logits(torch.cat([ids, nxt], dim=1))[:, -1]
        reset()
        prefill = lm.logits(ids, **{flag: True})
        step = lm.logits(nxt, **{flag: True})[:, -1]
    except ForwardError as err:
        ctx.skip("lm_cache", f"forward with {flag}=True raised {err}", f"{flag}=True 时 forward 出错：{err}")
        return []
    finally:
        reset()
    for what, want, got in (("the prompt", full, prefill), ("one more token", longer, step)):
        scale = max(float(want.abs().max()), float(got.abs().max()), 1e-30)
        diff = float((want.double() - got.double()).abs().max())
        if not diff <= tol(CACHE_REL) * scale:  # NaN (a row masked whole) differs too
            rows = "" if want.dim() < 3 else _rows_that_differ(want, got)
            said = "NaN where it is not" if diff != diff else f"{diff:.3g}"  # NaN: a query left with no key
            return [
                ModelFinding(
                    "lm_cache",
                    "error",
                    f"{what} through the cache ({flag}=True, from an empty cache) gives other logits than a plain "
                    f"forward: they differ by {said} (logits up to {scale:.3g}){rows}",
                    f"{what if what == 'the prompt' else '再多一个 token'}经过缓存（{flag}=True，从空缓存开始）得到的 "
                    f"logits 与普通前向不同：相差 {said}（logits 最大 {scale:.3g}）{rows}",
                    {"flag": flag, "step": what, "max_abs_diff": diff, "max_abs_logit": scale},
                )
            ]
    ctx.found["cache_flag"] = flag
    return []


def _rows_that_differ(want: torch.Tensor, got: torch.Tensor) -> str:
    off = ((want.double() - got.double()).abs().amax(dim=(0, 2)) > tol(CACHE_REL) * float(want.abs().max())) | (
        got.isnan().any(dim=(0, 2))
    )
    at = [i for i, bad in enumerate(off.tolist()) if bad]
    return f"; positions {at}" if at else ""
