import torch
import torch.nn.functional as F
from torch import nn

from anatomy.course.solutions.block import TransformerBlock  # your block, from 08_block.py
from anatomy.course.solutions.sinusoidal import sinusoidal_encoding  # your table, from 05_sinusoidal.py

PAD = 0  # the padding token: ids and targets are padded with it after the real tokens


class GPT(nn.Module):
    """Token embedding + positions -> n_layers of your block (causal mask) -> final LayerNorm -> tied head."""

    pe: torch.Tensor  # the buffers registered below
    causal: torch.Tensor

    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pe", sinusoidal_encoding(block_size, d_model).float(), persistent=False)  # (P, D)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, 4 * d_model) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)  # Pre-Norm blocks leave the stream un-normalised: normalise it once
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tok.weight  # tied: one Parameter, read by both
        causal = torch.ones(block_size, block_size, dtype=torch.bool).tril()  # True = may attend
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, ids, targets=None):
        """ids: (B, T) token ids; targets: (B, T) the same ids (PAD after the real tokens). Returns logits
        (B, T, V) and the loss of predicting token t+1 at position t (None without targets)."""
        t = ids.size(1)
        x = self.tok(ids) + self.pe[:t]  # (B, T, D): the positions added once, before the blocks
        mask = self.causal[:t, :t][None, None]  # (1, 1, T, T)
        for block in self.blocks:
            x = block(x, mask)  # every layer gets the mask
        logits = self.head(self.norm(x))  # (B, T, V)
        if targets is None:
            return logits, None
        loss = F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)),  # (B*(T-1), V): positions 0 .. T-2
            targets[:, 1:].reshape(-1),  # (B*(T-1),): the next tokens 1 .. T-1
            ignore_index=PAD,  # pads are not predicted
        )
        return logits, loss
