"""The alignment of the model's own loss: its loss compared with the cross-entropy of ``logits[:, t]`` against
``targets[:, t + k]`` for k = 0 (the caller shifts), 1 (the model shifts), 2 (shifted twice) and -1 (backwards);
and the pads: a target marked -100 (or the model's pad id) must not count."""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model import callers
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import LM, ForwardError
from anatomy.doctor.model.found import ModelFinding, Op, at, at_op, first_op, op_log

__anatomy_transparent__ = True

LOSS_OPS = {"cross_entropy", "nll_loss", "log_softmax", "CrossEntropyLoss"}
REL = 1e-6
PAD_NAMES = ("pad_id", "pad_token_id", "pad_idx", "padding_idx", "pad_token", "pad_index", "ignore_index")


def shifted_ce(logits: torch.Tensor, targets: torch.Tensor, k: int, ignore: int = -100) -> float:
    """Cross-entropy of ``logits (B, T, V)`` at position t against ``targets (B, T)`` at t + k (k < 0: t - |k|)."""
    t = logits.shape[1]
    if k >= 0:
        lg, tg = logits[:, : t - k], targets[:, k:]
    else:
        lg, tg = logits[:, -k:], targets[:, : t + k]
    return float(F.cross_entropy(lg.reshape(-1, lg.shape[-1]), tg.reshape(-1), ignore_index=ignore))


def alignment(logits: torch.Tensor, targets: torch.Tensor, loss: float, ignore: int = -100) -> int | None:
    """The shift k whose cross-entropy (ignoring the target id ``ignore``, as the model's loss does) equals the
    model's loss (None: none does, or several do alike). A model that computes part of itself in bfloat16
    (Falcon's ALiBi) widens the tolerance until every shift "matches": the closest is taken when it stands out
    (ten times closer than the next), else the loss cannot be told."""
    off = {k: abs(shifted_ce(logits, targets, k, ignore) - loss) for k in (0, 1, 2, -1)}
    near = sorted((d, k) for k, d in off.items() if d <= tol(REL) * max(1.0, abs(loss)))
    if len(near) == 1 or (len(near) > 1 and near[0][0] * 10 < near[1][0]):
        return near[0][1]
    return None


def pad_id(model: nn.Module) -> int | None:
    """The model's pad id: an embedding's ``padding_idx``, or an int attribute (of the model or its config)."""
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.padding_idx is not None:
            return int(m.padding_idx)
    for owner in (model, getattr(model, "config", None), getattr(model, "params", None), getattr(model, "args", None)):
        for n in PAD_NAMES:
            v = getattr(owner, n, None) if owner is not None else None
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                return v
    return None


def targets_for(lm: LM) -> torch.Tensor:
    """Random targets that never hold the model's pad id (a loss that ignores the pads scores every one)."""
    targets = lm.ids(seed=2)
    pad = pad_id(lm.module)
    if pad is not None:
        targets[targets == pad] = (pad + 1) % lm.sizes.vocab_size
    return targets


def _loss_line(ops: list[Op]) -> Op | None:
    return first_op(ops, LOSS_OPS) or first_op(ops, {"nll_loss", "log_softmax", "mean", "sum"})


def loss_findings(ctx: Context) -> list[ModelFinding]:
    """What the model's own loss compares (``found["loss"]``), and a finding when it is misaligned."""
    lm, found = ctx.lm, ctx.found
    if lm.target_arg is None:
        found["loss"] = {"examined": False, "reason": "forward takes no targets"}
        ctx.skip("lm_loss", "forward takes no targets", "forward 不接受目标")
        return []
    ids, targets = lm.ids(), targets_for(lm)
    if lm.labels_inside:  # the model scores the ids against themselves: they hold no pad
        ids = targets
    try:
        with lm.running(), op_log() as ops:  # the dtype watcher outside the log (LM.running)
            logits, loss = lm.with_targets(ids, targets)
    except ForwardError as err:
        found["loss"] = {"examined": False, "reason": f"forward with targets raised {err}"}
        ctx.skip("lm_loss", f"forward with targets raised {err}", f"传入目标时 forward 出错：{err}")
        return []
    if loss is None:
        found["loss"] = {"examined": False, "reason": "no loss returned"}
        ctx.skip("lm_loss", "forward with targets returned no loss", "传入目标时 forward 没有返回损失")
        return []
    line = _loss_line(ops)
    ignores = {o.ignore_index for o in ops if o.ignore_index is not None}
    ignore = ignores.pop() if len(ignores) == 1 else -100  # the id the model's own cross_entropy ignores
    k = alignment(logits.double(), targets, float(loss), ignore)
    found["loss"] = {"examined": True, "argument": lm.target_arg or "(positional)", "shift": k}
    if lm.labels_inside:
        found["loss"]["labels"] = "ids"
    if k == 2:
        return [_twice(line)]
    if k == -1:
        return [_backwards(line)]
    if lm.labels_inside:  # no caller's targets to weigh: the model's own labels decide
        return [_inside_unshifted(lm, line)] if k == 0 else []
    said = _with_caller(lm, k, line)
    if said:
        return said
    if k == 0 and lm.target_arg == "labels":
        return [_labels_unshifted(line)]
    return []


