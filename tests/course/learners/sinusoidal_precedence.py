import torch


def sinusoidal_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    pos = torch.arange(max_len).unsqueeze(1).float()
    i = torch.arange(0, d_model, 2).float()
    angle = pos / 10000 ** 2 * i / d_model  # <-- pitfall exponent_precedence
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe
