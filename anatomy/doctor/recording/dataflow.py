"""The doctor's use of the recorder (``anatomy.tracing``, ``observed.py``): one recorded plain forward per check.

It gives three things the names cannot: a mapping of q/k/v/o from the dataflow when the names give none (a
``ModuleList`` of per-head modules, einsum over bare Parameters, a Linear inside ``nn.Sequential``), the scale read
as ``scores ÷ q·kᵀ`` (so ``C**-0.5`` is named even when the diagnosis cannot compare the whole output), and the
learner's line for each of them. A module the recorder cannot follow is said so, with what would help.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from anatomy.doctor.loading.subject import CallError, CheckedModule, CheckError
from anatomy.doctor.mapping.naming import Hypothesis, Source
from anatomy.doctor.recording import observed as ob
from anatomy.doctor.recording.cores import attention_cores, key_axis
from anatomy.pitfalls import records
from anatomy.tracing.recorder import record
from anatomy.tracing.steps import SOFTMAX_OPS, RecordError, Recording, sizes_for

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Finding


@dataclass
class Observation:
    rec: Recording | None = None
    hyp: Hypothesis | None = None
    scale: ob.Scale | None = None
    error: str | None = None  # why nothing was recorded
    summary: dict[str, Any] = field(default_factory=dict)

    def to_found(self) -> dict[str, Any] | None:
        if self.rec is None:
            return {"recorded": False, "reason": self.error}
        return {"recorded": True, **self.summary}


def observe(subject: CheckedModule, x: torch.Tensor, d: int, h: int) -> Observation:
    """Record one plain forward of the learner's module (through its call contract) and read what it shows."""
    b, t = x.shape[:2]
    try:
        rec = record(lambda x: subject.run(x)[0], x, sizes=sizes_for(d, h, b, t), module=subject.module)
    except (RecordError, CallError) as err:
        return Observation(error=str(err))
    except CheckError:
        raise
    except Exception as err:  # noqa: BLE001 - a recorder that cannot follow the module must not end the check
        return Observation(error=f"the recorder could not follow the module ({type(err).__name__}: {err})")
    obs = Observation(rec)
    try:
        obs.hyp = ob.hypothesis(rec, d, h) or without_projection(rec, d)
        obs.scale = ob.observed_scale(rec)
        obs.summary = ob.summary(rec)
    except Exception as err:  # noqa: BLE001
        obs.error = f"the recording could not be read ({type(err).__name__}: {err})"
    return obs


MASK_PROBES = {"padding_leak", "fully_masked", "float16_fill", "causal_leak"}


def about_the_mask(finding: Finding) -> bool:
    """A finding about the mask: a mask pitfall's (``kind="mask"`` in its record) or a mask probe's."""
    return (finding.fault or finding.explained_by) in records.mask_faults() or finding.probe in MASK_PROBES


def record_masked(
    subject: CheckedModule, x: torch.Tensor, mask: torch.Tensor | None, d: int, h: int
) -> Recording | None:
    """A recording of one forward with ``mask`` (the plain one never runs the learner's masking lines)."""
    if mask is None:
        return None
    b, t = x.shape[:2]
    try:
        return record(lambda x: subject.run(x, mask)[0], x, sizes=sizes_for(d, h, b, t), module=subject.module)
    except CheckError:
        raise
    except Exception:  # noqa: BLE001 - a pointer is a courtesy
        return None


def without_projection(rec: Recording, d: int) -> Hypothesis | None:
    """A module with no output projection (the heads concatenated and returned, BERT's self-attention): the
    reference's ``o_proj`` is the identity, its columns in the order the output holds the heads' v features."""
    cores = attention_cores(rec)
    if (
        not cores
        or ob.roles(rec)["o"] is not None
        or any(c.q_feat is None or c.k_feat is None or c.v_feat is None for c in cores)
    ):
        return None
    meta = rec.meta_of(rec.output) if isinstance(rec.output, torch.Tensor) else None
    q, k, v = (torch.cat([getattr(c, f"{r}_feat") for c in cores]).reshape(-1) for r in "qkv")
    if meta is None or meta.feat is None or meta.feat.shape[-1] != d or not (q.numel() == k.numel() == v.numel() == d):
        return None
    cols = ob._columns(meta.feat, v)
    if cols is None or len(set(cols.tolist())) != d:
        return None
    src = {}
    for key, feats in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        w, b = ob._rows_source(rec, feats, key.split("_")[0])
        src[f"{key}.weight"] = w
        if b is not None:
            src[f"{key}.bias"] = b
    eye = torch.eye(d, dtype=torch.float64)[:, cols]
    src["o_proj.weight"] = Source(
        "(no output projection)", "identity: the heads are returned as they are", lambda params, eye=eye: eye
    )
    return Hypothesis("observed dataflow (no output projection: o_proj is the identity)", src, {})


