import torch


def sinusoidal_encoding(max_len, d_model):
    # 指数从 0 均匀取到 1，一共 d_model/2 个
    指数 = torch.linspace(0, 1, d_model // 2)  # <-- pitfall frequency_grid_wrong
    频率 = 1.0 / (10000 ** 指数)
    位置 = torch.arange(max_len, dtype=torch.float32)[:, None]
    角度 = 位置 * 频率[None, :]
    编码 = torch.zeros(max_len, d_model)
    编码[:, 0::2] = torch.sin(角度)
    编码[:, 1::2] = torch.cos(角度)
    return 编码
