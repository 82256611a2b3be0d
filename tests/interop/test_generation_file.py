"""generation_config.json checked field by field when a checkpoint is loaded: a wrong value is one line naming the
file and the field (HF fails later, deep in generate, or samples on ``"do_sample": "yes"``); a field HF does not know
is ignored with a warning, as HF ignores it."""

from __future__ import annotations

import json

import pytest
import torch

from anatomy import ModelConfig, build_model, load_pretrained, save_pretrained
from anatomy.errors import CheckpointError
from anatomy.interop.generation_file import CHECKS, check_generation_file


@pytest.fixture
def ckpt(tmp_path):
    torch.manual_seed(0)
    d = tmp_path / "ckpt"
    save_pretrained(build_model(ModelConfig.from_preset("gpt2", vocab_size=40, d_model=16, n_heads=2, n_layers=1)), d)
    return d


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("max_new_tokens", "7", "a positive integer"),
        ("max_new_tokens", 7.5, "a positive integer"),
        ("do_sample", "yes", "true or false"),
        ("temperature", 0, "a number > 0"),
        ("top_p", 1.5, "a number in (0, 1]"),
        ("repetition_penalty", "1.3", "a number > 0 (1.0: none)"),
        ("early_stopping", "maybe", 'true, false or "never"'),
        ("eos_token_id", "0", "a token id or a list of token ids"),
        ("eos_token_id", [0, -1], "a token id or a list of token ids"),
        ("stop_strings", [1], "a string or a list of strings"),
    ],
)
def test_a_wrong_value_is_refused_at_load_naming_file_and_field(ckpt, field, value, expected):
    path = ckpt / "generation_config.json"
    path.write_text(json.dumps({field: value}))
    with pytest.raises(CheckpointError) as got:
        load_pretrained(ckpt)
    assert str(got.value) == f"{path}: field {field!r} must be {expected}, got {value!r}"


def test_unknown_fields_are_ignored_with_a_warning_and_the_rest_is_read(ckpt):
    (ckpt / "generation_config.json").write_text(json.dumps({"max_new_tokens": 5, "foo_bar": 3, "typical_p": 1.0}))
    with pytest.warns(UserWarning, match="'foo_bar' is no Hugging Face generation option; ignored"):
        model = load_pretrained(ckpt)
    assert model.generation_config.max_new_tokens == 5
    out = model.generate(torch.tensor([[1, 2, 3]]), do_sample=False)
    assert out.shape == (1, 8)  # the file's max_new_tokens; foo_bar is no refusal at generate


def test_every_checked_option_is_one_generate_reads():
    from anatomy.generation.options import OPTIONS

    assert set(CHECKS) <= set(OPTIONS)
    assert check_generation_file({"max_new_tokens": None, "top_k": 0}, "g.json") == {"max_new_tokens": None, "top_k": 0}


def test_hf_reads_the_same_values_where_they_are_right(tmp_path):
    """The values a valid file holds are what transformers' GenerationConfig reads from it."""
    transformers = pytest.importorskip("transformers")
    values = {"eos_token_id": [0, 3], "do_sample": False, "max_new_tokens": 7, "repetition_penalty": 1.3, "top_k": 0}
    (tmp_path / "generation_config.json").write_text(json.dumps(values))
    hf = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert check_generation_file(values, "g.json") == {k: getattr(hf, k) for k in values}
