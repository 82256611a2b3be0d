# a research-repo style: view + permute, and a merge through contiguous().view
def split_heads(x, n_heads):
    b, t, c = x.size()
    return x.view(b, t, n_heads, c // n_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    b, nh, t, hs = x.size()
    return x.permute(0, 2, 1, 3).contiguous().view(b, t, nh * hs)
