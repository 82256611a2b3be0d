"""Fine-tuning: ``anatomy train ... init_from=DIR`` starts from a saved model instead of random weights.

    anatomy convert --from-hf gpt2-dir --out gpt2                     # weights and tokenizer
    anatomy train task=lm corpus=my.txt init_from=gpt2 steps=200 lr=1e-4 --out runs/mine
    anatomy train task=classify dataset=sentiment-en init_from=bert --out runs/sst   # a new head, said in the log

``DIR`` is an anatomy checkpoint (a run directory means its latest checkpoint) or a Hugging Face directory of a
supported architecture. The checkpoint fixes two things the run would otherwise choose:

* the tokenizer: the checkpoint's own (``tokenizer.json``; an HF directory's, as ``anatomy convert`` reads it),
  never a new one trained on the corpus, so ``tokenizer`` and ``bpe_vocab`` cannot be given;
* the architecture: every model field is the checkpoint's. Only fields that change no weight may be given
  (``dropout``, ``attention_dropout``, ``kernel``); any other model key=value is refused by name, as is ``model``
  (the preset). A training preset's own model fields are not applied.

``task=lm`` needs a ``decoder_lm`` checkpoint, ``task=classify`` an ``encoder`` or ``classifier`` one. A classifier
keeps its head only when the label set is the same (same names, same order); otherwise, or from an encoder, the
head (``classifier.*``, and ``pooler.*`` where the config has one the checkpoint lacks) starts from the usual
random init (seed ``seed``) and the log says so. ``block_size`` must fit the checkpoint's ``max_seq_len``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from anatomy.config import ModelConfig
from anatomy.data.tokenizers import Tokenizer
from anatomy.errors import CheckpointError
from anatomy.training import checkpoint as ckpt
from anatomy.training.options import TrainOptions
from anatomy.training.tasks import ClassifyTask, LossAndLogits, Task

# Model fields a fine-tuning run may set: they change how the weights are used in training, never their shapes.
FREE_MODEL_FIELDS = ("dropout", "attention_dropout", "kernel")
TASKS = {"lm": ("decoder_lm",), "classify": ("encoder", "classifier")}
HEAD_PREFIXES = ("classifier.", "pooler.")


@dataclass
class Start:
    """What a fine-tuning run starts from: the checkpoint's config, weights (None on resume), tokenizer, labels."""

    source: str
    kind: str  # "anatomy" or the HF architecture
    config: ModelConfig
    state: dict[str, torch.Tensor] | None
    tokenizer: Tokenizer
    label_names: tuple[str, ...] | None = None

    def check(self, options: TrainOptions, model_overrides: dict[str, Any]) -> None:
        """Refuse, by name, what this checkpoint cannot do (before any data is read)."""
        check_overrides(model_overrides, self.config, self.source)
        config = self.config
        allowed = TASKS.get(options.task)
        if allowed is None:
            raise ValueError(f"init_from supports task=lm and task=classify, got task={options.task}")
        if config.architecture not in allowed:
            raise ValueError(
                f"init_from={self.source}: task={options.task} needs a checkpoint of architecture "
                f"{' or '.join(allowed)}; it holds a {config.architecture} model"
            )
        if options.block_size > config.max_seq_len:
            raise ValueError(
                f"block_size={options.block_size} is longer than the checkpoint's max_seq_len="
                f"{config.max_seq_len} (init_from={self.source})"
            )

    def config_for(self, task: Task, options: TrainOptions, model_overrides: dict[str, Any]) -> ModelConfig:
        """The run's ``ModelConfig``: the checkpoint's, with the free fields and the task's label count."""
        self.check(options, model_overrides)
        config = self.config
        if isinstance(task, ClassifyTask):
            config = config.replace(architecture="classifier", num_labels=task.num_labels)
        return config.replace(**{k: v for k, v in model_overrides.items() if k in FREE_MODEL_FIELDS})

    def load_into(self, model: nn.Module, task: Task, say: Callable[[str], None]) -> None:
        """Copy the checkpoint's weights into ``model`` (built from ``config_for``); a new head when needed."""
        state = dict(self.state or {})
        if isinstance(task, ClassifyTask):
            if self.config.architecture == "encoder":  # BertModel's pooler (encoder_pooler) feeds the head's, as HF's
                pooled = getattr(model, "pooler", None) is not None  # BertForSequenceClassification takes it
                state = {
                    k if k.startswith("pooler.") else f"encoder.{k}": v
                    for k, v in state.items()
                    if pooled or not k.startswith("pooler.")
                }
            same_labels = (
                self.config.architecture == "classifier"
                and self.config.num_labels == task.num_labels
                and self.label_names is not None
                and tuple(self.label_names) == tuple(task.label_names)
            )
            if not same_labels:
                state = {k: v for k, v in state.items() if not k.startswith("classifier.")}
        result = model.load_state_dict(state, strict=False)
        wrong = [k for k in result.missing_keys if not k.startswith(HEAD_PREFIXES)]
        if wrong or result.unexpected_keys:  # config_for built this model from the checkpoint's own config
            raise RuntimeError(
                f"init_from={self.source}: weights do not match the model: missing {wrong[:4]}, "
                f"unexpected {result.unexpected_keys[:4]}"
            )
        what = "its weights" if self.kind == "anatomy" else f"{self.kind} weights"
        config = ckpt.config_of(model)
        say(
            f"init_from {self.source}: {what} and tokenizer ({type(self.tokenizer).__name__}, "
            f"{self.tokenizer.vocab_size} tokens); architecture fixed by the checkpoint "
            f"({config.architecture}, d_model={config.d_model}, n_layers={config.n_layers})"
        )
        if result.missing_keys and isinstance(task, ClassifyTask):
            had = (
                "has no classification head"
                if self.config.architecture == "encoder"
                else f"had {self.config.num_labels} labels "
                f"({', '.join(self.label_names) if self.label_names else 'names unknown'})"
            )
            say(
                f"init_from {self.source}: a new classification head ({', '.join(sorted(result.missing_keys))}, "
                f"random init) for {task.num_labels} labels ({', '.join(task.label_names)}); the checkpoint {had}"
            )

    @staticmethod
    def val_before(
        model: nn.Module, task: Task, loss_and_logits: LossAndLogits, batch_size: int, say: Callable[[str], None]
    ) -> float:
        """The val loss of the loaded weights before the first step (logged as step 0), as training evaluates."""
        model.eval()
        with torch.no_grad():
            loss = float(task.evaluate(loss_and_logits, "val", batch_size)["loss"])
        model.train()
        say(f"step 0 (init_from, before fine-tuning): val loss {loss:.4f}")
        return loss


