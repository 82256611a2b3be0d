"""`anatomy trace --preset seed-block --format json` reproduces the post's §5.1 table row by row.

The table below is typed from the post (B=2, T=10, d_model=16, h=4, d_k=4). Each post row is expanded into the
trace rows it stands for: "Q/K/V 各" is three projections, "拆头" applies to each of q, k and v. Two rows are
rows the post folds away: the softmax weights (the post goes straight from scores to "softmax后加权") and the
FFN hidden layer (2, 10, 64), which the post leaves out.
"""

from __future__ import annotations

import json

from anatomy.cli.main import main

# (post step, post operation, post shape, trace kinds it stands for)
POST_TABLE = [
    ("输入", "词嵌入结果 + 位置编码", (2, 10, 16), ["embed"]),
    ("多头注意力", "线性投影生成Q/K/V 各", (2, 10, 16), ["proj", "proj", "proj"]),
    ("拆头", "reshape + transpose", (2, 4, 10, 4), ["split", "split", "split"]),
    ("缩放点积", "QK^T / sqrt(dk)", (2, 4, 10, 10), ["scores"]),
    ("softmax后加权", "attn V", (2, 4, 10, 4), ["z"]),
    ("并头", "transpose + reshape", (2, 10, 16), ["merge"]),
    ("输出投影", "线性层", (2, 10, 16), ["out"]),
    ("第一个残差Add", "加上未进入Attention的原始输入", (2, 10, 16), ["add"]),
    ("第一次LayerNorm", "在最后一维归一化", (2, 10, 16), ["norm"]),
    ("前馈网络", "线性 激活 线性", (2, 10, 16), ["ffn"]),
    ("第二次残差Add", "加上进入前馈前的输入", (2, 10, 16), ["add"]),
    ("第二次LayerNorm", "在最后一维归一化", (2, 10, 16), ["norm"]),
]
# rows the trace has and the post does not show: (insert before this post step, kind, shape)
EXTRA = [("softmax后加权", "softmax", (2, 4, 10, 10)), ("前馈网络", "hidden", (2, 10, 64))]


def _expected() -> list[tuple[str, tuple[int, ...]]]:
    rows = []
    for step, _op, shape, kinds in POST_TABLE:
        rows += [(extra_kind, extra_shape) for before, extra_kind, extra_shape in EXTRA if before == step]
        rows += [(kind, shape) for kind in kinds]
    return rows


def _trace(capsys) -> list[dict]:
    assert main(["trace", "--preset", "seed-block", "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["rows"]


def test_trace_matches_the_post_row_by_row(capsys):
    rows = _trace(capsys)
    got = [(r["kind"], tuple(r["shape"])) for r in rows]
    expected = _expected()
    assert len(got) == len(expected) == 18
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g == e, f"row {i + 1}: trace {g}, post {e}"


def test_every_post_row_is_present_with_its_shape(capsys):
    rows = _trace(capsys)
    i = 0
    for step, _op, shape, kinds in POST_TABLE:  # in the post's order, skipping the rows it folds away
        for kind in kinds:
            while rows[i]["kind"] != kind:
                i += 1
            assert tuple(rows[i]["shape"]) == shape, f"{step}: {rows[i]}"
            i += 1


def test_named_dims_and_the_rows_the_post_leaves_out(capsys):
    rows = _trace(capsys)
    dims = {r["kind"]: r["dims"] for r in rows}
    assert dims["scores"] == "(B=2, H=4, T=10, S=10)"
    assert dims["z"] == "(B=2, H=4, T=10, Dh=4)"
    assert dims["hidden"] == "(B=2, T=10, F=64)"
    assert [r["kind"] for r in rows].count("hidden") == 1
    params = {r["kind"]: r["params"] for r in rows if r["params"]}
    assert params["out"] == 16 * 16 + 16 and params["ffn"] == 16 * 64 + 64 + 64 * 16 + 16
