def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.view(b, n_heads, t, d // n_heads)  # <-- pitfall split_without_transpose


def merge_heads(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).reshape(b, t, h * dh)
