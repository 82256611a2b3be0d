import torch


def sinusoidal_encoding(max_len, d_model):
    位置 = torch.arange(1, max_len + 1, dtype=torch.float64).unsqueeze(1)  # <-- pitfall positions_from_one
    频率 = torch.exp(-torch.arange(0, d_model, 2, dtype=torch.float64) * torch.log(torch.tensor(10000.0)) / d_model)
    编码 = torch.zeros(max_len, d_model, dtype=torch.float64)
    编码[:, 0::2] = torch.sin(位置 * 频率)
    编码[:, 1::2] = torch.cos(位置 * 频率)
    return 编码
