"""A run directory's guards: one writer at a time, and never writing into a folder that is not ours.

* **The lock.** ``RUN/.anatomy.lock`` holds the writer's pid, host and start time. It is created whole by a hard
  link of a written file (atomic: of two processes, one wins, and no reader sees it empty), and removed when the
  run ends (normally, by an error or by Ctrl-C). A process killed with SIGKILL leaves it behind: a lock whose pid
  no longer runs on this host is *stale*, said so and taken over. A lock of a live process, or of another host
  (whose processes cannot be seen from here), refuses the second writer with the owner named (exit code 2).
* **Ours.** A folder ``anatomy train`` created holds ``RUN/.anatomy-run``. ``train --out`` refuses a non-empty
  folder without it unless ``--overwrite`` is given; ``output_folder`` applies the same rule to ``convert --out``.
* **Atomic small files.** ``write_atomic`` writes a sibling temporary file, fsyncs it and renames it over the
  target: a crash or a full disk leaves the old content, never half of the new.
* **Fault points for tests.** ``fault("prune")`` (inside pruning) and ``fault("after-step-N")`` (after step N is
  logged) kill the process with SIGKILL when the environment variable ``ANATOMY_FAULT`` names that point, so a test
  can stop a run at an exact instant instead of by timing luck.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOCK, MARKER = ".anatomy.lock", ".anatomy-run"


class RunLockedError(ValueError):
    """Another process writes this run directory: a usage error (exit code 2), naming the owner."""


def fault(point: str) -> None:
    """Test hook: SIGKILL this process here when ``ANATOMY_FAULT`` names ``point``."""
    if os.environ.get("ANATOMY_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)


def is_main_process() -> bool:
    """Under torchrun, rank 0 alone holds the run's lock and writes its files."""
    return os.environ.get("RANK", "0") == "0"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data`` all at once (temporary sibling, fsync, rename); the temporary file is removed
    on any failure, a full disk included."""
    path = Path(path)
    tmp = path.with_name(f".tmp-{path.name}-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise (err if err.filename else OSError(err.errno, err.strerror, str(path))) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -------------------------------------------------------------------------------------------------------- lock
def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_lock(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) and isinstance(data.get("pid"), int) else {}
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}  # unreadable, cut by a crash while it was written, or nested past the parser: treated as stale


def holder(run_dir: Path) -> dict[str, Any] | None:
    """The live owner of ``run_dir``'s lock (``{"pid", "host", "since"}``), or None when free or stale."""
    data = _read_lock(Path(run_dir) / LOCK)
    if not data or data.get("host") != socket.gethostname():
        return data or None
    return data if _alive(data["pid"]) and data["pid"] != os.getpid() else None


def refusal(run_dir: Path, data: dict[str, Any]) -> RunLockedError:
    here = data.get("host") == socket.gethostname()
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(data.get("since", 0)))
    return RunLockedError(
        f"{str(run_dir)!r} is being written by another process: pid {data['pid']} on {data.get('host')!r} "
        f"(since {since}); wait for it to finish or stop it"
        + ("" if here else f" (another host: if it is gone, delete {str(Path(run_dir) / LOCK)!r})")
    )


class RunLock:
    """``with RunLock(run_dir, log):`` hold the run directory for this process (see the module docstring)."""

    def __init__(self, run_dir: Path, log: Callable[[str], None] | None = None) -> None:
        self.path = Path(run_dir) / LOCK
        self.run_dir = Path(run_dir)
        self.log = log or (lambda message: None)
        self.held = False

    def _create(self, record: str) -> bool:
        """Create the lock with its record in one step (a hard link of a written file: no reader ever sees it
        empty); False when it exists."""
        tmp = self.path.with_name(f"{LOCK}.new-{os.getpid()}")
        try:
            tmp.write_text(record, encoding="utf-8")
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def acquire(self) -> RunLock:
        record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()})
        for _ in range(3):
            if self._create(record):
                self.held = True
                return self
            data = _read_lock(self.path)
            if data is None:  # removed between our two looks
                continue
            if data and (data.get("host") != socket.gethostname() or _alive(data["pid"])):
                raise refusal(self.run_dir, data)
            owner = f"pid {data['pid']} on {data.get('host')!r}" if data else "an unreadable record"
            self.log(f"{str(self.path)!r}: removing a stale lock left by {owner}, which is no longer running")
            stale = self.path.with_name(f"{LOCK}.stale-{os.getpid()}")
            try:  # rename first: of two processes taking over the same stale lock, one renames it
                os.replace(self.path, stale)
            except FileNotFoundError:
                continue
            moved = _read_lock(stale)
            if moved and moved.get("pid") != data.get("pid"):  # another process's fresh lock: put it back
                with contextlib.suppress(FileExistsError):
                    os.link(stale, self.path)
                stale.unlink(missing_ok=True)
                raise refusal(self.run_dir, moved)
            stale.unlink(missing_ok=True)
        raise RunLockedError(f"{str(self.path)!r}: could not take the run's lock (another process keeps taking it)")

    def release(self) -> None:
        if self.held:
            data = _read_lock(self.path)
            if data and data.get("pid") == os.getpid():
                self.path.unlink(missing_ok=True)
            self.held = False

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------------------------------ our folders
def _contents(folder: Path, ignore: tuple[str, ...] = ()) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in ignore)


