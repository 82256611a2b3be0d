import torch


def sinusoidal_encoding(max_len, d_model):
    位置编码 = torch.zeros(max_len, d_model)
    位置 = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
    偶数维 = torch.arange(0, d_model, 2, dtype=torch.float)
    角度 = 位置 / 10000 ** 偶数维 / d_model  # <-- pitfall exponent_precedence
    位置编码[:, 0::2] = torch.sin(角度)
    位置编码[:, 1::2] = torch.cos(角度)
    return 位置编码
