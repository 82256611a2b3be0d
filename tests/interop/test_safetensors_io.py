"""Our checkpoints: config.json + model.safetensors, bit-exact round trips, tied weights, shards, never pickle."""

from __future__ import annotations

import json
import pickle

import pytest
import torch
from safetensors import safe_open

from anatomy import ModelConfig, build_model, load_pretrained, save_pretrained
from anatomy.interop.safetensors_io import CheckpointError

SMALL = dict(vocab_size=64, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32)
PRESETS = {
    "gpt2": dict(SMALL),
    "llama": dict(SMALL, n_kv_heads=2),
    "bert-classifier": dict(SMALL, architecture="classifier", num_labels=3),
    "t5": dict(SMALL, n_decoder_layers=3),
    "vaswani-2017": dict(SMALL),
    "seed-block": {},
}


def _model(name: str, **overrides):
    torch.manual_seed(0)
    preset = "bert" if name.startswith("bert") else name
    model = build_model(ModelConfig.from_preset(preset, **{**PRESETS[name], **overrides}))
    with torch.no_grad():
        for p in model.parameters():  # norms and biases away from 1 and 0
            p.add_(0.1 * torch.randn_like(p))
    return model.eval()


def _inputs(model):
    ids = torch.randint(1, model.config.vocab_size, (2, 7), generator=torch.Generator().manual_seed(0))
    if model.config.architecture == "seq2seq":
        return {"input_ids": ids, "decoder_input_ids": ids[:, :4]}
    return {"input_ids": ids}


def _assert_identical(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        assert sa[key].dtype == sb[key].dtype and torch.equal(sa[key], sb[key]), key
    with torch.no_grad():
        out_a, out_b = a(**_inputs(a)), b(**_inputs(b))
    field = "last_hidden_state" if a.config.architecture == "encoder" else "logits"
    assert torch.equal(getattr(out_a, field), getattr(out_b, field))


@pytest.mark.parametrize("name", PRESETS)
def test_round_trip_is_bit_exact(tmp_path, name):
    model = _model(name)
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path)
    assert type(loaded) is type(model) and loaded.config == model.config and not loaded.training
    _assert_identical(model, loaded)


def test_tied_weights_are_stored_once_and_tied_again(tmp_path):
    model = _model("t5")
    save_pretrained(model, tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    meta = json.loads((tmp_path / "config.json").read_text())
    embed = [k for k in keys if k.endswith("embed_tokens.weight")]
    assert len(embed) == 1 and "lm_head.weight" not in keys
    assert set(meta["tied"]) == {
        "lm_head.weight",
        "encoder.embeddings.embed_tokens.weight",
        "decoder.embeddings.embed_tokens.weight",
    } - set(embed)
    loaded = load_pretrained(tmp_path)
    assert loaded.lm_head.weight is loaded.encoder.embeddings.embed_tokens.weight
    assert loaded.output_scale == model.output_scale


def test_untied_head_round_trips(tmp_path):
    model = _model("llama", tie_embeddings=False)
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path)
    assert loaded.lm_head.weight is not loaded.embeddings.embed_tokens.weight
    _assert_identical(model, loaded)


def test_bfloat16_stays_bfloat16_and_exact(tmp_path):
    model = _model("llama").to(torch.bfloat16)
    save_pretrained(model, tmp_path)
    loaded = load_pretrained(tmp_path)
    assert {p.dtype for p in loaded.parameters()} == {torch.bfloat16}
    _assert_identical(model, loaded)


