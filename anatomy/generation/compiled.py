"""The compiled decode step: the model's own ``forward`` on static caches, through ``torch.compile``.

After the prefill (the modules, eagerly, into the ordinary caches) ``generate`` can move every layer's
self-attention cache into a :class:`~anatomy.components.kv_cache.StaticKVCache` of the generation's final length
``L`` (rounded up to a bucket, :func:`bucket`, so that calls of nearby lengths share one graph) and decode each
token with one compiled call of::

    model(ids (B, 1), mask (B, L), kv_caches=static, use_cache=True, logits_to_keep=1).logits[:, -1]   # (B, V)

the same forward the module path runs (no second copy of any order): the caches write by index and the attention
context reads the query's slot from a tensor (``AttentionContext.slots``), so every step has the same shapes and no
Python number changes between steps: ``torch.compile(fullgraph=True)`` captures the whole step as one graph, and the
graph is kept (per model and shapes, :func:`compiled_step`) for the next ``generate`` call.

What a step costs besides the weights (docs/performance.md, "Round 6"): calling a compiled function checks
dynamo's guards and gathers the graph's inputs from the modules (about a third of the weight-read floor per token
at d 256), so only each generation's first step goes through it and the later ones call the graph it ran
(:class:`Capture`); the inductor freezes the weights (a changed weight makes a new graph, :func:`weights_state`),
on CPU makes the Linears its own C++ GEMMs on weights packed once (a copy kept with the graph; round 7: half the
step of MKL's GEMMs), launches the kernels from C++ (``cpp_wrapper``) and keeps the step on one thread
(``compile_backend.INDUCTOR_OPTIONS``).

When it is used, ``compile=`` of ``generate`` (:func:`decide`): ``False`` never; ``True`` whenever it can run;
``"auto"`` (the default) when it pays: a graph for the same model and shapes is already compiled, or the
generation is long enough to repay the warm-up (``AUTO_MIN_TOKENS`` new tokens times rows, per device type).
It cannot run, and the step stays eager, when hooks are attached or a module's class is not ours (``fast.refusal``;
inspection needs the modules), with RoPE's ``"dynamic"`` scaling (its table depends on the positions' values), when
a cache is given to go on from, and when ``torch.compile`` is unavailable (no C++ compiler for the CPU, no Triton for
CUDA) or fails: then one line says so (a warning for ``compile=True``, the log for ``"auto"``). Faults from the bug
zoo are wrapped methods on instances, and they compile too (the graph is made per set of faults), except a fault that
replaces ``attend``: its own softmax may read the static cache's unwritten slots (``mask_after_softmax`` normalises
over every slot before it masks), so such a model decodes eagerly.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import time
import types
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.components import wrapping
from anatomy.components.attention import MultiHeadAttention
from anatomy.components.kv_cache import KVCache, StaticKVCache
from anatomy.generation.compile_backend import Capture, tracing, weights_state
from anatomy.generation.fast import refusal

log = logging.getLogger("anatomy")

COMPILE_CHOICES = ("auto", True, False)
# "auto" compiles a new graph when new tokens x rows reach this: the warm-up over the time a compiled step saves
# per token. CPU: ~20 s of warm-up on a quiet 2-core VM (before freezing), 33-54 s on a busy one (frozen weights
# and the C++ wrapper, the inductor's on-disk cache cold; 5-12 s warm), against ~0.4-0.5 ms saved per token at the
# benchmark size (eager ~2.2x the floor, the compiled step ~1.0-1.1x at 1 thread; the floor ~0.4 ms quiet):
# ~50,000; if the step saves less, auto compiles too early, never wrongly. CUDA (an estimate, no GPU measured
# here): ~40 s against ~3 ms of launches saved per token. docs/performance.md.
# None: never on that device type, unless a graph is already compiled.
AUTO_MIN_TOKENS: dict[str, int | None] = {"cpu": 50_000, "cuda": 10_000}
BACKEND: Any = "inductor"  # a backend's name, or a callable backend (the tests use "aot_eager")

Step = Callable[..., torch.Tensor]


@dataclass
class Stats:
    """What this process compiled: ``compilations`` (graphs made), ``reuses`` (generations that found one),
    ``seconds`` (warm-up of each compilation: the first call, tracing and code generation)."""

    compilations: int = 0
    reuses: int = 0
    seconds: list[float] = field(default_factory=list)


STATS = Stats()
_STEPS: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, ...], Step]] = weakref.WeakKeyDictionary()
_FAILED: weakref.WeakKeyDictionary[nn.Module, set[tuple[Any, ...]]] = weakref.WeakKeyDictionary()


def check_compile(value: Any) -> None:
    if not (value == "auto" or value is True or value is False):
        raise ValueError(f"compile must be 'auto', True or False, got {value!r}")


def bucket(length: int) -> int:
    """The static caches' width for a final length: the next power of two from 64 (up to 2x the slots, so that
    generations of nearby lengths share one compiled graph), past 4096 the next multiple of 1024."""
    if length <= 4096:
        return max(64, 1 << (max(length, 1) - 1).bit_length())
    return -(-length // 1024) * 1024


@functools.cache
def unavailable(kind: str) -> str | None:
    """Why ``torch.compile`` cannot make code for a device of type ``kind`` here (None: it can); asked once per
    process and type (``unavailable.cache_clear()`` asks again)."""
    if not hasattr(torch, "compile"):
        return "this torch has no torch.compile"
    if kind == "cpu":
        names = [os.environ.get("CXX", ""), "c++", "g++", "clang++"]
        if not any(name and shutil.which(name) for name in names):
            return "no C++ compiler found (torch.compile's CPU code needs one: install g++ or set CXX)"
    elif kind == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "Triton is not installed (torch.compile's CUDA code needs it)"
    else:
        return f"the compiled step is made for CPU and CUDA, not {kind}"
    return None


def _blocked(model: nn.Module) -> str | None:
    """Why this model's step cannot be compiled, whatever the length (None: it can)."""
    why = refusal(model)
    if why is not None:
        return why
    for name, m in model.named_modules():
        scaling = m.__dict__.get("scaling")  # a plain attribute (RoPE's); getattr on a module without it raises inside
        if getattr(scaling, "kind", None) == "dynamic":
            return f"{name} uses RoPE's 'dynamic' scaling, whose table depends on the positions' values"
        if isinstance(m, MultiHeadAttention) and "replace" in wrapping.wrapped_steps(m, "attend"):
            return (
                f"{name}.attend is replaced (a bug-zoo fault): a replaced attention may read the static cache's "
                "unwritten slots, so it decodes eagerly"
            )
    return None


