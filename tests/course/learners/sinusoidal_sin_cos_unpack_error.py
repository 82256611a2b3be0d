import torch


def sinusoidal_encoding(max_len, d_model):
    pos = torch.arange(max_len).float()[:, None]
    inv = 10000 ** (-torch.arange(0, d_model, 2).float() / d_model)
    sin, cos = torch.sin(pos * inv)  # <-- error
    return torch.cat([sin, cos], -1)
