"""The learner's module as the doctor sees it: loaded from a file, built, called, and its conventions discovered.

Loading never writes next to the learner's file: the source is executed from its path with
``sys.dont_write_bytecode`` set, so no ``__pycache__`` appears, and the file is only ever read.

The contract (docs/doctor.md): the class is built as ``CLASS(d_model, n_heads)`` (or ``FUNC(d_model, n_heads)``
with ``--factory``) and called as ``forward(x)`` / ``forward(x, mask)`` with ``x: (B, T, D)``; it returns ``out``
or ``(out, weights)``. What the mask means (bool keep, bool ignore, additive float, 0/1 numbers) and its shape are
*discovered*: each candidate format must leave the output unchanged when it hides nothing and must hide what it
says it hides; the best candidate is the one whose hidden keys leak least.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from anatomy.doctor.contract.precision import islands
from anatomy.doctor.loading.feature_maps import feature_maps, refusal
from anatomy.doctor.loading.kernels import reference_kernels
from anatomy.doctor.loading.limits import Hung, guard
from anatomy.tracing.steps import call_learner

Output = tuple[torch.Tensor, torch.Tensor | None]  # what a forward returned: out (B, T, D), weights or None


class CheckError(ValueError):
    """The learner's module could not be loaded, built or called: one line, exit code 2."""


class CheckTimeout(CheckError):
    """A step of the learner's code (importing its file, building the module, one forward) ran past the time limit.

    ``str()`` is the English line; ``en``/``zh`` say which step hung and the limit, ``step_en``/``step_zh`` the
    step alone, ``limit`` the limit in seconds."""

    def __init__(self, step_en: str, step_zh: str, limit: float):
        self.step_en, self.step_zh, self.limit = step_en, step_zh, limit
        self.en = (
            f"{step_en} did not finish within the time limit of {limit:g} s (--timeout), so the check stopped "
            "there: look for a loop that never ends, or raise --timeout if the module is only slow"
        )
        self.zh = (
            f"{step_zh}没有在 {limit:g} 秒的时限（--timeout）内结束，检查到此停止：请找一找永远不会结束的循环；"
            "如果模块只是慢，请调大 --timeout"
        )
        super().__init__(self.en)

    @classmethod
    def from_hung(cls, hung: Hung) -> CheckTimeout:
        en, zh = hung.step.describe()
        return cls(en, zh, hung.step.limit)


class CallError(Exception):
    """One call of the learner's module failed (the doctor decides whether that is fatal).

    ``raised`` tells an exception from the learner's code (message "RuntimeError: ...") from a result of the
    wrong type (message "returned dict")."""

    def __init__(self, message: str, *, raised: bool = True):
        super().__init__(message)
        self.raised = raised


def one_line(err: BaseException, limit: int = 240) -> str:
    text = " ".join(str(err).split())
    text = f"{type(err).__name__}: {text}" if text else type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The learner's prints and warnings must not garble the report (or the JSON)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


# --- calling --------------------------------------------------------------------------------------------------

QKV_NAMES = ({"query", "key", "value"}, {"q", "k", "v"}, {"queries", "keys", "values"}, {"x_q", "x_k", "x_v"})
MASK_NAMES = (
    "mask",
    "attn_mask",
    "attention_mask",
    "key_padding_mask",
    "src_mask",
    "padding_mask",
    "pad_mask",
    "valid_lens",
)
MASKISH = ("mask", "pad", "keep", "valid", "len", "attend", "visible")  # pieces of a name that says "mask"


class ModuleExited(CheckError):
    """The learner's code ended the process itself (``sys.exit``, ``exit()``, ``os._exit``): never a pass."""

    def __init__(self, where: str, code: object, where_zh: str | None = None):
        self.code = code
        self.en = (
            f"{where} called sys.exit({code!r}) (SystemExit): the module ended the process instead of "
            "returning, so nothing could be checked; remove the exit (a debugging leftover?)"
        )
        self.zh = (
            f"{where_zh or where}调用了 sys.exit({code!r})（SystemExit）：模块结束了进程而不是返回结果，"
            "因此什么也没能检查；请删掉这个退出（调试时留下的？）"
        )
        super().__init__(self.en)


def _ordered_qkv(
    params: list[inspect.Parameter], kinds: tuple[inspect._ParameterKind, ...]
) -> tuple[str, str, str] | None:
    """The names of the q/k/v parameters among ``params`` (in q, k, v order), when they are named so."""
    names = [p.name for p in params if p.kind in kinds]
    for group in QKV_NAMES:
        if group <= set(names):
            q, k, v = sorted(group, key=lambda n: "qkv".index(n.removeprefix("x_")[0]))  # every group holds three
            return q, k, v
    return None


