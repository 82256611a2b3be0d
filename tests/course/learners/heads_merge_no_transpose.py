def split_heads(x, n_heads):
    b, t, d = x.shape
    return x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_heads(x):
    b, h, t, dh = x.shape
    # 并头：直接 reshape 回去
    return x.reshape(b, t, h * dh)  # <-- pitfall merge_without_transpose
