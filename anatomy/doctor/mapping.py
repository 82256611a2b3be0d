"""Map the learner's parameters onto our reference's names (``q_proj.weight``, ``attn_add_norm.norm.weight``, ...).

A *hypothesis* says, for each reference parameter, which learner parameter feeds it and how (rows of a fused
matrix, a transpose, a ``(H, D, Dh)`` einsum tensor flattened). Names are matched loosely: the affixes learners
put around q/k/v/o (``w_q``, ``q_proj``, ``linear_q``, ``to_q``, ``query``, ``W_Q`` ...) are stripped. Where the
code cannot tell a layout from names and shapes alone (``x @ W`` or ``x @ W.T``; a fused ``qkv`` as ``q|k|v``
chunks or per head), every reading is a hypothesis, and the differential diagnosis keeps the one that
reproduces the learner's output. A ``--map`` JSON names the rest: ``{"q_proj.weight": "attn.Wq.T", ...}``
(reference name → learner parameter, ``.T`` to transpose; values are reshaped to the reference's shape).

Grouped-query and multi-query attention (fewer key/value heads than query heads) are read from the shapes: k and v
Linears with ``Hkv * Dh`` outputs (or a fused ``D + 2 Hkv Dh`` one) give ``Hkv``; the reference is then our
``MultiHeadAttention(n_kv_heads=Hkv)`` (:func:`kv_heads`). Query head ``i`` shares key/value head ``i // (H/Hkv)``
there (``repeat_interleave``); a learner who tiles the key/value heads instead (``k.repeat(1, H/Hkv, 1, 1)``:
head ``i`` uses ``i mod Hkv``) wrote the same model with its query heads in another order, so that reading is a
second hypothesis, with the query rows (and the output projection's columns) regrouped.

QK-norm (Qwen3, OLMo2, Gemma 3): two norms of width ``Dh`` in the attention (``q_norm``/``k_norm``,
``query_norm``/``key_norm``, ``q_layernorm``/``k_ln`` ..., or else the only two ``Dh``-wide norms there) normalise
each head's query and key. The reference is then ``MultiHeadAttention(qk_norm=kind, norm_eps=eps)`` with the
learner's kind (``nn.LayerNorm`` or a norm with a bias: ``layernorm``; ``nn.RMSNorm`` or a weight-only norm:
``rmsnorm``) and eps, and their weights (and biases) feed ``q_norm``/``k_norm`` (:func:`find_qk_norm`). q/k norms of
width ``D`` (one norm over all heads, before the split) cannot carry the reference's per-head weight: the reference
keeps its per-head QK-norm with gains 1, and the walk to the first difference compares the two at ``q_norm``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from anatomy.doctor.subject import CheckError

ROLES = {"q": {"q", "query", "queries"}, "k": {"k", "key", "keys"}, "v": {"v", "value", "values"},
         "o": {"o", "out", "output", "outs"}, "qkv": {"qkv", "kqv", "in", "attn", "qkvs"}}
AFFIXES = sorted({"linear", "proj", "projection", "weight", "weights", "lin", "dense", "layer", "net", "matrix",
                  "mat", "to", "fc", "w", "l", "c", "in", "s", "head", "heads", "self"}, key=len, reverse=True)
ATTN_KEYS = ("q_proj", "k_proj", "v_proj", "o_proj")


def core(name: str) -> str:
    """``W_query_proj`` → ``query``: strip affixes while what is left is not a known core."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    cores = set().union(*ROLES.values())
    for _ in range(4):
        if s in cores:
            return s
        for a in AFFIXES:
            if s.startswith(a) and len(s) > len(a):
                s = s[len(a):]
                break
            if s.endswith(a) and len(s) > len(a):
                s = s[: -len(a)]
                break
        else:
            return s
    return s


def role_of(name: str) -> str | None:
    c = core(name)
    return next((r for r, names in ROLES.items() if c in names), None)


@dataclass
class Source:
    user: str  # the learner's parameter name
    note: str  # how it is read: "", "transposed", "rows 16:32", ...
    fn: Callable[[dict[str, torch.Tensor]], torch.Tensor] = field(repr=False)


