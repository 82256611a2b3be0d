"""``anatomy trace``: print the shape of every step of a real forward pass (the post's §5.1 table).

``anatomy trace [--preset NAME | --checkpoint DIR]`` traces our models; ``anatomy trace FILE.py:CLASS`` (or
``--factory FUNC``) traces the learner's own module, one row per recorded step with its line of code
(``anatomy.doctor.trace.learner_trace``). Exit codes: 0 the table was printed, 1 the learner's flow leaves the post's
(the first such step is marked), 2 bad usage or a module that could not be loaded, built, run or followed.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import cast

import torch

from anatomy.config import PRESETS, ModelConfig
from anatomy.inspection.trace import example_inputs, render, trace_model
from anatomy.models import build_model
from anatomy.shapes import LEGEND
from anatomy.sizes import check_fits, check_learner_fits

SIZE_FLAGS = {  # flag → config field
    "d_model": "d_model",
    "heads": "n_heads",
    "kv_heads": "n_kv_heads",
    "head_dim": "head_dim",
    "layers": "n_layers",
    "d_ff": "d_ff",
    "vocab": "vocab_size",
    "positional": "positional",
    "norm": "norm",
    "norm_position": "norm_position",
    "activation": "activation",
    "architecture": "architecture",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        metavar="FILE.py:CLASS",
        help="trace your own module instead: built as CLASS(d_model, n_heads), called as forward(x)",
    )
    p.add_argument("--factory", metavar="FUNC", help="with FILE.py: build with FUNC(d_model, n_heads) instead")
    p.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="with FILE.py: time limit for importing, building and the forward (default 60; 0: none)",
    )
    p.add_argument(
        "--kind",
        choices=("auto", "module", "attention", "block", "lm"),
        default="auto",
        help="with FILE.py: your module (module, attention or block: the same table) or your whole language "
        "model (lm: built as CLASS(vocab_size, d_model, n_heads, n_layers, block_size) or CLASS(config), called "
        "as forward(ids, targets)); default: found from how the class is built",
    )
    p.add_argument("--lang", choices=("en", "zh"), default="en", help="language of the table (your module)")
    p.add_argument("--preset", default=None, help=f"model preset ({', '.join(PRESETS)}); default seed-block")
    p.add_argument(
        "--checkpoint",
        default=None,
        metavar="DIR",
        help="trace a saved model (config.json + model.safetensors, ours or a supported HF directory)",
    )
    p.add_argument(
        "--text",
        default=None,
        help="with --checkpoint: trace this text, encoded by the checkpoint's own tokenizer (B=1, T=tokens)",
    )
    p.add_argument("--batch", type=int, default=2, help="batch size B (default 2)")
    p.add_argument("--seq", type=int, default=None, help="sequence length T (default 10; your module: 7)")
    p.add_argument("--tgt-seq", type=int, default=None, help="decoder length for seq2seq models (default --seq)")
    p.add_argument("--d-model", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--head-dim", type=int, help="heads' width Dh (default d_model // heads)")
    p.add_argument("--layers", type=int)
    p.add_argument("--d-ff", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--positional")
    p.add_argument("--norm")
    p.add_argument("--norm-position")
    p.add_argument("--activation")
    p.add_argument("--architecture")
    p.add_argument("--format", choices=("table", "markdown", "json"), default="table")


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.timeout) and args.timeout >= 0):  # nan, inf and -1 once passed without a word
        raise ValueError(f"--timeout must be a number of seconds >= 0 (0: no limit), got {args.timeout:g}")
    if args.target is not None or args.factory is not None:
        return run_learner(args)
    if args.seq is None:
        args.seq = 10
    for name in ("batch", "seq", "tgt_seq"):
        value = getattr(args, name)
        if value is not None and value <= 0:  # --tgt-seq -1 once ended in torch's "negative dimension"
            raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
    overrides = {field: getattr(args, flag) for flag, field in SIZE_FLAGS.items() if getattr(args, flag) is not None}
    if args.checkpoint is not None:
        if args.preset is not None or overrides:
            raise ValueError("--checkpoint fixes the model: give it alone, without --preset or size flags")
        from anatomy.interop.safetensors_io import load_pretrained

        if not Path(args.checkpoint).is_dir():
            raise ValueError(f"--checkpoint {args.checkpoint} is not a directory")
        model = load_pretrained(args.checkpoint).float().eval()
        config, source = cast(ModelConfig, model.config), f"checkpoint {args.checkpoint}"  # set by load_pretrained
        check_fits(config, args.batch, args.seq, tgt_seq=args.tgt_seq, what="this trace", flags="--seq or --batch")
    elif args.text is not None:
        raise ValueError("--text needs --checkpoint: a preset has no tokenizer (use --batch and --seq)")
    else:
        preset = args.preset or "seed-block"
        config = ModelConfig.from_preset(preset, **overrides)
        check_fits(
            config,
            args.batch,
            args.seq,
            tgt_seq=args.tgt_seq,
            what="this trace",
            flags="--seq or --batch (or the model's sizes)",
        )  # before a single tensor is allocated
        # A preset's table needs shapes, not numbers: the model is built on the meta device (no memory, no
        # arithmetic), so a large preset such as qwen3 shows its real sizes, vocabulary included, in seconds.
        with torch.device("meta"):
            model = build_model(config).eval()
        source = f"preset {preset}"
    if args.tgt_seq is not None and config.architecture != "seq2seq":
        raise ValueError(
            f"--tgt-seq is the decoder length of a seq2seq model; this {config.architecture} model reads --seq only"
        )
    if args.seq > config.max_seq_len and config.positional == "learned":
        raise ValueError(
            f"--seq {args.seq} is longer than the learned positional table (max_seq_len={config.max_seq_len})"
        )
    inputs = example_inputs(model, args.batch, args.seq, tgt_seq=args.tgt_seq)
    if args.checkpoint is None:
        inputs = {name: ids.to("meta") for name, ids in inputs.items()}  # the preset's shapes-only forward
    if args.text is not None:
        inputs, note = _text_inputs(args.checkpoint, args.text, config)
        source += f", {note}"
    rows = trace_model(model, inputs)
    title = (
        f"anatomy trace · {source} · {config.architecture}, D={config.d_model}, "
        f"H={config.n_heads}, Dh={config.dh}, layers={config.n_layers}, norm={config.norm_position}"
    )
    print(render(rows, args.format, title=title))
    if args.format == "table":
        print("\nlegend: " + ", ".join(f"{k} {v}" for k, v in LEGEND.items()))
        print("Scores and weights come from the math kernel: asking for them switches kernel 'auto' off SDPA.")
    return 0


def _text_inputs(checkpoint: str, text: str, config: ModelConfig) -> tuple[dict[str, torch.Tensor], str]:
    """``({"input_ids": (1, T)}, note)``: ``text`` through the checkpoint's tokenizer."""
    import torch

    from anatomy.data.tokenizers import load_tokenizer

    if not text:
        raise ValueError("--text must be a non-empty string")
    try:
        ids = load_tokenizer(checkpoint).encode(text)
    except ValueError as err:  # no tokenizer there, or characters it does not know: named
        raise ValueError(f"--text: {err}") from None
    if not ids or len(ids) > config.max_seq_len:
        raise ValueError(f"--text gives {len(ids)} tokens; this model reads 1 to max_seq_len={config.max_seq_len}")
    inputs = {"input_ids": torch.tensor([ids])}  # (1, T)
    if config.architecture == "seq2seq":
        inputs["decoder_input_ids"] = inputs["input_ids"]
    return inputs, f"text of {len(ids)} tokens (the checkpoint's tokenizer)"


