"""``check(target, kind="lm")``: the doctor on a whole language model (docs/doctor.md, "Checking a whole model").

    from anatomy.doctor import check
    report = check("my_gpt.py:GPT")            # found to be a model by behaviour, or kind="lm"
    report.faults                              # {"targets_shifted_twice"}, block faults folded across layers
    report.layers                              # one row per block

Build the model (``build.py``), find its forward's contract (``contract.py``), find its blocks and diagnose each
with the block doctor (``blocks.py``, findings folded across layers), then the model-level probes, each a pitfall
record of kind "model" (``anatomy/pitfalls/catalog_model.py``). A probe that cannot decide says so in
``skipped``; it never guesses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

from anatomy.doctor.contract.precision import floor_for, tolerating
from anatomy.doctor.loading.subject import CheckError
from anatomy.doctor.model import cache_flag, causal, generate, hygiene, loss, padding, positions
from anatomy.doctor.model.blocks import BlockCheck, Stack, capture, diagnose_layers, find_stack
from anatomy.doctor.model.build import Sizes, build_model, infer_sizes
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import BATCH, LM, ForwardError, first_call
from anatomy.doctor.model.found import ModelFinding, fold
from anatomy.doctor.model.report import ModelReport
from anatomy.doctor.report.findings import Report

__anatomy_transparent__ = True

Probe = Callable[[Context], list[ModelFinding]]


def check_model(
    target: Any,
    *,
    factory: str | None = None,
    sizes: Sizes | None = None,
    seed: int = 0,
    timeout: float | None = None,
    block_check: BlockCheck,
) -> ModelReport:
    """The model's report (the module docstring); :class:`CheckError` when it cannot be built or called.
    ``block_check``: the block doctor's ``check`` (``anatomy.doctor.check.check``), run on each block."""
    sizes = sizes or Sizes()
    problem = None
    if sizes.d_model % sizes.n_heads:
        problem = f"d_model ({sizes.d_model}) must be divisible by n_heads ({sizes.n_heads})"
    elif sizes.block_size < 3:
        problem = f"block_size must be at least 3, got {sizes.block_size}"
    if problem is not None:
        err = CheckError(problem)
        err.model_built = True  # type: ignore[attr-defined]  # the caller's sizes: said, not handed to the block doctor
        raise err
    try:
        lm, stack, base = _built(target, factory, sizes, seed, timeout)
    except CheckError as small:
        if sizes != Sizes() or not getattr(small, "model_built", False):
            raise
        try:  # a model with a width of its own (nanochat's smear gate reads 24 channels): checked wider
            lm, stack, base = _built(target, factory, WIDER, seed, timeout)
        except CheckError:
            raise small from None
        lm.notes.append(
            {
                "en": f"at d_model = {sizes.d_model} the model fails ({_cause(small)}): checked at d_model = "
                f"{WIDER.d_model}",
                "zh": f"d_model = {sizes.d_model} 时模型出错（{_cause(small)}）：改用 d_model = {WIDER.d_model} 检查",
            }
        )
    calls = None
    if stack is not None:
        try:
            calls = capture(lm, stack, lm.ids())
        except ForwardError:
            calls = None
    ctx = Context(lm, stack, calls, base, block_check)
    with tolerating(_floor(lm)):  # a model that computes in float32 somewhere is compared at that precision
        return _report(ctx)


HALF = (torch.bfloat16, torch.float16)


def _floor(lm: LM) -> float:
    """The tolerance floor of the dtypes the model computed in. A half-precision island (Falcon's ALiBi slopes
    multiplied in bfloat16) would raise it to 300 bfloat16 epsilons, 2.3 relative, where every comparison passes
    (every loss shift "matched", no position "moved" anything): the model-level probes compare outputs of the same
    model, whose rounding is the same in both, so they keep float32's floor and the report says so."""
    half = sorted(str(d).removeprefix("torch.") for d in lm.dtypes if d in HALF)
    if not half:
        return floor_for(lm.dtypes)
    lm.notes.append(
        {
            "en": f"parts of the model compute in {', '.join(half)}: its outputs are compared with each other at "
            "float32's precision (a difference that rounding alone makes could show)",
            "zh": f"模型有部分计算使用 {', '.join(half)}：它的各次输出之间按 float32 的精度比较"
            "（仅由舍入造成的差异也可能显现）",
        }
    )
    return floor_for((set(lm.dtypes) - set(HALF)) | {torch.float32})


WIDER = Sizes(d_model=64)  # the sizes tried when the standard ones fail (a model that needs a wider residual stream)


