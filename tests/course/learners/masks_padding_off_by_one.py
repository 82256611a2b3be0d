import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len).unsqueeze(0) <= lengths.unsqueeze(1)  # <-- pitfall padding_off_by_one


def causal_mask(t):
    return torch.tril(torch.ones(t, t)).bool()
