"""A fault found where the difference starts, when nothing reproduces the whole output.

Some modules put more than the attention inside ``forward``: a diffusion U-Net's ``AttentionBlock`` (DDPM as
published by labml.ai and re-used by pdearena) adds its input back after the output projection (``res += x``), which
the attention reference does not. If such a module also has a known pitfall (that AttentionBlock normalised its
weights over the queries, ``softmax(dim=1)`` on ``(B, T, S, H)``, until labml's "fix ddpm attn"), no fault of the
bug zoo, single or paired, reproduces the whole output, and the doctor used to say only "unexplained" and exit 0.

Here the comparison moves to the input of the output projection, the point where the attention's own work ends:
when the correct reference differs from the learner there and exactly one fault of the bug zoo reproduces the
learner's values there on every run, that fault is named, beside what it leaves unexplained after the projection
(the residual inside, say). When the learner's output is exactly its input plus the reference's (``x + attn(x)``),
that residual is the design, not a difference: the correct reference then matches (the design named beside it), and
a fault reproduces the whole output. A module whose difference starts after the projection and is not that residual
keeps its "unexplained".
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract import precision
from anatomy.doctor.contract.masks import max_diff
from anatomy.doctor.diagnosis.references import References, Scenario, Variant
from anatomy.doctor.diagnosis.sublayer import inject, split
from anatomy.doctor.diagnosis.verdicts import TOL, Candidate, Diagnosis, _num, names_of
from anatomy.doctor.loading.subject import CallError, CheckedModule
from anatomy.doctor.mapping.naming import Hypothesis

OUTPUT = "o_proj"  # the reference's output projection (attention: "o_proj"; a block: "attn.o_proj")


def _input_of(module: nn.Module, run: Any, outputs: list[torch.Tensor] | None = None) -> list[torch.Tensor]:
    """The first positional input of every call of ``module`` while ``run()`` runs (and its outputs, into
    ``outputs`` when given)."""
    seen: list[torch.Tensor] = []

    def hook(_m: nn.Module, args: tuple[object, ...], out: object) -> None:
        if args and isinstance(args[0], torch.Tensor):
            seen.append(args[0].detach())
        if outputs is not None and isinstance(out, torch.Tensor):
            outputs.append(out.detach())

    handle = module.register_forward_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return seen


def _distance(user: torch.Tensor, ref: torch.Tensor, sc: Scenario) -> float:
    if user.shape != ref.shape:
        return float("inf")
    rows = sc.rows if user.dim() == 3 and user.shape[:2] == sc.rows.shape else None
    return max_diff(user, ref, rows)


def fault_before_output(
    subject: CheckedModule,
    refs: References,
    hyp: Hypothesis,
    variant: Variant,
    hyp_index: int,
    scenarios: list[Scenario],
    faults: list[str],
    rel_tol: float,
    out_tol: float,
) -> dict[str, Any] | None:
    """``{"fault", "also", "distance_correct", "distance_fault", "where", "residual"}`` when the learner's input to
    its output projection differs from the correct reference's and the faults named (``fault``, then ``also``)
    reproduce it on every run (distances at that input; ``rel_tol`` scales with its size), or, with ``fault`` None,
    when the correct reference agrees there; else None. ``residual``: the distance of the learner's output less its
    input from that reference's output projection's output, when within ``out_tol`` (the residual inside explains
    the rest), else None."""
    name = next((r for r in hyp.modules if r == OUTPUT or r.endswith("." + OUTPUT)), None)
    user_named = dict(subject.module.named_modules())
    if name is None or hyp.modules[name] not in user_named:
        return None
    user_module = user_named[hyp.modules[name]]
    users: list[torch.Tensor] = []
    for sc in scenarios:
        try:
            seen = _input_of(user_module, lambda sc=sc: subject.run(sc.x, sc.user_mask))
        except CallError:
            return None
        if len(seen) != 1:  # called more than once, or not at all: no single point to compare
            return None
        users.append(seen[0].transpose(0, 1) if subject.seq_first and seen[0].dim() == 3 else seen[0])
    ref = refs.build(hyp_index, hyp, variant)
    ref_named = dict(ref.named_modules())
    inner = [m for path, m in ref_named.items() if path.endswith("." + name)]  # a reference wrapped in a norm
    ref_module = ref_named.get(name) or (inner[0] if len(inner) == 1 else None)
    if ref_module is None:
        return None
    tol = rel_tol * max(max(1.0, float(u.abs().nan_to_num(0).max())) for u in users)

    def at_input() -> float:
        worst = 0.0
        for sc, user in zip(scenarios, users):
            seen = _input_of(ref_module, lambda sc=sc: References.run(ref, sc))
            if len(seen) != 1:
                return float("inf")
            worst = max(worst, _distance(user, hyp.learner_features(seen[0]), sc))
        return worst

    def residual() -> float | None:
        """The learner's output less its input, against the reference's output projection's output (whatever
        the reference's variant adds after it): within ``out_tol``, or None."""
        worst = 0.0
        for sc in scenarios:
            projected: list[torch.Tensor] = []
            _input_of(ref_module, lambda sc=sc: References.run(ref, sc), projected)
            if len(projected) != 1 or projected[0].shape != sc.out.shape:
                return None
            worst = max(worst, max_diff(sc.out - sc.x, projected[0], sc.rows))
        return worst if worst <= out_tol else None

    correct = at_input()
    where = hyp.modules[name]
    if not correct > tol:  # the attention's own work agrees: only the residual inside may explain the rest
        return {"fault": None, "also": [], "distance_correct": correct, "where": where, "residual": residual()}
    hits: list[tuple[float, str]] = []
    for key in faults:
        try:
            with inject(ref, key):
                d = at_input()
        except ValueError:  # nothing to change in this reference
            continue
        if d <= tol:
            hits.append((d, key))
    names = list(dict.fromkeys(split(k)[0] for _, k in sorted(hits)))
    if not names:
        return None
    with inject(ref, sorted(hits)[0][1]):
        inside = residual()
    return {
        "fault": names[0],
        "also": names[1:],
        "distance_correct": correct,
        "distance_fault": min(d for d, _ in hits),
        "where": where,
        "residual": inside,
    }


