"""The gpt exercise's reference on the learner's own weights: the learner's parts found by role (whatever their
names), the solution's ``GPT`` (``solutions/gpt.py``) given those weights, and the wrong assemblies a pitfall
makes, computed from the same parts.

Roles are found by shape and by what ran, never by name: the token embedding is the ``(V, D)`` parameter (one
when the head is tied), learned positions a ``(P, D)`` parameter (``(1, P, D)`` in minGPT's style), a stored
sinusoidal table a buffer whose first rows are the table, the blocks the instances of the learner's
``TransformerBlock`` in the order the forward calls them, the final norm the two ``(D,)`` parameters outside the
blocks. The probe's sizes are all different, so a shape names a role.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Sizes:
    """The model's sizes: the probe's (all different, so a shape names a role) or the training's."""

    v: int = 13  # vocab_size
    d: int = 12  # d_model
    h: int = 3  # n_heads
    layers: int = 2
    p: int = 8  # block_size


PROBE = Sizes()
T = 6  # the probe's length
SIZES = {"B": 2, "T": T, "H": PROBE.h, "Dh": PROBE.d // PROBE.h, "D": PROBE.d, "V": PROBE.v, "P": PROBE.p}
PAD = 0  # the spec's padding id (solutions/gpt.py)
LENGTHS = (T, T - 2)  # the padded probe: the second row ends with two pads


Call = tuple[nn.Module, Any, int, str]  # a block called: the block, its mask argument, the learner's line, its text


def probe_ids(padded: bool = False, seed: int = 1) -> torch.Tensor:
    """(B, T) ids of real tokens 1 .. V-1; ``padded``: PAD after each row's length."""
    ids = torch.randint(1, PROBE.v, (2, T), generator=torch.Generator().manual_seed(seed))
    if padded:
        for row, n in enumerate(LENGTHS):
            ids[row, n:] = PAD
    return ids


def causal(t: int) -> torch.Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()[None, None]  # (1, 1, T, S), True = may attend


def logits_of(out: Any) -> Any:
    """The logits of what the learner's forward returned: the tensor, or the first of a tuple."""
    return out[0] if isinstance(out, (tuple, list)) and out else out


def loss_of(out: Any) -> Any:
    return out[1] if isinstance(out, (tuple, list)) and len(out) > 1 else None


@dataclass
class Parts:
    """The learner's model by role: tensors are the learner's own values (float64)."""

    tok: torch.Tensor  # (V, D)
    tok_name: str
    heads: list[tuple[str, nn.Parameter]]  # every (V, D) parameter: one when tied
    head_bias: torch.Tensor | None
    table: torch.Tensor  # (P, D): learned positions, the learner's stored table, or the exact sinusoids
    table_kind: str  # "learned", "stored", "sinusoidal"
    blocks: list[nn.Module]  # in the order the forward called them
    block_paths: list[str]
    norm: tuple[torch.Tensor, torch.Tensor, float] | None  # gamma, beta, eps of the final norm (None: none)
    calls: list[Call] = field(default_factory=list)  # block, its mask, line, source


def sinusoids(n: int, d: int) -> torch.Tensor:
    from anatomy.course.solutions import sinusoidal

    table: Callable[[int, int], torch.Tensor] = sinusoidal.sinusoidal_encoding  # the solution: untyped
    return table(n, d)


def _rows(t: torch.Tensor, d: int) -> torch.Tensor | None:
    """A (N, D), (1, N, D) or (N, 1, D) tensor as its (N, D) rows; None for any other shape."""
    if t.dim() == 2 and t.shape[1] == d:
        return t
    if t.dim() == 3 and t.shape[2] == d and 1 in (t.shape[0], t.shape[1]):
        return t.reshape(-1, d)
    return None


def block_calls(model: nn.Module, block_cls: type, run: Callable[[], Any], file: str) -> list[Call]:
    """(block, mask, line, source) of every call of a ``block_cls`` instance while ``run()`` runs."""
    from anatomy.course.spec import _caller

    calls: list[Call] = []

    def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        mask = args[1] if len(args) > 1 else kwargs.get("mask", next(iter(kwargs.values()), None))
        line, source = _caller(file)
        calls.append((module, mask.detach().clone() if isinstance(mask, torch.Tensor) else mask, line, source))

    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in model.modules() if isinstance(m, block_cls)]
    try:
        run()
    finally:
        for h in handles:
            h.remove()
    return calls


