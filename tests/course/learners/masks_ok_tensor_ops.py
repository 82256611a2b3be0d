import torch


def padding_mask(lengths, max_len):
    return lengths.unsqueeze(1) > torch.arange(max_len).unsqueeze(0)


def causal_mask(t):
    i = torch.arange(t)
    return i[:, None] >= i[None, :]
