"""doctor/loading/child.py: the forked child of `anatomy check`, `anatomy learn check` and `anatomy.check`. Its
writes to file descriptors 1 and 2 never reach the terminal, processes it leaves are ended and not waited for, and
the parent tells an answer from a crash and from an exit."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from anatomy.cli.main import main
from anatomy.doctor.loading.child import FORK, forked

pytestmark = pytest.mark.skipif(not FORK, reason="the child needs os.fork")


def _gone(pid: int, wait: float = 20.0) -> bool:
    """``pid`` has ended (gone, or a zombie waiting for init to reap it)."""
    end = time.monotonic() + wait
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_answers_crashes_and_exits_are_told_apart():
    assert forked(lambda: {"n": 42}).answer == {"n": 42}
    assert forked(os.getpid).answer != os.getpid()
    crash = forked(lambda: 1 / 0)
    assert not crash.answered and crash.crash is not None and crash.crash.startswith("ZeroDivisionError")
    unpicklable = forked(lambda: lambda: 0)
    assert unpicklable.crash is not None and "pickle" in unpicklable.crash
    ended = forked(lambda: os._exit(7))
    assert (ended.answered, ended.crash, ended.code) == (False, None, 7)
    big = forked(lambda: b"x" * 3_000_000)  # larger than a pipe's buffer: read while the child writes
    assert big.answered and len(big.answer) == 3_000_000


def test_what_the_child_writes_to_fds_1_and_2_is_dropped_and_stdin_is_empty(capfd):
    def noisy() -> str:
        os.write(1, b"x" * 200_000)
        os.write(2, b"\x1b[2J\x1b[31mred\n")
        print("printed")
        return os.read(0, 10).decode()

    assert forked(noisy, quiet=True).answer == ""
    said = capfd.readouterr()
    assert (said.out, said.err) == ("", "")
    assert forked(lambda: os.write(1, b"shown\n"), quiet=False).answered  # the course lets prints through
    assert capfd.readouterr().out == "shown\n"


def test_processes_the_child_leaves_are_ended_and_not_waited_for():
    """A forward that leaves processes holding the answer's pipe (close_fds=False, like `os.system("cmd &")`): the
    parent takes the answer without waiting for them to end, and ends them with the child's process group."""

    def leaves() -> list[int]:
        return [subprocess.Popen(["sleep", "60"], close_fds=False).pid for _ in range(3)]

    pids = forked(leaves).answer
    assert len(pids) == 3 and all(_gone(pid) for pid in pids)


def test_the_watchdog_answer_is_sent_when_a_step_hangs_past_its_limit():
    from anatomy.doctor.loading.limits import guard

    def hangs() -> str:
        import signal

        with guard(0.2, lambda: ("the loop", "循环")):
            signal.signal(signal.SIGALRM, signal.SIG_IGN)  # the guard's alarm can no longer get through
            while True:
                pass

    out = forked(hangs, overdue=lambda step: f"overdue: {step.describe()[0]} after {step.limit:g} s")
    assert out.answer == "overdue: the loop after 0.2 s"


LOUD = """
import os
from torch import nn


class Attn(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.q_proj = nn.Linear(d_model, d_model)
        os.write(1, b"x" * 100_000)
        os.write(2, b"\\x1b[2J\\x1b[31mRED\\n")

    def forward(self, x):
        os.write(1, b"y" * 1000)
        return self.q_proj(x)
"""


def test_anatomy_check_prints_its_report_only(tmp_path, capfd):
    (tmp_path / "loud.py").write_text(LOUD, encoding="utf-8")
    code = main(["check", f"{tmp_path / 'loud.py'}:Attn", "--format", "json"])
    said = capfd.readouterr()
    assert code in (0, 1, 2) and "xxxx" not in said.out and "yyyy" not in said.out and "\x1b" not in said.err
    assert said.out.startswith("{") and said.err == ""