def find(model: nn.Module, calls: list[Call], sz: Sizes = PROBE) -> Parts:
    """The learner's parts by role (raises ValueError, one line, when a role is missing)."""
    inside = {id(p) for c in calls for p in c[0].parameters()}
    params = [(n, p) for n, p in model.named_parameters() if id(p) not in inside]
    v, d = sz.v, sz.d
    heads = [(n, p) for n, p in params if tuple(p.shape) == (v, d)]
    if not heads:
        raise ValueError("no (vocab_size, d_model) parameter outside the blocks: where is the token embedding?")
    embedding = next((m for m in model.modules() if isinstance(m, nn.Embedding) and m.weight.shape == (v, d)), None)
    tok_name, tok = next(((n, p) for n, p in heads if embedding is not None and p is embedding.weight), heads[0])
    bias = next((p for _, p in params if tuple(p.shape) == (v,)), None)
    table, kind = _positions(model, params, sz)
    paths = {id(m): n for n, m in model.named_modules()}
    blocks = [c[0] for c in calls]
    return Parts(
        tok.detach().double().clone(),
        tok_name,
        heads,
        None if bias is None else bias.detach().double().clone(),
        table,
        kind,
        blocks,
        [paths.get(id(b), "") for b in blocks],
        _final_norm(model, inside, d),
        calls,
    )


def _positions(model: nn.Module, params: list[tuple[str, nn.Parameter]], sz: Sizes) -> tuple[torch.Tensor, str]:
    for _, p in params:  # a learned table: block_size rows (or more: the first ones are used), not the vocabulary
        rows = _rows(p.detach(), sz.d)
        if rows is not None and rows.shape[0] >= sz.p and tuple(p.shape) != (sz.v, sz.d):
            return rows[: sz.p].double().clone(), "learned"
    exact = sinusoids(sz.p, sz.d)
    for _, b in model.named_buffers():
        rows = _rows(b, sz.d) if b.is_floating_point() else None
        if rows is not None and rows.shape[0] >= sz.p and torch.allclose(rows[: sz.p].double(), exact, atol=1e-4):
            return rows[: sz.p].double().clone(), "stored"
    return exact, "sinusoidal"


def _final_norm(model: nn.Module, inside: set[int], d: int) -> tuple[torch.Tensor, torch.Tensor, float] | None:
    """gamma, beta and eps of the norm outside the blocks (the first module owning two (D,) parameters)."""
    for m in model.modules():
        own = [p for p in m.parameters(recurse=False) if tuple(p.shape) == (d,) and id(p) not in inside]
        if len(own) != 2:
            continue
        if isinstance(m, nn.LayerNorm):
            return m.weight.detach().double().clone(), m.bias.detach().double().clone(), float(m.eps)
        gamma, beta = _gamma_beta(m, own, d)
        eps = getattr(m, "eps", getattr(m, "variance_epsilon", 1e-5))
        return gamma, beta, float(eps) if isinstance(eps, (int, float)) else 1e-5
    return None


