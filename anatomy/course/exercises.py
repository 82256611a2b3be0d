"""The exercises of ``anatomy learn``: the post's sections, in its order, each a piece the learner writes.

Each exercise declares what the learner writes (functions or classes, with their signatures), the few lines of
the post it rests on (quoted in Chinese, with an English rendering), the shapes in the legend's letters, what must
hold, and a hint. The skeleton that ``anatomy learn start`` writes is generated from this table, so the texts live
here once; the grading is in ``functions.py`` (function exercises), ``modules.py`` (module exercises),
``tiny_lm.py`` (training the block) and ``gpt.py`` (the whole model).
"""

from __future__ import annotations

from dataclasses import dataclass

from anatomy.course.skeleton_texts import GPT_MUST, GPT_SIGNATURE, SHAPES_ZH


@dataclass(frozen=True)
class Exercise:
    id: str
    section: str  # the post's section
    title: tuple[str, str]  # (en, zh)
    entries: tuple[str, ...]  # the names the learner's file must define
    signature: str  # the skeleton's code: signatures with `...` bodies
    post: tuple[str, str]  # (zh quote of the post, its English rendering)
    shapes: str  # in the legend's letters
    must: tuple[tuple[str, str], ...]  # what must hold, (en, zh) each
    hint: tuple[str, str]
    file: str  # the skeleton's file name

    def text(self, pair: tuple[str, str], lang: str) -> str:
        return pair[1] if lang == "zh" else pair[0]

    def shape_text(self, lang: str) -> str:
        """The shapes in the legend's letters, with the words in the learner's language."""
        return SHAPES_ZH.get(self.id, self.shapes) if lang == "zh" else self.shapes


