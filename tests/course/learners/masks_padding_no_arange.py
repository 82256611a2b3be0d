import torch


def padding_mask(lengths, max_len):
    mask = torch.zeros(len(lengths), max_len, dtype=torch.bool)
    for row, n in enumerate(lengths.tolist()):
        mask[row, :n] = True
    return mask


def causal_mask(t):
    mask = torch.zeros(t, t, dtype=torch.bool)
    for i in range(t):
        mask[i, : i + 2] = True  # <-- pitfall causal_sees_next
    return mask
