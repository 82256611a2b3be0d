"""The compiled decode step (``anatomy.generation.compiled``) against eager decoding, design group by design group.

The default run compiles with the ``aot_eager`` backend: dynamo captures the whole step with ``fullgraph=True``
(what can break a graph is Python, and that is the same whatever the backend) and AOT autograd functionalises the
caches' in-place writes, in seconds instead of the inductor's C++ build (~30-60 s per graph on 2 cores). The
inductor itself, the default backend, runs in the slow tests below and in benchmarks/decode.py, which asserts the
same tokens. The static cache alone (no compiler) is held equal to the growing one for every design by
``test_static_caches_give_the_growing_caches_logits``.
"""

from __future__ import annotations

import pytest
import torch

from anatomy import ModelConfig, build_model
from anatomy.components.kv_cache import StaticKVCache
from anatomy.generation import compiled, generate
from anatomy.pitfalls import faults

SMALL = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64)


def _model(preset: str, **overrides):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset(preset, **{**SMALL, **overrides}))
    with torch.no_grad():
        for p in model.parameters():  # peaked, varied logits instead of a near-uniform random start
            p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def _prompt(b: int = 3, t: int = 7, pad: tuple[int, ...] = (0, 2, 5)):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 50, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.long)
    for row, n in enumerate(pad[:b]):
        mask[row, :n] = 0
        ids[row, :n] = 0
    return ids, mask


@pytest.fixture
def aot_eager(monkeypatch):
    monkeypatch.setattr(compiled, "BACKEND", "aot_eager")


def _both(model, *args, **kw):
    """Compiled and eager generations of the same call, with their raw logits."""
    kw = dict(max_new_tokens=10, return_dict_in_generate=True, **kw)
    before = compiled.STATS.compilations
    with torch.compiler.set_stance("default"):
        got = generate(model, *args, compile=True, **kw)
    assert compiled.STATS.compilations == before + 1  # it did compile (no silent eager fallback)
    want = generate(model, *args, compile=False, **kw)
    return got, want


def _assert_same(got, want):
    assert torch.equal(got.sequences, want.sequences)
    if want.logits is not None:
        for a, b in zip(got.logits, want.logits):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))


# Every design group: (preset, overrides). Left padding in every prompt.
GROUPS = {
    "global-gqa-rope-local-layers": ("llama", dict(n_kv_heads=2, sliding_window=3, window_pattern="LG")),
    "alibi-sliding-window": ("gpt2", dict(positional="alibi", sliding_window=4)),
    "shaw-value-term-math-kernel": ("gpt2", dict(positional="shaw")),
    "mqa-interleaved-rope-qk-norm-softcap": (
        "qwen3",
        dict(n_kv_heads=1, head_dim=16, rope_layout="interleaved", attn_softcap=20.0),
    ),
}


@pytest.mark.parametrize("name", list(GROUPS))
def test_compiled_decoding_is_token_identical_to_eager(name, aot_eager):
    preset, overrides = GROUPS[name]
    model = _model(preset, **overrides)
    ids, mask = _prompt()
    _assert_same(*_both(model, ids, mask, output_logits=True))


def test_encoder_decoder_models_compile_with_relative_bias_and_cross_attention_once(aot_eager):
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_preset("t5", **SMALL)).eval()
    ids, mask = _prompt()
    got, want = _both(model, ids, mask, output_logits=True)
    _assert_same(got, want)
    assert got.cache.get_seq_length() == want.cache.get_seq_length()
    # the cross-attention entries were projected once, at the prefill, and handed back as they were
    torch.testing.assert_close(got.cache[0][2], want.cache[0][2], rtol=0, atol=0)


def test_beams_reorder_the_static_caches_by_index(aot_eager):
    model = _model("gpt2")
    ids, mask = _prompt(b=2, pad=(0, 3))
    got, want = _both(model, ids, mask, num_beams=3, num_return_sequences=2)
    _assert_same(got, want)


def test_a_second_call_reuses_the_compiled_step_without_recompiling(aot_eager):
    model = _model("llama", n_kv_heads=2)
    ids, mask = _prompt()
    first, _ = _both(model, ids, mask)
    compilations, reuses = compiled.STATS.compilations, compiled.STATS.reuses
    other = ids.flip(0)  # other tokens, the same shapes
    with torch.compiler.set_stance("fail_on_recompile"):  # dynamo raises if it has to trace again
        again = generate(model, other, mask.flip(0), max_new_tokens=9)  # 9 new: the same bucket of slots
    assert (compiled.STATS.compilations, compiled.STATS.reuses) == (compilations, reuses + 1)
    assert torch.equal(again, generate(model, other, mask.flip(0), max_new_tokens=9, compile=False))
    assert compiled.decide(
        model, "auto", rows=3, new_tokens=9, length=64, device=ids.device, padded=True
    ).why.startswith("a compiled step for this model and shape is cached")


