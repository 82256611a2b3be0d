"""Which logits position the model's own loss compares with which target: read by behaviour, not from the code.

The targets are made so that every position holds a different token (``targets[b, j] = 1 + (j + 3b) mod (V-1)``);
the gradient of a cross-entropy with respect to the logits is ``softmax - onehot(target)``, so at each logits
position the one negative entry names the target it was compared with. Positions whose gradient is zero are not in
the loss. The pairs give the shift: ``logits[:, :-1]`` against ``targets[:, 1:]`` (shift 1), position t against
target t (no shift inside the model: the caller must pass the next tokens), or anything else, as it is.

    pairs = loss_pairs(model, run, logits_of)      # {(b, i): j}, or a reason it cannot tell
    loss = describe(pairs, seq, targets_name)      # Loss(logits="logits[:, :-1]", shift=1, ...)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

NO_LOSS = "the forward returned no loss"
KEPT_LOSS = ("last_loss", "loss", "_loss")  # where a forward that returns logits only may keep its loss
NO_TARGETS = "the forward takes no targets"
WHY_ZH = {  # the reasons above and below, in Chinese (why_zh)
    NO_LOSS: "forward 没有返回损失",
    NO_TARGETS: "forward 不接受目标",
    "the loss does not depend on the logits (no gradient reaches them)": "损失不依赖 logits（梯度传不到它们）",
    "the loss is not computed from the logits the model returns or from its head's output": (
        "损失不是由模型返回的 logits 或输出头的输出算出来的"
    ),
    "the loss's gradient with respect to the logits is zero everywhere": "损失对 logits 的梯度处处为零",
    "no logits position reaches the loss": "没有哪个 logits 位置进入损失",
    "the pairs do not follow one shift": "配对不是同一个错位",
    "the positions in the loss have gaps": "进入损失的位置不连续",
}


def why_zh(why: str) -> str:
    """A reason of :class:`Loss` in Chinese (a shape or a position inside it kept as is)."""
    if why in WHY_ZH:
        return WHY_ZH[why]
    if why.startswith("the logits the loss reads have the shape"):
        return "损失读取的 logits 形状是 " + why.split("shape ", 1)[1].replace(", not", "，而不是")
    if why.startswith("at logits position"):
        return f"在 logits 的第 {why.split()[3]} 个位置，梯度在目标词元处没有负值：损失不是 logits 对目标的交叉熵"
    return why


TARGET_NAMES = ("targets", "target", "labels", "label", "y", "tgt", "targets_ids", "target_ids")


def targets_parameter(model: nn.Module) -> str | None:
    """The forward's parameter for the targets, under the names people use (``targets``, ``labels``, ``y``...)."""
    try:
        params = list(inspect.signature(model.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    return next((p.name for p in params[1:] if p.name.lower() in TARGET_NAMES), None)


def make_targets(batch: int, seq: int, vocab: int) -> torch.Tensor:
    """Every position of a row a different token, never 0 (a pad id some losses ignore)."""
    j = torch.arange(seq).unsqueeze(0) + 3 * torch.arange(batch).unsqueeze(1)
    return 1 + j % max(1, vocab - 1)


def split_output(out: Any) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(logits, loss) from what a forward returns: a tensor, ``(logits, loss)``, a dict or an object with
    ``.logits``/``.loss`` (Hugging Face's output)."""
    if isinstance(out, torch.Tensor):
        return out, None
    if isinstance(out, dict) or hasattr(out, "logits"):
        logits, loss = _field(out, "logits"), _field(out, "loss")
        return (
            logits if isinstance(logits, torch.Tensor) else None,
            loss if isinstance(loss, torch.Tensor) else None,
        )
    if isinstance(out, (tuple, list)):
        tensors = [t for t in out if isinstance(t, torch.Tensor)]
        logits = next((t for t in tensors if t.dim() >= 2), None)
        loss = next((t for t in tensors if t.numel() == 1 and t.is_floating_point()), None)
        return logits, loss
    return None, None


def _field(out: Any, key: str) -> Any:
    return out.get(key) if isinstance(out, dict) else getattr(out, key, None)


@dataclass
class Loss:
    """The model's own loss as the probe saw it (``shift``: target index minus logits index, None: no one shift)."""

    found: bool  # the forward returned a loss
    read: bool  # its pairs could be read
    shift: int | None = None
    logits: str = ""  # "logits[:, :-1]"
    logits_dims: str = ""  # "(B, T-1, V)"
    targets: str = ""  # "targets[:, 1:]"
    targets_dims: str = ""  # "(B, T-1)"
    targets_name: str = ""  # the forward's parameter
    pairs: str = ""  # "0→1, 1→2, ..." (logits position → target position), row 0
    why: str = ""  # why it could not be read

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def kept_loss(model: nn.Module) -> torch.Tensor | None:
    """A loss the forward keeps on the model instead of returning it (llama2.c's ``self.last_loss``)."""
    for name in KEPT_LOSS:
        value = getattr(model, name, None)
        if isinstance(value, torch.Tensor) and value.numel() == 1 and value.is_floating_point():
            return value
    return None


def loss_pairs(
    run: Callable[[], Any], model: nn.Module, targets: torch.Tensor, vocab: int
) -> dict[tuple[int, int], int] | str:
    """Run the forward with gradients on; ``{(b, i): j}``: logits position i of row b compared with target j. A
    string says why the pairs cannot be read. The head's output is caught on the model's modules for when the
    returned logits are not the tensor the loss was computed from."""
    modules = list(model.modules())
    caught: list[torch.Tensor] = []

    def keep(_m: nn.Module, _a: Any, out: Any) -> None:
        if isinstance(out, torch.Tensor) and out.dim() >= 2 and out.shape[-1] == vocab and out.requires_grad:
            caught.append(out)

    handles = [m.register_forward_hook(keep) for m in modules]
    try:
        with torch.enable_grad():
            logits, loss = split_output(run())
            loss = kept_loss(model) if loss is None else loss
            if loss is None:
                return NO_LOSS
            if not loss.requires_grad:
                return "the loss does not depend on the logits (no gradient reaches them)"
            grad = None
            for cand in ([logits] if logits is not None else []) + caught[::-1]:
                if not cand.requires_grad:
                    continue
                got = torch.autograd.grad(loss.sum(), cand, retain_graph=True, allow_unused=True)[0]
                if got is not None:
                    grad = got
                    break
    finally:
        for h in handles:
            h.remove()
    if grad is None:
        return "the loss is not computed from the logits the model returns or from its head's output"
    b, t = targets.shape
    if grad.numel() % (b * vocab) or grad.shape[-1] != vocab:
        return f"the logits the loss reads have the shape {tuple(grad.shape)}, not (B, T', V)"
    return _pairs(grad.reshape(b, -1, vocab).detach(), targets)


def _pairs(grad: torch.Tensor, targets: torch.Tensor) -> dict[tuple[int, int], int] | str:
    scale = float(grad.abs().max())
    if scale == 0.0:
        return "the loss's gradient with respect to the logits is zero everywhere"
    out: dict[tuple[int, int], int] = {}
    for b in range(grad.shape[0]):
        where = {int(c): j for j, c in enumerate(targets[b].tolist())}
        for i in range(grad.shape[1]):
            g = grad[b, i]
            if float(g.abs().max()) <= 1e-9 * scale:
                continue
            c = int(g.argmin())  # a cross-entropy's row is softmax - onehot: it sums to zero, its target is its minimum
            if float(g[c]) >= 0 or c not in where or abs(float(g.sum())) > 1e-6 * float(g.abs().max()):
                return (
                    f"at logits position {i} the gradient has no negative entry at a target token: the loss is not "
                    "a cross-entropy of the logits against the targets"
                )
            out[(b, i)] = where[c]
    return out if out else "no logits position reaches the loss"


def _slice(first: int, last: int, seq: int) -> str:
    """Positions first..last of seq as Python's slice: ``:``, ``:-1``, ``1:``, ``2:5``."""
    start = "" if first == 0 else str(first)
    stop = "" if last == seq - 1 else (str(last - seq + 1) if last >= seq - 3 else str(last + 1))
    return f"{start}:{stop}"


def _sliced(name: str, cut: str) -> str:
    return name if cut == ":" else f"{name}[:, {cut}]"


def _length(n: int, seq: int) -> str:
    return "T" if n == seq else f"T-{seq - n}" if seq - 3 <= n < seq else str(n)


def describe(pairs: dict[tuple[int, int], int] | str, seq: int, name: str) -> Loss:
    """The pairs as the table shows them."""
    if isinstance(pairs, str):
        return Loss(found=pairs not in (NO_LOSS, NO_TARGETS), read=False, targets_name=name, why=pairs)
    shifts = {j - i for (_b, i), j in pairs.items()}
    row0 = sorted((i, j) for (b, i), j in pairs.items() if b == 0)
    shown = ", ".join(f"{i}→{j}" for i, j in row0[:8]) + (", ..." if len(row0) > 8 else "")
    if len(shifts) != 1:
        return Loss(True, True, None, targets_name=name, pairs=shown, why="the pairs do not follow one shift")
    (shift,) = shifts
    logits_pos = sorted({i for (_b, i) in pairs})
    target_pos = sorted(set(pairs.values()))
    contiguous = logits_pos == list(range(logits_pos[0], logits_pos[-1] + 1))
    if not contiguous:
        return Loss(True, True, shift, targets_name=name, pairs=shown, why="the positions in the loss have gaps")
    n = _length(len(logits_pos), seq)
    return Loss(
        True,
        True,
        shift,
        logits=_sliced("logits", _slice(logits_pos[0], logits_pos[-1], seq)),
        logits_dims=f"(B, {n}, V)",
        targets=_sliced(name, _slice(target_pos[0], target_pos[-1], seq)),
        targets_dims=f"(B, {n})",
        targets_name=name,
        pairs=shown,
    )


def meaning(loss: Loss) -> tuple[str, str]:
    """What the pairing means for the learner, (en, zh)."""
    if not loss.read or loss.shift is None:
        why = loss.why or "unknown"
        return (f"the loss's pairing could not be read: {why}", f"读不出损失的对齐方式：{why_zh(why)}")
    name = loss.targets_name
    labels = name.lower() in ("labels", "label")
    if loss.shift == 1:
        en = f"position t predicts token t+1: the shift is inside the model, so {name} must be the ids themselves"
        zh = f"位置 t 预测第 t+1 个词元：错位在模型内部完成，所以 {name} 应当直接是 ids 本身"
        if labels:
            return (en + " (Hugging Face's convention for labels)", zh + "（Hugging Face 对 labels 的约定）")
        return (
            en + f"; given {name} that already hold the next tokens (nanoGPT's convention for targets: y = ids "
            "shifted by one), the pair is shifted twice",
            zh + f"；如果传入的 {name} 已经是下一个词元（nanoGPT 对 targets 的约定：y = ids 错一位），就错位了两次",
        )
    if loss.shift == 0:
        en = (
            f"the loss compares position t with {name}[t]: no shift inside the model, so {name} must already be the "
            "next tokens (the ids shifted left by one, as nanoGPT's get_batch makes them); given the ids "
            "themselves, the model learns to copy its input"
        )
        zh = (
            f"损失把位置 t 和 {name}[t] 比较：模型内部没有错位，所以传入的 {name} 必须已经是下一个词元"
            "（ids 向左错一位，就像 nanoGPT 的 get_batch 那样）；如果直接传 ids，模型学会的是复制输入"
        )
        if labels:
            return (
                en + "; Hugging Face's convention for labels is the ids themselves, shifted inside the model",
                zh + "；Hugging Face 对 labels 的约定是直接传 ids、由模型内部错位",
            )
        return en, zh
    if loss.shift > 1:
        return (
            f"position t is compared with {name}[t+{loss.shift}]: shifted {loss.shift} times (once is right)",
            f"位置 t 和 {name}[t+{loss.shift}] 比较：错位了 {loss.shift} 次（应当只错一位）",
        )
    return (
        f"position t is compared with {name}[t{loss.shift}]: shifted the wrong way (a past token)",
        f"位置 t 和 {name}[t{loss.shift}] 比较：错位方向反了（预测的是过去的词元）",
    )
