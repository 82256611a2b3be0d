"""init_from=DIR: nanoGPT's everyday workflow. A tiny GPT-2 is pretrained here (plain torch, transformers' own
model, a byte-level BPE tokenizer built offline), saved as a Hugging Face directory, converted, and fine-tuned on
an embedded corpus; the run keeps the checkpoint's tokenizer and architecture."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from anatomy.cli.main import main
from anatomy.data import corpora
from anatomy.models import build_model
from anatomy.training.loop import train
from anatomy.training.options import parse_words, resolve

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

EOT = "<|endoftext|>"
RUN = [
    "task=lm",
    "corpus=shakespeare",
    "steps=30",
    "batch_size=8",
    "block_size=32",
    "lr=2e-3",
    "min_lr=2e-4",
    "warmup_steps=5",
    "eval_every=15",
    "eval_batches=6",
    "save_every=30",
    "progress=false",
    "plot=false",
]


def _tokenizer(text: str):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=384, special_tokens=[EOT], show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([text], trainer=trainer)
    return tok


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    """``{"hf": pretrained HF GPT-2 + tokenizer, "ours": it converted, "scratch": same config and tokenizer, random
    weights}``. Pretraining: 120 AdamW steps of transformers' GPT2LMHeadModel on Shakespeare's train split."""
    root = tmp_path_factory.mktemp("finetune")
    text = corpora.corpus_splits("shakespeare")["train"][:60_000]
    tok = _tokenizer(text)
    ids = torch.tensor(tok.encode(text).ids)
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        n_positions=64,
        vocab_size=tok.get_vocab_size(),
        bos_token_id=0,
        eos_token_id=0,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    model = transformers.GPT2LMHeadModel(config)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    for _ in range(120):
        starts = torch.randint(len(ids) - 33, (16,), generator=g)
        x = torch.stack([ids[s : s + 32] for s in starts.tolist()])  # (B, T)
        model(x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
    model.save_pretrained(root / "hf")
    transformers.GPT2TokenizerFast(tokenizer_object=tok, eos_token=EOT, bos_token=EOT).save_pretrained(root / "hf")
    assert main(["convert", "--from-hf", str(root / "hf"), "--out", str(root / "ours")]) == 0
    from anatomy.data.tokenizers import load_tokenizer
    from anatomy.interop.safetensors_io import load_pretrained, save_pretrained

    converted = load_pretrained(root / "ours")
    torch.manual_seed(1)
    save_pretrained(build_model(converted.config), root / "scratch")  # from scratch: same architecture, random init
    load_tokenizer(root / "ours").save(root / "scratch")
    return root


def _small_corpus(tmp_path):
    """30k characters of Shakespeare's train split (paragraphs kept), for the tests that only need some text."""
    path = tmp_path / "small.txt"
    path.write_text(corpora.corpus_splits("shakespeare")["train"][:30_000], encoding="utf-8")
    return path


def _run(words: list[str], out, capsys) -> tuple[dict, str]:
    options, model = resolve(None, parse_words(words))
    train(options, model, out)
    return json.loads((out / "summary.json").read_text()), capsys.readouterr().err


