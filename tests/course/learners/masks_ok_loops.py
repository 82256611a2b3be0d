import torch


def padding_mask(lengths, max_len):
    out = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for i, n in enumerate(lengths):
        out[i, : int(n)] = True
    return out


def causal_mask(t):
    return ~torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
