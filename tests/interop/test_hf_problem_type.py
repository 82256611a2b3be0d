"""anatomy.interop.hf with BertForSequenceClassification's three problem types: ``problem_type`` travels both ways
(live models, HF directories, our checkpoints) and ``labels=`` gives the loss transformers gives on the same
weights: regression (MSE, ``num_labels=1`` or said), single-label (cross entropy) and multi-label (BCE with
logits), said in the config or guessed from the labels as HF guesses."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="waits for transformers (pip install transformers)")

import anatomy  # noqa: E402
from anatomy.interop.hf import from_hf, to_hf  # noqa: E402
from anatomy.interop.safetensors_io import load_pretrained, save_pretrained  # noqa: E402


def _bert(num_labels: int, problem_type: str | None):
    torch.manual_seed(0)
    config = transformers.BertConfig(
        num_hidden_layers=1,
        hidden_size=16,
        num_attention_heads=2,
        intermediate_size=32,
        vocab_size=40,
        max_position_embeddings=32,
        num_labels=num_labels,
        problem_type=problem_type,
    )
    return transformers.BertForSequenceClassification(config).eval()


def _labels(kind: str, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(4)
    if kind == "ids":
        return torch.randint(0, n, (3,), generator=gen)
    if kind == "float1":
        return torch.randn(3, generator=gen)
    if kind == "multi":
        return torch.randint(0, 2, (3, n), generator=gen).float()
    return torch.randn(3, n, generator=gen)  # "floatn"


CASES = [
    (1, None, "float1"),  # HF's regression for one output
    (1, "regression", "float1"),
    (3, "regression", "floatn"),
    (3, None, "ids"),  # single-label, guessed from integer labels
    (3, "single_label_classification", "ids"),
    (3, "multi_label_classification", "multi"),
    (3, None, "multi"),  # multi-label, guessed from float labels
]


@pytest.mark.parametrize("num_labels, problem_type, kind", CASES)
def test_the_loss_equals_transformers_for_every_problem_type(tmp_path, num_labels, problem_type, kind):
    hf = _bert(num_labels, problem_type)
    ids = torch.randint(1, 40, (3, 6), generator=torch.Generator().manual_seed(1))
    labels = _labels(kind, num_labels)
    hf.save_pretrained(tmp_path / "hf")  # before the forward: HF's forward writes its guess into its config
    want = hf(ids, labels=labels).loss
    for ours in (from_hf(_bert(num_labels, problem_type)), load_pretrained(tmp_path / "hf")):
        assert ours.config.problem_type == problem_type
        got = ours(ids, labels=labels).loss
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize(
    "problem_type", [None, "regression", "single_label_classification", "multi_label_classification"]
)
def test_problem_type_travels_both_ways(tmp_path, problem_type):
    ours = from_hf(_bert(3, problem_type))
    assert to_hf(ours).config.problem_type == problem_type
    save_pretrained(ours, tmp_path / "ours")
    assert load_pretrained(tmp_path / "ours").config.problem_type == problem_type
    to_hf(ours).save_pretrained(tmp_path / "back")
    assert transformers.AutoConfig.from_pretrained(tmp_path / "back").problem_type == problem_type


def test_labels_that_do_not_fit_the_problem_type_are_refused_by_name():
    ours = from_hf(_bert(3, "multi_label_classification"))
    ids = torch.randint(1, 40, (3, 6))
    with pytest.raises(ValueError, match=r"multi_label_classification are floats of shape \(3, 3\).*int64 \(3,\)"):
        ours(ids, labels=torch.tensor([0, 1, 2]))
    single = from_hf(_bert(3, "single_label_classification"))
    with pytest.raises(ValueError, match=r"single_label_classification are class ids of shape \(B,\)=\(3,\)"):
        single(ids, labels=torch.rand(3, 3))
    regression = from_hf(_bert(1, None))
    with pytest.raises(ValueError, match=r"regression are floats of shape \(3,\)"):
        regression(ids, labels=torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="problem_type"):
        anatomy.ModelConfig.from_preset("bert", architecture="classifier", problem_type="ranking")
