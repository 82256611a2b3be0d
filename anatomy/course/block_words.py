"""What the course says of each mistake the mha and block exercises name beyond the doctor's faults: what the code
does, the post's sentence, a hint, in English and Chinese (``block_rules.py`` finds them)."""

from __future__ import annotations

from anatomy.course.spec import Finding

BLOCK = (
    "结构里同时包含Multi-Head、前馈网络、两个残差和两个LayerNorm……每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
    "it holds multi-head attention, a feed-forward network, two residuals and two LayerNorms ... each LayerNorm "
    "needs its own learnable gamma and beta.",
)
OWN_NORM = (
    "每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。",
    "each LayerNorm needs its own learnable gamma and beta.",
)
RESIDUAL = (
    "每一层的输出都是“这层学到的变化”加上“上一层的原始输入”",
    "each layer's output is 'what this layer learned' plus 'the previous layer's original input'",
)
FFN = ("前馈网络线性激活线性", "the feed-forward network: linear, activation, linear")
MHA = (
    "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。",
    "make Q/K/V ... split the heads ... attention per head ... merge the heads ... the output projection.",
)
SOFTMAX = (
    "计算softmax(QK^T / sqrt(d_k))得到注意力权重……每一行查询位置都要对10个键位置计算相似度",
    "softmax(QK^T / sqrt(d_k)) gives the weights ... every query row is compared with every key position",
)
SCALE = (
    "除以sqrt(d_k)的本质是把点积结果的方差重新拉回到1附近让softmax有正常的温度。",
    "dividing by sqrt(d_k) brings the dot products' variance back to about 1, so the softmax has a normal temperature.",
)
SPLIT = (
    "reshape之后必须紧跟transpose如果顺序反了会把每个头的数据切得乱七八糟",
    "the transpose must follow the reshape: in the other order every head's data is cut to pieces",
)
DROPOUT = ("残差连接本质上给了网络一个“退路”", "the residual connection gives the network a way back")

