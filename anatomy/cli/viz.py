"""``anatomy viz attention|pe|mask|page``: pictures and a self-contained page, written to ``--out``.

    anatomy viz attention --text 小明把球传给了小红 --out attn.png      heads of one layer, entropy in each title
    anatomy viz attention --text hello --preset llama n_layers=2 --layer 1 --heads 0 3 --out llama.svg
    anatomy viz pe --kind rope --out rope.svg                           table, waves, similarity, past training
    anatomy viz mask --out masks.png                                    masks and what fill values do to softmax
    anatomy viz page --out anatomy.html                                 trace + attention + PE explorer, offline

The model is a preset with random weights (seed 0) unless ``--checkpoint`` names a saved one (a checkpoint or an
``anatomy train`` run directory). A checkpoint's own tokenizer (``tokenizer.json``) encodes the text; otherwise
the text is split into characters and each id is the code point modulo the vocabulary size (said in every
figure).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import nn

import anatomy
from anatomy.config import LOOK_VOCAB, PRESETS, ModelConfig, large_vocab_presets
from anatomy.models import build_model
from anatomy.sizes import check_fits
from anatomy.words import parse_words

if TYPE_CHECKING:
    from anatomy.data.tokenizers import Tokenizer

MODEL_FIELDS = {f.name: f for f in dataclasses.fields(ModelConfig)}

DEFAULT_TEXT = "小明把球传给了小红他跑得很快"  # the post's §1.1 example sentence


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="viz_command", metavar="WHAT")
    a = sub.add_parser(
        "attention",
        help="attention maps of one layer's heads on a text",
        description="A grid of heads with token labels and each head's entropy (PNG, SVG or HTML).",
    )
    _model_args(a)
    a.add_argument("--text", required=True, help="the text to attend over (one token per character)")
    a.add_argument("--layer", type=int, default=0, help="attention layer number (default 0)")
    a.add_argument("--heads", type=int, nargs="+", help="head numbers (default: all)")
    a.add_argument("--out", required=True, help="FILE.png, FILE.svg or FILE.html")

    e = sub.add_parser("pe", help="a positional encoding: table, waves, similarity, past the training length")
    e.add_argument("--kind", required=True, help="sinusoidal | learned | rope | alibi | t5")
    e.add_argument("--d-model", type=int, default=64, help="width D (the head width Dh for rope); default 64")
    e.add_argument("--max-len", type=int, default=128, help="positions drawn (default 128)")
    e.add_argument("--train-len", type=int, default=64, help="the training length (default 64)")
    e.add_argument("--heads", type=int, default=8, help="heads, for alibi and t5 (default 8)")
    e.add_argument("--out", required=True, help="FILE.png, FILE.svg or FILE.html")

    m = sub.add_parser(
        "mask",
        help="padding / causal / combined masks and a fill-value table",
        description="Masks drawn with fully-masked rows marked, and what -inf, finfo.min, -1e9 and "
        "-1e4 do to softmax in float32, bfloat16 and float16 (computed, also printed).",
    )
    m.add_argument("--seq", type=int, default=8, help="sequence length T (default 8)")
    m.add_argument("--pad", type=int, default=3, help="padding tokens in the example row (default 3)")
    m.add_argument(
        "--window",
        type=int,
        default=None,
        help="also draw the causal sliding-window band of this width (Mistral's local attention)",
    )
    m.add_argument("--out", help="FILE.png, FILE.svg or FILE.html (default: print the table only)")

    g = sub.add_parser(
        "page",
        help="one self-contained HTML page: trace, attention maps, PE explorer",
        description="Writes one HTML file with inline data, CSS and JS; it needs no network.",
    )
    _model_args(g)
    g.add_argument("--text", default=DEFAULT_TEXT, help=f"text to attend over (default {DEFAULT_TEXT})")
    g.add_argument("--out", required=True, help="FILE.html")


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", help=f"model preset ({', '.join(PRESETS)}); default seed-block")
    p.add_argument("--checkpoint", metavar="DIR", help="a saved model (needs anatomy.load_pretrained)")
    p.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="config fields to change in the preset, e.g. n_layers=2 d_model=64",
    )


def run(args: argparse.Namespace) -> int:
    command = getattr(args, "viz_command", None)
    if command is None:
        raise ValueError("choose what to draw: anatomy viz attention|pe|mask|page (see anatomy viz --help)")
    try:
        return {"attention": _attention, "pe": _pe, "mask": _mask, "page": _page}[command](args)
    except ImportError as err:  # matplotlib is the optional "viz" extra
        print(
            f"anatomy viz: error: {err.name or err} is needed: pip install 'transformer-anatomy[viz]'", file=sys.stderr
        )
        return 1


# ------------------------------------------------------------------------------------------------ helpers


def _check_out(path: str, allowed: tuple[str, ...]) -> str:
    if os.path.isdir(path):
        raise ValueError(f"--out {path!r} is a directory; give a file name")
    ext = os.path.splitext(path)[1].lower()
    if ext not in allowed:
        raise ValueError(f"--out must end in {', '.join(allowed)}, got {path!r}")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        raise ValueError(f"--out {path!r}: directory {parent!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise ValueError(f"--out {path!r}: directory {parent!r} is not writable")
    return ext


def _written(path: str, write: Callable[[], object]) -> None:
    try:
        write()
    except OSError as err:
        raise ValueError(f"--out {path!r}: cannot write ({err.strerror or err})") from None
    print(f"wrote {path}")


def _load(args: argparse.Namespace) -> tuple[nn.Module, ModelConfig, str, Tokenizer | None]:
    """(model in eval mode, config, a note on where the weights come from, the checkpoint's tokenizer or None)."""
    if args.checkpoint:
        from anatomy.data.tokenizers import FILE, load_tokenizer
        from anatomy.data.tokenizers_hf import has_tokenizer as has_hf_tokenizer
        from anatomy.errors import CheckpointError
        from anatomy.training.checkpoint import config_of, resolve

        if args.preset or args.overrides:
            raise ValueError("--checkpoint cannot be combined with --preset or key=value overrides")
        if not os.path.isdir(args.checkpoint):
            raise ValueError(f"--checkpoint {args.checkpoint!r} is not a directory")
        try:
            ckpt = resolve(args.checkpoint)  # a run directory means its latest checkpoint
        except CheckpointError as err:
            raise ValueError(f"--checkpoint: {err}") from None
        model = anatomy.load_pretrained(ckpt)
        tokenizer = load_tokenizer(ckpt) if (ckpt / FILE).is_file() or has_hf_tokenizer(ckpt) else None
        return model.eval(), config_of(model), f"weights from {ckpt}", tokenizer
    preset = args.preset or "seed-block"
    overrides = {"vocab_size": LOOK_VOCAB} if preset in large_vocab_presets() else {}  # char ids mod V: small
    overrides.update(parse_words(args.overrides, MODEL_FIELDS))
    config = ModelConfig.from_preset(preset, **overrides)
    check_fits(
        config,
        1,
        max(len(getattr(args, "text", "") or ""), 1),
        what="this model and text",
        flags="the key=value sizes or the length of --text",
    )  # before the model is built
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = build_model(config).eval()
    return model, config, f"preset {preset}, untrained (random init, seed 0)", None


def _tokens(
    args: argparse.Namespace, config: ModelConfig, tokenizer: Tokenizer | None = None
) -> tuple[list[str], dict[str, torch.Tensor], str]:
    """(token labels, model inputs, a note on how the text became ids)."""
    from anatomy.inspection.viz import TOKENIZER_NOTE, char_tokens

    if tokenizer is None:
        tokens, ids = char_tokens(args.text, config.vocab_size)
        note = TOKENIZER_NOTE.format(vocab=config.vocab_size)
    else:
        if not args.text:
            raise ValueError("--text must be a non-empty string")
        try:
            id_list = tokenizer.encode(args.text)
        except ValueError as err:  # characters the checkpoint's vocabulary does not have: named
            raise ValueError(f"--text: {err}") from None
        ids = torch.tensor([id_list])  # (1, T)
        tokens = [tokenizer.decode([i], skip_special=False) or "·" for i in id_list]
        note = f"tokens: the checkpoint's own tokenizer ({type(tokenizer).__name__}, {len(id_list)} tokens)"
    if ids.shape[1] > config.max_seq_len:
        raise ValueError(
            f"--text has {ids.shape[1]} tokens, longer than the model's maximum max_seq_len={config.max_seq_len}"
        )
    inputs = {"input_ids": ids}
    if config.architecture == "seq2seq":
        inputs["decoder_input_ids"] = ids  # the decoder reads the same text; cross-attention is then T × T
    return tokens, inputs, note


def _cjk_hint(text: str) -> None:
    from anatomy.inspection.figures import cjk_font, cjk_hint, needs_cjk

    if needs_cjk(text) and not cjk_font():
        print(f"anatomy viz: hint: {cjk_hint()}", file=sys.stderr)


# ------------------------------------------------------------------------------------------------ commands


def _attention(args: argparse.Namespace) -> int:
    from anatomy.inspection import figures, page, viz
    from anatomy.inspection.weights import attention_modules, attention_weights

    ext = _check_out(args.out, (".png", ".svg", ".html"))
    model, config, origin, tokenizer = _load(args)
    modules = attention_modules(model)
    if not 0 <= args.layer < len(modules):
        raise ValueError(
            f"--layer {args.layer}: the model has {len(modules)} attention layer(s), numbered 0..{len(modules) - 1}"
        )
    name, module = modules[args.layer]
    heads = args.heads if args.heads is not None else list(range(module.n_heads))
    bad = [h for h in heads if not 0 <= h < module.n_heads]
    if bad:
        raise ValueError(
            f"--heads {' '.join(map(str, bad))}: layer {args.layer} has {module.n_heads} heads, "
            f"numbered 0..{module.n_heads - 1}"
        )
    tokens, inputs, how = _tokens(args, config, tokenizer)
    with torch.no_grad(), attention_weights(model, layers=[args.layer], heads=heads) as maps:
        model(**inputs)
    layer = maps[args.layer]
    note = f"{how}; {origin}"
    title = f"layer {args.layer} ({name}{', cross-attention' if layer.cross else ''})"
    _cjk_hint(args.text)
    if ext == ".html":
        html = page.render_page(
            title=f"anatomy viz attention · {title}",
            subtitle=origin,
            notes=[note],
            attention=page.attention_payload([layer], tokens),
        )
        _written(args.out, lambda: page.write_page(args.out, html))
    else:
        fig = viz.attention_figure(layer, tokens, title=title, note=note)
        _written(args.out, lambda: figures.save_figure(fig, args.out))
    entropy = ", ".join(f"head {h}: {e:.3f}" for h, e in zip(layer.heads, layer.entropy(0).tolist()))
    print(f"entropy (nats, max log S = {torch.tensor(float(len(tokens))).log():.3f}): {entropy}")
    return 0


def _pe(args: argparse.Namespace) -> int:
    from anatomy.inspection import figures, page, viz_pe

    viz_pe.check_pe_args(args.kind, args.d_model, args.max_len, args.train_len, args.heads)
    ext = _check_out(args.out, (".png", ".svg", ".html"))
    data = viz_pe.positional_data(
        args.kind, d_model=args.d_model, max_len=args.max_len, train_len=args.train_len, n_heads=args.heads
    )
    if ext == ".html":
        html = page.render_page(title=f"anatomy viz pe · {data.title[0]}", subtitle=data.title[1], pe=[data])
        _written(args.out, lambda: page.write_page(args.out, html))
    else:
        _written(args.out, lambda: figures.save_figure(viz_pe.positional_figure(data), args.out))
    return 0


def _mask(args: argparse.Namespace) -> int:
    from anatomy.inspection import figures, page, viz_masks

    ext = _check_out(args.out, (".png", ".svg", ".html")) if args.out else None
    masks = viz_masks.mask_examples(args.seq, args.pad, args.window)
    table = viz_masks.fill_value_table()
    print("What each fill value does to softmax (computed now; additive mask, softmax in the dtype):")
    print(viz_masks.format_table(table))
    if ext is not None:
        fig = viz_masks.mask_figure(masks, table)
        if ext == ".html":
            html = page.render_page(
                title="anatomy viz mask",
                subtitle="掩码与填充值 · masks and fill values",
                figures=[("掩码 · masks (True = may attend)", figures.figure_svg(fig))],
                tables=[
                    (
                        "填充值 · fill values and softmax",
                        viz_masks.FILL_COLUMNS,
                        [[r[c] for c in viz_masks.FILL_COLUMNS] for r in table],
                    )
                ],
            )
            _written(args.out, lambda: page.write_page(args.out, html))
        else:
            _written(args.out, lambda: figures.save_figure(fig, args.out))
    return 0


def _page(args: argparse.Namespace) -> int:
    from anatomy.inspection import page

    _check_out(args.out, (".html",))
    model, config, origin, tokenizer = _load(args)
    tokens, inputs, how = _tokens(args, config, tokenizer)
    html = page.model_page(
        model,
        inputs,
        tokens,
        title="transformer-anatomy · 模型解剖页",
        subtitle=f"{origin} · {config.architecture}, D={config.d_model}, H={config.n_heads}, "
        f"layers={config.n_layers} · text 「{args.text}」",
        notes=[how, "attention weights recomputed beside the fused kernel (SDPA) from the captured q and k"],
    )
    _written(args.out, lambda: page.write_page(args.out, html))
    return 0
