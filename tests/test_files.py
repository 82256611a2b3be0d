"""Bounded reading of a user's file: only regular files, never more than the limit, the refusal typed."""

from __future__ import annotations

import os

import pytest

from anatomy.files import FileTooBig, NotRegularFile, file_kind, read_regular


def test_a_regular_file_is_read_whole_up_to_the_limit(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"abcdef")
    assert read_regular(path, 6) == b"abcdef"


def test_a_file_over_the_limit_is_refused_with_its_size(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"abcdef")
    with pytest.raises(FileTooBig) as got:
        read_regular(path, 5)
    assert (got.value.size, got.value.limit) == (6, 5)
    assert str(got.value) == "6 bytes, more than the 5 expected at most"


def test_a_folder_is_named_as_one(tmp_path):
    with pytest.raises(NotRegularFile) as got:
        read_regular(tmp_path, 10)
    assert got.value.kind == "a folder" and str(got.value) == "a folder, not a regular file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    path = tmp_path / "pipe"
    os.mkfifo(path)
    with pytest.raises(NotRegularFile) as got:
        read_regular(path, 10)  # opened non-blocking: returns at once
    assert got.value.kind == "a FIFO (named pipe)"
    assert file_kind(os.stat(path).st_mode) == "a FIFO (named pipe)"


def test_a_missing_file_is_the_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "none", 10)
