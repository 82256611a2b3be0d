"""The wheel holds every file the package reads.

An editable install reads the source tree, so a data file missing from ``[tool.setuptools.package-data]`` passes every
other test and is missing only once installed (the course's stored tiny_lm reference was: an installed course trained
the reference block again on every check). This test builds the wheel from a copy of the sources, offline (no build
isolation: setuptools is the one installed), and finds in it every module and every non-Python file of ``anatomy/``,
after checking that each data file the code names next to ``__file__`` or ``importlib.resources`` is one of them.
``.ci/run`` goes further: it installs that wheel in a fresh virtual environment and runs the CLI from it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "anatomy"
DATA_NAME = re.compile(r"^[\w-]+(\.[\w-]+)*\.(json|toml|gz|js|css|txt|tsv|csv|ipynb|md|pt|safetensors|typed)$")
# names that look like data files in those modules but are files a run writes into its own folder
WRITTEN = {"anatomy/experiments/store.py": {"run.json"}}


def package_files() -> list[str]:
    """Every file of the source package (no bytecode), as paths inside the wheel."""
    return sorted(
        p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*") if p.is_file() and "__pycache__" not in p.parts
    )


def named_data_files() -> dict[str, set[str]]:
    """The data files each module reads through ``__file__`` or ``importlib.resources``: every string constant in
    such a module that is a file name with a data suffix (``tiny_lm_reference.json``, ``page.css``...)."""
    named: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if "__file__" not in source and "resources.files(" not in source:
            continue
        module = path.relative_to(ROOT).as_posix()
        names = {
            node.value
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and DATA_NAME.match(node.value)
        }
        if names - WRITTEN.get(module, set()):
            named[module] = names - WRITTEN.get(module, set())
    return named


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src")
    shutil.copytree(PACKAGE, src / "anatomy", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(dist)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (built,) = dist.glob("transformer_anatomy-*.whl")
    return zipfile.ZipFile(built)


def test_the_scan_finds_the_data_files_the_code_reads():
    """The scan is not empty-handed: the files known to be read are among those it finds."""
    found = {name for names in named_data_files().values() for name in names}
    assert {"tiny_lm_reference.json", "statements.toml", "page.js", "page.css", "tang.txt.gz"} <= found


def test_every_data_file_the_code_names_is_in_the_package():
    files = {Path(f).name for f in package_files()}
    for module, names in named_data_files().items():
        assert names <= files, f"{module} reads {sorted(names - files)}, not under anatomy/"


def test_the_wheel_holds_every_file_of_the_package(wheel):
    inside = set(wheel.namelist())
    missing = [f for f in package_files() if f not in inside]
    assert not missing, f"not in the wheel (add them to [tool.setuptools.package-data] in pyproject.toml): {missing}"
    assert "anatomy/py.typed" in inside


def test_the_wheel_carries_the_one_version(wheel):
    """The version is written once, in anatomy/_version.py; pyproject.toml reads it from there."""
    from anatomy._version import __version__

    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and project["dynamic"] == ["version"]
    assert Path(wheel.filename).name.startswith(f"transformer_anatomy-{__version__}-")
    metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    assert f"\nVersion: {__version__}\n" in wheel.read(metadata).decode()
