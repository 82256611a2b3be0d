def split_heads(x, n_heads):
    """(B, T, D) -> (B, H, T, Dh): reshape first, then swap T and H."""
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)  # (B, T, H, Dh) -> (B, H, T, Dh)


def merge_heads(x):
    """(B, H, T, Dh) -> (B, T, D): swap back first, then reshape."""
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)  # (B, T, H, Dh) -> (B, T, D)
