"""Bounded reading of a user's file: only regular files, never more than the limit, the refusal typed; a JSON file
read the same way, every hostile one refused in one line naming it."""

from __future__ import annotations

import json
import os

import pytest

from anatomy.files import DEPTH, BadJSON, FileTooBig, NotRegularFile, file_kind, read_json, read_regular


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


def _refusal(path, **kw) -> str:
    with pytest.raises(BadJSON) as got:
        read_json(path, **kw)
    message = str(got.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message


def test_read_json_reads_an_object_and_refuses_hostile_files_in_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"a": [1, {"b": null}], "c": "\u00e9"}', encoding="utf-8")
    assert read_json(path) == {"a": [1, {"b": None}], "c": "é"}
    path.write_text("[" * 100_000)  # Python's parser ends in a RecursionError near 1000 levels
    assert "nested more than 200 levels deep; expected a JSON object" in _refusal(path)
    path.write_text("[" * (DEPTH + 1) + "]" * (DEPTH + 1))  # parsed, but deeper than any configuration
    assert "nested more than 200 levels deep" in _refusal(path, expect=list)
    path.write_text("[" * DEPTH + "]" * DEPTH)
    assert read_json(path, expect=list) is not None
    path.write_text('{"a": 1,')
    assert "not valid JSON (Expecting property name enclosed in double quotes at line 1, column 9)" in _refusal(path)
    path.write_text("[1, 2]")
    assert _refusal(path, what="a JSON object (the model's configuration)").endswith(
        "expected a JSON object (the model's configuration), got an array"
    )
    path.write_text("null")
    assert _refusal(path).endswith("got null")
    path.write_text('{"rope": {"factor": NaN}}')
    assert "field 'rope.factor' is NaN, which JSON does not allow" in _refusal(path, finite=True)
    path.write_text('{"x": [1, -Infinity]}')
    assert "field 'x[1]' is -Infinity" in _refusal(path, finite=True)
    assert read_json(path) == {"x": [1, float("-inf")]}  # as Python's json reads it (our trainer state holds inf)
    path.write_bytes(b'{"name": "caf\xe9"}')  # Latin-1, not UTF-8
    assert "not UTF-8 text (invalid continuation byte at byte 13)" in _refusal(path)
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"bom": 1}).encode())  # a UTF-8 byte-order mark is read past
    assert read_json(path) == {"bom": 1}


def test_read_json_refuses_a_huge_file_before_reading_it_and_a_folder(tmp_path):
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(2**40)  # sparse: a terabyte on paper, nothing on the disk
    assert "1099511627776 bytes, more than the 67108864 expected at most; expected a JSON object" in _refusal(path)
    assert "a folder, not a regular file" in _refusal(tmp_path)
    with pytest.raises(FileNotFoundError):  # the caller names a missing file in its own words
        read_json(tmp_path / "missing.json")


def test_a_key_written_twice_keeps_its_last_value_with_a_warning(tmp_path):
    path = tmp_path / "generation_config.json"
    path.write_text('{"max_new_tokens": 3, "top_k": 2, "max_new_tokens": 6}')
    with pytest.warns(UserWarning, match="key 'max_new_tokens' is written more than once; its last value is used"):
        assert read_json(path) == {"max_new_tokens": 6, "top_k": 2}
