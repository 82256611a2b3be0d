"""The doctor's time limit: a module that never finishes (tests/doctor/zoo/hangs.py) is stopped, the step that hung
is named with the limit in English and Chinese, the caller's own SIGALRM handler and timer come back intact, and
`anatomy check --timeout` exits 2 with one line (its watchdog ends what the alarm cannot stop)."""

from __future__ import annotations

import inspect
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torch import nn

from anatomy.cli.main import build_parser, main
from anatomy.doctor import CheckError, CheckTimeout, check
from anatomy.doctor.loading.limits import Hung, guard

ZOO = Path(__file__).parent / "zoo"
LIMIT = 0.3
# The alarm is a signal: when it lands inside a weakref or GC callback Python prints "Exception ignored" and the
# repeat alarm (0.1 s later) stops the loop instead. That is the mechanism working, not a leak: keep it quiet.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


SAFETY = 300.0  # seconds: only a broken limit takes this long, however loaded the machine


@pytest.fixture(autouse=True)
def safety_net():
    """Should the limit ever break, these tests fail after SAFETY seconds instead of hanging the suite (a net, not
    a measure: no test here asserts how long anything took, which a loaded machine would break)."""

    def stop(signum, frame):
        pytest.fail(f"the check was still running after {SAFETY:g} s: the time limit did not stop it")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, SAFETY)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def hang(target: str, **kw) -> CheckTimeout:
    """The error that stopped a step that never ends by itself: raised at all, it is the limit that stopped it (the
    mechanism; how long that took is the machine's business, not the test's)."""
    with pytest.raises(CheckTimeout) as info:
        check(str(ZOO / target), timeout=LIMIT, **kw)
    return info.value


def test_a_forward_that_loops_forever_is_stopped_and_named():
    err = hang("hangs.py:LoopsForever")
    assert isinstance(err, CheckError) and err.limit == LIMIT and str(err) == err.en
    assert err.en.startswith(
        "hangs.py:LoopsForever: forward(x) on x of shape (2, 6, 16), during the first call, "
        "did not finish within the time limit of 0.3 s (--timeout)"
    )
    assert "在首次调用阶段，forward(x)（x 形状 (2, 6, 16)）没有在 0.3 秒的时限（--timeout）内结束" in err.zh
    assert "\n" not in err.en and "\n" not in err.zh


@pytest.mark.parametrize(
    "target, step_en, step_zh",
    [
        (
            "hangs.py:HangsWithMask",
            "forward(x, mask) on x of shape (2, 6, 16) and a mask of shape (2, 6), during mask discovery,",
            "在 mask 格式探测阶段，forward(x, mask)",
        ),
        (
            "hangs.py:HangsInInit",
            "hangs.py:HangsInInit: HangsInInit(16, 4) (building the module)",
            "构造模块 HangsInInit(16, 4) 时",
        ),
    ],
)
def test_the_step_that_hung_is_named(target, step_en, step_zh):
    err = hang(target)
    assert err.limit == LIMIT
    assert step_en in err.en and step_zh in err.zh, (err.en, err.zh)


def test_a_file_whose_top_level_code_never_ends_is_stopped(tmp_path):
    src = tmp_path / "train_at_import.py"
    src.write_text(
        "import torch.nn as nn\n\nclass A(nn.Module):\n    pass\n\nstep = 0\nwhile step < 10:  # step += 1 "
        "is missing\n    pass\n"
    )
    with pytest.raises(CheckTimeout) as info:
        check(f"{src}:A", timeout=LIMIT)
    assert info.value.en.startswith("importing train_at_import.py (the code at the top level of the file) did not")
    assert "导入 train_at_import.py（文件顶层的代码）时没有在 0.3 秒" in info.value.zh


class SlowFirstCall(nn.Module):
    """Not an attention (only the limit is under test): its first forward takes 0.25 s, the others no time."""

    calls = 0

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        type(self).calls += 1
        if type(self).calls == 1:
            time.sleep(0.25)
        return self.proj(x)


@pytest.mark.parametrize("timeout, stops", [(0.05, True), (0, False), (None, False), (120, False)])
def test_the_limit_is_the_one_asked_for(timeout, stops):
    SlowFirstCall.calls = 0
    if stops:
        with pytest.raises(CheckTimeout, match="within the time limit of 0.05 s"):
            check(SlowFirstCall, timeout=timeout)
    else:
        assert check(SlowFirstCall, timeout=timeout).diagnosis["status"] == "unavailable"  # ran to the end


@pytest.mark.parametrize("bad", [-1, "60", float("nan"), float("inf"), True])
def test_a_bad_timeout_is_refused(bad):
    with pytest.raises(CheckError, match="timeout must be a number of seconds >= 0"):
        check(SlowFirstCall, timeout=bad)


def test_default_is_sixty_seconds():
    assert inspect.signature(check).parameters["timeout"].default == 60.0


