"""The model's own generate against full forwards."""

from __future__ import annotations

from pathlib import Path

from tests.doctor.model.styles import HERE, line_of, lines, run, variant


def test_generate_reads_the_first_position(tmp_path):
    path = variant(tmp_path, "lecture_style.py", "logits = logits[:, -1, :]", "logits = logits[:, 0, :]")
    report = run(path, "GPTLanguageModel")
    assert report.faults == {"generate_reads_first_position"}
    assert line_of(path, "logits = logits[:, 0, :]") in lines(report, "generate_reads_first_position")


def test_temperature_after_softmax(tmp_path):
    path = variant(
        tmp_path,
        "course_style.py",
        "probs = F.softmax(logits[:, -1] / temperature, dim=-1)",
        "probs = F.softmax(logits[:, -1], dim=-1) / temperature",
    )
    report = run(path)
    assert report.faults == {"temperature_after_softmax"}
    assert line_of(path, "probs = F.softmax(logits[:, -1], dim=-1) / temperature") in lines(
        report, "temperature_after_softmax"
    )


def test_positions_restart_with_the_cache(tmp_path):
    path = variant(
        tmp_path,
        "llama_style.py",
        "            logits = self(next_token, pos)",
        "            logits = self(next_token, 0)",
    )
    report = run(path, "Transformer")
    assert report.faults == {"positions_restart_with_cache"}
    assert line_of(path, "logits = self(next_token, 0)") in lines(report, "positions_restart_with_cache")


def test_a_cache_that_disagrees_for_another_reason_is_an_unnamed_error(tmp_path):
    path = variant(
        tmp_path,
        "llama_style.py",
        "            self.cache_k = torch.cat([self.cache_k[:bsz, :start_pos], xk], dim=1)",
        "            self.cache_k = xk",
    )
    path.write_text(path.read_text().replace("torch.cat([self.cache_v[:bsz, :start_pos], xv], dim=1)", "xv"))
    report = run(path, "Transformer")
    (f,) = [f for f in report.findings if f.probe == "lm_generate"]
    assert f.severity == "error" and f.fault is None and report.faults == set()


def test_generate_found():
    assert run(HERE / "llama_style.py", "Transformer").found["generate"]["cached"] is True
    assert run(HERE / "nano_style.py").found["generate"]["cached"] is False


def test_sampling_the_doctor_cannot_make_greedy_is_not_judged(tmp_path):
    path = variant(
        tmp_path,
        "lecture_style.py",
        "idx_next = torch.multinomial(probs, num_samples=1)",
        "idx_next = (probs.log() - torch.log(-torch.log(torch.rand_like(probs)))).argmax(-1, keepdim=True)",
    )
    report = run(path, "GPTLanguageModel")
    assert report.errors == [] and any(s["probe"] == "lm_generate" for s in report.skipped)


def test_rotary_positions_restart_with_the_cache(tmp_path):
    path = variant(
        tmp_path,
        "llama_style.py",
        "        freqs_cis = self.freqs_cis[start_pos : start_pos + seqlen]",
        "        freqs_cis = self.freqs_cis[:seqlen]",
    )
    report = run(path, "Transformer")
    assert report.faults == {"positions_restart_with_cache"}
    assert line_of(path, "freqs_cis = self.freqs_cis[:seqlen]") in lines(report, "positions_restart_with_cache")


def test_a_cached_step_whose_tokens_agree_is_judged_by_its_logits():
    """At random init the greedy tokens of a cached and a full decode often agree even when the cache is wrong
    (mlx-lm PR #93: no position for a one-token input): the cached step's logits are compared."""
    zoo = Path(__file__).parents[1] / "zoo_models" / "hf_gpt2.py"
    report = run(zoo, "GPT2CachePositions")
    assert report.faults == {"positions_restart_with_cache"}
    (f,) = [f for f in report.findings if f.probe == "lm_generate"]
    assert f.evidence["max_abs_diff"] > 1e-3 * f.evidence["max_abs_logit"]
    assert run(zoo, "GPT2LMHeadModel").errors == []


def _swa(factory: str):
    import sys

    from anatomy.doctor.model.build import Sizes
    from anatomy.doctor.model.context import Context
    from anatomy.doctor.model.contract import LM, first_call
    from tests.doctor.model.styles import HERE

    sys.path.insert(0, str(HERE.parent))
    from zoo_models import rasbt_swa

    module = getattr(rasbt_swa, factory)().double().eval()
    lm = LM(module, factory, Sizes(vocab_size=50, d_model=32, n_heads=4, n_layers=3, block_size=16), None)
    ctx = Context(lm, None, None, first_call(lm), block_check=lambda *a, **k: None)
    return ctx


def test_a_prefill_through_the_cache_must_equal_a_plain_forward():
    """LLMs-from-scratch PR #1013: the sliding-window cache trimmed before attention leaves a long prompt's first
    queries without keys when it goes through the cache; the fixed file passes (the zoo's slow cases run the whole
    check on both)."""
    from anatomy.doctor.model.cache_flag import cache_flag_findings

    ctx = _swa("tiny_swa")
    assert cache_flag_findings(ctx) == [] and ctx.found["cache_flag"] == "use_cache"
    (f,) = cache_flag_findings(_swa("tiny_swa_trim_first"))
    assert f.probe == "lm_cache" and f.severity == "error" and "the prompt" in f.en
