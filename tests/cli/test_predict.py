"""``anatomy predict``: a classifier checkpoint's probabilities per text, named by its labels; other models refused."""

import json

import torch

from anatomy import ModelConfig, build_model
from anatomy.cli.main import main
from anatomy.data.tokenizers import CharTokenizer
from anatomy.interop.safetensors_io import save_pretrained


def _classifier(tmp_path, names=("bad", "good")):
    tokenizer = CharTokenizer.train(["a fine film, a dull one"])
    config = ModelConfig.from_preset(
        "bert",
        architecture="classifier",
        vocab_size=tokenizer.vocab_size,
        d_model=16,
        n_heads=2,
        n_layers=1,
        d_ff=32,
        max_seq_len=32,
        num_labels=len(names),
        label_names=names,
    )
    torch.manual_seed(0)
    model = build_model(config).eval()
    save_pretrained(model, tmp_path / "cls")
    tokenizer.save(tmp_path / "cls")
    return model, tokenizer


def test_predict_gives_the_models_probabilities_under_its_label_names(tmp_path, capsys):
    model, tokenizer = _classifier(tmp_path)
    capsys.readouterr()
    assert main(["predict", "--checkpoint", str(tmp_path / "cls"), "--text", "a fine film", "--format", "json"]) == 0
    probs = json.loads(capsys.readouterr().out)[0]["probabilities"]
    assert list(probs) == ["bad", "good"]
    with torch.no_grad():
        want = model(torch.tensor([tokenizer.encode("a fine film")])).logits.softmax(-1)[0]
    got = torch.tensor(list(probs.values()), dtype=torch.float64)
    assert torch.allclose(got, want.double(), rtol=1e-5, atol=0)


def test_predict_refuses_a_model_that_is_not_a_classifier(tmp_path, capsys):
    tokenizer = CharTokenizer.train(["abc"])
    config = ModelConfig.from_preset(
        "gpt2", vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=32
    )
    save_pretrained(build_model(config), tmp_path / "lm")
    tokenizer.save(tmp_path / "lm")
    assert main(["predict", "--checkpoint", str(tmp_path / "lm"), "--text", "abc"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs a classifier" in err[0]
