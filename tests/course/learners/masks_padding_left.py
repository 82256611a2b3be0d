import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len)[None, :] >= (max_len - lengths)[:, None]  # <-- pitfall padding_on_the_left


def causal_mask(t):
    return torch.tril(torch.ones(t, t)).bool()
