import torch


def sinusoidal_encoding(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / 10000 ** (2 * two_i / d_model)  # <-- pitfall exponent_doubled
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
