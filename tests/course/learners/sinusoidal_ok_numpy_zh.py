import numpy as np
import torch


def sinusoidal_encoding(max_len, d_model):
    # 先用 numpy 算角度表，再转成 tensor
    角度 = np.arange(max_len)[:, None] / np.power(10000, (2 * (np.arange(d_model)[None, :] // 2)) / d_model)
    角度[:, 0::2] = np.sin(角度[:, 0::2])
    角度[:, 1::2] = np.cos(角度[:, 1::2])
    return torch.from_numpy(角度)
