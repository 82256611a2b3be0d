"""Weight initialisation: every scheme in one place, each with its source.

``"normal"``   GPT-2 / BERT: every Linear and Embedding ~ N(0, init_std=0.02), biases 0, norms (1, 0). GPT-2's
               residual output projections (``o_proj``, ``down_proj``) use ``init_std / sqrt(2 * n_layers)`` so the
               residual stream's variance does not grow with depth (Radford et al. 2019, §2.3).
``"xavier"``   The Annotated Transformer / fairseq for the 2017 paper: Linear ~ Xavier-uniform (Glorot & Bengio
               2010), embeddings ~ N(0, D^-1/2) (fairseq's choice, matching the sqrt(D) embedding scale).
``"deepnet"``  DeepNet (Wang et al. 2022, Fig. 2): Xavier-normal, with gain ``beta`` on the value, output and FFN
               projections (self- and cross-attention alike) and gain 1 on query and key; embeddings
               N(0, init_std). ``betas`` maps each stack (by module identity) to its own beta, so an
               encoder-decoder's encoder and decoder get theirs; a fused ``qkv_proj`` is initialised as the three
               matrices it holds (q and k at gain 1, v at beta). The builder uses this scheme whenever
               ``norm_position="deepnorm"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.ffn import FeedForward
from anatomy.components.positional import LearnedPositional, ShawRelativePositional, T5RelativeBias

# a weight's gain: one number, or ((rows, gain), ...) per block of rows of a fused projection
_Gain = float | tuple[tuple[int, float], ...]


def _deepnet_gains(model: nn.Module, betas: Mapping[nn.Module, float]) -> dict[int, _Gain]:
    """``id(weight) -> gain``: its stack's beta on the value, output and FFN projections (1 outside every stack
    of ``betas``); a fused ``qkv_proj`` gets ``((q rows, 1), (k rows, 1), (v rows, beta))``."""
    beta_of = {id(m): beta for scope, beta in betas.items() for m in scope.modules()}
    gains: dict[int, _Gain] = {}
    for m in model.modules():
        beta = beta_of.get(id(m), 1.0)
        if isinstance(m, MultiHeadAttention):
            gains[id(m.o_proj.weight)] = beta
            if m.fused_qkv:
                kv = m.n_kv_heads * m.head_dim
                gains[id(m.qkv_proj.weight)] = ((m.inner_dim, 1.0), (kv, 1.0), (kv, beta))
            else:
                gains[id(m.v_proj.weight)] = beta
        elif isinstance(m, FeedForward):
            gains.update((id(p), beta) for n, p in m.named_parameters() if n.endswith("proj.weight"))
    return gains


def _deepnet_linear(weight: torch.Tensor, gain: _Gain) -> None:
    if not isinstance(gain, tuple):
        nn.init.xavier_normal_(weight, gain=gain)
        return
    with torch.no_grad():
        rows_of = weight.split([n for n, _ in gain], dim=0)  # type: ignore[no-untyped-call]  # torch's Tensor.split is unannotated
        for rows, (_, g) in zip(rows_of, gain, strict=True):
            nn.init.xavier_normal_(rows, gain=g)  # each as the (rows, D) matrix it stands for


def init_weights(
    model: nn.Module,
    *,
    scheme: str,
    std: float = 0.02,
    n_layers: int = 1,
    betas: Mapping[nn.Module, float] | None = None,
) -> None:
    """Initialise ``model`` in place by ``scheme``; ``betas`` (``"deepnet"`` only): DeepNet's gain per stack."""
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    residual_out = set()
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            residual_out.add(id(m.o_proj.weight))
        if isinstance(m, FeedForward):
            residual_out.add(id(m.down_proj.weight))
    gains = _deepnet_gains(model, betas or {}) if scheme == "deepnet" else {}
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=m.embedding_dim**-0.5 if scheme == "xavier" else std)
        elif isinstance(m, nn.Linear) and id(m.weight) not in embedding_weights:
            if scheme == "normal":
                out_std = std / math.sqrt(2 * n_layers) if id(m.weight) in residual_out else std
                nn.init.normal_(m.weight, std=out_std)
            elif scheme == "xavier":
                nn.init.xavier_uniform_(m.weight)
            else:  # deepnet
                _deepnet_linear(m.weight, gains.get(id(m.weight), 1.0))
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (LearnedPositional,)):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, ShawRelativePositional):
            nn.init.normal_(m.key_embeddings, std=std)
            nn.init.normal_(m.value_embeddings, std=std)
        elif isinstance(m, T5RelativeBias):
            nn.init.normal_(m.relative_attention_bias.weight, std=std)
