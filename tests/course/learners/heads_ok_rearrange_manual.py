import torch


def split_heads(x, n_heads):
    b, t, d = x.shape
    heads = torch.stack(x.split(d // n_heads, dim=-1), dim=1)  # (B, H, T, Dh)
    return heads


def merge_heads(x):
    return torch.cat(x.unbind(dim=1), dim=-1)