def check_not_a_file(path: Path, flag: str) -> None:
    """``--out`` that is an existing file, or below one: a usage error naming the path."""
    path = Path(path)
    for p in (path, *path.parents):
        if p.exists() and not p.is_dir():
            where = "" if p == path else f" ({str(p)!r} is a file)"
            raise ValueError(
                f"{flag} {str(path)!r}: {'is an existing file' if p == path else 'cannot be created'}"
                f"{where}; give a directory path"
            )
        if p.exists():
            return


def check_run_out(run_dir: Path, *, overwrite: bool) -> None:
    """``train --out``: refuse a file, a run already trained there, or a non-empty folder that is not ours."""
    check_not_a_file(run_dir, "--out")
    if not run_dir.is_dir():
        return
    theirs = _contents(run_dir, (LOCK, MARKER))
    if theirs and not (run_dir / MARKER).exists() and not overwrite:
        shown = ", ".join(theirs[:4]) + (", ..." if len(theirs) > 4 else "")
        raise ValueError(
            f"--out {str(run_dir)!r} is a non-empty folder that `anatomy train` did not create "
            f"({shown}); choose an empty or new folder, or add --overwrite to write into it"
        )


def claim_run_dir(run_dir: Path) -> None:
    """Create ``run_dir`` (parents too) and mark it ours, when it does not exist yet."""
    try:
        run_dir.mkdir(parents=True)
    except FileExistsError:
        if not (run_dir / MARKER).exists() and not _contents(run_dir, (LOCK,)):
            (run_dir / MARKER).write_text("", encoding="utf-8")  # an empty folder given to us
        return
    (run_dir / MARKER).write_text("", encoding="utf-8")


def output_folder(out: Path, *, flag: str = "--out", overwrite: bool = False) -> None:
    """``convert --out``: never a checkpoint or run folder; a non-empty folder only with ``--overwrite``."""
    check_not_a_file(out, flag)
    if not out.is_dir():
        return
    names = set(_contents(out))
    training = {"trainer_state.json", "optimizer.pt", "rng.pt", "training.json"}
    if names & training or (out / "checkpoints").is_dir() or (out / MARKER).exists():
        raise ValueError(
            f"{flag} {str(out)!r} is a training checkpoint or run folder ({', '.join(sorted(names)[:4])})"
            "; convert never writes into one: choose a new folder"
        )
    if names and not overwrite:
        raise ValueError(
            f"{flag} {str(out)!r} is a non-empty folder ({', '.join(sorted(names)[:4])}"
            f"{', ...' if len(names) > 4 else ''}); choose a new folder, or add --overwrite to replace "
            "the files of the same names in it"
        )


# ------------------------------------------------------------------------------------------------ run outputs
def append_line(path: Path, line: str) -> None:
    """One line appended to ``path`` (``metrics.jsonl``); a failed write names the file."""
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")
    except OSError as err:
        raise (err if err.filename else OSError(err.errno, err.strerror, str(path))) from None


def truncate_metrics(path: Path, after: int) -> None:
    """Drop records of steps after ``after`` (logged by a process that died, or by the branch a resume from an
    earlier checkpoint leaves), so the log holds exactly the steps of the run being continued. Atomic: a full disk
    leaves the old file whole."""
    if not path.exists():
        return
    keep = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            if json.loads(line)["step"] <= after:
                keep.append(line)
        except (json.JSONDecodeError, KeyError, TypeError, RecursionError):
            continue  # a line cut by the crash (or no record of ours)
    write_atomic(path, "".join(line + "\n" for line in keep))


def plot_losses(metrics: Path, out: Path, say: Callable[[str], None]) -> None:
    """``loss.png``: train loss per logged step, val loss where evaluated."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("plot: matplotlib is not installed (pip install matplotlib); skipping loss.png")
        return
    rows = [json.loads(line) for line in metrics.read_text(encoding="utf-8").splitlines()]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], label="train loss", lw=1)
    val = [r for r in rows if "val_loss" in r]
    if val:
        ax.plot([r["step"] for r in val], [r["val_loss"] for r in val], "o-", label="val loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats)")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
