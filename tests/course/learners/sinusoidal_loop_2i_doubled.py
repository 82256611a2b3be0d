import math

import torch


def sinusoidal_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            pe[pos, i] = math.sin(pos / (10000 ** ((2 * i) / d_model)))  # <-- pitfall exponent_doubled
            pe[pos, i + 1] = math.cos(pos / (10000 ** ((2 * i) / d_model)))
    return pe