def test_later_steps_call_the_graph_without_dynamo_and_give_the_same_tokens(aot_eager):
    """Only each generation's first step enters the compiled function (guards checked); the later ones call the
    graph it ran, with the same inputs (the token written into one buffer), and decode the eager tokens."""
    model = _model("gpt2")
    ids, mask = _prompt()
    _both(model, ids, mask)  # compiles
    (key, step), *_ = compiled._STEPS[model].items()
    entered = []

    def counting(*args):
        entered.append(args[2].shape)
        return step(*args)

    counting.capture = step.capture
    compiled._STEPS[model][key] = counting
    try:
        for _ in range(2):
            got = generate(model, ids, mask, max_new_tokens=10, compile=True)
    finally:
        compiled._STEPS[model][key] = step
    assert entered == [(3, 1), (3, 1)]  # one entry per generation, 9 decode steps each
    assert torch.equal(got, generate(model, ids, mask, max_new_tokens=10, compile=False))
    assert step.capture.last is None  # the generation's caches are not kept after it


def test_changed_weights_make_a_new_graph(aot_eager):
    """A graph is made for the weights as they were (a frozen graph holds them as constants): an in-place update
    of a weight makes a new one (and drops the old), so the compiled step never decodes with stale weights."""
    model = _model("gpt2")
    ids, mask = _prompt()
    _assert_same(*_both(model, ids, mask))
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)  # an optimiser's step, load_state_dict: the same tensor, a new version
    got, want = _both(model, ids, mask)  # _both asserts it compiled again
    _assert_same(got, want)
    assert len(compiled._STEPS[model]) == 1
    with torch.inference_mode():  # a model made under inference_mode keeps no versions: its graph is not frozen
        frozen_less = build_model(ModelConfig.from_preset("gpt2", **SMALL)).eval()
    assert compiled.weights_state(frozen_less) is None
    assert compiled.weights_state(model) is not None


def test_faults_compile_per_set_and_a_replaced_attention_stays_eager(aot_eager):
    model = _model("gpt2")
    ids, mask = _prompt()
    undo: list = []
    faults.attention_fault(model, undo, name="no_scaling")
    faults.attention_fault(model, undo, name="split_without_transpose")
    try:
        got, want = _both(model, ids, mask)
        _assert_same(got, want)
    finally:
        for u in reversed(undo):
            u()
    undo = []
    faults.attention_fault(model, undo, name="mask_after_softmax")  # normalises over every slot, written or not
    try:
        decision = compiled.decide(model, True, rows=3, new_tokens=10, length=64, device=ids.device)
        assert not decision.compile and "attend is replaced (a bug-zoo fault)" in decision.why
        with pytest.warns(UserWarning, match="compile=True: the decode step runs eagerly .*attend is replaced"):
            got = generate(model, ids, mask, max_new_tokens=6, compile=True)
        assert torch.equal(got, generate(model, ids, mask, max_new_tokens=6, compile=False))
    finally:
        for u in reversed(undo):
            u()


def test_a_failing_compiler_falls_back_with_one_warning(monkeypatch):
    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here\nsecond line")

    monkeypatch.setattr(compiled, "BACKEND", broken)
    model = _model("gpt2")
    ids, mask = _prompt()
    with pytest.warns(UserWarning, match="torch.compile failed, the decode step runs eagerly") as caught:
        got = generate(model, ids, mask, max_new_tokens=6, compile=True)
    assert len([w for w in caught if "torch.compile" in str(w.message)]) == 1
    assert "second line" not in str(caught[0].message)
    assert torch.equal(got, generate(model, ids, mask, max_new_tokens=6, compile=False))
    later = compiled.decide(model, True, rows=3, new_tokens=6, length=64, device=ids.device, padded=True)
    assert not later.compile and "failed for this model and shape earlier" in later.why


