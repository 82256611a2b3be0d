"""Where the positions enter, found by behaviour: a sequence of one repeated token shows whether what enters the
first block depends on the position (positions added before the blocks); the first block fed its input with two
earlier rows swapped shows whether attention sees positions itself (rotary, ALiBi); the logits of that sequence
show positions added after the blocks. Where a positional table is found, how often it is added and how often the
token embedding is scaled by sqrt(d_model)."""

from __future__ import annotations

import torch
from torch import nn

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model.blocks import Calls, capture, hidden
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import BATCH, LM, ForwardError
from anatomy.doctor.model.found import ModelFinding, Op, at_caller, at_op

__anatomy_transparent__ = True

REL = 1e-7
FIT = 1e-6  # a least-squares scale fits when the residual is this small relative to the difference
ADD_OPS = {"add", "__add__", "__radd__", "__iadd__", "add_"}
MUL_OPS = {"mul", "__mul__", "__rmul__", "__imul__", "mul_", "div", "__truediv__", "__itruediv__"}


def _differs(a: torch.Tensor, b: torch.Tensor) -> bool:
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-30)
    return float((a - b).abs().max()) > tol(REL) * scale


def _same_token(t: int, token: int = 3) -> torch.Tensor:
    return torch.full((BATCH, t), token, dtype=torch.long)


def _block0_sees_order(lm: LM, calls: Calls, block: nn.Module) -> bool | None:
    """Does the first block, alone, move the last position's output when two earlier rows of its input swap? The
    first two rows (the farthest apart from the last, where rotary angles differ most), and the two just before
    the last: a sliding-window attention (Mistral's, Gemma 2's local layers) never lets the last position see the
    first ones."""
    x, extras = calls.inputs[0], calls.extras[0]
    if x is None or extras is None or x.dim() != 3 or x.shape[1] < 3:
        return None
    t = x.shape[1]
    seen = False
    for i, j in dict.fromkeys([(0, 1), (t - 3, t - 2)]):
        y = x.clone()
        y[:, [i, j]] = x[:, [j, i]]
        try:
            with torch.no_grad(), lm.running():
                a, b = hidden(block(x, *extras[0], **extras[1])), hidden(block(y, *extras[0], **extras[1]))
        except Exception:  # noqa: BLE001 - a block that cannot run alone: can't tell
            return None
        if a is None or b is None:
            return None
        seen = seen or _differs(a[:, -1], b[:, -1])
    return seen


def positions_findings(ctx: Context) -> list[ModelFinding]:
    lm, stack = ctx.lm, ctx.stack
    if stack is None or ctx.found.get("deterministic") is False:
        why = "no stack of blocks found" if stack is None else "the model is not deterministic in eval()"
        ctx.skip("lm_positions", why, "没有找到 block 堆叠" if stack is None else "模型在 eval() 下结果不确定")
        return []
    try:
        same = capture(lm, stack, _same_token(lm.seq))
        plain = capture(lm, stack, lm.ids())
        logits = lm.logits(_same_token(lm.seq))
    except ForwardError as err:
        ctx.skip("lm_positions", f"a forward raised {err}", f"一次 forward 出错：{err}")
        return []
    x0 = same.inputs[0]
    if x0 is None:
        ctx.skip("lm_positions", "the first block's input is not a tensor", "第一个 block 的输入不是张量")
        return []
    before = _differs(x0[:, 1:], x0[:, :1].expand_as(x0[:, 1:]))
    inside = _block0_sees_order(lm, plain, stack.blocks[0])
    ops = ctx.ops(lm.ids())
    if before:
        ctx.found["positions"] = "added before the blocks"
        return _scales(ctx, ops)
    if inside:
        ctx.found["positions"] = "inside the attention (rotary or relative)"
        return _scales(ctx, ops)  # no positional table to read, but the token embedding's scale still shows
    if inside is None:
        ctx.skip("lm_positions", "the first block cannot run alone", "第一个 block 无法单独运行")
        return []
    after = _differs(logits[:, 1:], logits[:, :1].expand_as(logits[:, 1:]))
    ctx.found["positions"] = "after the blocks" if after else "none"
    return [_after(ops)] if after else [_missing(ops)]


def _before_blocks(ops: list[Op]) -> list[Op]:
    end = next((i for i, o in enumerate(ops) if o.op == "<block>"), len(ops))
    return [o for o in ops[:end] if o.line]


def _after_blocks(ops: list[Op]) -> list[Op]:
    last = max((i for i, o in enumerate(ops) if o.op == "</block>"), default=-1)
    return [o for o in ops[last + 1 :] if o.line]


def _missing(ops: list[Op]) -> ModelFinding:
    emb = next((o for o in _before_blocks(ops) if o.op == "embedding"), None)
    where = (
        []
        if emb is None
        else [
            *at_caller(
                emb,
                "line {line} takes the embedded tokens on to the blocks without their positions",
                "第 {line} 行把嵌入后的 token 直接送往 block，没有加上位置",
            ),
            at_op(
                emb,
                f"line {emb.line} embeds the tokens; nothing adds their positions before the blocks",
                f"第 {emb.line} 行嵌入 token；进入 block 之前没有加上位置",
            ),
        ]
    )
    return ModelFinding(
        "lm_positions",
        "error",
        "a sequence of one repeated token enters the blocks as the same vector at every position, and the blocks "
        "do not see positions either: swapping two earlier tokens leaves the next block's last output unchanged",
        "同一个 token 重复组成的序列在每个位置以相同的向量进入 block，block 自己也看不到位置：交换前面两个 token，"
        "下一个 block 最后位置的输出不变",
        {},
        fault="positions_missing",
        where=where,
    )