def _changes(model: nn.Module) -> tuple[Any, ...]:
    """The methods wrapped on the model's instances (bug-zoo faults) and the kernels chosen: a graph is made for
    one such state (dynamo's guards would otherwise recompile the same graph for each)."""
    out: list[Any] = []
    for name, m in model.named_modules():
        if hasattr(type(m), "_unwrapped"):
            out.append(
                (
                    name,
                    type(m).__qualname__,
                    tuple(sorted((k, id(v)) for k, v in vars(m).items() if k.startswith("_") and isinstance(v, tuple))),
                )
            )
        kernel = m.__dict__.get("_kernel")  # a plain attribute (attention's), read without nn.Module's __getattr__
        if isinstance(kernel, str):
            out.append((name, kernel, repr(getattr(m, "_kernel_args", None))))
    return tuple(out)


def key_of(
    model: nn.Module, b: int, length: int, device: torch.device, memory: int | None, padded: bool
) -> tuple[Any, ...]:
    """What one compiled graph is for: the shapes and kinds of its inputs, the model's faults and kernels
    (dynamo's guards check the rest)."""
    dtype = next(model.parameters()).dtype
    return (b, length, str(device), dtype, memory, padded, BACKEND, _changes(model), weights_state(model))


@dataclass(frozen=True)
class Decision:
    """One generation's choice: ``compile`` or not, ``why`` (one line), and the graph's ``key`` when compiled."""

    compile: bool
    why: str
    key: tuple[Any, ...] | None = None


