"""precision=fp16: autocast to float16 with a GradScaler. It trains like fp32; a step whose gradients overflow is
skipped and the loss scale halves (said, and recorded in metrics.jsonl) instead of stopping the run; overflow at
every step stops it after MAX_SKIPPED steps with advice; the scaler's state is checkpointed, so a resume is exact."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from anatomy.training import checkpoint as ckpt
from anatomy.training import loop, state
from anatomy.training.options import parse_words, resolve

from .helpers import lm_words, losses

WORDS = ("steps=12", "log_every=1", "eval_every=6", "save_every=4", "keep_last=100", "dropout=0", "attention_dropout=0")


def _train(tmp_path, name, *extra, log=None):
    options, model = resolve(None, parse_words(lm_words(tmp_path, *WORDS, *extra)))
    loop.train(options, model, tmp_path / name, log=log or (lambda m: None))
    return [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]


def test_fp16_trains_like_fp32(tmp_path):
    fp32 = _train(tmp_path, "fp32")
    said = []
    fp16 = _train(tmp_path, "fp16", "precision=fp16", log=said.append)
    assert any("precision=fp16 on a CPU" in line and "use precision=bf16 or fp32" in line for line in said)
    assert all(r["loss_scale"] > 0 for r in fp16) and "loss_scale" not in fp32[0]
    assert abs(fp16[-1]["loss"] - fp32[-1]["loss"]) <= 0.02 * fp32[-1]["loss"]


def _poison(monkeypatch, bad_steps):
    real_build, calls = state.build_model, {"n": 0}

    def build(config):
        model = real_build(config)

        def hook(grad):
            calls["n"] += 1
            return grad * float("inf") if bad_steps(calls["n"]) else grad

        model.lm_head.weight.register_hook(hook)
        return model

    monkeypatch.setattr(state, "build_model", build)


def test_an_overflowing_step_is_skipped_and_the_scale_halves(tmp_path, monkeypatch):
    _poison(monkeypatch, lambda n: n == 5)
    said = []
    rows = _train(tmp_path, "run", "precision=fp16", log=said.append)
    assert [line for line in said if "overflowed" in line] == [
        "step 5: fp16 gradients overflowed; step skipped, loss scale 65536 -> 32768"
    ]
    by_step = {r["step"]: r for r in rows}
    assert by_step[5]["skipped"] is True and by_step[5]["loss_scale"] == 32768.0 and by_step[5]["grad_norm"] is None
    text = (tmp_path / "run" / "metrics.jsonl").read_text()
    assert "Infinity" not in text and "NaN" not in text  # strict JSON, line by line
    assert [r["step"] for r in rows if r.get("skipped")] == [5] and rows[-1]["step"] == 12


def test_overflow_at_every_step_stops_with_advice(tmp_path, monkeypatch):
    _poison(monkeypatch, lambda n: True)
    with pytest.raises(loop.TrainingError, match=r"fp16 gradients overflowed at 20 steps in a row .*precision=bf16"):
        _train(tmp_path, "run", "precision=fp16", "steps=30", "save_every=100")


def test_fp32_still_stops_at_a_non_finite_gradient(tmp_path, monkeypatch):
    _poison(monkeypatch, lambda n: n == 3)
    with pytest.raises(loop.TrainingError, match="non-finite gradient norm at step 3"):
        _train(tmp_path, "run")


def test_resume_restores_the_loss_scale_exactly(tmp_path, monkeypatch):
    _poison(monkeypatch, lambda n: n in (2, 3))  # the scale is 16384 from step 3 on: a fresh scaler would differ
    _train(tmp_path, "a", "precision=fp16")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for d in ckpt.step_dirs(tmp_path / "b"):
        if int(d.name.split("-")[1]) > 4:
            shutil.rmtree(d)
    state = json.loads((tmp_path / "b" / "checkpoints" / "step-000004" / "trainer_state.json").read_text())
    assert state["grad_scaler"]["scale"] == 16384.0
    monkeypatch.undo()  # no more poison: the resumed steps 5-12 overflow as little as the straight run's did
    loop.resume(tmp_path / "b", {}, log=lambda m: None)
    assert losses(tmp_path / "b") == losses(tmp_path / "a")

    def scales(name):
        rows = (tmp_path / name / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss_scale"]) for r in map(json.loads, rows)]

    assert scales("b") == scales("a") and scales("a")[-1] == (12, 16384.0)  # a fresh scaler would say 65536
    a = ckpt.load_model(tmp_path / "a")[0].state_dict()
    b = ckpt.load_model(tmp_path / "b")[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