def scope_of(hyp: Hypothesis, module_paths: set[str]) -> str:
    """The innermost module holding every learner parameter of ``hyp`` (the learner's attention)."""
    parts = [s.user.rpartition(".")[0].split(".") for s in hyp.sources.values() if s.user]
    parts += [p.split(".") for p in hyp.modules.values()]
    if not parts:
        return ""
    common = []
    for names in zip(*parts):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    while common and ".".join(common) not in module_paths:
        common.pop()
    return ".".join(common)


def scale_verdict(obs: Observation, d: int, h: int) -> tuple[str | None, dict[str, Any]] | None:
    """``(fault or None, evidence)`` from the observed scale, or None when it was not seen as a constant.
    ``no_scaling`` for 1 (``scale_after_softmax`` when the softmax's output is then scaled), ``scale_by_d_model``
    for 1/sqrt(D), ``scale_from_wrong_size`` for 1/sqrt(T) (the key length); None as the fault for 1/sqrt(Dh)."""
    sc = obs.scale
    if sc is None or sc.value is None or h == 1:
        return None
    dk = d // h
    seen = head_width(obs, h)  # an explicit head_dim (Gemma): clears a scale of 1/sqrt(its width), never raises one
    if seen and seen != dk and abs(sc.value * math.sqrt(seen) - 1) < 1e-6:
        dk = seen
    ev = {
        "observed_scale": sc.value,
        "d_k": dk,
        "one_over_sqrt_d_k": 1 / math.sqrt(dk),
        "one_over_sqrt_d_model": 1 / math.sqrt(d),
        "line": sc.line,
        "source": sc.source,
        "by": sc.by,
    }
    for want, fault in ((1 / math.sqrt(dk), None), (1.0, "no_scaling"), (1 / math.sqrt(d), "scale_by_d_model")):
        if abs(sc.value / want - 1) < 1e-6:
            if fault == "no_scaling" and obs.rec is not None and scaled_after_softmax(obs.rec):
                return "scale_after_softmax", ev
            return fault, ev
    if sc.by == "T":  # T is neither Dh nor D in the probe (named sizes differ): the key length S = T
        return "scale_from_wrong_size", ev
    return "other", ev


def head_width(obs: Observation, h: int) -> int | None:
    """The width of one head as the first attention's ``q @ kᵀ`` shows it, when q is ``(B, h, T, Dh)`` (``h`` heads
    on dim 1) and the product contracts Dh: a model whose config sets ``head_dim`` apart from ``d_model / n_heads``
    (Gemma: 256 for d_model 16) is scaled by 1/sqrt(Dh). None when the recording does not show it so plainly."""
    if obs.rec is None:
        return None
    cores = attention_cores(obs.rec)
    if not cores or cores[0].scores is None or cores[0].scores.op not in ("matmul", "__matmul__", "bmm"):
        return None
    ins = cores[0].scores.inputs
    if len(ins) != 2:
        return None
    q, k = tuple(ins[0].shape), tuple(ins[1].shape)
    if len(q) != 4 or len(k) != 4 or q[1] != h or q[-1] != k[-2] or q[-1] < 1:
        return None
    return int(q[-1])


SCALE_OPS = {"div", "div_", "mul", "mul_", "__truediv__", "__mul__", "__rmul__", "__itruediv__", "__imul__"}


def scaled_after_softmax(rec: Recording) -> bool:
    """The first attention's weights multiplied or divided by something between the softmax and the weighted sum
    of the values (``softmax(q @ kᵀ) / sqrt(d_k)``)."""
    cores = attention_cores(rec)
    if not cores or cores[0].weighted is None:
        return False
    core = cores[0]
    assert core.weighted is not None  # checked above
    return any(core.softmax.index < s.index < core.weighted.index and s.op in SCALE_OPS for s in rec.data_steps())


def unmapped(missing: str, obs: Observation) -> str:
    """Why the reference could not be given the learner's weights, and what would help."""
    why = f"could not map {missing}: the names do not say which is which"
    if obs.rec is None:
        why += f", and the recorder could not follow one forward ({obs.error})"
    else:
        n = obs.summary.get("softmaxes", 0)
        unf = obs.summary.get("unfollowed") or []
        if n == 0:
            why += (
                ", and the recorded forward shows no softmax over torch tensors (the scores left torch, for numpy "
                "or a C extension, or there is no softmax)"
            )
        else:
            why += f", and the recorded forward's {n} softmax(es) do not lead back to projections of the input"
        if unf:
            why += f" (not followed: {', '.join(map(str, unf[:3]))})"
    return why + (
        '; name them with --map \'{"q_proj.weight": "your.param", ...}\' (reference name → your '
        "parameter, .T to transpose)"
    )


