"""NaN safety: masks never produce NaN or Inf, in any kernel or dtype, forward or backward.

The convention (docs/conventions.md): a query row that may attend to nothing returns zeros — output and weights —
never NaN. The dangerous cases are the ones real batches produce: fully masked rows (left padding under a causal
mask, a sequence of pure padding, a random mask that hides a whole row), in half precision, and their gradients.

The last section pins down what the kernels do *not* promise: a non-finite value at a masked key position.
"""

from __future__ import annotations

import pytest
import torch

import anatomy
from anatomy.components import MultiHeadAttention, kernels
from anatomy.components.inputs import attention_inputs
from anatomy.components.masks import causal_mask, combine, padding_mask
from anatomy.components.positional import ALiBiPositional, RotaryPositional, ShawRelativePositional, T5RelativeBias

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
KERNELS = ["loop", "math", "sdpa"]
# On CPU, torch's own SDPA already returns 0 for a row with no key (torch >= 2.5); the fused CUDA kernels do not
# promise it, which is what sdpa_attention's explicit zeroing is for. Run on CUDA too where there is one.
DEVICES = ["cpu", *(["cuda"] if torch.cuda.is_available() else [])]
B, T, S, H, DH = 3, 6, 6, 4, 4


def masks() -> dict[str, tuple[torch.Tensor | None, bool]]:
    """Mask cases with rows that see no key: ``name -> (mask (B, 1|H, T|1, S), is_causal)``."""
    g = torch.Generator().manual_seed(0)
    right = padding_mask(torch.tensor([6, 3, 0]), S)  # row 2 is pure padding
    left = right.flip(-1)  # left padding: under a causal mask the first queries of rows 1, 2 see nothing
    random = torch.rand(B, H, T, S, generator=g) < 0.4
    random[0, 1, 2] = False  # at least one hidden row, per head
    random[1, :, 4] = False  # and one hidden in every head
    return {
        "pure padding row": (right[:, None, None], False),
        "left padding + causal": (left[:, None, None], True),
        "random per head": (random, False),
        "everything hidden": (torch.zeros(B, 1, T, S, dtype=torch.bool), False),
    }


MASKS = masks()


def hidden_rows(mask: torch.Tensor | None, is_causal: bool, device: str = "cpu") -> torch.Tensor:
    """``(B, H, T)`` True where a query row may attend to nothing."""
    full = combine(mask, causal_mask(T, S) if is_causal else None)
    return ~full.expand(B, H, T, S).any(-1).to(device)


def module(kernel: str, positional: str, dtype: torch.dtype) -> MultiHeadAttention:
    scheme = {
        "rope": lambda: RotaryPositional(head_dim=DH),
        "alibi": lambda: ALiBiPositional(n_heads=H),
        "shaw": lambda: ShawRelativePositional(head_dim=DH, max_relative_distance=3),
    }.get(positional)
    torch.manual_seed(1)
    m = MultiHeadAttention(
        d_model=H * DH, n_heads=H, n_kv_heads=2, kernel=kernel, positional=None if scheme is None else scheme()
    )
    return m.to(dtype)


def attention_positionals(kernel: str) -> list[str]:
    return ["none", "rope", "alibi", "t5"] + (["shaw"] if kernels.KERNELS[kernel].supports_value_bias else [])


def recorder(store: dict, key: str, *, pre: bool = False):
    """A forward hook storing the module's output (its first element for a block's ``(x, weights)``), or with
    ``pre=True`` a forward pre-hook storing its first input."""

    def hook(module, args, out=None):
        value = args[0] if pre else (out[0] if isinstance(out, tuple) else out)
        store[key] = value.detach()

    return hook


def assert_finite(name: str, x: torch.Tensor | None) -> None:
    assert x is not None, f"{name} has no value"
    assert torch.isfinite(x).all(), f"{name} holds {int((~torch.isfinite(x)).sum())} NaN/Inf entries"


