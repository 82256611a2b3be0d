"""``anatomy convert``: Hugging Face directory ⇄ anatomy checkpoint, with an optional layer-by-layer error budget.

    anatomy convert --from-hf HF_DIR --out DIR [--verify]     HF config.json + safetensors → ours
    anatomy convert --to-hf DIR --out HF_DIR [--verify]       ours → HF (needs transformers)

The tokenizer travels with the weights both ways (anatomy.interop.tokenizer_io): HF's ``tokenizer.json`` (or
GPT-2's ``vocab.json`` + ``merges.txt``) is copied into the checkpoint as ``tokenizer.json`` +
``tokenizer_config.json``, which ``generate``, ``evaluate``, ``predict``, ``viz`` and ``trace`` then use; ``--to-hf``
writes it back in the files ``AutoTokenizer.from_pretrained`` reads.

The special tokens travel too: bos, eos (one or several) and pad are read from ``config.json`` and
``generation_config.json`` (which wins, as in HF's ``generate``) into the ``ModelConfig``, and ``--to-hf`` writes
them into both files, every one named (None included), so no HF class default (GPT-2's 50256) creeps in.

``--verify`` loads both models (the HF one with ``transformers``), runs the same token ids through them in float32
and bfloat16, and prints max and mean |diff| at every layer (anatomy.interop.error_budget); then compares the
special tokens (ours against HF's ``generation_config``), the token ids both tokenizers give for a few texts, and a
short greedy generation (``generate`` with each side's defaults, so each stops at its own eos). Exit 0 when the
float32 output agrees within ``--tol`` and the rest is equal, 1 when not or a checkpoint cannot be read, 2 on bad
usage.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from torch import nn

    from anatomy.data.tokenizers import Tokenizer


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-hf", metavar="DIR", help="Hugging Face directory (config.json + model.safetensors)")
    src.add_argument("--to-hf", metavar="DIR", help="anatomy checkpoint directory to write in Hugging Face format")
    p.add_argument(
        "--out",
        metavar="DIR",
        required=True,
        help="output directory: new or empty (never a training checkpoint or run folder)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="let --out be a non-empty folder; its files of the same names are replaced",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="print the layer-by-layer error budget against the source model (needs transformers)",
    )
    p.add_argument(
        "--rope-layout",
        choices=("half", "interleaved"),
        default="half",
        help="with --from-hf: RoPE layout of the converted model (default half, as HF Llama)",
    )
    p.add_argument("--tol", type=float, default=1e-4, help="float32 output tolerance for --verify (default 1e-4)")
    p.add_argument("--seq", type=int, default=16, help="sequence length of the --verify inputs (default 16)")


def _transformers() -> Any:  # the transformers module (an optional dependency)
    try:
        import transformers
    except ImportError:
        raise ValueError("--to-hf and --verify need transformers: pip install 'transformer-anatomy[hf]'") from None
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # transformers' logging is unannotated
    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]  # no bars on stderr
    return transformers


def has_tokenizer(directory: Path) -> bool:
    from anatomy.data.tokenizers import FILE
    from anatomy.data.tokenizers_hf import has_tokenizer as has_hf_files

    return (directory / FILE).is_file() or has_hf_files(directory)


def _say_tokenizer(tokenizer: Tokenizer | None, source: Path, out: Path, write: Callable[[], object]) -> None:
    """Write the tokenizer (when the source has one) and say so; without one, say what that means."""
    from anatomy.interop.tokenizer_io import describe

    if tokenizer is None:
        print(
            f"tokenizer: none in {source} (no tokenizer.json, vocab.json + merges.txt); commands that read "
            f"{out} will need token ids"
        )
        return
    write()
    print(f"tokenizer: {describe(tokenizer)} -> {out / 'tokenizer.json'}")


def run(args: argparse.Namespace) -> int:
    import torch

    from anatomy.data.tokenizers import load_tokenizer
    from anatomy.errors import CheckpointError
    from anatomy.interop import hf, limits, tokenizer_io
    from anatomy.interop.error_budget import error_budget, render
    from anatomy.interop.safetensors_io import (
        FORMAT,
        load_pretrained,
        read_config,
        read_generation_config,
        read_tensors,
        save_pretrained,
    )

    flag = "--from-hf" if args.from_hf else "--to-hf"
    source = Path(args.from_hf or args.to_hf)
    if not source.is_dir():
        raise ValueError(f"{flag} {source}: no such directory")
    if args.seq <= 0 or not args.tol > 0:
        raise ValueError(f"--seq must be a positive integer and --tol > 0, got --seq {args.seq} --tol {args.tol}")
    out = Path(args.out)
    if out.resolve() == source.resolve():
        raise ValueError(f"--out {out} must differ from the source directory")
    # transformers reads and writes only UTF-8 paths ("surrogates not allowed", after the conversion was printed)
    for name, path, hf_side in (("--out", out, args.to_hf), (flag, source, args.from_hf and args.verify)):
        if hf_side and not _utf8(path):
            raise ValueError(
                f"{name} {str(path)!r}: the path is not valid UTF-8, which transformers cannot "
                f"{'write' if name == '--out' else 'read'}; choose a folder with a UTF-8 name"
            )
    from anatomy.training.run_dir import output_folder

    output_folder(out, overwrite=args.overwrite)  # never into a checkpoint; a non-empty folder only if asked
    created = not out.exists()
    tf = _transformers() if args.verify or args.to_hf else None
    try:
        if args.from_hf:
            limits.check_json_files(source)  # every JSON file through anatomy.files.read_json: one line each
            config = read_config(source)
            if config.get("format") == FORMAT:
                raise ValueError(f"--from-hf {source} is an anatomy checkpoint; use --to-hf to write it for HF")
            arch = hf.arch_of(config)
            tensors, generation = read_tensors(source), read_generation_config(source)
            said = limits.check_files(source, config, generation, tensors)  # bos / eos ids outside the vocabulary
            ours = cast(
                Any,
                hf.model_from_checkpoint(
                    config, tensors, source=str(source), rope_layout=args.rope_layout, generation=generation
                ).eval(),
            )
            read: Any = tokenizer_io.read_hf_tokenizer(source)  # read and checked before anything is written
            tokenizer = read
            if read is not None:
                tokenizer_io.check_fits(read, ours.config.vocab_size, source=str(source))
                said += limits.special_map_problems(source, read)
            for line in said:
                print(f"anatomy convert: warning: {line}", file=sys.stderr)
            save_pretrained(ours, out)
            print(f"converted {arch} {source} -> anatomy {type(ours).__name__} {out}")
            _say_tokenizer(read, source, out, lambda: read.save(out))
            if args.verify:
                theirs = getattr(tf, arch).from_pretrained(str(source), dtype=torch.float32, local_files_only=True)
        else:
            ours = load_pretrained(source)
            theirs = cast(Any, hf.to_hf(ours).eval())
            arch = type(theirs).__name__
            loaded: Any = load_tokenizer(source) if has_tokenizer(source) else None
            tokenizer = loaded
            theirs.save_pretrained(str(out))
            print(f"converted anatomy {type(ours).__name__} {source} -> {arch} {out}")
            _say_tokenizer(loaded, source, out, lambda: tokenizer_io.write_hf_tokenizer(loaded, out))
    except CheckpointError as err:
        print(f"anatomy convert: error: {err}", file=sys.stderr)
        return 1
    except BaseException:  # a full disk, Ctrl-C: no half-written folder of ours is left behind
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    if not args.verify:
        return 0
    rows = error_budget(ours, theirs.eval(), arch=arch, seq=args.seq)
    print(f"\nerror budget vs {arch}: max and mean |ours - HF| over every element (same inputs, same dtype)")
    print(render(rows))
    hf_dir = source if args.from_hf else out
    same = verify_tokens(ours, theirs, tokenizer, hf_dir, tf)
    worst = rows[-1].diffs["float32"][0]
    ok = worst <= args.tol and same
    verdict = "OK" if ok else "FAIL"
    print(
        f"\n{verdict}: float32 {rows[-1].name} max |diff| {worst:.3e} (tolerance {args.tol:g})"
        + ("" if same else "; tokens or generation differ (above)")
    )
    return 0 if ok else 1


def _utf8(path: Path) -> bool:
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


SAMPLES = ("hello world, the quick brown fox", "  spaces\tand\nnewlines  ", "naïve café")


def _tokens(
    bos: int | None, eos: int | list[int] | tuple[int, ...] | None, pad: int | None
) -> tuple[int | None, int | tuple[int, ...] | None, int | None]:
    """``(bos, eos, pad)`` with eos as HF writes it: one id as an int, several as a tuple."""
    if isinstance(eos, (list, tuple)):
        eos = eos[0] if len(eos) == 1 else tuple(eos) if eos else None
    return bos, eos, pad


def verify_tokens(ours: nn.Module, theirs: Any, tokenizer: Tokenizer | None, hf_dir: Path, tf: Any) -> bool:
    # theirs: a transformers PreTrainedModel; tf: the transformers module (both optional, read duck-typed)
    """Print and check the special tokens, the tokenizers' ids and 8 greedy tokens, ours against HF's."""
    import torch

    from anatomy.generation import generate
    from anatomy.training.checkpoint import config_of

    gen = theirs.generation_config if theirs.can_generate() else theirs.config
    mine = config_of(ours)
    seq2seq = mine.architecture == "seq2seq"  # its pad is the decoder start, compared by the logits
    a = _tokens(mine.bos_token_id, mine.eos_token_id, None if seq2seq else mine.pad_token_id)
    b = _tokens(gen.bos_token_id, gen.eos_token_id, None if seq2seq else gen.pad_token_id)
    ok = a == b
    print(f"\nspecial tokens (bos, eos, pad): ours {a}, HF {b}: {'equal' if ok else 'DIFFER'}")
    prompt = [3, 4, 5, 6]
    if tokenizer is not None and has_tokenizer(hf_dir):
        hf_tok = tf.AutoTokenizer.from_pretrained(str(hf_dir))
        differ = [
            t
            for t in SAMPLES
            if tokenizer.encode(t) not in (hf_tok(t, add_special_tokens=False)["input_ids"], hf_tok(t)["input_ids"])
        ]
        print(
            f"token ids: {len(SAMPLES) - len(differ)} of {len(SAMPLES)} sample texts encode the same as "
            f"AutoTokenizer" + (f"; differ: {differ[0]!r}" if differ else "")
        )
        ok = ok and not differ
        prompt = tokenizer.encode(SAMPLES[0])[:8]
    else:
        print("token ids: no tokenizer on both sides, not compared")
    if not hasattr(ours, "new_caches"):
        return ok
    ids = torch.tensor([prompt])  # (1, T)
    start_id = {"decoder_start_token_id": mine.pad_token_id} if seq2seq else {}  # ours starts from pad
    try:
        with torch.no_grad():
            want = theirs.generate(ids, max_new_tokens=8, do_sample=False, **start_id)
    except Exception as err:  # noqa: BLE001 - HF's generate refusing this model is a "can't tell", not a failure
        print(
            f"greedy generation: transformers' generate fails on this model ({type(err).__name__}: "
            f"{str(err).splitlines()[0][:100]}); not compared"
        )
        return ok
    got = generate(ours, ids, max_new_tokens=8, do_sample=False)  # greedy as HF's, whatever the file's defaults
    equal = got.shape == want.shape and torch.equal(got, want)
    start = 1 if seq2seq else ids.shape[1]
    print(
        f"greedy generation (8 tokens, each side's defaults): ours {got[0, start:].tolist()}, HF "
        f"{want[0, start:].tolist()}: {'equal' if equal else 'DIFFER'}"
    )
    return ok and equal
