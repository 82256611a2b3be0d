"""The loop's parts: options, schedule, optimizer groups, tasks, precision, compile fallback, early stop, outputs.

KV-cache generation against recomputation and left-padded batches are proven by the generation tests
(tests/generation/test_generate.py: ``test_cached_greedy_equals_recomputing_the_prefix``,
``test_left_padding_gives_each_row_what_it_gets_alone``); here we check it once more on a *trained* checkpoint.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from anatomy.config import ModelConfig
from anatomy.generation import generate
from anatomy.training import checkpoint as ckpt
from anatomy.training import loop
from anatomy.training.options import RUN_PRESETS, TrainOptions, parse_words, resolve

from .helpers import TINY_MODEL, TINY_RUN, lm_words

QUIET = {"log": lambda m: None}


def test_every_preset_resolves_to_valid_options_and_model():
    for name in RUN_PRESETS:
        options, model = resolve(name, {})
        config = ModelConfig.from_preset(options.model, **model, vocab_size=100, max_seq_len=options.block_size)
        assert config.d_model <= 256, name  # presets are laptop-sized


def test_the_three_kinds_of_preset_have_three_names():
    from anatomy import config
    from anatomy.experiments import registry
    from anatomy.training import options

    assert "char-shakespeare" in options.RUN_PRESETS and "gpt2" in config.PRESETS
    assert registry.CLAIM_PRESETS == ("smoke", "quick", "full", "paper")
    assert not hasattr(options, "PRESETS") and not hasattr(registry, "PRESETS")  # no alias under the old name


def test_parse_words_types_and_errors():
    assert parse_words(["steps=10", "lr=3e-4", "compile=true", "n_kv_heads=none", "positional=rope"]) == {
        "steps": 10,
        "lr": 3e-4,
        "compile": True,
        "n_kv_heads": None,
        "positional": "rope",
    }
    with pytest.raises(ValueError, match="lr must be a number, got 'fast'"):
        parse_words(["lr=fast"])
    with pytest.raises(ValueError, match="unknown key 'epochs'; valid keys: .*batch_size"):
        parse_words(["epochs=3"])
    with pytest.raises(ValueError, match="steps must be a positive integer"):
        TrainOptions(steps=0)


def test_schedule_warms_up_then_follows_the_cosine():
    o = TrainOptions(steps=110, warmup_steps=10, lr=1e-3, min_lr=1e-4)
    assert loop.lr_at(5, o) == pytest.approx(5e-4)
    assert loop.lr_at(10, o) == pytest.approx(1e-3)
    assert loop.lr_at(60, o) == pytest.approx(1e-4 + 0.5 * 9e-4)
    assert loop.lr_at(110, o) == pytest.approx(1e-4)
    assert all(loop.lr_at(s, o) >= loop.lr_at(s + 1, o) for s in range(10, 110))


def test_weight_decay_only_on_matrices():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    opt = loop.make_optimizer(model, TrainOptions(weight_decay=0.1), torch.device("cpu"))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and [p.dim() for p in decay["params"]] == [2]
    assert no_decay["weight_decay"] == 0.0 and all(p.dim() == 1 for p in no_decay["params"])


def test_outputs_metrics_plot_and_summary(tmp_path):
    words = lm_words(tmp_path, "steps=6", "log_every=2", "eval_every=3", "plot=true")
    result = loop.train(*resolve(None, parse_words(words)), tmp_path / "run", **QUIET)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 3, 4, 6]
    assert all({"step", "loss", "lr", "tokens_per_s"} <= set(r) for r in rows)
    assert "val_loss" in rows[1] and "val_loss" in rows[3]
    assert result.summary["test_loss"] > 0 and result.last_checkpoint.name == "step-000006"
    pytest.importorskip("matplotlib")
    assert (tmp_path / "run" / "loss.png").stat().st_size > 1000


def test_early_stop_when_val_loss_stops_improving(tmp_path):
    words = lm_words(tmp_path, "steps=50", "eval_every=2", "patience=2", "lr=1e-12", "min_lr=0", "warmup_steps=0")
    result = loop.train(*resolve(None, parse_words(words)), tmp_path / "run", **QUIET)
    assert result.stopped_early and result.steps == 6  # evals at 2 (best), 4 and 6 (no better)
    assert ckpt.step_dirs(tmp_path / "run")[-1].name == "step-000006"


def test_bf16_autocast_trains(tmp_path):
    words = lm_words(tmp_path, "steps=3", "precision=bf16", "eval_every=3")
    result = loop.train(*resolve(None, parse_words(words)), tmp_path / "run", **QUIET)
    assert math.isfinite(result.summary["test_loss"])


def test_compile_falls_back_with_one_log_line(tmp_path, monkeypatch):
    def unavailable(model, **kwargs):
        raise RuntimeError("no C++ compiler\nmore detail")

    monkeypatch.setattr(torch, "compile", unavailable)
    lines = []
    words = lm_words(tmp_path, "steps=2", "compile=true", "eval_every=100")
    loop.train(*resolve(None, parse_words(words)), tmp_path / "run", log=lines.append)
    said = [m for m in lines if "compile" in m]
    assert said == ["compile=true: torch.compile is unavailable here (RuntimeError: no C++ compiler); training eagerly"]


def test_classify_task_on_a_small_tsv(tmp_path):
    rows = [f"{i % 2}\t{'good great fine' if i % 2 else 'bad awful poor'} {i}" for i in range(60)]
    (tmp_path / "reviews.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    words = [
        "task=classify",
        "model=bert",
        f"dataset={tmp_path / 'reviews.tsv'}",
        "tokenizer=char",
        "pooling=mean",
        "type_vocab_size=0",
        "dropout=0",
        "steps=40",
        "lr=3e-3",
        *TINY_MODEL,
        *TINY_RUN,
        "batch_size=8",
        "eval_every=40",
    ]
    result = loop.train(*resolve(None, parse_words(words)), tmp_path / "run", **QUIET)
    assert result.summary["test_accuracy"] == 1.0
    assert result.summary["baselines_test_accuracy"]["majority_class"] <= 1.0
    training = json.loads((result.last_checkpoint / "training.json").read_text())
    assert training["label_names"] == ["0", "1"]


def test_seq2seq_task_batches_and_trains(tmp_path):
    options, model = resolve(
        "seq2seq-reverse", parse_words([*TINY_MODEL, *TINY_RUN, "steps=2", "eval_every=2", "max_len=6"])
    )
    from anatomy.training.tasks import make_task

    task = make_task(options)
    batch = task.batch("train", torch.Generator().manual_seed(0), 3)
    for ids, labels in zip(batch["input_ids"], batch["labels"]):
        src = task.tokenizer.decode(ids.tolist())
        tgt = task.tokenizer.decode([t for t in labels.tolist() if t != -100])
        assert tgt == src[::-1]
    result = loop.train(options, model, tmp_path / "run", **QUIET)
    assert 0.0 <= result.summary["test_exact_match"] <= 1.0


def test_trained_checkpoint_generates_the_same_with_and_without_cache(tmp_path):
    loop.train(*resolve(None, parse_words(lm_words(tmp_path, "steps=4", "eval_every=100"))), tmp_path / "run", **QUIET)
    model, tokenizer, _ = ckpt.load_model(tmp_path / "run")
    prompt = torch.tensor([tokenizer.encode("the cat")])
    cached = generate(model, prompt, max_new_tokens=8)
    ids = prompt
    with torch.no_grad():
        for _ in range(8):
            ids = torch.cat([ids, model(ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(cached, ids)
