"""Weight initialisation: every scheme in one place, each with its source.

``"normal"``   GPT-2 / BERT: every Linear and Embedding ~ N(0, init_std=0.02), biases 0, norms (1, 0). GPT-2's
               residual output projections (``o_proj``, ``down_proj``) use ``init_std / sqrt(2 * n_layers)`` so the
               residual stream's variance does not grow with depth (Radford et al. 2019, §2.3).
``"xavier"``   The Annotated Transformer / fairseq for the 2017 paper: Linear ~ Xavier-uniform (Glorot & Bengio
               2010), embeddings ~ N(0, D^-1/2) (fairseq's choice, matching the sqrt(D) embedding scale).
``"deepnet"``  DeepNet (Wang et al. 2022): Xavier-normal, with gain ``beta`` on the value, output and FFN
               projections and gain 1 on query and key.
"""

from __future__ import annotations

import math

from torch import nn

from anatomy.components.attention import MultiHeadAttention
from anatomy.components.ffn import FeedForward
from anatomy.components.positional import LearnedPositional, ShawRelativePositional, T5RelativeBias


def init_weights(model: nn.Module, *, scheme: str, std: float = 0.02, n_layers: int = 1,
                 beta: float = 1.0) -> None:
    embedding_weights = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    residual_out = set()
    scaled = set()
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            residual_out.add(id(m.o_proj.weight))
            scaled.update({id(m.o_proj.weight)} | ({id(m.v_proj.weight)} if not m.fused_qkv else set()))
        if isinstance(m, FeedForward):
            residual_out.add(id(m.down_proj.weight))
            scaled.update(id(p) for n, p in m.named_parameters() if n.endswith("proj.weight"))
    for m in model.modules():
        if isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=m.embedding_dim ** -0.5 if scheme == "xavier" else std)
        elif isinstance(m, nn.Linear) and id(m.weight) not in embedding_weights:
            if scheme == "normal":
                out_std = std / math.sqrt(2 * n_layers) if id(m.weight) in residual_out else std
                nn.init.normal_(m.weight, std=out_std)
            elif scheme == "xavier":
                nn.init.xavier_uniform_(m.weight)
            else:  # deepnet
                nn.init.xavier_normal_(m.weight, gain=beta if id(m.weight) in scaled else 1.0)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, (LearnedPositional,)):
            nn.init.normal_(m.weight, std=std)
        elif isinstance(m, ShawRelativePositional):
            nn.init.normal_(m.key_embeddings, std=std)
            nn.init.normal_(m.value_embeddings, std=std)
        elif isinstance(m, T5RelativeBias):
            nn.init.normal_(m.relative_attention_bias.weight, std=std)
