"""Facts the doctor reads from a recording (``anatomy.tracing``): the attention cores, the scale, the q/k/v/o
projections and the lines where the flow leaves the post's.

    rec = record(module, x)
    cores = attention_cores(rec)        # one per softmax (a per-head loop has H of them)
    observed_scale(rec)                 # Scale(value=0.5, expected=0.5, by="Dh", line=..., ...)
    roles(rec)                          # {"q": [Projection...], "k": [...], "v": [...], "o": Projection}
    hypothesis(rec, d, h)               # a mapping.Hypothesis built from the dataflow, or None
    deviations(rec)                     # the first steps where shapes leave the post's, with the learner's lines

**The scale** is read, not guessed: the softmax's input divided by the matmul that produced it (``scores / (q
kᵀ)``, on entries neither masked nor near zero), times every scalar applied to q or k on their way from the
projection (``q = q / sqrt(dk)`` before the matmul counts too). It is constant when the module only scales;
an additive bias (ALiBi, relative positions) makes it vary, and then it is not reported.

**The roles** follow the data: q is what feeds the rows of the scores, k its columns, v the matrix the softmax
weights multiply; o is the first projection applied to what the weighted sum became. Each is traced to the
projection's rows through the feature companions, so a ``ModuleList`` of heads, a fused ``qkv``, an einsum over a
bare Parameter and a Linear in an ``nn.Sequential`` all map the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch

from anatomy.doctor.mapping.naming import Hypothesis, Reader, Source
from anatomy.doctor.recording.cores import PASS_OPS, Core, attention_cores
from anatomy.tracing import steps as r
from anatomy.tracing.dims import letters


@dataclass
class Scale:
    value: float | None  # scores ÷ (q kᵀ), None when not a constant (or no softmax)
    expected: float | None  # 1/sqrt(Dh) from the probe sizes
    by: str  # what the observed value is 1/sqrt of: "Dh", "D", "1 (no scaling)", or a number
    line: int = 0
    file: str = ""
    source: str = ""
    note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "value": self.value,
            "expected": self.expected,
            "by": self.by,
            "line": self.line,
            "source": self.source,
            **({"note": self.note} if self.note else {}),
        }


def _ratio(core: Core) -> tuple[float | None, str]:
    soft, scores = core.softmax, core.scores
    if soft.op in r.SDPA_OPS:
        v = soft.extra.get("scale")
        return v, ""
    if scores is None or scores.value is None:
        return None, "the softmax's input does not come from a matmul the recorder saw"
    m = scores.value.double()
    s_in = core.chain[-1].value.double() if core.chain and core.chain[-1].value is not None else m
    if s_in.shape != m.shape:
        try:
            m = m.broadcast_to(s_in.shape)
        except RuntimeError:
            return None, f"scores {tuple(m.shape)} and softmax input {tuple(s_in.shape)} differ in shape"
    ok = torch.isfinite(s_in) & torch.isfinite(m) & (m.abs() > 1e-6 * float(m.abs().max())) & (s_in.abs() < 1e8)
    ok &= s_in > -1e3  # a masked score (-1e9, -1e4, the dtype's minimum) is a fill, not a scale
    if not bool(ok.any()):
        return None, "every score is masked"
    ratio = s_in[ok] / m[ok]
    med = float(ratio.median())
    if float((ratio - med).abs().max()) > 1e-6 * max(abs(med), 1e-12):
        return None, "the softmax input is not a constant multiple of q·kᵀ (an additive bias?)"
    fa, fb = (
        (scores.extra.get("factors") or [1.0, 1.0])[-2:]
        if scores.op != "einsum"
        else (scores.extra.get("factors") or [1.0, 1.0])[:2]
    )
    return med * fa * fb * scores.extra.get("alpha", 1.0), ""


def observed_scale(rec: r.Recording) -> Scale | None:
    """The scale of the first attention (all heads must agree), named against the probe's Dh and D."""
    cores = attention_cores(rec)
    if not cores:
        return None
    values, note = [], ""
    for core in cores:
        v, why = _ratio(core)
        if v is None:
            note = note or why
        values.append(v)
    dh = rec.sizes.get("Dh")
    expected = dh**-0.5 if dh else None
    first = cores[0]
    where = first.chain[0] if first.chain else (first.scores or first.softmax)
    for s in first.chain:  # the line that scales, when there is one
        if s.op in PASS_OPS and s.op.startswith(("div", "mul", "__truediv__", "__mul__", "true_divide")):
            where = s
            break
    v = values[0]
    if v is None or any(x is None or abs(x - v) > 1e-9 * abs(v) for x in values):
        return Scale(
            None, expected, "?", where.line, where.file, where.source, note or "the heads are scaled differently"
        )
    by = _by(v, rec.sizes)
    return Scale(v, expected, by, where.line, where.file, where.source)


