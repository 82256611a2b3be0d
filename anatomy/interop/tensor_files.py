"""One safetensors file read or written for :mod:`anatomy.interop.safetensors_io`: a library error that wraps an
``OSError`` said as one, a partly written file removed, and a path that is not valid UTF-8 opened through
``/proc/self/fd`` (the library refuses such names though it writes there)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterator
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from anatomy.errors import CheckpointError


def os_error_from(err: BaseException, path: Path) -> OSError | None:
    """An ``OSError`` naming ``path`` for a library error that wraps one in its text (safetensors and tokenizers
    say "... (os error 28)"), so the command line can say "no space left" like for any other write; else None."""
    found = re.search(r"os error (\d+)", str(err))
    if found is None:
        return None
    code = int(found.group(1))
    return OSError(code, os.strerror(code) if code in errno.errorcode else str(err), str(path))


def save_tensor_file(tensors: dict[str, torch.Tensor], path: Path) -> None:
    try:
        save_file(tensors, str(path), metadata={"format": "pt"})
    except SafetensorError as err:  # a full disk comes as "I/O error: No space left on device (os error 28)"
        os_error = os_error_from(err, path)
        if os_error is None:
            raise
        path.unlink(missing_ok=True)
        raise os_error from None


def read_tensor_file(path: Path, keys: list[str] | None = None) -> dict[str, torch.Tensor]:
    try:
        with utf8_name(path) as name, safe_open(name, framework="pt") as f:
            names = list(f.keys()) if keys is None else keys
            missing = sorted(set(names) - set(f.keys()))
            if missing:
                raise CheckpointError(f"{path}: the index names tensor(s) {missing[:5]} that this shard lacks")
            return {name: f.get_tensor(name) for name in names}
    except (SafetensorError, OSError, RuntimeError) as err:
        raise CheckpointError(
            f"{path}: not a readable safetensors file, it may be truncated or corrupted ({err})"
        ) from None


@contextlib.contextmanager
def utf8_name(path: Path) -> Iterator[str]:
    """A name the safetensors library can open for ``path``: the path itself, or, for a path that is not valid
    UTF-8 (a folder named in another encoding), which the library refuses to open though it writes there, the
    file opened here and named through ``/proc/self/fd`` (Linux); elsewhere such a path is refused in words."""
    name = str(path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        yield name
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        alias = f"/proc/self/fd/{fd}"
        if not os.path.exists(alias):
            raise CheckpointError(
                f"{path}: the path is not valid UTF-8, which the safetensors library cannot open here; rename the "
                "folder or file with a UTF-8 name"
            )
        yield alias
    finally:
        os.close(fd)
