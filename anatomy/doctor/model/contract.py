"""The model's forward contract, found by calling it: ``forward(ids)`` returns logits ``(B, T, V)`` (a tensor, the
first of a tuple, a dict's or an object's ``logits``), and with targets (keyword ``targets``/``labels``/``y``, or
the second positional argument) also a scalar loss. Every forward runs under the time limit and a fixed seed, so a
dropout left on draws the same mask each time (``probes`` vary the seed on purpose)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract.precision import floor_for, islands
from anatomy.doctor.loading.kernels import reference_kernels
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.doctor.loading.subject import CheckError, CheckTimeout, _quiet, one_line
from anatomy.doctor.model.build import Sizes
from anatomy.tracing.steps import call_learner

__anatomy_transparent__ = True

TARGET_NAMES = ("targets", "labels", "y", "target", "tgt", "label", "targets_ids", "target_ids")
NOT_TARGETS = ("mask", "attention_mask", "attn_mask", "padding_mask", "start_pos", "pos", "cache", "kv_cache")
BATCH = 2
SEQ = 7


class ForwardError(Exception):
    """One forward of the learner's model raised (the learner's own error, said in one line)."""


@dataclass
class LM:
    """The learner's model and how to call it."""

    module: nn.Module
    label: str
    sizes: Sizes
    timeout: float | None
    seed: int = 0
    target_arg: str | None = None  # a keyword name, "" for the second positional argument, None: takes none
    returns: str = "logits"  # "logits" | "(logits, loss)" | "dict" | "object"
    notes: list[dict[str, str]] = field(default_factory=list)

    full_length_only: bool = False  # forward fails below block_size: the probes run at block_size
    fixed: dict[str, Any] = field(default_factory=dict)  # required arguments given a fixed value (start_pos=0)
    last_only: bool = False  # forward(ids) gives the last position's logits only (nanoGPT): read them with targets
    loss_kept: str | None = None  # the loss is not returned but kept on the model under this name (llama2.c)
    labels_inside: bool = False  # target_arg is a flag (return_loss=True): the loss is made from the ids themselves
    loss_only: bool = False  # forward with targets returns the loss alone (a scalar), no logits
    source_file: str | None = None  # the file checked (FILE.py:CLASS), where its caller's code may be
    dtypes: set[torch.dtype] = field(default_factory=set)  # the floating dtypes its forwards computed in
    _inside: int = 0  # running() entered and not left: a nested one adds nothing
    dtype: torch.dtype = torch.float64  # the dtype the model runs in (float32 for one that refuses float64)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Around every run of the learner's code: the reference attention kernel (the same on every CPU,
        ``loading/kernels.py``), float64 as the default dtype (a mask made without a dtype follows the model's, as
        it follows the training dtype; float32 for a model run in float32), an op that fails on mixed floating
        dtypes (a model that casts to a dtype
        of its own, ``x.to(cfg["dtype"])``) run again in float64; the dtypes it computed in are noted. A probe that
        logs the forward's ops enters it outside its log (``op_log``): the dtype watcher's own tensor reads then stay
        out of the log."""
        if self._inside:
            yield
            return
        self._inside += 1
        try:
            with reference_kernels(), islands(self.dtype) as mode:
                try:
                    yield
                finally:
                    self.dtypes |= mode.seen
        finally:
            self._inside -= 1

    def tol(self, base: float) -> float:
        """``base`` (a relative tolerance for float64), raised to the precision of the narrowest floating dtype the
        model computed in (a model that casts to float32 somewhere rounds at float32's precision)."""
        return max(base, floor_for(self.dtypes))

    @property
    def short(self) -> int:
        """A length below block_size: 7, or less for a model whose block_size is no longer."""
        return max(2, min(SEQ, self.sizes.block_size - 1))

    @property
    def seq(self) -> int:
        """The probes' length: :attr:`short`, or block_size for a model that takes nothing shorter."""
        return self.sizes.block_size if self.full_length_only else self.short

    def ids(self, t: int | None = None, seed: int = 1, b: int = BATCH) -> torch.Tensor:
        t = self.seq if t is None else t
        gen = torch.Generator().manual_seed(self.seed + seed)
        return torch.randint(0, self.sizes.vocab_size, (b, t), generator=gen)

    def forward(self, ids: torch.Tensor, *, seed: int = 0, **kwargs: Any) -> Any:
        """The raw output of ``module(ids, **kwargs)`` under the time limit, with a fixed RNG seed."""
        step = (
            f"{self.label}: forward(ids) on ids of shape {tuple(ids.shape)}",
            f"{self.label}：对形状为 {tuple(ids.shape)} 的 ids 调用 forward 时",
        )
        args: tuple[Any, ...] = ()
        kwargs = {**self.fixed, **kwargs}
        if "" in kwargs:  # the targets, positionally
            args = (kwargs.pop(""),)
        try:
            with (
                _quiet(),
                seeded(self.seed + 1000 + seed),
                guard(self.timeout, lambda: step),
                torch.no_grad(),
                self.running(),
            ):
                return call_learner(self.module, ids, *args, **kwargs)
        except Hung as hung:
            raise CheckTimeout.from_hung(hung) from None
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the learner's forward
            raise ForwardError(one_line(err)) from err

    def logits(self, ids: torch.Tensor, *, seed: int = 0, **kwargs: Any) -> torch.Tensor:
        if self.last_only and self.target_arg is not None and self.target_arg not in kwargs:
            kwargs[self.target_arg] = self.ids(ids.shape[1], seed=2, b=ids.shape[0])
        out = self.forward(ids, seed=seed, **kwargs)
        found = read_logits(out, ids.shape[0], ids.shape[1], self.sizes.vocab_size)
        if found is None:
            raise ForwardError(f"returned {describe(out)}, not logits of shape (B, T, V)")
        return found

    def with_targets(self, ids: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(logits, loss) of a call with ``targets`` (the loss None when it returns none)."""
        assert self.target_arg is not None
        out, loss = self.forward_loss(ids, self.target_arg, targets)
        if self.labels_inside or (self.loss_only and not self.last_only):  # the call with targets returns the
            out = self.forward(ids)  # loss alone (nanochat; DALLE's return_loss=True): the logits of a plain call
        logits = read_logits(out, ids.shape[0], ids.shape[1], self.sizes.vocab_size)
        if logits is None:
            raise ForwardError(f"with targets it returned {describe(out)}, not logits")
        return logits, loss

    def forward_loss(self, ids: torch.Tensor, name: str, targets: torch.Tensor) -> tuple[Any, torch.Tensor | None]:
        """The raw output of a call with ``targets`` under ``name``, and the loss it made: returned (``(logits,
        loss)``, ``out.loss``, ``out["last_loss"]``...) or kept on the model during the call (llama2.c's
        ``self.last_loss``); a per-token loss (``reduction="none"``) read as the mean of its scored tokens. ``name``
        a flag (``return_loss``): set to True, the model makes its labels from ``ids`` (``targets`` unused)."""
        before = {n: getattr(self.module, n, None) for n in LOSS_ATTRS}
        extra: dict[str, Any] = {name: True if name in LOSS_FLAGS else targets}
        out = self.forward(ids, **extra)
        loss = read_loss(out, ids.numel())
        self.loss_only = isinstance(out, torch.Tensor) and out.dim() == 0
        if loss is None:
            for n in LOSS_ATTRS:
                kept = getattr(self.module, n, None)
                if isinstance(kept, torch.Tensor) and kept is not before[n]:
                    loss = scalar_loss(kept, ids.numel())
                    if loss is not None:
                        self.loss_kept = n
                        break
        return out, loss


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _candidates(out: Any) -> list[Any]:
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return list(out)
    if isinstance(out, dict):
        return [out.get("logits"), *out.values()]
    return [getattr(out, "logits", None)]


def read_logits(out: Any, b: int, t: int, v: int) -> torch.Tensor | None:
    """The logits ``(B, T, V)`` in what forward returned (``(B*T, V)`` read back as ``(B, T, V)``), or None."""
    for c in _candidates(out):
        if not isinstance(c, torch.Tensor) or not c.is_floating_point():
            continue
        if tuple(c.shape) == (b, t, v):
            return c
        if tuple(c.shape) == (b * t, v):
            return c.view(b, t, v)
    return None


LOSS_ATTRS = ("loss", "last_loss")  # where a model keeps its loss: in what it returns, or on itself
LOSS_FLAGS = (
    "return_loss",
)  # forward(ids, return_loss=True) -> the loss of ids against ids shifted (DALLE, x-transformers)


def read_loss(out: Any, n_tokens: int | None = None) -> torch.Tensor | None:
    """The loss in what forward returned: a scalar (the second of a tuple, ``out.loss``, ``out["last_loss"]``),
    or a per-token loss of ``n_tokens`` (or one fewer per row) entries read by :func:`scalar_loss`."""
    if isinstance(out, torch.Tensor):
        found = [out if out.dim() == 0 else None]
    elif isinstance(out, dict):
        found = [out.get(n) for n in LOSS_ATTRS]
    elif isinstance(out, (tuple, list)):
        found = [next((c for c in out[1:] if isinstance(c, torch.Tensor) and c.dim() == 0), None)]
    else:
        found = [getattr(out, n, None) for n in LOSS_ATTRS]
    for loss in found:
        if isinstance(loss, torch.Tensor) and (got := scalar_loss(loss, n_tokens)) is not None:
            return got
    return None


def scalar_loss(loss: torch.Tensor, n_tokens: int | None) -> torch.Tensor | None:
    """A scalar loss as it is, a per-token one (``reduction="none"``: one entry per scored position) as the mean
    of its nonzero entries: the tokens it ignores (``ignore_index``) are exactly 0, a scored token's cross-entropy
    never is. None for anything else."""
    if not loss.is_floating_point():
        return None
    if loss.dim() == 0:
        return loss
    if n_tokens is None or loss.numel() > n_tokens or loss.numel() < n_tokens // 2:
        return None
    scored = loss.reshape(-1)[loss.reshape(-1) != 0]
    return scored.mean() if scored.numel() else None


def describe(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return f"a tensor of shape {tuple(out.shape)}"
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of {len(out)} ({', '.join(describe(o) for o in out[:3])})"
    return type(out).__name__


def _returns(out: Any) -> str:
    if isinstance(out, torch.Tensor):
        return "logits"
    if isinstance(out, (tuple, list)):
        return "(logits, loss)" if len(out) == 2 else f"({', '.join(['logits'] + ['...'] * (len(out) - 1))})"
    return "dict" if isinstance(out, dict) else "object with .logits"


def first_call(lm: LM) -> torch.Tensor:
    """The plain logits of ``forward(ids)``; a :class:`CheckError` saying what was expected when it fails."""
    ids = lm.ids()
    lm.fixed = _required_starts(lm.module)
    try:
        out = lm.forward(ids)
    except ForwardError as err:
        raise CheckError(
            f"{lm.label}: forward(ids) on ids of shape (B, T) = {tuple(ids.shape)} raised {err}; expected it to "
            f"return logits (B, T, V) = {(BATCH, lm.seq, lm.sizes.vocab_size)} or (logits, loss)"
        ) from None
    logits = read_logits(out, BATCH, lm.seq, lm.sizes.vocab_size)
    if logits is None:
        logits = _cropped(lm, out)
    lm.returns = _returns(out)
    if logits is None and read_logits(out, BATCH, 1, lm.sizes.vocab_size) is not None:
        logits = _last_only(lm, ids)
    if logits is None:
        raise CheckError(
            f"{lm.label}: forward(ids) on ids of shape {tuple(ids.shape)} returned {describe(out)}; expected logits "
            f"(B, T, V) = {(BATCH, lm.seq, lm.sizes.vocab_size)} (vocab_size={lm.sizes.vocab_size})"
        )
    if lm.target_arg is None:
        lm.target_arg = _target_arg(lm, ids)
    if lm.loss_kept is not None:
        lm.notes.append(
            {
                "en": f"forward with targets keeps its loss in self.{lm.loss_kept} (not returned): read from there",
                "zh": f"传入目标时 forward 把损失存在 self.{lm.loss_kept} 里（不返回）：从那里读取",
            }
        )
    return logits


def _cropped(lm: LM, out: Any) -> torch.Tensor | None:
    """Logits narrower than the embedding's rows: a vocabulary padded for speed and cropped in forward (nanochat's
    ``logits[..., :vocab_size]``). The vocabulary is then the logits' width (ids drawn below it)."""
    for c in _candidates(out):
        if not isinstance(c, torch.Tensor) or not c.is_floating_point() or c.dim() != 3:
            continue
        b, t, v = c.shape
        if (b, t) == (BATCH, lm.seq) and 1 < v < lm.sizes.vocab_size and v != lm.sizes.d_model:
            padded = lm.sizes.vocab_size
            lm.sizes = dataclasses.replace(lm.sizes, vocab_size=v)
            lm.notes.append(
                {
                    "en": f"the embedding has {padded} rows and the logits {v} columns (a vocabulary padded and "
                    f"cropped): vocab_size = {v}",
                    "zh": f"嵌入有 {padded} 行而 logits 有 {v} 列（词表经过填充再裁剪）：vocab_size = {v}",
                }
            )
            return c
    return None


START_NAMES = ("start_pos", "pos", "offset", "position", "past_length", "past_len", "start", "start_position")


def _required_starts(module: nn.Module) -> dict[str, Any]:
    """A forward that requires a start position (a KV-cache model's ``start_pos``) gets 0: a forward from the start."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        return {}
    return {p.name: 0 for p in params if p.default is inspect.Parameter.empty and p.name in START_NAMES}


def _last_only(lm: LM, ids: torch.Tensor) -> torch.Tensor | None:
    """Logits of the last position only without targets (nanoGPT's inference shortcut): every position's with them."""
    lm.target_arg = _target_arg(lm, ids)
    if lm.target_arg is None or lm.labels_inside:
        return None
    lm.last_only = True
    lm.notes.append(
        {
            "en": "forward(ids) returns the last position's logits only; every position's are read with targets",
            "zh": "forward(ids) 只返回最后一个位置的 logits；各位置的 logits 通过传入目标读取",
        }
    )
    try:
        return lm.logits(ids)
    except ForwardError:
        return None


def _target_arg(lm: LM, ids: torch.Tensor) -> str | None:
    """The name under which forward takes targets (``""``: positionally), checked by a call that returns a loss."""
    try:
        params = list(inspect.signature(lm.module.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    names = [p.name for p in params]
    tries = [n for n in TARGET_NAMES if n in names]
    positional = [
        p for p in params if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if len(positional) >= 2 and positional[1].name not in tries and positional[1].name.lower() not in NOT_TARGETS:
        tries.append("")
    targets = lm.ids(seed=2)
    for name in tries:
        try:
            _, loss = lm.forward_loss(ids, name, targets)
        except ForwardError:
            continue
        if loss is not None:
            return name
    for flag in (f for f in LOSS_FLAGS if f in names):
        try:
            _, loss = lm.forward_loss(ids, flag, ids)
        except ForwardError:
            continue
        if loss is not None:
            lm.labels_inside = True
            return flag
    return None
