"""``anatomy.check`` / ``anatomy.trace`` on classes typed into cells of a real notebook on a real kernel, and the
same API in this process (fast, no kernel)."""

from __future__ import annotations

import json
import linecache

import pytest

IMPORTS = "import json, math, os\nimport torch\nfrom torch import nn\nimport anatomy\n"

ATTENTION = """class {name}(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.dk = n_heads, d_model // n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def forward(self, x, mask=None):
        b, t, d = x.shape
        q = self.q(x).view(b, t, self.h, self.dk).transpose(1, 2)  # (B, H, T, Dh)
        k = self.k(x).view(b, t, self.h, self.dk).transpose(1, 2)  # (B, H, S, Dh)
        v = self.v(x).view(b, t, self.h, self.dk).transpose(1, 2)  # (B, H, S, Dh)
        scores = q @ k.transpose(-2, -1){scale}  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        w = scores.softmax(-1)  # (B, H, T, S)
        out = (w @ v).transpose(1, 2).reshape(b, t, d)  # (B, T, D)
        return self.o(out), w
"""
BUGGY = ATTENTION.format(name="NoScale", scale="")
GOOD = ATTENTION.format(name="Good", scale=" / math.sqrt(self.dk)")
HANGS = """class Hangs(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.q = nn.Linear(d_model, d_model)

    def forward(self, x):
        while True:
            pass
"""
EXITS = HANGS.replace("Hangs", "Exits").replace("while True:\n            pass", "os._exit(0)")


def _summary(tag: str, expr: str) -> str:
    return f'print("{tag}", json.dumps({expr}, default=str))'


CELLS = [
    IMPORTS,
    BUGGY,
    GOOD,
    "r = anatomy.check(NoScale)\n"
    + _summary(
        "CHECK",
        '{"ok": r.ok, "verdict": r.verdict, "pitfalls": r.pitfalls, '
        '"lines": r.lines, "text": str(r), "iso": r.isolation}',
    )
    + "\nr",
    "g = anatomy.check(Good)\n" + _summary("GOOD", '{"ok": g.ok, "verdict": g.verdict, "pitfalls": g.pitfalls}'),
    "t = anatomy.trace(NoScale)\n" + _summary("TRACE", '{"ok": t.ok, "rows": t.rows, "text": str(t)}') + "\nt",
    HANGS + "\nh = anatomy.check(Hangs, timeout=1)\n" + _summary("HANGS", '{"verdict": h.verdict, "error": h.error}'),
    EXITS + "\ne = anatomy.check(Exits)\n" + _summary("EXITS", '{"verdict": e.verdict, "error": e.error}'),
    "from anatomy.notebook import show\nshow.mask(seq=6, pad=2)",
    "r.report",
]


def _found(nb, tag: str) -> dict:
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
        for line in text.splitlines():
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1 :])
    raise AssertionError(f"no {tag} line in the notebook's outputs")


@pytest.fixture(scope="module")
def executed(kernel, tmp_path_factory):
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    return kernel(nb, tmp_path_factory.mktemp("nb"))


def _line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_buggy_class_in_a_cell_is_diagnosed_at_its_cell_line(executed):
    found = _found(executed, "CHECK")
    assert found["ok"] is False and found["verdict"] == "fail" and "no_scaling" in found["pitfalls"]
    assert found["iso"] == "process"
    cell = executed.cells[1].execution_count
    line = _line_of(BUGGY, "scores = q @ k.transpose(-2, -1)")
    first = next(w for w in found["lines"] if w["fault"] == "no_scaling")
    assert (first["cell"], first["line"]) == (cell, line)
    assert first["where"] == f"cell [{cell}], line {line}"
    assert first["source"] == "scores = q @ k.transpose(-2, -1)  # (B, H, T, S)"
    # printed as `anatomy check` prints it: the short answer, pointing at the cell's line
    assert found["text"].startswith("✗ NOT YET: scores not scaled by 1/sqrt(d_k)")
    assert f"where: cell [{cell}], line {line}: scores = q @ k.transpose(-2, -1)" in found["text"]
    assert "→ exit 1" in found["text"]


def test_correct_class_in_a_cell_passes(executed):
    found = _found(executed, "GOOD")
    assert found["ok"] is True and found["verdict"] == "pass" and "no_scaling" not in found["pitfalls"]


def test_trace_of_a_cell_class_shows_its_rows_with_the_cell(executed):
    found = _found(executed, "TRACE")
    cell = executed.cells[1].execution_count
    rows = found["rows"]
    assert [r["op"] for r in rows[:3]] == ["linear", "view", "transpose"]
    assert {r["cell"] for r in rows} == {cell}
    softmax = next(r for r in rows if r["op"] == "softmax")
    assert softmax["line"] == _line_of(BUGGY, "w = scores.softmax(-1)") and softmax["dims"] == "(B, H, T, S)"
    assert softmax["where"] == f"cell [{cell}], line {softmax['line']}"
    assert f"the line numbers are those of cell [{cell}]" in found["text"]


