import torch


def sinusoidal_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freqs = 1.0 / 10000 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = pos * freqs
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1)  # <-- pitfall halves_not_interleaved
