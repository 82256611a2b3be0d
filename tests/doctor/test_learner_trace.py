"""``trace_learner``: the post's §5.1 rows for modules written in learner styles, and the first step that leaves
the post's flow, pointed at the learner's line."""

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from anatomy.doctor import CheckError, CheckTimeout
from anatomy.doctor.trace.learner_trace import trace_learner

ZOO = Path(__file__).parent / "zoo_learners"


def line_of(name: str, text: str) -> int:
    return next(i + 1 for i, s in enumerate((ZOO / name).read_text().splitlines()) if text in s)


def kinds(trace) -> list[tuple[str, str]]:
    return [(row.kind, row.dims) for row in trace.rows if row.kind]


def test_per_head_loop_rows_follow_the_post():
    t = trace_learner(str(ZOO / "trace_heads_loop.py") + ":MultiHeadAttention")
    assert t.deviation is None
    got = kinds(t)
    assert got.count(("proj", "(B, T, Dh)")) == 3  # q, k, v of head 0, each shown once "× H" (issue 20 item 7)
    assert all(row.repeat == 5 for row in t.rows if row.kind == "proj")
    assert got.count(("scores", "(B, T, S)")) == 1 and got.count(("softmax", "(B, T, S)")) == 1
    assert "linear × H" in t.render()
    assert ("merge", "(B, T, D)") in got and got[-1] == ("out", "(B, T, D)")
    soft = [row for row in t.rows if row.kind == "softmax"]
    assert soft[0].line == line_of("trace_heads_loop.py", "wei = F.softmax(wei, dim=-1)  # (B, T, T)")
    assert [row.role for row in t.rows if row.kind == "proj"][:3] == ["k", "q", "v"]


def test_fused_einsum_rows():
    t = trace_learner(str(ZOO / "trace_einsum_fused.py") + ":FusedAttention")
    got = kinds(t)
    assert got[0] == ("proj", "(B, T, 3*D)") and t.rows[0].role == "q|k|v"
    assert ("split", "(B, H, T, Dh)") in got and ("scores", "(B, H, T, S)") in got
    assert ("z", "(B, H, T, Dh)") in got and ("merge", "(B, T, D)") in got and ("out", "(B, T, D)") in got
    assert t.deviation is None


def test_block_rows_have_norms_residuals_and_ffn():
    t = trace_learner(str(ZOO / "trace_block.py") + ":Block")
    got = [k for k, _ in kinds(t)]
    assert got[0] == "norm" and got.count("add") == 2 and got.count("norm") == 2
    assert "hidden" in got and "ffn" in got and "scores" in got
    hidden = next(row for row in t.rows if row.kind == "hidden")
    assert hidden.shape == [2, 7, 80] and hidden.line == line_of("trace_block.py", "return self.c_proj(self.gelu(")


def test_split_without_transpose_marks_the_matmul_line():
    name = "trace_split_no_transpose.py"
    t = trace_learner(str(ZOO / name) + ":MultiHeadAttention")
    first = [row for row in t.rows if row.deviation == "first"]
    assert len(first) == 1 and first[0].kind == "scores" and first[0].dims == "(B, T, H, H)"
    assert first[0].line == line_of(name, "scores = torch.matmul(q, k.transpose(-2, -1))")
    text = t.render("table", "en")
    assert "the scores are (B, T, H, H)" in text and "(B, H, T, S)" in text
    assert f"line {line_of(name, 'q = self.W_q(x).view')}" in text
    zh = t.render("table", "zh")
    assert "第一个偏离博文流程的步骤" in zh and "分数的形状是 (B, T, H, H)" in zh
    doc = json.loads(t.render("json"))
    assert doc["deviation"]["line"] == first[0].line and doc["rows"][0]["dims"] == "(B, T, D)"


def test_sizes_options_change_the_rows():
    t = trace_learner(str(ZOO / "trace_einsum_fused.py") + ":FusedAttention", d_model=20, n_heads=4, batch=3, seq=6)
    scores = next(row for row in t.rows if row.kind == "scores")
    assert scores.shape == [3, 4, 6, 6] and scores.dims == "(B, H, T, S)"


def test_ambiguous_sizes_are_said():
    t = trace_learner(str(ZOO / "trace_einsum_fused.py") + ":FusedAttention", d_model=16, n_heads=4)
    assert any("H=Dh" in en for en, _ in t.notes)


def test_bad_input_is_one_clear_line(tmp_path):
    with pytest.raises(CheckError, match="no such file"):
        trace_learner(str(tmp_path / "missing.py") + ":X")
    with pytest.raises(CheckError, match="has no 'Nope'; it defines: Block"):
        trace_learner(str(ZOO / "trace_block.py") + ":Nope")
    src = tmp_path / "raises.py"
    src.write_text(
        "import torch.nn as nn\n\nclass A(nn.Module):\n    def __init__(self, d, h):\n"
        "        super().__init__()\n        self.q = nn.Linear(d, d)\n\n    def forward(self, x):\n"
        "        return self.q(x).view(3, -1, 7)\n"
    )
    with pytest.raises(CheckError, match=r"RuntimeError.*at line 9 of raises.py: `return self.q\(x\).view"):
        trace_learner(f"{src}:A")
    numpy_like = tmp_path / "numpy_like.py"
    numpy_like.write_text(
        "import torch\nimport torch.nn as nn\n\nclass A(nn.Module):\n"
        "    def __init__(self, d, h):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return torch.tensor(x.tolist())\n"
    )
    with pytest.raises(CheckError, match="no tensor operation on x"):
        trace_learner(f"{numpy_like}:A")


