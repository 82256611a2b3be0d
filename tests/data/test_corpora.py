"""The shipped corpora: present, the promised shapes and sizes, seeded splits, and clear errors on bad files."""

from __future__ import annotations

import hashlib
import json
import os
import re
from importlib import resources

import pytest

from anatomy.data import corpora
from anatomy.data.corpora import corpus_splits, labelled_splits, load_corpus, load_labelled, read_text_file


@pytest.fixture(scope="module")
def shakespeare() -> str:
    return load_corpus("shakespeare")[0]


def test_shakespeare_is_in_the_tiny_shakespeare_layout(shakespeare):
    assert 1_000_000 < len(shakespeare) < 1_300_000
    assert shakespeare.startswith("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n")
    blocks = shakespeare.strip("\n").split("\n\n")
    assert all(re.fullmatch(r"[^\n:]+:\n.+", b, flags=re.S) for b in blocks)
    assert len(set(shakespeare)) <= 70 and not set("_*#\\[]") & set(shakespeare)  # no markdown left


def test_tang_is_simplified_regular_verse():
    text = load_corpus("tang")[0]
    poems = text.splitlines()
    assert 1_500_000 < len(text) < 1_900_000 and len(poems) > 30_000
    line = "[^，。？！；]"  # one character per syllable (opencc may map to CJK extension characters)
    verse = re.compile("|".join(f"(?:{line}{{{n}}}[，。？！；]){{{k}}}" for n in (5, 7) for k in (4, 8)))
    assert all(verse.fullmatch(p) for p in poems)
    assert len(set(poems)) == len(poems)
    assert not set("國說門馬來時") & set(text)  # traditional forms are gone
    fixture = load_corpus("tang300")[0]
    assert "床前明月光" in fixture and 250 < len(fixture.splitlines()) < 350


@pytest.mark.parametrize("name, n_min", [("sentiment-en", 10_000), ("sentiment-zh", 17_000)])
def test_labelled_sets_have_no_duplicates_or_conflicts(name, n_min):
    rows = load_labelled(name)
    assert len(rows) >= n_min
    texts = [t for t, _ in rows]
    assert len(set(texts)) == len(texts)
    labels = {y for _, y in rows}
    assert labels == {0, 1}
    share = sum(y for _, y in rows) / len(rows)
    assert 0.4 < share < 0.6


def test_splits_are_seeded_disjoint_and_complete():
    a, b = labelled_splits("sentiment-en", seed=0), labelled_splits("sentiment-en", seed=0)
    assert a == b
    assert labelled_splits("sentiment-en", seed=1)["val"] != a["val"]
    texts = [set(t for t, _ in a[s]) for s in ("train", "val", "test")]
    assert not (texts[0] & texts[1] or texts[0] & texts[2] or texts[1] & texts[2])
    assert sum(len(a[s]) for s in a) == len(load_labelled("sentiment-en"))
    text = corpus_splits("tang300", seed=0)
    poems = [set(text[s].splitlines()) for s in ("train", "val", "test")]
    assert not poems[0] & poems[1] and sum(map(len, poems)) == len(set(load_corpus("tang300")[0].splitlines()))


def test_sources_manifest_matches_the_files():
    import hashlib

    files = resources.files("anatomy.data").joinpath("files")
    manifest = json.loads(files.joinpath("SOURCES.json").read_text(encoding="utf-8"))
    for name, info in manifest["outputs"].items():
        assert hashlib.sha256(files.joinpath(name).read_bytes()).hexdigest() == info["sha256"], name
    total = sum(
        files.joinpath(n).stat().st_size if hasattr(files.joinpath(n), "stat") else 0 for n in manifest["outputs"]
    )
    assert total < 6_000_000


def test_bad_files_are_named(tmp_path):
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("\n \n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"latin1.txt' is not UTF-8 text: byte 0xe9 at offset 3"):
        read_text_file(tmp_path / "latin1.txt")
    with pytest.raises(ValueError, match="empty.txt' is empty"):
        read_text_file(tmp_path / "empty.txt")
    with pytest.raises(ValueError, match="unknown corpus 'shakespear'; valid names: shakespeare, tang, tang300"):
        load_corpus("shakespear")
    (tmp_path / "bad.tsv").write_text("positive\tgreat\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 1: expected 'LABEL<TAB>TEXT'"):
        load_labelled(str(tmp_path / "bad.tsv"))
    with pytest.raises(ValueError, match="at least 3 units"):
        corpora.split_units(["a", "b"], seed=0)


def test_a_fifo_a_device_or_a_folder_is_refused_for_what_it_is(tmp_path, monkeypatch):
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)  # nobody writes to it: a read would wait forever
    with pytest.raises(ValueError, match=r"corpus file '.*corpus.fifo' is a FIFO \(named pipe\), not a regular file"):
        load_corpus(str(fifo))
    zero = tmp_path / "zero.txt"
    zero.symlink_to("/dev/zero")  # a read would never end
    with pytest.raises(ValueError, match=r"zero.txt' is a character device \(a link to '/dev/zero'\), not a regular"):
        corpus_splits(str(zero))
    with pytest.raises(ValueError, match=r"dataset file '.*' is a folder, not a regular file"):
        load_labelled(str(tmp_path))
    dangling = tmp_path / "gone.txt"
    dangling.symlink_to(tmp_path / "nowhere.txt")
    with pytest.raises(ValueError, match=r"gone.txt' does not exist \(a link to '.*nowhere.txt', which does not"):
        read_text_file(dangling)
    with pytest.raises(ValueError, match=r"missing.txt' does not exist$"):
        read_text_file(tmp_path / "missing.txt")
    big = tmp_path / "big.txt"
    big.write_text("ab\n" * 10, encoding="utf-8")
    monkeypatch.setattr(corpora, "MAX_TEXT_BYTES", 16)
    with pytest.raises(ValueError, match=r"big.txt' holds 0.0 GiB; at most 0 GiB"):
        read_text_file(big)


def test_the_digest_is_the_files_and_follows_its_order_not_only_its_characters(tmp_path):
    text = "".join(f"line {i} of the corpus\n\n" for i in range(12))
    (tmp_path / "a.txt").write_text(text, encoding="utf-8")
    (tmp_path / "b.txt").write_text("".join(reversed(text.splitlines(keepends=True))), encoding="utf-8")
    splits, digest = corpora.corpus_splits_and_digest(str(tmp_path / "a.txt"))
    assert splits == corpus_splits(str(tmp_path / "a.txt")) and len(digest) == 64
    assert digest == hashlib.sha256((tmp_path / "a.txt").read_bytes()).hexdigest()  # what sha256sum prints
    assert corpora.corpus_splits_and_digest(str(tmp_path / "b.txt"))[1] != digest
    rows, labelled = corpora.labelled_splits_and_digest("sentiment-en")
    assert rows == labelled_splits("sentiment-en") and len(labelled) == 64
