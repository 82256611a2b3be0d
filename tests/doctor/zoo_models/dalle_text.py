# Re-typed after lucidrains/DALLE-pytorch dalle_pytorch.py, its text half only: token ids padded with 0, a learned
# position embedding per text position, an einops-free pre-norm Transformer (lucidrains' PreNorm/Attention/FeedForward
# with GEGLU), a to_logits = Sequential(LayerNorm, Linear) head, positional sizes (num_text_tokens, dim, heads, depth,
# text_seq_len). As DALLE's forward(text, image, return_loss=False), the loss is made inside from the text itself
# (`labels = text[:, 1:]` against `logits[:, :-1]`) and only the loss is returned when return_loss=True: the caller
# cannot mark the pads, the model must leave them out.
#   TextTransformer         the loss after lucidrains/DALLE-pytorch PR #58 ("just set ignore index to 0, which is
#                           padding by convention").
#   TextTransformerPadLoss  real bug: lucidrains/DALLE-pytorch issue #57 ("ignore_index defined but not used":
#                           `self.ignore_index` is stored but F.cross_entropy(...) is called without it, so padding
#                           positions are trained on).
import torch
import torch.nn.functional as F
from torch import nn


class PreNorm(nn.Module):
    def __init__(self, dim, fn):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fn = fn

    def forward(self, x, **kwargs):
        return self.fn(self.norm(x), **kwargs)


class GEGLU(nn.Module):
    def forward(self, x):
        x, gates = x.chunk(2, dim=-1)
        return x * F.gelu(gates)


class FeedForward(nn.Module):
    def __init__(self, dim, mult=4, dropout=0.):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(dim, dim * mult * 2),
            GEGLU(),
            nn.Dropout(dropout),
            nn.Linear(dim * mult, dim),
        )

    def forward(self, x):
        return self.net(x)


class Attention(nn.Module):
    def __init__(self, dim, seq_len, causal=True, heads=8, dim_head=64, dropout=0.):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.seq_len = seq_len
        self.scale = dim_head ** -0.5
        self.causal = causal
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout))

    def forward(self, x, mask=None):
        b, n, _, h = *x.shape, self.heads
        qkv = self.to_qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, n, h, -1).transpose(1, 2) for t in qkv)
        dots = torch.einsum('bhid,bhjd->bhij', q, k) * self.scale
        mask_value = -torch.finfo(dots.dtype).max
        if mask is not None:
            dots.masked_fill_(~mask[:, None, None, :], mask_value)
        if self.causal:
            i, j = dots.shape[-2:]
            causal_mask = torch.ones(i, j, device=x.device).triu_(j - i + 1).bool()
            dots.masked_fill_(causal_mask, mask_value)
        attn = dots.softmax(dim=-1)
        out = torch.einsum('bhij,bhjd->bhid', attn, v)
        out = out.transpose(1, 2).reshape(b, n, -1)
        return self.to_out(out)


class Transformer(nn.Module):
    def __init__(self, *, dim, depth, seq_len, causal=True, heads=8, dim_head=64, ff_mult=4):
        super().__init__()
        self.layers = nn.ModuleList([])
        for _ in range(depth):
            self.layers.append(nn.ModuleList([
                PreNorm(dim, Attention(dim, seq_len, causal=causal, heads=heads, dim_head=dim_head)),
                PreNorm(dim, FeedForward(dim, mult=ff_mult)),
            ]))

    def forward(self, x, mask=None):
        for attn, ff in self.layers:
            x = x + attn(x, mask=mask)
            x = x + ff(x)
        return x


class TextTransformer(nn.Module):
    def __init__(self, num_text_tokens, dim, heads, depth, text_seq_len, ignore_index=0):
        super().__init__()
        self.num_text_tokens = num_text_tokens
        self.text_emb = nn.Embedding(num_text_tokens, dim)
        self.text_pos_emb = nn.Embedding(text_seq_len, dim)
        self.text_seq_len = text_seq_len
        self.transformer = Transformer(dim=dim, causal=True, seq_len=text_seq_len, depth=depth, heads=heads,
                                       dim_head=dim // heads)
        self.to_logits = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, self.num_text_tokens))
        self.ignore_index = ignore_index  # 0: the tokenizer's padding id

    def text_loss(self, logits, labels):
        return F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=self.ignore_index)

    def forward(self, text, mask=None, return_loss=False):
        if mask is None:
            mask = text != 0
        tokens = self.text_emb(text)
        tokens = tokens + self.text_pos_emb(torch.arange(text.shape[1], device=text.device))
        out = self.transformer(tokens, mask=mask)
        logits = self.to_logits(out)
        if not return_loss:
            return logits
        labels = text[:, 1:]
        return self.text_loss(logits[:, :-1], labels)


class TextTransformerPadLoss(TextTransformer):
    def text_loss(self, logits, labels):
        return F.cross_entropy(logits.transpose(1, 2), labels)
