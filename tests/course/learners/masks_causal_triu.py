import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len)[None] < lengths[:, None]


def causal_mask(t):
    # 上三角置为 True
    return torch.triu(torch.ones(t, t, dtype=torch.bool))  # <-- pitfall causal_future
