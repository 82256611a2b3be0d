"""The exercises' own rules, checked on the learner's module whatever its names: what the doctor would accept as
another valid design, the exercise forbids (it asks for the post's §5.3 block, not any block).

The reference here is the exercise's text, never the learner's choices: four projections for q, k, v and the
output, each of them used; norms that belong to the module (one per sub-layer); Pre-Norm; GELU; dropout on the
sub-layer's output, before the residual add; a mask where True means "may attend". Each rule is tested by
behaviour or by what ran (every module call, seen by a global forward hook with the learner's line; every
parameter's gradient), so a fused qkv, per-head modules, bare ``nn.Parameter`` weights or an einsum all pass.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

ACTIVATIONS = {
    "relu": "ReLU",
    "relu_": "ReLU",
    "silu": "SiLU",
    "leaky_relu": "LeakyReLU",
    "elu": "ELU",
    "mish": "Mish",
    "softplus": "Softplus",
    "relu6": "ReLU6",
    "hardswish": "Hardswish",
}
# not tanh, sigmoid or erf: a hand-written GELU is made of them
NORM_TYPES = (nn.LayerNorm, getattr(nn, "RMSNorm", nn.LayerNorm))


@dataclass
class BrokenRule:
    """One broken rule: the pitfall, the learner's line, what is wrong and what to do, (en, zh) each."""

    pitfall: str
    line: int | None
    source: str
    what: tuple[str, str]
    post: tuple[str, str]
    hint: tuple[str, str]
    more_lines: list[int] = field(default_factory=list)


@dataclass
class ModuleCall:
    module: nn.Module
    line: int
    source: str
    scale_in: float  # mean |input| (to tell the residual stream from a sub-layer's output)
    first: torch.Tensor | None = None  # the first tensor argument, as it was
    out: torch.Tensor | None = None  # its output (a tensor), as it was


def _same_file(a: str, b: str) -> bool:
    return a == b or os.path.abspath(a) == os.path.abspath(b)


def _caller(file: str) -> tuple[int, str]:
    f: types.FrameType | None = sys._getframe(1)
    while f is not None:
        if _same_file(f.f_code.co_filename, file):
            return f.f_lineno, linecache.getline(file, f.f_lineno).strip()
        f = f.f_back
    return 0, ""


def module_calls(run: Callable[[], object], file: str) -> list[ModuleCall]:
    """Every module called while ``run()`` runs (globals included), with the learner's line that called it."""
    calls: list[ModuleCall] = []

    def hook(module: nn.Module, args: tuple[Any, ...], out: object) -> None:
        line, source = _caller(file)
        first = next((a for a in args if isinstance(a, torch.Tensor)), None)
        scale = float(first.detach().abs().double().mean()) if first is not None and first.numel() else 0.0
        kept = out.detach() if isinstance(out, torch.Tensor) else None
        calls.append(ModuleCall(module, line, source, scale, None if first is None else first.detach().clone(), kept))

    handle = nn.modules.module.register_module_forward_hook(hook)
    try:
        run()
    finally:
        handle.remove()
    return calls


def definition_line(cls: type, attr: str, file: str) -> tuple[int, str]:
    """The line of ``self.<attr> = ...`` in the learner's file (the class's own source first)."""
    pattern = re.compile(rf"self\.{re.escape(attr)}\b[^=\n]*=(?!=)")
    lines = linecache.getlines(file)
    for number, text in enumerate(lines, start=1):
        if pattern.search(text.split("#")[0]) or (
            f"self.{attr}" in text
            and "=" in text.split("#")[0]
            and text.split("#")[0].index("=") > text.index(f"self.{attr}")
        ):
            return number, text.strip()
    return 0, ""


def own_parameters_calls(calls: list[ModuleCall]) -> list[ModuleCall]:
    return [c for c in calls if any(True for _ in c.module.parameters(recurse=False))]


def _same_inputs(group: list[ModuleCall]) -> bool:
    a = group[0].first
    return a is not None and all(
        c.first is not None and c.first.shape == a.shape and torch.equal(c.first, a) for c in group[1:]
    )


def norms_own_and_apart(calls: list[ModuleCall], m: nn.Module) -> bool:
    """At least two norms of the module's own ran, and none of them on two different inputs: direct evidence that
    the norms are not shared (whatever the output alone suggests)."""
    owned = {id(x) for x in m.modules()}
    groups: dict[int, list[ModuleCall]] = {}
    for c in calls:
        if isinstance(c.module, NORM_TYPES):
            groups.setdefault(id(c.module), []).append(c)
    return len(groups) >= 2 and all(k in owned and _same_inputs(g) for k, g in groups.items())


