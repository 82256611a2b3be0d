"""Three probes of the model as a whole: the same input gives the same logits in ``eval()`` (a functional dropout
left on does not); the head tied to the embedding shares one Parameter (a copy drifts apart); a Pre-Norm stack
ends in a norm (the logits do not change when the last block's output is scaled, as a norm makes them)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import CodeType
from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import ForwardError
from anatomy.doctor.model.found import ModelFinding, Op, at, at_op
from anatomy.doctor.report.findings import Report

__anatomy_transparent__ = True

REL = 1e-7
DROPOUT_OPS = {
    "dropout",
    "dropout_",
    "feature_dropout",
    "alpha_dropout",
    "dropout1d",
    "dropout2d",
    "dropout3d",
    "scaled_dot_product_attention",  # with dropout_p > 0 in eval() (nanoGPT before 7399dfe)
}


def eval_findings(ctx: Context) -> list[ModelFinding]:
    """Two forwards of one input under two seeds: equal logits in eval(), or a dropout that ignores eval()."""
    ids = ctx.lm.ids()
    try:
        a, b = ctx.lm.logits(ids, seed=1), ctx.lm.logits(ids, seed=2)
    except ForwardError as err:
        ctx.skip("lm_eval", f"a forward raised {err}", f"一次 forward 出错：{err}")
        return []
    scale = max(float(a.abs().max()), 1e-30)
    same = float((a - b).abs().max()) <= tol(REL) * scale
    ctx.found["deterministic"] = same
    if same:
        return []
    drop = next((o for o in ctx.ops(ids) if o.op in DROPOUT_OPS and o.line and o.changed), None)
    return [
        ModelFinding(
            "lm_eval",
            "error",
            "in eval() the same ids give different logits on two calls (max difference "
            f"{float((a - b).abs().max()):.3g})" + (": a dropout still drops" if drop is not None else ""),
            "eval() 下同样的 ids 两次调用得到不同的 logits" + ("：有 dropout 仍在丢弃" if drop is not None else ""),
            {"max_difference": float((a - b).abs().max())},
            fault="functional_dropout_in_eval" if drop is not None else None,
            where=[]
            if drop is None
            else [
                at_op(
                    drop,
                    f"line {drop.line} drops attention weights in eval(): pass dropout_p=self.dropout if "
                    "self.training else 0",
                    f"第 {drop.line} 行在 eval() 下仍丢弃注意力权重：传入 dropout_p=self.dropout if self.training "
                    "else 0",
                )
                if drop.op == "scaled_dot_product_attention"
                else at_op(
                    drop,
                    f"line {drop.line} drops values in eval(): pass training=self.training, or use nn.Dropout",
                    f"第 {drop.line} 行在 eval() 下仍丢弃数值：传入 training=self.training，或使用 nn.Dropout",
                )
            ],
        )
    ]


def _embedding(model: nn.Module, v: int) -> tuple[str, torch.Tensor] | None:
    return next(
        ((n, m.weight) for n, m in model.named_modules() if isinstance(m, nn.Embedding) and m.num_embeddings == v),
        None,
    )


def _head(model: nn.Module, v: int) -> tuple[str, torch.Tensor] | None:
    heads = [(n, m.weight) for n, m in model.named_modules() if isinstance(m, nn.Linear) and m.out_features == v]
    return heads[-1] if heads else None


def tying_findings(ctx: Context) -> list[ModelFinding]:
    """The head's weight and the embedding's: one Parameter (tied), equal values in two (a copy), or neither."""
    model, v = ctx.lm.module, ctx.lm.sizes.vocab_size
    emb, head = _embedding(model, v), _head(model, v)
    if emb is None or head is None:
        ctx.found["tying"] = None
        return []
    (emb_name, e), (head_name, h) = emb, head
    if h is e:
        ctx.found["tying"] = "shared"
        return []
    if h.data_ptr() == e.data_ptr():
        ctx.found["tying"] = "same storage, two Parameters"
        return []
    equal = h.shape == e.shape and bool(torch.equal(h, e))
    ctx.found["tying"] = "copy" if equal else "untied"
    if not equal:
        return []
    return [
        ModelFinding(
            "lm_tying",
            "warning",
            f"{head_name}.weight and {emb_name}.weight hold equal values in two Parameters: a copy, which the first "
            f"optimiser step unties; share one: self.{head_name}.weight = self.{emb_name}.weight",
            f"{head_name}.weight 与 {emb_name}.weight 在两个 Parameter 里存着相同的数值：这是复制，第一次优化器更新后"
            f"就不再相同；应共享同一个：self.{head_name}.weight = self.{emb_name}.weight",
            {"head": head_name, "embedding": emb_name},
            fault="tied_by_copy",
            where=_source_lines(model, head_name, emb_name),
        )
    ]


def _source_lines(model: nn.Module, head: str, emb: str) -> list[dict[str, Any]]:
    """The line of the model's classes (the class first, then those it inherits from, torch's left out) that copies
    one weight into the other: both names and ``weight`` on one line, a plain sharing assignment left out."""
    h, e = head.split(".")[-1], emb.split(".")[-1]
    shares = re.compile(
        rf"^\s*self\.({re.escape(h)}|{re.escape(e)})\.weight\s*=\s*self\.({re.escape(h)}|{re.escape(e)})\.weight\s*$"
    )
    for cls in type(model).__mro__:
        if cls.__module__.startswith("torch") or cls is object:
            continue
        for code in sorted(_codes(cls), key=lambda c: c.co_firstlineno):
            try:
                lines, start = inspect.getsourcelines(code)
            except (OSError, TypeError):
                continue
            for i, text in enumerate(lines):
                body = text.split("#", 1)[0]
                if h in body and e in body and "weight" in body and not shares.match(body):
                    line = start + i
                    return [
                        at(
                            str(Path(code.co_filename or "")),
                            line,
                            text.strip(),
                            f"line {line} copies the values; the two Parameters stay separate",
                            f"第 {line} 行复制了数值；两个 Parameter 仍是分开的",
                        )
                    ]
    return []


def _codes(cls: type) -> list[CodeType]:
    """The code of the functions a class defines itself (its source is read through them: the file the doctor
    loaded need not be a module Python can find again)."""
    out = []
    for value in vars(cls).values():
        func = getattr(value, "__func__", value)  # a staticmethod or classmethod's function
        code = getattr(func, "__code__", None)
        if isinstance(code, CodeType):
            out.append(code)
    return out


def _pre_norm(reports: list[Report | str]) -> bool | None:
    placements = {(r.found.get("block") or {}).get("placement") for r in reports if isinstance(r, Report)}
    if placements == {"pre"}:
        return True
    return None if not placements or None in placements or "unknown" in placements else False


def final_norm_findings(ctx: Context) -> list[ModelFinding]:
    """A Pre-Norm stack: scale the last block's output by 3; a final norm leaves the logits as they were."""
    stack = ctx.stack
    if stack is None or not ctx.layer_reports or _pre_norm(ctx.layer_reports) is not True or _norm_after(ctx):
        ctx.found["final_norm"] = None if stack is None or not ctx.layer_reports else _norm_after(ctx) or None
        return []
    handle = stack.blocks[-1].register_forward_hook(lambda _m, _a, out: _scaled(out))
    ids = ctx.lm.ids()
    try:
        scaled = ctx.lm.logits(ids)
    except ForwardError:
        return []
    finally:
        handle.remove()
    base = ctx.lm.logits(ids)
    moved = float((scaled - base).abs().max()) > 1e-4 * max(float(base.abs().max()), 1e-30)
    ctx.found["final_norm"] = not moved
    if not moved:
        return []
    head = next((o for o in _after_last_block(ctx.ops(ids)) if o.op in ("linear", "matmul", "__matmul__")), None)
    return [
        ModelFinding(
            "lm_final_norm",
            "warning",
            "the blocks are Pre-Norm, and the logits change when the last block's output is scaled by 3: no norm "
            "stands between the last block and the head",
            "各 block 是 Pre-Norm，把最后一个 block 的输出放大 3 倍后 logits 随之改变：最后一个 block 与输出头之间"
            "没有 Norm",
            {},
            fault="final_norm_missing",
            where=[]
            if head is None
            else [
                at_op(
                    head,
                    f"line {head.line} reads the last block's output with no norm before it",
                    f"第 {head.line} 行直接读取最后一个 block 的输出，前面没有 Norm",
                )
            ],
        )
    ]


NORM_OPS = {"layer_norm", "rms_norm", "group_norm", "batch_norm", "rsqrt", "norm", "std", "var", "normalize"}


def _norm_after(ctx: Context) -> bool:
    """A norm's op (or an RMSNorm's rsqrt) runs after the last block: there is a final norm."""
    return any(o.op in NORM_OPS for o in _after_last_block(ctx.ops(ctx.lm.ids())))


def _scaled(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return out * 3
    if isinstance(out, tuple) and out and isinstance(out[0], torch.Tensor):
        return (out[0] * 3, *out[1:])
    return out


def _after_last_block(ops: list[Op]) -> list[Op]:
    last = max((i for i, o in enumerate(ops) if o.op == "</block>"), default=-1)
    return [o for o in ops[last + 1 :] if o.line]
