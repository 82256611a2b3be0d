"""docs/tutorial*.ipynb: made from the Markdown, outputs stripped, and every one executes on a kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from anatomy.notebook import tutorials

DOCS = Path(__file__).resolve().parents[2] / "docs"
NOTEBOOKS = [DOCS / n.replace(".md", ".ipynb") for n in tutorials.TUTORIALS]


@pytest.mark.parametrize("name", tutorials.TUTORIALS)
def test_notebook_is_stripped_and_matches_the_markdown(name):
    md = (DOCS / name).read_text(encoding="utf-8")
    path = tutorials.notebook_path(DOCS / name)
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), f"{path.name}: outputs in git"
    assert ["".join(c["source"]) for c in code] == tutorials.python_blocks(md) and len(code) >= 5
    assert path.read_text(encoding="utf-8") == tutorials.text(md, "zh" if ".zh." in name else "en"), (
        f"{path.name} is out of date: python -m anatomy.notebook.tutorials"
    )


def test_split_keeps_prose_and_bash_blocks_as_markdown():
    cells = tutorials.split("# T\n\n```bash\nanatomy learn list\n```\n\ntext\n\n```python\nx = 1\n```\nend\n")
    assert cells == [
        ("markdown", "# T\n\n```bash\nanatomy learn list\n```\n\ntext"),
        ("code", "x = 1"),
        ("markdown", "end"),
    ]
    with pytest.raises(ValueError, match="unclosed"):
        tutorials.split("```python\nx = 1\n")
    assert tutorials.main([str(DOCS), "--check"]) == 0


def test_every_tutorial_notebook_executes(kernel, tmp_path):
    import nbformat

    for path in NOTEBOOKS:
        nb = kernel(nbformat.read(path, as_version=4), tmp_path)  # raises CellExecutionError on a failing cell
        ran = [c for c in nb.cells if c.cell_type == "code"]
        assert all(c.execution_count for c in ran) and any(c.outputs for c in ran), path.name