def _gamma_beta(m: nn.Module, own: list[nn.Parameter], d: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Which of a hand-written norm's two (D,) parameters is beta: with the other at 0, the output is beta."""
    values = [p.detach().double().clone() for p in own]
    probe = copy.deepcopy(m).double()
    mine = [p for p in probe.parameters(recurse=False) if tuple(p.shape) == (d,)]
    x = torch.randn(1, 3, d, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        mine[0].zero_()
        mine[1].fill_(3.0)
        try:
            second_is_beta = bool(torch.allclose(probe(x), torch.full_like(x, 3.0)))
        except Exception:  # noqa: BLE001 - a norm that cannot run alone: the registration order decides
            second_is_beta = True
    return (values[0], values[1]) if second_is_beta else (values[1], values[0])


class _Scaled(nn.Module):
    """The token embedding times a constant (the paper's sqrt(d_model)), its weight still the tied one."""

    def __init__(self, inner: nn.Embedding, scale: float):
        super().__init__()
        self.inner, self.scale = inner, scale

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(ids) * self.scale
        return out


def reference(parts: Parts, scale: float = 1.0, sz: Sizes = PROBE) -> nn.Module:
    """The solution's GPT with the learner's weights: its embedding (tied head), positions, blocks (copies, in
    the order called) and final norm. ``scale``: sqrt(D) for a learner who multiplies the embedding once."""
    from anatomy.course.solutions import gpt

    make: Callable[..., Any] = gpt.GPT  # the solution is written as a learner writes it: untyped
    torch.manual_seed(0)
    ref = make(sz.v, sz.d, sz.h, len(parts.blocks), sz.p).double()
    with torch.no_grad():
        ref.tok.weight.copy_(parts.tok)
        learned = parts.table_kind == "learned"  # a learned table trains in the reference too
        ref.pe = nn.Parameter(parts.table.clone()) if learned else parts.table.clone()
        if parts.norm is not None:
            ref.norm.weight.copy_(parts.norm[0])
            ref.norm.bias.copy_(parts.norm[1])
            ref.norm.eps = parts.norm[2]
        else:
            ref.norm.weight.fill_(1.0)
            ref.norm.bias.zero_()
    if parts.head_bias is not None:
        ref.head.bias = nn.Parameter(parts.head_bias.clone())
    ref.blocks = nn.ModuleList(copy.deepcopy(b) for b in parts.blocks)
    if scale != 1.0:
        ref.tok = _Scaled(ref.tok, scale)
    out: nn.Module = ref.eval()
    return out


# name -> the arguments of :func:`wrong` that make it (each also tried with the embedding scaled once)
WRONG: dict[str, tuple[dict[str, Any], ...]] = {
    "positions_missing": ({"pos": "none"},),
    "positions_added_twice": ({"pos": "twice"}, {"pos": "each_layer"}),
    "positions_after_blocks": ({"pos": "after_blocks"}, {"pos": "after_norm"}),
    "embedding_scaled_twice": ({"scale": float(PROBE.d)},),
    "final_norm_missing": ({"norm": False},),
}


def wrong(ref: Any, ids: torch.Tensor, *, scale: float = 1.0, pos: str = "input", norm: bool = True) -> Any:
    """The reference's logits assembled wrongly: the positions elsewhere, the embedding scaled again, no final
    norm (``ref``'s own parts, so only the assembly differs)."""
    t = ids.size(1)
    table = ref.pe[:t]
    tok = ref.tok.inner if isinstance(ref.tok, _Scaled) else ref.tok
    x = tok(ids) * scale
    if pos in ("input", "twice", "each_layer"):
        x = x + table
    if pos == "twice":
        x = x + table
    for block in ref.blocks:
        x = x + table if pos == "each_layer" else x
        x = logits_of(block(x, causal(t)))
    x = x + table if pos == "after_blocks" else x
    x = ref.norm(x) if norm else x
    x = x + table if pos == "after_norm" else x
    return F.linear(x, tok.weight, ref.head.bias)


def shifted_loss(logits: torch.Tensor, targets: torch.Tensor, shift: int = 1, ignore: bool = True) -> torch.Tensor:
    """The loss of predicting token t+``shift`` at position t (``ignore``: pads left out, as the spec says)."""
    n = logits.size(1) - shift
    pred, gold = logits[:, :n].reshape(-1, logits.size(-1)), targets[:, shift:].reshape(-1)
    return F.cross_entropy(pred.double(), gold, ignore_index=PAD if ignore else -100)


def randomize(model: nn.Module, seed: int = 3, std: float = 0.3) -> None:
    """Every parameter drawn anew (the same weights for the reference, whatever the learner's init: a zero
    position table or a zero bias would hide where they are added)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * std)


def relative_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| over the reference's magnitude (1 + max |b|)."""
    a, b = a.detach().double(), b.detach().double()
    if a.shape != b.shape:
        return math.inf
    return float((a - b).abs().nan_to_num(nan=math.inf).max() / (1 + b.abs().max()))
