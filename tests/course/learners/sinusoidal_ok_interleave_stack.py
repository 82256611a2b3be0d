import torch


def sinusoidal_encoding(max_len, d_model):
    inv = 1.0 / (10000 ** (torch.arange(0, d_model, 2).double() / d_model))
    ang = torch.outer(torch.arange(max_len).double(), inv)
    return torch.stack((ang.sin(), ang.cos()), dim=-1).flatten(1)
