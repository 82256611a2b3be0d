"""The doctor on learner-style modules (tests/doctor/zoo/, written without our code): correct modules pass, each of
the post's mistakes is named (exactly that one), unusable modules are refused in one line, files stay untouched."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from anatomy import pitfalls
from anatomy.doctor import CheckError, check
from anatomy.doctor.loading.building import import_file
from anatomy.doctor.report.findings import display_width

ZOO = Path(__file__).parent / "zoo"


def run(target: str, **kw):
    return check(str(ZOO / target), **kw)


# --- 1. correct modules -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, kw",
    [
        ("ours.py:OurAttention", {}),
        ("ours.py:OurCausalAttention", {"causal": True}),
        ("ours.py:OurBlock", {}),
        ("ours.py:OurPreNormBlock", {}),
        ("separate_attention.py:MultiHeadAttention", {}),
        ("fused_attention.py:FusedAttention", {}),
        ("separate_attention.py:CausalSelfAttention", {"causal": True}),
        ("fused_attention.py:CausalAttention", {"causal": True}),
        ("separate_block.py:PostNormBlock", {}),
        ("separate_block.py:PreNormBlock", {}),
        ("fused_block.py:Block", {}),
        ("other_styles.py:EinsumParams", {}),
        ("other_styles.py:HeadParams", {}),
        ("gqa_attention.py:GroupedQueryAttention", {}),
        ("gqa_attention.py:MultiQueryAttention", {}),
        ("gqa_attention.py:TiledGroups", {}),
        ("gqa_attention.py:FusedGQA", {}),
        ("gqa_attention.py:LlamaBlock", {}),
    ],
)
def test_correct_modules_pass_with_no_finding_at_all(target, kw):
    report = run(target, **kw)
    assert report.findings == [], report.render()
    assert report.diagnosis["status"] == "matches" and report.diagnosis["max_abs_diff_vs_reference"] < 1e-12
    assert report.exit_code(strict=True) == 0


def test_our_modules_are_recognised_as_what_they_are():
    attn = run("ours.py:OurAttention")
    assert attn.kind == "attention" and attn.found["returns"] == "(out, weights)"
    assert attn.found["mask"]["sense"] == "bool_keep" and attn.found["mask"]["layout"] == "(B, 1, 1, S)"
    assert attn.found["mask"]["causal_layout"] == "(B, 1, T, S)" and "causal_leak" in attn.passed
    assert {"scaling", "padding_leak", "token_order", "fully_masked"} <= set(attn.passed)
    post, pre = run("ours.py:OurBlock"), run("ours.py:OurPreNormBlock")
    assert post.kind == pre.kind == "block"
    assert post.found["block"]["placement"] == "post" and pre.found["block"]["placement"] == "pre"
    assert post.found["block"]["d_ff"] == 64 and post.found["block"]["activation"] == "relu"


def test_torch_multihead_attention_passes_and_its_nan_on_empty_rows_is_a_warning():
    report = run("torch_adapter.py:TorchMHA")
    assert report.errors == [] and report.exit_code() == 0 and report.exit_code(strict=True) == 1
    [w] = report.warnings
    assert w.fault == "inf_fill_no_guard" and w.probe == "fully_masked" and w.evidence["nan_outputs"] > 0
    assert "torch.nn.MultiheadAttention" in w.en
    assert report.found["mask"]["sense"] == "bool_ignore" and report.found["mask"]["layout"] == "(B, S)"
    assert report.diagnosis["status"] == "matches"


# --- 2. each fault, in two independent styles -------------------------------------------------------------------

FAULT_CASES = [  # (fault, class name, needs --causal); the same class name exists in both style files
    ("split_without_transpose", "SplitWithoutTranspose", False),
    ("merge_wrong_transpose", "MergeWrongTranspose", False),
    ("no_scaling", "NoScaling", False),
    ("scale_by_d_model", "ScaleByDModel", False),
    ("mask_after_softmax", "MaskAfterSoftmax", False),
    ("padding_mask_on_queries", "PaddingMaskOnQueries", False),
    ("causal_off_by_one", "CausalOffByOne", True),
    ("inf_fill_no_guard", "InfFillNoGuard", False),
]
BLOCK_CASES = [
    ("shared_layernorm", "SharedLayerNorm"),
    ("norm_on_residual_path", "NormOnResidualPath"),
    ("no_residual", "NoResidual"),
]


@pytest.mark.parametrize("style", ["separate_attention.py", "fused_attention.py"])
@pytest.mark.parametrize("fault, cls, causal", FAULT_CASES)
def test_each_attention_fault_is_named_exactly(style, fault, cls, causal):
    report = run(f"{style}:{cls}", causal=causal)
    assert report.faults == {fault}, report.render()
    severity = pitfalls.FAULTS[fault].severity
    assert report.exit_code() == (1 if severity == "error" else 0)
    if severity == "error":
        assert report.diagnosis["status"] == "fault" and report.diagnosis["fault"] == fault
        assert report.diagnosis["faults"] == [fault]
        assert (
            report.diagnosis["max_abs_diff_vs_faulty_reference"] < 1e-12 < report.diagnosis["max_abs_diff_vs_reference"]
        )
    else:  # a hazard that leaves real tokens right: the output matches the reference
        assert report.diagnosis["status"] == "matches" and report.errors == []
    assert all(f.fault == fault or f.explained_by == fault for f in report.findings)


@pytest.mark.parametrize("style", ["separate_block.py", "fused_block.py"])
@pytest.mark.parametrize("fault, cls", BLOCK_CASES)
def test_each_block_fault_is_named_exactly(style, fault, cls):
    report = run(f"{style}:{cls}")
    assert report.kind == "block"
    assert report.faults == {fault}, report.render()
    assert report.diagnosis["fault"] == fault and report.exit_code() == 1
    assert all(f.fault == fault or f.explained_by == fault for f in report.findings)


# --- grouped-query attention ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, n_kv, style",
    [
        ("GroupedQueryAttention", 2, "separate Linears (grouped-query attention, 2 key/value heads)"),
        ("MultiQueryAttention", 1, "separate Linears (multi-query attention, 1 key/value head)"),
        (
            "TiledGroups",
            2,
            "separate Linears (grouped-query attention, 2 key/value heads, tiled: query head i uses "
            "key/value head i mod 2)",
        ),
        ("FusedGQA", 2, "fused qkv Linear (q|k|v, grouped-query attention, 2 key/value heads)"),
        ("LlamaBlock", 2, "separate Linears (grouped-query attention, 2 key/value heads)"),
    ],
)
def test_grouped_query_attention_is_mapped_with_its_key_value_heads(cls, n_kv, style):
    report = run(f"gqa_attention.py:{cls}")
    assert report.found["mapping"]["n_kv_heads"] == n_kv and report.found["mapping"]["style"] == style
    assert report.diagnosis["mapping"] == style and report.diagnosis["max_abs_diff_vs_reference"] < 1e-12
    if cls not in ("FusedGQA", "LlamaBlock"):  # these return no weights; the others' fit q·k of the regrouped heads
        assert "scaling" in report.passed, report.render()


@pytest.mark.parametrize(
    "fault, cls", [("no_scaling", "NoScaling"), ("split_without_transpose", "SplitWithoutTranspose")]
)
@pytest.mark.parametrize("d_model, n_heads", [(16, 4), (32, 8)])  # 2 key/value heads for 4 and for 8 query heads
def test_grouped_query_attention_faults_are_named_exactly(fault, cls, d_model, n_heads):
    report = run(f"gqa_attention.py:{cls}", d_model=d_model, n_heads=n_heads)
    assert report.faults == {fault}, report.render()
    assert report.diagnosis["status"] == "fault" and report.diagnosis["fault"] == fault
    assert report.diagnosis["max_abs_diff_vs_faulty_reference"] < 1e-12 < report.diagnosis["max_abs_diff_vs_reference"]
    assert report.found["mapping"]["n_kv_heads"] == 2
    assert all(f.fault == fault or f.explained_by == fault for f in report.findings)


def test_tiled_key_value_heads_are_compared_in_the_learners_head_order():
    """The walk to the first difference compares q_proj's output, the weights and o_proj's input per head in the
    learner's order; a tiled module with an unknown mistake after o_proj matches everywhere up to it."""
    report = run("gqa_attention.py:TiledHalfResidualInside")
    assert report.diagnosis["status"] == "unexplained" and "tiled" in report.diagnosis["mapping"]
    first = report.diagnosis["first_difference"]
    assert first["where"] == "after the last mapped sub-module (the output)"
    assert first["matching_before"] == ["q_proj", "k_proj", "v_proj", "attention weights", "o_proj"]


