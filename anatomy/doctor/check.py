"""``check(target)``: load the learner's module, discover how it is called, probe it, diagnose it, report.

    from anatomy.doctor import check
    report = check("my_attention.py:MyAttention", d_model=16, n_heads=4)
    print(report.render(lang="zh"))        # or report.to_json(); report.faults == {"no_scaling"}

``target`` is ``"FILE.py:CLASS"``, a class or factory called as ``(d_model, n_heads)``, or a module instance
(copied, never changed). A module that cannot be loaded, built or called raises :class:`CheckError` with one
line saying what was expected; everything else is a finding in the :class:`Report`. Importing the file, building
the module and each single forward get ``timeout`` seconds (``loading/limits.py``); past it, :class:`CheckTimeout` (a
``CheckError``) says which step hung, in English (``en``) and Chinese (``zh``).
"""

from __future__ import annotations

from typing import Any

import torch

from anatomy.doctor.conclusion import diagnosis, pointed_findings
from anatomy.doctor.contract import precision
from anatomy.doctor.contract.calls import detect_seq_first, first_call
from anatomy.doctor.contract.conventions import conventions
from anatomy.doctor.diagnosis.own_norm import OwnNorm, find_own_norm
from anatomy.doctor.diagnosis.references import References, stated_rope_bases
from anatomy.doctor.diagnosis.verdicts import TOL
from anatomy.doctor.loading.building import Target, build, randomize
from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.subject import CallError, CheckedModule, CheckError, Output
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.mapping.from_recording import with_observed
from anatomy.doctor.mapping.layouts import linear_after_mha
from anatomy.doctor.mapping.naming import Hypothesis
from anatomy.doctor.mapping.norm_fit import find_norms
from anatomy.doctor.mapping.norms import is_norm
from anatomy.doctor.mapping.reading import attention_paths, hypotheses
from anatomy.doctor.model.dispatch import model_check, model_sizes
from anatomy.doctor.probes.behaviour import positions, run_all, shape
from anatomy.doctor.probes.state import ProbeState
from anatomy.doctor.recording.dataflow import observe, scope_of
from anatomy.doctor.report.findings import Report

KINDS = ("auto", "attention", "block", "lm")
TIMEOUT = 60.0  # seconds for importing the file, building the module, and each single forward
BATCH = 2


