"""benchmarks/bare_gpt.py computes our GPT-2 design's function (and nanoGPT's, with exact GELU), so that
benchmarks/train_step.py times the same arithmetic; train_step's contenders and claims_speed's comparison run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    saved = list(sys.path)
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path[:] = saved


def test_bare_references_compute_our_function_and_train_the_same():
    ts = _load("train_step")
    size = (2, 4, 32, 16, 4, 50, 1)
    models = ts.contenders(size)
    ids = ts.batch(size)
    ts.check_same_function(models, ids)  # logits and losses; raises on a difference
    with torch.no_grad():
        ours = models["ours"][0](input_ids=ids, labels=ids)
        bare = models["bare"][0](input_ids=ids, labels=ids)
        assert torch.equal(ours.logits, bare.logits)  # the same ops in the same order: bit for bit
        assert not torch.allclose(models["nanogpt"][0](input_ids=ids).logits, ours.logits)  # exact GELU differs
    losses = {}
    for k, (m, make_opt, kind) in models.items():
        step = ts.trainer(m, make_opt, kind, ids)
        losses[k] = [step().item() for _ in range(3)]
    for a, b in (("ours", "bare"), ("ours_exact", "nanogpt")):
        assert all(abs(x - y) < 1e-3 for x, y in zip(losses[a], losses[b])), (a, b, losses)
        assert losses[a][2] < losses[a][0]


def test_claims_speed_sees_disagreement_only_outside_the_declared_metrics(tmp_path):
    cs = _load("claims_speed")
    claim = {
        "id": "C1-x",
        "verdict": "supported",
        "metrics": {"a": {"values": [1.0]}, "t": {"values": [2.0]}},
        "nondeterministic": {"metrics": ["t"], "why": "wall-clock"},
    }
    for name, a, t in (("x", 1.0, 2.0), ("y", 1.0, 9.0), ("z", 1.5, 2.0)):
        (tmp_path / name).mkdir()
        doc = {"claims": [{**claim, "metrics": {"a": {"values": [a]}, "t": {"values": [t]}}}]}
        (tmp_path / name / "claims.json").write_text(json.dumps(doc), encoding="utf-8")
    assert cs.disagreements(tmp_path / "x", tmp_path / "y") == []
    assert cs.disagreements(tmp_path / "x", tmp_path / "z") == ["C1-x a"]
