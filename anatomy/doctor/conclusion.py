"""The check's conclusion: the differential diagnosis of the learner's module (``diagnosis/``) and the findings, the
probes' with the diagnosis', each pointed at the learner's lines (``report/pointers.py``). ``check.py`` runs these
after it has found what the module is and how it is called."""

from __future__ import annotations

from typing import Any

import torch

from anatomy.doctor.contract.conventions import scenarios
from anatomy.doctor.contract.masks import MaskFormat, padding_keep
from anatomy.doctor.diagnosis import diagnose as dg
from anatomy.doctor.diagnosis.difference import raw_scores
from anatomy.doctor.diagnosis.references import RES_POST, References, Scenario
from anatomy.doctor.diagnosis.verdict import SYMPTOM_PROBES, cause, diagnosis_findings, flow_finding
from anatomy.doctor.diagnosis.verdicts import Diagnosis
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.mapping.naming import Hypothesis
from anatomy.doctor.mapping.reading import mapping_found, required
from anatomy.doctor.probes.designs import named_design
from anatomy.doctor.probes.state import ProbeState
from anatomy.doctor.recording.dataflow import (
    about_the_mask,
    deviation_faults,
    mask_after_softmax_flow,
    record_masked,
    softmax_off_the_keys,
    unmapped,
)
from anatomy.doctor.report.findings import Finding
from anatomy.doctor.report.pointers import point

Design = tuple[Finding, str]  # a named design (probes/designs.py): its warning, and the diagnosis' reason


def diagnosis(
    state: ProbeState,
    refs: References,
    hyps: list[Hypothesis],
    complete: list[Hypothesis],
    found: dict[str, Any],
) -> tuple[Diagnosis, Design | None]:
    """The differential diagnosis (a second, causal reading when a fault that mixes tokens hid causality), a named
    design in place of "unexplained", and what the probes take from it (mapping, activation, the raw scores)."""
    subject, x, d, h = state.subject, state.x, state.d, state.h
    subject.stage = ("the differential diagnosis", "差分诊断")
    if complete:
        diag = dg.diagnose(subject, refs, complete, scenarios(state))
        if diag.status == "unexplained" and not state.causal and state.causal_mask is None:
            # a fault that mixes tokens also hides causality from the detection: try the causal reading
            alt = dg.diagnose(subject, refs, complete, scenarios(state, causal=True))
            if alt.status in ("fault", "ambiguous"):
                diag, state.causal = alt, True  # the probes then treat it as the decoder it is
                found["causal"] = {"value": True, "source": "diagnosis", "layout": None}
    else:
        miss = ", ".join(mp.missing(hyps[0], required(state.kind))) if hyps else "q_proj, k_proj, v_proj, o_proj"
        assert state.observation is not None  # set by check.py (_what_it_is)
        diag = Diagnosis("unavailable", unmapped(miss, state.observation))
    design = named_design(state)
    if design is not None and diag.status in ("unexplained", "unavailable"):  # named: the authors chose it
        diag = Diagnosis("unavailable", design[1])
    if state.window is not None and diag.status in ("matches", "fault", "ambiguous"):
        diag.variant["window"] = f"sliding window: each query sees itself and the {state.window - 1} tokens before it"
    if diag.hypothesis is not None:
        state.hyp = diag.hypothesis
        found["mapping"] = mapping_found(diag.hypothesis, [], refs.params, d, h)
        if state.parts is not None:
            state.found_block["activation"] = diag.variant.get("activation")
        if diag.status == "matches" or diag.status in ("fault", "ambiguous"):
            state.positional = diag.variant.get("positional")
        key = diag.key
        assert key is not None  # diagnose() sets it with every hypothesis
        ref = refs.build(key[0], diag.hypothesis, key[1])
        plain = Scenario("plain", x, None, state.causal, None, torch.ones(state.b, state.t, dtype=torch.bool))
        hyp = diag.hypothesis
        state.raw_scores = lambda: hyp.learner_heads(raw_scores(ref, plain))
    elif complete:
        state.hyp = complete[0]
    return diag, (design if design is not None and diag.reason == design[1] else None)