def test_grouped_query_attention_through_a_user_map():
    user_map = {
        f"{r}_proj.{p}": f"{u}.{p}"
        for r, u in zip("qkvo", ("alpha", "beta", "gamma", "delta"))
        for p in ("weight", "bias")
    }
    report = run("gqa_attention.py:Renamed", mapping=user_map)
    assert report.diagnosis["status"] == "matches" and report.found["mapping"]["n_kv_heads"] == 2


def test_symptoms_carry_their_numbers():
    split = run("separate_attention.py:SplitWithoutTranspose")
    order = next(f for f in split.findings if f.probe == "token_order")
    assert order.explained_by == "split_without_transpose" and order.evidence["max_diff"] > 1e-3
    scale = next(f for f in run("separate_attention.py:ScaleByDModel").findings if f.probe == "scaling")
    assert scale.fault == "scale_by_d_model" and scale.evidence["fitted_scale"] == pytest.approx(0.25, rel=1e-6)
    leak = next(f for f in run("fused_attention.py:CausalOffByOne", causal=True).findings if f.probe == "causal_leak")
    assert leak.evidence["changed_token"] == leak.evidence["query"] + 1  # the next token leaks, nothing further
    pad = next(f for f in run("separate_attention.py:MaskAfterSoftmax").findings if "row_sum_min" in f.evidence)
    assert pad.evidence["row_sum_min"] < 0.9


