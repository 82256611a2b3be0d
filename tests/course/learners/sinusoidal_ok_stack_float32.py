import torch


def sinusoidal_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    freq = 1.0 / (10000 ** (torch.arange(0, d_model, 2, dtype=torch.float32) / d_model))
    angle = pos * freq  # (P, D/2)
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # (P, D/2, 2) -> (P, D)