# name -> (what en, what zh, post, hint en, hint zh); what may hold {0}, {1}... for the finding's numbers
WORDS: dict[str, tuple[str, str, tuple[str, str], str, str]] = {
    "second_residual_from_input": (
        "the second residual adds the block's input x, not the first sub-layer's result: the attention's "
        "output is lost from the block's output",
        "第二个残差加回的是 Block 的输入 x，而不是第一个子层之后的结果：注意力的输出从 Block 的输出里丢了",
        RESIDUAL,
        "h = x + attn(norm1(x)); return h + ffn(norm2(h)): the second residual carries h",
        "h = x + attn(norm1(x))；return h + ffn(norm2(h))：第二个残差带的是 h",
    ),
    "ffn_ignores_d_ff": (
        "the feed-forward network's hidden layer is {0} wide, not d_ff = {1}: the constructor's d_ff is ignored",
        "前馈网络的隐藏层宽 {0}，而不是 d_ff = {1}：构造函数的 d_ff 没有用上",
        FFN,
        "nn.Linear(d_model, d_ff), GELU, nn.Linear(d_ff, d_model)",
        "nn.Linear(d_model, d_ff)、GELU、nn.Linear(d_ff, d_model)",
    ),
    "ffn_extra_activation": (
        "an activation is applied after the FFN's second Linear: the FFN is linear, activation, linear, and its "
        "output goes to the residual as it is",
        "在 FFN 的第二个 Linear 之后又做了一次激活：FFN 是线性、激活、线性，输出直接加回残差",
        FFN,
        "x + self.fc2(F.gelu(self.fc1(self.norm2(x)))): one GELU, between the two Linear layers",
        "x + self.fc2(F.gelu(self.fc1(self.norm2(x))))：只有一个 GELU，在两个 Linear 之间",
    ),
    "no_output_projection": (
        "the merged heads go on without the output projection: there is no fourth Linear to mix what the heads found",
        "并头之后没有经过输出投影：缺少第四个 Linear 来混合各个头的结果",
        MHA,
        "self.o_proj = nn.Linear(d_model, d_model) in __init__, and self.o_proj(merged) after merging the heads",
        "在 __init__ 里加 self.o_proj = nn.Linear(d_model, d_model)，并头之后用 self.o_proj(merged)",
    ),
    "heads_share_one_pattern": (
        "one attention pattern is computed for every head (the scores over all D features, no H axis): the "
        "heads cannot attend to different positions",
        "所有头共用一个注意力模式（分数在全部 D 维上算，没有 H 这一维）：各个头没法关注不同的位置",
        MHA,
        "split q and k into heads too: scores = q_h @ k_h.transpose(-2, -1) / sqrt(Dh) with shape (B, H, T, S)",
        "q 和 k 也要拆头：scores = q_h @ k_h.transpose(-2, -1) / sqrt(Dh)，形状为 (B, H, T, S)",
    ),
    "softmax_over_heads": (
        "the softmax runs over the heads (dim=1 of (B, H, T, S)), not over the keys: each key's weights sum to 1 "
        "across heads",
        "softmax 作用在头这一维上（(B, H, T, S) 的 dim=1），而不是键维：每个键的权重在各个头之间和为 1",
        SOFTMAX,
        "torch.softmax(scores, dim=-1): the last axis, the keys S",
        "torch.softmax(scores, dim=-1)：最后一维，即键维 S",
    ),
    "softmax_over_queries": (
        "the softmax runs over the queries (dim -2 of (B, H, T, S)), not over the keys",
        "softmax 作用在查询维（(B, H, T, S) 的 dim -2）上，而不是键维",
        SOFTMAX,
        "torch.softmax(scores, dim=-1): each query's weights over the keys sum to 1",
        "torch.softmax(scores, dim=-1)：每个查询对所有键的权重和为 1",
    ),
    "softmax_over_batch": (
        "the softmax runs over the batch (dim=0): sentences compete with each other",
        "softmax 作用在 batch 维（dim=0）上：不同句子互相竞争",
        SOFTMAX,
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-1)",
    ),
    "scale_after_softmax": (
        "the weights are divided by sqrt(Dh) after the softmax: the scores' temperature is unchanged and the "
        "rows no longer sum to 1",
        "在 softmax 之后才除以 sqrt(Dh)：分数的温度没变，而每行权重的和也不再是 1",
        SCALE,
        "scores = q @ k.transpose(-2, -1) / math.sqrt(d_k), then the softmax",
        "先 scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)，再做 softmax",
    ),
    "scale_wrong_size": (
        "the scores are divided by the square root of the sequence length (k.size(-1) after the transpose is S), "
        "not of Dh: your scale is {0:.4f}",
        "分数除以的是序列长度的平方根（转置之后 k.size(-1) 是 S），而不是 Dh：你的缩放因子是 {0:.4f}",
        SCALE,
        "take d_k before the transpose: d_k = q.size(-1), then scores / math.sqrt(d_k)",
        "在转置之前取 d_k：d_k = q.size(-1)，然后 scores / math.sqrt(d_k)",
    ),
    "no_scaling": (
        "the scores are not divided by sqrt(Dh)",
        "分数没有除以 sqrt(Dh)",
        SCALE,
        "divide the scores by math.sqrt(self.d_k), the width of one head",
        "把分数除以 math.sqrt(self.d_k)，即单个头的维度",
    ),
    "scale_not_sqrt": (
        "the scores are divided by Dh instead of sqrt(Dh)",
        "分数除以了 Dh 而不是 sqrt(Dh)",
        SCALE,
        "the factor is 1 / math.sqrt(d_k), not 1 / d_k",
        "缩放因子是 1 / math.sqrt(d_k)，不是 1 / d_k",
    ),
    "scale_by_d_model": (
        "the scores are divided by sqrt(d_model) instead of sqrt(Dh): too soft by a factor sqrt(H)",
        "分数除以了 sqrt(d_model) 而不是 sqrt(Dh)：注意力被压得过于平均（差 sqrt(H) 倍）",
        SCALE,
        "the scale is sqrt(d_k) with d_k = d_model // n_heads, not sqrt(d_model)",
        "缩放用 sqrt(d_k)，d_k = d_model // n_heads，而不是 sqrt(d_model)",
    ),
    "heads_interleaved": (
        "the heads are split as (B, T, Dh, H): head h takes every H-th feature instead of a block of Dh "
        "neighbouring features",
        "拆头时变成了 (B, T, Dh, H)：第 h 个头拿到的是每隔 H 个的特征，而不是相邻的 Dh 个特征",
        SPLIT,
        "x.view(b, t, h, d_k).transpose(1, 2): H before Dh",
        "x.view(b, t, h, d_k).transpose(1, 2)：H 在 Dh 前面",
    ),
    "dropout_at_eval": (
        "two evaluations of the same input give different outputs: a functional dropout (F.dropout trains by "
        "default) is still on in eval mode",
        "同一个输入在评估模式下两次运行结果不同：函数式 dropout（F.dropout 默认 training=True）在 eval 模式下仍然生效",
        DROPOUT,
        "self.dropout = nn.Dropout(p) in __init__, or F.dropout(w, p, training=self.training)",
        "在 __init__ 里用 self.dropout = nn.Dropout(p)，或写 F.dropout(w, p, training=self.training)",
    ),
    "dropout_on_residual": (
        "dropout is applied to the block's input x, the residual stream itself: in training it drops what the "
        "residual must carry through unchanged",
        "dropout 作用在 Block 的输入 x 上，也就是残差支路本身：训练时把残差要原样带过去的东西丢掉了",
        DROPOUT,
        "x = x + self.dropout(self.attn(self.norm1(x))): drop the sub-layer's output, not x",
        "x = x + self.dropout(self.attn(self.norm1(x)))：对子层输出做 dropout，而不是 x",
    ),
    "norm_without_parameters": (
        "this norm has no learnable gamma and beta of its own (F.layer_norm without weights, or "
        "elementwise_affine=False): the exercise asks for two LayerNorms with their own parameters",
        "这个 Norm 没有自己的可学习参数 gamma 和 beta（F.layer_norm 不带权重，或 elementwise_affine=False）："
        "练习要的是两个各自带参数的 LayerNorm",
        OWN_NORM,
        "self.norm1 = nn.LayerNorm(d_model); self.norm2 = nn.LayerNorm(d_model), created in __init__",
        "在 __init__ 里创建 self.norm1 = nn.LayerNorm(d_model)；self.norm2 = nn.LayerNorm(d_model)",
    ),
    "norm_init_swapped": (
        "{0} starts at the other one's value: gamma must start at ones and beta at zeros (a fresh LayerNorm "
        "is the identity on normalised features); yours start swapped",
        "{0} 的初始值是另一个参数的：gamma 初值应为 1，beta 初值应为 0（新建的 LayerNorm 对归一化后的特征是恒等变换）；"
        "你的两者正好反了",
        OWN_NORM,
        "self.gamma = nn.Parameter(torch.ones(d)); self.beta = nn.Parameter(torch.zeros(d))",
        "self.gamma = nn.Parameter(torch.ones(d))；self.beta = nn.Parameter(torch.zeros(d))",
    ),
    "norm_init_wrong": (
        "{0} (the norm's {1}) does not start at {1}'s initial value: gamma starts at ones, beta at zeros",
        "{0}（Norm 的 {1}）的初始值不对：gamma 初值为 1，beta 初值为 0",
        OWN_NORM,
        "torch.ones(d) for gamma, torch.zeros(d) for beta",
        "gamma 用 torch.ones(d)，beta 用 torch.zeros(d)",
    ),
    "differs_in_training": (
        "in training mode (dropout off) your block computes something else than in evaluation (up to {0:.3g} "
        "apart): a norm with running statistics such as BatchNorm is not the exercise's LayerNorm",
        "在训练模式下（关掉 dropout）你的 Block 与评估模式的结果不同（最多相差 {0:.3g}）：像 BatchNorm 这样带滑动统计量的"
        "Norm 不是练习要的 LayerNorm",
        OWN_NORM,
        "nn.LayerNorm(d_model): the same computation in training and evaluation",
        "nn.LayerNorm(d_model)：训练和评估时的计算完全相同",
    ),
}