def test_other_hazards_are_warnings():
    narrow = run("separate_block.py:NarrowFFN")
    assert [(f.probe, f.severity) for f in narrow.findings] == [("ffn_width", "warning")]
    assert narrow.exit_code() == 0 and narrow.exit_code(strict=True) == 1
    annotated = run("other_styles.py:Annotated")  # the annotated transformer's -1e9 does not fit in float16
    assert annotated.faults == {"finite_mask_fill"} and annotated.errors == []
    assert annotated.found["call"] == "forward(x, x, x, mask)" and annotated.found["mask"]["layout"] == "(B, 1, S)"
    assert run("fused_block.py:UnusedSecondNorm").faults == {"shared_layernorm"}


def test_mapping_styles_and_user_map():
    assert "x @ W" in run("other_styles.py:EinsumParams").found["mapping"]["style"]
    assert run("other_styles.py:EinsumParams").found["mask"]["sense"] == "additive"
    renamed = run("other_styles.py:Renamed")  # names say nothing: the mapping is read from the dataflow
    assert renamed.diagnosis["status"] == "matches" and renamed.found["mapping"]["style"].startswith("observed")
    user_map = {
        f"{r}_proj.{p}": f"{u}.{p}"
        for r, u in zip("qkvo", ("alpha", "beta", "gamma", "delta"))
        for p in ("weight", "bias")
    }
    assert run("other_styles.py:Renamed", mapping=user_map).diagnosis["status"] == "matches"
    with pytest.raises(CheckError, match="unknown reference parameter 'nope'"):
        run("other_styles.py:Renamed", mapping={"nope": "alpha.weight"})
    with pytest.raises(CheckError, match="no parameter 'zeta.weight'"):
        run("other_styles.py:Renamed", mapping={"q_proj.weight": "zeta.weight"})


# --- two faults at once -------------------------------------------------------------------------------------------

PAIR_CASES = [  # (target, kw, the two faults in the zoo's order)
    ("two_faults.py:NoScalingMaskAfterSoftmax", {}, ["no_scaling", "mask_after_softmax"]),
    ("other_styles.py:TwoMistakes", {}, ["no_scaling", "merge_wrong_transpose"]),
    ("two_faults.py:SplitCausalOffByOne", {"causal": True}, ["split_without_transpose", "causal_off_by_one"]),
    ("two_faults.py:SharedNormNoScaling", {}, ["no_scaling", "shared_layernorm"]),
]


