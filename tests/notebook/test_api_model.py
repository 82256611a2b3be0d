"""``anatomy.trace`` / ``anatomy.check`` on a whole language model typed into notebook cells (``notebook/api.py``):
the model's table with every row naming its cell, and the doctor's model check pointing at the cell's line; in this
process (fast) and on a real kernel."""

from __future__ import annotations

import json
import linecache

IMPORTS = "import json\nimport torch\nfrom torch import nn\nfrom torch.nn import functional as F\nimport anatomy\n"

MODEL = """class {name}(nn.Module):
    def __init__(self, vocab_size, d_model, n_heads, n_layers, block_size):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True)
            for _ in range(n_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids, targets=None):
        t = ids.shape[1]
        x = {embed}
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        for block in self.blocks:
            x = block(x, src_mask=causal)
        logits = self.head(self.norm(x))
        if targets is None:
            return logits
        loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), targets[:, 1:].reshape(-1))
        return logits, loss
"""
GOOD = MODEL.format(name="CellGPT", embed="self.tok(ids) + self.pos(torch.arange(t))")
NO_POSITIONS = MODEL.format(name="NoPositions", embed="self.tok(ids)")


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def _cell_class(source: str, name: str, number: int, monkeypatch):
    """Compile ``source`` as IPython's terminal does (``<ipython-input-N-hash>``) and return the class."""
    file = f"<ipython-input-{number}-0123456789ab>"
    source = IMPORTS + source
    monkeypatch.setitem(linecache.cache, file, (len(source), None, source.splitlines(True), file))
    ns: dict = {}
    exec(compile(source, file, "exec"), ns)  # noqa: S102 - the test's own code
    return ns[name]


def test_trace_of_a_model_in_a_cell_names_the_cell(monkeypatch):
    import anatomy

    cls = _cell_class(GOOD, "CellGPT", 4, monkeypatch)
    t = anatomy.trace(cls, isolate=False)
    assert t.verdict == "pass" and set(t.cells) == {4} and t.to_dict()["kind"] == "lm"
    line = IMPORTS.count("\n") + _line_of(GOOD, "x = self.tok(ids) + self.pos")
    enters = next(r for r in t.rows if r["label"] == "pos_in")
    assert enters["where"] == f"cell [4], line {line}" and enters["dims"] == "(B, T, D)"
    text = str(t)
    assert "blocks 0-2 (TransformerEncoderLayer) × 3: alike" in text
    assert "loss: logits[:, :-1] (B, T-1, V) vs targets[:, 1:] (B, T-1)" in text
    assert text.endswith("the line numbers are those of cell [4]")
    html = t._repr_html_()
    assert "<table" in html and "token embedding" in html and "positions enter here" in html
    forked = anatomy.trace(cls, n_layers=2, vocab_size=31)  # in the forked child, as a notebook runs it
    assert forked.isolation == "process" and "blocks 0-1 (TransformerEncoderLayer) × 2: alike" in str(forked)
    assert anatomy.trace(cls, kind="block", isolate=False).verdict == "error"  # built as CLASS(20, 5): refused


def test_check_of_a_model_in_a_cell_points_at_the_cell(monkeypatch):
    import anatomy

    good = _cell_class(GOOD, "CellGPT", 5, monkeypatch)
    r = anatomy.check(good, isolate=False)
    assert r.verdict == "pass" and r.report.to_dict().get("kind") == "lm"
    bad = _cell_class(NO_POSITIONS, "NoPositions", 6, monkeypatch)
    for isolate in (False, None):
        r = anatomy.check(bad, isolate=isolate)
        assert r.verdict == "fail" and "positions_missing" in r.pitfalls
        assert {w["cell"] for w in r.lines} == {6}


def test_model_options_are_checked_before_anything_runs():
    import pytest

    import anatomy

    for call, said in (
        (lambda: anatomy.check(object, n_layers=0), "n_layers must be a positive integer"),
        (lambda: anatomy.check(object, kind="model"), "kind must be one of auto, attention, block, lm"),
        (lambda: anatomy.trace(object, vocab_size=-3), "vocab_size must be a positive integer"),
        (lambda: anatomy.trace(object, kind="lmm"), "kind must be one of auto, module, attention, block, lm"),
    ):
        with pytest.raises(ValueError, match=said):
            call()


CELLS = [
    IMPORTS,
    NO_POSITIONS,
    "t = anatomy.trace(NoPositions)\n"
    'print("TRACE", json.dumps({"ok": t.ok, "rows": t.rows, "text": str(t)}, default=str))\nt',
    "r = anatomy.check(NoPositions)\n"
    'print("CHECK", json.dumps({"verdict": r.verdict, "pitfalls": r.pitfalls, "lines": r.lines}, default=str))',
]


def _found(nb, tag: str) -> dict:
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for line in text.splitlines():
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1 :])
    raise AssertionError(f"no {tag} line in the notebook's outputs")


def test_a_model_in_a_real_notebook(kernel, tmp_path, cell_outputs):
    import nbformat

    nb = kernel(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS]), tmp_path)
    cell = nb.cells[1].execution_count
    trace = _found(nb, "TRACE")
    assert trace["ok"] is True and {r["cell"] for r in trace["rows"]} == {cell}
    assert "blocks 0-2 (TransformerEncoderLayer) × 3: alike" in trace["text"]
    tok = next(r for r in trace["rows"] if r["label"] == "tok")
    assert tok["where"] == f"cell [{cell}], line {_line_of(NO_POSITIONS, 'x = self.tok(ids)')}"
    assert not any(r["label"] == "pos_in" for r in trace["rows"])  # no position reaches the stream
    _, shown = cell_outputs(nb.cells[2])
    assert "<table" in shown["text/html"] and "token embedding" in shown["text/html"]
    check = _found(nb, "CHECK")
    assert check["verdict"] == "fail" and "positions_missing" in check["pitfalls"]
    assert {w["cell"] for w in check["lines"]} == {cell}
