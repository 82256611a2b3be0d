"""Checkpoints that are wrong say which file and which field, before anything runs on them (issue 16, point 6)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from anatomy.config import ModelConfig
from anatomy.interop.safetensors_io import load_pretrained
from anatomy.training import checkpoint as ckpt
from anatomy.training import loop
from anatomy.training.options import parse_words, resolve

from .helpers import lm_words


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two tiny finished runs of different widths, trained once for this file."""
    tmp = tmp_path_factory.mktemp("ckpt")
    torch.set_num_threads(1)
    out = {}
    for name, width in (("small", "d_model=16"), ("wide", "d_model=32")):
        options, model = resolve(None, parse_words(lm_words(tmp, "steps=2", "save_every=2", "eval_every=100", width)))
        loop.train(options, model, tmp / name, log=lambda m: None)
        out[name] = tmp / name
    return out


@pytest.fixture
def run(runs, tmp_path) -> Path:
    """A fresh copy of the small run to break."""
    shutil.copytree(runs["small"], tmp_path / "run")
    return tmp_path / "run"


def _step(run: Path) -> Path:
    return ckpt.step_dirs(run)[-1]


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _message(call) -> str:
    with pytest.raises(ValueError) as err:
        call()
    return str(err.value)


@pytest.mark.parametrize("field", ["activation", "d_model"])  # one changes no shape, one changes all of them
def test_a_config_field_missing_is_named_with_the_default_it_would_take(run, field):
    default = repr({f.name: f.default for f in dataclasses.fields(ModelConfig)}[field])
    config = _step(run) / "config.json"
    _edit_json(config, lambda d: d["config"].pop(field))
    for load in (lambda: ckpt.load_model(run), lambda: load_pretrained(_step(run)), lambda: loop.resume(run)):
        message = _message(load)
        assert str(config) in message and f"'{field}' (would default to {default})" in message, message
        assert "shape" not in message


def test_resume_names_the_config_field_that_differs(run):
    config = _step(run) / "config.json"
    _edit_json(config, lambda d: d["config"].update(norm_eps=1e-3))
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert str(config) in message and "norm_eps=0.001 there, 1e-05 here" in message, message


def test_missing_weights_are_named_not_blamed_on_optimizer_pt(run):
    step = _step(run)
    (step / "model.safetensors").unlink()
    message = _message(lambda: load_pretrained(step))
    assert (
        f"{step / 'model.safetensors'}: missing (optimizer.pt, rng.pt beside it hold training state, not "
        "weights)" in message
    ), message
    message = _message(lambda: ckpt.load_model(step))
    assert f"{str(step)!r} holds config.json but no model.safetensors (the weights)" in message, message
    assert "pickle" not in message
    message = _message(lambda: ckpt.load_model(run))  # through the run: the step dir is incomplete
    assert message == f"{str(step / 'model.safetensors')!r} is missing: {str(run)!r} holds no complete checkpoint"


def test_an_int64_tensor_where_float32_is_declared_is_refused(run):
    weights = _step(run) / "model.safetensors"
    tensors = load_file(weights)
    name = sorted(tensors)[0]
    tensors[name] = tensors[name].to(torch.int64)
    save_file(tensors, str(weights), metadata={"format": "pt"})
    message = _message(lambda: ckpt.load_model(run))
    assert f"weight {name!r} is int64 in the file, but config.json declares dtype 'float32'" in message, message


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(run):
    tokenizer = _step(run) / "tokenizer.json"
    _edit_json(tokenizer, lambda d: d["vocab"].extend("ΩЖЯ"))
    vocab = json.loads((_step(run) / "config.json").read_text())["config"]["vocab_size"]
    for load in (lambda: ckpt.load_model(run), lambda: loop.resume(run, log=lambda m: None)):
        message = _message(load)
        assert str(tokenizer) in message and f"vocab_size={vocab}" in message, message


def test_a_tokenizer_smaller_than_the_vocabulary_is_another_runs_and_refused(run):
    tokenizer = _step(run) / "tokenizer.json"
    _edit_json(tokenizer, lambda d: d.update(vocab=d["vocab"][:8]))  # 8 characters + <pad>, <eos>: 10 tokens
    vocab = json.loads((_step(run) / "config.json").read_text())["config"]["vocab_size"]
    assert vocab > 10
    for load in (lambda: ckpt.load_model(run), lambda: loop.resume(run, log=lambda m: None)):
        message = _message(load)
        assert message.startswith(
            f"{str(tokenizer)!r}: the tokenizer has 10 tokens but config.json says vocab_size={vocab}"
        ), message


