import torch


def split_heads(x, n_heads):
    b, t, d = x.shape
    # (B, T, D) -> (B, T, Dh, H) -> (B, H, T, Dh)
    x = x.view(b, t, d // n_heads, n_heads)  # <-- pitfall heads_interleaved
    return x.permute(0, 3, 1, 2)


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)
