"""A bare GPT: the arithmetic of our GPT-2 design written as plainly as PyTorch allows, no checks, no hooks.

The reference that benchmarks/train_step.py measures ``anatomy``'s DecoderLM against. Two configurations:

``design="ours"``     our gpt2 preset: learned positions, Pre-LN, fused QKV, SDPA (causal flag), GELU (tanh or
                      exact, as configured), optional biases, tied embeddings, the loss of ``anatomy.models.lm``
                      (position t predicts labels[t + 1]).
``design="nanogpt"``  nanoGPT's model.py at the same size: one fused ``c_attn``, SDPA ``is_causal=True``,
                      LayerNorm without bias, exact GELU, tied embeddings, the targets shifted by the data loader
                      (ignored label -1) so the loss reads every row of the logits.

``load_from(ours)`` copies a DecoderLM's weights in, so a benchmark can check that both compute the same function
before it times them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, h: int, f: int, bias: bool, gelu: str) -> None:
        super().__init__()
        self.h, self.gelu = h, gelu
        self.ln_1 = nn.LayerNorm(d, bias=bias)
        self.c_attn = nn.Linear(d, 3 * d, bias=bias)
        self.c_proj = nn.Linear(d, d, bias=bias)
        self.ln_2 = nn.LayerNorm(d, bias=bias)
        self.c_fc = nn.Linear(d, f, bias=bias)
        self.mlp_proj = nn.Linear(f, d, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q = q.view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, T, Dh)
        v = v.view(b, t, self.h, d // self.h).transpose(1, 2)  # (B, H, T, Dh)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))  # (B, T, D)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate=self.gelu))


class BareGPT(nn.Module):
    def __init__(
        self,
        *,
        vocab: int,
        d: int,
        h: int,
        layers: int,
        d_ff: int,
        max_len: int,
        bias: bool = False,
        gelu: str = "none",
        design: str = "ours",
    ) -> None:
        super().__init__()
        if design not in ("ours", "nanogpt"):
            raise ValueError(f"design must be 'ours' or 'nanogpt', got {design!r}")
        self.design = design
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_len, d)
        self.blocks = nn.ModuleList(Block(d, h, d_ff, bias, gelu) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d, bias=bias)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, targets: torch.Tensor | None = None):
        t = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(t, device=input_ids.device))  # (B, T, D)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:  # nanoGPT: targets already shifted, -1 where there is no next token
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)  # (B*T, V)
        elif labels is not None:  # ours: position t predicts labels[t + 1]
            loss = F.cross_entropy(
                logits[:, :-1].reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1)
            )  # (B*(T-1), V): the copy our design made
        return Output(logits, loss)

    @torch.no_grad()
    def load_from(self, ours: nn.Module) -> BareGPT:
        """Copy the weights of an ``anatomy`` DecoderLM of the same size (gpt2 preset, fused QKV)."""
        self.wte.weight.copy_(ours.embeddings.embed_tokens.weight)
        self.wpe.weight.copy_(ours.embeddings.positional.weight)
        for mine, theirs in zip(self.blocks, ours.stack.blocks):
            pairs = [
                (mine.ln_1, theirs.attn_add_norm.norm),
                (mine.c_attn, theirs.attn.qkv_proj),
                (mine.c_proj, theirs.attn.o_proj),
                (mine.ln_2, theirs.ffn_add_norm.norm),
                (mine.c_fc, theirs.ffn.up_proj),
                (mine.mlp_proj, theirs.ffn.down_proj),
            ]
            for a, b in pairs:
                a.weight.copy_(b.weight)
                if a.bias is not None:
                    a.bias.copy_(b.bias)
        self.ln_f.weight.copy_(ours.stack.final_norm.weight)
        if self.ln_f.bias is not None:
            self.ln_f.bias.copy_(ours.stack.final_norm.bias)
        return self


class Output:
    __slots__ = ("logits", "loss")

    def __init__(self, logits: torch.Tensor, loss: torch.Tensor | None) -> None:
        self.logits, self.loss = logits, loss


def shifted_targets(ids: torch.Tensor) -> torch.Tensor:
    """nanoGPT's targets for ``ids``: the next token, -1 after the last (what its data loader hands the model)."""
    return torch.cat([ids[:, 1:], torch.full_like(ids[:, :1], -1)], dim=1)  # (B, T)
