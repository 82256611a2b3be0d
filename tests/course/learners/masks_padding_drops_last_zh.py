import torch


def padding_mask(lengths, max_len):
    # 位置从 1 开始数，第 1..length 个是真实 token
    位置 = torch.arange(1, max_len + 1)
    return 位置[None, :] < lengths[:, None]  # <-- pitfall padding_off_by_one


def causal_mask(t):
    return torch.tril(torch.ones(t, t)).bool()
