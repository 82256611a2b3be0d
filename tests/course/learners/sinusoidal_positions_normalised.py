import torch


def sinusoidal_encoding(max_len, d_model):
    """Positions as fractions of the sequence, so the table does not depend on max_len (I thought)."""
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1) / max_len  # <-- pitfall positions_normalised
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = pos / torch.pow(10000.0, two_i / d_model)
    table = torch.stack([torch.sin(angle), torch.cos(angle)], dim=-1)  # (P, D/2, 2)
    return table.reshape(max_len, d_model)
