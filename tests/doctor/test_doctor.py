"""The doctor on learner-style modules (tests/doctor/zoo/, written without our code): correct modules pass, each of
the post's mistakes is named (exactly that one), unusable modules are refused in one line, files stay untouched."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
import torch

from anatomy import pitfalls
from anatomy.doctor import CheckError, check
from anatomy.doctor.report import display_width
from anatomy.doctor.subject import import_file

ZOO = Path(__file__).parent / "zoo"


def run(target: str, **kw):
    return check(str(ZOO / target), **kw)


# --- 1. correct modules -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, kw", [
    ("ours.py:OurAttention", {}), ("ours.py:OurCausalAttention", {"causal": True}),
    ("ours.py:OurBlock", {}), ("ours.py:OurPreNormBlock", {}),
    ("separate_attention.py:MultiHeadAttention", {}), ("fused_attention.py:FusedAttention", {}),
    ("separate_attention.py:CausalSelfAttention", {"causal": True}),
    ("fused_attention.py:CausalAttention", {"causal": True}),
    ("separate_block.py:PostNormBlock", {}), ("separate_block.py:PreNormBlock", {}), ("fused_block.py:Block", {}),
    ("other_styles.py:EinsumParams", {}), ("other_styles.py:HeadParams", {}),
])
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
BLOCK_CASES = [("shared_layernorm", "SharedLayerNorm"), ("norm_on_residual_path", "NormOnResidualPath"),
               ("no_residual", "NoResidual")]


@pytest.mark.parametrize("style", ["separate_attention.py", "fused_attention.py"])
@pytest.mark.parametrize("fault, cls, causal", FAULT_CASES)
def test_each_attention_fault_is_named_exactly(style, fault, cls, causal):
    report = run(f"{style}:{cls}", causal=causal)
    assert report.faults == {fault}, report.render()
    severity = pitfalls.FAULTS[fault].severity
    assert report.exit_code() == (1 if severity == "error" else 0)
    if severity == "error":
        assert report.diagnosis["status"] == "fault" and report.diagnosis["fault"] == fault
        assert report.diagnosis["max_abs_diff_vs_faulty_reference"] < 1e-12 < report.diagnosis[
            "max_abs_diff_vs_reference"]
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
    renamed = run("other_styles.py:Renamed")
    assert renamed.diagnosis["status"] == "unavailable" and "--map" in renamed.diagnosis["reason"]
    user_map = {f"{r}_proj.{p}": f"{u}.{p}" for r, u in zip("qkvo", ("alpha", "beta", "gamma", "delta"))
                for p in ("weight", "bias")}
    assert run("other_styles.py:Renamed", mapping=user_map).diagnosis["status"] == "matches"
    with pytest.raises(CheckError, match="unknown reference parameter 'nope'"):
        run("other_styles.py:Renamed", mapping={"nope": "alpha.weight"})
    with pytest.raises(CheckError, match="no parameter 'zeta.weight'"):
        run("other_styles.py:Renamed", mapping={"q_proj.weight": "zeta.weight"})


def test_two_mistakes_are_not_guessed_the_first_difference_is_named():
    report = run("other_styles.py:TwoMistakes")
    assert report.diagnosis["status"] == "unexplained" and report.faults == set()
    first = report.diagnosis["first_difference"]
    assert first["where"] == "input of o_proj" and first["matching_before"] == ["q_proj", "k_proj", "v_proj"]
    assert report.exit_code() == 1  # the token-order probe still sees the mixing


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

@pytest.mark.parametrize("target, kw, expected", [
    ("broken.py:Raises", {}, "raised RuntimeError: not implemented yet; expected it to return out (B, T, D)"),
    ("broken.py:ReturnsDict", {}, "returned dict; expected it to return out (B, T, D) or (out, weights)"),
    ("broken.py:NeedsConfig", {}, "the doctor builds CLASS(d_model, n_heads) (use --factory FUNC"),
    ("broken.py:Nope", {}, "has no 'Nope'; it defines: NeedsConfig, Raises"),
    ("missing.py:X", {}, "no such file"),
])
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

REPORTS = [("separate_attention.py:MaskAfterSoftmax", {}), ("fused_block.py:NormOnResidualPath", {}),
           ("torch_adapter.py:TorchMHA", {}), ("other_styles.py:TwoMistakes", {}),
           ("separate_attention.py:CausalOffByOne", {"causal": True}), ("broken.py:WrongShape", {})]


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
    assert list(report) == ["schema", "target", "kind", "settings", "found", "findings", "faults", "passed",
                            "skipped", "diagnosis", "summary"]
    assert report["schema"] == "anatomy.doctor/1" and report["faults"] == ["no_scaling"]
    assert set(report["settings"]) == {"d_model", "n_heads", "head_dim", "batch", "seq", "seed", "dtype",
                                       "causal_flag", "tolerance"}
    assert set(report["found"]) >= {"call", "returns", "weights_shape", "mask", "causal", "mapping"}
    for f in report["findings"]:
        assert list(f) == ["probe", "severity", "fault", "explained_by", "message", "evidence"]
        assert set(f["message"]) == {"en", "zh"}
    assert set(report["diagnosis"]) == {"status", "reason", "fault", "also", "mapping", "variant",
                                        "max_abs_diff_vs_reference", "max_abs_diff_vs_faulty_reference",
                                        "output_scale", "nearest", "first_difference"}
    assert report["summary"] == {"errors": 1, "warnings": 0, "exit_code": 1}
    assert all(set(s) == {"probe", "en", "zh"} for s in report["skipped"])
