"""The model doctor on every causal language model of the installed transformers: false alarms, named faults and
what it could not tell, one architecture after another.

A developer script for the doctor's truth on code nobody here wrote: each architecture is built at a tiny size from
its own config class (``AutoConfig.for_model``), eager attention, seed 0, with the standard attention scale (a config
whose default scales the scores otherwise, Gemma 2/3's ``query_pre_attn_scalar`` or Granite's
``attention_multiplier``, is set to 1/sqrt(head_dim), so that a finding there would be a false alarm), and checked
with ``anatomy check --kind lm`` in a subprocess of its own::

    python tools/hf_sweep.py                  # every architecture below (about 10 minutes on 2 cores)
    python tools/hf_sweep.py llama mixtral    # some of them
    python tools/hf_sweep.py --json out.json  # the rows, for a comparison between two runs

A correct model must get no error. The one architecture whose published code differs from the post on purpose is
listed in ``EXPECTED`` with the fault the doctor must name (GPT-Neo does not divide its scores by sqrt(d_k)). Exit
status 1 when an architecture gets an error it should not, or misses the expected one, 0 otherwise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

SIZES = dict(
    vocab_size=64,
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=64,
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)
# per architecture: sizes its config names otherwise, or a scale set to the standard 1/sqrt(head_dim)
OVERRIDES: dict[str, dict[str, object]] = {
    "falcon": dict(head_dim=None),  # a property of FalconConfig, not a setting
    "gpt_neo": dict(num_layers=2, attention_types=[[["global", "local"], 1]], window_size=4),
    "gptj": dict(rotary_dim=4),
    "codegen": dict(rotary_dim=4),
    "gemma2": dict(query_pre_attn_scalar=8),
    "gemma3_text": dict(query_pre_attn_scalar=8),
    "granite": dict(attention_multiplier=8**-0.5),
    "granitemoe": dict(attention_multiplier=8**-0.5),
}
EXPECTED = {"gpt_neo": "no_scaling"}
ARCHITECTURES = [
    "gpt2", "openai-gpt", "gpt_neo", "gpt_neox", "gptj", "opt", "codegen", "falcon", "gpt_bigcode", "mpt", "phi",
    "phi3", "mistral", "gemma", "gemma2", "gemma3_text", "stablelm", "starcoder2", "olmo", "olmo2", "olmo3",
    "cohere", "cohere2", "granite", "granitemoe", "helium", "glm", "glm4", "persimmon", "qwen2", "qwen3", "smollm3",
    "biogpt", "mixtral", "qwen2_moe", "jetmoe", "gpt_oss", "llama", "bloom", "xglm", "ctrl", "nemotron", "exaone4",
    "arcee", "seed_oss", "ministral", "apertus",
]  # fmt: skip


def build(model_type: str):
    """The architecture at the tiny sizes above, eager attention, eval mode, seed 0."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    kw = {**SIZES, **OVERRIDES.get(model_type, {})}
    config = AutoConfig.for_model(model_type, **{k: v for k, v in kw.items() if v is not None})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()


def _factory(model_type: str):
    def make():
        return build(model_type)

    return make


for _m in ARCHITECTURES:
    globals()["tiny_" + _m.replace("-", "_")] = _factory(_m)


def sweep_one(model_type: str, timeout: float = 600) -> dict[str, object]:
    cmd = [sys.executable, "-m", "anatomy", "check", f"{__file__}:M", "--kind", "lm", "--format", "json"]
    cmd += ["--factory", "tiny_" + model_type.replace("-", "_")]
    start = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"model": model_type, "outcome": "timeout", "seconds": timeout}
    row: dict[str, object] = {"model": model_type, "seconds": round(time.perf_counter() - start, 1)}
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {**row, "outcome": "refused", "why": lines[-1] if lines else f"exit {done.returncode}"}
    errors = sorted({f["fault"] or f["probe"] for f in report["findings"] if f["severity"] == "error"})
    warnings = sorted({f["fault"] or f["probe"] for f in report["findings"] if f["severity"] == "warning"})
    layers = report.get("layers") or []
    checked = sum(1 for r in layers if r.get("status") == "checked")
    expected = EXPECTED.get(model_type)
    if expected:
        outcome = "named" if errors == [expected] else "missed"
    else:
        outcome = "false alarm" if errors else "ok"
    return {**row, "outcome": outcome, "errors": errors, "warnings": warnings, "blocks": f"{checked}/{len(layers)}"}


def main(argv: list[str]) -> int:
    out = None
    if "--json" in argv:
        i = argv.index("--json")
        out, argv = argv[i + 1], argv[:i] + argv[i + 2 :]
    rows = []
    for m in argv or ARCHITECTURES:
        row = sweep_one(m)
        rows.append(row)
        more = row.get("why") or f"errors {row.get('errors')} warnings {row.get('warnings')} blocks {row.get('blocks')}"
        print(f"{m:14s} {row['outcome']:12s} {row['seconds']:6.1f}s  {more}", flush=True)
    counts: dict[str, int] = {}
    for r in rows:
        counts[str(r["outcome"])] = counts.get(str(r["outcome"]), 0) + 1
    unchecked = [r["model"] for r in rows if str(r.get("blocks", "")).startswith("0/")]
    print("total:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), f"of {len(rows)}")
    if unchecked:
        print("blocks not checked alone (the PASS covers the model as a whole only):", ", ".join(map(str, unchecked)))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)
    return 1 if counts.get("false alarm") or counts.get("missed") else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
