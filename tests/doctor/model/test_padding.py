"""Padding: a mask that never reaches the layers (dropped, or passed to the first layer only), pads in the loss."""

from __future__ import annotations

from tests.doctor.model.styles import HERE, line_of, lines, run, variant

COMBINE = "            mask = mask * padding_mask.view(b, 1, 1, t)"


def test_a_padding_mask_that_reaches_every_layer():
    report = run(HERE / "course_style.py")
    assert report.found["padding"]["argument"] == "padding_mask" and "lm_padding" in report.passed
    assert report.found["loss_ignores"] == [0]


def test_padding_mask_taken_and_dropped(tmp_path):
    path = variant(tmp_path, "course_style.py", COMBINE, "            pass")
    report = run(path)
    assert report.faults == {"padding_mask_not_passed"}


def test_padding_mask_passed_to_the_first_layer_only(tmp_path):
    path = variant(
        tmp_path,
        "course_style.py",
        "        if padding_mask is not None:\n",
        "        causal = mask\n        if padding_mask is not None:\n",
    )
    path.write_text(
        path.read_text().replace(
            "            h = layer(h, mask)\n", "            h = layer(h, mask)\n            mask = causal\n"
        )
    )
    report = run(path)
    assert report.faults == {"padding_mask_not_passed"}
    (f,) = [f for f in report.findings if f.fault == "padding_mask_not_passed"]
    assert f.layer == 1 and f.layers == [1]
    assert line_of(path, "h = layer(h, mask)") in lines(report, "padding_mask_not_passed")


def test_pads_in_the_loss(tmp_path):
    path = variant(tmp_path, "course_style.py", ", ignore_index=self.pad_id)", ")")
    report = run(path)
    assert report.faults == {"pads_in_loss"}
    assert line_of(path, "loss = F.cross_entropy(") in lines(report, "pads_in_loss")


def test_hf_labels_whose_pads_the_caller_marks_minus_100(tmp_path):
    """Hugging Face's convention: ``labels`` come from a collator that writes -100 at the pads, and the default
    cross_entropy ignores -100, so a loss that does not name the pad id is right (tiny-llm-zh, LlamaForCausalLM)."""
    path = variant(tmp_path, "course_style.py", ", ignore_index=self.pad_id)", ")")
    text = path.read_text().replace("def forward(self, x, y=None,", "def forward(self, x, labels=None,")
    path.write_text(text.replace("y.reshape(-1))", "labels.reshape(-1))").replace("if y is None", "if labels is None"))
    report = run(path)
    assert report.errors == [] and report.found["pads_in_loss"].startswith("labels")