def _built(
    target: Any, factory: str | None, sizes: Sizes, seed: int, timeout: float | None
) -> tuple[LM, Stack | None, torch.Tensor]:
    """The model built at ``sizes``, its stack and its first logits; :class:`CheckError` when it cannot be built
    or called (``model_built``: it was built as a language model, and its own error is said)."""
    module, label = build_model(target, factory, sizes, seed, timeout)
    stack = find_stack(module, sizes.d_model)
    sizes = infer_sizes(module, sizes, len(stack.blocks) if stack is not None else None)
    lm = LM(module, label, sizes, timeout, seed)
    if isinstance(target, (str, os.PathLike)):
        lm.source_file = str(target).rpartition(":")[0] if ":" in str(target) else str(target)
    try:
        return lm, stack, _first_call(lm)
    except CheckError as err:  # said as the model's own error when it was built as one
        err.model_built = any(isinstance(m, torch.nn.Embedding) for m in module.modules())  # type: ignore[attr-defined]
        raise


def _first_call(lm: LM) -> torch.Tensor:
    """The plain logits at the probes' length, in float64 or else in float32 (a model that insists on its dtype:
    ``assert self.cos.dtype == torch.float32``), else the float64 error stands."""
    try:
        return _first_call_at_lengths(lm)
    except CheckError as wide:
        first = wide
    try:
        lm.module.float()
    except Exception:  # noqa: BLE001 - a model that cannot be moved: the float64 error stands
        raise first from None
    lm.dtype = torch.float32
    try:
        base = _first_call_at_lengths(lm)
    except CheckError:
        raise first from None
    lm.dtypes.add(torch.float32)  # compared at float32's precision
    lm.notes.append(
        {
            "en": f"forward fails in float64 ({_cause(first)}): the model runs in float32 and is compared at float32's "
            "precision",
            "zh": f"float64 下 forward 出错（{_cause(first)}）：模型以 float32 运行，按 float32 的精度比较",
        }
    )
    return base


def _cause(err: CheckError | str) -> str:
    """What the learner's code raised, out of the doctor's sentence around it."""
    text = str(err)
    return text.split(" raised ", 1)[1].split("; expected", 1)[0] if " raised " in text else text


def _first_call_at_lengths(lm: LM) -> torch.Tensor:
    """The plain logits at the probes' length; a model that raises there but not at block_size is probed at
    block_size (the mask-lengths probe says why), else the first error stands."""
    try:
        return first_call(lm)
    except CheckError as short:
        first = short
    lm.full_length_only = True
    try:
        base = first_call(lm)
    except CheckError:
        lm.full_length_only = False
        raise first from None
    lm.notes.append(
        {
            "en": f"forward raises below T = block_size = {lm.sizes.block_size}: every probe runs at that length",
            "zh": f"T 小于 block_size = {lm.sizes.block_size} 时 forward 出错：所有探针都在这个长度上运行",
        }
    )
    return base


def _report(ctx: Context) -> ModelReport:
    lm, stack = ctx.lm, ctx.stack
    findings: list[ModelFinding] = []
    passed = []
    for name, probe in PROBES:
        got = probe(ctx)
        findings += got
        if not got and not any(s["probe"] == name for s in ctx.skipped):
            passed.append(name)
    layers, block_findings, diag = _blocks(ctx)
    for name, probe in AFTER_BLOCKS:
        got = probe(ctx)
        findings += got
        if not got and not any(s["probe"] == name for s in ctx.skipped):
            passed.append(name)
    findings = _explain(findings + block_findings)
    found = {
        "call": f"forward(ids{_targets_shown(lm)})",
        "returns": lm.returns,
        "targets": lm.target_arg,
        "stack": None
        if stack is None
        else {"path": stack.path, "count": len(stack.blocks), "class": type(stack.blocks[0]).__name__},
        "call_notes": lm.notes,
        **ctx.found,
    }
    settings = {
        **{k: lm.sizes.value(k) for k in ("vocab_size", "d_model", "n_heads", "n_layers", "block_size")},
        "head_dim": lm.sizes.d_model // lm.sizes.n_heads,
        "batch": BATCH,
        "seq": lm.seq,
        "seed": lm.seed,
        "dtype": str(lm.dtype).removeprefix("torch."),
    }
    return ModelReport(lm.label, "lm", settings, found, list(findings), passed, ctx.skipped, diag, layers)


def _targets_shown(lm: LM) -> str:
    if lm.target_arg is None:
        return ")"[:0]
    if lm.labels_inside:
        return f", {lm.target_arg}=True"
    return ", targets" if lm.target_arg == "" else f", {lm.target_arg}=targets"