def test_the_tokenizer_the_run_was_trained_with_loads_unrefused(run):
    model, tokenizer, where = ckpt.load_model(run)
    assert where == _step(run) and tokenizer.vocab_size == model.config.vocab_size


def test_resume_without_tokenizer_json_names_the_file(run, capsys):
    from anatomy.cli.main import main

    steps = ckpt.step_dirs(run)
    for step in steps:
        (step / "tokenizer.json").unlink()
    newest = steps[-1] / "tokenizer.json"
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert message.startswith(f"{str(newest)!r} is missing: {str(run)!r} holds no complete checkpoint"), message
    assert main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert f"error: {str(newest)!r} is missing" in err and "that is complete" not in err, err
    message = _message(lambda: loop.resume(steps[-1], log=lambda m: None))  # the checkpoint itself, given directly
    assert message == f"{str(newest)!r} is missing: a resume needs the tokenizer the run was trained with", message


def test_optimizer_state_of_another_size_is_named_before_training(runs, run):
    shutil.copy(_step(runs["wide"]) / "optimizer.pt", _step(run) / "optimizer.pt")
    message = _message(lambda: loop.resume(run, {"steps": 4}, log=lambda m: None))
    assert str(_step(run) / "optimizer.pt") in message and "exp_avg' has shape" in message, message
    assert "this run's parameter" in message


def test_rng_and_trainer_state_fields_are_named(run):
    rng = _step(run) / "rng.pt"
    good = rng.read_bytes()
    torch.save({"torch": torch.get_rng_state()}, rng)
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert str(rng) in message and "key 'data' is missing" in message, message
    rng.write_bytes(good)
    state = _step(run) / "trainer_state.json"
    _edit_json(state, lambda d: d.pop("step"))
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert str(state) in message and "field 'step' is missing" in message, message


def test_a_training_option_missing_or_unknown_is_named(run):
    training = _step(run) / "training.json"
    _edit_json(training, lambda d: d["options"].pop("weight_decay"))
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert str(training) in message and "'weight_decay' (would default to 0.1)" in message, message
    _edit_json(training, lambda d: d["options"].update(weight_decay=0.1, colour="red"))
    message = _message(lambda: loop.resume(run, log=lambda m: None))
    assert str(training) in message and "unknown option field(s) colour" in message, message


def test_an_intact_checkpoint_still_loads_and_resumes(run):
    model, tokenizer, where = ckpt.load_model(run)
    assert where == _step(run) and tokenizer.vocab_size <= model.config.vocab_size
    assert loop.resume(run, {"steps": 3}, log=lambda m: None).steps == 3


def _raised_by(load, *args) -> BaseException:
    try:
        load(*args)
    except Exception as err:  # noqa: BLE001 (the class is what this test looks at)
        return err
    raise AssertionError(f"{load.__name__} raised nothing")


def test_one_checkpoint_error_caught_from_either_import_path(tmp_path):
    """The interop loader and the training checkpoint reader raise the one CheckpointError (anatomy.errors): an
    ``except`` on either import path catches what both raise."""
    from anatomy import errors
    from anatomy.interop import safetensors_io

    (tmp_path / "config.json").write_text("{not json")  # a config the interop loader cannot read
    raised = [
        _raised_by(safetensors_io.load_pretrained, tmp_path),
        _raised_by(ckpt.load_config, tmp_path),
        _raised_by(ckpt.resolve, tmp_path / "absent"),
        _raised_by(ckpt.load_model, tmp_path / "absent"),
    ]
    for err in raised:
        for cls in (safetensors_io.CheckpointError, ckpt.CheckpointError):
            try:
                raise err
            except cls:
                pass
    assert [type(e).__name__ for e in raised] == ["CheckpointError"] * 4, raised
    assert safetensors_io.CheckpointError is ckpt.CheckpointError is errors.CheckpointError
    assert "config.json" in str(raised[0]) and "does not exist" in str(raised[2])
