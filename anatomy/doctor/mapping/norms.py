"""Norms in the learner's module: its QK-norm and the block's Add & Norm norms.

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
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import torch
from torch import nn

from anatomy.doctor.mapping.ffn_gate import gate_by_behaviour
from anatomy.doctor.mapping.naming import Hypothesis, QKNorm, Reader, Source, _linear, _p, role_of

if TYPE_CHECKING:
    from anatomy.doctor.mapping.norm_fit import NormInfo

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
            s = s[len(a) :]
            break
    else:
        return None
    role = role_of(s)
    return role if role in ("q", "k") else None


GAIN_NAMES = ("weight", "scale", "gamma", "g", "gain")  # a hand-written norm's gain, as people name it
SHIFT_NAMES = ("bias", "shift", "beta", "b")  # and its bias


def _vector(m: nn.Module, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that is a 1-d tensor attribute of ``m``."""
    return next((n for n in names if isinstance(t := getattr(m, n, None), torch.Tensor) and t.dim() == 1), None)


def norm_width(m: nn.Module) -> int | None:
    """The width a norm module normalises over (``nn.LayerNorm``/``nn.RMSNorm``, or a class named ``*Norm`` with a
    1-d gain: ``weight``, or ``scale``/``gamma``/``g``/``gain`` as hand-written norms name it); None for anything
    else."""
    if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
        shape = tuple(m.normalized_shape)
        return shape[0] if len(shape) == 1 else None
    gain = _vector(m, GAIN_NAMES) if "norm" in type(m).__name__.lower() else None
    return None if gain is None else int(getattr(m, gain).shape[0])


def qk_norm_kind(m: nn.Module) -> str:
    """``nn.RMSNorm``, a class named ``*RMS*`` or a norm with a weight only → rmsnorm; ``nn.LayerNorm`` or a norm
    with a bias → layernorm."""
    if isinstance(m, nn.RMSNorm) or "rms" in type(m).__name__.lower():
        return "rmsnorm"
    if isinstance(m, nn.LayerNorm) or _vector(m, SHIFT_NAMES) is not None:
        return "layernorm"
    return "rmsnorm"


def _norm_sources(ref: str, path: str, m: nn.Module) -> dict[str, Source]:
    out = {}
    for p, names in (("weight", GAIN_NAMES), ("bias", SHIFT_NAMES)):
        own = _vector(m, names)
        if own is not None:
            out[f"{ref}.{p}"] = _p(f"{path}.{own}" if path else own)
    return out