def _seq_len(d: int, h: int) -> int:
    """T distinct from B, H, D and Dh, so that a mask or a reshape on the wrong axis cannot broadcast by luck."""
    return next(t for t in (6, 7, 5, 9, 11) if t not in {BATCH, h, d, d // h})


def check(
    target: Target,
    *,
    kind: str = "auto",
    d_model: int = 16,
    n_heads: int = 4,
    causal: bool = False,
    factory: str | None = None,
    mapping: dict[str, str] | None = None,
    seed: int = 0,
    timeout: float | None = TIMEOUT,
    seq_first: bool | None = None,
    vocab_size: int | None = None,
    n_layers: int | None = None,
    block_size: int | None = None,
) -> Report:
    """Probe and diagnose ``target`` (see the module docstring); raises :class:`CheckError` when it cannot run.

    ``timeout``: seconds that importing the file, building the module, or one forward may take (None or 0: no
    limit); past it :class:`CheckTimeout`. ``seq_first``: the module takes ``(T, B, D)`` (True), ``(B, T, D)``
    (False), or detect it (None, the default; ``contract/``). ``kind="lm"`` (or a target found to be a whole
    language model) checks the model (``doctor/model/``) with ``vocab_size``, ``n_layers`` and ``block_size``.
    The time limit is enforced in the main thread
    only (``limits.py`` says why).
    The tensors are tiny (B=2, T=6), so the check runs single-threaded: on a busy machine intra-op threads cost
    milliseconds per op for nothing. The previous thread count is restored on return, and the caller's RNG state
    is left as it was (the check runs on a forked generator seeded with ``seed``).
    """
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not timeout >= 0
        or timeout == float("inf")
    ):
        raise CheckError(f"timeout must be a number of seconds >= 0 (0 or None: no limit), got {timeout!r}")
    if kind in ("auto", "lm"):  # a whole language model (doctor/model/; None: not one, the block doctor's turn)
        with isolated(seed):
            lm = model_check(
                target,
                kind=kind,
                factory=factory,
                seed=seed,
                timeout=timeout or None,
                block_check=check,
                sizes=model_sizes(vocab_size, d_model, n_heads, n_layers, block_size),
            )
        if lm is not None:
            return lm
    with isolated(seed), precision.tolerating(0.0):
        return _check(target, kind, d_model, n_heads, causal, factory, mapping, seed, timeout or None, seq_first)


def _check(
    target: Target,
    kind: str,
    d_model: int,
    n_heads: int,
    causal: bool,
    factory: str | None,
    mapping: dict[str, str] | None,
    seed: int,
    timeout: float | None,
    seq_first: bool | None = None,
) -> Report:
    """The check, step by step: build and first call, what the module computes in and how it is laid out, what it
    is (attention or block) and how its weights read as ours, its conventions, the diagnosis, the probes, the
    findings pointed at the learner's lines."""
    if kind not in KINDS:
        raise CheckError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    require_sizes(d_model, n_heads)
    d, h = d_model, n_heads
    subject, x = _start(target, factory, d, h, seed, timeout, seq_first)
    base, base_w = _first_run(subject, x, seed)
    floor = _precision_notes(subject)
    if seq_first is None:
        base, base_w = _sequence_first(subject, x, base, base_w)
    settings = _settings(subject, d, h, x, seed, causal, floor)
    found = _found_call(subject, base_w, h)
    state, scope, attn_hyps, own = _what_it_is(subject, kind, h, x, base, base_w, found)
    if tuple(base.shape) != (BATCH, x.shape[1], d):
        return _wrong_shape(state, settings, found, causal)
    found.update(conventions(state, causal))
    hyps, complete = hypotheses(state, attn_hyps, scope, mapping, found)
    subject.stage = (
        "position dependence (two tokens swapped, every position shifted)",
        "位置依赖检测（交换两个 token、整体平移位置）",
    )
    state.positions = positions(state) if bool(torch.isfinite(base).all()) else "none"
    found["positions"] = state.positions
    refs = References(
        state.kind,
        d,
        h,
        state.parts,
        dict(subject.module.named_parameters()),
        positional=state.positions in ("relative", "dependent"),
    )
    refs.own_norm = own
    if refs.positional:
        refs.state_bases(stated_rope_bases(subject.module))
    diag, design = diagnosis(state, refs, hyps, complete, found)
    findings, passed, skipped = run_all(state)
    findings = pointed_findings(state, diag, design, findings)
    return Report(subject.label, state.kind, settings, found, findings, passed, skipped, diag.to_dict())


def _start(
    target: Target, factory: str | None, d: int, h: int, seed: int, timeout: float | None, seq_first: bool | None
) -> tuple[CheckedModule, torch.Tensor]:
    """The learner's module built and inspected, and the probe input ``x`` (float64, ``(B, T, D)``)."""
    module, label = build(target, factory, d, h, seed, timeout)
    subject = CheckedModule.inspect(module, label)
    subject.timeout = timeout
    subject.seq_first = bool(seq_first)
    t = _seq_len(d, h)
    x = torch.randn(BATCH, t, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    return subject, x


def _first_run(subject: CheckedModule, x: torch.Tensor, seed: int) -> Output:
    """The first calls (lazy parameters materialised, a failing ``mask=None`` default replaced, a tuple input found),
    the weights seeded, and the plain output; a module that cannot be called is a :class:`CheckError`."""
    try:
        first_call(subject, x)
        randomize(subject.module, x.shape[-1], seed)
        return subject.run(x)
    except CallError as err:
        call = "forward(x, None)" if subject.mask_required else "forward(x)"
        what = f"raised {err}" if err.raised else str(err)
        raise CheckError(
            f"{subject.label}: {call} on x of shape (B, T, D) = {tuple(x.shape)} {what}; expected it to return "
            "out (B, T, D) or (out, weights)"
        ) from None


def _precision_notes(subject: CheckedModule) -> float:
    """The tolerance floor the dtypes the module computed in call for, and the notes that say so."""
    floor = precision.floor_for(subject.seen_dtypes)
    precision.FLOOR.set(floor)  # reset when check() returns (precision.tolerating)
    if floor:
        narrow = sorted(str(d).replace("torch.", "") for d in subject.seen_dtypes if d != torch.float64)
        subject.note(
            f"the module computes parts in {', '.join(narrow)} on float64 inputs (a cast inside it); every "
            f"comparison tolerates {floor:.1e} relative to the outputs, the precision it computed in",
            f"模块在 float64 输入上仍有部分计算用 {', '.join(narrow)}（内部有类型转换）；所有比较按它实际的"
            f"计算精度放宽到相对 {floor:.1e}",
        )
    if subject.promoted:
        subject.note(
            f"{subject.promoted} op(s) met a float32 tensor and the doctor's float64 parameters and were "
            "rerun in float64 (in training both are float32)",
            f"{subject.promoted} 个运算遇到 float32 张量与医生给的 float64 参数混用，已改用 float64 重算"
            "（训练时两者都是 float32）",
        )
    return floor


def _sequence_first(subject: CheckedModule, x: torch.Tensor, base: torch.Tensor, base_w: torch.Tensor | None) -> Output:
    """A sequence-first module detected (and said); its plain output read again in its own layout."""
    if detect_seq_first(subject, x, base, precision.tol(1e-9) * max(1.0, float(base.abs().nan_to_num(0).max()))):
        base, base_w = subject.run(x)
        subject.note(
            "the module is sequence-first: fed (B, T, D) it mixed the sequences of a batch, fed (T, B, D) it "
            "does not, so every call gets x as (T, B, D) and its output is read back as (B, T, D)",
            "模块按序列优先 (T, B, D) 排布：输入 (B, T, D) 时 batch 中的序列互相混合，输入 (T, B, D) 时不会，"
            "因此每次调用都以 (T, B, D) 传入 x，输出按 (B, T, D) 读回",
        )
    return base, base_w


def _settings(
    subject: CheckedModule, d: int, h: int, x: torch.Tensor, seed: int, causal: bool, floor: float
) -> dict[str, Any]:
    return {
        "d_model": d,
        "n_heads": h,
        "head_dim": d // h,
        "batch": BATCH,
        "seq": x.shape[1],
        "seed": seed,
        "dtype": "float64",
        "causal_flag": causal,
        "tolerance": precision.tol(TOL),
        "computed_in": sorted(str(t).replace("torch.", "") for t in subject.seen_dtypes),
        "tolerance_floor": floor,
    }


def _found_call(subject: CheckedModule, base_w: torch.Tensor | None, h: int) -> dict[str, Any]:
    """What the report's "found" says of the call."""
    return {
        "call": subject.call,
        "returns": "(out, weights)" if base_w is not None else "out",
        "weights_shape": _legend(base_w, h) if base_w is not None else None,
        "seq_first": subject.seq_first,
        "call_notes": subject.notes,
        **({"qkv_roles": subject.fields["qkv_roles"]} if "qkv_roles" in subject.fields else {}),
        "ignored_returns": subject.ignored_returns,
    }


def _what_it_is(
    subject: CheckedModule,
    kind: str,
    h: int,
    x: torch.Tensor,
    base: torch.Tensor,
    base_w: torch.Tensor | None,
    found: dict[str, Any],
) -> tuple[ProbeState, str | None, list[Hypothesis], OwnNorm | None]:
    """Which kind of module (attention or block), its attention found by names and by the recorded dataflow, its
    norms found by behaviour: the probes' shared state, the attention's scope, its readings, an own norm."""
    module, d = subject.module, x.shape[-1]
    attn_hyps, scope = mp.find_attention(module, d, h)
    attn_hyps = linear_after_mha(subject, x, attn_hyps, scope, d)  # nn.MultiheadAttention, then one more Linear
    named = dict(module.named_modules())

    def inside(p: str) -> bool:  # in the attention's scope (read when called: the dataflow may set it below)
        return bool(scope) and (p == scope or p.startswith(f"{scope}."))

    qk_paths = {p for hp in attn_hyps if hp.qk_norm is not None for p in (hp.qk_norm.q, hp.qk_norm.k)}
    subject.stage = (
        "the search for norms (each sub-module's output against its standardised input)",
        "norm 查找（比较每个子模块的输出与标准化后的输入）",
    )
    norms = {p: n for p, n in find_norms(module, lambda: subject.run(x), d).items() if p not in qk_paths}
    subject.stage = ("the recording of one forward (every tensor operation)", "记录一次 forward（每个张量运算）")
    obs = observe(subject, x, d, h)
    found["observed"] = obs.to_found()
    attn_hyps = with_observed(attn_hyps, obs.hyp, dict(module.named_parameters()))  # names, dataflow
    if scope is None and attn_hyps and attn_hyps[0] is obs.hyp:  # names gave nothing: the dataflow's scope
        scope = scope_of(obs.hyp, set(named))
    has_norms = bool(norms) or any(is_norm(m, d) and not inside(p) and p not in qk_paths for p, m in named.items())
    auto = kind == "auto"
    kind = ("block" if has_norms else "attention") if kind == "auto" else kind
    own = (
        find_own_norm(module, d, attention_paths(attn_hyps), norms, qk_paths)
        if auto and kind == "block" and attn_hyps
        else None
    )
    if own is not None:  # an attention holding its own norm, no feed-forward: checked as an attention
        kind = "attention"
    state = ProbeState(subject, kind, d, h, x, base, base_w)
    state.norms = norms
    state.observation = obs
    return state, scope, attn_hyps, own


def _wrong_shape(state: ProbeState, settings: dict[str, Any], found: dict[str, Any], causal: bool) -> Report:
    """The report of a module whose output is not ``(B, T, D)``: the shape finding, nothing else examined."""
    findings, _ = shape(state)
    found.update(
        mask={"sense": None, "examined": False},
        causal={"value": causal, "source": "flag" if causal else "none", "layout": None},
    )
    return Report(
        state.subject.label,
        state.kind,
        settings,
        found,
        findings,
        [],
        [{"probe": "*", "en": "the output shape is wrong", "zh": "输出形状不对"}],
        {"status": "unavailable", "reason": "the output shape is wrong"},
    )


def _legend(w: torch.Tensor, h: int) -> str:
    if w.dim() == 4 and w.shape[1] == h:
        return "(B, H, T, S)"
    if w.dim() == 3:
        return "(B, T, S)"
    return str(tuple(w.shape))
