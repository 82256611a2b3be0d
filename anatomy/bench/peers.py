"""The peers the bench compares against, how to install a missing one, and the models built at one size.

Every peer gets the same design as ours (GPT-2's: learned positions, Pre-LN, GELU-tanh, tied embeddings, no
dropout) and the same sizes, so the timings differ only by implementation. ``torch.nn`` ships with PyTorch; the
others are optional and a missing one is named in the report with its pip line (pin torch so pip does not fetch
another build of it).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

PEERS = {  # module → (distribution, pip line)
    "torch.nn": ("torch", "ships with PyTorch"),
    "transformers": ("transformers", f'pip install "transformers>=4.40" "torch=={torch.__version__.split("+")[0]}"'),
    "x_transformers": ("x-transformers", f'pip install x-transformers "torch=={torch.__version__.split("+")[0]}"'),
}


@contextlib.contextmanager
def quiet_peers() -> Iterator[None]:
    """Hugging Face's advisory log lines (loss type, deprecated names) off for the block; its level restored."""
    try:
        from transformers.utils import logging as hf_logging
    except Exception:  # noqa: BLE001 - no transformers: nothing to quiet
        yield
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # transformers' logging is unannotated
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def peer_status() -> dict[str, dict[str, Any]]:
    """``{module: {"installed": bool, "version" | "pip": str}}`` for every peer."""
    out = {}
    for module, (dist, pip) in PEERS.items():
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001 - an import that fails for any reason leaves the peer out
            out[module] = {"installed": False, "pip": pip}
            continue
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "unknown"
        out[module] = {"installed": True, "version": version}
    return out


@dataclass(frozen=True)
class LMSize:
    n_layers: int
    n_heads: int
    d_model: int
    seq: int
    batch: int
    vocab: int

    def design(self) -> str:
        return f"GPT-2 design, {self.n_layers} layers, {self.n_heads} heads, d {self.d_model}, vocab {self.vocab}"

    def describe(self) -> str:
        return f"{self.design()}, T {self.seq}, batch {self.batch}"


def ours_lm(s: LMSize, **overrides: Any) -> nn.Module:
    from anatomy import ModelConfig, build_model

    config = ModelConfig.from_preset(
        "gpt2",
        n_layers=s.n_layers,
        n_heads=s.n_heads,
        d_model=s.d_model,
        d_ff=4 * s.d_model,
        vocab_size=s.vocab,
        max_seq_len=max(s.seq, 256),
        dropout=0.0,
        attention_dropout=0.0,
        kernel="sdpa",
        **overrides,
    )
    return build_model(config)


def hf_gpt2(s: LMSize) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=s.vocab,
        n_positions=max(s.seq, 256),
        n_embd=s.d_model,
        n_layer=s.n_layers,
        n_head=s.n_heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
    )
    model: nn.Module = GPT2LMHeadModel._from_config(  # type: ignore[no-untyped-call]  # transformers' classmethod
        config, attn_implementation="sdpa"
    )
    return model


class _XLM(nn.Module):
    """x-transformers' network called like an HF model: ``(input_ids, labels)`` → ``.loss``, ``.logits``."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> Any:
        logits = self.net(input_ids)  # (B, T, V)
        loss = (
            None if labels is None else F.cross_entropy(logits[:, :-1].flatten(0, 1), labels[:, 1:].flatten())
        )  # next-token targets (B*(T-1),)
        return type("Out", (), {"loss": loss, "logits": logits})


def x_transformers_lm(s: LMSize) -> nn.Module:
    from x_transformers import Decoder, TransformerWrapper

    net = TransformerWrapper(
        num_tokens=s.vocab,
        max_seq_len=max(s.seq, 256),
        tie_embedding=True,
        attn_layers=Decoder(dim=s.d_model, depth=s.n_layers, heads=s.n_heads, attn_flash=True),
    )
    return _XLM(net)


LM_PEERS = {"hf_gpt2": ("transformers", hf_gpt2), "x_transformers": ("x_transformers", x_transformers_lm)}


def language_models(s: LMSize, status: dict[str, dict[str, Any]], notes: list[str]) -> dict[str, nn.Module]:
    """``{"ours": ..., peer: ...}`` with the installed peers, seeded alike; a peer that fails to build is left
    out with a note (its message) instead of stopping the bench."""
    torch.manual_seed(0)
    models = {"ours": ours_lm(s)}
    for name, (module, build) in LM_PEERS.items():
        if not status[module]["installed"]:
            continue
        torch.manual_seed(0)
        ids = torch.zeros(1, min(4, s.seq), dtype=torch.long)
        try:
            model = build(s)
            if not torch.isfinite(model(input_ids=ids, labels=ids).loss):  # it runs as the suites call it
                raise RuntimeError("a non-finite loss on a 4-token input")
            model.zero_grad(set_to_none=True)
            models[name] = model
        except Exception as err:  # noqa: BLE001 - an incompatible peer version: say so, keep going
            note = f"{name} left out: building or calling it failed ({type(err).__name__}: {err})"
            if note not in notes:
                notes.append(note)
    return models