# fully masked rows, per kernel and dtype ----------------------------------------------------------------------------
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_name", list(MASKS))
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rows_without_keys_are_zero_and_finite(dtype, kernel, mask_name, device):
    mask, is_causal = MASKS[mask_name]
    hidden = hidden_rows(mask, is_causal, device)
    mask = None if mask is None else mask.to(device)
    assert hidden.any()
    for positional in attention_positionals(kernel):
        m = module(kernel, positional, dtype).to(device)
        x = torch.randn(B, T, H * DH, generator=torch.Generator().manual_seed(2)).to(device, dtype)
        x.requires_grad_(True)
        bias = None
        if positional == "t5":
            torch.manual_seed(3)
            t5 = T5RelativeBias(n_heads=H, bidirectional=not is_causal, num_buckets=8, max_distance=16).to(device)
            positions = torch.arange(T, device=device)[None]
            bias = t5.score_bias(None, positions, positions, 1.0).to(dtype)
        seen: dict[str, torch.Tensor] = {}
        m.hook_z.register_forward_hook(recorder(seen, "z"))
        out, weights = m(
            x, ctx=attention_inputs(m, x, mask=mask, is_causal=is_causal, attn_bias=bias), need_weights=kernel != "sdpa"
        )
        where = positional
        assert_finite(f"output ({where})", out)
        assert torch.all(seen["z"][hidden] == 0), f"rows with no key must give exactly 0 ({where})"
        if weights is not None:
            assert_finite(f"weights ({where})", weights)
            assert torch.all(weights[hidden] == 0)
            visible = weights[~hidden].float().sum(-1)
            assert torch.allclose(visible, torch.ones_like(visible), atol=1e-2), "visible rows must sum to 1"
        (out.float() ** 2).sum().backward()
        assert_finite(f"input gradient ({where})", x.grad)
        for name, p in m.named_parameters():
            assert_finite(f"gradient of {name} ({where})", p.grad)
        if bias is not None:
            assert_finite("T5 bias gradient", t5.relative_attention_bias.weight.grad)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_rows_without_keys_under_autocast(dtype, kernel):
    """float32 weights under CPU autocast: the math path keeps its softmax in float32, no kernel returns NaN."""
    mask, is_causal = MASKS["left padding + causal"]
    m = module(kernel, "alibi", torch.float32)
    x = torch.randn(B, T, H * DH, generator=torch.Generator().manual_seed(2), requires_grad=True)
    seen: dict[str, torch.Tensor] = {}
    m.hook_z.register_forward_hook(recorder(seen, "z"))
    with torch.autocast("cpu", dtype=dtype):
        out, _ = m(x, ctx=attention_inputs(m, x, mask=mask, is_causal=is_causal))
    assert_finite("output", out)
    assert torch.all(seen["z"][hidden_rows(mask, is_causal)] == 0)
    out.float().sum().backward()
    assert_finite("input gradient", x.grad)
    for name, p in m.named_parameters():
        assert_finite(f"gradient of {name}", p.grad)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float64, *DTYPES], ids=str)
def test_masked_keys_get_no_gradient(dtype, kernel):
    """A loss on visible rows only gives exactly zero gradient to the inputs at masked key positions: masking
    happens before softmax, so hidden keys carry weight 0 and receive nothing back (post §2.4)."""
    keep = padding_mask(torch.tensor([6, 3, 1]), S)  # (B, S)
    m = module(kernel, "none", dtype)
    x = torch.randn(B, T, H * DH, generator=torch.Generator().manual_seed(2)).to(dtype).requires_grad_(True)
    out, _ = m(x, ctx=attention_inputs(m, x, mask=keep[:, None, None]))
    (out.float() * keep[..., None]).sum().backward()  # only real tokens' outputs enter the loss
    assert_finite("input gradient", x.grad)
    assert torch.all(x.grad[~keep] == 0), "a padded key received gradient from a real token"
    assert x.grad[keep].abs().sum() > 0


