"""Call contracts learners write: keyword-only query=/key=/value=, sequence-first (T, B, D) inputs, a `mask=None`
default whose code still calls `mask.repeat`, a returned cache next to the output, `forward(x, *args)`, and a
forward that ends the process. Built as CLASS(d_model, n_heads)."""

import math
import sys

import torch
import torch.nn as nn


class _Base(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def heads(self, t):
        b, n, _ = t.shape
        return t.view(b, n, self.h, self.dk).transpose(1, 2)

    def attend(self, q, k, v, keep=None, scale=None):
        s = q @ k.transpose(-2, -1) / (math.sqrt(self.dk) if scale is None else scale)
        if keep is not None:
            s = s.masked_fill(~keep, float("-inf"))
        w = s.softmax(-1)
        o = (w @ v).transpose(1, 2).flatten(2)
        return self.out_proj(o), w


class KeywordOnly(_Base):
    def forward(self, *, query, key, value, attn_mask=None):
        keep = None if attn_mask is None else attn_mask[:, None, None, :].bool()
        out, _ = self.attend(self.heads(self.q_proj(query)), self.heads(self.k_proj(key)),
                             self.heads(self.v_proj(value)), keep)
        return out


class KeywordOnlyNoScale(_Base):
    def forward(self, *, query, key, value):
        out, _ = self.attend(self.heads(self.q_proj(query)), self.heads(self.k_proj(key)),
                             self.heads(self.v_proj(value)), scale=1.0)
        return out


class SeqFirst(nn.Module):
    """fairseq / torch.nn default: x is (T, B, D); key_padding_mask (B, S), True = padding"""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(d_model, n_heads)

    def forward(self, x, key_padding_mask=None):
        out, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask, need_weights=False)
        return out


class SeqFirstNoScale(_Base):
    """(T, B, D) in and out, written by hand, and the scores are not scaled"""

    def forward(self, x):
        x = x.transpose(0, 1)  # (B, T, D)
        out, _ = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)),
                             scale=1.0)
        return out.transpose(0, 1)


class MaskNoneRepeat(_Base):
    """mask=None is the default, but the code calls mask.repeat(...) anyway"""

    def forward(self, x, mask=None):
        keep = mask.repeat(1, 1, 1, 1).bool()  # (B, 1, 1, S)
        out, w = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)),
                             keep)
        return out, w


class MaskNoneRepeatScaledByDModel(_Base):
    def forward(self, x, mask=None):
        keep = mask.repeat(1, 1, 1, 1).bool()
        out, w = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)),
                             keep, scale=math.sqrt(self.h * self.dk))
        return out, w


class ReturnsCache(_Base):
    """returns (out, present): present = stack of k and v for the next step, not attention weights"""

    def forward(self, x):
        k, v = self.heads(self.k_proj(x)), self.heads(self.v_proj(x))
        out, _ = self.attend(self.heads(self.q_proj(x)), k, v)
        return out, torch.stack((k, v))  # (2, B, H, T, Dh)


class ReturnsState(_Base):
    """returns (out, state): a (B, D) summary for a recurrent wrapper"""

    def forward(self, x):
        out, _ = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)))
        return out, out.mean(1)


class VarArgs(_Base):
    """forward(x, *args): the extra arguments are for a wrapper, not a mask"""

    def forward(self, x, *args, **kwargs):
        out, _ = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)))
        return out


class VarArgsNoScale(_Base):
    def forward(self, x, *args):
        out, _ = self.attend(self.heads(self.q_proj(x)), self.heads(self.k_proj(x)), self.heads(self.v_proj(x)),
                             scale=1.0)
        return out


class ExitsInForward(_Base):
    def forward(self, x):
        sys.exit(0)  # a debugging leftover


class ExitsHard(_Base):
    """os._exit ends the process at once: no except catches it (checked only through `anatomy check`, which runs
    the learner's code in a child process; never put it in the in-process table)"""

    def forward(self, x):
        import os

        os._exit(0)


class ThroughNumpy(nn.Module):
    """the scores leave torch for numpy and come back (a notebook's quick experiment); names say nothing either"""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.alpha = nn.Linear(d_model, 3 * d_model)
        self.omega = nn.Linear(d_model, d_model)

    def forward(self, x):
        import numpy as np

        b, t, d = x.shape
        q, k, v = (z.reshape(b, t, self.h, self.dk).transpose(1, 2) for z in self.alpha(x).chunk(3, -1))
        s = (q @ k.transpose(-2, -1)).numpy() / np.sqrt(self.dk)
        w = np.exp(s - s.max(-1, keepdims=True))
        w = torch.from_numpy(w / w.sum(-1, keepdims=True))
        return self.omega((w @ v).transpose(1, 2).reshape(b, t, d))
