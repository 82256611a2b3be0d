def split_heads(x, n_heads):
    b, t, d = x.shape
    x = x.transpose(1, 2)
    return x.reshape(b, n_heads, t, d // n_heads)  # <-- pitfall transpose_before_reshape


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)
