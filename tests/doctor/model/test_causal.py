"""The causal mask across the model: a buffer sliced wrongly for a shorter input (a leak, or a crash below
block_size), one layer of the stack without the mask (named, with its layer), every layer leaking (folded)."""

from __future__ import annotations

from tests.doctor.model.styles import line_of, lines, run, variant


def test_a_mask_buffer_sliced_wrongly_leaks_only_below_block_size(tmp_path):
    path = variant(
        tmp_path,
        "nano_style.py",
        "att = att.masked_fill(self.bias[:, :, :T, :T] == 0",
        "att = att.masked_fill(self.bias[:, :, -T:, :T] == 0",
    )
    report = run(path)
    assert report.faults == {"causal_mask_sliced_wrong"}
    assert line_of(path, "self.bias[:, :, -T:, :T]") in lines(report, "causal_mask_sliced_wrong")
    (leak,) = [f for f in report.findings if f.probe == "causal_leak"]
    assert leak.layers == [0, 1, 2] and "layers 0-2" in leak.en and leak.explained_by == "causal_mask_sliced_wrong"


def test_a_mask_row_indexed_by_length_leaks_below_and_fails_at_block_size(tmp_path):
    """nanoGPT's bias[:, :, T, :T]: one row broadcast over every query, out of range at T = block_size."""
    path = variant(
        tmp_path,
        "nano_style.py",
        "att = att.masked_fill(self.bias[:, :, :T, :T] == 0",
        "att = att.masked_fill(self.bias[:, :, T, :T] == 0",
    )
    report = run(path)
    assert "causal_mask_sliced_wrong" in report.faults
    (f,) = [f for f in report.findings if f.fault == "causal_mask_sliced_wrong"]
    assert "error_at_block_size" in f.evidence


def test_a_mask_buffer_that_fits_only_block_size_tokens(tmp_path):
    path = variant(
        tmp_path,
        "lecture_style.py",
        "wei = wei.masked_fill(self.tril[:T, :T] == 0",
        "wei = wei.masked_fill(self.tril[:, :T] == 0",
    )
    report = run(path, "GPTLanguageModel")
    assert report.faults == {"causal_mask_sliced_wrong"}
    assert line_of(path, "self.tril[:, :T]") in lines(report, "causal_mask_sliced_wrong")
    assert report.settings["seq"] == report.settings["block_size"]  # probed at the length it takes
    assert "every probe runs at that length" in report.found["call_notes"][0]["en"]


def test_the_mask_built_for_the_first_layer_only(tmp_path):
    path = variant(
        tmp_path,
        "llama_style.py",
        "            h = layer(h, start_pos, freqs_cis, mask)",
        "            h = layer(h, start_pos, freqs_cis, mask if layer is self.layers[0] else None)",
    )
    report = run(path, "Transformer")
    assert report.faults == {"causal_mask_missing_in_layer"}
    (f,) = [f for f in report.findings if f.fault == "causal_mask_missing_in_layer"]
    assert f.layers == [1, 2] and f.layer == 1 and "layers 1-2 of 3" in f.en
    assert line_of(path, "mask if layer is self.layers[0] else None") in lines(report, "causal_mask_missing_in_layer")
    assert f.to_dict()["layers"] == [1, 2]


def test_every_layer_leaking_is_one_folded_finding_and_the_first_layer(tmp_path):
    path = variant(
        tmp_path,
        "nano_style.py",
        '        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))\n',
        "",
    )
    report = run(path)
    leaks = [f for f in report.findings if f.probe == "causal_leak"]
    assert len(leaks) == 1 and leaks[0].layers == [0, 1, 2]
    (model,) = [f for f in report.findings if f.probe == "lm_causal_leak"]
    assert model.layer == 0 and model.severity == "error"
    assert "causal_mask_missing_in_layer" not in report.faults  # every layer: the blocks' own fault
    assert report.counts()[0] == 1  # the end-to-end leak and the blocks' leak: one mistake, one group


CAPABILITY_SCRIPT = """
import json, sys
from anatomy.doctor.model import causal
from anatomy.doctor.model.blocks import find_stack
from anatomy.doctor.model.build import Sizes, build_model
from anatomy.doctor.model.contract import LM, first_call
out = {}
for path in sys.argv[1:]:
    module, label = build_model(path + ":CausalLM", None, Sizes(), 0, None)
    lm = LM(module, label, Sizes(), None)
    first_call(lm)
    leaks = [causal.leak_at(lm, find_stack(module, 16), t) for t in (7, 12)]
    out[path] = [leak.leaks for leak in leaks]
print(json.dumps(out))
"""


def test_a_float32_additive_mask_is_causal_on_every_cpu(tmp_path):
    """hf_style.py builds its masks in float32 (finfo(float32).min) for SDPA; the doctor runs it in float64, where
    PyTorch's fused CPU kernel misreads such a mask at ATen's baseline capability (a false "sees the future" at
    T = 12 there, none with AVX-512): the causal probe says the same on both, and still finds the leak of a causal
    mask made of zeros. (The whole check of hf_style.py, on this CPU's kernels: test_check.py.)"""
    import json
    import os
    import subprocess
    import sys

    from tests.doctor.model.styles import HERE

    good = str(HERE / "hf_style.py")
    bad = variant(tmp_path, "hf_style.py", "torch.full((t, t), min_value,", "torch.full((t, t), 0.0,")
    root = HERE.parents[2]
    for capability in ("default", None):
        env = {**os.environ, "PYTHONPATH": str(root)}
        env.pop("ATEN_CPU_CAPABILITY", None)
        if capability is not None:
            env["ATEN_CPU_CAPABILITY"] = capability
        proc = subprocess.run(
            [sys.executable, "-c", CAPABILITY_SCRIPT, good, str(bad)], env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, proc.stderr
        got = json.loads(proc.stdout.strip().splitlines()[-1])
        assert got == {good: [False, False], str(bad): [True, True]}, capability