def check_overrides(model_overrides: dict[str, Any], config: ModelConfig, source: str) -> None:
    """Refuse, by name, a model field that would change the checkpoint's architecture (the same value is fine)."""
    for key, value in model_overrides.items():
        if key in FREE_MODEL_FIELDS or getattr(config, key, object()) == value:
            continue
        raise ValueError(
            f"{key}={value!r} would change the architecture that init_from={source} fixes "
            f"({key}={getattr(config, key, None)!r} there); with init_from only "
            f"{', '.join(FREE_MODEL_FIELDS)} may be given"
        )


def load_start(path: str | Path) -> Start:
    """The checkpoint at ``path``: ours (a checkpoint or run directory) or a Hugging Face directory."""
    from anatomy.data.tokenizers import load_tokenizer
    from anatomy.interop import hf, tokenizer_io
    from anatomy.interop.safetensors_io import FORMAT, load_pretrained, read_config, read_tensors

    d = Path(path)
    if not d.is_dir():
        raise ValueError(f"init_from={path}: no such directory")
    tokenizer: Tokenizer | None
    try:
        hf_config = read_config(d) if (d / ckpt.CONFIG).is_file() else None
        if hf_config is not None and hf_config.get("format") != FORMAT:  # a Hugging Face directory
            arch = hf.arch_of(hf_config)
            model = hf.model_from_checkpoint(hf_config, read_tensors(d), source=str(d))
            tokenizer = tokenizer_io.read_hf_tokenizer(d)
            if tokenizer is None:
                raise CheckpointError(
                    f"init_from={path}: the directory holds no tokenizer (tokenizer.json, or "
                    "vocab.json + merges.txt); fine-tuning keeps the checkpoint's tokenizer"
                )
            labels = hf_config.get("id2label")
            names = tuple(labels[k] for k in sorted(labels, key=int)) if isinstance(labels, dict) else None
            kind = arch
        else:
            where = ckpt.resolve(d)
            model = load_pretrained(where)
            try:
                tokenizer = load_tokenizer(where)
            except ValueError as err:
                raise CheckpointError(
                    f"init_from={path}: {err}; fine-tuning keeps the checkpoint's tokenizer"
                ) from None
            training = ckpt.read_json(where / ckpt.TRAINING) if (where / ckpt.TRAINING).is_file() else {}
            names = tuple(training["label_names"]) if "label_names" in training else None
            kind, d = "anatomy", where
        tokenizer_io.check_fits(tokenizer, ckpt.config_of(model).vocab_size, source=f"init_from={path}")
    except (TypeError, ValueError) as err:
        raise CheckpointError(str(err) if "init_from" in str(err) else f"init_from={path}: {err}") from None
    state = {k: v.float() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    return Start(str(d), kind, ckpt.config_of(model), state, tokenizer, names)


def resumed_start(last: Path, tokenizer: Tokenizer, options: TrainOptions) -> Start:
    """On ``--resume`` of a fine-tuning run: the run's own checkpoint fixes config and tokenizer; no weights (the
    checkpoint's replace them)."""
    return Start(str(options.init_from), "anatomy", ckpt.load_config(last), None, tokenizer)