@dataclass
class CheckedModule:
    """The module under check and how to call it: ``run(x, mask)`` → ``(out, weights or None)``, ``x`` always
    (B, T, D).

    The contract is read from ``forward``'s signature (:meth:`inspect`) and completed on the first calls
    (``check.py``): a sequence-first module gets ``x`` transposed to (T, B, D) and its output transposed back
    (``seq_first``); a module whose ``mask=None`` default fails gets an all-visible mask wherever the doctor means
    no mask (``no_mask``); ``forward(x, *args)`` is tried with a mask only tentatively (``mask_tentative``)."""

    module: nn.Module
    label: str
    call: str  # "forward(x)", "forward(x, mask)", "forward(x, mask=mask)", "forward(x, x, x, mask)"
    qkv: bool = False
    mask_kw: str | None = None  # keyword-only mask parameter
    takes_mask: bool = False
    mask_required: bool = False
    fields: dict[str, Any] = field(default_factory=dict)  # what the first calls found: no_mask_format, qkv_roles
    timeout: float | None = None  # seconds one forward may take (None: no limit)
    stage: tuple[str, str] = ("the first call", "首次调用")  # what the doctor is doing, for the timeout message
    qkv_kw: tuple[str, str, str] | None = None  # keyword-only q/k/v names: forward(query=x, key=x, value=x)
    seq_first: bool = False  # the module takes and returns (T, B, D)
    no_mask: Callable[[torch.Tensor], torch.Tensor] | None = None  # the all-visible mask that stands for "none"
    mask_tentative: bool = False  # forward(x, *args): a mask is tried, kept only when it changes something
    packed: bool = False  # forward(inputs) with inputs = (x, mask): blocks written for nn.Sequential
    notes: list[dict[str, str]] = field(default_factory=list)  # what the doctor adapted: {"en": ..., "zh": ...}
    ignored_returns: list[str] = field(default_factory=list)  # returned values not taken as weights
    seen_dtypes: set[torch.dtype] = field(
        default_factory=set
    )  # floating dtypes the module computed in on float64 inputs
    promoted: int = 0  # ops rerun in float64 because a float32 island met float64 tensors (precision.py)
    ran: bool = False  # one call has returned: a later failure is the probe's, not the contract's

    @classmethod
    def inspect(cls, module: nn.Module, label: str) -> CheckedModule:
        try:
            params = list(inspect.signature(module.forward).parameters.values())
        except (TypeError, ValueError):
            params = []
        P = inspect.Parameter
        positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
        required = [p for p in positional if p.default is P.empty]
        kw_masks = [p for p in params if p.kind == P.KEYWORD_ONLY and p.name in MASK_NAMES]
        kw_qkv = _ordered_qkv(params, (P.KEYWORD_ONLY,))
        if kw_qkv and not required:  # forward(self, *, query, key, value, attn_mask=None)
            q, k, v = kw_qkv
            mask = kw_masks[0] if kw_masks else None
            call = f"forward({q}=x, {k}=x, {v}=x" + (f", {mask.name}=mask)" if mask else ")")
            return cls(
                module,
                label,
                call,
                qkv_kw=kw_qkv,
                mask_kw=mask.name if mask else None,
                takes_mask=mask is not None,
                mask_required=mask is not None and mask.default is P.empty,
            )
        names = {p.name for p in positional[:3]}
        if len(required) >= 3 and (names in QKV_NAMES or not names & set(MASK_NAMES)):
            # three tensors first: query, key and value in some order under any names (forward(values, keys, query,
            # mask), forward(Q, K, V, attn_mask)); self-attention passes x to all three, the roles are found later
            mask = positional[3] if len(positional) > 3 else None
            return cls(
                module,
                label,
                "forward(x, x, x" + (f", {mask.name})" if mask else ")"),
                qkv=True,
                takes_mask=mask is not None,
                mask_required=mask is not None and mask.default is P.empty,
            )
        named_mask = [p for p in positional[1:] if p.name in MASK_NAMES]
        if (
            len(positional) >= 2
            and named_mask
            and named_mask[0] is not positional[1]
            and all(p.default is not P.empty for p in positional[1 : positional.index(named_mask[0])])
        ):
            mask = named_mask[0]  # forward(x, context=None, mask=None): the mask by its name, context left alone
            return cls(
                module,
                label,
                f"forward(x, {mask.name}=mask)",
                mask_kw=mask.name,
                takes_mask=True,
                mask_required=mask.default is P.empty,
            )
        if len(positional) >= 2:
            mask = positional[1]
            # an optional second argument whose name says nothing of a mask (PatchTST's `prev`, the previous layer's
            # scores) is tried as one only tentatively: kept when some mask passed there changes the output
            vague = mask.default is not P.empty and not any(w in mask.name.lower() for w in MASKISH)
            return cls(
                module,
                label,
                f"forward(x, {mask.name})",
                takes_mask=True,
                mask_required=mask.default is P.empty,
                mask_tentative=vague,
            )
        if kw_masks:
            return cls(
                module,
                label,
                f"forward(x, {kw_masks[0].name}=mask)",
                mask_kw=kw_masks[0].name,
                takes_mask=True,
                mask_required=kw_masks[0].default is P.empty,
            )
        if any(p.kind == P.VAR_POSITIONAL for p in params):
            return cls(module, label, "forward(x, *args)", takes_mask=True, mask_tentative=True)
        return cls(module, label, "forward(x)")

    def batch_first(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor seen inside the module (a hook) in the doctor's ``(B, T, D)`` layout."""
        if self.seq_first and isinstance(t, torch.Tensor) and t.dim() == 3:
            return t.transpose(0, 1)
        return t

    def note(self, en: str, zh: str) -> None:
        if {"en": en, "zh": zh} not in self.notes:
            self.notes.append({"en": en, "zh": zh})

    def run(self, x: torch.Tensor, mask: torch.Tensor | None = None, *, module: nn.Module | None = None) -> Output:
        module = self.module if module is None else module
        b, t = x.shape[:2]
        x = x.clone()  # a forward that writes into its input (x += ...) must not change the doctor's inputs
        if mask is None and self.no_mask is not None:
            mask = self.no_mask(x)
        mask = None if mask is None else mask.clone()
        if self.seq_first:
            x = x.transpose(0, 1)  # (T, B, D)
        args: list[object] = [x, x, x] if self.qkv else [] if self.qkv_kw else [x]
        kwargs: dict[str, torch.Tensor | None] = dict.fromkeys(self.qkv_kw, x) if self.qkv_kw else {}
        if self.packed:  # one tuple in, as nn.Sequential passes it from block to block
            args = [(x, mask)]
        elif mask is not None or self.mask_required:
            if self.mask_kw:
                kwargs[self.mask_kw] = mask
            else:
                args.append(mask)
        try:
            with (
                torch.no_grad(),
                _quiet(),
                guard(self.timeout, lambda: self._describe(x, mask, module)),
                islands(x.dtype) as watched,
                reference_kernels(),
            ):
                result = call_learner(module, *args, **kwargs)
            if module is self.module and x.dtype == torch.float64:
                self.seen_dtypes |= watched.seen
                self.promoted += watched.promoted
        except Hung as hung:
            raise CheckTimeout.from_hung(hung) from None
        except SystemExit as err:
            en, zh = self._describe(x, mask, module)
            raise ModuleExited(en.rstrip(","), err.code, zh) from None
        except Exception as err:  # noqa: BLE001 - whatever the learner's code raises
            if not self.ran and module is self.module and (why := feature_maps(module)) is not None:
                raise CheckError(refusal(self.label, why, tuple(x.shape), one_line(err))) from None
            raise CallError(one_line(err)) from None
        self.ran = True
        out, second = parse_output(result)
        if self.seq_first and out.dim() == 3:
            out = out.transpose(0, 1)  # (B, T, D)
        if second is not None and not looks_like_weights(second, b, t):
            what = str(tuple(second.shape))
            if what not in self.ignored_returns:
                self.ignored_returns.append(what)
            second = None
        return out, second

    def _describe(self, x: torch.Tensor, mask: torch.Tensor | None, module: nn.Module) -> tuple[str, str]:
        """The call that hung, in English and Chinese: which forward, on what, during which step of the check."""
        call = (
            self.call
            if mask is not None or self.mask_required
            else "forward(x, x, x)"
            if self.qkv
            else ("forward(query=x, key=x, value=x)" if self.qkv_kw else "forward(x)")
        )
        m = None if mask is None else tuple(mask.shape)
        what = f"x of shape {tuple(x.shape)}" + (f" and a mask of shape {m}" if m else "")
        what_zh = f"x 形状 {tuple(x.shape)}" + (f"，mask 形状 {m}" if m else "")
        dtype = str(x.dtype).replace("torch.", "")
        copy_en, copy_zh = ("", "") if module is self.module else (f" of a {dtype} copy", f"（{dtype} 副本）")
        return (
            f"{self.label}: {call}{copy_en} on {what}, during {self.stage[0]},",
            f"{self.label}：{_zh_join('在', self.stage[1], '阶段')}，{call}{copy_zh}（{what_zh}）",
        )


def looks_like_weights(w: torch.Tensor, b: int, t: int) -> bool:
    """A second returned tensor is read as attention weights only when it can be: ``(B, ..., T', T')`` with values
    in [0, 1] (a cache of keys and values, or a recurrent state, is not)."""
    if w.dim() not in (3, 4) or w.shape[0] != b or w.shape[-1] != w.shape[-2] or not w.is_floating_point():
        return False
    finite = w[torch.isfinite(w)]
    return finite.numel() == 0 or bool(((finite >= 0) & (finite <= 1 + 1e-9)).all())


def _zh_join(*parts: str) -> str:
    """Join Chinese phrases, with a space where Chinese meets a Latin word (``在 mask 格式探测阶段``)."""
    out = ""
    for part in parts:
        if out and part and (out[-1].isascii() and out[-1].isalnum()) != (part[0].isascii() and part[0].isalnum()):
            out += " "
        out += part
    return out


def parse_output(result: object) -> Output:
    if isinstance(result, torch.Tensor):
        return result, None
    if isinstance(result, (tuple, list)) and result and isinstance(result[0], torch.Tensor):
        weights = result[1] if len(result) > 1 and isinstance(result[1], torch.Tensor) else None
        return result[0], weights
    raise CallError(f"returned {type(result).__name__}", raised=False)
