"""Vision transformers as their repositories structure them, re-typed in our own words (facts, not code).

Each class names the repository/file it follows. Built as ``CLASS(d_model, n_heads)``; ``x`` is ``(B, N, C)``.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F


# follows huggingface/pytorch-image-models timm/models/vision_transformer.py (Attention): one fused qkv Linear,
# reshape (B, N, 3, H, Dh) then permute (3, B, H, N, Dh), scale head_dim ** -0.5, proj after the merge
class TimmAttention(nn.Module):
    def __init__(self, dim, num_heads=8, qkv_bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(0.0)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # (3, B, H, N, Dh)
        q, k, v = qkv.unbind(0)
        q = q * self.scale
        attn = q @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        attn = self.attn_drop(attn)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)  # (B, N, C)
        return self.proj(x)


# injected into TimmAttention: heads merged by reshape without transpose(1, 2)
class TimmAttentionMergeNoTranspose(TimmAttention):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q * self.scale) @ k.transpose(-2, -1)
        attn = attn.softmax(dim=-1)
        x = (attn @ v).reshape(B, N, C)  # (B, H, N, Dh) read as (B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


# follows facebookresearch/dinov2 dinov2/layers/layer_scale.py and timm's Block(init_values=...): a learned
# per-channel gamma on each branch before the residual add
class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


# follows timm vision_transformer.py Block with ls1/ls2 (LayerScale), pre-norm
class LayerScaleBlock(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TimmAttention(dim, num_heads)
        self.ls1 = LayerScale(dim)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim)

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        x = x + self.ls2(self.mlp(self.norm2(x)))
        return x


# follows facebookresearch/deit cait_models.py LayerScale_Block: gamma_1 / gamma_2 Parameters in the block itself
class CaiTBlock(nn.Module):
    def __init__(self, dim, num_heads, init_values=1e-4):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TimmAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)
        self.gamma_1 = nn.Parameter(init_values * torch.ones(dim))
        self.gamma_2 = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        x = x + self.gamma_1 * self.attn(self.norm1(x))
        x = x + self.gamma_2 * self.mlp(self.norm2(x))
        return x


# follows microsoft/Swin-Transformer models/swin_transformer_v2.py SwinTransformerBlock: res-post-norm,
# x + norm(f(x)) (the norm on the branch's output, the stream itself never normalised)
class ResPostNormBlock(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.attn = TimmAttention(dim, num_heads)
        self.norm1 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)
        self.norm2 = nn.LayerNorm(dim)

    def forward(self, x):
        shortcut = x
        x = shortcut + self.norm1(self.attn(x))
        x = x + self.norm2(self.mlp(x))
        return x


# follows lucidrains/vit-pytorch vit_pytorch/vit.py before its scale fix: `self.scale = dim ** -0.5` (the model
# width, not dim_head); to_qkv chunked in three, to_out = Sequential(Linear, Dropout)
class LucidViTAttention(nn.Module):
    def __init__(self, dim, heads=8, dim_head=None):
        super().__init__()
        dim_head = dim_head or dim // heads
        inner_dim = dim_head * heads
        self.heads = heads
        self.scale = dim ** -0.5
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(0.0))

    def forward(self, x):
        b, n, _ = x.shape
        h = self.heads
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, h, -1).transpose(1, 2) for t in (q, k, v))  # (B, H, N, Dh)
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        attn = dots.softmax(dim=-1)
        out = torch.matmul(attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)  # (B, N, H*Dh)
        return self.to_out(out)


# follows lucidrains/vit-pytorch vit_pytorch/vit.py today: the LayerNorm moved inside Attention (pre-norm) and
# the residual stays in the Transformer loop; scale dim_head ** -0.5
class LucidViTNormInside(nn.Module):
    def __init__(self, dim, heads=8):
        super().__init__()
        dim_head = dim // heads
        self.heads = heads
        self.scale = dim_head ** -0.5
        self.norm = nn.LayerNorm(dim)
        self.to_qkv = nn.Linear(dim, dim * 3, bias=False)
        self.to_out = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, _ = x.shape
        x = self.norm(x)
        q, k, v = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        attn = (q @ k.transpose(-1, -2) * self.scale).softmax(dim=-1)
        out = (attn @ v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


# follows lucidrains/vit-pytorch Transformer: layers of (Attention with its own norm, FeedForward with its own
# norm), x = attn(x) + x; x = ff(x) + x
class LucidFeedForward(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.net = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, dim))

    def forward(self, x):
        return self.net(x)


class LucidViTLayer(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = LucidViTNormInside(dim, heads)
        self.ff = LucidFeedForward(dim, 4 * dim)

    def forward(self, x):
        x = self.attn(x) + x
        x = self.ff(x) + x
        return x


# injected into timm's Block: norm1 reused for the MLP branch (norm2 built and never called)
class DeiTBlockSharedNorm(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = TimmAttention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = Mlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm1(x))
        return x


# follows the SDPA path of timm's Attention (fused_attn): F.scaled_dot_product_attention on (B, H, N, Dh)
class TimmSdpaAttention(TimmAttention):
    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(B, N, C))
