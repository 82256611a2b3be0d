"""The records of the pitfalls that live *between* the blocks of a whole language model (kind ``"model"``): the
loss's alignment, the causal mask across the stack, the positions, padding, dropout in ``eval()``, the final norm,
tying, and the model's own generation. The doctor's model check (``anatomy/doctor/model/``) finds them by
behaviour; none of them is a bug-zoo fault (no ``apply``)."""

from __future__ import annotations

from anatomy.pitfalls.records import Pitfall


def _model(
    name: str, severity: str, title: tuple[str, str], summary: tuple[str, str], hides_in: str, section: str = ""
) -> Pitfall:
    return Pitfall(name, "model", severity, title[0], title[1], summary[0], summary[1], section, None, hides_in)


PITFALLS = (
    _model(
        "targets_not_shifted",
        "error",
        ("the loss compares position t with token t", "损失把位置 t 的预测与第 t 个 token 比较"),
        (
            "The targets are not shifted by one: the logits at position t are scored against the token at t, "
            "which the model already sees, so it learns to copy its input and the loss falls towards zero.",
            "目标没有错开一位：位置 t 的 logits 与第 t 个 token 比较，而模型本来就看得见它，于是模型学会复制输入，"
            "损失一路降到接近 0。",
        ),
        "`F.cross_entropy(logits.view(-1, V), labels.view(-1))` with labels = input_ids and no "
        "`logits[:, :-1]` / `labels[:, 1:]`",
    ),
    _model(
        "targets_shifted_twice",
        "error",
        ("the targets are shifted twice", "目标被错开了两次"),
        (
            "The targets are shifted by one twice (by the data and again in the loss): position t is scored "
            "against the token at t+2, so the model learns to predict two tokens ahead.",
            "目标被错开了两次（数据里一次，损失里又一次）：位置 t 与第 t+2 个 token 比较，模型学的是预测后两个 token。",
        ),
        "`logits[:, :-1]` / `targets[:, 1:]` in the loss when the batch already holds y = x[1:]",
    ),
    _model(
        "causal_mask_sliced_wrong",
        "error",
        ("the causal mask is sliced wrongly for a shorter input", "输入较短时因果 mask 被切错"),
        (
            "The causal mask is registered for block_size tokens and sliced wrongly for an input of T < block_size "
            "tokens: at full length the model is causal, on a shorter input it fails or lets a token see the future.",
            "因果 mask 按 block_size 注册，输入长度 T < block_size 时切片错了：满长度时模型是因果的，较短的输入上"
            "它出错或让 token 看到未来。",
        ),
        "`self.bias[:T]` or `self.mask[:, :, :T]` where `self.bias[:, :, :T, :T]` was meant",
    ),
    _model(
        "causal_mask_missing_in_layer",
        "error",
        ("one layer of the stack attends to the future", "堆叠中的某一层能看到未来"),
        (
            "The causal mask reaches some layers only (built for the first layer, or not passed to one layer): "
            "the layers without it let every position see the tokens after it.",
            "因果 mask 只到达了部分层（只为第一层构造，或某一层没有传入）：没有 mask 的层让每个位置看到后面的 token。",
        ),
        "`mask = None` after the first block, or `block(x)` instead of `block(x, mask)` for one layer",
    ),
    _model(
        "positions_missing",
        "error",
        ("the model has no positions", "模型没有位置信息"),
        (
            "Nothing tells the model where a token is: shuffling the earlier tokens leaves the last position's "
            "logits unchanged, so 我打你 and 你打我 look the same to it.",
            "模型不知道 token 的位置：打乱前面的 token，最后一个位置的 logits 不变，“我打你”和“你打我”对它一样。",
        ),
        "`x = self.tok_emb(idx)` with no `+ self.pos_emb(pos)` (or the sum computed and then not used)",
    ),
    _model(
        "positions_added_twice",
        "error",
        ("the positions are added twice", "位置编码加了两次"),
        (
            "The positional embedding is added twice (before the stack and again inside it, or twice in a row): "
            "the positions weigh double against the tokens.",
            "位置编码被加了两次（进入堆叠前一次、堆叠内又一次，或连续两次）：位置相对 token 的分量翻倍。",
        ),
        "`x = tok + pos` followed by `x = x + pos`, or pos added in the model and again in each block",
    ),
    _model(
        "positions_after_blocks",
        "error",
        ("the positions are added after the blocks", "位置编码加在了 block 之后"),
        (
            "The positions are added after the stack of blocks: attention never sees them, so inside the "
            "blocks the model is blind to word order.",
            "位置编码加在了所有 block 之后：注意力从来看不到它，block 内部对词序一无所知。",
        ),
        "`x = self.blocks(tok_emb)` then `x = x + pos_emb`",
    ),
    _model(
        "embedding_scaled_twice",
        "error",
        ("the embedding is scaled by sqrt(d_model) twice", "嵌入被乘了两次 sqrt(d_model)"),
        (
            "The token embedding is multiplied by sqrt(d_model) twice (in an Embeddings module and again in the "
            "model): the tokens drown the positions by a factor sqrt(d_model) more than the post's.",
            "token 嵌入被乘了两次 sqrt(d_model)（在嵌入模块里一次、模型里又一次）：token 相对位置编码又大了 "
            "sqrt(d_model) 倍。",
        ),
        "`self.emb(x) * math.sqrt(d_model)` inside Embeddings and `x * math.sqrt(self.d_model)` in the model",
        "§2.2",
    ),
    _model(
        "positions_restart_with_cache",
        "error",
        ("positions restart at 0 with the KV cache", "使用 KV cache 时位置从 0 重新开始"),
        (
            "With a KV cache each new token is given position 0 (arange(T) of the one new token) instead of its "
            "place after the cached ones: cached decoding disagrees with a full forward from the second step on.",
            "使用 KV cache 时，每个新 token 的位置都是 0（对单个新 token 做 arange(T)），而不是接在缓存之后的位置："
            "从第二步起，带缓存的解码与完整前向的结果不一致。",
        ),
        "`pos = torch.arange(T)` where `torch.arange(start_pos, start_pos + T)` was meant",
    ),
    _model(
        "padding_mask_not_passed",
        "error",
        ("the padding mask never reaches the layers", "padding mask 没有传到各层"),
        (
            "The model takes a padding mask but does not pass it to its layers: real tokens attend to the pads, "
            "and their logits change with whatever the pads hold.",
            "模型接收了 padding mask 却没有传给各层：真实 token 会关注 pad，其 logits 随 pad 的内容而变。",
        ),
        "`def forward(self, idx, attention_mask=None)` and then `block(x)` without the mask",
    ),
    _model(
        "pads_in_loss",
        "error",
        ("the pads are counted in the loss", "pad 被计入了损失"),
        (
            "The loss counts the padded positions (no ignore_index, or the pads not set to it): the model is "
            "trained to predict padding, and the loss depends on how much padding a batch has.",
            "损失把 pad 位置也算了进去（没有 ignore_index，或没有把 pad 设为它）：模型被训练去预测 padding，"
            "损失还随 batch 中 padding 的多少而变。",
        ),
        "`F.cross_entropy(logits, targets)` without `ignore_index=pad_id` (or -100 for the padded targets)",
    ),
    _model(
        "functional_dropout_in_eval",
        "error",
        ("dropout still drops in eval()", "eval() 时 dropout 仍在丢弃"),
        (
            "A functional dropout `F.dropout(x, p)` defaults to training=True: it keeps dropping in eval(), so the "
            "same input gives different logits on every call.",
            "函数式 dropout `F.dropout(x, p)` 默认 training=True：eval() 时仍在丢弃，同一个输入每次调用得到不同的 "
            "logits。",
        ),
        "`F.dropout(x, self.p)` without `training=self.training` (an nn.Dropout module follows eval())",
    ),
    _model(
        "final_norm_missing",
        "warning",
        ("the Pre-Norm stack has no final norm", "Pre-Norm 堆叠缺少最后的 Norm"),
        (
            "In a Pre-Norm stack the residual stream is never normalised inside the blocks; without a final norm "
            "before the head, the logits read a stream whose scale grows with depth.",
            "Pre-Norm 堆叠中残差流在 block 内从不被归一化；输出头前没有最后一个 Norm，logits 读到的残差流尺度"
            "随层数增长。",
        ),
        "`logits = self.lm_head(x)` right after the last block, with no `x = self.ln_f(x)`",
        "§5.2",
    ),
    _model(
        "tied_by_copy",
        "warning",
        ("the head is tied to the embedding by a copy", "输出头与嵌入是复制而非共享"),
        (
            "The head and the embedding hold equal values in two Parameters (a copy) instead of one shared "
            "Parameter: they drift apart at the first optimiser step, so nothing is tied.",
            "输出头和嵌入在两个 Parameter 里存着相同的数值（复制）而不是共享同一个 Parameter：第一次优化器更新后"
            "两者就分开了，并没有绑定。",
        ),
        "`self.lm_head.weight.data = self.wte.weight.data.clone()` or `nn.Parameter(self.wte.weight.clone())` "
        "where `self.lm_head.weight = self.wte.weight` was meant",
    ),
    _model(
        "temperature_after_softmax",
        "error",
        ("the temperature is applied after the softmax", "温度加在了 softmax 之后"),
        (
            "The temperature divides the probabilities instead of the logits: the sampling distribution is the "
            "same as at temperature 1 (multinomial renormalises), so the temperature does nothing.",
            "温度除的是概率而不是 logits：采样分布与温度为 1 时相同（multinomial 会重新归一化），温度不起作用。",
        ),
        "`probs = F.softmax(logits, -1) / temperature` where `F.softmax(logits / temperature, -1)` was meant",
    ),
    _model(
        "generate_reads_first_position",
        "error",
        ("generation reads the first position's logits", "生成时读取了第一个位置的 logits"),
        (
            "Generation feeds the whole sequence but reads the logits of its first position (`logits[:, 0]`), "
            "which predict the second token, not the next one.",
            "生成时送入整个序列却读取第一个位置的 logits（`logits[:, 0]`），它预测的是第二个 token 而不是下一个。",
        ),
        "`logits[:, 0, :]` where `logits[:, -1, :]` was meant",
    ),
)

__all__ = ["PITFALLS"]
