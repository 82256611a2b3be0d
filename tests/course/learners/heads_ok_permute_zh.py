def split_heads(x, n_heads):
    批, 长度, 维度 = x.shape
    # 先 reshape 再换轴
    return x.view(批, 长度, n_heads, 维度 // n_heads).permute(0, 2, 1, 3)


def merge_heads(x):
    批, 头数, 长度, 每头 = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(批, 长度, 头数 * 每头)
