import torch


def padding_mask(lengths, max_len):
    """d2l's sequence_mask, returning the booleans instead of filling."""
    return torch.arange(max_len, dtype=torch.float32)[None, :] < lengths[:, None]


def causal_mask(t):
    i = torch.arange(t)
    return i[:, None] >= i[None, :]
