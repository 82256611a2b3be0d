"""Time limits on the learner's code: importing its file, building its module, one forward.

    with guard(60.0, lambda: ("forward(x) of my.py:Attn", "my.py:Attn 的 forward(x)")):
        out = module(x)              # past 60 s: ``Hung`` is raised inside the learner's code

**How.** ``signal.setitimer(ITIMER_REAL)`` and a ``SIGALRM`` handler, in the main thread, around each step; the
caller's handler and timer are restored afterwards (a caller's alarm that falls due inside the step is passed on
when it falls due, not lost; so is any SIGALRM the guard's timer cannot have sent, such as a caller's alarm that
fell due in the microseconds while the handlers were being swapped). The handler raises :class:`Hung`, a
``BaseException``: a learner's ``except Exception`` cannot swallow it, and the doctor does not take it for the
module raising. After the limit the alarm repeats every ``RETRY`` seconds, so a bare ``except:`` inside a loop does
not stop it either, unless the loop swallows every one.

**Where it runs.** ``anatomy check``, ``anatomy learn check`` and the notebook's ``check`` run the learner's code
in a forked child (:mod:`anatomy.doctor.loading.child`), and this guard works inside that child. Python runs
signal handlers only between bytecodes, so inside one torch op (or any C code) the alarm waits until the op
returns: the limit is late by the op's length, and C code that never returns is never stopped.
For that case (and for a module that swallows every alarm) the command line adds :class:`Watchdog`: a thread that
ends the process, exit code 2, when a step is still running well past its limit. The library never ends the
process; it enforces the limit only in the main thread (elsewhere ``signal`` cannot be used) and not at all when
``SIGALRM`` has a handler installed outside Python.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Literal

RETRY = 0.1  # seconds between repeated alarms once a step is over its limit
EARLY = 1e-4  # a timer read back in whole microseconds may seem to fire this much early
SPENT = 1e-5  # a timer that reads this little left may already have sent its signal
Describe = Callable[[], tuple[str, str]]  # the step in English and Chinese, computed only when it is needed


@dataclass
class Step:
    describe: Describe
    limit: float
    deadline: float  # time.monotonic() when the limit runs out


class Hung(BaseException):
    """A step of the learner's code ran past its limit. Not an ``Exception``: ``except Exception`` must not eat it."""

    def __init__(self, step: Step):
        super().__init__(step.describe()[0])
        self.step = step


_active: list[Step] = []  # the guarded steps now running, innermost last (read by the watchdog thread)


def enforced() -> bool:
    """Can a limit be enforced here? Only in the main thread, and only with ``SIGALRM`` handled from Python."""
    return (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGALRM) is not None
    )