def deviation_faults(obs: Observation) -> list[tuple[str, dict[str, Any]]]:
    """Bug-zoo faults the recorded flow itself shows (``observed.deviations``): scores not ``(B, H, T, S)`` or a
    view that moves numbers between axes before the softmax is a split without transpose, after it a merge
    without transpose. First first, one per fault."""
    if obs.rec is None:
        return []
    cores = attention_cores(obs.rec)
    first_softmax = cores[0].softmax.index if cores else None
    out: dict[str, dict[str, Any]] = {}
    for dev in obs.summary.get("deviations") or []:
        if dev["kind"] == "scores":
            fault = "split_without_transpose"
        elif dev["kind"] == "merge":
            fault = "merge_wrong_transpose"
        elif dev["kind"] == "view" and first_softmax is not None:
            fault = "split_without_transpose" if dev["step"] < first_softmax else "merge_wrong_transpose"
        else:
            continue
        out.setdefault(fault, dev)
    return list(out.items())


def softmax_off_the_keys(obs: Observation) -> dict[str, Any] | None:
    """The first softmax of the recorded flow taken over another axis than the keys, as a deviation
    (``observed._dev``'s fields), or None. The keys are the axis the weighted sum adds up (an einsum's contracted
    letter, a direct ``weights @ v``'s last axis: ``cores.key_axis``), else the one axis the recording names S;
    where neither says, nothing is claimed. A diffusion U-Net's AttentionBlock normalised over the queries this way
    (``softmax(dim=1)`` on (B, T, S)); beside a residual or a norm the reference cannot carry, the comparison cannot
    isolate it, and the flow names it instead of a silent pass."""
    if obs.rec is None:
        return None
    for core in attention_cores(obs.rec):
        s = core.softmax
        dim = s.extra.get("dim")
        dims = s.inputs[0].dims if s.inputs else ()
        if s.op not in ("softmax", "_softmax", "log_softmax") or not isinstance(dim, int) or not dims:
            continue
        keys = key_axis(obs.rec, s)
        if keys is None and dims.count("S") == 1:
            keys = dims.index("S")
        if keys is None or dim % len(dims) == keys:
            continue
        over = dims[dim % len(dims)]
        what = {"T": "the queries", "H": "the heads", "B": "the batch"}.get(over, f"axis {over}")
        what_zh = {"T": "查询", "H": "各个头", "B": "batch"}.get(over, f"{over} 轴")
        shown = "(" + ", ".join(dims) + ")"
        return {
            "step": s.index,
            "kind": "softmax",
            "line": s.line,
            "file": s.file,
            "source": s.source,
            "op": s.op,
            "dims": shown,
            "seen": f"the softmax normalises over dim={dim} of the scores {shown}: {what}, not the keys (dim={keys})",
            "seen_zh": f"softmax 在分数 {shown} 的 dim={dim} 上归一化：那是{what_zh}，不是键（dim={keys}）",
            "expected": f"the softmax over the keys, dim={keys}: each query's weights sum to 1",
            "expected_zh": f"沿键的维度（dim={keys}）做 softmax：每个查询的权重之和为 1",
        }
    return None


MASKING_OPS = {
    "masked_fill",
    "masked_fill_",
    "where",
    "mul",
    "mul_",
    "__mul__",
    "__rmul__",
    "multiply",
    "add",
    "__add__",
    "__radd__",
    "add_",
    "__iadd__",
    "__imul__",
    "__setitem__",
}


def mask_after_softmax_flow(plain: Recording | None, masked: Recording | None) -> dict[str, Any] | None:
    """The flow of ``mask_after_softmax``, whatever the fill (0, a product with the mask, -inf giving NaN): the
    steps that run only when a mask is passed (their lines absent from the plain forward) all come after the first
    softmax over the scores, none before it. Evidence with the first such step's line, else None."""
    if plain is None or masked is None:
        return None
    soft = [s.index for s in masked.steps if s.op in SOFTMAX_OPS and s.data]
    if not soft:
        return None
    plain_lines = {(s.file, s.line) for s in plain.steps}
    only = [s for s in masked.steps if (s.file, s.line) not in plain_lines and s.op in MASKING_OPS and s.line]
    if not only or any(s.index < soft[0] for s in only):
        return None
    step = only[0]
    return {
        "kind": "mask_after_softmax",
        "line": step.line,
        "source": step.source,
        "dims": None,
        "seen": "the mask is applied to the softmax's output (the weights), not to the scores before it",
        "seen_zh": "mask 施加在 softmax 的输出（权重）上，而不是 softmax 之前的分数上",
        "expected": "fill the hidden scores before the softmax, so the visible weights still sum to 1",
        "expected_zh": "在 softmax 之前填充被遮住的分数，可见位置的权重之和才仍为 1",
    }
