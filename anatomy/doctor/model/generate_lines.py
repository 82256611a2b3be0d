"""Where the model's own ``generate`` goes wrong, as lines of the learner's file: the line that gives a cached step
its position, the line that feeds the new token, a division after the softmax, a read of position 0."""

from __future__ import annotations

from typing import TYPE_CHECKING

from anatomy.doctor.model.found import Op, at, at_caller, at_op

if TYPE_CHECKING:
    from anatomy.doctor.model.generate import Run

__anatomy_transparent__ = True


POSITION_OPS = ("arange", "cumsum")


def position_line(run: Run, i: int) -> list[dict[str, object]]:
    """The line that gives the new token its position in cached step ``i`` (before the first block): an ``arange``
    the prompt's forward ran and the cached step skips, else the cached step's own ``arange``/``cumsum``."""
    if len(run.firsts) <= i or len(run.marks) <= i:
        return []
    prompt = [o for o in run.ops[run.marks[0] : run.firsts[0]] if o.line]
    step = [o for o in run.ops[run.marks[i] : run.firsts[i]] if o.line]
    ran = {(o.file, o.line) for o in step}
    skipped = next((o for o in prompt if o.op in POSITION_OPS and (o.file, o.line) not in ran), None)
    if skipped is not None:
        return [
            at_op(
                skipped,
                f"line {skipped.line} gives the prompt its positions; the cached step skips it",
                f"第 {skipped.line} 行为提示词计算位置；带缓存的那一步跳过了它",
            )
        ]
    own = next((o for o in step if o.op in POSITION_OPS), None)
    if own is None:
        return []
    return [
        *at_caller(
            own,
            "line {line} calls it for the cached step (does the call pass how many tokens came before?)",
            "第 {line} 行在带缓存的那一步调用它（调用时传入了之前已有多少个 token 吗？）",
        ),
        at_op(
            own,
            f"line {own.line} computes the new token's position in the cached step",
            f"第 {own.line} 行在带缓存的那一步计算新 token 的位置",
        ),
    ]


def caller_line(run: Run, zero_start: bool) -> list[dict[str, object]]:
    """The line that calls forward with the new token when it passes start position 0, else the line that reads
    position 0 in a cached step."""
    zero = next((o for o in run.ops[first_forward_end(run) :] if o.at_zero and o.line), None)
    if zero is not None and not zero_start:
        return [
            at_op(
                zero, f"line {zero.line} reads position 0 for the new token", f"第 {zero.line} 行为新 token 读取位置 0"
            )
        ]
    if len(run.callers) < 2 or not run.callers[1][1]:
        return []
    file, line, source = run.callers[1]
    return [at(file, line, source, f"line {line} feeds the new token", f"第 {line} 行送入新 token")]


DIV_OPS = ("div", "__truediv__", "__itruediv__", "div_", "true_divide")


def div_after_softmax(ops: list[Op]) -> Op | None:
    """A division right after a softmax (the next op or the one after)."""
    for i, o in enumerate(ops):
        if o.op in ("softmax", "_softmax"):
            nxt = next((n for n in ops[i + 1 : i + 3] if n.op in DIV_OPS and n.line), None)
            if nxt is not None:
                return nxt
    return None


def first_forward_end(run: Run) -> int:
    """The index of the first op after the first forward (the prompt's): its ops come first in the log."""
    return run.marks[1] if len(run.marks) > 1 else len(run.ops)


def index_line(ops: list[Op]) -> list[dict[str, object]]:
    op = next((o for o in ops if o.op == "__getitem__" and o.line and "0" in o.source and "logits" in o.source), None)
    return [] if op is None else [at_op(op, f"line {op.line} reads position 0", f"第 {op.line} 行读取位置 0")]
