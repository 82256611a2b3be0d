"""Memory estimates for the sizes a user types, checked *before* anything is allocated.

A size typed by hand (``anatomy trace --seq 100000``: hundreds of GB of attention scores; ``--seq 10**30``: an
integer overflow) must be refused before the allocator or torch fails with a raw error. :func:`check_fits`
estimates the bytes a forward (or a training step) needs from the config and the sizes alone (plain integer
arithmetic: no tensor is made, no model is built), compares them with the memory the machine has free, and refuses
with one line: the estimate, its largest part, what is available, and the flags to change.

The estimate is an order of magnitude, on the generous side: float32 everywhere, the attention scores and weights
of the math kernel (``(B, H, T, S)`` twice, as ``anatomy trace`` asks for them), activations of every layer kept
for the backward pass when training, AdamW's two moments. It errs towards refusing only what could never run.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from anatomy.config import ModelConfig

FLOAT = 4  # bytes: estimates are in float32


class SizeError(ValueError):
    """The sizes asked for cannot fit in memory; the message has the estimate and the flags to change."""


def human(n: int) -> str:
    if n >= 10**18:  # past exabytes a float may not even hold the number (--seq 10**200)
        return f"10^{len(str(int(n))) - 1} bytes"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if size < 1000 or unit == "PB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    raise AssertionError  # unreachable


def _n(n: int) -> str:
    """A size for a message: as typed when short, else its power of ten."""
    return str(n) if n < 10**7 else f"~10^{len(str(int(n))) - 1}"


def available_bytes(device: str = "cpu") -> int | None:
    """Free memory now: ``MemAvailable`` (and a cgroup limit, if lower) on Linux, free pages elsewhere, the free
    memory of a CUDA device; ``None`` when it cannot be told (then nothing is refused)."""
    if str(device).startswith("cuda"):
        try:
            import torch

            return int(torch.cuda.mem_get_info(torch.device(device))[0])
        except (RuntimeError, AssertionError, ValueError):
            return None
    found: list[int] = []
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    found.append(int(line.split()[1]) * 1024)
    except OSError:
        try:
            found.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
        except (ValueError, OSError, AttributeError):
            pass
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(path).read().strip()
        except OSError:
            continue
        if text.isdigit():
            used = 0
            for current in ("/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory/memory.usage_in_bytes"):
                try:
                    used = int(open(current).read().strip())
                    break
                except (OSError, ValueError):
                    continue
            found.append(max(int(text) - used, 0))
        break
    return min(found) if found else None


def _d_ff(config: ModelConfig) -> int:
    if config.d_ff is not None:
        return config.d_ff
    gated = config.activation in ("swiglu", "geglu")
    return 8 * config.d_model // 3 if gated else 4 * config.d_model


def parameter_count(config: ModelConfig) -> int:
    """Parameters of ``build_model(config)``, counted from the config (matrices only; biases and norms are
    negligible next to them)."""
    d, f, v = config.d_model, _d_ff(config), config.vocab_size
    inner, kv = config.n_heads * config.dh, config.kv_heads * config.dh
    ffn = (3 if config.activation in ("swiglu", "geglu") else 2) * d * f
    layer = d * inner + 2 * d * kv + inner * d + ffn
    layers = config.n_layers + (config.decoder_layers if config.architecture == "seq2seq" else 0)
    cross = config.decoder_layers * (d * inner + 2 * d * kv + inner * d) if config.architecture == "seq2seq" else 0
    embeddings = v * d * (1 if config.tie_embeddings else 2)
    positions = config.max_seq_len * d if config.positional == "learned" else 0
    return layers * layer + cross + embeddings + positions


def estimate(
    config: ModelConfig,
    batch: int,
    seq: int,
    *,
    tgt_seq: int | None = None,
    training: bool = False,
    weights: bool = True,
) -> tuple[int, str]:
    """``(bytes, largest part)`` for one forward (``training``: forward, backward and an AdamW step) at batch
    ``batch`` and length ``seq`` (``tgt_seq``: the decoder's length for seq2seq)."""
    b, t = batch, seq
    s2 = tgt_seq or seq
    h, d, f, v = config.n_heads, config.d_model, _d_ff(config), config.vocab_size
    layers = config.n_layers + (config.decoder_layers if config.architecture == "seq2seq" else 0)
    longest = max(t, s2)
    scores = b * h * longest * longest * FLOAT * (2 if weights else 1)  # (B, H, T, S) scores and weights, one layer
    per_layer = b * longest * (6 * d + 2 * f) * FLOAT  # x, q, k, v, attention output, residual; FFN hidden twice
    logits = b * s2 * (v if config.architecture != "classifier" else config.num_labels) * FLOAT
    params = parameter_count(config) * FLOAT
    shape = "×".join(_n(n) for n in (b, h, longest, longest))
    parts = {
        f"parameters ({parameter_count(config):,} in float32)": params,
        f"logits (B, T, V) = {_n(b)}×{_n(s2)}×{_n(v)} float32": logits,
    }
    if training:  # every layer's activations are kept for backward, plus one layer's gradients of them while the
        # backward pass runs; the parameters' gradients and AdamW's two moments are 3 more copies of the weights
        parts[f"activations kept for backward: {layers} layers, each with scores (B, H, T, S) = {shape}"] = (
            layers + 1
        ) * (per_layer + scores)
        parts["gradients and AdamW state"] = 3 * params
    else:
        parts[f"attention scores (B, H, T, S) = {shape} float32"] = scores
        parts["one layer's activations"] = per_layer
    total = sum(parts.values())
    return total, max(parts, key=lambda name: parts[name])


def _refuse_over(
    need: int, *, what: str, part: str, flags: str, device: str = "cpu", available: int | None = None
) -> int:
    """The one refusal every check shares: :class:`SizeError` when ``need`` bytes exceed the memory available."""
    have = available_bytes(device) if available is None else available
    if have is not None and need > have:
        raise SizeError(
            f"{what} would need about {human(need)} of memory ({part}), more than the {human(have)} "
            f"available; lower {flags}"
        )
    return need


def check_fits(
    config: ModelConfig,
    batch: int,
    seq: int,
    *,
    flags: str,
    what: str = "this forward",
    tgt_seq: int | None = None,
    training: bool = False,
    weights: bool = True,
    device: str = "cpu",
    available: int | None = None,
) -> int:
    """Refuse sizes that cannot fit, before anything is allocated (:class:`SizeError` naming the estimate and
    ``flags``, e.g. ``"--seq or --batch"``). Returns the estimate in bytes."""
    need, largest = estimate(config, batch, seq, tgt_seq=tgt_seq, training=training, weights=weights)
    return _refuse_over(
        need, what=what, part=f"the largest part: {largest}", flags=flags, device=device, available=available
    )


def check_cache_fits(
    config: ModelConfig,
    batch: int,
    length: int,
    *,
    flags: str,
    element_size: int = FLOAT,
    device: str = "cpu",
    available: int | None = None,
) -> int:
    """Refuse a KV cache that cannot fit before it is allocated: generation reserves ``length`` slots per row up
    front (keys and values, every decoder layer, ``(B, Hkv, length, Dh)`` each). Returns the bytes."""
    layers = config.decoder_layers if config.architecture == "seq2seq" else config.n_layers
    slots = length if config.sliding_window is None else min(length, 2 * config.sliding_window)
    need = 2 * layers * batch * config.kv_heads * slots * config.dh * element_size
    part = (
        f"{layers} layers × keys and values (B, Hkv, length, Dh) = "
        f"{'×'.join(_n(n) for n in (batch, config.kv_heads, slots, config.dh))}"
    )
    return _refuse_over(
        need,
        what=f"the KV cache for {_n(length)} positions",
        part=part,
        flags=flags,
        device=device,
        available=available,
    )


def check_learner_fits(
    batch: int, seq: int, d_model: int, n_heads: int, *, flags: str, available: int | None = None
) -> int:
    """A learner's module runs in float64 on ``(B, T, D)`` probes: its ``(B, H, T, S)`` scores and weights (and a
    few ``(B, T, D)`` activations) must fit. Refused before the module runs, like :func:`check_fits`."""
    need = 2 * batch * n_heads * seq * seq * 8 + 16 * batch * seq * d_model * 8
    shape = "×".join(_n(n) for n in (batch, n_heads, seq, seq))
    part = f"the largest part: attention scores (B, H, T, S) = {shape} float64"
    return _refuse_over(need, what="this trace", part=part, flags=flags, available=available)
