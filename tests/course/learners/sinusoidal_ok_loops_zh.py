import math

import torch


def sinusoidal_encoding(max_len, d_model):
    编码 = torch.zeros(max_len, d_model, dtype=torch.float64)
    for 位置 in range(max_len):
        for i in range(0, d_model, 2):  # i 就是公式里的 2i
            角度 = 位置 / (10000 ** (i / d_model))
            编码[位置, i] = math.sin(角度)
            编码[位置, i + 1] = math.cos(角度)
    return 编码
