"""Where ``anatomy generate``'s decoding settings come from (:func:`resolve_decoding`): the flags, over a
checkpoint's ``generation_config.json``, over Hugging Face's GenerationConfig defaults for what the file leaves unset
(or, without the file, the command line's own defaults), and the one line that says which came from where."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from anatomy.cli.generate_options import Usage

SAMPLING = ("temperature", "top_k", "top_p", "min_p")  # options that only shape sampling


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


DEFAULT_BUDGET, DEFAULT_TEMPERATURE = 200, 0.8  # the command line's own defaults, when there is no file
# transformers 5.24's GenerationConfig defaults (``_get_default_generation_params``) for what a generation_config.json
# leaves unset: greedy, and max_length 20, which HF's generate reads as 20 new tokens when nobody set a length (at
# most max_position_embeddings in all); temperature 1.0 and top_k 50 when sampling
HF_DEFAULTS: dict[str, Any] = {"do_sample": False, "max_length": 20, "temperature": 1.0, "top_k": 50}
_UNSET = object()


class _Layers:
    """The flags over the checkpoint's generation defaults (``file``, read from ``where``), over the defaults:
    Hugging Face's GenerationConfig defaults when there is a generation_config.json (``hf``), else the command
    line's own. ``take`` a value, noting the file's in ``used`` and HF's in ``defaults``; ``said`` names where a
    value came from, for a refusal."""

    def __init__(self, args: argparse.Namespace, file: dict[str, Any], where: str, hf: bool) -> None:
        self.args, self.file, self.where, self.hf = args, file, where, hf
        self.used: dict[str, Any] = {}
        self.defaults: dict[str, Any] = {}

    def take(self, name: str, fallback: Any, hf: Any = _UNSET) -> Any:
        """The flag, else the file's value, else ``hf`` (HF's default, noted) under a file, else ``fallback``."""
        if getattr(self.args, name, None) is not None:
            return getattr(self.args, name)
        if name in self.file:
            self.used[name] = self.file[name]
            return self.file[name]
        if self.hf and hf is not _UNSET:
            self.defaults[name] = hf
            return hf
        return fallback

    def said(self, name: str) -> str:
        value = getattr(self.args, name, None)
        if value is not None and value is not False:
            return _flag(name) + ("" if value is True else f" {value:g}" if isinstance(value, float) else f" {value}")
        if name in self.file:
            return f"{self.where}'s {name} {json.dumps(self.file[name])}"
        if name in self.defaults:
            return f"Hugging Face's default {name} {json.dumps(self.defaults[name])} (under {self.where})"
        return f"the default {name}"

    def mode(self, usage: Usage) -> tuple[bool, int]:
        """(sample, num_beams): --greedy / --sample / --num-beams, else the file's, else sampling (under a file:
        HF's default, greedy)."""
        args = self.args
        if args.greedy or args.sample:
            return bool(args.sample), 1
        if args.num_beams is not None:
            return args.num_beams == 1 and bool(self.take("do_sample", True, HF_DEFAULTS["do_sample"])), args.num_beams
        beams = int(self.take("num_beams", 1))
        sample = bool(self.take("do_sample", beams == 1, HF_DEFAULTS["do_sample"] if beams == 1 else _UNSET))
        if sample and beams > 1:
            raise usage(
                f"{self.where} sets do_sample true with num_beams {beams} (beam sampling), which anatomy's generate "
                "does not implement: pass --greedy, --sample or --num-beams K"
            )
        return sample, beams

    def budget(self, usage: Usage, counted: int, room: int | None) -> tuple[int, str]:
        """(new tokens, where they came from, for the stop reason): --max-new-tokens, else the file's
        max_new_tokens, else its max_length less the ``counted`` tokens it counts (HF's rule), else (under a file)
        HF's default max_length 20, read as 20 new tokens but at most ``room`` (the positions left after the
        prompt, HF's max_position_embeddings cut), else 200."""
        name = GENERATION_FILE
        if self.args.max_new_tokens is not None:
            return self.args.max_new_tokens, f"--max-new-tokens {self.args.max_new_tokens}"
        if "max_new_tokens" in self.file:
            n = int(self.take("max_new_tokens", 0))
            return n, f"max_new_tokens {n} from {name}"
        if "max_length" in self.file:
            length = int(self.take("max_length", 0))
            if length - counted <= 0:
                raise usage(
                    f"{self.where} sets max_length {length}, which counts the prompt, but the prompt is {counted} "
                    f"tokens: pass --max-new-tokens N"
                )
            return length - counted, f"max_length {length} from {name}"
        if not self.hf:
            return DEFAULT_BUDGET, f"--max-new-tokens {DEFAULT_BUDGET}"
        length = self.take("max_length", 0, HF_DEFAULTS["max_length"])
        said = f"Hugging Face's default max_length {length} ({length} new tokens"
        if room is not None and room < length:
            if room <= 0:
                raise usage(
                    f"the prompt is {counted} tokens, which fills this model's {counted + room} positions, and "
                    f"{self.where} sets no max_new_tokens or max_length (Hugging Face's generate refuses too): pass "
                    "--max-new-tokens N"
                )
            return room, f"{said}, cut to the {counted + room} positions)"
        return length, said + ")"

    def note_in_effect(self, sample: bool, beams: int) -> None:
        """The file's options that shape this decoding without a flag over them (HF ignores the others), and
        HF's sampling defaults for the ones it leaves unset."""
        names = ["repetition_penalty", "no_repeat_ngram_size", "min_new_tokens", "min_length"]
        names += list(SAMPLING) if sample else ["length_penalty", "early_stopping"] if beams > 1 else []
        names += ["bad_words_ids", "suppress_tokens"] + ([] if self.args.stop else ["stop_strings"])
        for name in names:
            if getattr(self.args, name, None) is None and name in self.file:
                self.used[name] = self.file[name]
        if sample and self.hf:
            for name in ("temperature", "top_k"):
                self.take(name, None, HF_DEFAULTS[name])


