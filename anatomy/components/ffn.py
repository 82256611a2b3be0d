"""Position-wise feed-forward network (Vaswani et al. 2017, §3.3), the largest part of a block (post §5.3).

    FFN(x)    = down(act(up(x)))                         ReLU (2017), GELU (BERT, GPT-2)
    SwiGLU(x) = down(silu(gate(x)) * up(x))              Shazeer 2020; Llama
    GEGLU(x)  = down(gelu(gate(x)) * up(x))              Shazeer 2020; "geglu" (erf GELU), "geglu_tanh"
                                                         (tanh GELU: T5 v1.1 / flan-t5's "gated-gelu")

Width rules (``d_ff`` when not given): ``4 * D`` for the plain FFN, as in the paper; for gated variants
``2/3 * 4 * D`` rounded up to a multiple of 8, so the three matrices hold about as many parameters as the two of
a plain FFN.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from anatomy.components.hook_point import HookPoint

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's "gelu_new"
    "silu": F.silu,
    "relu2": lambda x: F.relu(x).square(),  # squared ReLU (So et al. 2021, Primer): Nemotron, Arcee, nanochat
}
GATED: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "swiglu": F.silu,
    "geglu": F.gelu,
    "geglu_tanh": ACTIVATIONS["gelu_tanh"],  # T5 v1.1's "gated-gelu": HF's "gelu_new" inside the gate
}
ACTIVATION_NAMES = (*ACTIVATIONS, *GATED)


def default_d_ff(d_model: int, activation: str) -> int:
    if activation in GATED:
        return 8 * math.ceil(2 * 4 * d_model / 3 / 8)
    return 4 * d_model


class FeedForward(nn.Module):
    def __init__(
        self,
        *,
        d_model: int,
        d_ff: int | None = None,
        activation: str = "relu",
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        if activation not in ACTIVATION_NAMES:
            raise ValueError(f"unknown activation {activation!r}; valid names: {', '.join(sorted(ACTIVATION_NAMES))}")
        d_ff = default_d_ff(d_model, activation) if d_ff is None else d_ff
        if not isinstance(d_ff, int) or d_ff <= 0:
            raise ValueError(f"d_ff must be a positive integer, got {d_ff!r}")
        self.activation, self.d_ff, self.gated = activation, d_ff, activation in GATED
        self.act = GATED[activation] if self.gated else ACTIVATIONS[activation]
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        if self.gated:
            self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)
        self.hook_hidden = HookPoint()  # (B, T, F) the hidden layer down_proj reads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            hidden = self.act(self.gate_proj(x)) * self.up_proj(x)  # (B, T, F)
        else:
            hidden = self.act(self.up_proj(x))  # (B, T, F)
        hidden = self.hook_hidden(hidden)
        if self.dropout.p and self.training:  # p = 0 or eval: the identity, without a module call
            hidden = self.dropout(hidden)
        out: torch.Tensor = self.down_proj(hidden)  # (B, T, D)
        return out

    def extra_repr(self) -> str:
        return f"activation={self.activation!r}, d_ff={self.d_ff}"
