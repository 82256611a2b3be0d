"""The call contract, completed on the learner's first calls (``check.py`` runs these before any probe).

What the signature cannot say is found by calling: ``nn.LazyLinear`` (and every lazy module) gets one warm-up
forward before its parameters are read; ``mask=None`` (a default, or what the doctor passes for "no mask") whose
code then fails (``mask.repeat(...)``) is retried with an all-visible mask, which then stands for "no mask" in
every later call, and the report says so; a sequence-first module (``(T, B, D)``, the default of
``torch.nn.MultiheadAttention``, fairseq) is detected by batch independence: fed ``(B, T, D)`` it mixes the
batch's sequences, fed its own layout it does not. ``--seq-first`` (``seq_first=True``) skips the detection.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn

from anatomy.doctor.contract.masks import PAD_LAYOUTS, SENSES, MaskFormat, max_diff
from anatomy.doctor.contract.precision import tol
from anatomy.doctor.loading.subject import CallError, CheckedModule
from anatomy.tracing.steps import call_learner


def is_lazy(module: nn.Module) -> list[str]:
    """Parameters (and buffers) of ``module`` not materialised yet (``nn.LazyLinear`` before its first forward)."""
    lazy = (nn.parameter.UninitializedParameter, nn.parameter.UninitializedBuffer)
    return [n for n, p in (*module.named_parameters(), *module.named_buffers()) if isinstance(p, lazy)]


def first_call(subject: CheckedModule, x: torch.Tensor) -> None:
    """Call the module once as the signature says; when that fails and it takes a mask, retry with an
    all-visible mask in each format until one runs. Lazy parameters are materialised by this call (in ``x``'s
    dtype). Raises :class:`CallError` (the first error) when nothing runs."""
    lazy = is_lazy(subject.module)
    try:
        subject.run(x)
    except CallError as err:
        if not subject.takes_mask and not _packs(subject):
            raise
        fmt = _all_visible_format(subject, x)
        if fmt is None:
            subject.no_mask = None
            if subject.packed:  # not a (x, mask) tuple either: the first error stands
                subject.packed = subject.takes_mask = subject.mask_required = False
                subject.call = "forward(x)"
            raise err from None
        if subject.packed:
            subject.note(
                "forward(inputs) failed on a tensor and runs on a tuple (x, mask), as nn.Sequential passes it from "
                "block to block: every call gets (x, mask), and the returned tuple's first item is the output",
                "forward(inputs) 传入张量时报错，传入元组 (x, mask) 时能运行（nn.Sequential 在块之间就是这样传的）："
                "每次调用都传入 (x, mask)，返回元组的第一项作为输出",
            )
        sense, layout = fmt.sense, fmt.layout
        subject.no_mask = lambda x, fmt=fmt: fmt.make(
            torch.ones(x.shape[0], x.shape[1], x.shape[1], dtype=torch.bool), x.dtype
        )
        subject.mask_required = True
        subject.fields["no_mask_format"] = {"sense": sense, "layout": layout}
        subject.note(
            f"forward with mask=None raised {err}; every call without a mask got an all-visible "
            f"mask instead ({sense}, {layout})",
            f"传入 mask=None 时 forward 报错（{err}）；"
            f"凡是不需要 mask 的调用都改为传入全部可见的 mask（{sense}，{layout}）",
        )
    if subject.qkv:
        _qkv_roles(subject, x)
    if lazy:
        subject.note(
            f"{len(lazy)} lazy parameter(s) ({', '.join(lazy[:4])}{' ...' if len(lazy) > 4 else ''}) were "
            "materialised by one warm-up forward before the doctor read them",
            f"{len(lazy)} 个惰性参数（{', '.join(lazy[:4])}{' ...' if len(lazy) > 4 else ''}）"
            "在读取前先经过一次预热 forward 完成初始化",
        )


def _packs(subject: CheckedModule) -> bool:
    """``forward(inputs)`` with one positional parameter that failed on a tensor: tried as ``forward((x, mask))``
    (``x, mask = inputs``), the tuple blocks of an ``nn.Sequential`` stack. Leaves the subject set for it."""
    try:
        params = list(inspect.signature(subject.module.forward).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if subject.call != "forward(x)" or len(positional) != 1 or subject.qkv or subject.qkv_kw:
        return False
    subject.packed = subject.takes_mask = subject.mask_required = True
    subject.call = f"forward({positional[0].name}=(x, mask))"
    return True


def _all_visible_format(subject: CheckedModule, x: torch.Tensor) -> MaskFormat | None:
    """The mask format that stands for "no mask" when ``mask=None`` fails, settled from evidence, never assumed:
    among the formats the module runs with, one where hiding the last key makes every other output independent of
    the last token (an all-True mask means "all padding" to a module whose True is padding: the wrong sense hides
    everything and, told to hide one key, shows only that one). The first format that runs when none shows it."""
    b, t, _ = x.shape
    keep_all = torch.ones(b, t, t, dtype=torch.bool)
    keep_hide = keep_all.clone()
    keep_hide[..., -1] = False
    x2 = x.clone()
    x2[:, -1] += torch.randn(b, x.shape[-1], generator=torch.Generator().manual_seed(29), dtype=x.dtype)
    first = None
    for layout in PAD_LAYOUTS:
        for sense in SENSES:
            fmt = MaskFormat(sense, layout)
            try:
                out, _ = subject.run(x, fmt.make(keep_all, x.dtype))
                if tuple(out.shape) != tuple(x.shape):
                    continue
                first = first or fmt
                hid, _ = subject.run(x, fmt.make(keep_hide, x.dtype))
                hid2, _ = subject.run(x2, fmt.make(keep_hide, x.dtype))
            except CallError:
                continue
            if (
                tuple(hid.shape) == tuple(x.shape)
                and max_diff(hid[:, :-1], hid2[:, :-1]) <= tol(1e-9) * max(1.0, float(hid.abs().nan_to_num(0).max()))
                and max_diff(hid, out) > 0
            ):
                return fmt
    return first


def _qkv_roles(subject: CheckedModule, x: torch.Tensor) -> None:
    """Which of the three tensor arguments is the query, found by behaviour: the output has as many tokens as the
    query (one argument made 2 tokens longer, the other two as they are). Stored in ``fields["qkv_roles"]``."""
    b, t, d = x.shape
    longer = torch.cat([x, x[:, :2]], 1)
    extra = [subject.no_mask(x)] if subject.no_mask else [None] if subject.mask_required else []
    for i in range(3):
        args = [x, x, x]
        args[i] = longer
        try:
            with torch.no_grad():
                out = call_learner(
                    subject.module, *[a.transpose(0, 1) if subject.seq_first else a for a in args], *extra
                )
        except Exception:  # noqa: BLE001 - the learner's code; a failing slot is simply not the query
            continue
        out = out[0] if isinstance(out, (tuple, list)) else out
        if isinstance(out, torch.Tensor) and out.dim() == 3 and out.shape[0 if subject.seq_first else 1] == t + 2:
            roles = ["key/value"] * 3
            roles[i] = "query"
            subject.fields["qkv_roles"] = roles
            return


def detect_seq_first(subject: CheckedModule, x: torch.Tensor, base: torch.Tensor, tol: float) -> bool:
    """Does the module take ``(T, B, D)``? True when, fed ``(B, T, D)``, sequence 0's outputs move with sequence 1,
    and fed ``(T, B, D)`` (and read back) they do not. Leaves ``subject.seq_first`` set to the answer."""
    if x.shape[0] < 2 or tuple(base.shape) != tuple(x.shape):
        return False
    x2 = x.clone()
    x2[1:] = torch.randn(x2[1:].shape, generator=torch.Generator().manual_seed(23), dtype=x.dtype)
    try:
        out2, _ = subject.run(x2)
    except CallError:
        return False
    if max_diff(out2[:1], base[:1]) <= tol:
        return False
    subject.seq_first = True
    try:
        base_s, _ = subject.run(x)
        out_s, _ = subject.run(x2)
        ok = tuple(base_s.shape) == tuple(x.shape) and max_diff(out_s[:1], base_s[:1]) <= tol
    except CallError:
        ok = False
    subject.seq_first = ok
    return ok