def decide(
    model: nn.Module,
    choice: Any,
    *,
    rows: int,
    new_tokens: int,
    length: int,
    device: torch.device,
    memory: int | None = None,
    padded: bool = False,
    continued: bool = False,
) -> Decision:
    """Whether one generation decodes through the compiled step (the module docstring's rules): ``rows`` x
    ``new_tokens`` to decode into static caches of ``length`` slots on ``device`` (``memory``: an encoder-decoder
    model's source length; ``padded``: a left-padding mask; ``continued``: going on from a given cache)."""
    if choice is False:
        return Decision(False, "compile=False")
    floor = AUTO_MIN_TOKENS.get(device.type)
    short = floor is None or new_tokens * rows < floor
    too_few = f"{new_tokens} new tokens x {rows} rows on {device.type}: too few to repay the warm-up"
    if choice == "auto" and short and not _STEPS.get(model):  # the common case, decided without a look around
        return Decision(False, too_few)
    blocked = (
        "generate goes on from a given cache (past_key_values): the step stays eager" if continued else None
    ) or _blocked(model)
    if blocked is None:
        blocked = unavailable(device.type)
    key = key_of(model, rows, length, device, memory, padded)
    if blocked is None and key in _FAILED.get(model, set()):
        blocked = "torch.compile failed for this model and shape earlier in this process"
    if blocked is not None:
        return Decision(False, blocked)
    if choice is True:
        return Decision(True, "compile=True", key)
    if key in _STEPS.get(model, {}):
        return Decision(True, "a compiled step for this model and shape is cached", key)
    if short:
        return Decision(False, too_few)
    return Decision(True, f"{new_tokens} new tokens x {rows} rows on {device.type}", key)