def _by(v: float, sizes: dict[str, Any]) -> str:
    if abs(v - 1) < 1e-9:
        return "1 (no scaling)"
    names = ("Dh", "D", "H", "T")
    for name in names:  # 1/sqrt(n) first: with D = Dh**2 (16 and 4), 1/Dh is also 1/sqrt(D), the common bug
        n = sizes.get(name)
        if n and abs(v - n**-0.5) < 1e-9 * n:
            return name
    for name in names:
        n = sizes.get(name)
        if n and abs(v - 1 / n) < 1e-9:
            return f"{name}**2 (divided by {name}, not its square root)"
    return f"{v**-2:.6g}" if v > 0 else str(v)


def roles(rec: r.Recording) -> dict[str, Any]:
    """``{"q": [...], "k": [...], "v": [...], "o": Projection | None}`` from the first attention's dataflow."""
    cores = attention_cores(rec)
    out: dict[str, Any] = {"q": [], "k": [], "v": [], "o": None}
    vs: set[int] = set()
    for core in cores:
        for role, feat in (("q", core.q_feat), ("k", core.k_feat), ("v", core.v_feat)):
            for p in rec.projection_of(feat):
                if p not in out[role]:
                    out[role].append(p)
        vs |= {p.index for p in rec.projection_of(core.v_feat)}
    last = max((c.weighted.index for c in cores if c.weighted is not None), default=None)
    if last is not None:
        for p in rec.projections:
            step = rec.steps[p.step]
            if p.step > last and any(
                f is not None and rec.projection_of(f) and {q.index for q in rec.projection_of(f)} <= vs
                for f in step.feats
            ):
                out["o"] = p
                break
    return out


