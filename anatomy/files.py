"""Reading a file the user named, bounded: only a regular file (links followed) is read, a FIFO is never waited on
and a device never read without end, and no more than ``limit`` bytes are read. Used for corpora
(``data.corpora``) and for the stored units of a claims run (``experiments.store``), each phrasing the refusal in
its own words from the exceptions here."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["FileTooBig", "NotRegularFile", "file_kind", "read_regular"]


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, in words, from its ``st_mode``."""
    for test, what in (
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


class NotRegularFile(OSError):
    """The path is a folder, a FIFO, a device or a socket: ``kind`` says which (:func:`file_kind`)."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"{kind}, not a regular file")
        self.kind = kind


class FileTooBig(OSError):
    """The file holds more than ``limit`` bytes: ``size`` as the file system said before reading, or ``None`` when it
    grew past ``limit`` while being read."""

    def __init__(self, size: int | None, limit: int) -> None:
        super().__init__(
            f"more than the {limit} bytes expected at most"
            if size is None
            else f"{size} bytes, more than the {limit} expected at most"
        )
        self.size, self.limit = size, limit


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; :class:`NotRegularFile`,
    :class:`FileTooBig`, or the ``OSError`` of opening or reading it otherwise."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFile(file_kind(info.st_mode))
        if info.st_size > limit:
            raise FileTooBig(info.st_size, limit)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:  # it grew while being read
            raise FileTooBig(None, limit)
        return data
    finally:
        os.close(fd)
