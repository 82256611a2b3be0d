import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len)[None] < lengths[:, None]


def causal_mask(t):
    return torch.triu(torch.full((t, t), float("-inf")), diagonal=1)  # <-- pitfall wrong_dtype
