import torch


def split_heads(x, n_heads):
    b, t, d = x.shape
    # AutoInt-style: fold the heads into the batch, then bring them out again
    folded = x.view(b * n_heads, t, d // n_heads)
    return folded.view(b, n_heads, t, d // n_heads)  # <-- pitfall split_without_transpose


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)