def test_auto_compiles_only_when_it_pays(monkeypatch, caplog):
    model = _model("gpt2")
    cpu = torch.device("cpu")
    with caplog.at_level("INFO", logger="anatomy"):
        generate(model, torch.tensor([[1, 2, 3]]), max_new_tokens=20)
    assert "the decode step runs eagerly (20 new tokens x 1 rows on cpu: too few to repay the warm-up)" in caplog.text
    short = compiled.decide(model, "auto", rows=1, new_tokens=20, length=64, device=cpu)
    assert not short.compile and "too few to repay the warm-up" in short.why
    long = compiled.decide(model, "auto", rows=8, new_tokens=10_000, length=16384, device=cpu)
    assert long.compile and long.key is not None
    assert not compiled.decide(model, False, rows=8, new_tokens=10_000, length=16384, device=cpu).compile
    compiled.unavailable.cache_clear()
    monkeypatch.setattr(compiled.shutil, "which", lambda name: None)
    monkeypatch.delenv("CXX", raising=False)
    try:
        off = compiled.decide(model, True, rows=1, new_tokens=20, length=64, device=cpu)
        assert not off.compile and off.why.startswith("no C++ compiler found")
    finally:
        compiled.unavailable.cache_clear()
    with pytest.raises(ValueError, match="compile must be 'auto', True or False, got 'yes'"):
        generate(model, torch.tensor([[1, 2]]), max_new_tokens=2, compile="yes")


def test_hooks_and_dynamic_rope_keep_the_step_eager():
    model = _model("llama", rope_scaling="dynamic", rope_factor=2.0)
    why = compiled.decide(model, True, rows=1, new_tokens=5, length=64, device=torch.device("cpu")).why
    assert "'dynamic' scaling" in why
    model = _model("gpt2")
    handle = model.stack.blocks[0].attn.hook_out.register_forward_hook(lambda m, i, o: None)
    try:
        why = compiled.decide(model, True, rows=1, new_tokens=5, length=64, device=torch.device("cpu")).why
        assert why.startswith("a forward hook is attached to stack.blocks.0.attn.hook_out")
    finally:
        handle.remove()


def test_the_buckets_share_graphs_between_nearby_lengths():
    assert [compiled.bucket(n) for n in (1, 64, 65, 200, 4096, 4097)] == [64, 64, 128, 256, 4096, 5120]


# ------------------------------------------------------------------------- the static cache alone, every design

DESIGNS = {
    "gpt2": ("gpt2", {}),
    "llama-gqa": ("llama", dict(n_kv_heads=2)),
    "alibi-post": ("gpt2", dict(positional="alibi", norm_position="post", final_norm=False)),
    "sliding-window": ("llama", dict(n_kv_heads=2, sliding_window=4)),
    "local-global": ("llama", dict(n_kv_heads=2, sliding_window=3, window_pattern="LG")),
    "shaw": ("gpt2", dict(positional="shaw")),
    "loop-kernel": ("gpt2", dict(kernel="loop")),
    "parallel": ("gpt2", dict(parallel_residual=True)),
    "learned-sinusoidal": ("gpt2", dict(positional="sinusoidal")),
}


@pytest.mark.parametrize("name", list(DESIGNS))
def test_static_caches_give_the_growing_caches_logits(name):
    """Eagerly, without a compiler: the model's forward on static caches (slots by index, the whole width every
    step) gives the growing caches' logits, left-padded, for every design."""
    preset, overrides = DESIGNS[name]
    model = _model(preset, **overrides)
    ids, mask = _prompt()
    with torch.inference_mode():
        growing = model.new_caches(20)
        model(ids, mask, kv_caches=growing, use_cache=True)
        static = [StaticKVCache.from_cache(c, 32) for c in growing]
        wide = torch.cat([mask, torch.ones(3, 32 - 7, dtype=torch.long)], dim=1)  # (B, L)
        token = torch.tensor([3, 17, 41])
        for _ in range(6):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            want = model(token[:, None], mask, kv_caches=growing, use_cache=True).logits[:, -1]
            got = model(token[:, None], wide, kv_caches=static, use_cache=True).logits[:, -1]
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
            token = want.argmax(-1)
        assert static[0].seen == growing[0].seen == 13
        back, held = static[0].to_cache(), len(growing[0])  # a rolling cache holds the last W - 1 + 1 only
        assert torch.equal(back.k[..., -held:, :], growing[0].k) and torch.equal(back.positions, static[0].positions)


# ------------------------------------------------------------------------------------ the inductor (slow)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["global-gqa-rope-local-layers", "alibi-sliding-window"])
def test_the_inductor_gives_the_eager_tokens(name):
    """The inductor's graph (frozen weights, its own C++ GEMMs on CPU, the C++ wrapper) decodes the eager tokens,
    with logits within 1e-5, and after an in-place change of a weight it is made again from the new weights."""
    preset, overrides = GROUPS[name]
    model = _model(preset, **overrides)
    ids, mask = _prompt()
    _assert_same(*_both(model, ids, mask, output_logits=True))
    with torch.no_grad():
        model.lm_head.weight.mul_(-1.0)
    _assert_same(*_both(model, ids, mask, output_logits=True))