EXERCISES: tuple[Exercise, ...] = (
    Exercise(
        "attention",
        "§1.3",
        ("Scaled dot-product attention", "缩放点积注意力"),
        ("attention",),
        "def attention(q, k, v, mask=None):\n    # return out, weights\n    ...\n",
        (
            "计算softmax(QK^T / sqrt(d_k))得到注意力权重再用这份权重去加权求和Value……除以sqrt(d_k)的本质是把点积结果的方差"
            "重新拉回到1附近让softmax有正常的温度。",
            "softmax(QK^T / sqrt(d_k)) gives the attention weights, which then weight the sum of the values ... dividing "
            "by sqrt(d_k) brings the dot products' variance back to about 1, so the softmax has a normal temperature.",
        ),
        "q: (B, H, T, Dh)   k, v: (B, H, S, Dh)   mask: bool, True = may attend, broadcastable to (B, H, T, S)\n"
        "out: (B, H, T, Dh)   weights: (B, H, T, S)",
        (
            (
                "weights sum to 1 over the keys S in every row that may attend to something",
                "每一行（至少能看到一个键时）的权重在键维 S 上和为 1",
            ),
            (
                "hidden keys get weight 0: the mask is applied to the scores, before the softmax",
                "被遮住的键权重为 0：掩码作用在 softmax 之前的分数上",
            ),
            ("scores are divided by sqrt(Dh), the width of one head", "分数除以 sqrt(Dh)，即单个头的维度"),
            (
                "hidden scores are filled with float('-inf') or torch.finfo(dtype).min, never -1e9 (float16 cannot hold it)",
                "被遮住的分数填 float('-inf') 或 torch.finfo(dtype).min，不要用 -1e9（float16 放不下）",
            ),
        ),
        (
            "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)); masked_fill(~mask, float('-inf')) before "
            "torch.softmax(scores, dim=-1)",
            "scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))；在 torch.softmax(scores, dim=-1) 之前做 "
            "masked_fill(~mask, float('-inf'))",
        ),
        "01_attention.py",
    ),
    Exercise(
        "heads",
        "§2.1-2.2",
        ("Split and merge heads", "拆头与并头"),
        ("split_heads", "merge_heads"),
        "def split_heads(x, n_heads):\n    # (B, T, D) -> (B, H, T, Dh)\n    ...\n\n\n"
        "def merge_heads(x):\n    # (B, H, T, Dh) -> (B, T, D)\n    ...\n",
        (
            "先reshape成(batch, seq_len, 8, 64)再转置成(batch, 8, seq_len, 64)……reshape之后必须紧跟transpose如果顺序反了会把每个"
            "头的数据切得乱七八糟。",
            "first reshape to (batch, seq_len, 8, 64), then transpose to (batch, 8, seq_len, 64) ... the transpose must "
            "follow the reshape: in the other order every head's data is cut to pieces.",
        ),
        "split_heads: x (B, T, D) -> (B, H, T, Dh), Dh = D // H\nmerge_heads: (B, H, T, Dh) -> (B, T, D)",
        (
            (
                "head h of position t holds features h*Dh ... (h+1)*Dh - 1 of token t",
                "位置 t 的第 h 个头存放 token t 的第 h*Dh 到 (h+1)*Dh-1 维",
            ),
            ("merge_heads(split_heads(x, H)) gives x back exactly", "merge_heads(split_heads(x, H)) 精确还原 x"),
            (
                "split: reshape first, then transpose; merge: transpose first, then reshape (the post's order)",
                "拆头先 reshape 再 transpose；并头先 transpose 再 reshape（原文的顺序）",
            ),
        ),
        (
            "split: x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2); merge: x.transpose(1, 2).reshape(b, t, d)",
            "拆头：x.reshape(b, t, n_heads, d // n_heads).transpose(1, 2)；并头：x.transpose(1, 2).reshape(b, t, d)",
        ),
        "02_heads.py",
    ),
    Exercise(
        "masks",
        "§2.4",
        ("Padding mask and causal mask", "Padding Mask 与 Causal Mask"),
        ("padding_mask", "causal_mask"),
        "def padding_mask(lengths, max_len):\n    # (B, S) bool, True on real tokens\n    ...\n\n\n"
        "def causal_mask(t):\n    # (T, T) bool, True where query i may attend to key j\n    ...\n",
        (
            "Padding Mask用于把无效的padding位遮掉……Causal Mask用于自回归场景要求每个位置只能看到它自己以及之前的位置。",
            "the padding mask hides the padding positions ... the causal mask, for autoregressive models, lets each "
            "position see only itself and the positions before it.",
        ),
        "padding_mask: lengths (B,) -> (B, S) bool   causal_mask: t -> (T, T) bool   (True = may attend)",
        (
            (
                "padding comes after the real tokens; True marks a real token",
                "padding 在真实 token 之后；True 表示真实 token",
            ),
            (
                "causal: query i sees keys 0..i, itself included, never i+1",
                "因果：查询 i 看到键 0..i（包括自己），绝不看到 i+1",
            ),
        ),
        (
            "padding: torch.arange(max_len)[None, :] < lengths[:, None]; causal: torch.ones(t, t, dtype=torch.bool).tril()",
            "padding：torch.arange(max_len)[None, :] < lengths[:, None]；causal：torch.ones(t, t, dtype=torch.bool).tril()",
        ),
        "03_masks.py",
    ),
    Exercise(
        "mha",
        "§2.2",
        ("Multi-head attention", "多头注意力"),
        ("MultiHeadAttention",),
        "import torch\nfrom torch import nn\n\n\nclass MultiHeadAttention(nn.Module):\n"
        "    def __init__(self, d_model, n_heads):\n        super().__init__()\n        ...\n\n"
        "    def forward(self, x, mask=None):\n        # return out (B, T, D), weights (B, H, T, S)\n        ...\n",
        (
            "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。这里最反直觉的一点是多头计算完成后输入输出的维度完全一致。",
            "make Q/K/V ... split the heads ... attention per head ... merge the heads ... the output projection. The "
            "least intuitive point: after all of it, the output has exactly the input's shape.",
        ),
        "x: (B, T, D) -> q, k, v (B, H, T, Dh) -> scores (B, H, T, S) -> out (B, T, D)",
        (
            ("four Linear maps D -> D (q, k, v and the output)", "四个 D -> D 的线性层（q、k、v 与输出投影）"),
            (
                "each head attends in its own Dh features; scores scaled by sqrt(Dh)",
                "每个头在自己的 Dh 维里做注意力，分数除以 sqrt(Dh)",
            ),
            (
                "mask: bool, True = may attend, applied before the softmax",
                "mask 为布尔型，True 表示可以关注，在 softmax 之前使用",
            ),
            (
                "all four used: q, k and v from three different projections (one fused Linear(D, 3 D) split in three counts), "
                "the merged heads through the output projection",
                "四个都要用上：q、k、v 来自三个不同的投影（一个 Linear(D, 3 D) 切成三份也算），并头结果要经过输出投影",
            ),
            (
                "hidden scores filled with float('-inf') or torch.finfo(dtype).min, never -1e9",
                "被遮住的分数填 float('-inf') 或 torch.finfo(dtype).min，不要用 -1e9",
            ),
            (
                "head h holds features h*Dh .. (h+1)*Dh - 1 (not interleaved); no randomness in eval mode",
                "第 h 个头是第 h*Dh 到 (h+1)*Dh-1 维（不交错）；eval 模式下没有随机性",
            ),
        ),
        (
            "use your split_heads, attention and merge_heads from the earlier exercises between the four nn.Linear",
            "在四个 nn.Linear 之间，用前面练习里写好的 split_heads、attention 和 merge_heads",
        ),
        "04_mha.py",
    ),
    Exercise(
        "sinusoidal",
        "§3.2",
        ("Sinusoidal positional encoding", "正弦位置编码"),
        ("sinusoidal_encoding",),
        "def sinusoidal_encoding(max_len, d_model):\n    # (max_len, D)\n    ...\n",
        (
            "PE(pos, 2i) = sin(pos / 10000^(2i/d_model))  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))其中pos是词在序列中的"
            "位置i是维度下标。",
            "PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)), where pos is "
            "the word's position and i the dimension index.",
        ),
        "max_len P, d_model D (even) -> (P, D); position 0 first",
        (
            (
                "even dimensions 2i are sines, odd dimensions 2i+1 cosines of the same angle",
                "偶数维 2i 是正弦，奇数维 2i+1 是同一角度的余弦",
            ),
            (
                "the pair (2i, 2i+1) shares the frequency 1 / 10000^(2i/D)",
                "一对维度 (2i, 2i+1) 共用频率 1 / 10000^(2i/D)",
            ),
            (
                "2i is the even dimension itself (0, 2, 4, ...): not i/D, not 2·2i/D, and a float division, not //",
                "2i 就是偶数维本身（0, 2, 4, ……）：不是 i/D，也不是 2·2i/D；用小数除法，不要用 //",
            ),
        ),
        (
            "angle = pos / 10000 ** (torch.arange(0, d, 2) / d); pe[:, 0::2] = sin(angle); pe[:, 1::2] = cos(angle)",
            "angle = pos / 10000 ** (torch.arange(0, d, 2) / d)；pe[:, 0::2] = sin(angle)；pe[:, 1::2] = cos(angle)",
        ),
        "05_sinusoidal.py",
    ),
    Exercise(
        "layernorm",
        "§4.2",
        ("LayerNorm by hand", "手写 LayerNorm"),
        ("LayerNorm",),
        "import torch\nfrom torch import nn\n\n\nclass LayerNorm(nn.Module):\n"
        "    def __init__(self, d_model, eps=1e-5):\n        super().__init__()\n        ...\n\n"
        "    def forward(self, x):\n        # (B, T, D) -> (B, T, D)\n        ...\n",
        (
            "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta其中gamma和beta是可学习的仿射参数……大家在复现时最好确认一下"
            "标准化是在最后一个维度上做的。",
            "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta, with gamma and beta learnable affine parameters "
            "... when you reproduce it, make sure the normalisation runs over the last dimension.",
        ),
        "x: (B, T, D) -> (B, T, D); mean and var over D, per token",
        (
            (
                "mean and (population) variance over the last dimension, per token",
                "均值与（总体）方差在最后一维上按 token 计算",
            ),
            (
                "eps inside the square root; gamma (ones) and beta (zeros) learnable, shape (D,)",
                "eps 在平方根里；gamma（初值 1）与 beta（初值 0）可学习，形状 (D,)",
            ),
            (
                "the eps given to __init__ is the one used; the same result in training and evaluation (not BatchNorm)",
                "用的是传给 __init__ 的 eps；训练和评估时结果相同（不是 BatchNorm）",
            ),
        ),
        (
            "x.var(-1, keepdim=True, unbiased=False): torch's var is unbiased unless told",
            "x.var(-1, keepdim=True, unbiased=False)：torch 的 var 默认是无偏的",
        ),
        "06_layernorm.py",
    ),
    Exercise(
        "add_norm",
        "§4.3",
        ("Add & Norm: Post-Norm and Pre-Norm", "Add & Norm：Post-Norm 与 Pre-Norm"),
        ("PostNorm", "PreNorm"),
        "from torch import nn\n\n\nclass PostNorm(nn.Module):\n    def __init__(self, d_model, sublayer):\n"
        "        super().__init__()\n        ...\n\n    def forward(self, x):\n        ...\n\n\n"
        "class PreNorm(nn.Module):\n    def __init__(self, d_model, sublayer):\n        super().__init__()\n"
        "        ...\n\n    def forward(self, x):\n        ...\n",
        (
            "原论文的做法是每个Sublayer结束后先做Add再在最后统一做LayerNorm这种方式叫Post-Norm……Pre-Norm先对输入做LayerNorm再进入"
            "Sublayer最后再做残差相加。",
            "the paper adds after each sub-layer and then applies LayerNorm: Post-Norm ... Pre-Norm applies LayerNorm to "
            "the input, then the sub-layer, and adds the residual last.",
        ),
        "x: (B, T, D) -> (B, T, D); sublayer: a module (B, T, D) -> (B, T, D) given to you",
        (
            ("PostNorm: norm(x + sublayer(x))", "PostNorm：norm(x + sublayer(x))"),
            (
                "PreNorm: x + sublayer(norm(x)); the residual path is not normalised",
                "PreNorm：x + sublayer(norm(x))；残差支路不做归一化",
            ),
            ("each has its own nn.LayerNorm(d_model)", "各自拥有自己的 nn.LayerNorm(d_model)"),
            (
                "the norm is created in __init__ (a global norm is shared by every module)",
                "Norm 在 __init__ 里创建（全局的 Norm 会被所有模块共用）",
            ),
        ),
        (
            "draw the data flow first (the post's advice): which tensor goes into the norm, which one is added",
            "先画出数据流（原文的建议）：哪个张量进 Norm，哪个张量被加回去",
        ),
        "07_add_norm.py",
    ),
    Exercise(
        "block",
        "§5.3",
        ("The full Transformer block", "完整的 Transformer Block"),
        ("TransformerBlock",),
        "import torch\nfrom torch import nn\n\n\nclass TransformerBlock(nn.Module):\n"
        "    def __init__(self, d_model, n_heads, d_ff):\n        super().__init__()\n        ...\n\n"
        "    def forward(self, x, mask=None):\n        # (B, T, D) -> (B, T, D)\n        ...\n",
        (
            "结构里同时包含Multi-Head、前馈网络、两个残差和两个LayerNorm……每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
            "it holds multi-head attention, a feed-forward network, two residuals and two LayerNorms ... each LayerNorm "
            "needs its own learnable gamma and beta.",
        ),
        "x: (B, T, D) -> (B, T, D); mask: bool, True = may attend, broadcastable to (B, H, T, S); d_ff = 4 D",
        (
            (
                "Pre-Norm as the post's §5.3: x + MHA(LN1(x)), then x + FFN(LN2(x))",
                "按原文 §5.3 的 Pre-Norm：x + MHA(LN1(x))，再 x + FFN(LN2(x))",
            ),
            (
                "two LayerNorms with their own parameters (gamma ones, beta zeros at first); FFN Linear D->F, GELU, "
                "Linear F->D with F = d_ff",
                "两个各自有参数的 LayerNorm（gamma 初值 1，beta 初值 0）；FFN 为 Linear D->F、GELU、Linear F->D，F = d_ff",
            ),
            (
                "not Post-Norm, not ReLU: a block that learns as well in another design is still not this exercise's",
                "不是 Post-Norm，也不是 ReLU：别的设计即使也能学，也不是本练习要的",
            ),
            (
                "dropout, if any, on a sub-layer's output before the residual add; norms created in __init__, none shared",
                "如果用 dropout，放在子层输出上、残差相加之前；Norm 在 __init__ 里创建，不共用",
            ),
            (
                "four projections used, mask True = may attend, a fill float16 can hold (as in exercise 04)",
                "四个投影都用上，mask 中 True 表示可以关注，填充值 float16 放得下（与练习 04 相同）",
            ),
        ),
        (
            "reuse your MultiHeadAttention; res = x; x = norm1(x); x = res + attn(x) ...",
            "复用你的 MultiHeadAttention；res = x；x = norm1(x)；x = res + attn(x) ……",
        ),
        "08_block.py",
    ),
    Exercise(
        "tiny_lm",
        "§5",
        ("Train a tiny LM with your block", "用你的 Block 训练一个小语言模型"),
        ("TransformerBlock",),
        "# This exercise trains the TransformerBlock of 08_block.py: no new code.\n"
        "# Run: anatomy learn check tiny_lm 08_block.py\n",
        (
            "代码跑不通先检查形状形状对了但效果差先看mask和缩放因子train loss爆炸再检查初始化、Norm顺序和学习率。",
            "if the code does not run, check the shapes; if the shapes are right but it learns badly, look at the mask "
            "and the scale; if the train loss explodes, check the init, the norm order and the learning rate.",
        ),
        "characters of an embedded corpus -> your block x 2 (causal mask) -> next-character logits",
        (
            (
                "its validation loss ends within 0.05 nats of the reference block's after the same steps",
                "同样的步数之后，验证损失与参考 Block 相差不超过 0.05 nats",
            ),
        ),
        (
            "a block that passes every shape check but learns slowly: look at the scale and the mask first",
            "形状都对但学得慢的 Block：先看缩放因子和掩码",
        ),
        "09_tiny_lm.py",
    ),
    Exercise(
        "gpt",
        "§5",
        ("Your GPT: your block in a whole language model", "你的 GPT：把你的 Block 装进完整的语言模型"),
        ("GPT", "TransformerBlock"),  # the GPT first: its file is the one graded (a notebook, a test)
        GPT_SIGNATURE,
        (
            "输入词嵌入结果 + 位置编码(2, 10, 16)……Transformer采用的是直接相加——把位置向量加到词向量上。",
            "the input: word embeddings + positional encoding, (2, 10, 16) ... the Transformer adds them directly: "
            "the position vector is added to the word vector.",
        ),
        "ids: (B, T) -> tok(ids) + positions[:T]: (B, T, D) -> your block x L, each with the causal mask (1, 1, T, T)"
        "\n-> final LayerNorm: (B, T, D) -> head, tied to tok: (B, T, V)\n"
        "loss: logits[:, :-1] (B, T-1, V) against targets[:, 1:] (B, T-1), PAD ignored",
        GPT_MUST,
        (
            "x = self.tok(ids) + pe[:T]; for block in self.blocks: x = block(x, mask); logits = self.head(self.norm(x)); "
            "loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1), ignore_index=PAD)",
            "x = self.tok(ids) + pe[:T]；for block in self.blocks: x = block(x, mask)；logits = self.head(self.norm(x))；"
            "loss = F.cross_entropy(logits[:, :-1].reshape(-1, V), targets[:, 1:].reshape(-1), ignore_index=PAD)",
        ),
        "10_gpt.py",
    ),
)

BY_ID = {e.id: e for e in EXERCISES}


def get(exercise_id: str) -> Exercise:
    if exercise_id not in BY_ID:
        raise ValueError(f"no exercise {exercise_id!r}; the exercises are: {', '.join(BY_ID)}")
    return BY_ID[exercise_id]