def _rows_source(rec: r.Recording, feats: torch.Tensor, what: str) -> tuple[Source, Source | None]:
    """Reference rows from feature ids: row i is row ``feats[i]`` of its projection's matrix."""
    picks = [(rec.projections[int(f) // r.FEATURE_STRIDE], int(f) % r.FEATURE_STRIDE) for f in feats.tolist()]
    users = list(dict.fromkeys(p.weight for p, _ in picks))

    def weight(params: dict[str, torch.Tensor], picks: list[tuple[r.Projection, int]] = picks) -> torch.Tensor:
        mats: dict[int, torch.Tensor] = {}
        return torch.stack([mats.setdefault(p.index, p.matrix(params))[f] for p, f in picks])

    note = f"observed: {what} reads {', '.join(users)}"
    w = Source(users[0], note, weight)
    if all(p.bias is None for p, _ in picks):
        return w, None
    bias_users = list(dict.fromkeys(p.bias_param for p, _ in picks if p.bias_param))

    def bias(params: dict[str, torch.Tensor], picks: list[tuple[r.Projection, int]] = picks) -> torch.Tensor:
        vals: dict[int, torch.Tensor] = {}
        return torch.stack(
            [
                vals.setdefault(p.index, p.bias(params))[f]
                if p.bias is not None
                else torch.zeros((), dtype=torch.float64)
                for p, f in picks
            ]
        )

    return w, Source(bias_users[0] if bias_users else users[0], note, bias)


def hypothesis(rec: r.Recording, d: int, h: int) -> Hypothesis | None:
    """q/k/v/o of our reference from the observed dataflow (None when the recording does not show them all)."""
    cores = attention_cores(rec)
    if not cores or any(c.q_feat is None or c.k_feat is None or c.v_feat is None for c in cores):
        return None
    q = torch.cat([c.q_feat for c in cores if c.q_feat is not None]).reshape(-1)  # all are (checked above)
    k = torch.cat([c.k_feat for c in cores if c.k_feat is not None]).reshape(-1)  # all are (checked above)
    v = torch.cat([c.v_feat for c in cores if c.v_feat is not None]).reshape(-1)  # all are (checked above)
    if q.numel() != d or k.numel() != d or v.numel() != d or len(set(q.tolist())) != d:
        return None  # grouped heads, a head width of its own: the name-based mapping reads those
    src: dict[str, Source] = {}
    for key, feats in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
        w, b = _rows_source(rec, feats, key.split("_")[0])
        src[f"{key}.weight"] = w
        if b is not None:
            src[f"{key}.bias"] = b
    o = roles(rec)["o"]
    if o is None or o.n_in != d:
        return None
    step = rec.steps[o.step]
    f_in = next((f for f in step.feats if f is not None), None)
    cols = _columns(f_in, v)
    note = "observed: o reads " + o.weight + ("" if cols is not None else " (columns in order)")

    def o_weight(
        params: dict[str, torch.Tensor], o: r.Projection = o, cols: torch.Tensor | None = cols
    ) -> torch.Tensor:
        m = o.matrix(params)  # (D, D): rows out, columns in
        return m if cols is None else m[:, cols]

    src["o_proj.weight"] = Source(o.weight, note, o_weight)
    if o.bias is not None:
        src["o_proj.bias"] = Source(o.bias_param or o.weight, note, cast(Reader, lambda params, o=o: o.bias(params)))
    mods = {"o_proj": o.module} if o.module else {}
    return Hypothesis(f"observed dataflow ({_style(rec, cores)})", src, mods)


def _columns(f_in: torch.Tensor | None, v: torch.Tensor) -> torch.Tensor | None:
    """Which input column of the output projection holds each reference v feature (None: not all found)."""
    if f_in is None:
        return None
    cols = f_in.reshape(-1, f_in.shape[-1])[0]
    where = {int(f): i for i, f in reversed(list(enumerate(cols.tolist())))}
    got = [where.get(int(f)) for f in v.tolist()]
    return None if any(g is None for g in got) else torch.tensor(got)


def _style(rec: r.Recording, cores: list[Core]) -> str:
    ops = {p.weight for p in rec.projections}
    per_head = len(cores) > 1
    fused = any(p.n_features > rec.sizes.get("D", 0) for p in rec.projections)
    return ", ".join(
        x
        for x in (
            "one softmax per head" if per_head else "batched heads",
            "fused q|k|v" if fused else "",
            f"{len(ops)} weights",
        )
        if x
    )


def deviations(rec: r.Recording) -> list[dict[str, Any]]:
    """Steps where the flow leaves the post's §5.1, first first: each with the learner's line, what was seen and
    what the post expected there (``seen``/``expected`` in English, ``seen_zh``/``expected_zh`` in Chinese)."""
    out = []
    for s in rec.data_steps():
        if s.note:
            out.append(
                _dev(
                    s,
                    "view",
                    s.note,
                    f"{letters(s.inputs[0].dims)} 变成 "
                    f"{letters(s.outputs[0].dims)} 只用了一次 view：数字在轴之间搬家，而不是轴换位置"
                    "（少了 transpose）",
                    SPLIT_EN,
                    SPLIT_ZH,
                )
            )
    for core in attention_cores(rec):
        s = core.softmax
        dims = s.inputs[0].dims if s.inputs else ()
        if s.op in r.SDPA_OPS:  # the fused kernel: q must already be (B, H, T, Dh)
            if len(dims) >= 3 and dims[-2] != "T":
                en, zh = _operand_lines(rec, s)
                out.append(
                    _dev(
                        s,
                        "scores",
                        f"{en}q reaches the fused attention as {letters(dims)}",
                        f"{zh}q 以 {letters(dims)} 的形状进入融合注意力",
                        "q, k, v as (B, H, T, Dh): view(B, T, H, Dh).transpose(1, 2) first",
                        "q、k、v 应为 (B, H, T, Dh)：先 view(B, T, H, Dh) 再 transpose(1, 2)",
                    )
                )
            continue
        if len(dims) >= 2 and tuple(dims[-2:]) != ("T", "S"):
            at = core.scores or s
            en, zh = _operand_lines(rec, at)
            out.append(
                _dev(
                    at,
                    "scores",
                    f"{en}the scores are {letters(dims)}",
                    f"{zh}分数的形状是 {letters(dims)}",
                    "scores (B, H, T, S): q and k split into heads with view(B, T, H, Dh).transpose(1, 2) "
                    "before q @ k.transpose(-2, -1)",
                    "分数应为 (B, H, T, S)：q、k 先 view(B, T, H, Dh) 再 transpose(1, 2) 拆头，然后才 "
                    "q @ k.transpose(-2, -1)",
                )
            )
            break
    for s in rec.data_steps():
        if (
            s.op in ("view", "reshape")
            and len(s.inputs[0].dims) == 4
            and s.inputs[0].dims[1:3] == ("H", "T")
            and len(s.outputs[0].dims) == 3
            and not s.note
        ):
            out.append(
                _dev(
                    s,
                    "merge",
                    "heads merged from (B, H, T, Dh) without transpose(1, 2): heads and positions are mixed",
                    "从 (B, H, T, Dh) 直接并头、没有 transpose(1, 2)：头和位置混在一起",
                    MERGE_EN,
                    MERGE_ZH,
                )
            )
    return sorted(out, key=lambda d: d["step"])


SPLIT_EN = (
    "split: view(B, T, H, Dh) then transpose(1, 2) → (B, H, T, Dh); merge: transpose(1, 2) then reshape → (B, T, D)"
)
SPLIT_ZH = (
    "拆头：先 view(B, T, H, Dh) 再 transpose(1, 2) → (B, H, T, Dh)；并头：先 transpose(1, 2) 再 reshape → (B, T, D)"
)
MERGE_EN = "transpose(1, 2) to (B, T, H, Dh), then reshape to (B, T, D)"
MERGE_ZH = "先 transpose(1, 2) 变成 (B, T, H, Dh)，再 reshape 成 (B, T, D)"


def _operand_lines(rec: r.Recording, step: r.Step) -> tuple[str, str]:
    """``line 23 `q = q.view(b, t, h, dk)` is used by the matmul at line 25 without transpose(1, 2): ``"""
    for i in range(len(step.inputs)):
        src = rec.producer(step, i)
        while src is not None and src.op in ("transpose", "T", "mT", "contiguous"):
            src = rec.producer(src)
        if src is not None and src.op in ("view", "reshape") and src.line != step.line:
            return (
                f"line {src.line} `{src.source}` is used by the matmul at line {step.line} without transpose(1, 2): ",
                f"第 {src.line} 行 `{src.source}` 没有 transpose(1, 2) 就被第 {step.line} 行的矩阵乘法使用：",
            )
    return "", ""


def _dev(step: r.Step, kind: str, seen: str, seen_zh: str, expected: str, expected_zh: str) -> dict[str, Any]:
    return {
        "step": step.index,
        "kind": kind,
        "line": step.line,
        "file": step.file,
        "source": step.source,
        "op": step.op,
        "dims": letters(step.outputs[0].dims) if step.outputs else "",
        "seen": seen,
        "expected": expected,
        "seen_zh": seen_zh,
        "expected_zh": expected_zh,
    }


def summary(rec: r.Recording) -> dict[str, Any]:
    """What the doctor's JSON report carries under ``found.observed`` (new fields; docs/doctor.md)."""
    sc = observed_scale(rec)
    rl = roles(rec)
    return {
        "sizes": rec.sizes,
        "softmaxes": len(attention_cores(rec)),
        "scale": None if sc is None else sc.to_dict(),
        "projections": {
            k: ([p.weight for p in v] if isinstance(v, list) else (v.weight if v else None)) for k, v in rl.items()
        },
        "deviations": deviations(rec),
        "unfollowed": rec.unfollowed[:5],
        **(
            {"expected_scale_check": math.isclose(sc.value, sc.expected, rel_tol=1e-9)}
            if sc is not None and sc.value is not None and sc.expected
            else {}
        ),
    }
