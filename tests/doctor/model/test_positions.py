"""Where the positions enter: missing, added twice, added after the blocks, the embedding scaled twice; rotary
positions inside the attention are found as such."""

from __future__ import annotations

from tests.doctor.model.styles import HERE, line_of, lines, run, variant

NANO_SUM = "x = self.transformer.drop(tok_emb + pos_emb)"


def test_positions_missing(tmp_path):
    path = variant(tmp_path, "nano_style.py", NANO_SUM, "x = self.transformer.drop(tok_emb)")
    report = run(path)
    assert report.faults == {"positions_missing"}
    assert line_of(path, "tok_emb = self.transformer.wte(idx)") in lines(report, "positions_missing")


def test_positions_added_twice(tmp_path):
    path = variant(
        tmp_path,
        "nano_style.py",
        "        for block in self.transformer.h:",
        "        x = x + pos_emb\n        for block in self.transformer.h:",
    )
    report = run(path)
    assert report.faults == {"positions_added_twice"}
    assert line_of(path, "x = x + pos_emb") in lines(report, "positions_added_twice")


def test_positions_added_after_the_blocks(tmp_path):
    path = variant(tmp_path, "lecture_style.py", "        x = tok_emb + pos_emb\n", "        x = tok_emb\n")
    path.write_text(path.read_text().replace("x = self.ln_f(x)", "x = self.ln_f(x + pos_emb)"))
    report = run(path, "GPTLanguageModel")
    assert report.faults == {"positions_after_blocks"}
    assert line_of(path, "x = self.ln_f(x + pos_emb)") in lines(report, "positions_after_blocks")


def test_embedding_scaled_twice(tmp_path):
    path = variant(
        tmp_path,
        "course_style.py",
        "        h = h + self.pe[:t]",
        "        h = h * math.sqrt(self.d_model)\n        h = h + self.pe[:t]",
    )
    report = run(path)
    assert report.faults == {"embedding_scaled_twice"}
    got = lines(report, "embedding_scaled_twice")
    assert {line_of(path, "h = h * math.sqrt(self.d_model)"), line_of(path, "# 嵌入乘以")} <= got


def test_where_the_positions_enter():
    assert run(HERE / "nano_style.py").found["positions"] == "added before the blocks"
    assert run(HERE / "llama_style.py", "Transformer").found["positions"].startswith("inside the attention")
    course = run(HERE / "course_style.py")
    assert abs(course.found["embedding_scale"] - 4.0) < 1e-9 and abs(course.found["positions_scale"] - 1) < 1e-9


def test_rotary_positions_under_a_sliding_window_are_found(tmp_path):
    """Mistral's and Gemma 2's local attention: with a window of 3 the last position never sees the first tokens,
    so swapping those showed nothing and the rotary model was said to have no positions; the two tokens just
    before the last are swapped instead."""
    window = "            mask = torch.triu(mask, diagonal=1)\n"
    path = variant(
        tmp_path,
        "llama_style.py",
        window,
        window + "            mask = mask + torch.tril(torch.full((seqlen, seqlen), float('-inf')), diagonal=-3)\n",
    )
    report = run(path, "Transformer")  # (its decoding steps get no window: the generate probe's error is right)
    assert "positions_missing" not in report.faults
    assert report.found["positions"] == "inside the attention (rotary or relative)"
