"""Add & Norm: where the residual and the normalisation sit around a sub-layer ``f`` (post §4).

The residual ``x + f(x)`` lets a layer learn a *change* (``f = 0`` is the identity, post §4.1); the norm keeps
the scale steady. Their order is one named value, ``placement``:

==============  ====================================  =========================================================
``"post"``      ``norm(x + f(x))``                    the 2017 paper, BERT; needs warm-up, unstable when deep
``"pre"``       ``x + f(norm(x))``                    GPT-2, Llama (Xiong et al. 2020): an untouched residual
                                                      path; add a final norm after the last block
``"sandwich"``  ``x + norm_out(f(norm_in(x)))``       CogView (Ding et al. 2021): pre-norm with the sub-layer's
                                                      output normalised too
``"deepnorm"``  ``norm(alpha * x + f(x))``            DeepNet (Wang et al. 2022): Post-LN whose residual is
                                                      up-weighted by alpha (and f's init down-scaled by beta)
==============  ====================================  =========================================================

A block calls ``h = add_norm.before(x)``, runs the sub-layer on ``h``, then ``x = add_norm.after(x, f_out)``.
Each ``AddNorm`` owns its norms: two sub-layers never share gamma and beta (sharing is one of the post's bugs).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

PLACEMENTS = ("post", "pre", "sandwich", "deepnorm")


def deepnorm_constants(n_encoder_layers: int = 0, n_decoder_layers: int = 0) -> dict[str, tuple[float, float]]:
    """DeepNet's (alpha, beta) per stack (Wang et al. 2022, Fig. 2): encoder-only or decoder-only with N layers
    ((2N)^1/4, (8N)^-1/4); encoder-decoder with N encoder and M decoder layers: the encoder's
    (0.81 (N^4 M)^1/16, 0.87 (N^4 M)^-1/16), the decoder's ((3M)^1/4, (12M)^-1/4). Keys: "encoder", "decoder".
    ``alpha`` weights the residual in ``AddNorm``; ``beta`` is the init gain of the stack's v/o/FFN projections
    (models/init.py); ``build_model`` gives each stack its own pair."""
    n, m = n_encoder_layers, n_decoder_layers
    out = {}
    if n and m:  # encoder-decoder
        out["encoder"] = (0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16))
        out["decoder"] = ((3 * m) ** 0.25, (12 * m) ** -0.25)
    elif n:  # encoder only
        out["encoder"] = ((2 * n) ** 0.25, (8 * n) ** -0.25)
    elif m:  # decoder only
        out["decoder"] = ((2 * m) ** 0.25, (8 * m) ** -0.25)
    return out


class AddNorm(nn.Module):
    def __init__(
        self,
        d_model: int,
        *,
        placement: str,
        make_norm: Callable[[int], nn.Module],
        dropout: float = 0.0,
        alpha: float = 1.0,
    ) -> None:
        super().__init__()
        if placement not in PLACEMENTS:
            raise ValueError(f"unknown norm_position {placement!r}; valid names: {', '.join(PLACEMENTS)}")
        if not math.isfinite(alpha) or alpha <= 0:
            raise ValueError(f"alpha must be a positive finite number, got {alpha}")
        self.placement, self.alpha = placement, alpha
        if placement == "sandwich":
            self.pre_norm, self.post_norm = make_norm(d_model), make_norm(d_model)
        else:
            self.norm = make_norm(d_model)
        self.dropout = nn.Dropout(dropout)

    def before(self, x: torch.Tensor) -> torch.Tensor:
        """What the sub-layer sees."""
        if self.placement == "pre":
            h: torch.Tensor = self.norm(x)
            return h
        if self.placement == "sandwich":
            h = self.pre_norm(x)
            return h
        return x

    def after(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """Combine the residual input ``x`` with the sub-layer output ``out``."""
        if self.dropout.p and self.training:  # p = 0 or eval: the identity, without a module call
            out = self.dropout(out)
        if self.placement == "pre":
            return x + out
        if self.placement == "sandwich":
            z: torch.Tensor = x + self.post_norm(out)
            return z
        y: torch.Tensor = self.norm(x + out if self.placement == "post" else self.alpha * x + out)  # post, deepnorm
        return y

    def extra_repr(self) -> str:
        return f"placement={self.placement!r}" + (f", alpha={self.alpha:.4g}" if self.placement == "deepnorm" else "")
