"""The progress file: concurrent checks in one folder all count, writes are atomic, os.chdir cannot move it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from anatomy.course import progress
from anatomy.course.progress import FILE, Progress

WRITER = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("progress", sys.argv[4])  # the file alone: no torch to import
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
Progress = module.Progress
folder, exercise, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for i in range(n):
    Progress(folder).checked(exercise, Path(folder) / (exercise + ".py"), i % 2 == 0, None if i % 2 == 0 else "x")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="the lock is fcntl.flock")
def test_concurrent_checks_of_one_and_of_several_exercises_all_count(tmp_path):
    """Four processes writing at once (two on the same exercise, two on others): every check is recorded. Before
    the lock, each process wrote back what it had read, and about half the updates were lost."""
    n = 30
    names = ["attention", "attention", "masks", "heads"]
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), name, str(n), progress.__file__])
        for name in names
    ]
    try:
        assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]
    finally:
        for p in procs:  # only what this test started
            if p.poll() is None:
                p.kill()
                p.wait()
    data = json.loads((tmp_path / FILE).read_text(encoding="utf-8"))
    assert {k: v["checks"] for k, v in data["exercises"].items()} == {"attention": 2 * n, "masks": n, "heads": n}
    assert data["exercises"]["masks"]["status"] == "done"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


def test_a_change_merges_with_what_another_process_wrote_meanwhile(tmp_path):
    mine, theirs = Progress(tmp_path), Progress(tmp_path)
    theirs.checked("masks", tmp_path / "03_masks.py", True, None)
    mine.started("attention", tmp_path / "01_attention.py")  # read before "masks" was written: merged, not lost
    data = Progress(tmp_path).data["exercises"]
    assert data["masks"]["status"] == "done" and data["attention"]["file"] == "01_attention.py"


def test_the_folder_is_fixed_when_opened_and_a_bad_file_is_named_not_replaced(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    progress = Progress("work")
    monkeypatch.chdir(tmp_path.parent)  # a learner's os.chdir
    progress.checked("attention", Path("work") / "01_attention.py", False, "no_scaling")
    assert (tmp_path / "work" / FILE).is_file() and not (tmp_path.parent / "work" / FILE).exists()
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / FILE).write_text("[" * 100_000, encoding="utf-8")  # deeper than the parser's recursion
    with pytest.raises(ValueError, match=r"not a progress file anatomy learn can read .*move it away"):
        Progress(bad)
    assert (bad / FILE).read_text(encoding="utf-8") == "[" * 100_000
