"""What a file does with its targets, read with ast."""

from __future__ import annotations

import ast

from anatomy.doctor.model.callers import compare, evidence


def _e(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def test_slices_moved_on_by_one_are_shifted():
    assert compare(_e("data[i:i + T]"), _e("data[i + 1:i + T + 1]")) == "shifted"
    assert compare(_e("b[:, :-1]"), _e("b[:, 1:]")) == "shifted"
    assert (
        compare(_e("torch.stack([d[i:i+bs] for i in ix])"), _e("torch.stack([d[i+1:i+bs+1] for i in ix])")) == "shifted"
    )


def test_the_same_slices_are_the_same_and_others_say_nothing():
    assert compare(_e("data[i:i + T]"), _e("data[i:i + T]")) == "same"
    assert compare(_e("data[i:i + T]"), _e("other[i + 1:i + T + 1]")) is None
    assert compare(_e("data[i:i + T]"), _e("data[i + 2:i + T + 2]")) is None
    assert compare(_e("x"), _e("x")) is None  # a bare name is no slice: nothing said


def test_evidence_in_a_file(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(
        "def batch(d, i, T):\n    x = d[i:i + T]\n    y = d[i + 1:i + T + 1]\n    return x, y\n\n"
        "def step(model, ids):\n    return model(ids, labels=ids)\n"
    )
    got = [(e.kind, e.line) for e in evidence(str(path))]
    assert got == [("shifted", 3), ("same", 7)]
    assert evidence(str(tmp_path / "missing.py")) == []


def test_the_models_own_code_is_not_its_caller(tmp_path):
    path = tmp_path / "model.py"
    path.write_text(
        "class GPT:\n    def forward(self, x):\n        y = x[:, 1:]\n        x = x[:, :-1]\n"
        "        return self.attn(x, x, x)\n"
    )
    assert evidence(str(path)) == []


def test_a_dataset_class_is_the_callers_code(tmp_path):
    """tiny-llm-zh's PTMDataset before issue #10: X/Y upper case, the slices inside np.array(...).astype(...)."""
    path = tmp_path / "ptm.py"
    path.write_text(
        "import numpy as np\n\n\nclass PTMDataset:\n    def __getitem__(self, index):\n"
        "        sample = self.samples[index]\n"
        "        X = np.array(sample[:-1]).astype(np.int64)\n"
        "        Y = np.array(sample[1:]).astype(np.int64)\n"
        "        return {'input_ids': X, 'labels': Y}\n"
    )
    (e,) = evidence(str(path))
    assert e.kind == "shifted" and e.line == 8
