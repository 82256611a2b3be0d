"""The causal mask across the whole model: change a later token and see whether an earlier position's logits move
(end to end, and block by block to name the first layer where it appears); the same at the full block_size and at
a shorter length (a mask buffer sliced wrongly); one layer of the stack without the mask."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.model.blocks import Calls, Stack, capture, hidden
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import LM, ForwardError
from anatomy.doctor.model.found import ModelFinding, at, layer_words, raised_at

__anatomy_transparent__ = True

REL = 1e-7  # float64: a change this small relative to the logits is rounding, not a leak


def _changed(a: torch.Tensor, b: torch.Tensor) -> bool:
    scale = max(float(a.abs().max()), float(b.abs().max()), 1e-30)
    return float((a - b).abs().max()) > tol(REL) * scale


def _perturbed(lm: LM, ids: torch.Tensor, p: int) -> torch.Tensor:
    other = ids.clone()
    other[:, p] = (other[:, p] + 1 + torch.arange(ids.shape[0])) % lm.sizes.vocab_size
    return other


@dataclass
class Leak:
    t: int  # the input length
    p: int  # the position changed
    leaks: bool  # an earlier position's logits moved
    layer: int | None = None  # the first block whose output moved before p (None: before the blocks, or unknown)
    before_blocks: bool = False  # the blocks' input already moved (the embedding or the positions leak)


def leak_at(lm: LM, stack: Stack | None, t: int) -> Leak | None:
    """Does changing the token at ``t - 1`` (then ``t // 2``) move the logits before it? None: the model failed."""
    ids = lm.ids(t)
    try:
        base = lm.logits(ids)
    except ForwardError:
        return None
    for p in (t - 1, t // 2):
        if p < 1:
            continue
        other = _perturbed(lm, ids, p)
        moved = lm.logits(other)
        if _changed(base[:, :p], moved[:, :p]):
            return _locate(lm, stack, ids, other, t, p)
    return Leak(t, t - 1, False)


def _locate(lm: LM, stack: Stack | None, ids: torch.Tensor, other: torch.Tensor, t: int, p: int) -> Leak:
    if stack is None:
        return Leak(t, p, True)
    a, b = capture(lm, stack, ids), capture(lm, stack, other)
    first_in = next((x for x in a.inputs if x is not None), None)
    first_in_b = next((x for x in b.inputs if x is not None), None)
    if first_in is not None and first_in_b is not None and _changed(first_in[:, :p], first_in_b[:, :p]):
        return Leak(t, p, True, None, True)
    for i, (x, y) in enumerate(zip(a.outputs, b.outputs)):
        if x is not None and y is not None and x.shape == y.shape and _changed(x[:, :p], y[:, :p]):
            return Leak(t, p, True, i)
    return Leak(t, p, True)


def leaking_layers(lm: LM, stack: Stack, t: int) -> list[int] | None:
    """The blocks that, fed the model's own hidden states with a later position changed, move an earlier one:
    each block tested alone, with the arguments the model gave it. None when the blocks cannot be run alone."""
    ids = lm.ids(t)
    try:
        calls = capture(lm, stack, ids)
    except ForwardError:
        return None
    out = []
    for i, block in enumerate(stack.blocks):
        moved = _block_leaks(lm, block, calls, i, t)
        if moved is None:
            return None
        if moved:
            out.append(i)
    return out


def _block_leaks(lm: LM, block: torch.nn.Module, calls: Calls, i: int, t: int) -> bool | None:
    x, extras = calls.inputs[i], calls.extras[i]
    if x is None or extras is None or x.dim() != 3:
        return None
    args, kwargs = extras
    p = t - 1
    y = x.clone()
    y[:, p] = y[:, p] + torch.randn(y[:, p].shape, generator=torch.Generator().manual_seed(i), dtype=y.dtype)
    try:
        with torch.no_grad(), torch.random.fork_rng(devices=[]), lm.running():
            torch.manual_seed(0)
            a = hidden(block(x, *args, **kwargs))
            torch.manual_seed(0)
            b = hidden(block(y, *args, **kwargs))
    except Exception:  # noqa: BLE001 - a block that cannot run alone: the per-layer answer is "can't tell"
        return None
    if a is None or b is None:
        return None
    return _changed(a[:, :p], b[:, :p])


def causal_findings(ctx: Context) -> list[ModelFinding]:
    """The end-to-end leak at the probes' length and at block_size, with the pitfall it points at when it can
    tell; the blocks that leak alone go to ``found["leaking_layers"]``."""
    lm, stack, calls, t = ctx.lm, ctx.stack, ctx.calls, ctx.lm.seq
    short = leak_at(lm, stack, t)
    full = leak_at(lm, stack, lm.sizes.block_size) if t != lm.sizes.block_size else short
    if short is None:
        ctx.skip("lm_causal_leak", f"forward fails at T = {t}", f"T = {t} 时 forward 出错")
        return []
    if full is None:  # fails at block_size: a short input that leaks is the mask indexed by length (nanoGPT's
        # bias[:, :, T, :T], one row broadcast over every query, out of range at T = block_size)
        if short.leaks:
            return [_sliced(lm, short, calls, _failure(lm, lm.sizes.block_size))]
        ctx.skip(
            "lm_causal_leak",
            f"forward fails at T = block_size = {lm.sizes.block_size}",
            f"T = block_size = {lm.sizes.block_size} 时 forward 出错",
        )
        return []
    if not short.leaks and not full.leaks:
        return []
    n = len(stack.blocks) if stack is not None else 0
    leaky = leaking_layers(lm, stack, t) if stack is not None else None
    ctx.found["leaking_layers"] = leaky
    if short.leaks and not full.leaks:
        return [_sliced(lm, short, calls)]
    leak = short if short.leaks else full
    if leaky and len(leaky) < n:
        return [_missing_in_layer(lm, leak, leaky, n, calls)]
    return [_leak(leak, leaky or [], n)]


def _where_layer(calls: Calls | None, i: int, en: str, zh: str) -> list[dict[str, object]]:
    if calls is None or i >= len(calls.lines) or calls.lines[i] is None:
        return []
    file, line, source = calls.lines[i]  # type: ignore[misc]
    return [at(file, line, source, f"line {line} {en}", f"第 {line} 行{zh}")] if line else []


def _missing_in_layer(lm: LM, leak: Leak, leaky: list[int], n: int, calls: Calls | None) -> ModelFinding:
    en, zh = layer_words(leaky, n)
    first = leaky[0]
    return ModelFinding(
        "lm_causal_leak",
        "error",
        f"{en} of {n} attend(s) to the future: changing token {leak.p} moves the logits of earlier positions, and "
        f"the other layers are causal; the causal mask does not reach {en}",
        f"{n} 层中的{zh}能看到未来：改变第 {leak.p} 个 token 会改变更早位置的 logits，其余各层是因果的；"
        f"因果 mask 没有到达{zh}",
        {"position": leak.p, "length": leak.t, "layers": leaky},
        fault="causal_mask_missing_in_layer",
        where=_where_layer(
            calls,
            first,
            f"calls layer {first}, which gets no causal mask",
            f"调用第 {first} 层，它没有得到因果 mask",
        ),
        layers=leaky,
        layer=leak.layer if leak.layer is not None else first,
    )


def _failure(lm: LM, t: int) -> str:
    try:
        lm.logits(lm.ids(t))
    except ForwardError as err:
        return str(err)
    return ""


def _sliced(lm: LM, leak: Leak, calls: Calls | None, raised: str | None = None) -> ModelFinding:
    bs = lm.sizes.block_size
    layer = leak.layer if leak.layer is not None else 0
    at_full = "the model is causal" if raised is None else f"forward raises ({raised})"
    at_full_zh = "模型是因果的" if raised is None else f"forward 出错（{raised}）"
    ev: dict[str, object] = {"length": leak.t, "block_size": bs, "position": leak.p}
    if raised is not None:
        ev["error_at_block_size"] = raised
    return ModelFinding(
        "lm_mask_lengths",
        "error",
        f"at T = block_size = {bs} {at_full}, at T = {leak.t} changing token {leak.p} moves earlier "
        f"logits (first in layer {layer}): the mask registered for {bs} tokens is sliced wrongly for fewer",
        f"T = block_size = {bs} 时{at_full_zh}；T = {leak.t} 时改变第 {leak.p} 个 token 会改变更早位置的 logits"
        f"（最早在第 {layer} 层）：按 {bs} 个 token 注册的 mask 在较短输入上切错了",
        ev,
        fault="causal_mask_sliced_wrong",
        layer=layer,
    )


def _leak(leak: Leak, leaky: list[int], n: int) -> ModelFinding:
    where_en = (
        "before the first block (the embedding or the positions mix tokens)"
        if leak.before_blocks
        else (f"first in layer {leak.layer}" if leak.layer is not None else "after the blocks")
    )
    where_zh = (
        "在第一个 block 之前（嵌入或位置编码混合了 token）"
        if leak.before_blocks
        else (f"最早出现在第 {leak.layer} 层" if leak.layer is not None else "出现在各 block 之后")
    )
    return ModelFinding(
        "lm_causal_leak",
        "error",
        f"changing token {leak.p} of {leak.t} moves the logits of earlier positions, {where_en}: the model sees "
        "the future",
        f"改变 {leak.t} 个 token 中的第 {leak.p} 个会改变更早位置的 logits，{where_zh}：模型看到了未来",
        {"position": leak.p, "length": leak.t, "before_blocks": leak.before_blocks},
        layers=leaky,
        layer=leak.layer,
    )


def short_input_failure(lm: LM, t: int) -> ModelFinding | None:
    """The model works at block_size but raises on a shorter input (the mask or the positions kept at full size)."""
    try:
        lm.logits(lm.ids(t))
        return None
    except ForwardError as err:
        short_err, line = str(err), raised_at(err)
    try:
        lm.logits(lm.ids(lm.sizes.block_size))
    except ForwardError:
        return None
    source = line[2].lower() if line is not None else ""
    maskish = any(w in source for w in ("mask", "tril", "bias", "causal"))
    where = (
        [] if line is None else [at(*line, f"line {line[1]} raises at T = {t}", f"第 {line[1]} 行在 T = {t} 时出错")]
    )
    return ModelFinding(
        "lm_mask_lengths",
        "error",
        f"forward works at T = block_size = {lm.sizes.block_size} but raises at T = {t}: {short_err}",
        f"T = block_size = {lm.sizes.block_size} 时 forward 正常，T = {t} 时出错：{short_err}",
        {"length": t, "block_size": lm.sizes.block_size, "error": short_err},
        fault="causal_mask_sliced_wrong" if maskish else None,
        where=where,
    )