def test_the_callers_alarm_and_handler_come_back(monkeypatch):
    """A caller's own alarm (pytest-timeout's signal method, say) that falls due inside a guarded step is delivered
    when it falls due, before the limit stops the hang (not held back until the step ends); afterwards the caller's
    handler is back, and a timer still running resumes with what it had left. Asserted by the order of events and
    by bounds the clock itself guarantees, so that a loaded machine cannot break it (it once asserted the alarm came
    within 0.3 s of the start)."""
    events: list[tuple[str, float]] = []
    hung_init = Hung.__init__

    def hung(self, *args, **kwargs):
        events.append(("the limit stopped the hang", time.monotonic()))
        hung_init(self, *args, **kwargs)

    monkeypatch.setattr(Hung, "__init__", hung)

    def mine(signum, frame):
        events.append(("the caller's alarm", time.monotonic()))

    previous = signal.signal(signal.SIGALRM, mine)
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.1)  # falls due before the hanging forward's limit can
        with pytest.raises(CheckTimeout):
            check(str(ZOO / "hangs.py:LoopsForever"), timeout=LIMIT)
        names = [what for what, _ in events]
        # the guard's timer repeats (limits.RETRY) until the hang is gone: on a loaded machine the unwinding can
        # outlast one period, and the limit fires again; never the caller's alarm again, never before it
        assert names[:2] == ["the caller's alarm", "the limit stopped the hang"], events
        assert set(names[2:]) <= {"the limit stopped the hang"}, events
        events[2:] = []
        assert events[0][1] - start >= 0.099  # never early
        assert signal.getsignal(signal.SIGALRM) is mine and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)

        before = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 30.0)  # still running after a whole check
        after_set = time.monotonic()
        check(str(ZOO / "separate_attention.py:MultiHeadAttention"), timeout=LIMIT)
        before_get = time.monotonic()
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        after = time.monotonic()
        assert signal.getsignal(signal.SIGALRM) is mine and len(events) == 2
        # the timer ran all along: what is left is 30 s less the time between setting and reading it, which the
        # clock brackets (not reset to 30 s, not cleared), however long the check took
        assert 30.0 - (after - before) - 0.01 <= left <= 30.0 - (before_get - after_set) + 0.01, left
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_sigalrm_from_elsewhere_goes_to_the_caller_and_the_limit_still_holds():
    """A SIGALRM the guard's own timer cannot have sent (``kill -ALRM``, or a caller's alarm that fell due just as
    the step began) is passed on to the caller's handler, once, and raises nothing; the limit still stops a hang."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        with guard(5.0, lambda: ("step", "step")):
            signal.raise_signal(signal.SIGALRM)
            assert fired == [signal.SIGALRM]
        with pytest.raises(Hung), guard(0.05, lambda: ("spin", "spin")):
            signal.raise_signal(signal.SIGALRM)
            while True:
                pass
        assert len(fired) == 2
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_a_callers_alarm_falling_due_as_steps_begin_and_end_arrives_exactly_once():
    """The caller's alarm set to fall due within microseconds of a guard's start or end (where the doctor's steps
    follow each other): never lost (the CI flake this test pins: Linux reads a timer whose signal is on its way as
    1 µs left) and delivered twice at most a few times (before the fix: ~25 of 600). Under heavy CPU contention
    an alarm can still reach the caller twice (measured 5 in 60,000 on a loaded 2-core VM): a signal sent to the
    process can be on its way while the handlers are swapped, and Python cannot tell whose it was. The bound (1% of
    the tries) leaves room for a loaded machine and still catches the old ~4%."""
    counts = {}
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        for i in range(600):
            fired.clear()
            signal.setitimer(signal.ITIMER_REAL, 1e-6 * (1 + i % 60))
            for _ in range(3):
                with guard(5.0, lambda: ("step", "step")):
                    pass
            until = time.monotonic() + 2e-3
            while time.monotonic() < until:  # the alarm, if it is still coming, comes
                pass
            counts[len(fired)] = counts.get(len(fired), 0) + 1
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert set(counts) <= {1, 2} and counts.get(2, 0) <= 6, counts


# --- the command line ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "lang, expected",
    [
        (
            "en",
            "anatomy check: error: hangs.py:LoopsForever: forward(x) on x of shape (2, 6, 16), during the first call, "
            "did not finish within the time limit of 0.3 s (--timeout)",
        ),
        (
            "zh",
            "anatomy check: error: hangs.py:LoopsForever：在首次调用阶段，forward(x)（x 形状 (2, 6, 16)）"
            "没有在 0.3 秒的"
            "时限（--timeout）内结束",
        ),
    ],
)
def test_the_command_line_exits_2_naming_the_step(capsys, lang, expected):
    assert main(["check", str(ZOO / "hangs.py:LoopsForever"), "--timeout", "0.3", "--lang", lang]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(expected) and captured.out == ""


def test_the_watchdog_ends_what_the_alarm_cannot_stop():
    """IgnoresAlarms switches SIGALRM off and spins (as C code that never returns would): the process is ended
    about one second after the limit, exit code 2, with the same line."""
    proc = subprocess.run(
        [sys.executable, "-m", "anatomy", "check", str(ZOO / "hangs.py:IgnoresAlarms"), "--timeout", "0.3"],
        capture_output=True,
        text=True,
        timeout=SAFETY,  # a net for a broken watchdog, not a measure: importing torch alone is slow under load
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("anatomy check: error: hangs.py:IgnoresAlarms: forward(x) on x of shape (2, 6, 16)")
    assert line.endswith("(still running 1 s after the limit: the process was ended)")


def test_the_timeout_option(capsys):
    assert build_parser().parse_args(["check", "x.py:A"]).timeout == 60.0
    assert main(["check", str(ZOO / "fused_attention.py:FusedAttention"), "--timeout", "-1"]) == 2
    assert "timeout must be a number of seconds >= 0" in capsys.readouterr().err
    assert main(["check", str(ZOO / "fused_attention.py:FusedAttention"), "--timeout", "0"]) == 0  # 0: no limit