GENERATION_FILE = "generation_config.json"


def resolve_decoding(
    args: argparse.Namespace,
    file: dict[str, Any],
    where: str,
    usage: Usage,
    *,
    width: int,
    seq2seq: bool,
    hf: bool = False,
    room: int | None = None,
) -> tuple[argparse.Namespace, str | None]:
    """The decoding the command runs, as Hugging Face's ``generate`` resolves it: each flag given, over what the
    checkpoint's ``generation_config.json`` sets (``file``: the options ``model.generation_config`` holds besides
    the special tokens, read from ``where``), over the defaults: when the checkpoint has that file (``hf``), what it
    leaves unset takes HF's GenerationConfig defaults (greedy, max_length 20 read as 20 new tokens, at most
    ``room``; sampling at temperature 1.0, top-k 50), as in HF's ``generate``; without the file, the command line's
    own (sampling at temperature 0.8, 200 new tokens). Returns ``args`` with ``greedy``, ``sample``,
    ``num_beams``, ``num_return_sequences``, ``max_new_tokens`` and ``temperature`` settled (``file_options``: the
    file's options in effect; ``budget_said``: where the budget came from, for the stop reason), and the line that
    says which defaults came from where (None: the flags settled everything). A flag that shapes a mode the
    defaults do not run, or a contradiction between flags and the file, is refused in one line naming both.
    ``width``: the prompt's tokens (HF's ``max_length`` counts them; a seq2seq model's counts its decoder
    start)."""
    layers = _Layers(args, file, where, hf)
    sample, beams = layers.mode(usage)
    sampling = [n for n in SAMPLING if getattr(args, n) is not None]
    if sampling and not sample:
        mode = layers.said("do_sample" if "do_sample" in {**layers.used, **layers.defaults} else "num_beams")
        raise usage(
            f"{_flag(sampling[0])} only shapes sampling, and {mode} asks for "
            f"{'beam search' if beams > 1 else 'greedy decoding'}: add --sample or drop {_flag(sampling[0])}"
        )
    for name in ("length_penalty", "early_stopping"):
        if getattr(args, name) is not None and beams == 1:
            raise usage(f"{_flag(name)} only shapes beam search: add --num-beams K (K > 1) or drop it")
    rows = int(layers.take("num_return_sequences", 1))
    if beams == 1 and not sample and rows > 1:
        mode = "--greedy" if args.greedy else layers.said("do_sample")
        raise usage(
            f"{mode} and {layers.said('num_return_sequences')} contradict: greedy decoding gives one sequence per "
            "prompt (add --sample or --num-beams K)"
        )
    if beams > 1 and rows > beams:
        raise usage(f"{layers.said('num_return_sequences')} must be <= {layers.said('num_beams')}")
    if args.stream and beams > 1:
        raise usage(f"--stream and {layers.said('num_beams')} contradict: beams change until the end")
    if args.stream and rows > 1:
        raise usage(
            f"--stream and {layers.said('num_return_sequences')} contradict: the terminal shows one sequence as "
            "it grows"
        )
    budget, budget_said = layers.budget(usage, 1 if seq2seq else width, room)
    layers.note_in_effect(sample, beams)
    temperature = args.temperature
    if sample and temperature is None and "temperature" not in file:
        temperature = layers.defaults.get("temperature", DEFAULT_TEMPERATURE)
    settled: dict[str, Any] = {"greedy": not sample and beams == 1, "sample": sample, "num_beams": beams}
    settled.update(num_return_sequences=rows, max_new_tokens=budget, file_options=layers.used)
    settled.update(budget_said=budget_said, temperature=temperature)
    return argparse.Namespace(**{**vars(args), **settled}), _defaults_line(where, layers.used, layers.defaults)


def _defaults_line(where: str, used: dict[str, Any], defaults: dict[str, Any]) -> str | None:
    """One line: the file's options in effect, and HF's defaults taken for what it leaves unset."""

    def listed(values: dict[str, Any], hf: bool = False) -> str:
        return ", ".join(
            f"{k}={json.dumps(v)}" + (f" ({v} new tokens)" if hf and k == "max_length" else "")
            for k, v in values.items()
        )

    if not used and not defaults:
        return None
    if not defaults:
        return f"{where}: {listed(used)} (a flag overrides each)"
    hf = listed(defaults, hf=True)
    if not used:
        return (
            f"{where}: sets no decoding option, so Hugging Face's GenerationConfig defaults apply: {hf} "
            "(a flag overrides each)"
        )
    return (
        f"{where}: {listed(used)}; Hugging Face's GenerationConfig defaults for what it leaves unset: {hf} "
        "(a flag overrides each)"
    )