def pointed_findings(
    state: ProbeState, diag: Diagnosis, design: Design | None, findings: list[Finding]
) -> list[Finding]:
    """The probes' findings with the diagnosis' and a named design's, faults the recorded flow shows, each pointed
    at the learner's lines, and the symptoms a named fault explains."""
    subject, x, d, h = state.subject, state.x, state.d, state.h
    obs = state.observation
    assert obs is not None  # set by check.py (_what_it_is)
    placed = diag.variant.get("placement")
    if state.found_block.get("placement") in (None, "unknown") and (
        placed == RES_POST or placed and diag.status == "matches"
    ):
        state.found_block["placement"] = placed  # the probe knows pre and post of norm modules; the reference knew
    findings += diagnosis_findings(diag) + ([design[0]] if design is not None else [])
    if design is not None and design[0].evidence.get("design") == "attention_sub_layers":
        _mask_on_one_sub_layer(findings)
    named_faults = list(diag.faults) if diag.status in ("fault", "ambiguous") else []
    symptoms = any(f.severity == "error" and f.fault is None and f.probe in SYMPTOM_PROBES for f in findings)
    if not named_faults and symptoms:
        for fault, dev in deviation_faults(obs):  # the flow shows a known pitfall the comparison could not isolate
            findings.append(flow_finding(fault, dev))
            named_faults.append(fault)
    off_keys = softmax_off_the_keys(obs) if diag.status in ("unexplained", "unavailable") else None
    if off_keys is not None and "softmax_wrong_axis" not in named_faults:  # never a silent pass over the queries
        findings.append(flow_finding("softmax_wrong_axis", off_keys))
        named_faults.append("softmax_wrong_axis")
    for f in findings:  # a mask form that leaks beside the right one: its lines run only with that form
        form = f.evidence.get("form") if f.probe == "padding_leak" else None
        if form:
            keep, _ = padding_keep(state.b, state.t, state.causal)
            point([f], record_masked(subject, x, MaskFormat(form["sense"], form["layout"]).make(keep, x.dtype), d, h))
    masked = [f for f in findings if about_the_mask(f)]
    if masked and state.mask is not None:  # the masking lines run only when a mask is passed: record that forward
        keep, _ = padding_keep(state.b, state.t, state.causal)
        masked_rec = record_masked(subject, x, state.mask.make(keep, x.dtype), d, h)
        leak = any(f.probe == "padding_leak" and f.severity == "error" and f.fault is None for f in findings)
        after = (
            mask_after_softmax_flow(obs.rec, masked_rec) if leak and "mask_after_softmax" not in named_faults else None
        )
        if after is not None:  # named from the flow whatever the fill (a -inf after the softmax gives NaN)
            findings.append(flow_finding("mask_after_softmax", after))
            named_faults.append("mask_after_softmax")
            masked.append(findings[-1])
        point(masked, masked_rec)
    point(findings, obs.rec)  # the learner's lines behind each finding (pointers.py)
    if named_faults:
        for f in findings:  # the leaks and mixing the fault causes are its symptoms
            if f.fault is None and f.severity == "error":
                f.explained_by = cause(f.probe, named_faults)
    return findings


def _mask_on_one_sub_layer(findings: list[Finding]) -> None:
    """In a block of two attention sub-layers (diffusers' BasicTransformerBlock), the mask a caller passes reaches
    the first: the second attends over every token by design (it takes the context's own mask). Its leaks are said
    as warnings of that design, not errors of the code."""
    for f in findings:
        if f.probe in ("padding_leak", "causal_leak") and f.severity == "error" and f.fault is None:
            f.severity = "warning"
            f.en += (
                "; the block's second attention sub-layer does not take this mask (it attends over every token, "
                "as a cross-attention given no context does), so what it hides in the first leaks through the second"
            )
            f.zh += (
                "；这个 block 的第二个注意力子层不接收这个 mask（像没有 context 的交叉注意力那样关注所有 token），"
                "所以第一个子层遮住的内容会经由第二个子层泄漏"
            )