RESIDUAL_INSIDE = "x + attention(x): the residual added inside the module (as DDPM's U-Net AttentionBlock does)"
RESIDUAL_INSIDE_PRE = "x + attention(norm(x)): the pre-norm and the residual inside the module"


def diagnose_before_output(
    subject: CheckedModule,
    refs: References,
    hyps: list[Hypothesis],
    best: Candidate,
    scenarios: list[Scenario],
    fault_names: list[str],
    cands: list[Candidate],
    sizes: tuple[float, float],
    nearest: list[dict[str, Any]],
) -> Diagnosis | None:
    """A fault that reproduces the input of the learner's output projection when nothing reproduces the output
    (``before_output``: a residual added inside the attention, say), named with what it leaves unexplained after
    the projection; None when there is none. ``sizes``: the output's scale and the tolerance on it."""
    scale, tol = sizes
    if refs.kind != "attention":  # a block's faults move its attention's input too: no single point to compare
        return None
    tried = []
    for c in sorted((c for c in cands if not c.faults), key=lambda c: c.distance):  # every mapping and variant
        one = fault_before_output(
            subject, refs, hyps[c.hyp], c.variant, c.hyp, scenarios, fault_names, precision.tol(TOL), tol
        )
        if one is not None:
            tried.append((c, one))
    # where the correct reference agrees under some mapping or variant, the difference starts after the attention:
    # a fault that agrees under another would be a false alarm, so none is named then
    tried.sort(key=lambda t: t[1]["fault"] is not None)
    if not tried or (tried[0][1]["fault"] is None and tried[0][1]["residual"] is None):
        return None
    best, found = tried[0]
    variant = refs.describe(best.variant)
    if found["residual"] is not None:  # x + attention(x): the design, named beside the reference
        # the output was checked as x + the projection's output: a norm the variant put after it is not there
        pre = variant.pop("norm_inside", None) is not None and best.variant[:1] == ("inner-pre",)
        variant["residual"] = RESIDUAL_INSIDE_PRE if pre else RESIDUAL_INSIDE
    if found["fault"] is None:
        return Diagnosis(
            "matches",
            hypothesis=hyps[best.hyp],
            variant=variant,
            distance_correct=found["residual"],
            scale=scale,
            key=(best.hyp, best.variant),
        )
    named: dict[str, Any] = {
        "fault": found["fault"],
        "faults": [found["fault"]],
        "also": found["also"],
        "hypothesis": hyps[best.hyp],
        "variant": variant,
        "scale": scale,
        "nearest": nearest,
        "key": (best.hyp, best.variant),
    }
    status = "fault" if not found["also"] else "ambiguous"
    if found["residual"] is not None:  # the fault and the residual reproduce the whole output
        return Diagnosis(status, distance_correct=best.distance, distance_fault=found["residual"], **named)
    at_output = [c for c in cands if c.hyp == best.hyp and c.variant == best.variant and names_of(c.faults)]
    left = min((c.distance for c in at_output if names_of(c.faults) == [found["fault"]]), default=best.distance)
    return Diagnosis(
        status,
        distance_correct=found["distance_correct"],
        distance_fault=found["distance_fault"],
        **named,
        unexplained={
            "after": found["where"],
            "scenarios": sorted(sc.name for sc in scenarios),
            "matched": [],
            "max_abs_diff": _num(left),
            "output_vs_reference": _num(best.distance),
        },
    )