class guard:  # noqa: N801 - used like a function: ``with guard(limit, describe):``
    """Raise :class:`Hung` into the code inside the ``with`` once it has run ``limit`` seconds (None or 0: never).

    Every ``SIGALRM`` that reaches the guard is either its own timer or someone else's: the caller's alarm falling
    due (passed on to the caller's handler, once), or a signal that arrives before the guard's timer could have
    fired (also passed on: a caller's alarm that fell due just as the step began, ``kill -ALRM``). Only its own
    timer, past the limit, raises."""

    def __init__(self, limit: float | None, describe: Describe):
        self.limit, self.describe = limit, describe
        self.on = False

    def __enter__(self) -> guard:
        if not self.limit or self.limit <= 0 or not enforced():
            return self
        now = time.monotonic()
        self.step = Step(self.describe, float(self.limit), now + self.limit)
        self.outer, self.outer_fired, self.closing, self.stray = None, False, False, False
        self.first_due = float("inf")  # before the guard's own timer could first fire, a signal is not ours
        self.old_handler = signal.getsignal(signal.SIGALRM)
        self.on = True
        _active.append(self.step)
        # The handler first, then the caller's timer: an alarm of the caller's that falls due in between reaches
        # ``_alarm`` as a signal from elsewhere and is passed on.
        signal.signal(signal.SIGALRM, self._alarm)
        self.old_delay, self.old_interval = signal.getitimer(signal.ITIMER_REAL)
        now = time.monotonic()
        # Linux reads a timer that has fired but whose signal is still on its way as 1 microsecond left: when that
        # signal has already been passed on, the caller's alarm is spent.
        if self.old_delay > 0 and not (self.stray and self.old_delay <= SPENT):
            self.outer = now + self.old_delay  # the caller's own alarm
        first = self.step.deadline if self.outer is None else min(self.step.deadline, self.outer)
        self.first_due = first
        self._arm(first, now)
        return self

    def _arm(self, when: float, now: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, max(when - now, 1e-6), RETRY)

    def _alarm(self, signum: int, frame: FrameType | None) -> None:
        if not self.on:
            return
        now = time.monotonic()
        if self.outer is not None and not self.outer_fired and now >= self.outer - EARLY:
            self.outer_fired = True  # the caller's alarm fell due: give it its signal, keep ours running
            if not self.closing:
                self._arm(self.step.deadline, now)
            self._pass_on(signum, frame)
            return
        if now < self.first_due - EARLY:  # our timer cannot have fired yet: the signal came from elsewhere
            self.stray = True
            self._pass_on(signum, frame)
            return
        if self.closing or now < self.step.deadline - EARLY:
            return
        raise Hung(self.step)

    def _pass_on(self, signum: int, frame: FrameType | None) -> None:
        old = self.old_handler
        if callable(old):
            old(signum, frame)
        elif old == signal.SIG_DFL:  # the caller's alarm would have ended the process: so it does
            self.on = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, signal.SIG_DFL)
            signal.raise_signal(signal.SIGALRM)

    def __exit__(self, *exc: object) -> Literal[False]:
        if not self.on:
            return False
        self.closing = True  # from here on an alarm never raises; a caller's alarm falling due is still passed on
        signal.setitimer(signal.ITIMER_REAL, 0)
        _let_signals_in()  # a signal our timer sent just before is handled here, not by the caller's handler
        signal.signal(signal.SIGALRM, self.old_handler)
        self.on = False
        if self.step in _active:
            _active.remove(self.step)
        if self.outer is not None and not self.outer_fired:
            left = self.outer - time.monotonic()
            if left > EARLY:
                signal.setitimer(signal.ITIMER_REAL, left, self.old_interval)
            else:  # fell due while the step was closing: deliver it now rather than race a microsecond timer
                self.outer_fired = True
                if self.old_interval > 0:
                    signal.setitimer(signal.ITIMER_REAL, self.old_interval, self.old_interval)
                self._pass_on(signal.SIGALRM, sys._getframe(1))  # handlers expect the frame it interrupted
        elif self.old_delay > 0 and self.old_interval > 0:
            signal.setitimer(signal.ITIMER_REAL, self.old_interval, self.old_interval)
        return False


def _let_signals_in() -> None:
    """Calling a Python function is a point where the interpreter runs the handlers of signals already received."""


def grace(limit: float) -> float:
    """How long past its limit the watchdog lets a step run: the limit again, between 1 and 10 seconds."""
    return min(max(limit, 1.0), 10.0)


class Watchdog:
    """For the command line only: end the process when a guarded step is still running ``grace(limit)`` seconds
    after its limit (the alarm could not get through: C code that never returns, or a module that swallows
    every alarm). ``on_overdue(step)`` says so and ends the process; it runs in the watchdog's thread."""

    def __init__(self, on_overdue: Callable[[Step], None], poll: float = 0.05):
        self.on_overdue, self.poll = on_overdue, poll
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="anatomy-check-watchdog", daemon=True)

    def _watch(self) -> None:
        while not self._stop.wait(self.poll):
            steps = list(_active)
            now = time.monotonic()
            for step in steps:
                if now > step.deadline + grace(step.limit):
                    self.on_overdue(step)
                    return

    def __enter__(self) -> Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self._stop.set()
        self._thread.join()
        return False
