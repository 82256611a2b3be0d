import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len)[None, :] < lengths[:, None]


def causal_mask(t):
    return torch.ones(t, t, dtype=torch.bool).tril(diagonal=-1)  # <-- pitfall causal_no_diagonal
