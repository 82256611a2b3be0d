# Re-typed after lucidrains/PaLM-pytorch palm_pytorch/palm_pytorch.py (at 7164d13): the model is a *function*
# PaLM(*, dim, num_tokens, depth, dim_head, heads, ff_mult) returning nn.Sequential(Embedding, *Residual(block),
# LayerNorm, Linear) with the head tied to the embedding by assignment on the Sequential; each block is "parallel"
# (one fused projection to q, a single shared k and v -- multi-query attention -- and the SwiGLU input; attention and
# FFN both read the same pre-LayerNorm'd x and are summed), rotary positions cached in a non-persistent buffer, the
# causal mask a cached bool triu buffer sliced [:n, :n] and filled with -finfo.max, a bias-free LayerNorm (beta kept
# as a zero buffer). einops is replaced by view/transpose here.
#   tiny_palm   correct. The blocks are the run of Residual modules inside the Sequential: before the doctor looked
#               for such runs it found no stack, and checked neither the blocks nor the positions.
import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.register_buffer("beta", torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta)


class Residual(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x) + x


class Rotary(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim)))

    def forward(self, n, device):
        seq = torch.arange(n, device=device, dtype=self.inv_freq.dtype)
        freqs = torch.einsum("i,j->ij", seq, self.inv_freq)
        return torch.cat((freqs, freqs), dim=-1)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def with_rotary(pos, t):
    return t * pos.cos() + rotate_half(t) * pos.sin()


class SwiGLU(nn.Module):
    def forward(self, x):
        x, gate = x.chunk(2, dim=-1)
        return F.silu(gate) * x


class ParallelBlock(nn.Module):
    def __init__(self, dim, dim_head=64, heads=8, ff_mult=4):
        super().__init__()
        self.norm = LayerNorm(dim)
        attn_inner, ff_inner = dim_head * heads, dim * ff_mult
        self.split_sizes = (attn_inner, dim_head, dim_head, ff_inner * 2)
        self.heads, self.dim_head = heads, dim_head
        self.scale = dim_head ** -0.5
        self.rotary = Rotary(dim_head)
        self.fused_proj = nn.Linear(dim, sum(self.split_sizes), bias=False)
        self.attn_out = nn.Linear(attn_inner, dim, bias=False)
        self.ff_out = nn.Sequential(SwiGLU(), nn.Linear(ff_inner, dim, bias=False))
        self.register_buffer("mask", None, persistent=False)
        self.register_buffer("pos", None, persistent=False)

    def causal_mask(self, n, device):
        if self.mask is not None and self.mask.shape[-1] >= n:
            return self.mask[:n, :n]
        mask = torch.ones((n, n), device=device, dtype=torch.bool).triu(1)
        self.register_buffer("mask", mask, persistent=False)
        return mask

    def rotary_table(self, n, device):
        if self.pos is not None and self.pos.shape[-2] >= n:
            return self.pos[:n]
        pos = self.rotary(n, device)
        self.register_buffer("pos", pos, persistent=False)
        return pos

    def forward(self, x):
        b, n, _ = x.shape
        x = self.norm(x)
        q, k, v, ff = self.fused_proj(x).split(self.split_sizes, dim=-1)
        q = q.view(b, n, self.heads, self.dim_head).transpose(1, 2)  # k and v: one head shared by every query head
        pos = self.rotary_table(n, x.device)
        q, k = with_rotary(pos, q), with_rotary(pos, k)
        sim = torch.einsum("bhid,bjd->bhij", q * self.scale, k)
        sim = sim.masked_fill(self.causal_mask(n, x.device), -torch.finfo(sim.dtype).max)
        out = torch.einsum("bhij,bjd->bhid", sim.softmax(dim=-1), v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.attn_out(out) + self.ff_out(ff)


def PaLM(*, dim, num_tokens, depth, dim_head=64, heads=8, ff_mult=4):
    net = nn.Sequential(
        nn.Embedding(num_tokens, dim),
        *[Residual(ParallelBlock(dim=dim, dim_head=dim_head, heads=heads, ff_mult=ff_mult)) for _ in range(depth)],
        LayerNorm(dim),
        nn.Linear(dim, num_tokens, bias=False),
    )
    net[-1].weight = net[0].weight
    nn.init.normal_(net[0].weight, std=0.02)
    return net


def tiny_palm():
    return PaLM(dim=16, num_tokens=29, depth=3, dim_head=4, heads=4)
