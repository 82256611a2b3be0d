"""Progress of ``anatomy learn``, kept in the working folder (``.anatomy-learn.json``), so it survives a restart.

One JSON object: for each exercise its status (``done`` once a check passed, ``tried`` after a failed check,
absent: not started), the file it was started in, the number of checks and the last result's pitfall. Written
atomically (a temporary file renamed over the old one), so a crash never leaves half a file; an unreadable file is
named, never silently replaced.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

FILE = ".anatomy-learn.json"
STATUSES = ("not started", "tried", "done")


class Progress:
    def __init__(self, folder: str | Path = "."):
        self.folder = Path(folder)
        self.path = self.folder / FILE
        self.data: dict = {"version": 1, "exercises": {}}
        if self.path.is_file():
            try:
                loaded = json.loads(self.path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise ValueError(
                    f"{self.path}: not a progress file anatomy learn can read ({err}); move it away to start afresh"
                ) from None
            if not isinstance(loaded, dict) or not isinstance(loaded.get("exercises"), dict):
                raise ValueError(
                    f"{self.path}: not a progress file anatomy learn can read (no 'exercises'); move "
                    "it away to start afresh"
                )
            self.data = loaded

    def entry(self, exercise_id: str) -> dict:
        return self.data["exercises"].get(exercise_id, {})

    def status(self, exercise_id: str) -> str:
        return self.entry(exercise_id).get("status", "not started")

    def started(self, exercise_id: str, file: Path) -> None:
        e = self.data["exercises"].setdefault(exercise_id, {})
        e["file"] = os.path.relpath(file, self.folder)
        self.save()

    def checked(self, exercise_id: str, file: Path, passed: bool, pitfall: str | None) -> None:
        e = self.data["exercises"].setdefault(exercise_id, {})
        e.setdefault("file", os.path.relpath(file, self.folder))
        e["checks"] = e.get("checks", 0) + 1
        e["status"] = "done" if passed or e.get("status") == "done" else "tried"
        e["last"] = "pass" if passed else (pitfall or "fail")
        self.save()

    def notebook(self, exercise_id: str, path: Path) -> None:
        """The exercise is (also) worked in the notebook ``path`` (``anatomy learn start --notebook``)."""
        e = self.data["exercises"].setdefault(exercise_id, {})
        e["notebook"] = os.path.relpath(path, self.folder)
        self.save()

    def file(self, exercise_id: str) -> Path | None:
        f = self.entry(exercise_id).get("file")
        return None if f is None else self.folder / f

    def save(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".anatomy-learn.", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(self.data, f, ensure_ascii=False, indent=2)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
