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

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.block import EncoderBlock
from anatomy.doctor.contract import precision
from anatomy.doctor.contract.calls import detect_seq_first, first_call
from anatomy.doctor.contract.masks import causal_keep, dependency, discover_causal_format, discover_mask, padding_keep
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.diagnosis import diagnose as dg
from anatomy.doctor.diagnosis.difference import raw_scores
from anatomy.doctor.diagnosis.own_norm import find_own_norm
from anatomy.doctor.diagnosis.references import RES_POST, References, Scenario
from anatomy.doctor.diagnosis.verdict import SYMPTOM_PROBES, cause, diagnosis_findings, flow_finding
from anatomy.doctor.loading.isolation import isolated, require_sizes
from anatomy.doctor.loading.subject import CallError, CheckError, Subject, build, randomize
from anatomy.doctor.mapping import projections as mp
from anatomy.doctor.mapping.functional_norms import functional_norm_hypotheses
from anatomy.doctor.mapping.layer_scale import with_layer_scale
from anatomy.doctor.mapping.layouts import linear_after_mha
from anatomy.doctor.mapping.norm_fit import find_norms
from anatomy.doctor.probes.behaviour import positions, run_all, shape
from anatomy.doctor.probes.state import ProbeState
from anatomy.doctor.recording.dataflow import (
    about_the_mask,
    deviation_faults,
    mask_after_softmax_flow,
    observe,
    record_masked,
    scope_of,
    unmapped,
)
from anatomy.doctor.report.findings import Report
from anatomy.doctor.report.pointers import point

KINDS = ("auto", "attention", "block")
TIMEOUT = 60.0  # seconds for importing the file, building the module, and each single forward
BATCH = 2
ATTN_REQUIRED = [f"{k}.weight" for k in mp.ATTN_KEYS]
BLOCK_REQUIRED = [f"attn.{r}" for r in ATTN_REQUIRED] + [
    "attn_add_norm.norm.weight",
    "ffn.up_proj.weight",
    "ffn.down_proj.weight",
]


