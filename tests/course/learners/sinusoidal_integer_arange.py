import torch


def sinusoidal_encoding(max_len, d_model):
    pos = torch.arange(max_len).unsqueeze(1)
    i2 = torch.arange(0, d_model, 2)
    angle = pos / torch.pow(10000, i2 // d_model)  # <-- pitfall integer_division
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angle), torch.cos(angle)
    return pe
