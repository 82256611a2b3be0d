import torch


def padding_mask(lengths, max_len):
    掩码 = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for 行, 长度 in enumerate(lengths):
        掩码[行, : int(长度)] = True  # 真实 token
    return 掩码


def causal_mask(t):
    掩码 = torch.zeros(t, t, dtype=torch.bool)
    for i in range(t):
        for j in range(i + 1):
            掩码[i, j] = True
    return 掩码