# whole models: padded batches and a sequence of pure padding -------------------------------------------------------
def tiny(architecture: str, positional: str, kernel: str, dtype: torch.dtype) -> torch.nn.Module:
    config = anatomy.ModelConfig(
        architecture=architecture,
        vocab_size=31,
        d_model=16,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        d_ff=32,
        max_seq_len=32,
        positional=positional,
        kernel=kernel,
        init_std=0.2,
    )
    torch.manual_seed(0)
    return anatomy.build_model(config).to(dtype).train()  # dropout is 0; train() to be sure grads are normal


def model_positionals(kernel: str) -> list[str]:
    return ["learned", "rope", "alibi", "t5"] + (["shaw"] if kernel != "sdpa" else [])


@pytest.mark.parametrize("architecture", ["decoder_lm", "encoder"])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_two_layer_model_with_a_sequence_of_pure_padding(dtype, kernel, architecture):
    """Row 2 is entirely padding (and row 1 is left padded). Nothing non-finite anywhere: not in the logits, not
    in the stream entering the second block, not in any gradient; the padding row's attention outputs are
    exactly 0 in every layer, and the real rows enter layer 2 exactly as they would alone."""
    ids = torch.randint(0, 31, (3, 7), generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[1] * 7, [0, 0, 0, 1, 1, 1, 1], [0] * 7])
    for positional in model_positionals(kernel):
        m = tiny(architecture, positional, kernel, dtype)
        seen: dict[str, torch.Tensor] = {}
        handles = []
        for i, block in enumerate(m.stack.blocks):
            handles.append(block.register_forward_pre_hook(recorder(seen, f"block {i} input", pre=True)))
            handles.append(block.register_forward_hook(recorder(seen, f"block {i} output")))
            handles.append(block.attn.hook_z.register_forward_hook(recorder(seen, f"block {i} attention z")))
        out = m(ids, mask)
        result = out.logits if architecture == "decoder_lm" else out.last_hidden_state
        where = f"{architecture}, {positional}"
        assert_finite(f"output ({where})", result)
        assert len(seen) == 3 * len(m.stack.blocks) == 6
        for name, value in seen.items():
            assert_finite(f"{name} ({where})", value)
        for i in range(2):
            assert torch.all(seen[f"block {i} attention z"][2] == 0), f"padding row attended in layer {i}"
        reaching = seen["block 1 input"]
        for h in handles:
            h.remove()
        for row in (0, 1):
            keep = mask[row].bool()
            with torch.no_grad():
                alone: dict[str, torch.Tensor] = {}
                hook = m.stack.blocks[1].register_forward_pre_hook(recorder(alone, "x", pre=True))
                m(ids[row : row + 1, keep])
                hook.remove()
            tol = {torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 5e-3}[dtype]
            assert torch.allclose(reaching[row, keep].float(), alone["x"][0].float(), atol=tol, rtol=tol), where
        (result.float() ** 2).mean().backward()
        for name, p in m.named_parameters():
            if p.grad is not None:
                assert_finite(f"gradient of {name} ({where})", p.grad)
        assert m.stack.blocks[1].attn.o_proj.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("pooling", ["cls", "mean"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_classifier_on_a_sequence_of_pure_padding(dtype, pooling):
    config = anatomy.ModelConfig(
        architecture="classifier",
        vocab_size=31,
        d_model=16,
        n_heads=4,
        n_layers=2,
        d_ff=32,
        max_seq_len=32,
        positional="learned",
        pooling=pooling,
        init_std=0.2,
    )
    m = anatomy.build_model(config).to(dtype)
    ids = torch.randint(0, 31, (2, 5), generator=torch.Generator().manual_seed(5))
    out = m(ids, torch.tensor([[0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]), labels=torch.tensor([1, 0]))
    assert_finite("logits", out.logits)
    assert_finite("pooled", out.pooled)
    if pooling == "mean":
        assert torch.all(out.pooled[1] == 0), "the mean over no real token is defined as 0"
    out.loss.backward()
    for name, p in m.named_parameters():
        if p.grad is not None:
            assert_finite(f"gradient of {name}", p.grad)


# what the kernels do not promise: non-finite values at masked key positions --------------------------------------
def qkv(dtype: torch.dtype):
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(2, H, T, DH, generator=g).to(dtype) for _ in range(3))
    keep = padding_mask(torch.tensor([4, 6]), S)[:, None, None]  # (B, 1, 1, S): row 0 hides keys 4, 5
    return q, k, v, keep


def poisoned(x: torch.Tensor, value: float) -> torch.Tensor:
    x = x.clone()
    x[0, :, 4:] = value  # only at masked key positions of row 0
    return x


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("dtype", [torch.float64, *DTYPES], ids=str)
def test_non_finite_keys_at_masked_positions(dtype, value):
    """Keys: ``loop`` and ``math`` fill hidden scores with -inf *replacing* whatever was there, so a NaN/Inf key
    at a masked position never reaches a valid output. ``sdpa`` adds the mask to the scores instead
    (NaN + -inf = NaN, and an Inf key makes +inf or NaN scores), so it does not contain it."""
    q, k, v, keep = qkv(dtype)
    for name in ("loop", "math"):
        out, _ = kernels.KERNELS[name].fn(
            q, poisoned(k, value), v, kernels.AttentionArgs(mask=keep, scale=0.5, need_weights=True)
        )
        clean, _ = kernels.KERNELS[name].fn(q, k, v, kernels.AttentionArgs(mask=keep, scale=0.5))
        assert torch.equal(out, clean), f"{name}: a non-finite masked key changed valid outputs"
    out, _ = kernels.sdpa_attention(q, poisoned(k, value), v, kernels.AttentionArgs(mask=keep, scale=0.5))
    # NaN poisons every score of row 0; Inf gives +-inf scores (-inf ones are harmless) or NaN where q mixes signs
    broken = torch.isnan(out[0]).all() if value != value else not torch.isfinite(out[0]).all()
    assert broken, "sdpa now contains non-finite masked keys: update this test and the docs"
    assert torch.isfinite(out[1]).all()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("dtype", [torch.float64, *DTYPES], ids=str)
def test_non_finite_values_at_masked_positions_leak(dtype, kernel, value):
    """Values: every kernel computes ``weights @ v`` with weight exactly 0 on hidden keys, and ``0 * NaN`` and
    ``0 * Inf`` are NaN, so a non-finite value at a masked position poisons its batch row. Containing it would
    mean zeroing masked values on every call; the kernels do not pay for that. Inputs must be finite at padding
    (which they are when padding comes from token ids: embeddings are finite)."""
    q, k, v, keep = qkv(dtype)
    out, _ = kernels.KERNELS[kernel].fn(q, k, poisoned(v, value), kernels.AttentionArgs(mask=keep, scale=0.5))
    assert torch.isnan(out[0]).all()
    assert torch.isfinite(out[1]).all(), "the other batch row is unaffected"


@pytest.mark.parametrize("kernel", KERNELS)
def test_non_finite_hidden_state_at_a_padded_token_leaks_through_attention(kernel):
    """At module level the input ``x`` feeds keys *and* values, so a NaN at a padded token reaches the real
    tokens of its row in every kernel (by the value path above)."""
    keep = padding_mask(torch.tensor([4, 6]), S)
    m = module(kernel, "none", torch.float32)
    x = torch.randn(2, T, H * DH, generator=torch.Generator().manual_seed(7))
    x[0, 4:] = float("nan")
    out, _ = m(x, ctx=attention_inputs(m, x, mask=keep[:, None, None]))
    assert torch.isnan(out[0, :4]).all()
    assert torch.isfinite(out[1]).all()
