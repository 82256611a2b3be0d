"""Token embedding and output head.

The 2017 paper multiplies the embeddings by ``sqrt(D)`` (§3.4) so that, with its small initialisation, they are
not drowned by the sinusoidal table (whose entries have magnitude ~1); GPT-2, BERT and Llama do not. The output
head may share its matrix with the embedding ("weight tying", Press & Wolf 2017): ``lm_head.weight is
embed_tokens.weight``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from anatomy.components.hook_point import HookPoint, hooked
from anatomy.components.positional.base import PositionalScheme
from anatomy.shapes import check_token_ids


class TokenEmbedding(nn.Embedding):
    def __init__(self, vocab_size: int, d_model: int, *, scale: bool = False) -> None:
        super().__init__(vocab_size, d_model)
        self.multiplier = math.sqrt(d_model) if scale else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if not ids.is_meta:  # a shapes-only forward (``anatomy trace --preset``) has no values to check
            check_token_ids("input_ids", ids, self.num_embeddings)
        x = super().forward(ids)  # (B, T, D)
        return x * self.multiplier if self.multiplier != 1.0 else x

    def extra_repr(self) -> str:
        return super().extra_repr() + (f", scale={self.multiplier:.4g}" if self.multiplier != 1.0 else "")


def make_lm_head(embedding: nn.Embedding, *, tie: bool) -> nn.Linear:
    head = nn.Linear(embedding.embedding_dim, embedding.num_embeddings, bias=False)
    if tie:
        head.weight = embedding.weight
    return head


class InputEmbeddings(nn.Module):
    """Token ids → ``(B, T, D)``: token embedding (+ token types) (+ an embedding-site positional scheme)
    (+ an embedding norm, BERT) then dropout. The token embedding is injected so that encoder, decoder and
    output head can share one matrix. Hook points: ``hook_tokens`` (the token embedding) and ``hook_pos`` (the
    positional term an embedding-site scheme adds; it fires only for such a scheme)."""

    def __init__(
        self,
        *,
        embed_tokens: TokenEmbedding,
        positional: PositionalScheme | None = None,
        token_types: nn.Embedding | None = None,
        norm: nn.Module | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.embed_tokens = embed_tokens
        self.positional = positional
        self.token_types = token_types
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        self.hook_tokens = HookPoint()  # (B, T, D) token embedding, after the sqrt(D) multiplier
        self.hook_pos = HookPoint()  # (B, T, D) positional term added to it (sinusoidal, learned)

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = self.hook_tokens(self.embed_tokens(ids))  # (B, T, D)
        if self.token_types is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(ids)
            if not token_type_ids.is_meta:
                check_token_ids("token_type_ids", token_type_ids, self.token_types.num_embeddings)
            x = x + self.token_types(token_type_ids)  # (B, T, D)
        elif token_type_ids is not None:
            raise ValueError("token_type_ids were given but the model has no token-type embedding (type_vocab_size=0)")
        if self.positional is not None and hooked(self, "hook_pos"):  # the term alone: 0 + pe is pe exactly
            x = x + self.hook_pos(self.positional.add_to_embeddings(torch.zeros_like(x), positions))  # (B, T, D)
        elif self.positional is not None:
            x = self.positional.add_to_embeddings(x, positions)  # (B, T, D)
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x) if self.dropout.p and self.training else x