def find_qk_norm(
    module: nn.Module, scope: str | None, d: int, h: int
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
# transformers' activation modules, by class name (the library is not imported): ACT2FN["relu2"], ["gelu_new"]...
ACTIVATION_CLASS_NAMES = {
    "ReLUSquaredActivation": "relu2",
    "NewGELUActivation": "gelu_tanh",
    "GELUTanh": "gelu_tanh",
    "PytorchGELUTanh": "gelu_tanh",
    "GELUActivation": "gelu",
    "SiLUActivation": "silu",
}


@dataclass
class BlockParts:
    norms: list[str]  # distinct learner norm modules in call order
    norm_calls: list[str]  # every norm call in order (a shared norm appears twice)
    ffn: dict[str, str]  # "up" / "down" / "gate" → learner Linear path
    d_ff: int | None
    activations: list[str]  # candidates for the reference FFN
    norm: str = "layernorm"
    eps: float = 1e-5
    form: str = "layernorm"  # "layernorm" | "rmsnorm" | "unbiased_std" (the annotated transformer's variant)
    found: dict[str, NormInfo] = field(default_factory=dict)  # the norms found by behaviour (norm_fit.py), by path

    def describe(self) -> dict[str, str]:
        """What the reference carries of the learner's norm beyond ours: its eps, the unbiased-std form."""
        out = {}
        default = 1e-6 if self.norm == "rmsnorm" else 1e-5
        if self.eps != default:
            out["norm_eps"] = f"norm eps {short(self.eps)} vs {short(default)}"
        if self.form == "unbiased_std":
            out["norm_form"] = "unbiased std: (x − mean) / (std + eps), the annotated transformer's LayerNorm variant"
        return out


def short(v: float) -> str:
    """``1e-05`` → ``1e-5``: eps as people write it."""
    return f"{v:g}".replace("e-0", "e-").replace("e+0", "e+")


def pointwise(m: nn.Module | None) -> bool:
    """A ``Conv1d`` with kernel 1 (stride 1, no padding, one group): the attention-is-all-you-need-pytorch FFN's
    layers, a Linear applied to every token."""
    return (
        isinstance(m, nn.Conv1d)
        and m.kernel_size == (1,)
        and m.stride == (1,)
        and m.padding == (0,)
        and m.groups == 1
        and m.dilation == (1,)
    )


def gpt_conv1d(m: nn.Module | None) -> bool:
    """GPT-1/GPT-2's ``Conv1D`` (transformers' ``pytorch_utils.Conv1D``, nanoGPT's ancestors): ``x @ weight + bias``
    with ``weight`` shaped ``(in, out)``, a Linear stored transposed under a name that says nothing."""
    w = getattr(m, "weight", None)
    return type(m).__name__ == "Conv1D" and isinstance(w, torch.Tensor) and w.dim() == 2 and hasattr(m, "nf")


def block_parts(
    module: nn.Module,
    d: int,
    attn_scope: str | None,
    attn_paths: set[str],
    call_order: list[str],
    found: dict[str, NormInfo] | None = None,
) -> BlockParts:
    """``found``: the norms found by behaviour (``norm_fit.find_norms``), path → NormInfo; they count wherever they
    sit (inside the attention module too: a pre-norm that lives in the attention sub-layer)."""
    named = dict(module.named_modules())
    found = found or {}

    def inside_attn(p: str) -> bool:
        return attn_scope is not None and attn_scope != "" and (p == attn_scope or p.startswith(attn_scope + "."))

    norm_paths = [
        p for p, m in named.items() if (p in found or is_norm(m, d) and not inside_attn(p)) and p not in attn_paths
    ]
    norm_calls = [p for p in call_order if p in norm_paths]
    norms = list(dict.fromkeys(norm_calls)) or norm_paths
    linear_calls = [
        p
        for p in dict.fromkeys(call_order)
        if isinstance(named.get(p), nn.Linear) and p not in attn_paths and not inside_attn(p)
    ]
    if not linear_calls:
        linear_calls = [
            p for p, m in named.items() if isinstance(m, nn.Linear) and p not in attn_paths and not inside_attn(p)
        ]
    ffn: dict[str, str] = {}
    d_ff = None
    if not linear_calls:  # Conv1d(kernel 1) over (B, D, T): a Linear per token, weight (out, in, 1)
        convs = [p for p in dict.fromkeys(call_order) if pointwise(named.get(p)) and not inside_attn(p)]
        if len(convs) == 2:
            up_c, down_c = (named[p] for p in convs)
            if up_c.in_channels == d and down_c.out_channels == d and up_c.out_channels == down_c.in_channels:
                ffn, d_ff = {"up": convs[0], "down": convs[1]}, up_c.out_channels
        gpt = [
            p
            for p in dict.fromkeys(call_order)
            if gpt_conv1d(named.get(p)) and not inside_attn(p) and p not in attn_paths
        ]
        if len(gpt) == 2:
            up_w, down_w = (named[p].weight for p in gpt)
            if up_w.shape[0] == d and down_w.shape[1] == d and up_w.shape[1] == down_w.shape[0]:
                ffn, d_ff = {"up": gpt[0], "down": gpt[1]}, int(up_w.shape[1])
    if len(linear_calls) == 2:
        up, down = (named[p] for p in linear_calls)
        if up.in_features == d and down.out_features == d and up.out_features == down.in_features:
            ffn, d_ff = {"up": linear_calls[0], "down": linear_calls[1]}, up.out_features
        elif up.in_features == d and down.out_features == d and up.out_features == 2 * down.in_features:
            # one Linear for both halves of a gated FFN (diffusers' GEGLU: proj(x).chunk(2) → h * gelu(gate))
            ffn, d_ff = {"gate_up": linear_calls[0], "down": linear_calls[1]}, down.in_features
    elif len(linear_calls) == 3:
        down = [p for p in linear_calls if named[p].out_features == d and named[p].in_features != d]
        gate = [p for p in linear_calls if "gate" in p.rpartition(".")[2].lower()]
        if not gate and len(down) == 1:
            # no "gate" in a name: Meta's Llama code calls them w1 (gate), w3 (up), w2 (down); otherwise the gate is
            # the one called first (down(act(gate(x)) * up(x)) in both conventions)
            pair = [p for p in linear_calls if p != down[0]]
            ends = [p.rpartition(".")[2].lower() for p in pair]
            seen = gate_by_behaviour(module, pair, down[0])
            gate = [pair[ends.index("w1")]] if sorted(ends) == ["w1", "w3"] else [seen] if seen else pair[:1]
        rest = [p for p in linear_calls if p not in gate]
        if len(gate) == 1 and len(down) == 1 and down[0] in rest:
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
        if type(m).__name__ in ACTIVATION_CLASS_NAMES:  # a library's own module (transformers' ACT2FN)
            acts.append(ACTIVATION_CLASS_NAMES[type(m).__name__])
    if "gate" in ffn or "gate_up" in ffn:
        acts = ["swiglu", "geglu", "geglu_tanh"]  # the gate's activation is tried by the hypotheses
    elif not acts:
        acts = ["relu", "gelu", "gelu_tanh", "silu", "relu2"]
    first = named[norms[0]] if norms else None
    info = found.get(norms[0]) if norms else None
    if info is not None:
        return BlockParts(
            norms, norm_calls, ffn, d_ff, list(dict.fromkeys(acts)), info.kind, info.eps, info.form, found
        )
    return BlockParts(
        norms,
        norm_calls,
        ffn,
        d_ff,
        list(dict.fromkeys(acts)),
        norm_kind(first) if first is not None else "layernorm",
        norm_eps(first) if first is not None else 1e-5,
        found=found,
    )


def block_hypotheses(attn: list[Hypothesis], parts: BlockParts, module: nn.Module) -> list[Hypothesis]:
    named = dict(module.named_modules())
    extra: dict[str, Source] = {}
    mods: dict[str, str] = {}
    for ref, path in zip(("attn_add_norm.norm", "ffn_add_norm.norm"), parts.norms[:2]):
        m = named[path]
        mods[ref] = path
        pre = f"{path}." if path else ""
        info = parts.found.get(path)
        if info is not None:  # found by behaviour: gain and bias by value, whatever their names
            extra.update({f"{ref}.{k}": _p(v) for k, v in (("weight", info.weight), ("bias", info.bias)) if v})
            if info.weight is not None and info.offset:  # Gemma: the gain is 1 + weight
                extra[f"{ref}.weight"] = _p(info.weight, lambda t, c=info.offset: c + t, f"{info.offset:g} + weight")
            if info.weight is None:  # a norm without a gain: the reference's gain stays 1
                extra[f"{ref}.weight"] = Source(
                    "(no gain)", "gain 1", cast(Reader, lambda params, w=info.width: torch.ones(w))
                )
            continue
        if isinstance(getattr(m, "weight", None), torch.Tensor):
            extra[f"{ref}.weight"] = _p(f"{pre}weight")
        if isinstance(getattr(m, "bias", None), torch.Tensor):
            extra[f"{ref}.bias"] = _p(f"{pre}bias")
    # a fused gate|up Linear: the two orders of its halves are two readings, (order, sources) each
    halves: list[tuple[str, dict[str, Source]]] = [("", {})]
    for role, path in parts.ffn.items():
        if role == "gate_up":
            halves = [_halves(path, named[path], first) for first in ("ffn.up_proj", "ffn.gate_proj")]
            mods["ffn.up_proj"] = mods["ffn.gate_proj"] = path
            continue
        ref = {"up": "ffn.up_proj", "down": "ffn.down_proj", "gate": "ffn.gate_proj"}[role]
        if gpt_conv1d(named[path]):  # weight (in, out): read transposed
            extra[f"{ref}.weight"] = _p(f"{path}.weight", lambda t: t.T, "transposed (Conv1D)")
            if isinstance(getattr(named[path], "bias", None), torch.Tensor):
                extra[f"{ref}.bias"] = _p(f"{path}.bias")
        else:
            extra.update(_linear(ref, path, named[path]))
        mods[ref] = path
    return [
        Hypothesis(
            h.style if not order else f"{h.style}; fused gate|up FFN, {order}",
            {**h.prefixed("attn.").sources, **extra, **half},
            {**h.prefixed("attn.").modules, **mods},
            h.heads,
            h.qk_norm,
        )
        for h in attn
        for order, half in halves
    ]


def _halves(path: str, lin: nn.Module, first: str) -> tuple[str, dict[str, Source]]:
    """``ffn.up_proj``/``ffn.gate_proj`` read from the two halves of one Linear's rows, ``first`` taking rows
    ``[:F]``."""
    f = cast(torch.Tensor, lin.weight).shape[0] // 2
    second = "ffn.gate_proj" if first == "ffn.up_proj" else "ffn.up_proj"
    out: dict[str, Source] = {}
    for ref, rows in ((first, slice(0, f)), (second, slice(f, 2 * f))):
        out[f"{ref}.weight"] = _p(f"{path}.weight", lambda t, r=rows: t[r], f"rows {rows.start}:{rows.stop}")
        if isinstance(getattr(lin, "bias", None), torch.Tensor):
            out[f"{ref}.bias"] = _p(f"{path}.bias", lambda t, r=rows: t[r], f"{rows.start}:{rows.stop}")
    return f"{first.rpartition('.')[2].removesuffix('_proj')} first", out


# --- user maps --------------------------------------------------------------------------------------------------
