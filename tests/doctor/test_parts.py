"""The doctor's parts: name matching, convention discovery, sizes, text wrapping."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from anatomy.components import EncoderBlock, MultiHeadAttention
from anatomy.components.inputs import attention_inputs
from anatomy.doctor import check
from anatomy.doctor.contract.masks import MaskFormat, make_layout, pad_keep
from anatomy.doctor.diagnosis import sublayer
from anatomy.doctor.diagnosis.diagnose import attention_faults, block_faults
from anatomy.doctor.diagnosis.pairs import compatible_pairs
from anatomy.doctor.loading.building import randomize
from anatomy.doctor.mapping.naming import role_of
from anatomy.doctor.mapping.norms import find_qk_norm, qk_role
from anatomy.doctor.mapping.projections import find_attention
from anatomy.doctor.report.findings import display_width, wrap
from anatomy.doctor.report.words import fmt

ZOO = Path(__file__).parent / "zoo"


@pytest.mark.parametrize(
    "name, role",
    [
        ("q_proj", "q"),
        ("W_Q", "q"),
        ("linear_q", "q"),
        ("to_q", "q"),
        ("query", "q"),
        ("wq", "q"),
        ("fc_q", "q"),
        ("W_query_proj", "q"),
        ("key", "k"),
        ("k_lin", "k"),
        ("value", "v"),
        ("v", "v"),
        ("out_proj", "o"),
        ("W_O", "o"),
        ("fc_out", "o"),
        ("qkv", "qkv"),
        ("c_attn", "qkv"),
        ("in_proj", "qkv"),
        ("to_qkv", "qkv"),
        ("Wqkv", "qkv"),
        ("c_proj", None),
        ("proj", None),
        ("up_proj", None),
        ("weight", None),
        ("norm1", None),
    ],
)
def test_parameter_names_map_to_roles(name, role):
    assert role_of(name) == role


@pytest.mark.parametrize(
    "name, role",
    [
        ("q_norm", "q"),
        ("k_norm", "k"),
        ("query_norm", "q"),
        ("key_norm", "k"),
        ("q_layernorm", "q"),
        ("k_layernorm", "k"),
        ("q_ln", "q"),
        ("norm_k", "k"),
        ("q_rmsnorm", "q"),
        ("norm1", None),
        ("v_norm", None),
        ("out_norm", None),
        ("q_proj", None),
        ("ln_1", None),
        ("norm", None),
    ],
)
def test_qk_norm_names_map_to_q_and_k(name, role):
    assert qk_role(name) == role


class _QKNorms(nn.Module):
    """q/k/v/o Linears and norms: ``widths`` by name, each an nn.RMSNorm unless named in ``layer``."""

    def __init__(self, widths: dict[str, int], layer=()):
        super().__init__()
        for r in ("q", "k", "v", "o"):
            setattr(self, f"{r}_proj", nn.Linear(16, 16))
        for name, w in widths.items():
            setattr(self, name, nn.LayerNorm(w, eps=1e-3) if name in layer else nn.RMSNorm(w, eps=1e-4))


def test_qk_norms_are_found_by_name_width_and_number():
    named, _, _ = find_qk_norm(_QKNorms({"key_norm": 4, "query_norm": 4, "norm": 4}), "", 16, 4)
    assert (named.q, named.k, named.kind, named.eps, named.width) == ("query_norm", "key_norm", "rmsnorm", 1e-4, 4)
    two, src, mods = find_qk_norm(_QKNorms({"a": 4, "b": 4}, layer=("a", "b")), "", 16, 4)  # the only two: in order
    assert (two.q, two.k, two.kind, two.eps) == ("a", "b", "layernorm", 1e-3)
    assert {r: s.user for r, s in src.items()} == {
        "q_norm.weight": "a.weight",
        "q_norm.bias": "a.bias",
        "k_norm.weight": "b.weight",
        "k_norm.bias": "b.bias",
    }
    assert mods == {"q_norm": "a", "k_norm": "b"}
    wide, src, _ = find_qk_norm(_QKNorms({"q_norm": 16, "k_norm": 16}), "", 16, 4)  # over D: not mapped
    assert wide.width == 16 and src == {}
    for widths in ({"a": 4, "b": 4, "c": 4}, {"a": 4}, {"a": 16, "b": 16}, {"q_norm": 8, "k_norm": 8}, {}):
        assert find_qk_norm(_QKNorms(widths), "", 16, 4) is None, widths
    (hyp, interleaved), scope = find_attention(_QKNorms({"q_norm": 4, "k_norm": 4}), 16, 4)
    assert "interleaved" in interleaved.style  # the second reading: heads split as (Dh, H)
    assert scope == "" and hyp.qk_norm.kind == "rmsnorm" and hyp.modules["q_norm"] == "q_norm"
    assert {"q_norm.weight", "k_norm.weight"} <= hyp.sources.keys()


def test_layouts_say_only_what_they_can():
    keep = pad_keep(2, 5, [5, 3])
    assert make_layout("(B, S)", keep).shape == (2, 5)
    assert make_layout("(B, 1, 1, S)", keep).shape == (2, 1, 1, 5)
    assert make_layout("(B, 1, S)", keep).shape == (2, 1, 5)
    assert make_layout("(T, S)", keep) is None  # per-sequence padding is not a (T, S) mask
    causal = torch.ones(5, 5, dtype=torch.bool).tril().expand(2, 5, 5)
    assert make_layout("(B, S)", causal) is None and make_layout("(T, S)", causal).shape == (5, 5)
    additive = MaskFormat("additive", "(B, S)").make(keep)
    assert additive.dtype == torch.float64 and additive[1, 3] == torch.finfo(torch.float64).min
    assert additive[1, 2] == 0 and MaskFormat("bool_ignore", "(B, S)").make(keep)[1, 3]


class _Base(nn.Module):
    """A compact correct attention whose mask handling the subclasses vary."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def attend(self, x, hide):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.h, -1).transpose(1, 2) for z in self.qkv(x).chunk(3, -1))
        s = q @ k.transpose(-2, -1) / math.sqrt(d // self.h)
        if hide is not None:
            s = s.masked_fill(hide, torch.finfo(s.dtype).min)
        return self.out((s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d))


class IntMask(_Base):  # Hugging Face's attention_mask: integers, 1 = real token
    def forward(self, x, attention_mask=None):
        return self.attend(x, None if attention_mask is None else attention_mask[:, None, None, :] == 0)


class FullBoolIgnore(_Base):  # (B, T, S), True = ignore
    def forward(self, x, mask=None):
        return self.attend(x, None if mask is None else mask[:, None])


class KeywordOnly(_Base):
    def forward(self, x, *, mask=None):
        return self.attend(x, None if mask is None else ~mask)


class IgnoresMask(_Base):
    def forward(self, x, mask=None):
        return self.attend(x, None)


class InPlace(_Base):  # writes into its inputs; still correct
    def forward(self, x, mask=None):
        out = self.attend(x, None if mask is None else ~mask[:, None, None, :])
        x.zero_()
        if mask is not None:
            mask.fill_(False)
        return out


@pytest.mark.parametrize(
    "cls, sense, layout",
    [
        (InPlace, "bool_keep", "(B, S)"),
        (IntMask, "bool_keep", "(B, S)"),
        (FullBoolIgnore, "bool_ignore", "(B, 1, S)"),  # mask[:, None] broadcasts
        (KeywordOnly, "bool_keep", "(B, 1, 1, S)"),  # ~mask on (B, S) would not broadcast against (B, H, T, S)
    ],
)
def test_mask_conventions_are_discovered(cls, sense, layout):
    report = check(cls)
    assert (report.found["mask"]["sense"], report.found["mask"]["layout"]) == (sense, layout)
    assert report.findings == [], report.render()


def test_a_mask_that_is_ignored_is_a_padding_leak():
    report = check(IgnoresMask)
    [leak] = report.errors
    assert leak.probe == "padding_leak" and leak.evidence["mask_has_effect"] is False
    # the computation is the reference's on the runs without a mask; the ignored mask is the probe's finding,
    # and the report says both without contradicting itself
    assert report.faults == set() and report.diagnosis["status"] == "matches"
    text = " ".join(report.render(width=60).split())  # the words, whatever the wrapping (CI: COLUMNS=60)
    assert report.found["mask"]["ignored"] is True and "your mask changes nothing" in text


@pytest.mark.parametrize("d_model, n_heads", [(8, 2), (24, 3), (12, 6)])
def test_other_sizes(d_model, n_heads):
    kw = {"d_model": d_model, "n_heads": n_heads}
    assert check(str(ZOO / "fused_attention.py:FusedAttention"), **kw).findings == []
    assert check(str(ZOO / "separate_attention.py:ScaleByDModel"), **kw).faults == {"scale_by_d_model"}
    assert check(str(ZOO / "fused_attention.py:MergeWrongTranspose"), **kw).faults == {"merge_wrong_transpose"}
    assert check(str(ZOO / "separate_block.py:NoResidual"), **kw).faults == {"no_residual"}


def test_wrap_counts_chinese_as_two_columns():
    text = "拆头时直接 reshape 成 (B, H, T, Dh) 而没有先 transpose：每个头拿到的是别的 token 的切片" * 3
    lines = wrap(text, 40, first="  - ", rest="    ")
    assert all(display_width(line) <= 40 for line in lines) and len(lines) > 3
    assert "".join(line[4:] for line in lines).replace(" ", "") == text.replace(" ", "")
    long = wrap("x" * 130, 60)
    assert [len(line) for line in long] == [60, 60, 10]


def test_closing_punctuation_never_starts_a_line():
    text = "点积没有除以 sqrt(d_k)：分数方差随 d_k 增大，softmax 饱和成硬选择，梯度消失。"
    for width in range(30, 90, 3):
        lines = wrap(text, width, first="    ")
        assert all(display_width(line) <= width for line in lines)
        assert not any(line.strip()[:1] in "。，、；：" for line in lines), lines


def test_the_same_check_gives_the_same_report_and_leaves_the_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = check(str(ZOO / "other_styles.py:TwoMistakes")).to_json()
    assert torch.equal(torch.rand(3), expected)
    assert check(str(ZOO / "other_styles.py:TwoMistakes")).to_json() == a
    assert check(str(ZOO / "other_styles.py:TwoMistakes"), seed=1).to_json() != a


def test_numbers_print_short():
    assert [fmt(v) for v in (0.0, 0.5548, 3.9e-16, 12345.0, math.inf, None, 7)] == [
        "0",
        "0.5548",
        "3.9e-16",
        "1.2e+04",
        "inf",
        "n/a",
        "7",
    ]


def _reference(kind: str) -> nn.Module:
    ref = (
        (
            MultiHeadAttention(d_model=16, n_heads=4, kernel="math")
            if kind == "attention"
            else EncoderBlock.build(d_model=16, n_heads=4, kernel="math")
        )
        .double()
        .eval()
    )
    randomize(ref, 16, 0)  # gains != 1: a shared norm must show
    return ref


def test_faults_that_shadow_the_same_part_of_the_reference_are_not_paired():
    pairs = compatible_pairs(_reference("attention"), attention_faults())
    assert ("no_scaling", "mask_after_softmax") in pairs
    assert ("split_without_transpose", "merge_wrong_transpose") in pairs
    for same in [
        ("no_scaling", "scale_by_d_model"),
        ("mask_after_softmax", "padding_mask_on_queries"),
        ("mask_after_softmax", "causal_off_by_one"),
        ("padding_mask_on_queries", "causal_off_by_one"),
    ]:
        assert same not in pairs  # both scales; three knobs that each replace the kernel
    assert len(pairs) == 66 - 17  # 12 keys: 66 pairs, less those that share a slot (scales, kernels, splits)
    block = compatible_pairs(_reference("block"), attention_faults() + block_faults())
    assert ("no_residual", "norm_on_residual_path") not in block and ("no_scaling", "shared_layernorm") in block
    assert len(block) == 87


def test_paired_faults_are_both_active_and_both_undone():
    ref = _reference("block")
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    mask = pad_keep(2, 6, [6, 4])[:, :1, None]  # (B, 1, 1, S), True = may attend

    def out():
        with torch.no_grad():
            return ref(x, ctx=attention_inputs(ref, x, mask=mask, is_causal=True))[0]

    base = out()
    for a, b in compatible_pairs(ref, attention_faults() + block_faults()):
        with sublayer.inject(ref, a):
            only_a = out()
        with sublayer.inject(ref, b):
            only_b = out()
        with sublayer.inject(ref, a), sublayer.inject(ref, b):
            both = out()
        assert (both - only_a).abs().max() > 1e-6 and (both - only_b).abs().max() > 1e-6, (a, b)
        assert torch.equal(out(), base), (a, b)
