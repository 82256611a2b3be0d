"""``anatomy convert``: Hugging Face directory ⇄ anatomy checkpoint, with an optional layer-by-layer error budget.

    anatomy convert --from-hf HF_DIR --out DIR [--verify]     HF config.json + safetensors → ours
    anatomy convert --to-hf DIR --out HF_DIR [--verify]       ours → HF (needs transformers)

The tokenizer travels with the weights both ways (anatomy.interop.tokenizer_io): HF's ``tokenizer.json`` (or
GPT-2's ``vocab.json`` + ``merges.txt``) is copied into the checkpoint as ``tokenizer.json`` +
``tokenizer_config.json``, which ``generate``, ``evaluate``, ``predict``, ``viz`` and ``trace`` then use; ``--to-hf``
writes it back in the files ``AutoTokenizer.from_pretrained`` reads.

``--verify`` loads both models (the HF one with ``transformers``), runs the same token ids through them in float32
and bfloat16, and prints max and mean |diff| at every layer (anatomy.interop.error_budget). Exit 0 when the float32
output agrees within ``--tol``, 1 when it does not or a checkpoint cannot be read, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--from-hf", metavar="DIR", help="Hugging Face directory (config.json + model.safetensors)")
    src.add_argument("--to-hf", metavar="DIR", help="anatomy checkpoint directory to write in Hugging Face format")
    p.add_argument("--out", metavar="DIR", required=True,
                   help="output directory: new or empty (never a training checkpoint or run folder)")
    p.add_argument("--overwrite", action="store_true",
                   help="let --out be a non-empty folder; its files of the same names are replaced")
    p.add_argument("--verify", action="store_true",
                   help="print the layer-by-layer error budget against the source model (needs transformers)")
    p.add_argument("--rope-layout", choices=("half", "interleaved"), default="half",
                   help="with --from-hf: RoPE layout of the converted model (default half, as HF Llama)")
    p.add_argument("--tol", type=float, default=1e-4, help="float32 output tolerance for --verify (default 1e-4)")
    p.add_argument("--seq", type=int, default=16, help="sequence length of the --verify inputs (default 16)")


def _transformers():
    try:
        import transformers
    except ImportError:
        raise ValueError("--to-hf and --verify need transformers: pip install 'transformer-anatomy[hf]'") from None
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()  # one table on stdout, no bars on stderr
    return transformers


def has_tokenizer(directory: Path) -> bool:
    from anatomy.data.tokenizers import FILE
    from anatomy.data.tokenizers_hf import has_tokenizer as has_hf_files

    return (directory / FILE).is_file() or has_hf_files(directory)


def _say_tokenizer(tokenizer, source: Path, out: Path, write) -> None:
    """Write the tokenizer (when the source has one) and say so; without one, say what that means."""
    from anatomy.interop.tokenizer_io import describe

    if tokenizer is None:
        print(f"tokenizer: none in {source} (no tokenizer.json, vocab.json + merges.txt); commands that read "
              f"{out} will need token ids")
        return
    write()
    print(f"tokenizer: {describe(tokenizer)} -> {out / 'tokenizer.json'}")


def run(args: argparse.Namespace) -> int:
    import torch

    from anatomy.data.tokenizers import load_tokenizer
    from anatomy.interop import hf, tokenizer_io
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
    from anatomy.training.run_dir import output_folder

    output_folder(out, overwrite=args.overwrite)  # never into a checkpoint; a non-empty folder only if asked
    created = not out.exists()
    tf = _transformers() if args.verify or args.to_hf else None
    try:
        if args.from_hf:
            config = read_config(source)
            if config.get("format") == FORMAT:
                raise ValueError(f"--from-hf {source} is an anatomy checkpoint; use --to-hf to write it for HF")
            arch = hf.arch_of(config)
            ours = hf.model_from_checkpoint(config, read_tensors(source), source=str(source),
                                            rope_layout=args.rope_layout,
                                            generation=read_generation_config(source)).eval()
            tokenizer = tokenizer_io.read_hf_tokenizer(source)  # read and checked before anything is written
            if tokenizer is not None:
                tokenizer_io.check_fits(tokenizer, ours.config.vocab_size, source=str(source))
            save_pretrained(ours, out)
            print(f"converted {arch} {source} -> anatomy {type(ours).__name__} {out}")
            _say_tokenizer(tokenizer, source, out, lambda: tokenizer.save(out))
            if args.verify:
                theirs = getattr(tf, arch).from_pretrained(str(source), dtype=torch.float32, local_files_only=True)
        else:
            ours = load_pretrained(source)
            theirs = hf.to_hf(ours).eval()
            arch = type(theirs).__name__
            tokenizer = load_tokenizer(source) if has_tokenizer(source) else None
            theirs.save_pretrained(str(out))
            print(f"converted anatomy {type(ours).__name__} {source} -> {arch} {out}")
            _say_tokenizer(tokenizer, source, out, lambda: tokenizer_io.write_hf_tokenizer(tokenizer, out))
    except hf.CheckpointError as err:
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
    worst = rows[-1].diffs["float32"][0]
    verdict = "OK" if worst <= args.tol else "FAIL"
    print(f"\n{verdict}: float32 {rows[-1].name} max |diff| {worst:.3e} (tolerance {args.tol:g})")
    return 0 if worst <= args.tol else 1
