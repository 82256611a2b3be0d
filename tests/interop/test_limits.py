"""interop/limits.py: a Hugging Face directory's sizes are checked against its weights before anything is built;
refusals name the file's own field; NaN weights, ids outside the vocabulary and absurdly nested JSON are refused in
one line."""

from __future__ import annotations

import json

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.errors import CheckpointError
from anatomy.interop import hf, limits


@pytest.fixture(scope="module")
def gpt2():
    """(arch, config.json dict, tensors) of a tiny GPT-2 written by our own exporter (no transformers needed)."""
    torch.manual_seed(0)
    config = ModelConfig.from_preset(
        "gpt2", vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=32, eos_token_id=49
    )
    arch, hf_config, tensors = hf.hf_state_dict(build_model(config))
    return arch, {**hf_config, "architectures": [arch]}, tensors


def _convert(hf_config, tensors, generation=None):
    return hf.model_from_checkpoint(hf_config, tensors, source="hf_dir", generation=generation)


def test_the_tiny_checkpoint_converts(gpt2):
    _, hf_config, tensors = gpt2
    assert _convert(hf_config, tensors).config.vocab_size == 50


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("vocab_size", 10**9, "config.json: vocab_size is 1000000000, but the weights' transformer.wte.weight has 50"),
        ("n_embd", 10**6, "config.json: n_embd is 1000000, but the weights' transformer.wte.weight has 16 columns"),
        ("n_embd", 12, "config.json: n_embd is 12, but"),  # a bad width is the file's field, not our d_model
        ("n_positions", 10**12, "config.json: n_positions is 1000000000000, but the weights' transformer.wpe.weight"),
        ("n_layer", 10**5, "config.json: n_layer is 100000, but the weights hold 2 numbered layers"),
        ("n_head", 10**4, "config.json: n_head is 10000, but a model of width 16 has 1 to 16 heads"),
    ],
)
def test_sizes_are_checked_against_the_weights_naming_the_files_field(gpt2, field, value, message):
    _, hf_config, tensors = gpt2
    with pytest.raises(CheckpointError) as caught:
        _convert({**hf_config, field: value}, tensors)
    assert str(caught.value).startswith("hf_dir: ") and message in str(caught.value)


def test_memory_is_estimated_before_building(gpt2):
    _, hf_config, tensors = gpt2
    config = hf.config_from_hf(hf_config)
    limits.check_memory(hf_config, config, available=10**9)
    with pytest.raises(CheckpointError, match=r"building the model would need about .*; lower config.json's "):
        limits.check_memory(hf_config, config, source="hf_dir", available=1000)


def test_a_nan_or_inf_weight_is_named(gpt2):
    _, hf_config, tensors = gpt2
    bad = dict(tensors)
    bad["transformer.h.1.mlp.c_fc.weight"] = tensors["transformer.h.1.mlp.c_fc.weight"].clone()
    bad["transformer.h.1.mlp.c_fc.weight"][0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    with pytest.raises(CheckpointError, match=r"'transformer.h.1.mlp.c_fc.weight' holds 1 NaN and 2 infinite"):
        _convert(hf_config, bad)


def test_an_eos_outside_the_vocabulary_is_warned_about_naming_file_and_field(gpt2, tmp_path):
    """Warned, not refused: HF loads such a checkpoint (a bare GPT2Config keeps eos 50256 at any vocab_size)."""
    _, hf_config, tensors = gpt2
    said = limits.check_files("hf_dir", hf_config, {"eos_token_id": [49, 50]}, tensors)
    assert said == [
        "hf_dir/generation_config.json: eos_token_id 50 is outside the vocabulary [0, 50) of the weights: no token "
        "can be that id, so generation never stops at it"
    ]
    said = limits.check_files("hf_dir", {**hf_config, "bos_token_id": 70}, None, tensors)
    assert len(said) == 1 and said[0].startswith("hf_dir/config.json: bos_token_id 70 is outside")
    assert limits.check_files("hf_dir", hf_config, {"eos_token_id": 49}, tensors) == []
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": {"content": "</s>"}}))

    class Inner:
        def token_to_id(self, token):
            return {"<|endoftext|>": 0}.get(token)

    class Tok:
        tokenizer = Inner()

    said = limits.special_map_problems(tmp_path, Tok())
    assert (
        len(said) == 1 and "special_tokens_map.json: eos_token '</s>' is not in the tokenizer's vocabulary" in said[0]
    )
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))
    assert limits.special_map_problems(tmp_path, Tok()) == []


def test_json_nested_too_deeply_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CheckpointError, match=r"config.json: nested more than 200 levels deep"):
        limits.check_json_files(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"a": "[[[[{{{" * 100, "b": [[1]]}))  # brackets in strings
    limits.check_json_files(tmp_path)


def test_convert_refuses_a_deep_config_in_one_line(tmp_path, capsys):
    from anatomy.cli.main import main

    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text('{"a": ' + "[" * 50_000 + "]" * 50_000 + "}")  # JSON, 50001 deep
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.json: nested more than 200 levels deep" in err
    assert not (tmp_path / "out").exists()
