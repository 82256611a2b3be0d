import torch


def padding_mask(lengths, max_len):
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len).expand(len(lengths), max_len) < lengths.unsqueeze(-1)


def causal_mask(t):
    # 未来的位置是 triu(1)，取反就是能看到的位置
    return ~torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
