# flatten B and H, then one fused scale-and-multiply
import torch


def attention(q, k, v, mask=None):
    b, h, t, dh = q.shape
    s = k.shape[2]
    q3, k3, v3 = q.reshape(b * h, t, dh), k.reshape(b * h, s, dh), v.reshape(b * h, s, dh)
    scores = torch.baddbmm(torch.zeros(b * h, t, s, dtype=q.dtype), q3, k3.transpose(1, 2), beta=0.0,
                           alpha=dh ** -0.5).view(b, h, t, s)
    if mask is not None:
        scores = scores.masked_fill(mask.logical_not(), float("-inf"))
    w = torch.softmax(scores, dim=-1)
    return (w.view(b * h, t, s) @ v3).view(b, h, t, dh), w
