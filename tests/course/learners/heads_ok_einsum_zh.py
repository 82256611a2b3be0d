import torch


def split_heads(x, n_heads):
    # 用 unflatten 把最后一维拆成 (头数, 每头维度)，再把头换到前面
    return x.unflatten(-1, (n_heads, -1)).permute(0, 2, 1, 3)


def merge_heads(x):
    return torch.einsum("bhtd->bthd", x).flatten(2)
