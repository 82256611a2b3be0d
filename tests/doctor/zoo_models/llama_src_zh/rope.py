# Re-typed after datawhalechina/base-nlp code/C6/llama2/src/rope.py (see __init__.py): complex RoPE table,
# rotation in float32, repeat_kv for grouped-query attention.
import torch


def rope_table(head_dim, length, base=10000.0):
    # 每一对通道一个频率，位置 t 的旋转角为 t * freq
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    angles = torch.outer(torch.arange(length), inv).float()
    return torch.polar(torch.ones_like(angles), angles)


def _broadcastable(table, x):
    return table.view(*[n if i in (1, x.ndim - 1) else 1 for i, n in enumerate(x.shape)])


def rotate(q, k, table):
    qc = torch.view_as_complex(q.float().reshape(*q.shape[:-1], -1, 2))
    kc = torch.view_as_complex(k.float().reshape(*k.shape[:-1], -1, 2))
    q_out = torch.view_as_real(qc * _broadcastable(table, qc)).flatten(3)
    k_out = torch.view_as_real(kc * _broadcastable(table, kc)).flatten(3)
    return q_out.type_as(q), k_out.type_as(q)


def repeat_kv(x, n_rep):
    b, t, n_kv, d = x.shape
    if n_rep == 1:
        return x
    return x[:, :, :, None, :].expand(b, t, n_kv, n_rep, d).reshape(b, t, n_kv * n_rep, d)
