"""Padding through the model and in its loss. A model whose forward takes a padding mask: the first two tokens of
one sequence are pads (left padding), and the real tokens' logits must not change with what the pads hold, in
any layer (the first layer where they do is the one the mask does not reach). A model with a padding notion (a
mask argument, a pad id): its loss must ignore the pads (-100, -1 or the pad id as ``ignore_index``)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model.blocks import capture
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import LM, ForwardError
from anatomy.doctor.model.found import ModelFinding, Op, at, at_op, first_op, layer_words, op_log
from anatomy.doctor.model.loss import LOSS_OPS, pad_id, shifted_ce, targets_for
from anatomy.doctor.model.positions import _differs
from anatomy.tracing.steps import learner_frame

__anatomy_transparent__ = True

MASK_NAMES = ("attention_mask", "padding_mask", "pad_mask", "key_padding_mask", "attn_mask", "mask", "src_mask")
PADS = 2


def mask_argument(model: nn.Module) -> str | None:
    try:
        names = list(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):
        return None
    return next((n for n in MASK_NAMES if n in names), None)


def _formats(keep: torch.Tensor) -> list[tuple[str, Callable[[], torch.Tensor]]]:
    return [
        ("1 = keep (long)", lambda: keep.long()),
        ("True = keep", lambda: keep.clone()),
        ("True = pad", lambda: ~keep),
    ]


def padding_findings(ctx: Context) -> list[ModelFinding]:
    lm = ctx.lm
    arg = mask_argument(lm.module)
    if arg is None:
        ctx.found["padding"] = None
        ctx.skip("lm_padding", "forward takes no padding mask", "forward 不接受 padding mask")
        return []
    ids = lm.ids()
    other = ids.clone()
    other[0, :PADS] = (other[0, :PADS] + 5) % lm.sizes.vocab_size
    keep = torch.ones(ids.shape, dtype=torch.bool)
    keep[0, :PADS] = False
    for name, make in _formats(keep):
        kw: dict[str, Any] = {arg: make()}
        try:
            a, b = lm.logits(ids, **kw), lm.logits(other, **kw)
        except ForwardError:
            continue
        if not torch.isfinite(a[:, PADS:]).all() and torch.isfinite(lm.logits(ids)).all():
            single = _in_float32(lm)
            try:
                a32, b32 = (single.logits(ids, **kw), single.logits(other, **kw)) if single else (a, a)
            except ForwardError:
                a32 = b32 = a
            if not torch.isfinite(a32[:, PADS:]).all():
                return [_not_finite(ctx, ids, arg, name, kw, a)]  # NaN compares unequal to nothing: never "passed"
            # NaN in float64 only: a mask filled with finfo(float64).min plus a bias overflows to -inf, and a row of
            # pads alone turns NaN (transformers' BLOOM); in float32, the dtype it runs in, the mask holds
            a, b = a32, b32
        if not _differs(a[0, PADS:], b[0, PADS:]):
            ctx.found["padding"] = {"argument": arg, "format": name}
            return []
        layer = _first_layer(ctx, ids, other, kw)
        if layer is not None or _ignored(ctx, ids, arg, make()):
            return [_not_passed(ctx, arg, layer)]
    ctx.skip(
        "lm_padding",
        f"no mask format given as {arg}= keeps the real tokens from the pads (tried 1 = keep, True = keep, True = pad)",
        f"以 {arg}= 传入的各种 mask 格式都没能让真实 token 不受 pad 影响",
    )
    return []


def _in_float32(lm: LM) -> LM | None:
    """A float32 copy of the model, to tell a NaN of the model's own from one of float64's range."""
    try:
        module = copy.deepcopy(lm.module).float()
    except Exception:  # noqa: BLE001 - a model that cannot be copied: the float64 result stands
        return None
    return dataclasses.replace(lm, module=module, dtype=torch.float32, dtypes=set(), notes=[])


class _FirstNaN(TorchFunctionMode):
    """The learner's line of the first op whose output holds a NaN or an infinity its inputs did not hold (the
    ``(1.0 - mask) * float("-inf")`` that makes 0 * -inf = NaN at every kept token)."""

    def __init__(self) -> None:
        super().__init__()
        self.line: tuple[str, int, str] | None = None

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.line is None and _nan(out) and not any(_nan(a) for a in (*args, *(kwargs or {}).values())):
            self.line = learner_frame()
        return out


def _nan(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return x.is_floating_point() and bool(torch.isnan(x).any())
    if isinstance(x, (tuple, list)):
        return any(_nan(v) for v in x)
    return False


def _not_finite(
    ctx: Context, ids: torch.Tensor, arg: str, fmt: str, kw: dict[str, Any], logits: torch.Tensor
) -> ModelFinding:
    """A padding mask that turns the real tokens' outputs into NaN (minimind before f5374dc: the pads' additive
    mask built as ``(1.0 - mask) * float("-inf")``, where a kept token gives 0 * -inf = NaN)."""
    finder = _FirstNaN()
    try:
        with finder:
            ctx.lm.logits(ids, **kw)
    except ForwardError:
        pass
    rows = sorted({int(r) for r in torch.nonzero(~torch.isfinite(logits[:, PADS:]))[:, 0]})
    where = []
    if finder.line is not None and finder.line[1]:
        file, line, source = finder.line
        where = [at(file, line, source, f"line {line} makes the first NaN", f"第 {line} 行产生了第一个 NaN")]
    return ModelFinding(
        "lm_padding",
        "error",
        f"with {arg}= marking two pads ({fmt}), the real tokens' logits are NaN (rows {rows} of the batch): the "
        "padding mask itself breaks the attention (0 * -inf is NaN: build the additive mask with masked_fill, or "
        "multiply by a large negative number)",
        f"用 {arg}= 标出两个 pad（{fmt}）后，真实 token 的 logits 变成 NaN（batch 的第 {rows} 行）：padding mask "
        "本身破坏了注意力（0 * -inf 是 NaN：用 masked_fill 构造加性 mask，或乘以一个很大的负数）",
        {"argument": arg, "format": fmt, "rows": rows},
        where=where,
    )


def _ignored(ctx: Context, ids: torch.Tensor, arg: str, mask: torch.Tensor) -> bool:
    """The mask changes nothing at all: forward takes it and drops it."""
    kw: dict[str, Any] = {arg: mask}
    try:
        with_mask, without = ctx.lm.logits(ids, **kw), ctx.lm.logits(ids)
    except ForwardError:
        return False
    return not _differs(with_mask, without)


def _first_layer(ctx: Context, ids: torch.Tensor, other: torch.Tensor, kw: dict[str, Any]) -> int | None:
    """The first block whose real-token outputs change with the pads after an earlier block kept them out."""
    if ctx.stack is None:
        return None
    try:
        a, b = capture(ctx.lm, ctx.stack, ids, **kw), capture(ctx.lm, ctx.stack, other, **kw)
    except ForwardError:
        return None
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs)):
        if x is None or y is None:
            return None
        if _differs(x[0, PADS:], y[0, PADS:]):
            return i if i > 0 else None
    return None


def _not_passed(ctx: Context, arg: str, layer: int | None) -> ModelFinding:
    n = len(ctx.stack.blocks) if ctx.stack is not None else 0
    first = layer if layer is not None else 0
    en, zh = layer_words([first], n)
    calls = ctx.calls
    line = calls.lines[first] if calls is not None and first < len(calls.lines) else None
    where = (
        []
        if line is None or not line[1]
        else [at(*line, f"line {line[1]} calls {en} without the mask", f"第 {line[1]} 行调用{zh}时没有传入 mask")]
    )
    said = f"from {en} on" if layer is not None else "in every layer (forward takes the mask and drops it)"
    said_zh = f"从{zh}起" if layer is not None else "在每一层（forward 接收了 mask 却丢掉了）"
    return ModelFinding(
        "lm_padding",
        "error",
        f"with {arg}= marking two pads, the real tokens' outputs still change with what the pads hold, {said}: "
        "the padding mask does not reach the layers",
        f"用 {arg}= 标出两个 pad 后，真实 token 的输出仍随 pad 的内容而变，{said_zh}：padding mask 没有传到各层",
        {"argument": arg, "layer": layer},
        fault="padding_mask_not_passed",
        where=where,
        layers=[first] if layer is not None else [],
        layer=layer,
    )


def pads_in_loss_findings(ctx: Context) -> list[ModelFinding]:
    lm = ctx.lm
    pad, arg = pad_id(lm.module), mask_argument(lm.module)
    loss = ctx.found.get("loss") or {}
    k = loss.get("shift")
    if lm.target_arg is None or not isinstance(k, int) or (pad is None and arg is None):
        why = (
            (
                "the model has no padding (no mask argument, no pad id)",
                "模型没有 padding（没有 mask 参数，也没有 pad id）",
            )
            if pad is None and arg is None
            else ("the model's loss was not examined", "模型的损失未被检查")
        )
        ctx.skip("lm_pads_in_loss", *why)
        return []
    if lm.labels_inside:
        return _inside(ctx, pad, k)
    ids, targets = lm.ids(), targets_for(lm)
    ignored = [v for v in (-100, -1, pad) if v is not None and _ignores(ctx, ids, targets, k, v)]
    ctx.found["loss_ignores"] = ignored
    if pad is None or pad in ignored:  # no pad id: ignoring -100 or -1 is the caller's way to mark pads
        return []
    if lm.target_arg == "labels" and -100 in ignored:  # Hugging Face's convention: the caller's collator writes
        # -100 at the pads of ``labels`` and the loss ignores -100, so it need not know the pad id
        ctx.found["pads_in_loss"] = "labels: the caller marks the pads -100 (Hugging Face's convention)"
        return []
    marked = targets.clone()
    marked[0, -PADS:] = pad
    try:
        _, got = lm.with_targets(ids, marked)
    except ForwardError:
        return []
    if got is None or abs(float(got) - shifted_ce(lm.logits(ids), marked, k, -12345)) > tol(1e-6) * max(
        1.0, abs(float(got))
    ):
        return []
    with_targets: dict[str, Any] = {lm.target_arg: marked}
    op = first_op(ctx.ops(ids, **with_targets), LOSS_OPS)
    return [
        ModelFinding(
            "lm_loss",
            "error",
            f"targets holding the pad id {pad} are scored like any token: the loss counts the pads (pass "
            f"ignore_index={pad})",
            f"值为 pad id {pad} 的目标与普通 token 一样计分：损失把 pad 也算了进去（应传入 ignore_index={pad}）",
            {"pad_id": pad},
            fault="pads_in_loss",
            where=_no_ignore_index(op),
        )
    ]


def _inside(ctx: Context, pad: int | None, k: int) -> list[ModelFinding]:
    """The loss made inside from the ids (``return_loss=True``): the caller cannot mark the pads, so pads in the
    ids must not be scored. Two pads at the end of the first row: the loss equals the cross-entropy that leaves
    them out (right), or the one that counts them (pads_in_loss); anything else: can't tell."""
    lm = ctx.lm
    if pad is None:
        ctx.skip("lm_pads_in_loss", "the model's pad id is not found", "没有找到模型的 pad id")
        return []
    marked = targets_for(lm)
    marked[0, -PADS:] = pad
    try:
        logits, got = lm.with_targets(marked, marked)
    except ForwardError:
        return []
    if got is None:
        return []
    left_out, counted = shifted_ce(logits.double(), marked, k, pad), shifted_ce(logits.double(), marked, k, -12345)
    near = tol(1e-6) * max(1.0, abs(float(got)))
    if abs(float(got) - left_out) <= near:
        ctx.found["loss_ignores"] = [pad]
        return []
    if abs(float(got) - counted) > near:
        ctx.skip(
            "lm_pads_in_loss",
            "the loss is neither the cross-entropy with the pads nor without them",
            "损失既不等于计入 pad 的交叉熵，也不等于不计 pad 的交叉熵",
        )
        return []
    with lm.running(), op_log() as ops:
        lm.with_targets(marked, marked)
    op = first_op(ops, LOSS_OPS)
    return [
        ModelFinding(
            "lm_loss",
            "error",
            f"with {lm.target_arg}=True the model makes its labels from the ids, and ids holding the pad id {pad} "
            f"are scored like any token: the loss counts the pads (pass ignore_index={pad})",
            f"{lm.target_arg}=True 时模型用 ids 构造标签，值为 pad id {pad} 的 id 与普通 token 一样计分：损失把 pad "
            f"也算了进去（应传入 ignore_index={pad}）",
            {"pad_id": pad, "labels": "inside"},
            fault="pads_in_loss",
            where=_no_ignore_index(op),
        )
    ]


def _ignores(ctx: Context, ids: torch.Tensor, targets: torch.Tensor, k: int, v: int) -> bool:
    marked = targets.clone()
    marked[0, -PADS:] = v
    try:
        logits, got = ctx.lm.with_targets(ids, marked)
    except ForwardError:
        return False
    if got is None:
        return False
    want = shifted_ce(logits.double(), marked, k, v)
    return abs(float(got) - want) <= tol(1e-6) * max(1.0, abs(want))


def _no_ignore_index(op: Op | None) -> list[dict[str, object]]:
    """The loss's line, when the op log found it."""
    if op is None:
        return []
    return [
        at_op(
            op, f"line {op.line} computes the loss with no ignore_index", f"第 {op.line} 行计算损失时没有 ignore_index"
        )
    ]