def _files(lm: LM) -> list[str]:
    """The file that defines the model's class (the one checked: a training script may subclass or import the
    model) and the file of its forward, when another."""
    out = [lm.source_file] if lm.source_file else []
    try:
        out.append(inspect.getfile(type(lm.module)))
    except (TypeError, OSError):
        pass
    code = getattr(getattr(type(lm.module), "forward", None), "__code__", None)
    if code is not None:
        out.append(code.co_filename)
    return list(dict.fromkeys(out))


def _with_caller(lm: LM, k: int | None, line: Op | None) -> list[ModelFinding]:
    """The model's shift with what its own file passes as targets: shifted twice, or never."""
    said = next((got for f in _files(lm) if (got := callers.evidence(f))), [])  # the checked file first
    kinds = {e.kind for e in said}
    if len(kinds) != 1:  # nothing said, or both: the file does not decide
        return []
    where = [at(e.file, e.line, e.source, f"line {e.line} builds the targets", f"第 {e.line} 行构造目标") for e in said]
    loss_at = _where(line, "computes the loss", " 计算损失")
    if k == 1 and kinds == {"shifted"}:
        f = _twice(line)
        f.en = (
            "the model's loss shifts the targets by one (logits[:, t] against targets[:, t + 1]) and this file "
            "already builds them shifted by one: together position t is scored against the token at t + 2"
        )
        f.zh = (
            "模型的损失把目标错开一位（logits[:, t] 对 targets[:, t + 1]），而这个文件构造的目标已经错开了一位："
            "合起来位置 t 与第 t + 2 个 token 比较"
        )
        f.where = where + loss_at
        return [f]
    if k == 0 and kinds == {"same"}:
        return [
            ModelFinding(
                "lm_loss",
                "error",
                "the model's loss scores logits[:, t] against targets[:, t], and this file passes the inputs "
                "themselves as the targets: each position is trained to output the token it already sees",
                "模型的损失把 logits[:, t] 与 targets[:, t] 比较，而这个文件把输入本身当作目标传入：每个位置被训练去"
                "输出它已经看见的 token",
                {"shift": 0, "caller": "same"},
                fault="targets_not_shifted",
                where=where + loss_at,
            )
        ]
    return []


def _where(line: Op | None, en: str, zh: str) -> list[dict[str, object]]:
    return [] if line is None else [at_op(line, f"line {line.line} {en}", f"第 {line.line} 行{zh}")]


def _twice(line: Op | None) -> ModelFinding:
    return ModelFinding(
        "lm_loss",
        "error",
        "the model's loss scores logits[:, t] against targets[:, t + 2]: the targets are shifted twice (the "
        "loss skips the next token and trains the one after it)",
        "模型的损失把 logits[:, t] 与 targets[:, t + 2] 比较：目标被错开了两次（跳过下一个 token，训练的是再后一个）",
        {"shift": 2},
        fault="targets_shifted_twice",
        where=_where(line, "computes the loss", " 计算损失"),
    )


def _backwards(line: Op | None) -> ModelFinding:
    return ModelFinding(
        "lm_loss",
        "error",
        "the model's loss scores logits[:, t] against targets[:, t - 1]: shifted the wrong way, a token the model "
        "already sees, so it learns to copy",
        "模型的损失把 logits[:, t] 与 targets[:, t - 1] 比较：错开的方向反了，模型已经看得见那个 token，于是学会复制",
        {"shift": -1},
        fault="targets_not_shifted",
        where=_where(line, "computes the loss", " 计算损失"),
    )


def _inside_unshifted(lm: LM, line: Op | None) -> ModelFinding:
    flag = lm.target_arg
    return ModelFinding(
        "lm_loss",
        "error",
        f"with {flag}=True the model scores logits[:, t] against its own input ids[:, t]: each position is trained "
        "to output the token it already sees (labels from the ids must be shifted: logits[:, :-1] against "
        "ids[:, 1:])",
        f"{flag}=True 时模型把 logits[:, t] 与它自己的输入 ids[:, t] 比较：每个位置被训练去输出它已经看见的 token"
        "（由 ids 得到的标签必须错位：logits[:, :-1] 对 ids[:, 1:]）",
        {"shift": 0, "argument": flag},
        fault="targets_not_shifted",
        where=_where(line, "computes the loss", " 计算损失"),
    )


def _labels_unshifted(line: Op | None) -> ModelFinding:
    return ModelFinding(
        "lm_loss",
        "warning",
        "the model's loss scores logits[:, t] against labels[:, t] with no shift; called the usual way, "
        "labels=input_ids, it learns to copy its input (shift inside: logits[:, :-1] against labels[:, 1:])",
        "模型的损失把 logits[:, t] 与 labels[:, t] 直接比较，没有错位；按惯例传入 labels=input_ids 时，模型会学会"
        "复制输入（在模型内错位：logits[:, :-1] 对 labels[:, 1:]）",
        {"shift": 0, "argument": "labels"},
        fault="targets_not_shifted",
        where=_where(line, "computes the loss", " 计算损失"),
    )
