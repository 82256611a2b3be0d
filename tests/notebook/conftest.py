"""Real notebooks on a real kernel (nbclient + ipykernel): ``execute(cells)`` runs them, returns the notebook."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import anatomy

ROOT = str(Path(anatomy.__file__).resolve().parents[1])


def _run(nb, folder: Path):
    from nbclient import NotebookClient

    env = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = ROOT + (os.pathsep + env if env else "")  # the kernel imports this checkout
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    try:
        NotebookClient(
            nb, timeout=600, kernel_name="python3", allow_errors=False, resources={"metadata": {"path": str(folder)}}
        ).execute()
    finally:
        if env:
            os.environ["PYTHONPATH"] = env
        else:
            os.environ.pop("PYTHONPATH", None)
    return nb


@pytest.fixture(scope="module")
def kernel():
    """``run(notebook, folder)``; the module is skipped, with the reason, when nbclient or ipykernel is missing."""
    pytest.importorskip("nbclient", reason="waits for nbclient (pip install 'transformer-anatomy[notebook]')")
    pytest.importorskip("ipykernel", reason="waits for ipykernel (pip install 'transformer-anatomy[notebook]')")
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    try:
        KernelSpecManager().get_kernel_spec("python3")
    except NoSuchKernel:
        pytest.skip("waits for a python3 Jupyter kernel (python -m ipykernel install --user)")
    return _run


def outputs(cell) -> tuple[str, dict]:
    """(the cell's stdout, its last rich output's data)."""
    text, data = "", {}
    for o in cell.get("outputs", []):
        if o.get("output_type") == "stream" and o.get("name") == "stdout":
            text += o.get("text", "")
        elif o.get("output_type") in ("execute_result", "display_data"):
            data = dict(o.get("data", {}))
    return text, data


@pytest.fixture(scope="session")
def cell_outputs():
    """:func:`outputs`, for the tests (conftest modules are not imported by name)."""
    return outputs
