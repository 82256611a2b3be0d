"""The blocks inside a model: the ``ModuleList`` (or ``Sequential``) of repeated modules, what the model passes to
each (captured by a pre-hook on a forward of every length: a mask, RoPE's frequencies, a start position), the line
that calls it, and each block diagnosed by the block doctor (``doctor/check.py``) behind a wrapper that takes the
hidden states alone and supplies the rest as the model would."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.doctor.loading.subject import CheckError
from anatomy.doctor.model.contract import LM, ForwardError
from anatomy.doctor.report.findings import Report
from anatomy.tracing.steps import learner_frame

__anatomy_transparent__ = True

MAX_CAPTURED = 16  # the longest input whose arguments are captured for the block doctor (it probes T <= 11)
Extras = tuple[tuple[Any, ...], dict[str, Any]]  # the arguments after the hidden states, and the keywords


@dataclass
class Stack:
    """The repeated blocks: their container's path and the blocks in order."""

    path: str
    blocks: list[nn.Module]
    start: int = 0  # the index of the first block in its container (a run inside an nn.Sequential)

    def name(self, i: int) -> str:
        return f"{self.path}.{self.start + i}" if self.path else str(self.start + i)


@dataclass
class Calls:
    """What one forward of the model gave each block: its input, its output, its extra arguments, its call line."""

    inputs: list[torch.Tensor | None] = field(default_factory=list)
    outputs: list[torch.Tensor | None] = field(default_factory=list)
    extras: list[Extras | None] = field(default_factory=list)
    lines: list[tuple[str, int, str] | None] = field(default_factory=list)


def find_stack(model: nn.Module, d_model: int) -> Stack | None:
    """The repeated blocks holding the most parameters: the children of a ModuleList or Sequential that share one
    class, or a run of two or more such children inside one (PaLM's ``nn.Sequential(Embedding, *blocks, LayerNorm,
    Linear)``); None when the model has none."""
    best: tuple[int, Stack] | None = None
    for path, m in model.named_modules():
        if not isinstance(m, (nn.ModuleList, nn.Sequential)) or len(m) == 0:
            continue
        for start, kids in _runs(list(m)):
            if isinstance(kids[0], (nn.Linear, nn.Embedding, nn.Dropout, nn.LayerNorm)):
                continue
            size = sum(p.numel() for k in kids for p in k.parameters())
            if size and (best is None or size > best[0]):
                best = (size, Stack(path, kids, start))
    return None if best is None else best[1]


def _runs(kids: list[nn.Module]) -> list[tuple[int, list[nn.Module]]]:
    """All the children when they share one class, else each run of two or more consecutive alike ones."""
    if len({type(k) for k in kids}) == 1:
        return [(0, kids)]
    out, start = [], 0
    for i in range(1, len(kids) + 1):
        if i == len(kids) or type(kids[i]) is not type(kids[start]):
            if i - start >= 2:
                out.append((start, kids[start:i]))
            start = i
    return out


def hidden(out: Any) -> torch.Tensor | None:
    """A block's hidden states in what it returned (the first tensor of a tuple)."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    return None


def capture(lm: LM, stack: Stack, ids: torch.Tensor, **kwargs: Any) -> Calls:
    """One forward of the model on ``ids``, with what each block was given and gave back (first call of each).
    Without the model's cache unless asked (``use_cache``): a cache object handed to every block (transformers'
    DynamicCache) is filled during the forward, so a block replayed with it would attend over its own keys twice."""
    if "use_cache" not in kwargs and _takes_use_cache(lm.module):
        kwargs["use_cache"] = False
    calls = Calls(*([None] * len(stack.blocks) for _ in range(4)))  # type: ignore[arg-type]
    handles = []
    for i, block in enumerate(stack.blocks):
        handles.append(block.register_forward_pre_hook(_pre(calls, i), with_kwargs=True))
        handles.append(block.register_forward_hook(_post(calls, i)))
    try:
        lm.forward(ids, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return calls


def _pre(calls: Calls, i: int) -> Callable[..., None]:
    def hook(_m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if calls.extras[i] is not None:
            return
        x = args[0] if args else None
        calls.inputs[i] = x.detach().clone() if isinstance(x, torch.Tensor) else None
        calls.extras[i] = (tuple(args[1:]), dict(kwargs))
        calls.lines[i] = learner_frame()

    return hook


def _post(calls: Calls, i: int) -> Callable[..., None]:
    def hook(_m: nn.Module, _args: Any, out: Any) -> None:
        if calls.outputs[i] is None:
            h = hidden(out)
            calls.outputs[i] = h.detach().clone() if h is not None else None

    return hook


class Layer(nn.Module):
    """One block taking the hidden states alone: the model's other arguments for a length-T input supplied as the
    model gave them (captured for every T up to block_size)."""

    def __init__(self, block: nn.Module, extras: dict[int, Extras]) -> None:
        super().__init__()
        self.block = block
        self.extras = extras

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        got = self.extras.get(x.shape[1])
        if got is None:
            raise ValueError(f"the model takes no input of {x.shape[1]} tokens")
        args, kwargs = got
        out = hidden(self.block(x, *args, **kwargs))
        if out is None:
            raise ValueError("the block returned no tensor")
        return out


def layer_extras(lm: LM, stack: Stack) -> list[dict[int, Extras]]:
    """Per block, its extra arguments for every input length 1..block_size the model accepts."""
    out: list[dict[int, Extras]] = [{} for _ in stack.blocks]
    for t in range(1, min(lm.sizes.block_size, MAX_CAPTURED) + 1):
        try:
            calls = capture(lm, stack, lm.ids(t))
        except ForwardError:
            continue
        for i, e in enumerate(calls.extras):
            if e is not None and calls.inputs[i] is not None:
                out[i][t] = e
    return out


def _takes_use_cache(module: nn.Module) -> bool:
    """``forward`` names ``use_cache``, or takes ``**kwargs`` on a transformers model whose config says it caches
    (GraniteMoe's)."""
    try:
        params = inspect.signature(module.forward).parameters
    except (TypeError, ValueError):
        return False
    hf = isinstance(getattr(getattr(module, "config", None), "use_cache", None), bool)
    return "use_cache" in params or (hf and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()))


