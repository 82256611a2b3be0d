import torch


def split_heads(x, n_heads):
    批, 长, 宽 = x.shape
    return x.reshape(批, 长, n_heads, 宽 // n_heads).transpose(1, 2)


def merge_heads(x):
    批, 头, 长, 每头 = x.shape
    # 把头放到最后再展平
    x = x.permute(0, 2, 3, 1)  # <-- pitfall heads_interleaved
    return x.reshape(批, 长, 头 * 每头)
