"""The model's own ``generate`` against full forwards. Sampling is made greedy while it runs (``torch.multinomial``
answers the argmax of the probabilities it is given, which are kept), so the tokens it picks can be compared with
``argmax(logits[:, -1])`` of a full forward on the sequence so far: reading the first position's logits, or a KV
cache whose new tokens restart at position 0, pick other tokens. The probabilities it samples from at two
temperatures show a temperature applied after the softmax (they differ by the ratio of the temperatures)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckTimeout, _quiet
from anatomy.doctor.model.blocks import capture
from anatomy.doctor.model.context import Context
from anatomy.doctor.model.contract import LM, ForwardError, read_logits, seeded
from anatomy.doctor.model.found import ModelFinding, Op, at_op, op_log
from anatomy.doctor.model.generate_lines import (
    caller_line,
    div_after_softmax,
    first_forward_end,
    index_line,
    position_line,
)
from anatomy.tracing.steps import call_learner, learner_frame

__anatomy_transparent__ = True

COUNT_NAMES = (
    "max_new_tokens",
    "max_tokens",
    "max_gen_len",
    "num_tokens",
    "new_tokens",
    "n_tokens",
    "max_len",
    "max_length",
    "steps",
    "length",
    "n",
)
TEMP_NAMES = ("temperature", "temp")
START_NAMES = ("start_pos", "pos", "offset", "position", "past_length", "past_len", "start")
PROMPT, NEW = 3, 3


@dataclass
class Run:
    tokens: torch.Tensor  # the new tokens (1, NEW)
    probs: list[torch.Tensor] = field(default_factory=list)  # what multinomial was given, step by step
    ops: list[Op] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # the length of each forward's input
    starts: list[Any] = field(default_factory=list)  # the start position each forward was given (if it takes one)
    callers: list[tuple[str, int, str]] = field(default_factory=list)  # the line that called each forward
    marks: list[int] = field(default_factory=list)  # where each forward's ops start in ``ops``
    last: list[torch.Tensor | None] = field(default_factory=list)  # each forward's last-position logits (1, V)
    entered: list[torch.Tensor | None] = field(default_factory=list)  # the first block's last input row, per call
    firsts: list[int] = field(default_factory=list)  # where each forward's first block starts in ``ops``


class _Greedy(TorchFunctionMode):
    def __init__(self, probs: list[torch.Tensor]) -> None:
        super().__init__()
        self.probs = probs

    def __torch_function__(
        self, func: Callable[..., Any], types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        if getattr(func, "__name__", "") == "multinomial" and args and isinstance(args[0], torch.Tensor):
            p = args[0]
            self.probs.append(p.detach().clone())
            return p.argmax(-1, keepdim=True)
        return func(*args, **(kwargs or {}))


def _signature(fn: Callable[..., Any]) -> tuple[str | None, str | None] | None:
    """(the name of the new-token count, of the temperature) in generate's signature; None: not callable so."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params]
    if not params:
        return None
    count = next((n for n in COUNT_NAMES if n in names), None)
    if count is None and len(params) >= 2 and params[1].default is inspect.Parameter.empty:
        count = ""  # positionally
    temp = next((n for n in TEMP_NAMES if n in names), None)
    return (count, temp) if count is not None else None