def test_fine_tuning_beats_the_start_and_a_run_from_scratch(dirs, tmp_path, capsys):
    tuned, log = _run([*RUN, f"init_from={dirs / 'ours'}"], tmp_path / "tuned", capsys)
    scratch, _ = _run([*RUN, f"init_from={dirs / 'scratch'}"], tmp_path / "scratch", capsys)
    assert f"init_from {dirs / 'ours'}: its weights and tokenizer (HFTokenizer, " in log
    assert "step 0 (init_from, before fine-tuning): val loss " in log
    # the same val batches before and after: the fine-tuned model is better than where it started ...
    assert tuned["best_val_loss"] < tuned["init_val_loss"] - 0.05
    # ... and better than the same 30 steps from random weights (same architecture, tokenizer, data, seed)
    assert tuned["best_val_loss"] < scratch["best_val_loss"] - 0.3
    assert tuned["test_loss"] < scratch["test_loss"] - 0.3
    # the run's checkpoint carries the converted model's tokenizer: generate and evaluate --file use it
    last = tmp_path / "tuned" / "checkpoints" / "step-000030"
    assert json.loads((last / "tokenizer_config.json").read_text())["eos_token"] == EOT
    assert (
        main(
            [
                "generate",
                "--checkpoint",
                str(tmp_path / "tuned"),
                "--prompt",
                "ROMEO:",
                "--max-new-tokens",
                "5",
                "--greedy",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith("ROMEO:")


def test_an_hf_directory_directly_and_a_resume_without_it(dirs, tmp_path, capsys):
    hf = tmp_path / "hf"
    shutil.copytree(dirs / "hf", hf)
    words = [*RUN, f"corpus={_small_corpus(tmp_path)}", "steps=4", "eval_every=4", "save_every=2", f"init_from={hf}"]
    summary, log = _run(words, tmp_path / "run", capsys)
    assert f"init_from {hf}: GPT2LMHeadModel weights and tokenizer (HFTokenizer, " in log
    shutil.rmtree(hf)  # a resumed run needs only its own checkpoint
    assert main(["train", "--resume", str(tmp_path / "run"), "steps=6"]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["steps"] == 6


@pytest.mark.parametrize(
    "word, expected",
    [
        (
            "n_layers=3",
            "n_layers=3 would change the architecture that init_from={d} fixes (n_layers=2 there); with "
            "init_from only dropout, attention_dropout, kernel may be given",
        ),
        ("positional=rope", "positional='rope' would change the architecture"),
        ("tokenizer=bpe", "tokenizer='bpe' cannot be given with init_from: the checkpoint's tokenizer is kept"),
        ("model=llama", "model='llama' cannot be given with init_from: the checkpoint fixes the architecture"),
        ("block_size=65", "block_size=65 is longer than the checkpoint's max_seq_len=64 (init_from={d})"),
        (
            "task=classify",
            "init_from={d}: task=classify needs a checkpoint of architecture encoder or classifier; it "
            "holds a decoder_lm model",
        ),
    ],
)
def test_overrides_that_change_the_architecture_are_refused_by_name(dirs, tmp_path, capsys, word, expected):
    d = dirs / "ours"
    assert main(["train", *RUN, f"init_from={d}", word, "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected.format(d=d) in err[0], err
    assert not (tmp_path / "r" / "checkpoints").exists()


def test_free_fields_and_a_presets_model_fields(dirs, tmp_path):
    """dropout may change; a preset's own model fields (char-shakespeare's n_layers=4 ...) are not applied."""
    options, model = resolve("char-shakespeare", parse_words([f"init_from={dirs / 'ours'}", "dropout=0.1"]))
    assert model == {"dropout": 0.1} and options.corpus == "shakespeare" and options.steps == 2000
    options = options.__class__(**{**options.to_dict(), "corpus": str(_small_corpus(tmp_path))})
    from anatomy.training.finetune import load_start
    from anatomy.training.tasks import LMTask

    start = load_start(dirs / "ours")
    task = LMTask(options.__class__(**{**options.to_dict(), "block_size": 32}), start.tokenizer)
    config = start.config_for(task, task.options, model)
    assert config == start.config.replace(dropout=0.1)


def _tsv(path, n_labels: int):
    words = ["good", "bad", "fine", "awful", "great", "poor"]
    rows = [f"{i % n_labels}\t{words[i % len(words)]} film number {i}" for i in range(60)]
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_classify_gets_a_new_head_for_a_new_label_set(tmp_path, capsys):
    from anatomy.training.checkpoint import load_model
    from anatomy.training.finetune import load_start
    from anatomy.training.tasks import ClassifyTask

    base = [
        "task=classify",
        "model=bert",
        "d_model=16",
        "n_heads=2",
        "n_layers=1",
        "d_ff=32",
        "batch_size=4",
        "block_size=16",
        "eval_batches=2",
        "warmup_steps=1",
        "steps=2",
        "eval_every=2",
        "progress=false",
        "plot=false",
        "baselines=false",
        "type_vocab_size=0",
    ]
    two = _tsv(tmp_path / "two.tsv", 2)
    assert main(["train", *base, f"dataset={two}", "--out", str(tmp_path / "clf")]) == 0
    trained, _, where = load_model(tmp_path / "clf")
    capsys.readouterr()
    options, _ = resolve(
        None,
        parse_words(
            [
                f"dataset={_tsv(tmp_path / 'three.tsv', 3)}",
                "task=classify",
                "block_size=16",
                f"init_from={tmp_path / 'clf'}",
            ]
        ),
    )
    start = load_start(options.init_from)
    task = ClassifyTask(options, start.tokenizer)
    model = build_model(start.config_for(task, options, {}))
    said = []
    start.load_into(model, task, said.append)
    assert model.config.num_labels == 3 and model.classifier.weight.shape == (3, 16)
    assert said[1] == (
        f"init_from {where}: a new classification head (classifier.bias, classifier.weight, random "
        "init) for 3 labels (0, 1, 2); the checkpoint had 2 labels (0, 1)"
    )
    body = {k: v for k, v in trained.state_dict().items() if not k.startswith("classifier.")}
    assert all(torch.equal(model.state_dict()[k], v) for k, v in body.items())
    # the same label set keeps the head
    options, _ = resolve(
        None, parse_words([f"dataset={two}", "task=classify", "block_size=16", f"init_from={tmp_path / 'clf'}"])
    )
    task = ClassifyTask(options, start.tokenizer)
    model, said = build_model(start.config_for(task, options, {})), []
    start.load_into(model, task, said.append)
    assert len(said) == 1 and torch.equal(model.classifier.weight, trained.classifier.weight)


def test_classify_from_an_hf_bert_encoder(tmp_path, capsys):
    """A Hugging Face BertModel directory with a WordPiece tokenizer ([CLS] ... [SEP]): the run keeps that tokenizer,
    adds a head (said in the log), and predict/--to-hf carry the tokenizer on, cls_token included."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok.train_from_iterator(
        ["good bad fine awful great poor film number"] * 10 + [str(i) for i in range(60)],
        trainer=trainers.WordPieceTrainer(vocab_size=200, special_tokens=specials, show_progress=False),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))],
    )
    hf = tmp_path / "bert"
    transformers.BertTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
    ).save_pretrained(hf)
    torch.manual_seed(0)
    transformers.BertModel(
        transformers.BertConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=16,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=32,
            max_position_embeddings=32,
        )
    ).save_pretrained(hf)
    data = _tsv(tmp_path / "three.tsv", 3)
    assert (
        main(
            [
                "train",
                "task=classify",
                f"dataset={data}",
                f"init_from={hf}",
                "steps=2",
                "batch_size=4",
                "block_size=16",
                "eval_every=2",
                "eval_batches=1",
                "progress=false",
                "plot=false",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 0
    )
    log = capsys.readouterr().err
    assert f"init_from {hf}: BertModel weights and tokenizer (HFTokenizer, {tok.get_vocab_size()} tokens)" in log
    assert (
        f"init_from {hf}: a new classification head (classifier.bias, classifier.weight, random init) for 3 "
        "labels (0, 1, 2); the checkpoint has no classification head"
    ) in log
    assert main(["predict", "--checkpoint", str(tmp_path / "run"), "--text", "good film", "--format", "json"]) == 0
    probs = json.loads(capsys.readouterr().out)[0]["probabilities"]
    assert set(probs) == {"0", "1", "2"} and sum(probs.values()) == pytest.approx(1.0)
    last = sorted((tmp_path / "run" / "checkpoints").glob("step-*"))[-1]  # beside latest.json
    assert json.loads((last / "tokenizer_config.json").read_text())["cls_token"] == "[CLS]"
