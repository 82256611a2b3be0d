def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, dh = x.shape
    x = x.reshape(b, h * dh, t)  # <-- pitfall reshape_before_transpose
    return x.transpose(1, 2)
