"""The exercises' longer texts: the whole model's skeleton code and rules, and the Chinese shape legends and
commented signatures; ``exercises.py`` holds everything else of each exercise."""

from __future__ import annotations

SHAPES_ZH = {
    "attention": "q: (B, H, T, Dh)   k, v: (B, H, S, Dh)   mask: 布尔型，True = 可以关注，可广播到 (B, H, T, S)\n"
    "out: (B, H, T, Dh)   weights: (B, H, T, S)",
    "heads": "split_heads: x (B, T, D) -> (B, H, T, Dh)，Dh = D // H\nmerge_heads: (B, H, T, Dh) -> (B, T, D)",
    "masks": "padding_mask: lengths (B,) -> (B, S) 布尔型   causal_mask: t -> (T, T) 布尔型   （True = 可以关注）",
    "mha": "x: (B, T, D) -> q, k, v (B, H, T, Dh) -> 分数 (B, H, T, S) -> out (B, T, D)",
    "sinusoidal": "max_len P，d_model D（偶数）-> (P, D)；第一行是位置 0",
    "layernorm": "x: (B, T, D) -> (B, T, D)；均值和方差在 D 上按 token 计算",
    "add_norm": "x: (B, T, D) -> (B, T, D)；sublayer：给定的模块 (B, T, D) -> (B, T, D)",
    "block": "x: (B, T, D) -> (B, T, D)；mask: 布尔型，True = 可以关注，可广播到 (B, H, T, S)；d_ff = 4 D",
    "tiny_lm": "内置语料的字符 -> 你的 Block × 2（因果掩码）-> 下一个字符的 logits",
    "gpt": "ids: (B, T) -> tok(ids) + 位置[:T]：(B, T, D) -> 你的 Block × L，每个都带因果掩码 (1, 1, T, T)\n"
    "-> 最后的 LayerNorm：(B, T, D) -> 与 tok 共享权重的输出头：(B, T, V)\n"
    "损失：logits[:, :-1] (B, T-1, V) 对 targets[:, 1:] (B, T-1)，忽略 PAD",
}

SIGNATURE_ZH = {  # a skeleton's comments in Chinese, where its code carries some
    "gpt": "PAD = 0  # 填充用的 token：ids 和 targets 在真实 token 之后用它补齐\n\n\n"
    "# 把 08_block.py 里你的 TransformerBlock（能通过 `anatomy learn check block` 的那个）粘贴到这里\n"
    "class TransformerBlock(nn.Module):\n    def __init__(self, d_model, n_heads, d_ff):\n"
    "        super().__init__()\n        ...\n\n    def forward(self, x, mask=None):\n        ...\n\n\n"
    "class GPT(nn.Module):\n    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):\n"
    "        super().__init__()\n        ...\n\n    def forward(self, ids, targets=None):\n"
    "        # ids: (B, T) 的 token id；targets: (B, T)，就是同一串 id（真实 token 之后是 PAD）：在这里错开\n"
    "        # 返回 logits (B, T, V) 和 loss（不传 targets 时为 None）\n        ...\n",
}

GPT_SIGNATURE = (
    "PAD = 0  # the padding token: ids and targets are padded with it, after the real tokens\n\n\n"
    "# your TransformerBlock from 08_block.py (it passes `anatomy learn check block`), pasted here\n"
    "class TransformerBlock(nn.Module):\n    def __init__(self, d_model, n_heads, d_ff):\n"
    "        super().__init__()\n        ...\n\n    def forward(self, x, mask=None):\n        ...\n\n\n"
    "class GPT(nn.Module):\n    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):\n"
    "        super().__init__()\n        ...\n\n    def forward(self, ids, targets=None):\n"
    "        # ids: (B, T) token ids; targets: (B, T) the same ids (PAD after the real tokens): shift them here\n"
    "        # return logits (B, T, V), loss (None without targets)\n        ...\n"
)

GPT_MUST: tuple[tuple[str, str], ...] = (
    (
        "x = tok(ids) + positions, once, before the blocks: the sinusoidal table (§3.2) or a learned "
        "nn.Embedding(block_size, d_model); the token embedding times sqrt(d_model) at most once",
        "x = tok(ids) + 位置，只加一次，在所有 Block 之前：正弦表（§3.2）或可学习的 nn.Embedding(block_size, "
        "d_model)；词嵌入最多乘一次 sqrt(d_model)",
    ),
    (
        "n_layers of your TransformerBlock(d_model, n_heads, 4 * d_model), every one given the causal mask "
        "(True = may attend)",
        "n_layers 个你的 TransformerBlock(d_model, n_heads, 4 * d_model)，每一个都传入因果掩码（True = 可以关注）",
    ),
    (
        "a final nn.LayerNorm(d_model) after the last block; the head nn.Linear(d_model, vocab_size, "
        "bias=False) shares the embedding's weight: one Parameter (self.head.weight = self.tok.weight)",
        "最后一个 Block 之后接 nn.LayerNorm(d_model)；输出头 nn.Linear(d_model, vocab_size, bias=False) 与词嵌入"
        "共享权重：同一个 Parameter（self.head.weight = self.tok.weight）",
    ),
    (
        "the loss: position t predicts token t+1, PAD ignored (ignore_index=PAD); forward(ids) alone: loss None",
        "损失：位置 t 预测第 t+1 个 token，忽略 PAD（ignore_index=PAD）；只传 ids 时损失为 None",
    ),
    (
        "no randomness in eval(): dropout through nn.Dropout or F.dropout(x, p, self.training)",
        "eval() 下没有随机性：dropout 用 nn.Dropout 或 F.dropout(x, p, self.training)",
    ),
)
