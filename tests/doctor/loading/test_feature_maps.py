"""Attention over feature maps (B, C, H, W) given to the doctor, which feeds (B, T, D): refused in one line saying
what was expected, never the reshape's raw shape error. Re-typed after heykeetae/Self-Attention-GAN sagan_models.py
(``Self_Attn``: 1x1 Conv2d query/key/value, ``m_batchsize, C, width, height = x.size()``, at 8714a54) and
openai/guided-diffusion unet.py (``AttentionBlock``: ``b, c, *spatial = x.shape`` in a ``_forward`` the forward
hands to a checkpoint helper, GroupNorm and Conv1d, at 22e0df8)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from anatomy.doctor import CheckError, check
from anatomy.doctor.loading.feature_maps import feature_maps


class MapAttention(nn.Module):  # the SAGAN layer, in other words
    def __init__(self, channels, n_heads):
        super().__init__()
        self.q = nn.Conv2d(channels, channels // 8 or 1, 1)
        self.k = nn.Conv2d(channels, channels // 8 or 1, 1)
        self.v = nn.Conv2d(channels, channels, 1)
        self.gain = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        n, c, h, w = x.size()
        q = self.q(x).view(n, -1, h * w).permute(0, 2, 1)
        a = torch.softmax(torch.bmm(q, self.k(x).view(n, -1, h * w)), dim=-1)
        out = torch.bmm(self.v(x).view(n, -1, h * w), a.permute(0, 2, 1)).view(n, c, h, w)
        return self.gain * out + x, a


class SpatialBlock(nn.Module):  # the diffusion U-Net's block: no 2-D module, the shape unpacked in a helper
    def __init__(self, channels, n_heads):
        super().__init__()
        self.heads, self.norm = n_heads, nn.GroupNorm(4, channels)
        self.qkv, self.proj = nn.Conv1d(channels, 3 * channels, 1), nn.Conv1d(channels, channels, 1)

    def forward(self, x):
        return self._forward(x)

    def _forward(self, x):
        b, c, *spatial = x.shape
        x = x.reshape(b, c, -1)
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=1)
        a = torch.softmax(q.transpose(1, 2) @ k / (c**0.5), dim=-1)
        return (x + self.proj(v @ a.transpose(1, 2))).reshape(b, c, *spatial)


class SequenceAttention(nn.Module):  # unpacks four sizes too, but of q (B, H, T, Dh), not of its input
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.qkv = n_heads, nn.Linear(d_model, 3 * d_model)

    def forward(self, x):
        q = self.qkv(x)
        b, h, t, d = q.shape
        return x


def test_what_reads_as_a_feature_map_module():
    assert feature_maps(MapAttention(16, 4)) == "it holds Conv2d q"
    assert "(B, C, *spatial)" in feature_maps(SpatialBlock(16, 4))
    assert feature_maps(SequenceAttention(16, 4)) is None


@pytest.mark.parametrize("cls", [MapAttention, SpatialBlock])
def test_a_feature_map_attention_is_refused_in_one_line(cls):
    with pytest.raises(CheckError) as err:
        check(cls)
    said = str(err.value)
    assert "\n" not in said and "works on feature maps (B, C, H, W)" in said and "not on a sequence (B, T, D)" in said
    assert "(2, 6, 16)" in said and "--factory" in said