def test_a_hung_forward_is_stopped_and_an_exit_is_caught(executed):
    hangs = _found(executed, "HANGS")
    assert hangs["verdict"] == "error" and hangs["error"][0] == "timeout" and "time limit of 1 s" in hangs["error"][1]
    exits = _found(executed, "EXITS")
    assert exits["verdict"] == "error" and exits["error"][0] == "exit" and "os._exit(0)" in exits["error"][1]


def test_results_and_figures_display_as_html_and_png_in_the_notebook(executed, cell_outputs):
    outputs = cell_outputs
    cell = executed.cells[1].execution_count
    _, check = outputs(executed.cells[3])
    assert "text/html" in check and "no_scaling" in check["text/html"] and f"cell [{cell}], line" in check["text/html"]
    assert check["text/plain"].startswith("✗ NOT YET: scores not scaled")
    _, trace = outputs(executed.cells[5])
    assert "<table" in trace["text/html"] and "softmax" in trace["text/html"]
    _, figure = outputs(executed.cells[8])
    assert "image/png" in figure
    _, report = outputs(executed.cells[9])  # the doctor's own Report displays itself too
    assert "text/html" in report and "no_scaling" in report["text/html"]


# --- the same API in this process (no kernel) -------------------------------------------------------------------


def _cell_class(source: str, name: str, number: int, monkeypatch):
    """Compile ``source`` as IPython's terminal does (``<ipython-input-N-hash>``) and return the class."""
    file = f"<ipython-input-{number}-0123456789ab>"
    source = IMPORTS + source
    monkeypatch.setitem(linecache.cache, file, (len(source), None, source.splitlines(True), file))
    ns: dict = {}
    exec(compile(source, file, "exec"), ns)  # noqa: S102 - the test's own code
    return ns[name], file


def test_check_in_process_names_the_cell_and_prints_as_the_cli(monkeypatch):
    import anatomy

    cls, _ = _cell_class(BUGGY, "NoScale", 7, monkeypatch)
    r = anatomy.check(cls, isolate=False)
    assert r.isolation == "none" and r.verdict == "fail" and r.pitfalls == ["inf_fill_no_guard", "no_scaling"]
    line = IMPORTS.count("\n") + _line_of(BUGGY, "scores = q @ k")
    assert r.lines[0]["where"] == f"cell [7], line {line}" and r.lines[0]["cell"] == 7
    assert r.lines[0]["source"] == "scores = q @ k.transpose(-2, -1)  # (B, H, T, S)"
    from anatomy.doctor.report.short import short_answer
    from anatomy.notebook.results import width

    assert str(r) == "\n".join(short_answer(r.report, lang="en", width=width()))  # as `anatomy check` prints
    assert r.text(details=True) == r.report.render(lang="en", width=width())  # as `anatomy check --details`
    assert r.text("zh").startswith("✗ 还不对：分数没有除以 sqrt(d_k)") and len(str(r).splitlines()) <= 12
    assert r.text("zh", details=True).startswith("anatomy check · NoScale")
    assert f"单元格 [7] 第 {line} 行" in r.text("zh", details=True)
    assert r.to_dict()["verdict"] == "fail" and r.to_dict()["summary"]["exit_code"] == 1


def test_options_are_checked_before_anything_runs():
    import anatomy

    for kwargs, said in (
        ({"kind": "blok"}, "kind must be one of"),
        ({"timeout": -1}, "timeout must be"),
        ({"d_model": 10, "n_heads": 4}, "divisible"),
        ({"lang": "fr"}, "lang must be"),
    ):
        with pytest.raises(ValueError, match=said):
            anatomy.check(object, **kwargs)


def test_trace_in_process_and_a_module_that_cannot_be_built(monkeypatch):
    import anatomy

    cls, _ = _cell_class(GOOD, "Good", 3, monkeypatch)
    t = anatomy.trace(cls, isolate=False)
    assert t.ok and t.verdict == "pass" and set(t.cells) == {3} and len(t.rows) == 17
    assert [r["kind"] for r in t.rows].count("scale") == 1  # the one step the buggy class lacks
    raises, _ = _cell_class(GOOD.replace("b, t, d = x.shape", "b, t, d = x.shape[0]"), "Good", 4, monkeypatch)
    line = IMPORTS.count("\n") + _line_of(GOOD, "b, t, d = x.shape")
    for isolate in (False, None):  # in this process, and in the forked child
        r = anatomy.check(raises, isolate=isolate)
        assert r.verdict == "error" and "TypeError" in str(r)
        assert str(r).endswith(f"(at cell [4], line {line}: `b, t, d = x.shape[0]`)")
        assert r.text("zh").endswith(f"（位于单元格 [4] 第 {line} 行：`b, t, d = x.shape[0]`）")
    bad = anatomy.check(lambda d, h: 1 / 0)
    assert bad.verdict == "error" and bad.error is not None and bad.error[0] == "check"
    assert str(bad).startswith("anatomy check: error: ") and "ZeroDivisionError" in str(bad)
