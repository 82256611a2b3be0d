"""Research code outside language modelling (geometric algebra, proteins, graphs), re-typed in our own words: the
designs kept, the code not. Built as ``CLASS(d_model, n_heads)``."""

import torch.nn.functional as F
from torch import nn


# follows Qualcomm-AI-research/geometric-algebra-transformer gatr/baselines/transformer.py (BaselineLayerNorm): a
# module with no parameters that calls F.layer_norm over the last axis
class FreeLayerNorm(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:])


# follows the same file (MultiQueryQKVLinear + BaselineSelfAttention, multi_query=True): q from a D -> H*Dh Linear whose
# features are read as (Dh, H) (einops "(hidden_channels num_heads)": heads interleaved), ONE key and ONE value head
# broadcast over the query heads, SDPA, heads merged head-major into out_linear
class GeoMultiQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.heads = n_heads
        dh = d_model // n_heads
        self.qkv_linear = nn.Module()
        self.qkv_linear.q_linear = nn.Linear(d_model, dh * n_heads)
        self.qkv_linear.k_linear = nn.Linear(d_model, dh)
        self.qkv_linear.v_linear = nn.Linear(d_model, dh)
        self.out_linear = nn.Linear(dh * n_heads, d_model)

    def forward(self, x, attention_mask=None):
        b, t, _ = x.shape
        q = self.qkv_linear.q_linear(x).view(b, t, -1, self.heads).permute(0, 3, 1, 2)  # (B, H, T, Dh)
        k = self.qkv_linear.k_linear(x)[:, None]  # (B, 1, T, Dh)
        v = self.qkv_linear.v_linear(x)[:, None]
        h = F.scaled_dot_product_attention(q, k.expand_as(q), v.expand_as(q), attn_mask=attention_mask)
        return self.out_linear(h.transpose(1, 2).reshape(b, t, -1))


# follows the same file (BaselineTransformerBlock): ONE parameter-free norm module called before both sub-layers
# (nothing to share: there are no gamma and beta), a GELU MLP of width 2 D
class GeoBaselineBlock(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.norm = FreeLayerNorm()
        self.attention = GeoMultiQueryAttention(d_model, n_heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.GELU(), nn.Linear(2 * d_model, d_model))

    def forward(self, inputs, attention_mask=None):
        outputs = inputs + self.attention(self.norm(inputs), attention_mask)
        return outputs + self.mlp(self.norm(outputs))


# injected into the geometric baseline block: the attention's output added without the residual
class GeoBaselineNoResidual(GeoBaselineBlock):
    def forward(self, inputs, attention_mask=None):
        outputs = self.attention(self.norm(inputs), attention_mask)
        return outputs + self.mlp(self.norm(outputs))
