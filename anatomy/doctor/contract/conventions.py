"""The conventions of the learner's module, found by calling it (``check.py`` runs this after the first call): is it
causal by itself, which mask does it take (sense and layout, every accepted layout probed for leaks), can it take a
causal one; and the runs the differential diagnosis compares (:func:`scenarios`)."""

from __future__ import annotations

from typing import Any

import torch

from anatomy.components.masks import sliding_window_mask
from anatomy.doctor.contract.masks import (
    causal_keep,
    dependency,
    discover_causal_format,
    discover_mask,
    leaking_forms,
    padding_keep,
)
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.diagnosis.references import Scenario
from anatomy.doctor.probes.state import ProbeState


def conventions(state: ProbeState, causal_flag: bool) -> dict[str, Any]:
    """Is the module causal by itself? Which mask does it take (sense, layout), and can it take a causal one?"""
    subject, x, base = state.subject, state.x, state.base
    shape_ = tuple(x.shape)
    subject.stage = ("causal detection (one token changed at a time)", "因果检测（每次改一个 token）")
    state.dep = dependency(subject, x) if bool(torch.isfinite(base).all()) else None
    detected = not causal_flag and state.dep is not None and looks_causal(state.dep)
    state.causal = causal_flag or detected
    mask: dict[str, Any] | None = None  # the "mask" entry of found (JSON)
    if subject.takes_mask:
        subject.stage = ("mask discovery", "mask 格式探测")
        cands = discover_mask(subject, x, base, shape_)
        best = cands[0]
        scale = max(1.0, float(base.abs().nan_to_num(0).max()))
        if subject.mask_tentative and not any(c.ok and c.effect > tol(1e-9) * scale for c in cands):
            tried = subject.call  # forward(x, *args) or forward(x, prev): nothing passed there acts as a mask
            subject.takes_mask = False
            subject.call = "forward(x)"
            subject.note(
                f"{tried}: no mask passed as the second argument changed the output, so the module "
                "is called without one (name the parameter `mask` if it takes one)",
                f"{tried}：作为第二个参数传入的任何 mask 都没有改变输出，因此调用时不传 mask"
                "（如果模块接受 mask，请把参数命名为 mask）",
            )
            return {
                "mask": None,
                "causal": {
                    "value": state.causal,
                    "source": "flag" if causal_flag else "detected" if detected else "none",
                    "layout": None,
                },
            }
        if not best.ok:
            mask = {"sense": None, "tried": len(cands), "last_error": cands[-1].reason}
        else:
            state.mask = best.fmt
            also = [
                c.fmt.sense
                for c in cands[1:]
                if c.ok
                and c.fmt.layout == best.fmt.layout
                and (c.effect > 0) == (best.effect > 0)
                and abs(c.leak - best.leak) <= 1e-12
            ]
            if not state.causal:
                subject.stage = ("causal mask discovery", "因果 mask 格式探测")
                state.causal_mask = discover_causal_format(subject, best.fmt, x, base, shape_)
            mask = {
                "sense": best.fmt.sense,
                "layout": best.fmt.layout,
                "also": list(dict.fromkeys(also)),
                "causal_layout": state.causal_mask.layout if state.causal_mask else None,
            }
            acting = [c for c in cands if c.ok and c.effect > tol(1e-9) * scale]
            mask["ignored"] = not acting  # no convention changes anything: the module ignores its mask
            if acting and all(c.leak > tol(1e-9) * scale for c in acting):  # no convention hides the padding
                mask["all_leak"] = True
                mask["leaks"] = [{"sense": c.fmt.sense, "layout": c.fmt.layout, "leak": c.leak} for c in acting]
                state.mask_leaks = mask["leaks"]
            state.mask_ignored = mask["ignored"]
            state.form_leaks = leaking_forms(cands, tol(1e-9) * scale)
            if state.form_leaks:
                mask["leaking_forms"] = [
                    {"sense": c.fmt.sense, "layout": c.fmt.layout, "leak": c.leak} for c in state.form_leaks
                ]
    source = "flag" if causal_flag else "detected" if detected else "mask" if state.causal_mask else "none"
    return {
        "mask": mask,
        "causal": {
            "value": state.causal,
            "source": source,
            "layout": state.causal_mask.layout if state.causal_mask else None,
        },
    }


def looks_causal(dep: torch.Tensor) -> bool:
    """Every output depends on every earlier token and on itself, never on a token two or more steps ahead: the
    dependence is lower-triangular (one step ahead is allowed: a causal mask off by one leaks the next token). Local
    mixing (a window over the neighbours) is not causal: it does not see the whole past."""
    t = dep.shape[0]
    if t < 4:
        return False
    far_future = torch.ones(t, t, dtype=torch.bool).triu(2)
    past = torch.ones(t, t, dtype=torch.bool).tril()
    return float(dep[far_future].max()) == 0.0 and float(dep[past].min()) > 0.0


def causal_window(dep: torch.Tensor | None) -> int | None:
    """The window ``w`` of a causal module that attends only to the last ``w`` tokens (sliding-window attention,
    Mistral's and Gemma's local layers): every output depends on itself and the ``w - 1`` tokens before it, and on
    nothing farther back or ahead (exactly: a masked key adds nothing). None for anything else, and when the window
    covers every token of the run."""
    if dep is None or dep.shape[0] < 4:
        return None
    t = dep.shape[0]
    gap = torch.arange(t)[:, None] - torch.arange(t)[None, :]  # query i minus key j
    if float(dep[gap < 0].max()) != 0.0:
        return None
    for w in range(2, t):
        if float(dep[(gap >= 0) & (gap < w)].min()) > 0.0 and float(dep[gap >= w].max()) == 0.0:
            return w
    return None


def scenarios(state: ProbeState, causal: bool | None = None) -> list[Scenario]:
    """The diagnosis' runs; ``causal=True``: the reference masks the future itself (a second reading of a module
    whose mixing hid its causality from the detection). A causal module seen to attend to a window of the last
    ``w`` tokens (:func:`causal_window`) is compared with the reference under that band (``state.window``)."""
    b, t = state.b, state.t
    causal = state.causal if causal is None else causal
    every = torch.ones(b, t, dtype=torch.bool)
    state.window = causal_window(state.dep) if causal else None
    band = None if state.window is None else sliding_window_mask(t, t, state.window)[None, None]  # (1, 1, T, T)
    out = [Scenario("plain", state.x, band, causal and band is None, None, every)]
    if state.mask is not None and not state.mask_ignored:  # an ignored mask is the padding probe's finding
        keep, _ = padding_keep(b, t, causal)  # the side the padding probe pads, so the two agree
        keys = keep[:, :1][:, None]
        out.append(
            Scenario(
                "padding",
                state.x,
                keys if band is None else keys & band,
                causal and band is None,
                state.mask.make(keep, state.x.dtype),
                keep[:, 0],
            )
        )
    if state.causal_mask is not None and not (causal and not state.causal):
        keep = causal_keep(b, t)
        out.append(Scenario("causal_mask", state.x, keep[0], False, state.causal_mask.make(keep, state.x.dtype), every))
    return out
