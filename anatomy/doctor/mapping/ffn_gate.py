"""Which of a gated FFN's two input Linears is the gate, when their names do not say (llm.c's ``c_fc``/``c_fc2``):
read from what the FFN computes, not from the order it calls them in."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

GATES = (F.silu, F.gelu, lambda t: F.gelu(t, approximate="tanh"))  # the activations a gated FFN's gate goes through


def gate_by_behaviour(module: nn.Module, pair: list[str], down: str) -> str | None:
    """Which of two unnamed Linears of a gated FFN is the gate: the FFN (the modules' closest common parent) is run
    on random tokens, and the down projection's input is ``act(gate(x)) * up(x)`` for exactly one of the two
    readings (``c_proj(c_fc(x) * silu(c_fc2(x)))`` in llm.c: the gate is called second); Linears held by the block
    itself are read by running the block. None when that cannot run on ``x`` alone, or neither or both readings
    hold."""
    named = dict(module.named_modules())
    parent = _common_parent([*pair, down])
    ffn = named.get(parent)
    first = named.get(pair[0])
    if ffn is None or not isinstance(first, nn.Linear):
        return None
    seen: dict[str, torch.Tensor] = {}
    hooks = [named[p].register_forward_hook(lambda _m, _i, o, p=p: seen.__setitem__(p, o)) for p in pair]
    hooks.append(named[down].register_forward_pre_hook(lambda _m, i: seen.__setitem__(down, i[0])))
    x = torch.randn(2, 3, first.in_features, generator=torch.Generator().manual_seed(5))
    try:
        with torch.no_grad():
            ffn(x.to(first.weight.dtype))
    except Exception:  # noqa: BLE001 - an FFN that takes more than x says nothing here
        return None
    finally:
        for h in hooks:
            h.remove()
    if not {*pair, down} <= seen.keys():
        return None
    a, b, u = (seen[p].double() for p in (*pair, down))
    if a.shape != b.shape or a.shape != u.shape:
        return None
    tol = 1e-5 * max(1.0, float(u.abs().max()))

    def reads(gate: torch.Tensor, up: torch.Tensor) -> bool:
        return any(float((act(gate) * up - u).abs().max()) <= tol for act in GATES)

    first_gate, second_gate = reads(a, b), reads(b, a)
    return pair[0] if first_gate and not second_gate else pair[1] if second_gate and not first_gate else None


def _common_parent(paths: list[str]) -> str:
    parts = [p.split(".")[:-1] for p in paths]
    common: list[str] = []
    for names in zip(*parts):
        if len(set(names)) != 1:
            break
        common.append(names[0])
    return ".".join(common)
