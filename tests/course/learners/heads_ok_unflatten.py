def split_heads(x, n_heads):
    return x.unflatten(-1, (n_heads, -1)).transpose(1, 2)


def merge_heads(x):
    return x.transpose(1, 2).flatten(2)
