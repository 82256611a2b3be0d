"""Cell names: IPython's file names for cells become ``cell [n], line k``; IPython is never imported."""

from __future__ import annotations

import subprocess
import sys
import types

from anatomy.notebook import cells


def test_terminal_and_kernel_cell_names(monkeypatch):
    assert (
        cells.cell_of("<ipython-input-5-1a2b3c>") == 5
        and cells.where("<ipython-input-5-1a2b3c>", 3) == "cell [5], line 3"
    )
    assert cells.cell_of("/home/me/my_attention.py") is None and cells.where("/home/me/my.py", 4) == "my.py:4"
    shell = types.SimpleNamespace(compile=types.SimpleNamespace(_filename_map={"/tmp/ipykernel_9/77.py": 12}))
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    assert (
        cells.cell_of("/tmp/ipykernel_9/77.py") == 12
        and cells.where_zh("/tmp/ipykernel_9/77.py", 2) == "单元格 [12] 第 2 行"
    )
    assert cells.label("/tmp/ipykernel_9/78.py") == "cell [?]"  # shaped like a cell, number unknown
    w = cells.name_pointer(
        {
            "file": "/tmp/ipykernel_9/77.py",
            "line": 4,
            "where": "77.py:4",
            "en": "line 4 `x` scales",
            "zh": "第 4 行 `x` 缩放",
        }
    )
    said = "the forward raised RuntimeError: bad view (at line 11 of 77.py: `q.view(5, -1)`); see 77.py:3"
    assert cells.name_in_text(said) == (
        "the forward raised RuntimeError: bad view (at cell [12], line 11: `q.view(5, -1)`); see cell [12], line 3"
    )
    assert (w["cell"], w["where"], w["en"], w["zh"]) == (
        12,
        "cell [12], line 4",
        "cell [12], line 4 `x` scales",
        "单元格 [12] 第 4 行 `x` 缩放",
    )


def test_import_anatomy_imports_neither_ipython_nor_the_doctor():
    code = (
        "import sys, anatomy, anatomy.notebook, anatomy.notebook.api; f = anatomy.check; g = anatomy.trace; "
        "print(sorted(m for m in ('IPython', 'ipykernel', 'anatomy.doctor', 'matplotlib') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
