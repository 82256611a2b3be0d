import torch


def sinusoidal_encoding(max_len, d_model):
    pe = torch.zeros(max_len, d_model, dtype=torch.float64)
    for pos in range(max_len):
        for i in range(d_model):
            freq = 10000 ** (i / d_model)  # <-- pitfall exponent_uses_dimension_index
            pe[pos, i] = torch.sin(torch.tensor(pos / freq)) if i % 2 == 0 else torch.cos(torch.tensor(pos / freq))
    return pe
