"""The block exercise's rules tested by behaviour: the mask's sense (a leak under a causal mask), Pre-Norm (the
residual stream kept), GELU, and dropout's place (never on the residual stream)."""

from __future__ import annotations

import copy
import linecache
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from anatomy.course.spec import ACTIVATIONS, NORM_TYPES, BrokenRule, module_calls
from anatomy.tracing.steps import RecordError

# the learner's forward: (x, mask) -> its output (a tensor, or a tuple whose first item is one)
Forward = Callable[[torch.Tensor, torch.Tensor | None], Any]


def leak(
    m: nn.Module, call: Callable[[torch.Tensor, torch.Tensor], Any], t: int, d_model: int, tol: float = 1e-6
) -> tuple[int, int] | None:
    """(query, key) of the first earlier output a later token moves under a causal mask (True = may attend)."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, t, d_model, generator=g, dtype=torch.float64)
    mask = torch.ones(t, t, dtype=torch.bool).tril()[None, None]  # (1, 1, T, S)

    def out(inp: torch.Tensor) -> torch.Tensor:
        y = call(inp, mask)
        first: torch.Tensor = y[0] if isinstance(y, (tuple, list)) else y
        return first.detach().nan_to_num(nan=1e30)

    base = out(x)
    finite = base[base.abs() < 1e29]  # rows a mask left empty are NaN (1e30 here): not the scale of the output
    scale = 1 + (float(finite.abs().max()) if finite.numel() else 0.0)
    for j in range(t - 1, 0, -1):
        moved = x.clone()
        moved[:, j] = torch.randn(2, d_model, generator=g, dtype=torch.float64) * 3
        diff = (out(moved) - base).abs().amax(-1).amax(0)  # (T,)
        earlier = [i for i in range(j) if float(diff[i]) > tol * scale]
        if earlier:
            return earlier[0], j
    return None


def half_copy(m: nn.Module) -> nn.Module:
    return copy.deepcopy(m).half()


def _stream(d_model: int, b: int = 2, t: int = 5, seed: int = 11) -> torch.Tensor:
    """A residual stream far larger than anything a sub-layer of normalised inputs returns: 50 · ±1 + noise."""
    g = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (b, t, d_model), generator=g).double() * 2 - 1
    return 50 * sign + torch.randn(b, t, d_model, generator=g, dtype=torch.float64)


def placement(m: nn.Module, call: Forward, file: str, d_model: int, post: tuple[str, str]) -> BrokenRule | None:
    """Pre-Norm keeps the residual stream: block(x) - x stays small next to a large x. A Post-Norm block returns a
    normalised tensor instead (each token's features with mean 0 and variance 1)."""
    x = _stream(d_model)
    holder: dict[str, Any] = {}
    calls = module_calls(lambda: holder.update(out=call(x, None)), file)
    out = holder["out"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
        return None
    ratio = float((out - x).norm() / x.norm())
    if ratio < 0.5:
        return None
    norms = [c for c in calls if isinstance(c.module, NORM_TYPES) and c.line]
    pick = next((c for c in norms if "+" in c.source.split("#")[0]), None) or (norms[-1] if norms else None)
    spread = float(out.std(-1).mean())
    return BrokenRule(
        "post_norm_instead",
        pick.line if pick else None,
        pick.source if pick else "",
        (
            f"this is Post-Norm: the norm comes after the residual add, so the block returns a normalised tensor "
            f"(on an input of size ~50 its output's spread is {spread:.2f}); the exercise asks for the post's "
            "§5.3 Pre-Norm, x + sublayer(norm(x))",
            f"这是 Post-Norm：Norm 放在残差相加之后，Block 输出的是归一化过的张量（输入大小约 50 时输出的标准差是 "
            f"{spread:.2f}）；练习要的是原文 §5.3 的 Pre-Norm：x + sublayer(norm(x))",
        ),
        post,
        (
            "x = x + self.attn(self.norm1(x)); x = x + self.ffn(self.norm2(x))",
            "x = x + self.attn(self.norm1(x))；x = x + self.ffn(self.norm2(x))",
        ),
    )


def activation(m: nn.Module, x: torch.Tensor, file: str) -> BrokenRule | None:
    """The feed-forward network's activation is GELU (exact or tanh-approximated)."""
    from anatomy.tracing import recorder as rec_mod

    mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()[None, None]
    try:
        rec = rec_mod.record(m, x, mask, module=m)
    except RecordError:
        return None
    ops = [s for s in rec.steps if s.data]
    if any(s.op in ("gelu", "erf", "tanh", "sigmoid") for s in ops):  # GELU, or one written by hand
        return None
    other = next((s for s in ops if s.op in ACTIVATIONS), None)
    if other is None:
        return None  # a hand-written GELU (0.5 x (1 + erf(...))) or none the recorder can name: can't tell
    name = ACTIVATIONS[other.op]
    return BrokenRule(
        "relu_instead_of_gelu" if name == "ReLU" else "activation_not_gelu",
        other.line,
        other.source,
        (f"the feed-forward network uses {name}; the exercise asks for GELU", f"前馈网络用的是 {name}；练习要求 GELU"),
        ("前馈网络线性激活线性", "the feed-forward network: linear, activation, linear"),
        (
            "nn.GELU() or torch.nn.functional.gelu between the two Linear layers",
            "在两个 Linear 之间用 nn.GELU() 或 torch.nn.functional.gelu",
        ),
    )


def dropout_place(m: nn.Module, file: str, d_model: int) -> BrokenRule | None:
    """Dropout belongs on a sub-layer's output, before the residual add: in training mode the residual stream
    itself must never be dropped. Every ``nn.Dropout`` is set to p = 0.5 on a copy for the probe."""
    probe = copy.deepcopy(m).train()
    for d in probe.modules():
        if isinstance(d, nn.Dropout):
            d.p = 0.5
    x = _stream(d_model, 4, 8)
    mask = torch.ones(8, 8, dtype=torch.bool).tril()[None, None]
    holder: dict[str, Any] = {}
    torch.manual_seed(0)
    try:
        calls = module_calls(lambda: holder.update(out=probe(x, mask)), file)
    except Exception:  # noqa: BLE001 - training mode may fail where eval did not; the doctor has judged the rest
        return None
    out = holder["out"]
    out = out[0] if isinstance(out, (tuple, list)) else out
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape):
        return None
    dropped = float(((out - x).abs() > 0.5 * x.abs()).double().mean())
    if dropped < 0.02:
        return None
    drops = [c for c in calls if isinstance(c.module, nn.Dropout) and c.line and c.scale_in > 10]
    on_x = next(
        (c for c in drops if c.first is not None and c.first.shape == x.shape and torch.equal(c.first, x)), None
    )
    if on_x is not None:  # the block's input itself, before any add: the residual stream dropped at its source
        from anatomy.course import block_words

        return block_words.finding("dropout_on_residual", on_x.line, on_x.source)
    pick = drops[0] if drops else None
    if pick is None:
        lines = linecache.getlines(file)
        n = next((i for i, t in enumerate(lines, 1) if "dropout" in t.lower() and "+" in t.split("#")[0]), 0)
        line, source = (n, lines[n - 1].strip()) if n else (None, "")
    else:
        line, source = pick.line, pick.source
    return BrokenRule(
        "dropout_after_residual",
        line,
        source,
        (
            f"dropout is applied after the residual add: in training it drops the residual stream itself "
            f"({dropped:.0%} of the block's outputs lost the input x)",
            f"dropout 放在了残差相加之后：训练时它把残差支路本身也丢掉了（{dropped:.0%} 的输出丢了输入 x）",
        ),
        ("残差连接本质上给了网络一个“退路”", "the residual connection gives the network a way back"),
        (
            "x = x + self.dropout(self.attn(self.norm1(x))): drop the sub-layer's output, then add",
            "x = x + self.dropout(self.attn(self.norm1(x)))：先对子层输出做 dropout，再相加",
        ),
    )
