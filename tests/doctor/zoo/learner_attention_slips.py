"""Attention modules with the slips learners make that the post does not list (issue 29): the softmax over the
wrong axis, the scale after the softmax or from the wrong size, dropout left on at evaluation, heads laid out
interleaved, dangerous fills; and one slip no fault of the zoo reproduces. Written for the doctor's tests, in the
plain style of a course's solution; each class is built as CLASS(d_model, n_heads)."""

import math

import torch
import torch.nn.functional as F
from torch import nn


class Plain(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.w_q, self.w_k, self.w_v, self.w_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.h, self.d_k).transpose(1, 2)

    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(scores, dim=-1)

    def forward(self, x, mask=None):
        b, t, _ = x.shape
        q, k, v = self.heads(self.w_q(x)), self.heads(self.w_k(x)), self.heads(self.w_v(x))
        w = self.weights(q, k, mask)
        return self.w_o((w @ v).transpose(1, 2).reshape(b, t, -1))


class SoftmaxOverHeads(Plain):
    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        return torch.softmax(scores, dim=1)  # <-- softmax_wrong_axis: (B, H, T, S), dim 1 is the heads


class SoftmaxOverQueriesMasked(Plain):
    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        return F.softmax(scores, dim=2)  # <-- softmax_wrong_axis: dim 2 is the queries


class ScaleAfterSoftmax(Plain):
    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(scores, dim=-1) / math.sqrt(self.d_k)  # <-- scale_after_softmax


class ScaleFromKeyLength(Plain):
    def weights(self, q, k, mask):
        k = k.transpose(-2, -1)
        scores = q @ k / math.sqrt(k.size(-1))  # <-- scale_from_wrong_size: k is (B, H, Dh, S) here
        if mask is not None:
            scores = scores.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(scores, dim=-1)


class FunctionalDropout(Plain):
    def weights(self, q, k, mask):
        w = super().weights(q, k, mask)
        return F.dropout(w, 0.1)  # <-- dropout_at_eval: training defaults to True


class ModuleDropout(Plain):
    """Correct: an nn.Dropout is the identity in eval mode."""

    def __init__(self, d_model, n_heads):
        super().__init__(d_model, n_heads)
        self.drop = nn.Dropout(0.1)

    def weights(self, q, k, mask):
        return self.drop(super().weights(q, k, mask))


class GuardedFunctionalDropout(Plain):
    """Correct: functional dropout told the module's mode."""

    def weights(self, q, k, mask):
        return F.dropout(super().weights(q, k, mask), 0.1, training=self.training)


class HeadsInterleaved(Plain):
    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, self.d_k, self.h).permute(0, 3, 1, 2)  # <-- heads_interleaved


class FillTwoToThe32(Plain):
    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -2**32 + 1)  # <-- finite_mask_fill
        return torch.softmax(scores, dim=-1)


class FillNineE15(Plain):
    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(mask == 0, -9e15)  # <-- finite_mask_fill
        return torch.softmax(scores, dim=-1)


class SigmoidWeights(Plain):
    """A slip no fault of the zoo reproduces, alone or paired: a sigmoid where the softmax was meant."""

    def weights(self, q, k, mask):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        return torch.sigmoid(scores)
