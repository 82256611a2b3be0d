"""The alignment of the model's own loss: shifted twice, shifted backwards, labels never shifted."""

from __future__ import annotations

from tests.doctor.model.styles import HERE, line_of, lines, run, variant

LOSS = "loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)"


def test_targets_shifted_twice(tmp_path):
    new = "loss = F.cross_entropy(logits[:, :-2].reshape(-1, 29), targets[:, 2:].reshape(-1))"
    path = variant(tmp_path, "nano_style.py", LOSS, new)
    report = run(path)
    assert report.faults == {"targets_shifted_twice"}
    assert line_of(path, "logits[:, :-2]") in lines(report, "targets_shifted_twice")
    assert report.found["loss"]["shift"] == 2


def test_targets_shifted_the_wrong_way_are_not_shifted(tmp_path):
    new = "loss = F.cross_entropy(logits[:, 1:].reshape(-1, 29), targets[:, :-1].reshape(-1))"
    path = variant(tmp_path, "nano_style.py", LOSS, new)
    report = run(path)
    assert report.faults == {"targets_not_shifted"}
    assert line_of(path, "logits[:, 1:]") in lines(report, "targets_not_shifted")


def test_labels_scored_without_a_shift(tmp_path):
    path = variant(
        tmp_path, "nano_style.py", "def forward(self, idx, targets=None):", "def forward(self, idx, labels=None):"
    )
    src = (
        path.read_text()
        .replace("if targets is not None:", "if labels is not None:")
        .replace("targets.view(-1), ignore_index=-1)", "labels.view(-1))")
    )
    path.write_text(src)
    report = run(path)
    assert report.faults == {"targets_not_shifted"}
    (f,) = report.findings
    assert f.severity == "warning" and report.found["loss"]["argument"] == "labels"


def test_labels_shifted_inside_pass(tmp_path):
    path = variant(
        tmp_path,
        "nano_style.py",
        LOSS,
        "loss = F.cross_entropy(logits[:, :-1].reshape(-1, 29), targets[:, 1:].reshape(-1))",
    )
    report = run(path)
    assert report.errors == [] and report.found["loss"]["shift"] == 1


def test_a_model_without_targets_is_not_examined():
    report = run(HERE / "llama_style.py", "Transformer")
    assert any(s["probe"] == "lm_loss" for s in report.skipped) and "lm_loss" not in report.passed


BATCHES = """

def get_batch(data, i, block_size):
    x = data[i : i + block_size]
    y = data[i + 1 : i + block_size + 1]
    return x, y
"""


def test_a_model_that_shifts_fed_by_a_batch_that_shifts(tmp_path):
    new = "loss = F.cross_entropy(logits[:, :-1].reshape(-1, 29), targets[:, 1:].reshape(-1))"
    path = variant(tmp_path, "nano_style.py", LOSS, new)
    path.write_text(path.read_text() + BATCHES)
    report = run(path)
    assert report.faults == {"targets_shifted_twice"}
    got = lines(report, "targets_shifted_twice")
    assert {line_of(path, "y = data[i + 1 : i + block_size + 1]"), line_of(path, "logits[:, :-1]")} <= got


def test_a_model_that_does_not_shift_fed_by_a_batch_that_shifts_passes(tmp_path):
    path = tmp_path / "my_gpt.py"
    path.write_text((HERE / "nano_style.py").read_text() + BATCHES)
    assert run(path).errors == []


def test_targets_that_are_the_inputs(tmp_path):
    path = tmp_path / "my_gpt.py"
    path.write_text(
        (HERE / "nano_style.py").read_text()
        + "\n\ndef train_step(model, xb):\n    logits, loss = model(xb, xb)\n    return loss\n"
    )
    report = run(path)
    assert report.faults == {"targets_not_shifted"} and report.errors
    assert line_of(path, "logits, loss = model(xb, xb)") in lines(report, "targets_not_shifted")


def test_a_shift_that_stands_out_among_shifts_tolerated_alike():
    """A model that computes part of itself in bfloat16 (Falcon's ALiBi) widens every tolerance until all the shifts
    "match" the loss: the closest is taken when it is ten times closer than the next, else the loss is not told."""
    import torch

    from anatomy.doctor.contract.precision import tolerating
    from anatomy.doctor.model.loss import alignment, shifted_ce

    torch.manual_seed(0)
    logits = torch.randn(2, 7, 29, dtype=torch.float64) * 0.1
    targets = torch.randint(0, 29, (2, 7))
    inside = shifted_ce(logits, targets, 1) + 2e-7  # the model's float32 loss, shifted inside
    with tolerating(2.3):  # bfloat16's floor: every shift is within it
        assert alignment(logits, targets, inside) == 1
        same = torch.zeros(2, 7, 29, dtype=torch.float64)  # uniform logits: every shift gives log(V) exactly
        assert alignment(same, targets, shifted_ce(same, targets, 0)) is None
    assert alignment(logits, targets, inside) == 1  # float64 tolerance: only the true shift matches
