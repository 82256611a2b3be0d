"""Progress of ``anatomy learn``, kept in the working folder (``.anatomy-learn.json``), so it survives a restart.

One JSON object: for each exercise its status (``done`` once a check passed, ``tried`` after a failed check,
absent: not started), the file it was started in, the number of checks and the last result's pitfall. Written
atomically (a temporary file renamed over the old one), so a crash never leaves half a file; an unreadable file is
named, never silently replaced.

Several checks may run at once in one folder (two terminals, an editor's check-on-save, a notebook): every change
is made under an exclusive lock on ``.anatomy-learn.lock`` (``fcntl.flock``; the lock file stays, it holds no
data), to the file as it is on disk then, re-read inside the lock, so no check's record is lost. The folder is
made absolute when the progress is opened: a learner's ``os.chdir`` cannot move the file.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

FILE = ".anatomy-learn.json"
LOCK = ".anatomy-learn.lock"
STATUSES = ("not started", "tried", "done")


class Progress:
    def __init__(self, folder: str | Path = "."):
        self.folder = Path(folder)  # as given: the files it names are shown relative to it
        self.path = Path(os.path.abspath(folder)) / FILE
        self.data: dict[str, Any] = self._read()  # the file's JSON: version, exercises

    def _read(self) -> dict[str, Any]:
        if not self.path.is_file():
            return {"version": 1, "exercises": {}}
        try:
            loaded: Any = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:
            raise ValueError(
                f"{self.folder / FILE}: not a progress file anatomy learn can read ({err}); move it away to start afresh"
            ) from None
        if not isinstance(loaded, dict) or not isinstance(loaded.get("exercises"), dict):
            raise ValueError(
                f"{self.folder / FILE}: not a progress file anatomy learn can read (no 'exercises'); move it away to "
                "start afresh"
            )
        return loaded

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            import fcntl
        except ImportError:  # no flock (Windows): the atomic write alone
            yield
            return
        fd = os.open(self.path.parent / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _update(self, change: Callable[[dict[str, Any]], None]) -> None:
        """Apply ``change`` to the file as it is now on disk, under the lock, and write it back atomically."""
        with self._locked():
            self.data = self._read()
            change(self.data["exercises"])
            self.save()

    def entry(self, exercise_id: str) -> dict[str, Any]:
        entry: dict[str, Any] = self.data["exercises"].get(exercise_id, {})
        return entry

    def status(self, exercise_id: str) -> str:
        status: str = self.entry(exercise_id).get("status", "not started")
        return status

    def started(self, exercise_id: str, file: Path) -> None:
        rel = self._rel(file)

        def change(exercises: dict[str, Any]) -> None:
            exercises.setdefault(exercise_id, {})["file"] = rel

        self._update(change)

    def checked(self, exercise_id: str, file: Path, passed: bool, pitfall: str | None) -> None:
        rel = self._rel(file)

        def change(exercises: dict[str, Any]) -> None:
            e = exercises.setdefault(exercise_id, {})
            e.setdefault("file", rel)
            e["checks"] = e.get("checks", 0) + 1
            e["status"] = "done" if passed or e.get("status") == "done" else "tried"
            e["last"] = "pass" if passed else (pitfall or "fail")

        self._update(change)

    def notebook(self, exercise_id: str, path: Path) -> None:
        """The exercise is (also) worked in the notebook ``path`` (``anatomy learn start --notebook``)."""
        rel = self._rel(path)

        def change(exercises: dict[str, Any]) -> None:
            exercises.setdefault(exercise_id, {})["notebook"] = rel

        self._update(change)

    def _rel(self, file: Path) -> str:
        return os.path.relpath(file, self.folder)

    def file(self, exercise_id: str) -> Path | None:
        f = self.entry(exercise_id).get("file")
        return None if f is None else self.folder / f

    def save(self) -> None:
        """Write :attr:`data` atomically (callers that change it go through the lock: :meth:`_update`)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".anatomy-learn.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.data, f, ensure_ascii=False, indent=2)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