def _seq_len(d: int, h: int) -> int:
    """T distinct from B, H, D and Dh, so that a mask or a reshape on the wrong axis cannot broadcast by luck."""
    return next(t for t in (6, 7, 5, 9, 11) if t not in {BATCH, h, d, d // h})


def check(
    target,
    *,
    kind: str = "auto",
    d_model: int = 16,
    n_heads: int = 4,
    causal: bool = False,
    factory: str | None = None,
    mapping: dict | None = None,
    seed: int = 0,
    timeout: float | None = TIMEOUT,
    seq_first: bool | None = None,
) -> Report:
    """Probe and diagnose ``target`` (see the module docstring); raises :class:`CheckError` when it cannot run.

    ``timeout``: seconds that importing the file, building the module, or one forward may take (None or 0: no
    limit); past it :class:`CheckTimeout`. ``seq_first``: the module takes ``(T, B, D)`` (True), ``(B, T, D)``
    (False), or detect it (None, the default; ``contract/``). The time limit is enforced in the main thread
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
    with isolated(seed), precision.tolerating(0.0):
        return _check(target, kind, d_model, n_heads, causal, factory, mapping, seed, timeout or None, seq_first)


def _check(
    target,
    kind: str,
    d_model: int,
    n_heads: int,
    causal: bool,
    factory: str | None,
    mapping: dict | None,
    seed: int,
    timeout: float | None,
    seq_first: bool | None = None,
) -> Report:
    if kind not in KINDS:
        raise CheckError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    require_sizes(d_model, n_heads)
    d, h = d_model, n_heads
    module, label = build(target, factory, d, h, seed, timeout)
    subject = Subject.inspect(module, label)
    subject.timeout = timeout
    subject.seq_first = bool(seq_first)
    t = _seq_len(d, h)
    x = torch.randn(BATCH, t, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    try:
        first_call(subject, x)  # lazy parameters materialised, a failing mask=None default replaced
        randomize(module, d, seed)
        base, base_w = subject.run(x)
    except CallError as err:
        call = "forward(x, None)" if subject.mask_required else "forward(x)"
        what = f"raised {err}" if err.raised else str(err)
        raise CheckError(
            f"{label}: {call} on x of shape (B, T, D) = {tuple(x.shape)} {what}; expected it to return "
            "out (B, T, D) or (out, weights)"
        ) from None
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
    if seq_first is None and detect_seq_first(
        subject, x, base, precision.tol(1e-9) * max(1.0, float(base.abs().nan_to_num(0).max()))
    ):
        base, base_w = subject.run(x)
        subject.note(
            "the module is sequence-first: fed (B, T, D) it mixed the sequences of a batch, fed (T, B, D) it "
            "does not, so every call gets x as (T, B, D) and its output is read back as (B, T, D)",
            "模块按序列优先 (T, B, D) 排布：输入 (B, T, D) 时 batch 中的序列互相混合，输入 (T, B, D) 时不会，"
            "因此每次调用都以 (T, B, D) 传入 x，输出按 (B, T, D) 读回",
        )
    settings = {
        "d_model": d,
        "n_heads": h,
        "head_dim": d // h,
        "batch": BATCH,
        "seq": t,
        "seed": seed,
        "dtype": "float64",
        "causal_flag": causal,
        "tolerance": precision.tol(dg.TOL),
        "computed_in": sorted(str(d).replace("torch.", "") for d in subject.seen_dtypes),
        "tolerance_floor": floor,
    }
    found: dict = {
        "call": subject.call,
        "returns": "(out, weights)" if base_w is not None else "out",
        "weights_shape": _legend(base_w, h) if base_w is not None else None,
        "seq_first": subject.seq_first,
        "call_notes": subject.notes,
        **({"qkv_roles": subject.fields["qkv_roles"]} if "qkv_roles" in subject.fields else {}),
        "ignored_returns": subject.ignored_returns,
    }

    # which kind of module, and how its parameters map onto ours
    attn_hyps, scope = mp.find_attention(module, d, h)
    attn_hyps = linear_after_mha(subject, x, attn_hyps, scope, d)  # nn.MultiheadAttention, then one more Linear
    named = dict(module.named_modules())
    inside = (lambda p: bool(scope) and (p == scope or p.startswith(f"{scope}."))) if scope else (lambda p: False)
    qk_paths = {p for hp in attn_hyps if hp.qk_norm is not None for p in (hp.qk_norm.q, hp.qk_norm.k)}
    subject.stage = (
        "the search for norms (each sub-module's output against its standardised input)",
        "norm 查找（比较每个子模块的输出与标准化后的输入）",
    )
    norms = {p: n for p, n in find_norms(module, lambda: subject.run(x), d).items() if p not in qk_paths}
    subject.stage = ("the recording of one forward (every tensor operation)", "记录一次 forward（每个张量运算）")
    obs = observe(subject, x, d, h)
    found["observed"] = obs.to_found()
    attn_hyps = mp.with_observed(attn_hyps, obs.hyp, dict(module.named_parameters()))  # names, dataflow
    if scope is None and attn_hyps and attn_hyps[0] is obs.hyp:  # names gave nothing: the dataflow's scope
        scope = scope_of(obs.hyp, set(named))
        inside = (lambda p: bool(scope) and (p == scope or p.startswith(scope + "."))) if scope else (lambda p: False)
    has_norms = bool(norms) or any(mp.is_norm(m, d) and not inside(p) and p not in qk_paths for p, m in named.items())
    auto = kind == "auto"
    kind = ("block" if has_norms else "attention") if kind == "auto" else kind
    own = (
        find_own_norm(module, d, _attention_paths(attn_hyps), norms, qk_paths)
        if auto and kind == "block" and attn_hyps
        else None
    )
    if own is not None:  # an attention holding its own norm, no feed-forward: checked as an attention
        kind = "attention"

    ctx = ProbeState(subject, kind, d, h, x, base, base_w)
    ctx.norms = norms
    ctx.observation = obs
    if tuple(base.shape) != (BATCH, t, d):
        findings, _ = shape(ctx)
        found.update(
            mask={"sense": None, "examined": False},
            causal={"value": causal, "source": "flag" if causal else "none", "layout": None},
        )
        return Report(
            label,
            kind,
            settings,
            found,
            findings,
            [],
            [{"probe": "*", "en": "the output shape is wrong", "zh": "输出形状不对"}],
            {"status": "unavailable", "reason": "the output shape is wrong"},
        )
    found.update(_conventions(ctx, causal))
    hyps, complete = _hypotheses(ctx, attn_hyps, scope, mapping, found)

    subject.stage = (
        "position dependence (two tokens swapped, every position shifted)",
        "位置依赖检测（交换两个 token、整体平移位置）",
    )
    ctx.positions = positions(ctx) if bool(torch.isfinite(base).all()) else "none"
    found["positions"] = ctx.positions
    refs = References(
        kind, d, h, ctx.parts, dict(module.named_parameters()), positional=ctx.positions in ("relative", "dependent")
    )
    refs.own_norm = own
    subject.stage = ("the differential diagnosis", "差分诊断")
    if complete:
        diag = dg.diagnose(subject, refs, complete, _scenarios(ctx))
        if diag.status == "unexplained" and not ctx.causal and ctx.causal_mask is None:
            # a fault that mixes tokens also hides causality from the detection: try the causal reading
            alt = dg.diagnose(subject, refs, complete, _scenarios(ctx, causal=True))
            if alt.status in ("fault", "ambiguous"):
                diag, ctx.causal = alt, True  # the probes then treat it as the decoder it is
                found["causal"] = {"value": True, "source": "diagnosis", "layout": None}
    else:
        miss = ", ".join(mp.missing(hyps[0], _required(kind))) if hyps else "q_proj, k_proj, v_proj, o_proj"
        diag = dg.Diagnosis("unavailable", unmapped(miss, obs))
    if diag.hypothesis is not None:
        ctx.hyp = diag.hypothesis
        found["mapping"] = _mapping_found(diag.hypothesis, [], refs.params, d, h)
        if ctx.parts is not None:
            ctx.found_block["activation"] = diag.variant.get("activation")
        if diag.status == "matches" or diag.status in ("fault", "ambiguous"):
            ctx.positional = diag.variant.get("positional")
        key = diag.key
        assert key is not None  # diagnose() sets it with every hypothesis
        ref = refs.build(key[0], diag.hypothesis, key[1])
        plain = Scenario("plain", x, None, ctx.causal, None, torch.ones(BATCH, t, dtype=torch.bool))
        ctx.raw_scores = lambda: diag.hypothesis.learner_heads(raw_scores(ref, plain))
    elif complete:
        ctx.hyp = complete[0]

    findings, passed, skipped = run_all(ctx)
    placed = diag.variant.get("placement")
    if ctx.found_block.get("placement") in (None, "unknown") and (
        placed == RES_POST or placed and diag.status == "matches"
    ):
        ctx.found_block["placement"] = placed  # the probe knows pre and post of norm modules; the reference knew
    findings += diagnosis_findings(diag)
    named_faults = list(diag.faults) if diag.status in ("fault", "ambiguous") else []
    symptoms = any(f.severity == "error" and f.fault is None and f.probe in SYMPTOM_PROBES for f in findings)
    if not named_faults and symptoms:
        for fault, dev in deviation_faults(obs):  # the flow shows a known pitfall the comparison could not isolate
            findings.append(flow_finding(fault, dev))
            named_faults.append(fault)
    masked = [f for f in findings if about_the_mask(f)]
    if masked and ctx.mask is not None:  # the masking lines run only when a mask is passed: record that forward
        keep, _ = padding_keep(ctx.b, ctx.t, ctx.causal)
        masked_rec = record_masked(subject, x, ctx.mask.make(keep, x.dtype), d, h)
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
    return Report(label, kind, settings, found, findings, passed, skipped, diag.to_dict())


def _conventions(ctx: ProbeState, causal_flag: bool) -> dict:
    """Is the module causal by itself? Which mask does it take (sense, layout), and can it take a causal one?"""
    subject, x, base = ctx.subject, ctx.x, ctx.base
    shape_ = tuple(x.shape)
    subject.stage = ("causal detection (one token changed at a time)", "因果检测（每次改一个 token）")
    ctx.dep = dependency(subject, x) if bool(torch.isfinite(base).all()) else None
    detected = not causal_flag and ctx.dep is not None and _looks_causal(ctx.dep)
    ctx.causal = causal_flag or detected
    mask: dict[str, Any] | None = None  # the "mask" entry of found (JSON)
    if subject.takes_mask:
        subject.stage = ("mask discovery", "mask 格式探测")
        cands = discover_mask(subject, x, base, shape_)
        best = cands[0]
        scale = max(1.0, float(base.abs().nan_to_num(0).max()))
        if subject.mask_tentative and not any(c.ok and c.effect > tol(1e-9) * scale for c in cands):
            subject.takes_mask = False  # forward(x, *args): nothing passed there acts as a mask
            subject.call = "forward(x)"
            subject.note(
                "forward(x, *args): no mask passed as the second argument changed the output, so the module "
                "is called without one (pass a named mask parameter if it takes one)",
                "forward(x, *args)：作为第二个参数传入的任何 mask 都没有改变输出，因此调用时不传 mask"
                "（如果模块接受 mask，请使用具名参数）",
            )
            return {
                "mask": None,
                "causal": {
                    "value": ctx.causal,
                    "source": "flag" if causal_flag else "detected" if detected else "none",
                    "layout": None,
                },
            }
        if not best.ok:
            mask = {"sense": None, "tried": len(cands), "last_error": cands[-1].reason}
        else:
            ctx.mask = best.fmt
            also = [
                c.fmt.sense
                for c in cands[1:]
                if c.ok
                and c.fmt.layout == best.fmt.layout
                and (c.effect > 0) == (best.effect > 0)
                and abs(c.leak - best.leak) <= 1e-12
            ]
            if not ctx.causal:
                subject.stage = ("causal mask discovery", "因果 mask 格式探测")
                ctx.causal_mask = discover_causal_format(subject, best.fmt, x, base, shape_)
            mask = {
                "sense": best.fmt.sense,
                "layout": best.fmt.layout,
                "also": list(dict.fromkeys(also)),
                "causal_layout": ctx.causal_mask.layout if ctx.causal_mask else None,
            }
            acting = [c for c in cands if c.ok and c.effect > tol(1e-9) * scale]
            mask["ignored"] = not acting  # no convention changes anything: the module ignores its mask
            if acting and all(c.leak > tol(1e-9) * scale for c in acting):  # no convention hides the padding
                mask["all_leak"] = True
                mask["leaks"] = [{"sense": c.fmt.sense, "layout": c.fmt.layout, "leak": c.leak} for c in acting]
                ctx.mask_leaks = mask["leaks"]
            ctx.mask_ignored = mask["ignored"]
    source = "flag" if causal_flag else "detected" if detected else "mask" if ctx.causal_mask else "none"
    return {
        "mask": mask,
        "causal": {
            "value": ctx.causal,
            "source": source,
            "layout": ctx.causal_mask.layout if ctx.causal_mask else None,
        },
    }


def _required(kind: str) -> list[str]:
    return BLOCK_REQUIRED if kind == "block" else ATTN_REQUIRED


def _hypotheses(
    ctx: ProbeState, attn_hyps: list[mp.Hypothesis], scope: str | None, mapping: dict | None, found: dict
) -> tuple[list[mp.Hypothesis], list[mp.Hypothesis]]:
    """Every reading of the learner's parameters as ours, and those that fill every required reference weight."""
    module, d, h = ctx.subject.module, ctx.d, ctx.h
    if ctx.kind == "block":
        ctx.parts = parts = mp.block_parts(module, d, scope, _attention_paths(attn_hyps), _call_order(ctx), ctx.norms)
        hyps = mp.block_hypotheses(attn_hyps, parts, module) if parts.norms and parts.ffn else []
        if not hyps:  # norms without parameters, called as functions (functional_norms.py)
            hyps = functional_norm_hypotheses(attn_hyps, parts, module, getattr(ctx.observation, "rec", None), d)
        hyps = with_layer_scale(hyps, module, d, scope)  # LayerScale gains folded in (layer_scale.py)
        if not hyps and attn_hyps:  # attention found, norms or FFN not: say what is missing
            hyps = [mp.Hypothesis(attn_hyps[0].style, attn_hyps[0].prefixed("attn.").sources)]
        found["block"] = ctx.found_block
        ctx.found_block.update(
            {
                "norms": parts.norms,
                "d_ff": parts.d_ff,
                "activation": None,
                "norm_variant": parts.describe().get("norm_form"),
                "norm_eps": parts.eps if parts.norms else None,
                "norms_by_behaviour": [n.to_dict() for n in parts.found.values()],
            }
        )
    else:
        hyps = attn_hyps
    if mapping:
        hyps = mp.apply_user_map(
            hyps,
            mapping,
            dict(module.named_parameters()),
            _ref_names(ctx.kind, d, h, ctx.parts),
            dict(module.named_modules()),
        )
    required = _required(ctx.kind)
    complete = [hp for hp in hyps if not mp.missing(hp, required)]
    shown = complete[0] if complete else (hyps[0] if hyps else None)
    params = dict(module.named_parameters())
    found["mapping"] = None if shown is None else _mapping_found(shown, mp.missing(shown, required), params, d, h)
    return hyps, complete


def _mapping_found(hyp: mp.Hypothesis, missing: list[str], params: dict, d: int, h: int) -> dict:
    return {
        "style": hyp.style,
        "pairs": [[r, s.user, s.note] for r, s in hyp.sources.items()],
        "missing": missing,
        "n_kv_heads": mp.kv_heads(hyp, params, d, h),
        "qk_norm": None if hyp.qk_norm is None else hyp.qk_norm.to_dict(),
    }


def _looks_causal(dep: torch.Tensor) -> bool:
    """Every output depends on every earlier token and on itself, never on a token two or more steps ahead: the
    dependence is lower-triangular (one step ahead is allowed: a causal mask off by one leaks the next token). Local
    mixing (a window over the neighbours) is not causal: it does not see the whole past."""
    t = dep.shape[0]
    if t < 4:
        return False
    far_future = torch.ones(t, t, dtype=torch.bool).triu(2)
    past = torch.ones(t, t, dtype=torch.bool).tril()
    return float(dep[far_future].max()) == 0.0 and float(dep[past].min()) > 0.0


def _legend(w: torch.Tensor, h: int) -> str:
    if w.dim() == 4 and w.shape[1] == h:
        return "(B, H, T, S)"
    if w.dim() == 3:
        return "(B, T, S)"
    return str(tuple(w.shape))


def _attention_paths(hyps: list[mp.Hypothesis]) -> set[str]:
    paths = set()
    for hp in hyps:
        paths |= set(hp.modules.values())
        paths |= {s.user.rpartition(".")[0] for s in hp.sources.values()}
    return paths


def _call_order(ctx: ProbeState) -> list[str]:
    """Sub-module paths in the order one plain forward calls them (a shared module appears once per call)."""
    order, handles = [], []
    ctx.subject.stage = ("the walk through your sub-modules", "子模块调用顺序的记录")
    for p, m in ctx.subject.module.named_modules():
        if p:
            handles.append(m.register_forward_hook(lambda mod, a, o, p=p: order.append(p)))
    try:
        ctx.subject.run(ctx.x)
    except CallError:
        pass
    finally:
        for hd in handles:
            hd.remove()
    return order


def _ref_names(kind: str, d: int, h: int, parts) -> list[str]:
    """Every name ``--map`` may fill: the reference's parameters, QK-norm (``q_norm``/``k_norm``) included."""
    if kind == "attention":
        return [n for n, _ in MultiHeadAttention(d_model=d, n_heads=h, qk_norm="layernorm").named_parameters()]
    d_ff = parts.d_ff if parts is not None and parts.d_ff else 4 * d
    act = parts.activations[0] if parts is not None else "relu"
    return [
        n
        for n, _ in EncoderBlock.build(
            d_model=d, n_heads=h, d_ff=d_ff, activation=act, qk_norm="layernorm"
        ).named_parameters()
    ]


def _scenarios(ctx: ProbeState, causal: bool | None = None) -> list[Scenario]:
    """The diagnosis' runs; ``causal=True``: the reference masks the future itself (a second reading of a module
    whose mixing hid its causality from the detection)."""
    b, t = ctx.b, ctx.t
    causal = ctx.causal if causal is None else causal
    every = torch.ones(b, t, dtype=torch.bool)
    out = [Scenario("plain", ctx.x, None, causal, None, every)]
    if ctx.mask is not None and not ctx.mask_ignored:  # an ignored mask is the padding probe's finding
        keep, _ = padding_keep(b, t, causal)  # the side the padding probe pads, so the two agree
        out.append(
            Scenario("padding", ctx.x, keep[:, :1][:, None], causal, ctx.mask.make(keep, ctx.x.dtype), keep[:, 0])
        )
    if ctx.causal_mask is not None and not (causal and not ctx.causal):
        keep = causal_keep(b, t)
        out.append(Scenario("causal_mask", ctx.x, keep[0], False, ctx.causal_mask.make(keep, ctx.x.dtype), every))
    return out
