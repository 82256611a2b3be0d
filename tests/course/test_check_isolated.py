"""`anatomy learn check` runs the learner's code in a process of its own (course/check.py: check_isolated): an
``os._exit``, an ``atexit`` exit, a non-daemon thread, an ignored SIGALRM or an ``os.chdir`` in an attempt reaches
neither the verdict, the exit code, the wait, nor the progress file."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.course.check import LearnError, check_isolated
from anatomy.course.progress import FILE
from anatomy.doctor.loading.child import FORK

SOLUTION = (Path(__file__).parents[2] / "anatomy" / "course" / "solutions" / "attention.py").read_text(encoding="utf-8")
HEADER = "# anatomy learn · exercise: attention\n"

pytestmark = pytest.mark.skipif(not FORK, reason="the process of its own needs os.fork")


def _attempt(folder: Path, extra: str) -> Path:
    path = folder / "01_attention.py"
    path.write_text(HEADER + SOLUTION + "\n" + extra, encoding="utf-8")
    return path


def _progress(folder: Path) -> dict:
    return json.loads((folder / FILE).read_text(encoding="utf-8"))["exercises"]


def test_an_os_exit_in_the_attempt_is_not_yet_with_one_line_and_recorded(tmp_path, capsys):
    path = _attempt(tmp_path, "import os\n\ndef attention(q, k, v, mask=None):\n    os._exit(0)\n")
    assert main(["learn", "check", "attention", str(path), "--dir", str(tmp_path)]) == 1  # was 0, nothing printed
    out = capsys.readouterr().out
    assert out.startswith("NOT YET · attention · 01_attention.py")
    assert "your code ended the process itself (os._exit(0) or a signal)" in out
    assert _progress(tmp_path)["attention"] == {
        "file": "01_attention.py",
        "checks": 1,
        "status": "tried",
        "last": "error",
    }


def test_an_atexit_exit_after_a_wrong_attempt_leaves_the_verdict_and_its_exit_code(tmp_path, capsys):
    path = _attempt(
        tmp_path,
        "import atexit, os\natexit.register(lambda: os._exit(0))\n\ndef attention(q, k, v, mask=None):\n"
        "    return q, q\n",
    )
    assert main(["learn", "check", "attention", str(path), "--dir", str(tmp_path)]) == 1
    assert "pitfall: wrong_shape" in capsys.readouterr().out
    assert _progress(tmp_path)["attention"]["last"] == "wrong_shape"


def test_a_non_daemon_thread_and_an_os_chdir_stay_in_the_child(tmp_path, capsys, monkeypatch):
    """The thread would sleep 10 minutes: the check returns without it (the child leaves with os._exit); the
    chdir moves only the child, so the progress file is written in --dir, relative to where the command ran."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "work").mkdir()
    _attempt(
        tmp_path / "work",
        "import os, threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\nos.chdir('/')\n",
    )
    before = threading.active_count()
    assert main(["learn", "check", "attention", "work/01_attention.py", "--dir", "work"]) == 0
    assert capsys.readouterr().out.startswith("PASS · attention")
    assert threading.active_count() == before and os.getcwd() == str(tmp_path)
    assert _progress(tmp_path / "work")["attention"]["status"] == "done"


def test_an_ignored_alarm_and_a_loop_are_ended_by_the_watchdog(tmp_path):
    """SIGALRM ignored inside the call: the alarm cannot stop the loop, the doctor's watchdog ends the child
    grace(limit) = 1 s after the 0.5 s limit, and the answer says which call hung."""
    path = _attempt(
        tmp_path,
        "import signal\n\ndef attention(q, k, v, mask=None):\n"
        "    signal.signal(signal.SIGALRM, signal.SIG_IGN)\n    while True:\n        pass\n",
    )
    with pytest.raises(LearnError) as caught:
        check_isolated("attention", path, timeout=0.5)
    assert "did not finish within the time limit of 0.5 s" in caught.value.en
    assert "still running 1 s after the limit: its process was ended" in caught.value.en
    assert "秒后仍在运行" in caught.value.zh


def test_a_right_attempt_passes_and_a_learn_error_keeps_both_languages(tmp_path):
    assert check_isolated("attention", _attempt(tmp_path, ""), timeout=20).passed
    bad = tmp_path / "bad.py"
    bad.write_text(HEADER + "def attention(q, k, v, mask=None:\n    pass\n", encoding="utf-8")
    with pytest.raises(LearnError) as caught:
        check_isolated("attention", bad)
    assert "syntax error" in caught.value.en and "语法错误" in caught.value.zh