def finding(name: str, line: int | None, source: str, *args) -> Finding:
    if name == "unexplained":
        return _unexplained(line, source, *args)
    en, zh, post, hint_en, hint_zh = WORDS[name]
    return Finding(name, line, source, (en.format(*args), zh.format(*args)), post, (hint_en, hint_zh))


def _unexplained(line, source, size, where, mha: bool, diag: dict) -> Finding:
    what = "multi-head attention" if mha else "block"
    what_zh = "多头注意力" if mha else "Block"
    if diag.get("status") == "unavailable":
        reason = diag.get("reason")
        en = (
            f"your {what}'s weights could not be mapped onto the exercise's reference"
            + (f" ({reason})" if reason else "")
            + ", so its output cannot be shown to equal the reference's: keep to the exercise's parts"
        )
        zh = f"没法把你的{what_zh}的权重对应到练习的参考实现上，因此无法确认输出与参考一致：请按练习要求的组成部分来写"
    else:
        amount = f" by up to {size:.3g}" if isinstance(size, (int, float)) else ""
        at = f"; the first difference is at the {where[0]}" if where else ""
        at_zh = f"；第一个不同出现在{where[1]}" if where else ""
        en = f"with the same weights your {what}'s output differs from the exercise's reference{amount}{at}"
        zh = (
            f"用同样的权重，你的{what_zh}的输出与练习的参考实现不同"
            + (f"（最多相差 {size:.3g}）" if isinstance(size, (int, float)) else "")
            + at_zh
        )
    return Finding(
        "unexplained",
        line,
        source,
        (en, zh),
        BLOCK if not mha else MHA,
        (
            "compare each step with the post's flow: anatomy trace FILE.py:CLASS prints your shapes step by step",
            "把每一步和原文的流程对照：anatomy trace FILE.py:CLASS 会逐步打印你的形状",
        ),
    )
