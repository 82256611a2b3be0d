import torch


def padding_mask(lengths, max_len):
    """lengths: (B,) real tokens per row (padding after them). Returns (B, S) bool, True on real tokens."""
    lengths = torch.as_tensor(lengths)
    return torch.arange(max_len)[None, :] < lengths[:, None]  # (B, S)


def causal_mask(t):
    """(T, T) bool, True where query i may attend to key j, i.e. j <= i (itself and what came before)."""
    return torch.ones(t, t, dtype=torch.bool).tril()  # (T, S) lower triangle with the diagonal