BlockCheck = Callable[..., Report]  # the block doctor's check(), handed in by doctor/check.py (no import cycle)


def diagnose_layers(
    lm: LM, stack: Stack, check: BlockCheck, unmasked: frozenset[int] = frozenset()
) -> list[Report | str]:
    """The block doctor's report on each block (or the one line saying why it could not check it). The blocks in
    ``unmasked`` get no causal mask from the model while the others do (a model-level fault, said by the model's
    probe): they are checked as the bidirectional blocks the model makes of them."""

    extras = layer_extras(lm, stack)
    plain = layer_settings(stack.blocks)
    out: list[Report | str] = []
    seen: list[tuple[int, nn.Module, dict[int, Extras], bool, Report | str]] = []
    for i, (block, ex) in enumerate(zip(stack.blocks, extras)):
        causal = i not in unmasked
        if not ex:
            out.append("the model never called it with the hidden states first")
            continue
        twin = next(
            (
                (j, rep)
                for j, b, e, c, rep in seen
                if c == causal and alike(b, block) and plain[j] == plain[i] and same_extras(e, ex)
            ),
            None,
        )
        if twin is not None:  # the same code, configuration and arguments: the same block check
            j, rep = twin
            out.append(rep.replace(stack.name(j), stack.name(i)) if isinstance(rep, str) else rep)
            continue
        try:
            out.append(
                check(
                    _factory(Layer(block, ex), stack.name(i)),
                    kind="block",
                    d_model=lm.sizes.d_model,
                    n_heads=lm.sizes.n_heads,
                    causal=causal,
                    seed=lm.seed,
                    timeout=lm.timeout,
                )
            )
        except CheckError as err:
            out.append(str(err))
        seen.append((i, block, ex, causal, out[-1]))
    return out


def _factory(layer: Layer, name: str) -> Callable[[int, int], nn.Module]:
    """The block doctor gets a factory of the layer itself, not a copy: a block whose forward reaches its
    sub-modules through a closure (minGPT's ``self.mlpf = lambda x: m.c_proj(...)``) would, deep-copied, still
    call the original's. The model is ours (built, or copied from the caller's instance), so the block doctor's
    seeded weights may land in it."""

    def make(_d: int, _h: int) -> nn.Module:
        return layer

    make.__name__ = make.__qualname__ = name
    return make


Setting = dict[tuple[str, str], object]
PLAIN = (int, float, str, bool, type(None))


def layer_settings(blocks: list[nn.Module]) -> list[Setting]:
    """Each block's plain attributes (numbers, strings, flags, None, in every sub-module), which ``repr`` does not
    show: a sliding window set on some layers only (``self.window = 4``, Gemma's ``is_sliding``) makes those
    blocks differ from the others. An attribute that numbers the layers (``layer_idx`` 0, 1, 2 ... or from 1) is
    left out: it is not a setting the computation differs by."""
    per: list[Setting] = [
        {
            (path, k): v
            for path, sub in block.named_modules()
            for k, v in vars(sub).items()
            if not k.startswith("_") and k != "training" and type(v) in PLAIN
        }
        for block in blocks
    ]
    n = len(per)
    numbering = {
        key
        for key in set().union(*per)
        if all(type(p.get(key)) is int for p in per)  # not a flag: [False, True] == [0, 1]
        and [p.get(key) for p in per] in (list(range(n)), list(range(1, n + 1)))
    }
    return [{k: v for k, v in p.items() if k not in numbering} for p in per]


def alike(a: nn.Module, b: nn.Module) -> bool:
    """The same class and configuration (``repr`` lists every sub-module and its sizes)."""
    return type(a) is type(b) and repr(a) == repr(b)


def same_extras(a: dict[int, Extras], b: dict[int, Extras]) -> bool:
    """The model passes both blocks the same arguments, at every length."""
    return a.keys() == b.keys() and all(_same(a[t], b[t]) for t in a)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    try:
        return bool(a == b) and type(a) is type(b)
    except Exception:  # noqa: BLE001 - an object that cannot be compared: not the same
        return a is b