def _after(ops: list[Op]) -> ModelFinding:
    add = next((o for o in _after_blocks(ops) if o.op in ADD_OPS), None)
    where = (
        []
        if add is None
        else [at_op(add, f"line {add.line} adds after the last block", f"第 {add.line} 行在最后一个 block 之后相加")]
    )
    return ModelFinding(
        "lm_positions",
        "error",
        "the blocks see no positions (one repeated token enters them the same everywhere), yet the logits differ "
        "by position: the positions are added after the blocks, where attention never sees them",
        "block 看不到位置（重复的同一个 token 在各处以相同向量进入），logits 却随位置而变：位置编码加在了 block "
        "之后，注意力从来看不到它",
        {},
        fault="positions_after_blocks",
        where=where,
    )


def _tables(model: nn.Module, v: int, d: int, t: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The token embedding's weight (V, D) and a positional table (L >= T, D): an Embedding or a buffer/Parameter."""
    tok = pos = None
    for m in model.modules():
        if isinstance(m, nn.Embedding) and m.embedding_dim == d:
            if m.num_embeddings == v and tok is None:
                tok = m.weight.detach()
            elif m.num_embeddings >= t and pos is None:
                pos = m.weight.detach()
    if pos is None:
        for _, b in list(model.named_buffers()) + list(model.named_parameters()):
            flat = b.detach().reshape(-1, b.shape[-1]) if b.dim() >= 2 else None
            if flat is not None and b.shape[-1] == d and flat.shape[0] >= t and flat.shape[0] != v:
                if b.dim() == 2 or all(s == 1 for s in b.shape[:-2]):
                    pos = flat
                    break
    return tok, pos


def _fit(y: torch.Tensor, x: torch.Tensor) -> float | None:
    """The scale c with y = c x, None when it does not fit."""
    xx = float((x * x).sum())
    if xx == 0:
        return None
    c = float((y * x).sum()) / xx
    resid = float((y - c * x).abs().max())
    return c if resid <= tol(FIT) * max(float(y.abs().max()), 1e-30) else None


def _scales(ctx: Context, ops: list[Op]) -> list[ModelFinding]:
    lm, stack = ctx.lm, ctx.stack
    assert stack is not None
    v, d, t = lm.sizes.vocab_size, lm.sizes.d_model, lm.seq
    tok, pos = _tables(lm.module, v, d, t)
    out: list[ModelFinding] = []
    try:
        a, b = capture(lm, stack, lm.ids()), capture(lm, stack, lm.ids(seed=5))
        same = capture(lm, stack, _same_token(lm.seq))
    except ForwardError:
        return []
    xa, xb, xs = a.inputs[0], b.inputs[0], same.inputs[0]
    ia, ib = lm.ids(), lm.ids(seed=5)
    if tok is not None and xa is not None and xb is not None:
        s = _fit((xa - xb).to(tok.dtype), tok[ia] - tok[ib])
        ctx.found["embedding_scale"] = s
        if s is not None and abs(s - d) <= tol(1e-6) * d and d != 1:
            out.append(_scaled_twice(s, d, ops))
    if pos is not None and xs is not None:
        c = _fit((xs[:, 1:] - xs[:, :1]).to(pos.dtype), (pos[1:t] - pos[:1]).expand_as(xs[:, 1:]))
        ctx.found["positions_scale"] = c
        if c is not None and abs(c - 2) <= tol(1e-6):
            out.append(_twice(ops))
    return out


def _lines(ops: list[Op], names: set[str], en: str, zh: str) -> list[dict[str, object]]:
    seen: set[int] = set()
    out = []
    for o in _before_blocks(ops):
        if o.op in names and o.line not in seen:
            seen.add(o.line)
            out.append(at_op(o, f"line {o.line} {en}", f"第 {o.line} 行{zh}"))
    return out


def _twice(ops: list[Op]) -> ModelFinding:
    return ModelFinding(
        "lm_positions",
        "error",
        "what enters the first block holds the positional table twice (its position-to-position differences are "
        "exactly 2 × the table's): the positions are added twice",
        "进入第一个 block 的向量含有两份位置表（各位置之间的差恰好是位置表的 2 倍）：位置编码加了两次",
        {"scale": 2.0},
        fault="positions_added_twice",
        where=_lines(ops, ADD_OPS, "adds before the first block", " 在第一个 block 之前做加法"),
    )


def _scaled_twice(s: float, d: int, ops: list[Op]) -> ModelFinding:
    return ModelFinding(
        "lm_positions",
        "error",
        f"the token embedding enters the first block multiplied by {s:.4g} = d_model, i.e. sqrt(d_model) twice "
        f"(the post scales by sqrt(d_model) = {d**0.5:.4g} once)",
        f"token 嵌入乘以 {s:.4g} = d_model 后进入第一个 block，即乘了两次 sqrt(d_model)（原文只乘一次 "
        f"sqrt(d_model) = {d**0.5:.4g}）",
        {"scale": s, "d_model": d},
        fault="embedding_scaled_twice",
        where=_lines(ops, MUL_OPS, "scales before the first block", " 在第一个 block 之前做缩放"),
    )
