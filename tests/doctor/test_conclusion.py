"""The check's conclusion (``conclusion.py``): in a block of two attention sub-layers the caller's mask reaches the
first only, so a leak found with no named fault is that design's warning, not an error of the code."""

from __future__ import annotations

from anatomy.doctor.conclusion import _mask_on_one_sub_layer
from anatomy.doctor.report.findings import Finding


def test_leaks_of_a_two_attention_block_become_warnings_of_its_design():
    leak = Finding("padding_leak", "error", "padded keys change the output", "填充的 key 改变了输出")
    causal = Finding("causal_leak", "error", "future tokens change the output", "未来 token 改变了输出")
    named = Finding("padding_leak", "error", "mask on queries", "mask 加在 query 上", fault="padding_mask_on_queries")
    other = Finding("scaling", "error", "scores not scaled", "分数未缩放")
    findings = [leak, causal, named, other]
    _mask_on_one_sub_layer(findings)
    assert [f.severity for f in findings] == ["warning", "warning", "error", "error"]
    assert "second attention sub-layer" in leak.en and "第二个注意力子层" in leak.zh
    assert named.en == "mask on queries" and other.en == "scores not scaled"  # a named fault stays the code's error