LEARNER_FLAGS = ("d_model", "heads", "batch", "seq")  # the only size options that apply to a learner's module


def run_learner(args: argparse.Namespace) -> int:
    """``anatomy trace FILE.py:CLASS``: the learner's own module (docs/seeing.md, docs/doctor.md)."""
    from anatomy.doctor.trace.learner_trace import trace_learner

    if args.target is None:
        raise ValueError("--factory FUNC needs FILE.py (anatomy trace FILE.py --factory FUNC)")
    from anatomy.cli.trace_model import print_trace, run_model, wants_model

    if wants_model(args):  # a whole language model (cli/trace_model.py)
        code = run_model(args)
        if code is not None:
            return code
    if args.preset is not None or args.checkpoint is not None:
        raise ValueError("give FILE.py:CLASS or --preset/--checkpoint, not both")
    others = [flag for flag in SIZE_FLAGS if flag not in LEARNER_FLAGS and getattr(args, flag) is not None]
    if others or args.tgt_seq is not None:
        bad = "--" + (others[0] if others else "tgt_seq").replace("_", "-")
        raise ValueError(f"{bad} applies to --preset models; your module takes --d-model, --heads, --batch, --seq")
    if args.timeout < 0:
        raise ValueError(f"--timeout must be a number of seconds >= 0, got {args.timeout:g}")
    target = args.target if args.factory is None or ":" in args.target else f"{args.target}:{args.factory}"
    for name, value in (
        ("batch", args.batch),
        ("seq", args.seq or 7),
        ("d-model", args.d_model or 20),
        ("heads", args.heads or 5),
    ):
        if value <= 0:
            raise ValueError(f"--{name} must be a positive integer, got {value}")
    check_learner_fits(args.batch, args.seq or 7, args.d_model or 20, args.heads or 5, flags="--seq or --batch")
    return print_trace(
        args,
        lambda: trace_learner(
            target,
            factory=args.factory,
            d_model=args.d_model or 20,
            n_heads=args.heads or 5,
            batch=args.batch,
            seq=args.seq or 7,
            timeout=args.timeout,
        ),
    )
