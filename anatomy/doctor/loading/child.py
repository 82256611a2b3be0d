"""Run a check of the learner's code in a forked child process; the parent decides what the child's end means.

    outcome = forked(lambda: grade(...), overdue=lambda step: timeout_answer(step), quiet=True)
    outcome.answered, outcome.answer    # what ``compute()`` returned (pickled back through a pipe), or
    outcome.crash                       # "TypeName: message": ``compute()`` raised, or its answer does not pickle
    outcome.code                        # no answer: the child's exit code (the learner's ``os._exit``, a signal)

``anatomy check``, ``anatomy learn check`` and the notebook's ``anatomy.check`` all run this way, so the learner's
code can end, hang or litter only a process of its own:

- the child leaves with ``os._exit`` right after answering: the learner's ``atexit`` handlers and non-daemon
  threads never run on, and nothing the learner does to the process (``os.chdir``, signal handlers, ``sys.exit``
  in a handler) reaches the parent, which writes the progress file and decides the exit code;
- a :class:`~anatomy.doctor.loading.limits.Watchdog` thread in the child ends a guarded step still running
  ``grace(limit)`` seconds past its limit (``SIGALRM`` ignored or swallowed, C code that lets go of the GIL):
  ``overdue(step)`` is then the answer, sent before the child ends;
- ``quiet``: the child's file descriptors 1 and 2 point at ``/dev/null`` and ``sys.stdout``/``sys.stderr`` at it
  too, so what the learner's code writes (``print``, ``os.write(1, ...)``, C code, ANSI escapes) never reaches the
  terminal or the JSON; without ``quiet`` the learner's prints go where the parent's go. Standard input is always
  ``/dev/null`` (a check asks nothing; a child reading the terminal from its own process group would stop);
- the child leads a process group of its own; once the answer is in (or the child has ended), the parent kills
  that group, so processes the learner's code started (``subprocess.Popen("sleep 100")``, a ``fork``) are ended
  and never waited for; the parent reads a length-prefixed answer instead of waiting for the pipe's end of file,
  which such processes would hold open.

Where there is no ``fork`` the callers run the check in their own process (the doctor's in-process limits only).
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import select
import signal
import struct
import sys
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from anatomy.doctor.loading.limits import Step, Watchdog

FORK = hasattr(os, "fork") and hasattr(os, "setpgid") and hasattr(os, "killpg")
HEADER = struct.Struct("<Q")  # the answer's length in bytes, before the answer
POLL = 0.05  # seconds between looks at whether the child has ended without answering


@dataclass
class Outcome:
    answered: bool = False
    answer: Any = None
    crash: str | None = None  # compute() raised, or its answer did not pickle: "TypeName: message"
    code: int = 0  # no answer: the child's exit code (os.waitstatus_to_exitcode: -N for signal N)


def forked(compute: Callable[[], Any], *, overdue: Callable[[Step], Any] | None = None, quiet: bool = True) -> Outcome:
    """``compute()`` in a forked child (see the module docstring); the parent waits for its answer only."""
    for stream in (sys.stdout, sys.stderr):  # what the parent buffered must not be written twice
        with contextlib.suppress(Exception):
            stream.flush()
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded process": the child runs no threads
        pid = os.fork()
    if pid == 0:
        _child(compute, overdue, quiet, read, write)  # never returns
    os.close(write)
    with contextlib.suppress(OSError):  # the child does it too: whichever runs first, the group exists
        os.setpgid(pid, pid)
    try:
        data, status = _wait(pid, read)
    except BaseException:  # an interrupt: the child and whatever it started go too
        _end_group(pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise
    finally:
        os.close(read)
    if data is not None:
        with contextlib.suppress(Exception):
            kind, value = pickle.loads(data)  # noqa: S301 - our own child's answer, through our own pipe
            if kind == "answer":
                return Outcome(answered=True, answer=value)
            return Outcome(crash=str(value))
    return Outcome(code=os.waitstatus_to_exitcode(status))


def _child(
    compute: Callable[[], Any], overdue: Callable[[Step], Any] | None, quiet: bool, read: int, write: int
) -> None:
    code = 0
    try:
        os.close(read)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if hasattr(signal, "SIGTTOU"):  # a background group writing to a terminal set to `tostop`: write anyway
            signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        if quiet:
            os.dup2(null, 1)
            os.dup2(null, 2)
            sys.stdout = sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the child
        else:
            sys.stdin = io.StringIO()
        lock = threading.Lock()

        def send(kind: str, value: Any) -> None:
            try:
                data = pickle.dumps((kind, value))
            except Exception as err:  # noqa: BLE001 - an answer that does not pickle is a crash, said as one
                data = pickle.dumps(("crash", f"{type(err).__name__}: {err}"))
            with lock:
                _write_all(write, HEADER.pack(len(data)) + data)

        def end(step: Step) -> None:
            assert overdue is not None  # the watchdog runs only with it
            with contextlib.suppress(BaseException):
                send("answer", overdue(step))
            os._exit(0)

        try:
            with Watchdog(end) if overdue is not None else contextlib.nullcontext():
                answer = compute()
        except BaseException as err:  # noqa: BLE001 - the parent must get an answer
            send("crash", f"{type(err).__name__}: {' '.join(str(err).split())[:300]}")
        else:
            send("answer", answer)
    except BaseException:  # noqa: BLE001
        code = 3
    finally:
        os._exit(code)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _wait(pid: int, read: int) -> tuple[bytes | None, int]:
    """(the child's answer or None, its wait status); the child's group is ended before it is reaped."""
    buf = bytearray()
    eof = False
    while True:
        answer = _complete(buf)
        if answer is not None:
            break
        if eof or _ended(pid):
            while not eof and select.select([read], [], [], 0)[0]:  # what it wrote before it ended
                chunk = os.read(read, 1 << 20)
                eof = not chunk
                buf += chunk
            answer = _complete(buf)
            break
        if select.select([read], [], [], POLL)[0]:
            chunk = os.read(read, 1 << 20)
            eof = not chunk
            buf += chunk
    _end_group(pid)
    _, status = os.waitpid(pid, 0)
    return answer, status


def _complete(buf: bytearray) -> bytes | None:
    if len(buf) < HEADER.size:
        return None
    (size,) = HEADER.unpack_from(buf)
    return bytes(buf[HEADER.size : HEADER.size + size]) if len(buf) >= HEADER.size + size else None


def _ended(pid: int) -> bool:
    """Has the child ended? Asked without reaping it, so its process group cannot be reused before it is ended."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _end_group(pid: int) -> None:
    """Kill the child's process group: the child and every process the learner's code started in it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