@pytest.mark.parametrize("target, kw, pair", PAIR_CASES)
def test_two_faults_at_once_are_both_named_exactly(target, kw, pair):
    report = run(target, **kw)
    d = report.diagnosis
    assert d["status"] == "fault" and d["faults"] == pair and d["fault"] == pair[0], report.render()
    assert d["also"] == [] and d["also_pairs"] == []
    assert d["max_abs_diff_vs_faulty_reference"] < 1e-12 < 1e-3 < d["max_abs_diff_vs_reference"]
    assert report.faults == set(pair) and report.to_dict()["faults"] == sorted(pair)
    assert all(f.fault in pair or f.explained_by in pair for f in report.findings)
    diagnoses = [f for f in report.findings if f.probe == "diagnosis"]
    assert [f.fault for f in diagnoses] == pair and all(f.evidence["faults"] == pair for f in diagnoses)
    assert report.counts() == (2, 0) and report.exit_code() == 1
    assert "no single fault" in diagnoses[0].en and "没有单个错误能复现" in diagnoses[0].zh
    assert f"reproduced by two bug-zoo faults together, {pair[0]} and {pair[1]}" in report.render(width=300)
    assert f"同时打开 bug zoo 中的 {pair[0]} 和 {pair[1]} 后完全吻合" in report.render(lang="zh", width=300)