@dataclass
class QKNorm:
    """The learner's QK-norm, as the reference takes it: ``MultiHeadAttention(qk_norm=kind, norm_eps=eps)``."""

    kind: str  # "rmsnorm" | "layernorm"
    eps: float
    q: str | None  # the learner's norm modules (None: named by --map through a bare Parameter)
    k: str | None
    width: int  # Dh: per head, weights mapped; D: over all heads before the split, which ours cannot carry

    def to_dict(self) -> dict:
        return {"kind": self.kind, "eps": self.eps, "q_norm": self.q, "k_norm": self.k, "width": self.width}


@dataclass
class Hypothesis:
    style: str
    sources: dict[str, Source]  # reference parameter name → source
    modules: dict[str, str] = field(default_factory=dict)  # reference module → learner module (for hooks)
    heads: list[int] | None = None  # our query head j is the learner's head heads[j] (None: the same order)
    qk_norm: QKNorm | None = None  # the reference normalises q and k per head (None: no QK-norm)

    def prefixed(self, prefix: str) -> Hypothesis:
        return Hypothesis(self.style, {prefix + k: v for k, v in self.sources.items()},
                          {prefix + k: v for k, v in self.modules.items()}, self.heads, self.qk_norm)

    def learner_heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(B, H, ...)`` per head in our order → in the learner's order (to compare with its weights)."""
        if self.heads is None:
            return t
        out = torch.empty_like(t)
        out[:, self.heads] = t
        return out

    def learner_features(self, t: torch.Tensor) -> torch.Tensor:
        """``(..., H*Dh)`` query features (q_proj's output, o_proj's input) in our head order → the learner's."""
        if self.heads is None:
            return t
        ours = t.unflatten(-1, (len(self.heads), -1))  # (..., H, Dh)
        out = torch.empty_like(ours)
        out[..., self.heads, :] = ours
        return out.flatten(-2)


def _p(name: str, f=lambda t: t, note: str = "") -> Source:
    return Source(name, note, lambda params: f(params[name]))


def _linear(prefix: str, path: str, lin: nn.Linear) -> dict[str, Source]:
    out = {f"{prefix}.weight": _p(f"{path}.weight")}
    if lin.bias is not None:
        out[f"{prefix}.bias"] = _p(f"{path}.bias")
    return out


def _rows(d: int, h: int, layout: str, chunk: int) -> torch.Tensor:
    """Row indices of chunk ``chunk`` (0=q, 1=k, 2=v) in a fused ``(3D, D)`` projection."""
    dh = d // h
    if layout == "q|k|v":
        return torch.arange(chunk * d, (chunk + 1) * d)
    heads = torch.arange(h)[:, None] * 3 * dh + chunk * dh + torch.arange(dh)[None]  # (H, Dh)
    return heads.reshape(-1)


def kv_dims(d: int, h: int) -> dict[int, int]:
    """Output width of a k/v projection → key/value heads, for every ``Hkv`` that divides ``H`` (``Hkv * Dh``)."""
    dh = d // h
    return {kv * dh: kv for kv in range(1, h + 1) if h % kv == 0}


