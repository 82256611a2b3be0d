"""The records of the pitfalls the course names (``anatomy learn``) that the doctor does not diagnose: slips in the
sinusoidal table, the length mask, a hand-written LayerNorm, block designs other than the exercise's, and a GPT's
head not tied to its embedding."""

from __future__ import annotations

from anatomy.pitfalls.records import Pitfall

_PE = "PE(pos, 2i) = sin(pos / 10000^(2i/d_model))  PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))"
_LN = "LayerNorm(x) = gamma * (x - mean) / sqrt(var + eps) + beta其中gamma和beta是可学习的仿射参数"
_OWN = "每一个LayerNorm都需要分别拥有自己的可学习参数gamma和beta。"
_BLOCK = "结构里同时包含Multi-Head、前馈网络、两个残差和两个LayerNorm"


def _pe(name: str, title: tuple[str, str], summary: tuple[str, str], hides: str, *hint: str) -> Pitfall:
    """A slip in the sinusoidal table (§3.2): the post's formula is the sentence it breaks."""
    en, zh = hint
    return Pitfall(name, "positional", "error", *title, *summary, "§3.2", _PE, hides, en, zh)


PITFALLS = (
    _pe(
        "exponent_precedence",
        ("operator precedence in the exponent", "指数里的运算符优先级写错了"),
        (
            "The exponent 2i/d is not in parentheses: `10000 ** 2 * i / d` computes (10000²)·i/d and "
            "`10000 ** i / d` divides by d after the power, so the frequencies are not 1 / 10000^(2i/d).",
            "指数 2i/d 没有加括号：`10000 ** 2 * i / d` 算的是 (10000²)·i/d，`10000 ** i / d` 是先乘方再除以 d，"
            "频率都不是 1 / 10000^(2i/d)。",
        ),
        "`pos / 10000 ** 2 * i / d_model` where `pos / 10000 ** (2 * i / d_model)` was meant",
        *(
            "put the exponent in parentheses: pos / 10000 ** (two_i / d_model)",
            "给指数加上括号：pos / 10000 ** (two_i / d_model)",
        ),
    ),
    _pe(
        "base_typo_10e4",
        ("base written 10e4 (= 100000)", "底数写成了 10e4（= 100000）"),
        (
            "The base is 10e4, which is 100000, not 10000 (1e4): every frequency but the first is lower than the "
            "post's.",
            "底数写成了 10e4，也就是 100000，而不是 10000（1e4）：除第一个外所有频率都比原文的低。",
        ),
        "`10e4 ** (2 * i / d)` where `1e4` or `10000` was meant",
        *("10000 (or 1e4): 10e4 means 10 x 10^4", "写 10000（或 1e4）：10e4 表示 10 × 10^4"),
    ),
    _pe(
        "multiplies_instead_of_divides",
        ("the position multiplied by 10000^(2i/d)", "位置乘以了 10000^(2i/d)"),
        (
            "The position is multiplied by 10000^(2i/d) where the formula divides (or exp(+2i·ln(10000)/d) where "
            "the exponent is negative): the frequencies grow with the dimension instead of falling.",
            "公式里是除以 10000^(2i/d)，代码却乘了上去（或 exp 里少了负号）：频率随维度增大而不是减小。",
        ),
        "`pos * 10000 ** (2 * i / d)`, or `torch.exp(two_i * math.log(10000) / d)` without the minus",
        *(
            "angle = pos / 10000 ** (two_i / d), or pos * torch.exp(-two_i * math.log(10000.0) / d)",
            "angle = pos / 10000 ** (two_i / d)，或 pos * torch.exp(-two_i * math.log(10000.0) / d)",
        ),
    ),
    _pe(
        "frequency_grid_wrong",
        ("the frequency grid is not 2i/d", "频率网格不是 2i/d"),
        (
            "The exponents run over another grid than 2i/d for 2i = 0, 2, ..., d-2 (torch.linspace(0, 1, d // 2) "
            "ends at 1): the slowest pair gets the wrong frequency.",
            "指数的取值网格不是 2i/d（2i = 0, 2, ……, d-2）（torch.linspace(0, 1, d // 2) 会取到 1）："
            "最慢的那对维度频率不对。",
        ),
        "`torch.linspace(0, 1, d // 2)` as the exponents",
        *(
            "the exponents are torch.arange(0, d, 2) / d: 0, 2/d, ..., (d-2)/d, never 1",
            "指数是 torch.arange(0, d, 2) / d：0, 2/d, ……, (d-2)/d，取不到 1",
        ),
    ),
    _pe(
        "positions_normalised",
        ("positions squashed to [0, 1]", "位置被压缩到了 [0, 1]"),
        (
            "The positions are divided by the length (pos / max_len or pos / (max_len - 1)): pos in the formula is "
            "the token's index 0, 1, 2, ..., and a squashed position changes with the sequence length.",
            "位置被除以了长度（pos / max_len 或 pos / (max_len - 1)）：公式里的 pos 就是 token 的下标 0, 1, 2, ……；"
            "压缩后的位置会随序列长度变化。",
        ),
        "`pos = torch.arange(max_len) / max_len`",
        *("pos = torch.arange(max_len): the raw index", "pos = torch.arange(max_len)：直接用下标"),
    ),
    Pitfall(
        "eps_ignored",
        "norm",
        "error",
        "the eps argument ignored",
        "没有用构造函数的 eps",
        "The norm's eps is a constant of its own, not the eps it was built with: LayerNorm(d, eps) computes "
        "the same for every eps.",
        "Norm 用的是自己写死的常数，而不是构造时传入的 eps：LayerNorm(d, eps) 无论 eps 是多少都算得一样。",
        "§4.2",
        _LN,
        "`torch.sqrt(var + 1e-5)` in forward while `__init__` stores `self.eps = eps`",
        *(
            "self.eps = eps in __init__, torch.sqrt(var + self.eps) in forward",
            "__init__ 里 self.eps = eps，forward 里 torch.sqrt(var + self.eps)",
        ),
    ),
    Pitfall(
        "variance_over_whole_tensor",
        "norm",
        "error",
        "the variance over the whole tensor",
        "方差在整个张量上计算",
        "The variance is taken over every element of the tensor (x.var() with no dim), not over each token's "
        "features: every token is divided by the same number.",
        "方差是在整个张量的所有元素上算的（x.var() 没写 dim），而不是每个 token 的特征上：所有 token 除以同一个数。",
        "§4.2",
        "大家在复现时最好确认一下标准化是在最后一个维度上做的。",
        "`var = x.var()` or `((x - mean) ** 2).mean()` without `dim=-1, keepdim=True`",
        *("var = x.var(-1, keepdim=True, unbiased=False)", "var = x.var(-1, keepdim=True, unbiased=False)"),
    ),
    Pitfall(
        "norm_init_swapped",
        "norm",
        "error",
        "gamma and beta initialised swapped",
        "gamma 和 beta 的初始值反了",
        "gamma starts at zeros and beta at ones: a fresh norm outputs 1 for every feature (gamma must start at "
        "ones and beta at zeros, so that a fresh LayerNorm only normalises).",
        "gamma 初值为 0、beta 初值为 1：新建的 Norm 对每个特征都输出 1（gamma 初值应为 1，beta 初值应为 0，新建的 "
        "LayerNorm 只做标准化）。",
        "§4.2",
        _LN,
        "`self.gamma = nn.Parameter(torch.zeros(d)); self.beta = nn.Parameter(torch.ones(d))`",
        *(
            "self.gamma = nn.Parameter(torch.ones(d)); self.beta = nn.Parameter(torch.zeros(d))",
            "self.gamma = nn.Parameter(torch.ones(d))；self.beta = nn.Parameter(torch.zeros(d))",
        ),
    ),
    Pitfall(
        "norm_init_wrong",
        "norm",
        "error",
        "gamma or beta initialised to other values",
        "gamma 或 beta 的初始值不对",
        "A norm's gamma does not start at ones or its beta at zeros (random values, say): a fresh LayerNorm "
        "should only normalise.",
        "Norm 的 gamma 初值不是 1，或 beta 初值不是 0（例如随机初始化）：新建的 LayerNorm 应当只做标准化。",
        "§4.2",
        _LN,
        "`nn.Parameter(torch.randn(d))` for gamma or beta",
        *("torch.ones(d) for gamma, torch.zeros(d) for beta", "gamma 用 torch.ones(d)，beta 用 torch.zeros(d)"),
    ),
    Pitfall(
        "norm_without_parameters",
        "norm",
        "error",
        "a norm without its own gamma and beta",
        "Norm 没有自己的 gamma 和 beta",
        "The norm has no learnable gamma and beta of its own (F.layer_norm without weights, or "
        "elementwise_affine=False): the exercise asks for norms with their own parameters.",
        "Norm 没有自己的可学习参数 gamma 和 beta（F.layer_norm 不带权重，或 elementwise_affine=False）："
        "练习要的是各自带参数的 Norm。",
        "§5.3",
        _OWN,
        "`F.layer_norm(x, (d,))` or `nn.LayerNorm(d, elementwise_affine=False)`",
        *(
            "self.norm1 = nn.LayerNorm(d_model) in __init__ (and self.norm2 for the second sub-layer)",
            "在 __init__ 里创建 self.norm1 = nn.LayerNorm(d_model)（第二个子层再建 self.norm2）",
        ),
    ),
    Pitfall(
        "second_residual_from_input",
        "block",
        "error",
        "the second residual adds the block's input",
        "第二个残差加的是 Block 的输入",
        "The second residual adds the block's input x, not the first sub-layer's result h: the attention's output "
        "is lost from the block's output.",
        "第二个残差加回的是 Block 的输入 x，而不是第一个子层之后的结果 h：注意力的输出从 Block 的输出里丢了。",
        "§4.3",
        "每一层的输出都是“这层学到的变化”加上“上一层的原始输入”",
        "`h = x + attn(norm1(x)); return x + ffn(norm2(h))`",
        *(
            "h = x + attn(norm1(x)); return h + ffn(norm2(h)): the second residual carries h",
            "h = x + attn(norm1(x))；return h + ffn(norm2(h))：第二个残差带的是 h",
        ),
    ),
    Pitfall(
        "parallel_residual_instead",
        "block",
        "error",
        "the FFN reads the block's input (a parallel block)",
        "FFN 读的是 block 的输入（并行 block）",
        "The FFN reads the block's input instead of the stream after the attention's residual: "
        "x + attn(norm1(x)) + ffn(norm2(x)) is the parallel block of GPT-J and GPT-NeoX, not the post's block, where "
        "the FFN sees what the attention added.",
        "FFN 读的是 block 的输入，而不是注意力残差之后的结果：x + attn(norm1(x)) + ffn(norm2(x)) 是 GPT-J、"
        "GPT-NeoX 的并行 block，不是原文的 block；原文里 FFN 看到的是注意力加进来的内容。",
        "§5.3",
        _BLOCK,
        "`x_in = x` kept before the attention and `self.ffn(self.norm2(x_in))` after it",
        *(
            "x = x + attn(norm1(x)); x = x + ffn(norm2(x)): the FFN's norm reads the updated x",
            "x = x + attn(norm1(x))；x = x + ffn(norm2(x))：FFN 的 norm 读的是更新后的 x",
        ),
    ),
    Pitfall(
        "ffn_ignores_d_ff",
        "block",
        "error",
        "the FFN ignores d_ff",
        "前馈网络没有用 d_ff",
        "The feed-forward network's hidden layer is not d_ff wide (d_model, say): the constructor's d_ff is ignored.",
        "前馈网络的隐藏层宽度不是 d_ff（例如用了 d_model）：构造函数的 d_ff 没有用上。",
        "§5.3",
        _BLOCK,
        "`nn.Linear(d_model, d_model)` as the FFN's first layer",
        *(
            "nn.Linear(d_model, d_ff), GELU, nn.Linear(d_ff, d_model)",
            "nn.Linear(d_model, d_ff)、GELU、nn.Linear(d_ff, d_model)",
        ),
    ),
    Pitfall(
        "ffn_extra_activation",
        "block",
        "error",
        "an activation after the FFN",
        "FFN 之后多了一次激活",
        "An activation is applied after the FFN's second Linear: the FFN is linear, activation, linear, and its "
        "output goes to the residual as it is.",
        "在 FFN 的第二个 Linear 之后又做了一次激活：FFN 是线性、激活、线性，输出直接加回残差。",
        "§5.3",
        _BLOCK,
        "`F.gelu(self.fc2(F.gelu(self.fc1(h))))`",
        *(
            "x + self.fc2(F.gelu(self.fc1(self.norm2(x)))): one GELU, between the two Linear layers",
            "x + self.fc2(F.gelu(self.fc1(self.norm2(x))))：只有一个 GELU，在两个 Linear 之间",
        ),
    ),
    Pitfall(
        "no_output_projection",
        "attention",
        "error",
        "no output projection",
        "没有输出投影",
        "The merged heads go on without the output projection: there is no fourth Linear to mix what the heads found.",
        "并头之后没有经过输出投影：缺少第四个 Linear 来混合各个头的结果。",
        "§2.2",
        "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。",
        "`x + merged` or `return merged` right after the heads are merged",
        *(
            "self.o_proj = nn.Linear(d_model, d_model) in __init__, and self.o_proj(merged) after merging the heads",
            "在 __init__ 里加 self.o_proj = nn.Linear(d_model, d_model)，并头之后用 self.o_proj(merged)",
        ),
    ),
    Pitfall(
        "heads_share_one_pattern",
        "attention",
        "error",
        "one attention pattern for every head",
        "所有头共用一个注意力模式",
        "One attention pattern is computed for all heads (scores over all D features, no H axis): the heads "
        "cannot attend to different positions.",
        "所有头共用一个注意力模式（分数在全部 D 维上算，没有 H 这一维）：各个头没法关注不同的位置。",
        "§2.2",
        "生成Q/K/V……拆头……逐头计算注意力……并头……输出投影。",
        "`scores = q @ k.transpose(-2, -1)` on (B, T, D) before the split",
        *(
            "split q and k into heads too: scores = q_h @ k_h.transpose(-2, -1) / sqrt(Dh), shape (B, H, T, S)",
            "q 和 k 也要拆头：scores = q_h @ k_h.transpose(-2, -1) / sqrt(Dh)，形状为 (B, H, T, S)",
        ),
    ),
    Pitfall(
        "dropout_on_residual",
        "block",
        "error",
        "dropout on the residual stream",
        "dropout 作用在残差支路上",
        "Dropout is applied to the block's input x, the residual stream itself: in training it drops what the "
        "residual must carry through unchanged.",
        "dropout 作用在 Block 的输入 x 上，也就是残差支路本身：训练时把残差要原样带过去的东西丢掉了。",
        "§4.3",
        "残差连接本质上给了网络一个“退路”",
        "`x = self.dropout(x)` at the top of forward",
        *(
            "x = x + self.dropout(self.attn(self.norm1(x))): drop the sub-layer's output, not x",
            "x = x + self.dropout(self.attn(self.norm1(x)))：对子层输出做 dropout，而不是 x",
        ),
    ),
    Pitfall(
        "differs_in_training",
        "norm",
        "error",
        "another computation in training mode",
        "训练模式下算的是别的",
        "In training mode (dropout off) the module computes something else than in evaluation: a norm with "
        "running statistics such as BatchNorm is not LayerNorm.",
        "在训练模式下（关掉 dropout）模块与评估模式的结果不同：像 BatchNorm 这样带滑动统计量的 Norm 不是 LayerNorm。",
        "§4.2",
        "BatchNorm依赖batch中样本的统计量序列任务中batch大小往往不大且样本长短不一",
        "`nn.BatchNorm1d(d_model)` where `nn.LayerNorm(d_model)` was meant",
        *(
            "nn.LayerNorm(d_model): the same computation in training and evaluation",
            "nn.LayerNorm(d_model)：训练和评估时的计算完全相同",
        ),
    ),
    Pitfall(
        "head_not_tied",
        "model",
        "error",
        "the head is not tied to the embedding",
        "输出头没有与词嵌入共享权重",
        "The head has a weight of its own where the exercise ties it to the token embedding: one (vocab_size, "
        "d_model) Parameter read by both, as GPT-2 and the paper do.",
        "输出头有自己的一份权重，而练习要求它与词嵌入共享：同一个 (vocab_size, d_model) 的 Parameter 被两者使用，"
        "GPT-2 和原论文都是这样做的。",
        "",
        None,
        "`self.head = nn.Linear(d_model, vocab_size)` with no `self.head.weight = self.tok.weight` after it",
        *(
            "self.head.weight = self.tok.weight after creating both: one Parameter, not a copy",
            "两者都建好之后写 self.head.weight = self.tok.weight：同一个 Parameter，而不是拷贝",
        ),
    ),
)

__all__ = ["PITFALLS"]