def test_two_faults_in_the_json_report_of_the_command_line(capsys):
    from anatomy.cli.main import main

    assert main(["check", str(ZOO / "two_faults.py:NoScalingMaskAfterSoftmax"), "--format", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "anatomy.doctor/1" and report["faults"] == ["mask_after_softmax", "no_scaling"]
    diag = report["diagnosis"]
    assert diag["status"] == "fault" and diag["fault"] == "no_scaling"
    assert diag["faults"] == ["no_scaling", "mask_after_softmax"] and diag["also_pairs"] == []
    assert diag["max_abs_diff_vs_faulty_reference"] < 1e-12
    assert report["summary"] == {"errors": 2, "warnings": 0, "exit_code": 1}
    assert [f["fault"] for f in report["findings"] if f["probe"] == "diagnosis"] == diag["faults"]


def test_a_pair_explains_each_symptom_by_the_fault_that_causes_it():
    report = run("two_faults.py:NoScalingMaskAfterSoftmax")
    leaks = [f for f in report.findings if f.probe == "padding_leak"]
    assert leaks and all(f.explained_by == "mask_after_softmax" for f in leaks)
    assert next(f for f in report.findings if f.probe == "scaling").fault == "no_scaling"
    causal = run("two_faults.py:SplitCausalOffByOne", causal=True)
    assert next(f for f in causal.findings if f.probe == "causal_leak").explained_by == "causal_off_by_one"


def test_pairs_are_tried_only_when_no_single_fault_reproduces_the_output(monkeypatch):
    from anatomy.doctor.diagnosis import pairs

    def no_pairs(*a, **kw):
        raise AssertionError("pairs were tried although a single fault reproduces the output")

    monkeypatch.setattr(pairs, "try_pairs", no_pairs)
    report = run("separate_attention.py:NoScaling")
    assert report.diagnosis["faults"] == ["no_scaling"] and report.diagnosis["also_pairs"] == []
    assert all(len(n["faults"]) <= 1 for n in report.diagnosis["nearest"])


def test_what_no_fault_and_no_pair_reproduces_is_not_guessed_the_first_difference_is_named():
    report = run("learner_attention_slips.py:SigmoidWeights")
    assert report.diagnosis["status"] == "unexplained" and report.faults == set()
    assert report.diagnosis["faults"] == [] and report.diagnosis["fault"] is None
    first = report.diagnosis["first_difference"]
    assert first["where"] == "input of w_o" and first["matching_before"] == ["w_q", "w_k", "w_v"]
    [warning] = report.warnings
    assert "neither a single fault of the bug zoo nor a pair of them reproduces it" in warning.en
    assert "没有单个错误、也没有两个错误的组合能复现" in warning.zh
    assert "no single fault or pair of faults reproduces it" in report.render()


def test_python_api_takes_classes_and_instances_without_changing_them():
    mod = import_file(ZOO / "separate_attention.py")  # the doctor's loader: no __pycache__ in the zoo
    assert check(mod.NoScaling).faults == {"no_scaling"}
    inst = mod.MultiHeadAttention(16, 4)
    before = {k: v.clone() for k, v in inst.state_dict().items()}
    assert check(inst).findings == []
    assert all(torch.equal(before[k], v) for k, v in inst.state_dict().items())
    assert torch.get_num_threads() >= 1  # restored
    assert check(mod.MultiHeadAttention, d_model=24, n_heads=3).findings == []


# --- 3. modules that cannot be run --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, kw, expected",
    [
        ("broken.py:Raises", {}, "raised RuntimeError: not implemented yet; expected it to return out (B, T, D)"),
        ("broken.py:ReturnsDict", {}, "returned dict; expected it to return out (B, T, D) or (out, weights)"),
        ("broken.py:NeedsConfig", {}, "the doctor builds CLASS(d_model, n_heads) (use --factory FUNC"),
        ("broken.py:Nope", {}, "has no 'Nope'; it defines: NeedsConfig, Raises"),
        ("missing.py:X", {}, "no such file"),
    ],
)
def test_unusable_modules_raise_one_line(target, kw, expected):
    with pytest.raises(CheckError) as info:
        run(target, **kw)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_factory_and_wrong_output_shape():
    assert run("broken.py", factory="make_needs_config").diagnosis["status"] == "unavailable"
    report = run("broken.py:WrongShape")
    assert [f.probe for f in report.findings] == ["shape"] and report.exit_code() == 1
    assert report.findings[0].evidence["output_shape"] == [2, 6, 32]


def test_the_learners_file_is_never_modified(tmp_path):
    src = tmp_path / "mine.py"
    shutil.copy(ZOO / "separate_attention.py", src)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    stat = src.stat()
    check(f"{src}:NoScaling")
    check(f"{src}:MultiHeadAttention")
    assert hashlib.sha256(src.read_bytes()).hexdigest() == digest and src.stat().st_mtime_ns == stat.st_mtime_ns
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.py"]  # no __pycache__ next to it


# --- 4. the report ------------------------------------------------------------------------------------------------

REPORTS = [
    ("separate_attention.py:MaskAfterSoftmax", {}),
    ("fused_block.py:NormOnResidualPath", {}),
    ("torch_adapter.py:TorchMHA", {}),
    ("other_styles.py:TwoMistakes", {}),
    ("two_faults.py:NoScalingMaskAfterSoftmax", {}),
    ("other_styles.py:SoftmaxOverQueries", {}),
    ("gqa_attention.py:TiledGroups", {}),
    ("qk_norm_attention.py:NormBeforeSplit", {}),
    ("separate_attention.py:CausalOffByOne", {"causal": True}),
    ("broken.py:WrongShape", {}),
]


@pytest.mark.parametrize("target, kw", REPORTS)
def test_text_report_fits_the_terminal_in_both_languages(target, kw):
    report = run(target, **kw)
    for lang in ("en", "zh"):
        for width in (80, 100):
            text = report.render(lang=lang, width=width)
            assert max(display_width(line) for line in text.splitlines()) <= width, text
    zh = report.render(lang="zh")
    assert "退出码" in zh and ("错误" in zh or "警告" in zh or "通过" in zh)


def test_the_report_says_the_post_in_both_languages():
    report = run("separate_attention.py:NoScaling")
    en, zh = report.render(lang="en"), report.render(lang="zh")
    fault = pitfalls.FAULTS["no_scaling"]
    assert fault.summary_en.split(":")[0] in en and fault.post_zh[:10] in en
    assert fault.summary_zh[:10] in zh and "分数没有除以 sqrt(d_k)" in zh
    assert "1 error, 0 warnings → exit 1" in en and "1 个错误，0 个警告 → 退出码 1" in zh


def test_json_schema_is_stable():
    report = run("separate_attention.py:NoScaling").to_dict()
    assert list(report) == [
        "schema",
        "target",
        "kind",
        "settings",
        "found",
        "findings",
        "faults",
        "passed",
        "skipped",
        "diagnosis",
        "summary",
    ]
    assert report["schema"] == "anatomy.doctor/1" and report["faults"] == ["no_scaling"]
    assert set(report["settings"]) == {
        "d_model",
        "n_heads",
        "head_dim",
        "batch",
        "seq",
        "seed",
        "dtype",
        "causal_flag",
        "tolerance",
        "computed_in",
        "tolerance_floor",
    }  # + additions
    assert set(report["found"]) >= {"call", "returns", "weights_shape", "mask", "causal", "mapping"}
    for f in report["findings"]:
        assert list(f) == ["probe", "severity", "fault", "explained_by", "message", "evidence", "where"]
        assert set(f["message"]) == {"en", "zh"}
    assert list(report["diagnosis"])[:13] == [
        "status",
        "reason",
        "fault",
        "also",
        "mapping",
        "variant",
        "max_abs_diff_vs_reference",
        "max_abs_diff_vs_faulty_reference",
        "output_scale",
        "nearest",
        "first_difference",
        "faults",
        "also_pairs",
    ]
    assert list(report["diagnosis"])[13:] == ["sub_layer", "unexplained", "pairs"]  # additions (docs/doctor.md)
    assert report["diagnosis"]["sub_layer"] is None and report["diagnosis"]["unexplained"] is None
    assert report["diagnosis"]["pairs"] is None  # a single fault reproduces it: no pair was tried
    assert {"seq_first", "call_notes", "ignored_returns", "observed"} <= set(report["found"])
    assert report["diagnosis"]["faults"] == ["no_scaling"] and report["diagnosis"]["also_pairs"] == []
    assert all(list(n) == ["fault", "mapping", "max_abs_diff", "faults"] for n in report["diagnosis"]["nearest"])
    assert report["found"]["mapping"]["n_kv_heads"] == 4 and report["found"]["mapping"]["qk_norm"] is None
    assert report["summary"] == {"errors": 1, "warnings": 0, "exit_code": 1}
    assert all(set(s) == {"probe", "en", "zh"} for s in report["skipped"])


# --- QK-norm ------------------------------------------------------------------------------------------------------

QK = "qk_norm_attention.py"


@pytest.mark.parametrize(
    "cls, kind, eps, q, k",
    [
        ("QKNormAttention", "rmsnorm", 1e-6, "q_norm", "k_norm"),  # torch.nn.RMSNorm(head_dim)
        ("QKLayerNormAttention", "layernorm", 1e-5, "q_norm", "k_norm"),  # torch.nn.LayerNorm(head_dim), with a bias
        ("HandWrittenRMSNorm", "rmsnorm", 1e-5, "query_norm", "key_norm"),  # its own class, a weight only
        ("ScaleNamedGain", "rmsnorm", 1e-6, "q_norm", "k_norm"),  # its gain called `scale` (LLMs-from-scratch)
        ("GammaBetaNorms", "layernorm", 1e-5, "q_norm", "k_norm"),  # `gamma` and `beta`
        ("QKNormBlock", "rmsnorm", 1e-6, "self_attn.q_norm", "self_attn.k_norm"),  # a block: RMSNorm(D) eps 1e-5 too
    ],
)
def test_a_correct_qk_norm_module_is_mapped_and_passes(cls, kind, eps, q, k):
    report = run(f"{QK}:{cls}")
    assert report.findings == [], report.render()
    near = 1e-6 if cls == "ScaleNamedGain" else 1e-12  # that norm computes in float32
    assert report.diagnosis["status"] == "matches" and report.diagnosis["max_abs_diff_vs_reference"] < near
    assert report.kind == ("block" if cls == "QKNormBlock" else "attention")  # Dh-wide norms do not make a block
    assert report.found["mapping"]["qk_norm"] == {"kind": kind, "eps": eps, "q_norm": q, "k_norm": k, "width": 4}
    pre = "attn." if cls == "QKNormBlock" else ""
    pairs = {r: u for r, u, _ in report.found["mapping"]["pairs"]}
    gain = {"ScaleNamedGain": "scale", "GammaBetaNorms": "gamma"}.get(cls, "weight")
    assert pairs[f"{pre}q_norm.weight"] == f"{q}.{gain}" and pairs[f"{pre}k_norm.weight"] == f"{k}.{gain}"
    assert (f"{pre}q_norm.bias" in pairs) == (kind == "layernorm")
    if cls == "QKNormBlock":
        assert report.found["block"]["norms"] == ["input_layernorm", "post_attention_layernorm"]
    else:
        assert "scaling" in report.passed  # the fit is against q·k after the norms
    assert f"qk-norm   {kind} over head_dim, eps {eps:g} · {q}, {k}" in report.render(width=100)


@pytest.mark.parametrize(
    "fault, cls",
    [
        ("no_scaling", "NoScaling"),
        ("split_without_transpose", "SplitWithoutTranspose"),
        ("mask_after_softmax", "MaskAfterSoftmax"),
    ],
)
@pytest.mark.parametrize("d_model, n_heads", [(16, 4), (24, 3)])
def test_faults_on_a_qk_norm_module_are_named_exactly(fault, cls, d_model, n_heads):
    report = run(f"{QK}:{cls}", d_model=d_model, n_heads=n_heads)
    assert report.faults == {fault}, report.render()
    d = report.diagnosis
    assert d["status"] == "fault" and d["faults"] == [fault] and d["also"] == []
    assert d["max_abs_diff_vs_faulty_reference"] < 1e-12 < 1e-3 < d["max_abs_diff_vs_reference"]
    assert report.found["mapping"]["qk_norm"]["width"] == d_model // n_heads
    assert all(f.fault == fault or f.explained_by == fault for f in report.findings)


def test_qk_norm_over_d_model_before_the_split_is_unexplained_at_q_norm():
    """No fault of the zoo normalises across the heads: the doctor does not guess, it names q_norm's output as the
    first difference (its input, q_proj's output, matches)."""
    report = run(f"{QK}:NormBeforeSplit")
    assert report.diagnosis["status"] == "unexplained" and report.faults == set(), report.render()
    assert report.kind == "attention"
    assert report.found["mapping"]["qk_norm"] == {
        "kind": "rmsnorm",
        "eps": 1e-6,
        "q_norm": "q_norm",
        "k_norm": "k_norm",
        "width": 16,
    }
    assert not any("q_norm." in r for r, _, _ in report.found["mapping"]["pairs"])  # (D,) cannot feed (Dh,)
    first = report.diagnosis["first_difference"]
    assert first["where"] == "output of q_norm" and first["reference"] == "q_norm"
    assert first["matching_before"] == ["q_proj", "k_proj", "v_proj"]


def test_qk_norm_through_a_user_map_and_in_the_json_report(capsys):
    from anatomy.cli.main import main

    plain = run(f"{QK}:Renamed")  # three Dh-wide norms, none named for q or k: not guessed
    assert plain.found["mapping"]["qk_norm"] is None and plain.diagnosis["status"] == "unexplained"
    user_map = {"q_norm.weight": "alpha.weight", "k_norm.weight": "beta.weight"}
    assert main(["check", str(ZOO / f"{QK}:Renamed"), "--map", json.dumps(user_map), "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["diagnosis"]["status"] == "matches" and report["findings"] == []
    assert report["found"]["mapping"]["qk_norm"] == {
        "kind": "rmsnorm",
        "eps": 1e-6,
        "q_norm": "alpha",
        "k_norm": "beta",
        "width": 4,
    }
    assert ["q_norm.weight", "alpha.weight", "from --map"] in report["found"]["mapping"]["pairs"]
    with pytest.raises(CheckError, match="unknown reference parameter 'q_norm.gain'; valid names: .*k_norm.bias"):
        run(f"{QK}:Renamed", mapping={"q_norm.gain": "alpha.weight"})


# --- positions inside attention -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cls, scheme, positions",
    [
        ("RoPEAttention", "RoPE, interleaved layout (pairs 2i, 2i+1)", "relative"),
        ("HalfRoPEAttention", "RoPE, half layout (pairs i, i + Dh/2)", "relative"),
        ("Llama3RoPE", "RoPE, half layout (pairs i, i + Dh/2), base 500,000", "relative"),
        (
            "Llama31RoPE",
            "RoPE, interleaved layout (pairs 2i, 2i+1), base 500,000, Llama 3.1 frequency scaling",
            "relative",
        ),
        ("CausalRoPE", "RoPE, half layout (pairs i, i + Dh/2)", "dependent"),  # no mask: the shift cannot be tried
        ("ALiBiAttention", "ALiBi", "relative"),
        ("CausalALiBi", "ALiBi", "dependent"),  # the one-sided bias of decoders: under the causal mask the same
        ("CausalGQARoPE", "RoPE, half layout (pairs i, i + Dh/2)", "dependent"),  # its mask is ignored: no shift test
    ],
)
def test_a_relative_scheme_inside_attention_is_recognised_not_flagged(cls, scheme, positions):
    """A learner's RoPE or ALiBi attention (written without anatomy) matches our reference carrying that scheme;
    permuting tokens changing its outputs is by design, so the token-order probe stands down and says why."""
    report = run(f"rope_attention.py:{cls}", causal=cls.startswith("Causal"))
    assert report.diagnosis["status"] == "matches", report.render()
    assert report.diagnosis["variant"] == {"positional": scheme}
    assert report.diagnosis["max_abs_diff_vs_reference"] < 1e-12
    assert report.found["positions"] == positions
    assert "token_order" not in report.passed and all(f.probe != "token_order" for f in report.findings)
    if cls == "CausalGQARoPE":  # its ignored mask is an error of its own: left padding reaches the real tokens
        assert [f.probe for f in report.errors] == ["padding_leak"]
        assert report.errors[0].evidence["padding"] == "left"
    else:
        assert report.errors == []
    skip = next(s for s in report.skipped if s["probe"] == "token_order")
    assert scheme in skip["en"] and scheme in skip["zh"]


def test_a_fault_in_a_rope_attention_is_named_with_the_scheme():
    report = run("rope_attention.py:RoPENoScaling")
    assert report.diagnosis["fault"] == "no_scaling" and report.diagnosis["status"] == "fault"
    assert report.faults == {"no_scaling", "inf_fill_no_guard"}  # the -inf fill is a warning of its own
    assert report.diagnosis["variant"] == {"positional": "RoPE, interleaved layout (pairs 2i, 2i+1)"}


def test_absolute_positions_inside_attention_are_still_a_token_order_error():
    """Adding a sinusoidal table to q and k: shifting every position changes the outputs, so it is not a relative
    scheme, no reference matches, and permuting tokens is reported as before."""
    report = run("rope_attention.py:AbsoluteInside")
    assert report.found["positions"] == "absolute" and report.diagnosis["status"] == "unexplained"
    assert any(f.probe == "token_order" and f.severity == "error" for f in report.findings)


def test_position_free_modules_are_not_tried_with_positional_references():
    report = run("separate_attention.py:MultiHeadAttention")
    assert report.found["positions"] == "none" and "positional" not in report.diagnosis["variant"]
    mixed = run("separate_attention.py:SplitWithoutTranspose")
    assert mixed.found["positions"] == "absolute" and mixed.faults == {"split_without_transpose"}


def test_a_llama_layer_in_metas_naming_with_rope_matches():
    """A pre-norm RMSNorm + SwiGLU block around a RoPE attention, its FFN named as in Meta's Llama code (w1 gate,
    w3 up, w2 down: no "gate" in any name): mapped, and equal to our block carrying RoPE."""
    report = run("rope_attention.py:RoPEBlock")
    assert report.kind == "block" and report.diagnosis["status"] == "matches", report.render()
    assert report.diagnosis["variant"] == {
        "placement": "pre",
        "activation": "swiglu",
        "positional": "RoPE, half layout (pairs i, i + Dh/2)",
    }
    pairs = {ref: yours for ref, yours, _ in report.found["mapping"]["pairs"]}
    assert (pairs["ffn.gate_proj.weight"], pairs["ffn.up_proj.weight"], pairs["ffn.down_proj.weight"]) == (
        "w1.weight",
        "w3.weight",
        "w2.weight",
    )
    assert report.errors == []


def test_a_gate_called_second_under_neutral_names_is_found_by_behaviour():
    """llm.c's SwiGLU: ``c_proj(c_fc(x) * silu(c_fc2(x)))``, no "gate" in a name and the gate's Linear called second:
    the FFN run alone shows which input goes through the activation (before: read as the gate by call order, and
    the block matched nothing)."""
    report = run("rope_attention.py:GateCalledSecond")
    assert report.diagnosis["status"] == "matches" and report.errors == [], report.render()
    pairs = {ref: yours for ref, yours, _ in report.found["mapping"]["pairs"]}
    assert (pairs["ffn.gate_proj.weight"], pairs["ffn.up_proj.weight"]) == ("c_fc2.weight", "c_fc.weight")


def test_an_attention_returning_x_plus_its_output_matches_with_the_residual_named():
    """x + attention(x) (a diffusion U-Net's AttentionBlock) equals the reference plus its input: it matches, the
    residual inside is named in the variant, and a warning says a block adding x again would count it twice."""
    report = run("gqa_attention.py:TiledResidualInside")
    assert report.diagnosis["status"] == "matches" and "x + attention(x)" in report.diagnosis["variant"]["residual"]
    assert report.errors == [] and report.exit_code() == 0
    assert any("counted twice" in f.en for f in report.findings if f.severity == "warning")
