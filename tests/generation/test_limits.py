"""generation/limits.py: inf and NaN options, an empty prompt, too many rows and seeds out of range are refused in
one line naming them, before anything is allocated."""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.generation import generate, limits
from anatomy.sizes import SizeError


@pytest.fixture(scope="module")
def lm():
    torch.manual_seed(0)
    return build_model(
        ModelConfig.from_preset("gpt2", vocab_size=30, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64)
    )


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(do_sample=True, temperature=float("inf")), "temperature must be a finite number, got inf"),
        (dict(do_sample=True, top_p=float("nan")), "top_p must be in (0, 1], got nan"),
        (dict(repetition_penalty=float("inf")), "repetition_penalty must be a finite number, got inf"),
        (dict(num_beams=2, length_penalty=float("nan")), "length_penalty must be a finite number, got nan"),
        (dict(num_beams=2, length_penalty=float("-inf")), "length_penalty must be a finite number, got -inf"),
    ],
)
def test_inf_and_nan_options_are_refused_by_name(lm, options, message):
    with pytest.raises(ValueError) as caught:
        generate(lm, torch.tensor([[1, 2]]), max_new_tokens=2, **options)
    assert str(caught.value) == message


def test_an_empty_prompt_is_one_line_not_an_index_error(lm):
    with pytest.raises(ValueError, match=r"needs a prompt of at least one token; input_ids has shape \(1, 0\)"):
        lm.generate(torch.zeros(1, 0, dtype=torch.long), max_new_tokens=3)


def test_rows_whose_cache_cannot_fit_are_refused_naming_the_copies_before_repeating(lm):
    with pytest.raises(SizeError, match=r"lower num_return_sequences / num_beams \(10000000000 copies"):
        generate(lm, torch.tensor([[1, 2]]), max_new_tokens=3, do_sample=True, num_return_sequences=10**10)
    with pytest.raises(SizeError, match=r"KV cache for ~10\^30 positions"):
        generate(lm, torch.tensor([[1, 2]]), max_new_tokens=10**30)
    assert generate(lm, torch.tensor([[1, 2]]), max_new_tokens=2, do_sample=True, num_return_sequences=3).shape == (
        3,
        4,
    )


def test_seeds_and_the_kept_output():
    limits.check_seed(0, 10)
    limits.check_seed(2**64 - 10, 10)
    limits.check_seed(-(2**63), 1)
    with pytest.raises(ValueError, match=r"--seed must be an integer in \[-2\*\*63, 2\*\*64 - 10\] .* got 2\*\*70"):
        try:
            limits.check_seed(2**70, 10)
        except ValueError as err:
            raise ValueError(str(err).replace(str(2**70), "2**70")) from None
    with pytest.raises(ValueError, match="--seed must be"):
        limits.check_seed(2**64 - 9, 10)  # the last row's seed would be 2**64
    limits.check_output_fits(4, 1000, flags="--max-new-tokens", available=10**9)
    with pytest.raises(SizeError, match=r"1 output\(s\) of ~10\^30 tokens would need .*; lower --max-new-tokens"):
        limits.check_output_fits(1, 10**30, flags="--max-new-tokens", available=10**12)
