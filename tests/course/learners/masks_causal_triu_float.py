import torch


def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None] < lengths[:, None]


def causal_mask(t):
    # the "subsequent mask" of the annotated transformer, then I forgot the == 0
    return torch.triu(torch.ones(t, t), diagonal=1).bool()  # <-- pitfall causal_inverted