def _blocks(ctx: Context) -> tuple[list[dict[str, Any]], list[ModelFinding], dict[str, Any]]:
    """Each block through the block doctor: the rows of ``layers``, the folded findings, the diagnosis line."""
    stack = ctx.stack
    if stack is None:
        ctx.skip("lm_blocks", "no stack of repeated blocks found", "没有找到重复的 block 堆叠")
        return [], [], {"status": "unavailable", "reason": "no stack of repeated blocks"}
    leaky = ctx.found.get("leaking_layers") or []
    unmasked = frozenset(leaky) if len(leaky) < len(stack.blocks) else frozenset()
    reports = diagnose_layers(ctx.lm, stack, ctx.block_check, unmasked)
    ctx.layer_reports = reports
    rows = []
    for i, (block, rep) in enumerate(zip(stack.blocks, reports)):
        row: dict[str, Any] = {"index": i, "path": stack.name(i), "class": type(block).__name__}
        if isinstance(rep, Report):
            row.update(status="checked", faults=sorted(rep.faults), diagnosis=rep.diagnosis.get("status"))
            row["variant"] = rep.diagnosis.get("variant") or {}  # the reference's design that matched (or nearest)
            row["errors"] = len(rep.errors)
        else:
            row.update(status=f"not checked: {rep}", faults=[], diagnosis=None, errors=0)
        rows.append(row)
    checked = [r for r in reports if isinstance(r, Report)]
    if len(checked) < len(reports):
        ctx.skip(
            "lm_blocks",
            f"{len(reports) - len(checked)} of {len(reports)} blocks could not be checked alone: "
            + next(r for r in reports if isinstance(r, str)),
            f"{len(reports)} 个 block 中有 {len(reports) - len(checked)} 个无法单独检查",
        )
    folded = fold([r if isinstance(r, Report) else None for r in reports], len(reports))
    statuses = {r.diagnosis.get("status") for r in checked}
    status = "matches" if checked and statuses == {"matches"} else "per_layer"
    if "unexplained" in statuses:
        status = "unexplained"
    elif not checked:
        status = "unchecked"
    diag: dict[str, Any] = {"status": status, "layers": len(reports), "checked": len(checked)}
    if len(checked) < len(reports):
        diag["reason"] = _cause(next(r for r in reports if isinstance(r, str)))  # the error, as the notes say it
    return rows, folded, diag


MASK_FAULTS = ("causal_mask_sliced_wrong", "causal_mask_missing_in_layer")


def _explain(findings: list[ModelFinding]) -> list[ModelFinding]:
    """Symptoms said once: the blocks' causal leaks are the symptom of a model-level mask fault (whose finding
    takes their line), and the end-to-end leak the symptom of the blocks' own when every layer leaks."""
    if any(f.fault == "functional_dropout_in_eval" for f in findings):
        for f in findings:  # the block doctor's name for the same dropout, and its symptoms: one group
            if f.fault == "dropout_at_eval":
                f.fault, f.explained_by = None, "functional_dropout_in_eval"
            elif f.explained_by == "dropout_at_eval" or (f.fault is None and f.layers and f.severity == "error"):
                f.explained_by = "functional_dropout_in_eval"
    model_mask = next((f for f in findings if f.fault in MASK_FAULTS), None)
    leak = model_mask or next((f for f in findings if f.probe in ("lm_causal_leak", "causal_leak")), None)
    for f in findings:  # a full forward that sees the future differs from cached decoding that does not
        if leak is not None and f.probe == "lm_generate" and f.fault is None:
            f.explained_by = leak.fault or leak.explained_by or None
    block_leak = next((f for f in findings if f.probe == "causal_leak" and f.severity == "error" and f.layers), None)
    for f in findings:
        if model_mask is not None and f.probe in ("causal_leak", "diagnosis") and f.fault is None:
            f.explained_by = model_mask.fault
            if not model_mask.where:
                model_mask.where = list(f.where)
        elif f.probe == "lm_causal_leak" and f.fault is None and block_leak is not None:
            f.explained_by = block_leak.fault or block_leak.explained_by
    return findings


PROBES: list[tuple[str, Probe]] = [
    ("lm_eval", hygiene.eval_findings),  # first: the others need a deterministic model
    ("lm_causal_leak", causal.causal_findings),
    ("lm_mask_lengths", lambda c: [f for f in [causal.short_input_failure(c.lm, c.lm.short)] if f is not None]),
    ("lm_loss", loss.loss_findings),
    ("lm_positions", positions.positions_findings),
    ("lm_tying", hygiene.tying_findings),
    ("lm_padding", padding.padding_findings),
    ("lm_pads_in_loss", padding.pads_in_loss_findings),
    ("lm_generate", generate.generate_findings),
    ("lm_cache", cache_flag.cache_flag_findings),
]
AFTER_BLOCKS: list[tuple[str, Probe]] = [  # probes that read the block doctor's reports
    ("lm_final_norm", hygiene.final_norm_findings),
]
