import torch


def split_heads(x, n_heads):
    # one slice of the features per head
    return torch.stack(x.chunk(n_heads, dim=-1), dim=1)


def merge_heads(x):
    return torch.cat(x.unbind(1), dim=-1)