def _decoder_only(model: nn.Module, caches: list[Any], ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    logits: torch.Tensor = model(ids, mask, kv_caches=caches, use_cache=True, logits_to_keep=1).logits[:, -1]
    return logits  # (B, V)


def _seq2seq(
    model: nn.Module, caches: list[Any], ids: torch.Tensor, mask: torch.Tensor | None, encoded: torch.Tensor
) -> torch.Tensor:
    out = model(
        attention_mask=mask,
        decoder_input_ids=ids,
        encoder_outputs=encoded,
        kv_caches=caches,
        use_cache=True,
        logits_to_keep=1,
    )
    logits: torch.Tensor = out.logits[:, -1]
    return logits  # (B, V)


def compiled_step(model: nn.Module, key: tuple[Any, ...], seq2seq: bool) -> tuple[Step, bool]:
    """The compiled step for ``model`` and ``key``: ``(step, new)``; ``new`` when it is made now (it compiles on
    its first call). Each is compiled from its own copy of the step's code, so dynamo's per-code cache holds one
    graph per model and shape and no model's graphs evict another's."""
    steps = _STEPS.setdefault(model, {})
    hit = steps.get(key)
    if hit is not None:
        return hit, False
    for old in [k for k in steps if k[-1] != key[-1]]:  # graphs made for other weights (frozen copies of them)
        del steps[old]
    template = _seq2seq if seq2seq else _decoder_only
    code = template.__code__.replace()  # a code object of its own: its own dynamo cache entry
    fn = types.FunctionType(code, template.__globals__, template.__name__)
    capture = Capture(BACKEND)
    step: Step = torch.compile(fn, fullgraph=True, dynamic=False, backend=capture)
    step.capture = capture  # type: ignore[attr-defined]
    steps[key] = step
    return step, True


def forget(model: nn.Module, key: tuple[Any, ...]) -> None:
    """Drop a step whose compilation failed, and remember not to try it again in this process."""
    _STEPS.get(model, {}).pop(key, None)
    _FAILED.setdefault(model, set()).add(key)


class StaticDecoding:
    """The decode steps of one generation on static caches, compiled: made from the caches the prefill filled."""

    def __init__(
        self,
        model: nn.Module,
        caches: list[Any],
        mask: torch.Tensor | None,
        *,
        length: int,
        key: tuple[Any, ...],
        seq2seq: bool,
        encoded: torch.Tensor | None,
    ) -> None:
        self.model, self.key, self.seq2seq, self.encoded = model, key, seq2seq, encoded
        self.caches: list[Any] = [
            (StaticKVCache.from_cache(c[0], length), c[1])
            if isinstance(c, tuple)
            else StaticKVCache.from_cache(c, length)
            for c in caches
        ]
        if seq2seq or mask is None:
            self.mask = mask  # seq2seq: the encoder's mask (the decoder has no padding)
        else:  # the prompt's padding, then every slot to come is a real token (unwritten ones: the slot rule hides)
            self.mask = torch.cat([mask, mask.new_ones(mask.shape[0], length - mask.shape[1])], dim=1)  # (B, L)
        self.step_fn, self.new = compiled_step(model, key, seq2seq)
        if not self.new:
            STATS.reuses += 1
        self.ids: torch.Tensor | None = None  # (B, 1): every step's token, written into one buffer
        self.direct: tuple[Callable[..., Any], tuple[Any, ...]] | None = None  # the graph and its inputs

    def step(self, ids: torch.Tensor) -> torch.Tensor | None:
        """Next logits ``(B, V)`` for ``ids (B, 1)``; None when the compilation failed (the caller goes on
        eagerly from ``eager_caches()``). The first step goes through dynamo, the later ones call the graph it
        ran (:class:`Capture`)."""
        if self.direct is not None and self.ids is not None:
            self.ids.copy_(ids)
            graph, inputs = self.direct
            out: torch.Tensor = graph(*inputs)[0]
            return out
        self.ids = ids.clone()
        args: tuple[Any, ...] = (self.model, self.caches, self.ids, self.mask)
        if self.seq2seq:
            args += (self.encoded,)
        capture: Capture = self.step_fn.capture  # type: ignore[attr-defined]
        if not self.new:
            capture.last = None
            logits = self.step_fn(*args)
            self.direct, capture.last = capture.last, None  # the caches are this generation's: not kept there
            return logits
        start = time.perf_counter()
        cursors = [c[0].cursor.clone() if isinstance(c, tuple) else c.cursor.clone() for c in self.caches]
        try:
            with tracing(self.key):
                logits = self.step_fn(*args)
        except Exception as error:  # noqa: BLE001 - any failure of the compiler: fall back, say it in one line
            for c, cursor in zip(self.caches, cursors):
                (c[0] if isinstance(c, tuple) else c).cursor.copy_(cursor)  # a partial trace may have advanced it
            forget(self.model, self.key)
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            warnings.warn(f"torch.compile failed, the decode step runs eagerly: {first[:300]}", stacklevel=4)
            return None
        self.new = False
        self.direct, capture.last = capture.last, None
        STATS.compilations += 1
        STATS.seconds.append(time.perf_counter() - start)
        log.info("anatomy: compiled the decode step in %.1f s (%s)", STATS.seconds[-1], self.key)
        return logits

    def reorder(self, rows: torch.Tensor) -> None:
        for layer in self.caches:
            for cache in layer if isinstance(layer, tuple) else (layer,):
                cache.batch_select(rows)

    def eager_caches(self) -> list[Any]:
        """The caches as ordinary ``KVCache`` s (the written slots), for the eager steps or the caller."""

        def back(c: Any) -> KVCache:
            return c.to_cache() if isinstance(c, StaticKVCache) else c

        return [(back(c[0]), c[1]) if isinstance(c, tuple) else back(c) for c in self.caches]
