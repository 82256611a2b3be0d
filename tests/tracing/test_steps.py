"""The learner's frames of a torch call (``anatomy.tracing.steps.learner_frames``): the innermost line and, when it
says more, the line in the same file that called it."""

import importlib.util
import sys

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from anatomy.tracing.steps import learner_frames

__anatomy_transparent__ = True  # this file's frames (the mode below) are never the learner's

SOURCE = """\
import torch
from torch import nn


def positions(ids):
    return torch.cumsum(torch.ones_like(ids), dim=1)


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(10, 4)

    def forward(self, ids):
        return self.table(ids) * 2.0


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = Embed()

    def forward(self, ids):
        pos = positions(ids)
        return self.embed(ids) + pos[..., None]
"""


class _Frames(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, tuple[str, int, str], tuple[str, int, str] | None]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        here, caller = learner_frames()
        self.seen.append((getattr(func, "__name__", str(func)), here, caller))
        return out


def _model(tmp_path) -> nn.Module:
    path = tmp_path / "learner_gpt.py"
    path.write_text(SOURCE, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("learner_gpt", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["learner_gpt"] = mod
    spec.loader.exec_module(mod)
    return mod.Model()


def _run(tmp_path):
    model = _model(tmp_path)
    with _Frames() as frames:
        model(torch.tensor([[1, 2, 3]]))
    return frames.seen


def _line(text: str) -> int:
    return next(i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line)


def test_a_helper_names_the_line_that_called_it(tmp_path):
    here, caller = next((h, c) for name, h, c in _run(tmp_path) if name == "cumsum")
    assert here[1] == _line("torch.cumsum")
    assert caller is not None and caller[1] == _line("pos = positions(ids)")
    assert caller[2] == "pos = positions(ids)"


def test_a_submodule_forward_names_the_forward_that_called_it(tmp_path):
    here, caller = next((h, c) for name, h, c in _run(tmp_path) if name == "embedding")
    assert here[1] == _line("self.table(ids) * 2.0")
    assert caller is not None and caller[1] == _line("return self.embed(ids) + pos")


def test_the_model_forward_has_no_caller_from_another_file(tmp_path):
    here, caller = next((h, c) for name, h, c in _run(tmp_path) if name in ("add", "__add__"))
    assert here[1] == _line("return self.embed(ids) + pos")
    assert caller is None


CALLER = """
from anatomy.tracing.steps import call_learner


def check_it(library_forward):
    return library_forward()


def check_it_bounded(library_forward):
    return call_learner(library_forward)
"""


def test_the_walk_stops_at_the_doctors_call_of_the_module(tmp_path):
    """Frames outside ``call_learner`` called the doctor (the ``anatomy`` script, a notebook cell, a script): a model
    whose code is all a library's (here: this file's transparent frames) has no line, not its caller's."""
    from anatomy.tracing.steps import learner_frame, learner_frames

    (tmp_path / "caller_script.py").write_text(CALLER)
    spec = importlib.util.spec_from_file_location("caller_script", tmp_path / "caller_script.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.check_it(lambda: learner_frame())[1] == 6  # unbounded, the walk reaches the caller's line
    assert mod.check_it_bounded(lambda: learner_frame()) == ("", 0, "")
    assert mod.check_it_bounded(lambda: learner_frames()) == (("", 0, ""), None)
