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

Names and the hypothesis record live in ``naming.py``; norms (QK-norm, the block's norms) in ``norms.py``.

**From the dataflow.** Names are a shortcut; the recorded forward (``anatomy.tracing``, ``observed.py``) is the ground
truth: q is what feeds the rows of the scores, k their columns, v what the softmax weights multiply, o the first
projection of the weighted sum, whatever the names and containers. :func:`with_observed` puts the two together:
a name reading the dataflow confirms comes first, and when none does (a ``ModuleList`` of heads, ``key`` used as
the query, einsum over bare Parameters) the reading from the dataflow joins the hypotheses, first. ``--map``
still overrides both (:func:`apply_user_map`).
"""

from __future__ import annotations

import re
from typing import cast

import torch
from torch import nn

from anatomy.doctor.loading.subject import CheckError
from anatomy.doctor.mapping.head_layouts import (
    _fused,
    _fused_gqa,
    _fused_gqa_grouped,
    _gqa_style,
    _groups,
    _regroup,
    interleave,
    interleaved,
    kv_dims,
)
from anatomy.doctor.mapping.naming import (
    ATTN_KEYS,
    Hypothesis,
    QKNorm,
    Source,
    _linear,
    _p,
    role_of,
)
from anatomy.doctor.mapping.norms import (
    find_qk_norm,
    norm_eps,
    norm_width,
    qk_norm_kind,
)


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
            src = _fused(
                d,
                h,
                f"{pre}in_proj_weight",
                f"{pre}in_proj_bias" if m.in_proj_bias is not None else None,
                transpose=False,
            )[0][1]
            src.update(_linear("o_proj", f"{pre}out_proj", m.out_proj))
            return [
                Hypothesis("torch.nn.MultiheadAttention (in_proj_weight rows q|k|v)", src, {"o_proj": f"{pre}out_proj"})
            ], path

    linears: dict[str, nn.Linear] = {p: m for p, m in named.items() if isinstance(m, nn.Linear)}

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
        elif (
            role == "qkv"
            and m.in_features == d
            and (m.out_features - d) // 2 in kv_of
            and m.out_features > d
            and (m.out_features - d) % 2 == 0
        ):
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
            if o is None and scope and find_o(parent(scope), set()) is not None:  # q/k/v in a sub-module of theirs
                scope, o = parent(scope), find_o(parent(scope), set())
            if o is None:
                continue
            src, mods = {}, {}
            for r, key in zip("qkvo", ATTN_KEYS):
                path = roles[r] if r != "o" else o
                src.update(_linear(key, path, linears[path]))
                mods[key] = path
            kv = kv_of[linears[roles["k"]].out_features]
            hyps = [
                Hypothesis(
                    f"separate Linears ({_gqa_style(kv, h)}{how})" if kv != h else "separate Linears",
                    _regroup(src, rows),
                    mods,
                    heads,
                )
                for how, rows, heads in _groups(d, h, kv)
            ]
            if kv in (1, h) and h > 1:  # query heads split as (Dh, H) (einops "(hidden heads)"), merged head-major
                keys = ("q_proj",) if kv == 1 else ("q_proj", "k_proj", "v_proj")
                style = f"separate Linears ({_gqa_style(kv, h) + ', ' if kv != h else ''}heads split interleaved)"
                hyps.append(Hypothesis(style, interleave(src, interleaved(d, h), keys), mods))
            return hyps, scope
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
                    if layout == "q|k|v" and h > 1:  # each chunk's heads split as (Dh, H), merged head-major
                        src = interleave(src, interleaved(d, h), ("q_proj", "k_proj", "v_proj"))
                        hyps.append(Hypothesis("fused qkv Linear (q|k|v, heads split interleaved)", src, {"o_proj": o}))
                return hyps, scope
            src = _fused_gqa(d, h, kv, f"{roles['qkv']}.weight", bias)  # q|k|v chunks of widths D, Hkv Dh, Hkv Dh
            src.update(_linear("o_proj", o, linears[o]))
            grouped = _fused_gqa_grouped(d, h, kv, f"{roles['qkv']}.weight", bias)  # [q.. k v] per group
            grouped.update(_linear("o_proj", o, linears[o]))
            hyps = [
                Hypothesis(
                    f"fused qkv Linear (q|k|v, {_gqa_style(kv, h)}{how})", _regroup(src, rows), {"o_proj": o}, heads
                )
                for how, rows, heads in _groups(d, h, kv)
            ]
            if kv > 1:
                hyps += [
                    Hypothesis(
                        f"fused qkv Linear (interleaved per key/value group, {_gqa_style(kv, h)}{how})",
                        _regroup(grouped, rows),
                        {"o_proj": o},
                        heads,
                    )
                    for how, rows, heads in _groups(d, h, kv)
                ]
            return hyps, scope
    for p, m in named.items():  # the annotated transformer's `linears` = 4 clones: q, k, v, o
        if isinstance(m, nn.ModuleList) and len(m) == 4 and all(isinstance(x, nn.Linear) and square(x) for x in m):
            src, mods = {}, {}
            for i, key in enumerate(ATTN_KEYS):
                src.update(_linear(key, f"{p}.{i}", cast(nn.Linear, m[i])))  # each one is (checked above)
                mods[key] = f"{p}.{i}"
            return [Hypothesis(f"ModuleList {local(p)}[0..3] = q, k, v, o", src, mods)], parent(p)
    return _find_einsum(module, d, h)


def _find_einsum(module: nn.Module, d: int, h: int) -> tuple[list[Hypothesis], str | None]:
    """Bare Parameters: ``W_Q (D, D)`` / ``(H, D, Dh)`` / ``(D, H, Dh)``, ``W_O (D, D)`` / ``(H, Dh, D)``, biases."""
    linear_params = {
        f"{p}.{n}" if p else n
        for p, m in module.named_modules()
        if isinstance(m, nn.Linear)
        for n, _ in m.named_parameters(recurse=False)
    }
    weights: dict[tuple[str, str], tuple[str, torch.Tensor]] = {}
    biases: dict[tuple[str, str], str] = {}
    p: torch.Tensor  # a Parameter here, any tensor below
    for name, p in module.named_parameters():
        if name in linear_params:
            continue
        scope, _, leaf = name.rpartition(".")
        low = re.sub(r"[^a-z0-9]", "", leaf.lower())
        is_bias = (
            low.startswith("bias")
            or low.endswith("bias")
            or bool(re.fullmatch(r"b_?(q|k|v|o|qkv|query|key|value|out|output)", leaf.lower()))
        )
        stem = re.sub(r"^(bias|b)|bias$", "", low) if is_bias else leaf
        role = role_of(stem)
        if role is None:
            continue
        if is_bias:
            biases.setdefault((scope, role), name)
        else:
            weights.setdefault((scope, role), (name, p))
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
                    src[f"{key}.weight"] = _p(
                        name,
                        (lambda t: t) if linear_style else (lambda t: t.T),
                        "" if linear_style else "transposed (x @ W)",
                    )
                elif shape == (h, d, dh) and not linear_style:
                    src[f"{key}.weight"] = _p(name, lambda t: t.permute(0, 2, 1).reshape(d, d), "(H, D, Dh)")
                elif shape == (d, h, dh) and not linear_style:
                    src[f"{key}.weight"] = _p(name, lambda t: t.reshape(d, d).T, "(D, H, Dh)")
                else:
                    ok = False
                bias_name = bias[r]
                if bias_name:
                    src[f"{key}.bias"] = _p(bias_name, lambda t: t.reshape(-1))
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
                o_src = _p(
                    name,
                    (lambda t: t) if linear_style else (lambda t: t.T),
                    "" if linear_style else "transposed (x @ W)",
                )
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
                style = (
                    "einsum Parameters ("
                    + ("x @ W.T" if linear_style else "x @ W")
                    + (f", fused {layout})" if layout else ")")
                )
                hyps.append(Hypothesis(style, {**src, **fsrc}))
        if hyps:
            return hyps, scope
    return [], None


def apply_user_map(
    hyps: list[Hypothesis],
    user_map: dict[str, str],
    params: dict[str, torch.Tensor],
    ref_names: list[str],
    modules: dict[str, nn.Module] | None = None,
) -> list[Hypothesis]:
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
            raise CheckError(
                f"--map: your module has no parameter {name!r}; it has: {', '.join(names[:12])}"
                + (" ..." if len(names) > 12 else "")
            )
        src[ref] = _p(
            name, (lambda t: t.T) if transpose else (lambda t: t), "from --map" + (", transposed" if transpose else "")
        )
    norm = _mapped_qk_norm(src, params, modules or {})
    if not hyps:
        return [Hypothesis("--map", src, qk_norm=norm)]
    return [Hypothesis(h.style + " + --map", {**h.sources, **src}, h.modules, h.heads, h.qk_norm or norm) for h in hyps]


def _mapped_qk_norm(
    src: dict[str, Source], params: dict[str, torch.Tensor], modules: dict[str, nn.Module]
) -> QKNorm | None:
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
                    raise CheckError(f"mapping {src.user} → {name}: {tuple(value.shape)} does not fit {tuple(p.shape)}")
                p.copy_(value.reshape(p.shape))
            elif name.endswith("bias"):
                p.zero_()
            elif "norm" in name:
                p.fill_(1.0)


def missing(hyp: Hypothesis, required: list[str]) -> list[str]:
    return [r for r in required if r not in hyp.sources]