def test_sharded_save_and_load(tmp_path):
    model = _model("gpt2")
    save_pretrained(model, tmp_path, max_shard_size=40_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1 and not (tmp_path / "model.safetensors").exists()
    _assert_identical(model, load_pretrained(tmp_path))
    save_pretrained(model, tmp_path)  # saving again unsharded leaves no stale shards behind
    assert not list(tmp_path.glob("model-*-of-*.safetensors"))
    _assert_identical(model, load_pretrained(tmp_path))


# ------------------------------------------------------------------------------------------ bad input


def test_truncated_and_corrupted_files_name_the_file(tmp_path):
    save_pretrained(_model("gpt2"), tmp_path)
    weights = tmp_path / "model.safetensors"
    data = weights.read_bytes()
    for broken in (data[: len(data) // 2], data[:6], b"\x00" * 64, data[:8] + b"{{{{" + data[12:]):
        weights.write_bytes(broken)
        with pytest.raises(CheckpointError, match=f"{weights}: not a readable safetensors file"):
            load_pretrained(tmp_path)


def test_missing_shard_and_unsafe_shard_names_are_refused(tmp_path):
    save_pretrained(_model("gpt2"), tmp_path, max_shard_size=40_000)
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    first = sorted(set(index["weight_map"].values()))[0]
    (tmp_path / first).unlink()
    with pytest.raises(CheckpointError, match=f"{first}: shard listed in model.safetensors.index.json is missing"):
        load_pretrained(tmp_path)
    index["weight_map"] = {k: "../elsewhere.safetensors" for k in index["weight_map"]}
    index_path.write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="must be a plain file name"):
        load_pretrained(tmp_path)


def test_config_shapes_disagreeing_with_weights_name_key_and_shapes(tmp_path):
    save_pretrained(_model("gpt2"), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["config"]["d_ff"] = 48
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(
        CheckpointError,
        match=r"'stack\.blocks\.0\.ffn\.up_proj\.weight' has shape \(64, 32\) "
        r"in the file, but config\.json implies \(48, 32\)",
    ):
        load_pretrained(tmp_path)


class _Payload:
    def __init__(self, path) -> None:
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))  # unpickling creates the file


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "weights.ckpt"])
def test_pickle_files_are_refused_without_running_them(tmp_path, name):
    marker = tmp_path / "pwned"
    save_pretrained(_model("gpt2"), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / name).write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(CheckpointError, match=f"{name}: refusing to read a pickle checkpoint"):
        load_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="refusing to read a pickle checkpoint"):
        load_pretrained(tmp_path / name)
    assert not marker.exists()
    pickle.loads((tmp_path / name).read_bytes()).close()  # the payload is real: unpickling does create it
    assert marker.exists()


def test_other_bad_directories(tmp_path):
    with pytest.raises(CheckpointError, match="no such checkpoint directory"):
        load_pretrained(tmp_path / "missing")
    with pytest.raises(CheckpointError, match="config.json: missing"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="config.json: not valid JSON"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hello": 1}))
    with pytest.raises(CheckpointError, match="neither an anatomy checkpoint"):
        load_pretrained(tmp_path)
    save_pretrained(_model("gpt2"), tmp_path)
    meta = json.loads((tmp_path / "config.json").read_text())
    meta["config"]["wings"] = 2
    (tmp_path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="unknown config field.*wings"):
        load_pretrained(tmp_path)
    with pytest.raises(TypeError, match="built by anatomy.build_model"):
        save_pretrained(torch.nn.Linear(2, 2), tmp_path / "x")


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "model.safetensors.index.json"])
def test_hostile_json_files_of_a_checkpoint_are_refused_in_one_line_naming_them(tmp_path, name):
    """A config nested 100000 levels deep once ended in a raw RecursionError; every JSON file load_pretrained
    reads is now refused in one line naming it: too deep, not JSON, NaN, not UTF-8, the wrong top-level type."""
    d = tmp_path / "ckpt"
    save_pretrained(_model("gpt2"), d, max_shard_size=20_000 if name.startswith("model.") else None)
    path = d / name
    hostile = {
        "[" * 100_000: "nested more than 200 levels deep",
        '{"a": ': "not valid JSON (Expecting value at line 1, column 7)",
        '{"a": NaN}': "field 'a' is NaN, which JSON does not allow",
        "[1]": "got an array",
        b'{"a": "\xff"}': "not UTF-8 text (invalid start byte at byte 7)",
    }
    for text, said in hostile.items():
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        with pytest.raises(CheckpointError) as got:
            load_pretrained(d)
        message = str(got.value)
        assert message.startswith(f"{path}: ") and said in message and "\n" not in message, message
