import torch


def padding_mask(lengths, max_len):
    idx = torch.arange(max_len).expand(len(lengths), max_len)
    return idx <= lengths.unsqueeze(1)  # <-- pitfall padding_off_by_one


def causal_mask(t):
    return ~torch.ones(t, t, dtype=torch.bool).triu(1)