def _run(
    lm: LM, count: str, temp: str | None, t: float | None, seed: int = 0, first_block: nn.Module | None = None
) -> Run | None:
    prompt = lm.ids(PROMPT, b=1)
    last: list[torch.Tensor | None] = []
    entered: list[torch.Tensor | None] = []
    firsts: list[int] = []
    probs: list[torch.Tensor] = []
    lengths: list[int] = []
    starts: list[Any] = []
    callers: list[tuple[str, int, str]] = []
    log: list[Op] = []
    marks: list[int] = []
    start_name = _start_name(lm)

    def pre(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        x = args[0] if args else None
        lengths.append(int(x.shape[-1]) if isinstance(x, torch.Tensor) and x.dim() >= 1 else -1)
        callers.append(learner_frame())
        marks.append(len(log))
        if start_name is not None:
            starts.append(kwargs.get(start_name[0], args[start_name[1]] if len(args) > start_name[1] else None))

    kw: dict[str, Any] = {} if temp is None or t is None else {temp: t}
    args: tuple[Any, ...] = (prompt, NEW) if count == "" else (prompt,)
    if count:
        kw[count] = NEW

    def post(_m: Any, args: tuple[Any, ...], _out: Any) -> None:
        x = args[0] if args else None
        n = int(x.shape[-1]) if isinstance(x, torch.Tensor) and x.dim() >= 1 else -1
        got = read_logits(_out, 1, n, lm.sizes.vocab_size) if n > 0 else None
        last.append(None if got is None else got[:, -1].detach().clone())

    def enter(_m: Any, args: tuple[Any, ...]) -> None:
        x = args[0] if args else None
        entered.append(x[:, -1].detach().clone() if isinstance(x, torch.Tensor) and x.dim() == 3 else None)
        firsts.append(len(log))

    handle = lm.module.register_forward_pre_hook(pre, with_kwargs=True)
    handles = [lm.module.register_forward_hook(post)]
    if first_block is not None:
        handles.append(first_block.register_forward_pre_hook(enter))
    step = (f"{lm.label}: generate(ids, {NEW})", f"{lm.label}：调用 generate(ids, {NEW}) 时")
    try:
        with (
            _quiet(),
            seeded(lm.seed + seed),
            guard(lm.timeout, lambda: step),
            torch.no_grad(),
            lm.running(),
            op_log(log),
            _Greedy(probs),
        ):
            out = call_learner(lm.module.generate, *args, **kw)  # type: ignore[arg-type]
    except Hung as hung:
        raise CheckTimeout.from_hung(hung) from None
    except Exception:  # noqa: BLE001 - a generate we cannot call so: not examined
        return None
    finally:
        handle.remove()
        for h in handles:
            h.remove()
    tokens = _new_tokens(out)
    if tokens is None:
        return None
    same = len(entered) == len(last)
    return Run(
        tokens, probs, log, lengths, starts, callers, marks, last, entered if same else [], firsts if same else []
    )


def _start_name(lm: LM) -> tuple[str, int] | None:
    try:
        names = list(inspect.signature(lm.module.forward).parameters)
    except (TypeError, ValueError):
        return None
    return next(((n, i) for i, n in enumerate(names) if n in START_NAMES), None)


def _new_tokens(out: Any) -> torch.Tensor | None:
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        out = out[0]
    if isinstance(out, list):
        out = torch.tensor(out)
    if not isinstance(out, torch.Tensor) or out.dtype.is_floating_point:
        return None
    flat: torch.Tensor = out.reshape(1, -1)
    if flat.shape[1] == PROMPT + NEW:
        return flat[:, PROMPT:]
    return flat if flat.shape[1] == NEW else None


def _greedy(lm: LM, position: int) -> torch.Tensor:
    seq = lm.ids(PROMPT, b=1)
    new = []
    for _ in range(NEW):
        nxt = lm.logits(seq)[:, position].argmax(-1, keepdim=True)
        new.append(nxt)
        seq = torch.cat([seq, nxt], dim=1)
    return torch.cat(new, dim=1)


def generate_findings(ctx: Context) -> list[ModelFinding]:
    lm = ctx.lm
    gen = getattr(lm.module, "generate", None)
    if ctx.found.get("deterministic") is False:
        ctx.skip("lm_generate", "the model is not deterministic in eval()", "模型在 eval() 下结果不确定")
        return []
    sig = _signature(gen) if callable(gen) else None
    if sig is None:
        ctx.skip("lm_generate", "the model has no generate(ids, n) to compare", "模型没有可比较的 generate(ids, n)")
        return []
    count, temp = sig
    first = ctx.stack.blocks[0] if ctx.stack is not None and ctx.stack.blocks else None
    run, again = _run(lm, count or "", temp, 1.0, first_block=first), _run(lm, count or "", temp, 1.0, seed=1)
    if run is None or again is None:
        ctx.skip("lm_generate", f"generate(ids, {NEW}) could not be run", f"无法运行 generate(ids, {NEW})")
        return []
    if not torch.equal(run.tokens, again.tokens):  # it samples without multinomial: it cannot be made greedy
        ctx.skip(
            "lm_generate",
            "generate picks other tokens under another seed (it samples without torch.multinomial)",
            "换一个随机种子 generate 就选出不同的 token（它不是用 torch.multinomial 采样的）",
        )
        return []
    try:
        want = _greedy(lm, -1)
    except ForwardError:
        return []
    ctx.found["generate"] = {"cached": any(n == 1 for n in run.lengths[1:]), "temperature": temp}
    out = []
    if not torch.equal(run.tokens, want):
        out.append(_mismatch(lm, run, want))
    else:
        stepped = _cached_logits(ctx, run)
        if stepped is not None:
            out.append(stepped)
    if temp is not None:
        out += _temperature(lm, count, temp)
    return out


def _mismatch(lm: LM, run: Run, want: torch.Tensor) -> ModelFinding:
    first = _greedy(lm, 0)
    step = int((run.tokens != want).int().argmax())
    cached = any(n == 1 for n in run.lengths[1:])
    if torch.equal(run.tokens, first):
        return _finding(
            "generate picks the tokens that argmax(logits[:, 0]) of full forwards picks, not argmax(logits[:, -1]): "
            "it reads the first position's logits",
            "generate 选出的 token 与完整前向的 argmax(logits[:, 0]) 一致，而不是 argmax(logits[:, -1])：它读的是"
            "第一个位置的 logits",
            "generate_reads_first_position",
            index_line(run.ops),
        )
    restart = cached and step > 0 or cached and step == 0 and run.lengths[0] == 1
    zero_start = bool(run.starts[1:]) and all(s == 0 for s in run.starts[1:] if s is not None)
    named = restart and (zero_start or _zero_after_first(run))
    return _finding(
        f"generate's token {step} differs from argmax(logits[:, -1]) of a full forward on the same sequence"
        + (
            " (it feeds one new token at a time with a cache, and each new token is given position 0)"
            if named
            else (" (it feeds one new token at a time with a cache)" if cached else "")
        ),
        f"generate 的第 {step} 个 token 与同一序列完整前向的 argmax(logits[:, -1]) 不同"
        + (
            "（它带缓存逐个送入新 token，每个新 token 的位置都是 0）"
            if named
            else ("（它带缓存逐个送入新 token）" if cached else "")
        ),
        "positions_restart_with_cache" if named else None,
        caller_line(run, zero_start) if named else [],
    )


CACHE_REL = 1e-5  # a cached step's logits against the full forward's, relative to their magnitude


def _cached_logits(ctx: Context, run: Run) -> ModelFinding | None:
    """At random init the greedy tokens of a cached and a full decode often agree even when the cache is wrong, so
    each cached step's last logits are compared with a full forward's on the same sequence; where they differ, the
    first block's input row for the new token tells whether its position is the cause (the same token, another
    positional vector: positions_restart_with_cache)."""
    lm = ctx.lm
    prompt = lm.ids(PROMPT, b=1)
    for i, (n, got) in enumerate(zip(run.lengths, run.last)):
        if i == 0 or i > NEW or got is None or n != 1:
            continue
        seq = torch.cat([prompt, run.tokens[:, :i]], dim=1)
        try:
            full = lm.logits(seq)[:, -1]
        except ForwardError:
            return None
        scale = max(float(full.abs().max()), float(got.abs().max()), 1e-30)
        diff = float((full.double() - got.double()).abs().max())
        if diff <= tol(CACHE_REL) * scale:
            continue
        why = _position_row(ctx, run, i, seq)
        ev = {"step": i, "max_abs_diff": diff, "max_abs_logit": scale}
        if why is not None:
            ctx.found["generate"]["cache"] = why
            return ModelFinding(
                "lm_generate",
                "error",
                f"generate feeds token {i} alone with a cache; its logits differ from a full forward's on the same "
                f"sequence by {diff:.3g} (logits up to {scale:.3g}), and {why[0]}: the new token is not given its "
                "position (the positions restart with the cache)",
                f"generate 带缓存单独送入第 {i} 个 token；它的 logits 与同一序列完整前向的相差 {diff:.3g}（logits "
                f"最大 {scale:.3g}），并且{why[1]}：新 token 没有得到它的位置（有缓存时位置从头开始）",
                ev,
                fault="positions_restart_with_cache",
                where=position_line(run, i)
                or caller_line(run, bool(run.starts[1:]) and all(s == 0 for s in run.starts[1:] if s is not None)),
            )
        return ModelFinding(
            "lm_generate",
            "error",
            f"generate feeds token {i} alone with a cache; its logits differ from a full forward's on the same "
            f"sequence by {diff:.3g} (logits up to {scale:.3g}): the cache does not give what the full forward gives",
            f"generate 带缓存单独送入第 {i} 个 token；它的 logits 与同一序列完整前向的相差 {diff:.3g}（logits 最大 "
            f"{scale:.3g}）：缓存给出的结果与完整前向不同",
            ev,
        )
    return None


def _position_row(ctx: Context, run: Run, i: int, seq: torch.Tensor) -> tuple[str, str] | None:
    """Why the cached step's positions are wrong, or None when it cannot tell: the new token enters the first block
    as another vector than in a full forward (positions added before the blocks), or it reads position 0."""
    if run.entered and ctx.stack is not None and ctx.found.get("positions") == "added before the blocks":
        row = run.entered[i]
        try:
            calls = capture(ctx.lm, ctx.stack, seq)
        except ForwardError:
            return None
        x = calls.inputs[0]
        if row is not None and x is not None and x.dim() == 3:
            want = x[:, -1]
            scale = max(float(want.abs().max()), 1e-30)
            if float((want.double() - row.double()).abs().max()) > tol(CACHE_REL) * scale:
                return (
                    "the new token enters the first block as another vector than at its position in the full forward",
                    "新 token 进入第一个 block 时的向量与完整前向中它所在位置的不同",
                )
            return None
    if _zero_after_first(run):
        return ("the cached step reads position 0", "带缓存的那一步读取的是位置 0")
    return None


def _zero_after_first(run: Run) -> bool:
    """A forward after the prompt's reads position 0 (``arange`` from 0, or row 0 of a table)."""
    first = run.lengths[0] if run.lengths else 0
    return first > 1 and any(o.at_zero for o in run.ops[first_forward_end(run) :])


def _finding(en: str, zh: str, fault: str | None, where: list[dict[str, object]]) -> ModelFinding:
    return ModelFinding("lm_generate", "error", en, zh, {}, fault=fault, where=where)


def _temperature(lm: LM, count: str | None, temp: str) -> list[ModelFinding]:
    cold, hot = _run(lm, count or "", temp, 0.5), _run(lm, count or "", temp, 2.0)
    if cold is None or hot is None or not cold.probs or not hot.probs:
        return []
    a, b = cold.probs[0].double(), hot.probs[0].double()
    if a.shape != b.shape or not torch.allclose(a * 0.5, b * 2.0, rtol=1e-6, atol=0):
        return []
    div = div_after_softmax(cold.ops)
    where = (
        []
        if div is None
        else [at_op(div, f"line {div.line} divides after the softmax", f"第 {div.line} 行在 softmax 之后做除法")]
    )
    return [
        _finding(
            "the probabilities generate samples from at temperature 0.5 and at 2 differ by the factor 4 only: the "
            "temperature divides the probabilities after the softmax (multinomial renormalises, so it does nothing)",
            "generate 在温度 0.5 和 2 下采样所用的概率只差 4 倍：温度是在 softmax 之后除的（multinomial 会重新归一化，"
            "温度不起作用）",
            "temperature_after_softmax",
            where,
        )
    ]
