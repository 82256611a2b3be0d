"""Our own components, wrapped to the doctor's documented convention: `CLASS(d_model, n_heads)`, `forward(x, mask)`."""

import torch.nn as nn

from anatomy.components import EncoderBlock, MultiHeadAttention, attention_inputs


class OurAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = MultiHeadAttention(d_model=d_model, n_heads=n_heads)

    def forward(self, x, mask=None):
        return self.attn(x, attention_inputs(self.attn, x, mask=mask), need_weights=True)


class OurCausalAttention(OurAttention):
    def forward(self, x, mask=None):
        return self.attn(x, attention_inputs(self.attn, x, mask=mask, is_causal=True), need_weights=True)


class OurBlock(nn.Module):
    placement = "post"

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.block = EncoderBlock.build(d_model=d_model, n_heads=n_heads, placement=self.placement)

    def forward(self, x, mask=None):
        return self.block(x, ctx=attention_inputs(self.block, x, mask=mask))[0]


class OurPreNormBlock(OurBlock):
    placement = "pre"