def test_a_forward_that_hangs_stops_at_the_limit(tmp_path):
    src = tmp_path / "hangs.py"
    src.write_text(
        "import torch.nn as nn\n\nclass A(nn.Module):\n    def __init__(self, d, h):\n"
        "        super().__init__()\n\n    def forward(self, x):\n        while True:\n"
        "            x = x + 0\n"
    )
    with pytest.raises(CheckTimeout, match="while tracing"):
        trace_learner(f"{src}:A", timeout=0.3)


def test_a_module_instance_and_torch_multihead_attention():
    class Wrap(nn.Module):
        def __init__(self):
            super().__init__()
            self.mha = nn.MultiheadAttention(20, 5, batch_first=True)

        def forward(self, x):
            return self.mha(x, x, x)[0]

    t = trace_learner(Wrap())
    assert any(row.op == "multi_head_attention_forward" for row in t.rows)
    assert any("runs as one call" in en for en, _ in t.notes)
    assert torch.get_num_threads() >= 1


def test_annotated_block_hand_written_norms_and_residuals_inside_sublayers():
    name = "trace_annotated_block.py"
    t = trace_learner(str(ZOO / name) + ":EncoderLayer")
    got = [k for k, _ in kinds(t)]
    assert got.count("norm") == 2 and got.count("add") == 2 and t.deviation is None
    norm = next(row for row in t.rows if row.kind == "norm")
    assert norm.line == line_of(name, "return self.a_2 * (x - mean) / (std + self.eps) + self.b_2")
    assert norm.module == "sublayer.0.norm"
    assert [row.role for row in t.rows if row.kind == "proj"] == ["q", "k", "v"]  # linears[0..2], by dataflow


@pytest.mark.parametrize("cls", ["FlashStyle", "GPT2Attention", "LazyAttention"])
def test_more_styles_follow_the_post(cls):
    t = trace_learner(str(ZOO / "trace_more_styles.py") + f":{cls}")
    got = kinds(t)
    assert t.deviation is None, t.deviation
    assert ("split", "(B, H, T, Dh)") in got and ("merge", "(B, T, D)") in got and got[-1] == ("out", "(B, T, D)")
    core = "fused" if cls == "FlashStyle" else "scores"
    assert any(k == core for k, _ in got)


MASKED = """import torch
import torch.nn as nn


class NeedsMask(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.q = nn.Linear(d, d)

    def forward(self, x, mask):
        s = self.q(x) @ x.transpose(1, 2)
        if mask is not None:
            s = s.masked_fill(mask == 0, -1e9)
        return torch.softmax(s, -1) @ x


class Repeats(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h, self.q = h, nn.Linear(d, d)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        mask = mask.repeat(1, self.h, 1, 1)
        q = self.q(x).view(b, t, self.h, -1).transpose(1, 2)
        s = (q @ q.transpose(-2, -1)).masked_fill(mask == 0, -1e9)
        return (torch.softmax(s, -1) @ q).transpose(1, 2).reshape(b, t, d)
"""


def test_a_required_mask_gets_none_and_a_failing_none_an_all_visible_mask(tmp_path):
    src = tmp_path / "masked.py"
    src.write_text(MASKED)
    t = trace_learner(f"{src}:NeedsMask")
    assert t.call == "forward(x, None)" and t.notes == []
    t = trace_learner(f"{src}:Repeats")
    assert t.call == "forward(x, mask (B, 1, 1, S) all visible)"
    assert "'NoneType' object has no attribute 'repeat'" in t.notes[0][0]
    assert any(row.kind == "scores" and row.dims == "(B, H, T, S)" for row in t.rows)
    assert not any("mask" in row.source and row.step == 0 for row in t.rows)  # the mask is not traced as data


# --- issue 20 item 7 ------------------------------------------------------------------------------------------

REAL = Path(__file__).parent / "zoo" / "real"


def test_sequence_first_module_is_traced_with_b_and_t_in_place():
    t = trace_learner(str(REAL / "speech.py:FairseqAttention"))  # (T, B, C) in and out
    assert "as (T, B, D)" in t.call and any("sequence-first" in en for en, _ in t.notes)
    proj = [row for row in t.rows if row.kind == "proj"]
    assert proj and all(row.dims == "(T, B, D)" and row.shape == [7, 2, 20] for row in proj)
    assert not any(d["kind"] == "output" for d in t.deviations)  # (T, B, D) out is its own layout, not a deviation


def test_a_float_cast_is_a_cast_not_a_scale():
    t = trace_learner(str(REAL / "speech.py:WhisperAttention"))
    cast = next(row for row in t.rows if row.op == "float")
    assert cast.kind == "cast" and "scale" not in t.render().split("qk = qk.float()")[1].splitlines()[0]


def test_fused_qkv_is_labelled_q_k_v_and_the_output_projection_is_named():
    t = trace_learner(str(REAL / "vision.py:TimmAttention"))
    assert [row.role for row in t.rows if row.kind == "proj"] == ["q|k|v"]
    assert t.rows[-1].kind == "out" and "linear projection Q|K|V" in t.render()


def test_residual_adds_of_a_block_are_labelled():
    t = trace_learner(str(REAL / "vision.py:CaiTBlock"))
    adds = [row for row in t.rows if row.kind == "add"]
    assert len(adds) == 2 and all(row.dims == "(B, T, D)" for row in adds)


def test_an_extra_transpose_is_not_hinted_as_a_missing_one():
    t = trace_learner(str(ZOO / "trace_extra_transpose.py") + ":ExtraTranspose")
    dev = t.deviation
    assert dev["kind"] == "extra_transpose" and "one transpose too many" in dev["seen"]
    assert "missing" not in dev["seen"].replace("not a missing one", "") and "多了一个 transpose" in dev["seen_zh"]
    assert dev["line"] == line_of("trace_extra_transpose.py", "return self.o((w @ v).transpose(1, 2).transpose(1, 2)")
