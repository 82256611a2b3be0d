import torch


def sinusoidal_encoding(max_len, d_model):
    position = torch.arange(1, max_len + 1, dtype=torch.float).unsqueeze(1)  # <-- pitfall positions_from_one
    div = torch.pow(10000.0, torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position / div)
    pe[:, 1::2] = torch.cos(position / div)
    return pe