def kv_heads(hyp: Hypothesis, params: dict[str, torch.Tensor], d: int, h: int) -> int:
    """Key/value heads of the reference that reads ``hyp``: from the size of what feeds ``k_proj.weight``."""
    src = hyp.sources.get("k_proj.weight") or hyp.sources.get("attn.k_proj.weight")
    if src is None:
        return h
    try:
        n = src.fn(params).numel()
    except (KeyError, IndexError, RuntimeError):
        return h
    return kv_dims(d, h).get(n // d, h) if n % d == 0 else h


def _groups(d: int, h: int, kv: int) -> list[tuple[str, torch.Tensor | None, list[int] | None]]:
    """Ways query heads can share ``kv`` key/value heads: ours (consecutive query heads share one, no change), and,
    when it differs, tiled (head ``i`` uses ``i mod kv``): the query rows to take in our head order, and that
    order (our head j is the learner's head ``heads[j]``)."""
    if kv in (1, h):
        return [("", None, None)]
    r, dh = h // kv, d // h
    heads = [(j % r) * kv + j // r for j in range(h)]
    rows = torch.cat([torch.arange(p * dh, (p + 1) * dh) for p in heads])
    return [("", None, None), (f", tiled: query head i uses key/value head i mod {kv}", rows, heads)]


def _regroup(src: dict[str, Source], rows: torch.Tensor | None) -> dict[str, Source]:
    """Reorder the query heads of a hypothesis (rows of q_proj, columns of o_proj) to our grouping."""
    if rows is None:
        return src
    out = dict(src)
    for key, f in (("q_proj.weight", lambda t: t[rows]), ("q_proj.bias", lambda t: t[rows]),
                   ("o_proj.weight", lambda t: t[:, rows])):
        s = src.get(key)
        if s is not None:
            out[key] = Source(s.user, (s.note + ", " if s.note else "") + "heads regrouped",
                              lambda params, g=s.fn, f=f: f(g(params)))
    return out


def _gqa_style(kv: int, h: int) -> str:
    if kv == h:
        return ""
    return "multi-query attention, 1 key/value head" if kv == 1 else f"grouped-query attention, {kv} key/value heads"


def _fused(d: int, h: int, weight: str, bias: str | None, *, transpose: bool) -> list[tuple[str, dict]]:
    """Fused q/k/v weight (``(3D, D)`` Linear-style, or ``(D, 3D)`` used as ``x @ W``) → two chunk layouts."""
    hyps = []
    for layout in ("q|k|v", "per head"):
        src = {}
        for c, key in enumerate(("q_proj", "k_proj", "v_proj")):
            idx = _rows(d, h, layout, c)
            if transpose:
                src[f"{key}.weight"] = _p(weight, lambda t, idx=idx: t[:, idx].T, f"columns {layout} #{c}, transposed")
            else:
                src[f"{key}.weight"] = _p(weight, lambda t, idx=idx: t[idx], f"rows {layout} #{c}")
            if bias is not None:
                src[f"{key}.bias"] = _p(bias, lambda t, idx=idx: t.reshape(-1)[idx], f"{layout} #{c}")
        hyps.append((layout, src))
    return hyps


def _fused_gqa(d: int, h: int, kv: int, weight: str, bias: str | None) -> dict[str, Source]:
    """A fused ``(D + 2 Hkv Dh, D)`` projection, rows ``q | k | v`` (our own ``fused_qkv`` layout)."""
    kv_dim = kv * (d // h)
    spans = {"q_proj": (0, d), "k_proj": (d, d + kv_dim), "v_proj": (d + kv_dim, d + 2 * kv_dim)}
    src = {}
    for key, (a, b) in spans.items():
        src[f"{key}.weight"] = _p(weight, lambda t, a=a, b=b: t[a:b], f"rows {a}:{b}")
        if bias is not None:
            src[f"{key}.bias"] = _p(bias, lambda t, a=a, b=b: t[a:b], f"{a}:{b}")
    return src


def find_attention(module: nn.Module, d: int, h: int) -> tuple[list[Hypothesis], str | None]:
    """Hypotheses for ``q_proj/k_proj/v_proj/o_proj`` (weights and biases), ``q_norm/k_norm`` when the learner
    normalises q and k (:func:`find_qk_norm`), and the learner's attention scope."""
    hyps, scope = _find_projections(module, d, h)
    qk = find_qk_norm(module, scope, d, h) if hyps else None
    if qk is None:
        return hyps, scope
    norm, src, mods = qk
    return [Hypothesis(hp.style, {**hp.sources, **src}, {**hp.modules, **mods}, hp.heads, norm) for hp in hyps], scope


def _find_projections(module: nn.Module, d: int, h: int) -> tuple[list[Hypothesis], str | None]:
    named = dict(module.named_modules())
    for path, m in named.items():  # torch.nn.MultiheadAttention anywhere inside
        if isinstance(m, nn.MultiheadAttention) and m.in_proj_weight is not None and m.embed_dim == d:
            pre = f"{path}." if path else ""
            src = _fused(d, h, f"{pre}in_proj_weight", f"{pre}in_proj_bias" if m.in_proj_bias is not None
                         else None, transpose=False)[0][1]
            src.update(_linear("o_proj", f"{pre}out_proj", m.out_proj))
            return [Hypothesis("torch.nn.MultiheadAttention (in_proj_weight rows q|k|v)", src,
                               {"o_proj": f"{pre}out_proj"})], path

    linears = {p: m for p, m in named.items() if isinstance(m, nn.Linear)}

    def parent(p: str) -> str:
        return p.rpartition(".")[0]

    def local(p: str) -> str:
        return p.rpartition(".")[2]

    def square(m: nn.Linear) -> bool:
        return m.in_features == d and m.out_features == d

    kv_of = kv_dims(d, h)  # k/v output width → key/value heads (D itself: H of them)
    groups: dict[str, dict[str, str]] = {}
    for p, m in linears.items():
        role = role_of(local(p))
        if role in ("q", "o") and square(m) or role in ("k", "v") and m.in_features == d and m.out_features in kv_of:
            groups.setdefault(parent(p), {}).setdefault(role, p)
        elif role == "qkv" and m.in_features == d and (m.out_features - d) // 2 in kv_of \
                and m.out_features > d and (m.out_features - d) % 2 == 0:
            groups.setdefault(parent(p), {}).setdefault("qkv", p)

    def find_o(scope: str, taken: set[str]) -> str | None:
        inside = [p for p, m in linears.items() if parent(p) == scope and p not in taken and square(m)]
        named_o = [p for p in inside if role_of(local(p)) == "o"]
        if named_o or len(inside) == 1:
            return (named_o or inside)[0]
        return None

    for scope, roles in groups.items():
        if {"q", "k", "v"} <= roles.keys() and linears[roles["k"]].out_features == linears[roles["v"]].out_features:
            o = roles.get("o") or find_o(scope, {roles["q"], roles["k"], roles["v"]})
            if o is None:
                continue
            src, mods = {}, {}
            for r, key in zip("qkvo", ATTN_KEYS):
                path = roles[r] if r != "o" else o
                src.update(_linear(key, path, linears[path]))
                mods[key] = path
            kv = kv_of[linears[roles["k"]].out_features]
            return [Hypothesis(f"separate Linears ({_gqa_style(kv, h)}{how})" if kv != h else "separate Linears",
                               _regroup(src, rows), mods, heads) for how, rows, heads in _groups(d, h, kv)], scope
    for scope, roles in groups.items():
        if "qkv" in roles:
            o = roles.get("o") or find_o(scope, {roles["qkv"]})
            if o is None:
                continue
            fused = linears[roles["qkv"]]
            bias = f"{roles['qkv']}.bias" if fused.bias is not None else None
            kv = kv_of[(fused.out_features - d) // 2]
            hyps = []
            if kv == h:
                for layout, src in _fused(d, h, f"{roles['qkv']}.weight", bias, transpose=False):
                    src.update(_linear("o_proj", o, linears[o]))
                    hyps.append(Hypothesis(f"fused qkv Linear ({layout})", src, {"o_proj": o}))
                return hyps, scope
            src = _fused_gqa(d, h, kv, f"{roles['qkv']}.weight", bias)  # q|k|v chunks of widths D, Hkv Dh, Hkv Dh
            src.update(_linear("o_proj", o, linears[o]))
            return [Hypothesis(f"fused qkv Linear (q|k|v, {_gqa_style(kv, h)}{how})", _regroup(src, rows),
                               {"o_proj": o}, heads) for how, rows, heads in _groups(d, h, kv)], scope
    for p, m in named.items():  # the annotated transformer's `linears` = 4 clones: q, k, v, o
        if isinstance(m, nn.ModuleList) and len(m) == 4 and all(isinstance(x, nn.Linear) and square(x) for x in m):
            src, mods = {}, {}
            for i, key in enumerate(ATTN_KEYS):
                src.update(_linear(key, f"{p}.{i}", m[i]))
                mods[key] = f"{p}.{i}"
            return [Hypothesis(f"ModuleList {local(p)}[0..3] = q, k, v, o", src, mods)], parent(p)
    return _find_einsum(module, d, h)


def _find_einsum(module: nn.Module, d: int, h: int) -> tuple[list[Hypothesis], str | None]:
    """Bare Parameters: ``W_Q (D, D)`` / ``(H, D, Dh)`` / ``(D, H, Dh)``, ``W_O (D, D)`` / ``(H, Dh, D)``, biases."""
    linear_params = {f"{p}.{n}" if p else n for p, m in module.named_modules() if isinstance(m, nn.Linear)
                     for n, _ in m.named_parameters(recurse=False)}
    weights: dict[tuple[str, str], tuple[str, torch.Tensor]] = {}
    biases: dict[tuple[str, str], str] = {}
    for name, p in module.named_parameters():
        if name in linear_params:
            continue
        scope, _, leaf = name.rpartition(".")
        low = re.sub(r"[^a-z0-9]", "", leaf.lower())
        is_bias = low.startswith("bias") or low.endswith("bias") or bool(
            re.fullmatch(r"b_?(q|k|v|o|qkv|query|key|value|out|output)", leaf.lower()))
        stem = re.sub(r"^(bias|b)|bias$", "", low) if is_bias else leaf
        role = role_of(stem)
        if role is None:
            continue
        (biases if is_bias else weights).setdefault((scope, role), (name, p) if not is_bias else name)
    dh = d // h
    for scope in dict.fromkeys(s for s, _ in weights):  # in parameter order: the same choice every run
        have = {r: weights[(scope, r)] for r in ("q", "k", "v", "o", "qkv") if (scope, r) in weights}
        if "o" not in have or not ({"q", "k", "v"} <= have.keys() or "qkv" in have):
            continue
        bias = {r: biases.get((scope, r)) for r in ("q", "k", "v", "o", "qkv")}
        hyps = []
        for linear_style in (False, True):  # x @ W (W is in × out) or x @ W.T (nn.Linear's layout)
            src: dict[str, Source] = {}
            ok = True
            for r, key in zip("qkv", ATTN_KEYS[:3]):
                if r not in have:
                    continue
                name, p = have[r]
                shape = tuple(p.shape)
                if shape == (d, d):
                    src[f"{key}.weight"] = _p(name, (lambda t: t) if linear_style else (lambda t: t.T),
                                              "" if linear_style else "transposed (x @ W)")
                elif shape == (h, d, dh) and not linear_style:
                    src[f"{key}.weight"] = _p(name, lambda t: t.permute(0, 2, 1).reshape(d, d), "(H, D, Dh)")
                elif shape == (d, h, dh) and not linear_style:
                    src[f"{key}.weight"] = _p(name, lambda t: t.reshape(d, d).T, "(D, H, Dh)")
                else:
                    ok = False
                if bias[r]:
                    src[f"{key}.bias"] = _p(bias[r], lambda t: t.reshape(-1))
            if "qkv" in have and "q_proj.weight" not in src:
                name, p = have["qkv"]
                if tuple(p.shape) == (3 * d, d) and linear_style:
                    fused = _fused(d, h, name, bias["qkv"], transpose=False)
                elif tuple(p.shape) == (d, 3 * d) and not linear_style:
                    fused = _fused(d, h, name, bias["qkv"], transpose=True)
                else:
                    fused = []
                ok = ok and bool(fused)
            else:
                fused = [("", {})]
            name, p = have["o"]
            if tuple(p.shape) == (d, d):
                o_src = _p(name, (lambda t: t) if linear_style else (lambda t: t.T),
                           "" if linear_style else "transposed (x @ W)")
            elif tuple(p.shape) == (h, dh, d) and not linear_style:
                o_src = _p(name, lambda t: t.reshape(d, d).T, "(H, Dh, D)")
            else:
                ok = False
            if not ok:
                continue
            src["o_proj.weight"] = o_src
            if bias["o"]:
                src["o_proj.bias"] = _p(bias["o"], lambda t: t.reshape(-1))
            for layout, fsrc in fused:
                style = "einsum Parameters (" + ("x @ W.T" if linear_style else "x @ W") + \
                        (f", fused {layout})" if layout else ")")
                hyps.append(Hypothesis(style, {**src, **fsrc}))
        if hyps:
            return hyps, scope
    return [], None


# --- QK-norm --------------------------------------------------------------------------------------------------

QK_NORM_AFFIXES = ("layernorm", "rmsnorm", "norm", "ln")


def qk_role(name: str) -> str | None:
    """``q_norm``, ``query_norm``, ``q_layernorm``, ``norm_k``, ``k_ln`` → ``"q"`` / ``"k"``; anything else None."""
    s = re.sub(r"[^a-z0-9]", "", name.lower())
    for a in QK_NORM_AFFIXES:
        if s.endswith(a) and len(s) > len(a):
            s = s[: -len(a)]
            break
        if s.startswith(a) and len(s) > len(a):
            s = s[len(a):]
            break
    else:
        return None
    role = role_of(s)
    return role if role in ("q", "k") else None


def norm_width(m: nn.Module) -> int | None:
    """The width a norm module normalises over (``nn.LayerNorm``/``nn.RMSNorm``, or a class named ``*Norm`` with a
    1-d weight); None for anything else."""
    if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
        shape = tuple(m.normalized_shape)
        return shape[0] if len(shape) == 1 else None
    w = getattr(m, "weight", None)
    if "norm" in type(m).__name__.lower() and isinstance(w, torch.Tensor) and w.dim() == 1:
        return w.shape[0]
    return None


def qk_norm_kind(m: nn.Module) -> str:
    """``nn.RMSNorm``, a class named ``*RMS*`` or a norm with a weight only → rmsnorm; ``nn.LayerNorm`` or a norm
    with a bias → layernorm."""
    if isinstance(m, nn.RMSNorm) or "rms" in type(m).__name__.lower():
        return "rmsnorm"
    if isinstance(m, nn.LayerNorm) or isinstance(getattr(m, "bias", None), torch.Tensor):
        return "layernorm"
    return "rmsnorm"


def _norm_sources(ref: str, path: str, m: nn.Module) -> dict[str, Source]:
    out = {}
    for p in ("weight", "bias"):
        if isinstance(getattr(m, p, None), torch.Tensor):
            out[f"{ref}.{p}"] = _p(f"{path}.{p}" if path else p)
    return out


def find_qk_norm(module: nn.Module, scope: str | None, d: int, h: int
                 ) -> tuple[QKNorm, dict[str, Source], dict[str, str]] | None:
    """The learner's q/k norms inside the attention scope: two ``Dh``-wide norms named for q and k (or the only two
    ``Dh``-wide norms there, in definition order), or two named for q and k of width ``D`` (over all heads; not
    mapped). Returns the QK-norm, the sources of ``q_norm``/``k_norm`` and the modules to hook, or None."""
    dh = d // h

    def inside(p: str) -> bool:
        return not scope or p == scope or p.startswith(scope + ".")

    norms = {p: (m, norm_width(m)) for p, m in module.named_modules() if inside(p) and norm_width(m) is not None}
    for width in dict.fromkeys((dh, d)):
        named: dict[str, str] = {}
        for p, (_, w) in norms.items():
            role = qk_role(p.rpartition(".")[2])
            if w == width and role is not None:
                named.setdefault(role, p)
        if {"q", "k"} <= named.keys():
            q, k = named["q"], named["k"]
            break
        if width == dh and width != d:
            same = [p for p, (_, w) in norms.items() if w == dh]
            if len(same) == 2:
                q, k = same
                break
    else:
        return None
    qm = norms[q][0]
    norm = QKNorm(qk_norm_kind(qm), norm_eps(qm), q, k, width)
    src = {**_norm_sources("q_norm", q, qm), **_norm_sources("k_norm", k, norms[k][0])} if width == dh else {}
    return norm, src, {"q_norm": q, "k_norm": k}


# --- blocks ---------------------------------------------------------------------------------------------------

def is_norm(m: nn.Module, d: int) -> bool:
    return norm_width(m) == d


def norm_kind(m: nn.Module) -> str:
    return "rmsnorm" if isinstance(m, nn.RMSNorm) or "rms" in type(m).__name__.lower() else "layernorm"


def norm_eps(m: nn.Module) -> float:
    eps = getattr(m, "eps", None)
    if eps is None:
        eps = getattr(m, "variance_epsilon", None)
    return float(eps) if eps is not None else float(torch.finfo(torch.float64).eps)


ACTIVATION_MODULES = ((nn.ReLU, "relu"), (nn.SiLU, "silu"))


@dataclass
class BlockParts:
    norms: list[str]  # distinct learner norm modules in call order
    norm_calls: list[str]  # every norm call in order (a shared norm appears twice)
    ffn: dict[str, str]  # "up" / "down" / "gate" → learner Linear path
    d_ff: int | None
    activations: list[str]  # candidates for the reference FFN
    norm: str = "layernorm"
    eps: float = 1e-5


def block_parts(module: nn.Module, d: int, attn_scope: str | None, attn_paths: set[str],
                call_order: list[str]) -> BlockParts:
    named = dict(module.named_modules())

    def inside_attn(p: str) -> bool:
        return attn_scope is not None and attn_scope != "" and (p == attn_scope or p.startswith(attn_scope + "."))

    norm_paths = [p for p, m in named.items() if is_norm(m, d) and not inside_attn(p) and p not in attn_paths]
    norm_calls = [p for p in call_order if p in norm_paths]
    norms = list(dict.fromkeys(norm_calls)) or norm_paths
    linear_calls = [p for p in dict.fromkeys(call_order) if isinstance(named.get(p), nn.Linear)
                    and p not in attn_paths and not inside_attn(p)]
    if not linear_calls:
        linear_calls = [p for p, m in named.items() if isinstance(m, nn.Linear) and p not in attn_paths
                        and not inside_attn(p)]
    ffn: dict[str, str] = {}
    d_ff = None
    if len(linear_calls) == 2:
        up, down = (named[p] for p in linear_calls)
        if up.in_features == d and down.out_features == d and up.out_features == down.in_features:
            ffn, d_ff = {"up": linear_calls[0], "down": linear_calls[1]}, up.out_features
    elif len(linear_calls) == 3:
        gate = [p for p in linear_calls if "gate" in p.rpartition(".")[2].lower()]
        rest = [p for p in linear_calls if p not in gate]
        down = [p for p in rest if named[p].out_features == d and named[p].in_features != d]
        if len(gate) == 1 and len(down) == 1:
            up = [p for p in rest if p != down[0]][0]
            ffn, d_ff = {"gate": gate[0], "up": up, "down": down[0]}, named[up].out_features
    acts = []
    for p, m in named.items():
        if inside_attn(p):
            continue
        if isinstance(m, nn.GELU):
            acts.append("gelu_tanh" if m.approximate == "tanh" else "gelu")
        for cls, name in ACTIVATION_MODULES:
            if isinstance(m, cls):
                acts.append(name)
    if "gate" in ffn:
        acts = ["swiglu", "geglu", "geglu_tanh"]  # the gate's activation is tried by the hypotheses
    elif not acts:
        acts = ["relu", "gelu", "gelu_tanh", "silu"]
    first = named[norms[0]] if norms else None
    return BlockParts(norms, norm_calls, ffn, d_ff, list(dict.fromkeys(acts)),
                      norm_kind(first) if first is not None else "layernorm",
                      norm_eps(first) if first is not None else 1e-5)


def block_hypotheses(attn: list[Hypothesis], parts: BlockParts, module: nn.Module) -> list[Hypothesis]:
    named = dict(module.named_modules())
    extra: dict[str, Source] = {}
    mods: dict[str, str] = {}
    for ref, path in zip(("attn_add_norm.norm", "ffn_add_norm.norm"), parts.norms[:2]):
        m = named[path]
        mods[ref] = path
        pre = f"{path}." if path else ""
        if isinstance(getattr(m, "weight", None), torch.Tensor):
            extra[f"{ref}.weight"] = _p(f"{pre}weight")
        if isinstance(getattr(m, "bias", None), torch.Tensor):
            extra[f"{ref}.bias"] = _p(f"{pre}bias")
    for role, path in parts.ffn.items():
        ref = {"up": "ffn.up_proj", "down": "ffn.down_proj", "gate": "ffn.gate_proj"}[role]
        extra.update(_linear(ref, path, named[path]))
        mods[ref] = path
    return [Hypothesis(h.style, {**h.prefixed("attn.").sources, **extra}, {**h.prefixed("attn.").modules, **mods},
                       h.heads, h.qk_norm) for h in attn]


# --- user maps --------------------------------------------------------------------------------------------------

def apply_user_map(hyps: list[Hypothesis], user_map: dict, params: dict[str, torch.Tensor],
                   ref_names: list[str], modules: dict[str, nn.Module] | None = None) -> list[Hypothesis]:
    """``{"q_proj.weight": "attn.Wq.T"}``: reference name → learner parameter (``.T`` transposes).

    Naming ``q_norm.weight`` (or ``k_norm.*``) gives the reference a QK-norm when no hypothesis found one: its kind
    and eps from the learner's module that holds the parameter (a bare Parameter: rmsnorm, or layernorm when a
    ``q_norm.bias``/``k_norm.bias`` is named too, with our default eps 1e-6)."""
    if not isinstance(user_map, dict):
        raise CheckError("--map must be a JSON object {reference parameter: your parameter}")
    src = {}
    for ref, user in user_map.items():
        if ref not in ref_names:
            raise CheckError(f"--map: unknown reference parameter {ref!r}; valid names: {', '.join(ref_names)}")
        if not isinstance(user, str):
            raise CheckError(f"--map: {ref!r} must name one of your parameters, got {user!r}")
        name, transpose = (user[:-2], True) if user.endswith(".T") else (user, False)
        if name not in params:
            names = list(params)
            raise CheckError(f"--map: your module has no parameter {name!r}; it has: {', '.join(names[:12])}"
                             + (" ..." if len(names) > 12 else ""))
        src[ref] = _p(name, (lambda t: t.T) if transpose else (lambda t: t), "from --map" + (", transposed"
                                                                                           if transpose else ""))
    norm = _mapped_qk_norm(src, params, modules or {})
    if not hyps:
        return [Hypothesis("--map", src, qk_norm=norm)]
    return [Hypothesis(h.style + " + --map", {**h.sources, **src}, h.modules, h.heads, h.qk_norm or norm)
            for h in hyps]


def _mapped_qk_norm(src: dict[str, Source], params: dict[str, torch.Tensor],
                    modules: dict[str, nn.Module]) -> QKNorm | None:
    """The QK-norm that ``--map`` names through ``q_norm.*``/``k_norm.*`` (blocks: ``attn.q_norm.*``), or None."""
    owners: dict[str, str | None] = {}
    width = 0
    for ref, s in src.items():
        role = ref.rpartition(".")[0].rpartition(".")[2]  # "q_norm" of "attn.q_norm.weight"
        if role in ("q_norm", "k_norm"):
            owner = s.user.rpartition(".")[0]
            owners.setdefault(role, owner if norm_width(modules.get(owner, nn.Identity())) is not None else None)
            width = width or params[s.user].numel()
    if not owners:
        return None
    path = owners.get("q_norm") or owners.get("k_norm")
    if path is not None:
        kind, eps = qk_norm_kind(modules[path]), norm_eps(modules[path])
    else:
        biased = any(r.endswith(("q_norm.bias", "k_norm.bias")) for r in src)
        kind, eps = ("layernorm" if biased else "rmsnorm"), 1e-6
    return QKNorm(kind, eps, owners.get("q_norm"), owners.get("k_norm"), width)


def load_reference(ref: nn.Module, hyp: Hypothesis, params: dict[str, torch.Tensor]) -> None:
    """Copy the learner's values into ``ref``; unmapped biases become 0, unmapped norm gains 1."""
    with torch.no_grad():
        for name, p in ref.named_parameters():
            src = hyp.sources.get(name)
            if src is not None:
                value = src.fn(params).detach().to(p.dtype)
                if value.numel() != p.numel():
                    raise CheckError(f"mapping {src.user} → {name}: {tuple(value.shape)} does not fit "
                                     f"{tuple(p.shape)}")
                p.copy_(value.reshape(p.shape))
            elif name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)


def missing(hyp: Hypothesis, required: list[str]) -> list[str]:
    return [r for r in required if r not in hyp.sources]