def audit_structure(
    m: nn.Module,
    run: Callable[[], Any],
    file: str,
    d_model: int,
    kind: str,
    given: nn.Module | None = None,
    seen: list[ModuleCall] | None = None,
) -> BrokenRule | None:
    """Unused parameters, a projection or norm called twice, a norm that is not the module's own (``given``: a
    module the exercise hands in, the sub-layer of Add & Norm)."""
    m.zero_grad(set_to_none=True)
    holder: dict[str, Any] = {}

    def forward() -> None:
        holder["out"] = run()

    with torch.enable_grad():
        calls = module_calls(forward, file)
        if seen is not None:
            seen.extend(calls)
        out = holder["out"]
        out = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(out, torch.Tensor) and out.requires_grad:
            g = torch.Generator().manual_seed(7)
            (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum().backward()  # type: ignore[no-untyped-call]  # torch's Tensor.backward is unannotated
    owned = {id(x) for x in m.modules()} | ({id(x) for x in given.modules()} if given is not None else set())
    stranger = [c for c in own_parameters_calls(calls) if id(c.module) not in owned]
    if stranger:
        c = stranger[0]
        name = type(c.module).__name__
        lines = sorted({s.line for s in stranger if s.line})
        is_norm = isinstance(c.module, NORM_TYPES)
        return BrokenRule(
            "shared_layernorm" if is_norm else "module_not_owned",
            c.line,
            c.source,
            (
                f"this {name} is not part of your module (it lives outside, a global): every "
                f"{'block' if kind == 'block' else 'module'} you build shares its parameters"
                + (f"; it is called at lines {', '.join(map(str, lines))}" if len(lines) > 1 else ""),
                f"这个 {name} 不属于你的模块（它在模块外面，是全局的）：你构造的每一个模块都共用它的参数"
                + (f"；它在第 {'、'.join(map(str, lines))} 行被调用" if len(lines) > 1 else ""),
            ),
            (
                "每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
                "each LayerNorm needs its own learnable gamma and beta.",
            ),
            (
                "create it in __init__: self.norm1 = nn.LayerNorm(d_model) (and self.norm2 for the second sub-layer)",
                "在 __init__ 里创建：self.norm1 = nn.LayerNorm(d_model)（第二个子层再建 self.norm2）",
            ),
            lines,
        )
    unused = [(n, p) for n, p in m.named_parameters() if p.grad is None]
    if unused and isinstance(out, torch.Tensor) and out.requires_grad:
        name = unused[0][0]
        owner_path, _, _ = name.rpartition(".")
        owner = m.get_submodule(owner_path) if owner_path else m
        attr = owner_path.split(".")[-1] if owner_path else name
        parent_path = owner_path.rpartition(".")[0]
        parent = m.get_submodule(parent_path) if parent_path else m
        line, source = definition_line(type(parent), attr, file)
        square = isinstance(owner, nn.Linear) and owner.in_features == owner.out_features == d_model
        names = ", ".join(n for n, _ in unused)
        projected = any(  # the module's output is a Linear's: the output projection ran, another is unused
            isinstance(c.module, nn.Linear)
            and c.out is not None
            and c.out.shape == out.shape
            and torch.equal(c.out, out)
            for c in calls
        )
        if square and kind == "mha" and not projected:
            return BrokenRule(
                "output_projection_unused",
                line or None,
                source,
                (
                    f"self.{attr} = nn.Linear(D, D) is defined but never used in forward: the heads' merged "
                    "output is returned without the output projection",
                    f"定义了 self.{attr} = nn.Linear(D, D)，"
                    "但 forward 里从没用过：并头之后的结果没经过输出投影就返回了",
                ),
                (
                    "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。",
                    "make Q/K/V ... split ... attention per head ... merge ... the output projection.",
                ),
                (
                    f"return self.{attr}(merged), weights: the fourth Linear mixes what the heads found",
                    f"return self.{attr}(merged), weights：第四个 Linear 把各个头的结果混合起来",
                ),
            )
        return BrokenRule(
            "unused_parameter",
            line or None,
            source,
            (f"parameters defined but never used in forward: {names}", f"定义了但 forward 里从没用到的参数：{names}"),
            (
                "结构里同时包含Multi-Head、前馈网络、两个残差和两个LayerNorm",
                "it holds multi-head attention, a feed-forward network, two residuals and two LayerNorms",
            ),
            ("use every layer you define in forward, or remove it", "forward 里用上你定义的每一层，或者删掉它"),
        )
    twice: dict[int, list[ModuleCall]] = {}
    for c in own_parameters_calls(calls):
        twice.setdefault(id(c.module), []).append(c)
    for group in twice.values():
        if len(group) < 2:
            continue
        c, mod = group[0], group[0].module
        lines = sorted({g.line for g in group if g.line})
        if isinstance(mod, NORM_TYPES) and not _same_inputs(group):  # the same norm of the same x is no sharing
            return BrokenRule(
                "shared_layernorm",
                c.line,
                c.source,
                (
                    f"one {type(mod).__name__} is used for both sub-layers (lines {', '.join(map(str, lines))}): "
                    "they share one gamma and beta",
                    f"两个子层共用同一个 {type(mod).__name__}（第 "
                    f"{'、'.join(map(str, lines))} 行）：它们共享同一组 gamma 和 beta",
                ),
                (
                    "每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
                    "each LayerNorm needs its own learnable gamma and beta.",
                ),
                (
                    "two norms: self.norm1 = nn.LayerNorm(d_model); self.norm2 = nn.LayerNorm(d_model)",
                    "两个 Norm：self.norm1 = nn.LayerNorm(d_model)；self.norm2 = nn.LayerNorm(d_model)",
                ),
                lines,
            )
        linears = {id(c.module): c.module for c in calls if isinstance(c.module, nn.Linear)}
        fused = any(lin.out_features >= 2 * d_model for lin in linears.values())
        if isinstance(mod, nn.Linear) and len(group) >= 3 and len(linears) < 4 and not fused and kind != "add_norm":
            return BrokenRule(
                "shared_qkv_projection",
                c.line,
                c.source,
                (
                    f"one Linear makes q, k and v (called {len(group)} times, lines {', '.join(map(str, lines))}): "
                    "q = k = v, so every head compares each token with itself most",
                    f"q、k、v 是同一个 Linear 算出来的（调用了 {len(group)} 次，第 {'、'.join(map(str, lines))} 行）："
                    "q = k = v，每个头都最关注 token 自己",
                ),
                ("生成Q/K/V", "make Q, K and V: three different projections"),
                (
                    "four Linear layers: q_proj, k_proj, v_proj (or one fused nn.Linear(D, 3 * D) split in three) "
                    "and o_proj",
                    "四个 Linear：q_proj、k_proj、v_proj（或一个 nn.Linear(D, 3 * D) 再切成三份）和 o_proj",
                ),
                lines,
            )
    return None
