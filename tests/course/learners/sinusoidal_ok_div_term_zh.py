import math

import torch


def sinusoidal_encoding(max_len, d_model):
    # 和 Annotated Transformer 一样，用 exp 和 log 算 div_term
    位置 = torch.arange(0, max_len).unsqueeze(1).double()
    div_term = torch.exp(torch.arange(0, d_model, 2).double() * -(math.log(10000.0) / d_model))
    表 = torch.zeros(max_len, d_model, dtype=torch.float64)
    表[:, 0::2] = torch.sin(位置 * div_term)
    表[:, 1::2] = torch.cos(位置 * div_term)
    return 表
