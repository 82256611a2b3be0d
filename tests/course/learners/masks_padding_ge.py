import torch


def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]  # <-- pitfall padding_inverted


def causal_mask(t):
    return torch.tril(torch.ones(t, t)) == 1
