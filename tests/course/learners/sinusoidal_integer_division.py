import math

import torch


def sinusoidal_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i // d_model)  # <-- pitfall integer_division
            pe[pos, 2 * i] = math.sin(angle)
            pe[pos, 2 * i + 1] = math.cos(angle)
    return pe
