"""Every Python example of docs/interop.md, docs/generation.md and docs/seeing.md runs, block after block in one
namespace per page, as a reader pastes them; and the doctor's example in docs/notebooks.md shows what it prints.

The pages use a few names they do not build (a reader has their own): ``hf_model`` (a tiny random GPT-2 of
transformers, saved as ``path/to/hf`` in the working folder with its ``generation_config.json``), ``input_ids`` /
``attention_mask`` / ``mask`` (a left-padded batch), ``tokenizer`` (a character tokenizer over the 64 ids),
``eos``/``pad``, ``embeds`` (a prompt of token embeddings), ``ids``/``nxt``. ``PRELUDE`` makes them here."""

from __future__ import annotations

import json
import re
import string
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).parent.parent


def _blocks(name: str, lang: str) -> list[str]:
    """The fenced code blocks of ``name`` whose info string is ``lang``, in order."""
    blocks, current, info = [], None, ""
    for line in (ROOT / name).read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            if current is None:
                current, info = [], line[3:].strip()
            else:
                if info == lang:
                    blocks.append("\n".join(current) + "\n")
                current = None
        elif current is not None:
            current.append(line)
    return blocks


def _prelude(tmp_path: Path) -> dict:
    transformers = pytest.importorskip("transformers", reason="the interop pages show transformers models")
    from anatomy.data.tokenizers import CharTokenizer

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=64, n_positions=128, n_embd=32, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2, pad_token_id=0
    )
    hf_model = transformers.GPT2LMHeadModel(cfg).eval()
    hf_model.save_pretrained(tmp_path / "path" / "to" / "hf")
    input_ids = torch.randint(3, 64, (2, 6), generator=torch.Generator().manual_seed(1))
    input_ids[0, :2] = 0  # left padding
    attention_mask = (input_ids != 0).long()
    return {
        "__name__": "__docs__",
        "torch": torch,
        "transformers": transformers,
        "hf_model": hf_model,
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "mask": attention_mask,
        "ids": input_ids,
        "nxt": torch.randint(3, 64, (2, 1), generator=torch.Generator().manual_seed(2)),
        "tokenizer": CharTokenizer(string.ascii_letters + string.digits),  # 2 specials + 62: the 64 ids
        "eos": 2,
        "pad": 0,
        "embeds": torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(3)),
    }


@pytest.mark.parametrize("name", ["docs/interop.md", "docs/generation.md", "docs/seeing.md"])
def test_every_python_example_runs(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # files the examples write land here
    namespace = _prelude(tmp_path) if name != "docs/seeing.md" else {"__name__": "__docs__"}
    blocks = _blocks(name, "python")
    assert blocks, f"{name} shows no Python"
    for i, code in enumerate(blocks):
        try:
            exec(compile(code, f"<{name} block {i + 1}>", "exec"), namespace)  # noqa: S102 - our own docs
        except Exception as err:  # noqa: BLE001 - name the block that failed
            raise AssertionError(f"{name}, Python block {i + 1} fails: {type(err).__name__}: {err}") from err


def test_the_notebook_pages_doctor_example_shows_what_the_doctor_prints(tmp_path, monkeypatch):
    import anatomy

    line = next(
        x for x in (ROOT / "docs" / "notebooks.md").read_text(encoding="utf-8").splitlines() if "r.pitfalls" in x
    )
    shown = json.loads("[" + re.search(r'"fail", \[(.*)\]', line).group(1) + "]")
    source = (ROOT / "tests" / "notebook" / "test_api.py").read_text(encoding="utf-8")
    namespace: dict = {}
    exec(compile(source.split("CELLS = [")[0], "test_api.py", "exec"), namespace)  # noqa: S102 - the test's class
    (tmp_path / "noscale.py").write_text(namespace["IMPORTS"] + "\n" + namespace["BUGGY"], encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    from noscale import NoScale  # type: ignore[import-not-found]

    r = anatomy.check(NoScale)
    assert (r.ok, r.verdict, r.pitfalls) == (False, "fail", shown)
