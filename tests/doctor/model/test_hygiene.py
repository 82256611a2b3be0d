"""Dropout in eval(), tying by copy, the final norm of a Pre-Norm stack."""

from __future__ import annotations

from tests.doctor.model.styles import HERE, line_of, lines, run, variant


def test_functional_dropout_in_eval(tmp_path):
    path = variant(
        tmp_path, "nano_style.py", "        att = self.attn_dropout(att)", "        att = F.dropout(att, 0.1)"
    )
    report = run(path)
    assert report.faults == {"functional_dropout_in_eval"}  # the block doctor's dropout_at_eval folded into it
    assert line_of(path, "att = F.dropout(att, 0.1)") in lines(report, "functional_dropout_in_eval")
    assert report.found["deterministic"] is False
    assert [e for e in report.errors if e.fault is None and e.explained_by is None] == []


def test_sdpa_dropout_p_in_eval(tmp_path):
    """nanoGPT before 7399dfe: scaled_dot_product_attention(..., dropout_p=self.dropout) drops in eval() too."""
    path = variant(
        tmp_path, "nano_style.py", "        att = (q @ k.transpose(-2, -1))", "        att0 = (q @ k.transpose(-2, -1))"
    )
    text = path.read_text()
    start = text.index("        att0 = ")
    end = text.index("        y = att @ v\n")
    sdpa = "        y = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)\n"
    path.write_text(text[:start] + sdpa + text[end + len("        y = att @ v\n") :])
    report = run(path)
    assert report.faults == {"functional_dropout_in_eval"}
    assert line_of(path, "y = F.scaled_dot_product_attention(") in lines(report, "functional_dropout_in_eval")


def test_tied_by_copy(tmp_path):
    path = variant(
        tmp_path,
        "course_style.py",
        "self.head.weight = self.embed.weight",
        "self.head.weight = nn.Parameter(self.embed.weight.clone())",
    )
    report = run(path)
    assert report.faults == {"tied_by_copy"} and report.errors == []
    assert line_of(path, "nn.Parameter(self.embed.weight.clone())") in lines(report, "tied_by_copy")


def test_tying_found():
    assert run(HERE / "nano_style.py").found["tying"] == "shared"
    assert run(HERE / "lecture_style.py", "GPTLanguageModel").found["tying"] == "untied"


def test_final_norm_missing(tmp_path):
    path = variant(tmp_path, "nano_style.py", "        x = self.transformer.ln_f(x)\n", "")
    report = run(path)
    assert report.faults == {"final_norm_missing"} and report.errors == []
    assert line_of(path, "logits = self.lm_head(x)") in lines(report, "final_norm_missing")


def test_a_post_norm_stack_needs_no_final_norm():
    report = run(HERE / "course_style.py")
    assert report.found["final_norm"] is None and "final_norm_missing" not in report.faults
