# Re-typed after lucidrains/PaLM-pytorch palm_pytorch/palm_pytorch.py before commit 49232e1 (which moved one line):
# the model is a function returning nn.Sequential(Embedding, *ParallelResidual(attention, feed-forward), LayerNorm,
# Linear) with the head tied to the embedding; each ParallelResidual returns x + sum(f(x) for f in its branches); the
# attention branch owns its bias-free LayerNorm, multi-query (one shared k and v head), rotary positions, a triu
# causal mask; the feed-forward branch is Sequential(LayerNorm, Linear, SwiGLU, Linear). einops replaced by views.
#   tiny_palm_unnormed   real: q, k and v are projected from the raw x, and x is normalised only on the next line,
#                        so the attention's norm runs and its output is never used (fixed in 49232e1).
#   tiny_palm_normed     correct: the same model with the projections after the norm.
import torch
import torch.nn.functional as F
from torch import nn


class BiasFreeLayerNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(dim))
        self.register_buffer("beta", torch.zeros(dim))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], self.gamma, self.beta)


class ParallelResidual(nn.Module):
    def __init__(self, *branches):
        super().__init__()
        self.branches = nn.ModuleList(branches)

    def forward(self, x):
        return x + sum(branch(x) for branch in self.branches)


def half_turn(t):
    first, second = t.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class GatedSiLU(nn.Module):
    def forward(self, x):
        value, gate = x.chunk(2, dim=-1)
        return value * F.silu(gate)


class MultiQueryAttention(nn.Module):
    project_first = True  # the published slip: q, k, v read x before it is normalised

    def __init__(self, dim, dim_head, heads):
        super().__init__()
        self.heads, self.dim_head = heads, dim_head
        self.norm = BiasFreeLayerNorm(dim)
        self.to_q = nn.Linear(dim, heads * dim_head, bias=False)
        self.to_kv = nn.Linear(dim, 2 * dim_head, bias=False)
        self.to_out = nn.Linear(heads * dim_head, dim, bias=False)
        self.register_buffer("inv_freq", 1.0 / 10000 ** (torch.arange(0, dim_head, 2).float() / dim_head))

    def project(self, x):
        k, v = self.to_kv(x).chunk(2, dim=-1)
        return self.to_q(x), k, v

    def forward(self, x):
        b, n, _ = x.shape
        if self.project_first:
            q, k, v = self.project(x)
            x = self.norm(x)
        else:
            x = self.norm(x)
            q, k, v = self.project(x)
        q = q.view(b, n, self.heads, self.dim_head).transpose(1, 2)
        angles = torch.outer(torch.arange(n, dtype=self.inv_freq.dtype), self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        q = q * angles.cos() + half_turn(q) * angles.sin()
        k = k * angles.cos() + half_turn(k) * angles.sin()
        scores = torch.einsum("bhid,bjd->bhij", q * self.dim_head**-0.5, k)
        future = torch.ones(n, n, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, -torch.finfo(scores.dtype).max)
        mixed = torch.einsum("bhij,bjd->bhid", scores.softmax(dim=-1), v)
        return self.to_out(mixed.transpose(1, 2).reshape(b, n, -1))


class NormedFirstAttention(MultiQueryAttention):
    project_first = False


def palm(attention, *, dim, num_tokens, depth, dim_head, heads, ff_mult=4):
    layers = [
        ParallelResidual(
            attention(dim, dim_head, heads),
            nn.Sequential(
                BiasFreeLayerNorm(dim),
                nn.Linear(dim, 2 * ff_mult * dim, bias=False),
                GatedSiLU(),
                nn.Linear(ff_mult * dim, dim, bias=False),
            ),
        )
        for _ in range(depth)
    ]
    net = nn.Sequential(nn.Embedding(num_tokens, dim), *layers, BiasFreeLayerNorm(dim), nn.Linear(dim, num_tokens, bias=False))
    net[-1].weight = net[0].weight
    nn.init.normal_(net[0].weight, std=0.02)
    return net


def tiny_palm_unnormed():
    return palm(MultiQueryAttention, dim=16, num_tokens=29, depth=3, dim_head=4, heads=4)


def tiny_palm_normed():
    return palm(NormedFirstAttention, dim=16, num_tokens=29, depth=3, dim_head=4, heads=4)
