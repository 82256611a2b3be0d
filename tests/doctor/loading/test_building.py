"""Loading the learner's file: a module of a package (course code laid out as ``src/`` with relative imports,
datawhalechina/base-nlp's ``code/C6/llama2/src/transformer.py``; google/gemma_pytorch's ``from gemma import config``)
is imported as a module of its package, under a name of its own, and leaves nothing behind."""

from __future__ import annotations

import sys

import pytest

from anatomy.doctor import CheckError, check
from anatomy.doctor.loading.building import import_file

BLOCK = """import math
import torch
from torch import nn
from .norm import RMSNorm
from src import norm as by_name


class Block(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        assert by_name.RMSNorm.__name__ == RMSNorm.__name__
        self.h, self.norm = n_heads, RMSNorm(d_model)
        self.qkv, self.out = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // self.h), dim=-1)
        return x + self.out((a @ v).transpose(1, 2).reshape(b, t, d))
"""
NORM = """import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
"""


def _package(tmp_path, init: str = ""):
    src = tmp_path / "src"
    src.mkdir()
    (src / "__init__.py").write_text(init)
    (src / "norm.py").write_text(NORM)
    (src / "block.py").write_text(BLOCK)
    return src


def test_a_module_with_relative_imports_is_imported_in_its_package(tmp_path):
    src = _package(tmp_path)
    before = set(sys.modules)
    module = import_file(src / "block.py")
    assert module.Block(16, 4).norm.__class__.__name__ == "RMSNorm"
    assert not {m for m in set(sys.modules) - before if m.startswith(("_anatomy_doctor_", "src"))}
    assert str(tmp_path) not in sys.path and str(src) not in sys.path
    assert not list(src.rglob("__pycache__"))  # nothing written next to the learner's files
    report = check(f"{src / 'block.py'}:Block")
    assert report.errors == []


def test_a_package_whose_init_imports_the_module_gives_that_module(tmp_path):
    src = _package(tmp_path, "from .block import Block\n")
    module = import_file(src / "block.py")
    assert module.Block.__module__.endswith(".block")


def test_a_relative_import_outside_a_package_is_still_one_line(tmp_path):
    path = tmp_path / "alone.py"
    path.write_text("from .norm import RMSNorm\n")
    with pytest.raises(CheckError, match="could not import alone.py: ImportError: attempted relative import"):
        import_file(path)
