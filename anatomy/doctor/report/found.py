"""The report's "found" block: how the module is called, its mask, causality, the mapping, the block's wiring and
the diagnosis in one line each, in English or Chinese (``report.py`` renders the rest)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from anatomy.doctor.report.words import SENSE_SHORT, SENSE_TEXT, _t, fmt

if TYPE_CHECKING:
    from anatomy.doctor.report.findings import Report


def _mapping_text(mapping: dict[str, Any] | None, lang: str) -> str:
    """``q_proj/k_proj/v_proj ← qkv [rows q|k|v], o_proj ← proj``: weights only, fused sources grouped."""
    if not mapping:
        return _t(lang, "not mapped", "未能对应")
    groups: dict[tuple[str, str], list[str]] = {}
    for ref, user, note in mapping["pairs"]:
        if ref.endswith(".bias"):
            continue
        user = user.removesuffix(".weight")
        groups.setdefault((user, re.sub(r" #\d+", "", note)), []).append(ref.removesuffix(".weight"))
    pairs = ["/".join(refs) + f" ← {user}" + (f" [{note}]" if note else "") for (user, note), refs in groups.items()]
    return f"{mapping['style']}: " + ", ".join(pairs)


def found_lines(r: Report, lang: str) -> list[tuple[str, str]]:
    """``(key, text)`` rows for the report ``r``."""
    f = r.found
    rows = []
    ret = f.get("returns", "out")
    if f.get("weights_shape"):
        ret = f"(out, weights {f['weights_shape']})"
    rows.append((_t(lang, "call", "调用"), f"{f.get('call', '?')} → {ret}"))
    for note in f.get("call_notes") or []:  # what the doctor adapted to call the module (loading/subject.py)
        rows.append(("", note["zh" if lang == "zh" else "en"]))
    for what in f.get("ignored_returns") or []:
        rows.append(
            (
                "",
                _t(
                    lang,
                    f"also returned a tensor of shape {what}: not attention weights (a cache or a state?), ignored",
                    f"还返回了一个形状为 {what} 的张量：不是注意力权重（缓存或状态？），已忽略",
                ),
            )
        )
    m = f.get("mask")
    if m is None:
        rows.append(("mask", _t(lang, "forward takes no mask", "forward 不接受 mask")))
    elif m.get("examined") is False:
        rows.append(("mask", _t(lang, "not examined", "未检查")))
    elif m.get("sense") is None:
        rows.append(
            (
                "mask",
                _t(
                    lang,
                    f"none of {m.get('tried')} formats was accepted ({m.get('last_error')})",
                    f"试过的 {m.get('tried')} 种格式都不被接受（{m.get('last_error')}）",
                ),
            )
        )
    else:
        sense = SENSE_TEXT[m["sense"]][1 if lang == "zh" else 0]
        text = _t(lang, f"{sense}, shaped {m['layout']}", f"{sense}，形状 {m['layout']}")
        if m.get("also"):
            also = _t(lang, ", ", "、").join(SENSE_SHORT[s][1 if lang == "zh" else 0] for s in m["also"])
            text += _t(lang, f" (also accepted: {also})", f"（也接受：{also}）")
        if m.get("all_leak"):
            text += _t(
                lang,
                f"; every one of the {len(m.get('leaks') or [])} conventions that act leaks the padding",
                f"；起作用的 {len(m.get('leaks') or [])} 种约定全部泄漏 padding",
            )
        rows.append(("mask", text))
    c = f.get("causal", {})
    src = c.get("source")
    causal_text = {
        "flag": _t(lang, "yes (--causal): the module masks the future itself", "是（--causal）：模块自己遮住未来"),
        "detected": _t(
            lang,
            "yes (detected: every output depends on itself and every earlier token, never on a "
            "token two or more steps ahead)",
            "是（检测到：每个输出都依赖自身和所有更早的 token，从不依赖两步以后的 token）",
        ),
        "mask": _t(
            lang,
            f"no; a causal mask is passed as {c.get('layout')} for the causal probe",
            f"否；因果探针以 {c.get('layout')} 传入因果 mask",
        ),
        "none": _t(lang, "no (pass --causal for a decoder's self-attention)", "否（decoder 的自注意力请加 --causal）"),
        "diagnosis": _t(
            lang,
            "yes, read from the diagnosis: only a causal reference with the fault below reproduces "
            "your output (the detection could not see it: the fault mixes tokens)",
            "是（由诊断得出）：只有带下述错误的因果参考实现能复现你的输出"
            "（该错误把 token 混在一起，检测因此看不出因果）",
        ),
    }.get(src, "?")
    rows.append((_t(lang, "causal", "因果"), causal_text))
    rows.append((_t(lang, "weights", "权重"), _mapping_text(f.get("mapping"), lang)))
    obs = f.get("observed") or {}
    if obs.get("recorded") is False:
        rows.append(
            (
                "",
                _t(
                    lang,
                    f"the recorder could not follow one forward ({obs.get('reason')}); the mapping "
                    "comes from names only (name the rest with --map)",
                    f"记录器无法跟踪一次 forward（{obs.get('reason')}）；映射只来自参数名（其余请用 --map 指定）",
                ),
            )
        )
    if f.get("mapping") and f["mapping"].get("missing"):
        rows.append(("", _t(lang, "missing: ", "缺少：") + ", ".join(f["mapping"]["missing"])))
    qk = (f.get("mapping") or {}).get("qk_norm")
    if qk:
        per_head = qk["width"] == r.settings.get("head_dim")
        over = (
            _t(lang, "head_dim", " head_dim")
            if per_head
            else _t(
                lang,
                f"all {qk['width']} features (before the head split; ours is per head)",
                f"全部 {qk['width']} 个特征（拆头之前；参考实现按头归一化）",
            )
        )
        paths = ", ".join(p for p in (qk["q_norm"], qk["k_norm"]) if p) or "--map"
        rows.append(
            (
                "qk-norm",
                _t(
                    lang,
                    f"{qk['kind']} over {over}, eps {qk['eps']:g} · {paths}",
                    f"{qk['kind']}，作用于{over}，eps {qk['eps']:g} · {paths}",
                ),
            )
        )
    b = f.get("block")
    if b:
        place = {
            "pre": "pre-norm: x + f(norm(x))",
            "post": "post-norm: norm(x + f(x))",
            "norm_on_residual_path": _t(
                lang, "miswired pre-norm: x = norm(x); x = x + f(x)", "接错的 pre-norm：x = norm(x); x = x + f(x)"
            ),
            "pre+final": _t(lang, "pre-norm with a norm at the end", "pre-norm，末尾还有一个 norm"),
            "res_post": _t(lang, "res-post-norm: x + norm(f(x)) (Swin v2)", "res-post-norm：x + norm(f(x))（Swin v2）"),
        }.get(b.get("placement"), _t(lang, "not recognised", "未识别"))
        rows.append(("norm", place + " · " + (", ".join(b.get("norms") or []) or "-")))
        ffn = f"d_ff={b.get('d_ff')}" if b.get("d_ff") else _t(lang, "not found", "未找到")
        if b.get("activation"):
            ffn += f", {b['activation']}"
        rows.append(("ffn", ffn))
    d = r.diagnosis or {}
    st = d.get("status")
    if st == "matches":
        var = ", ".join(f"{v}" for v in (d.get("variant") or {}).values())
        text = _t(
            lang,
            f"your output equals ours within {fmt(d.get('max_abs_diff_vs_reference'))}",
            f"你的输出与参考实现一致（误差 {fmt(d.get('max_abs_diff_vs_reference'))}）",
        )
        text += f" ({var})" if var else ""
        if (f.get("mask") or {}).get("ignored"):
            text += _t(
                lang,
                " on the runs without a mask (your mask changes nothing: see padding leak)",
                "，比较的是不加 mask 的运行（你的 mask 不起任何作用：见 padding 泄漏）",
            )
        rows.append((_t(lang, "reference", "参考"), text))
    elif st in ("fault", "ambiguous") and len(d.get("faults") or []) == 2:
        a, b = d["faults"]
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"reproduced by two bug-zoo faults together, {a} and {b} (below); no single one does",
                    f"同时打开 bug zoo 中的 {a} 和 {b} 后完全吻合（见下），单个错误都不行",
                ),
            )
        )
    elif st in ("fault", "ambiguous") and (d.get("unexplained") or {}).get("after"):
        proj = d["unexplained"]["after"]
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"reproduced by the bug-zoo fault {d.get('fault')} (below) up to your output projection "
                    f"{proj}; after it your module does more than the attention",
                    f"在你的输出投影 {proj} 之前与 bug zoo 中的 {d.get('fault')} 吻合（见下）；之后你的模块做了注意力"
                    "之外的事",
                ),
            )
        )
    elif st in ("fault", "ambiguous") and d.get("unexplained"):
        runs = {
            "plain": ("plain", "不加 mask 的"),
            "padding": ("padding-mask", "加 padding mask 的"),
            "causal_mask": ("causal-mask", "加因果 mask 的"),
        }
        rest = _t(lang, ", ", "、").join(
            runs.get(k, (k, k))[1 if lang == "zh" else 0] for k in d["unexplained"]["scenarios"]
        )
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"reproduced by the bug-zoo fault {d.get('fault')} (below) except on the {rest} run, "
                    "where something else differs too",
                    f"除{rest}运行外与 bug zoo 中的 {d.get('fault')} 吻合（见下），那里还有别的不同",
                ),
            )
        )
    elif st == "fault" and d.get("reason") and d.get("max_abs_diff_vs_faulty_reference") is None:
        reason = d["reason"]  # named without a reference (a random output cannot be reproduced)
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"not compared: {reason} ({d.get('fault')}, below)",
                    f"未比较：{reason}（{d.get('fault')}，见下）",
                ),
            )
        )
    elif st in ("fault", "ambiguous"):
        where = {
            "attn": _t(lang, " in the attention sub-layer", "（注意力子层）"),
            "ffn": _t(lang, " in the FFN sub-layer", "（FFN 子层）"),
        }.get(d.get("sub_layer") or "", "")
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"reproduced by the bug-zoo fault {d.get('fault')}{where} (below)",
                    f"与 bug zoo 中的 {d.get('fault')}{where}完全吻合（见下）",
                ),
            )
        )
    elif st == "unexplained":
        fd = d.get("first_difference") or {}
        tried_en, tried_zh = _pairs_tried(d.get("pairs"))
        rows.append(
            (
                _t(lang, "reference", "参考"),
                _t(
                    lang,
                    f"differs by {fmt(d.get('max_abs_diff_vs_reference'))}; no single fault"
                    f"{tried_en} reproduces it; first difference: {fd.get('where')}",
                    f"相差 {fmt(d.get('max_abs_diff_vs_reference'))}；没有单个已知错误或{tried_zh}能复现；"
                    f"最早的差异：{fd.get('where_zh')}",
                ),
            )
        )
    elif st == "unavailable":
        rows.append((_t(lang, "reference", "参考"), _t(lang, "not compared: ", "未比较：") + str(d.get("reason"))))
    return rows


def _pairs_tried(search: dict[str, Any] | None) -> tuple[str, str]:
    """The pairs the diagnosis tried (en after "no single fault", zh): every pair, or the likeliest when the pair
    search stopped at its budget (``diagnosis.pairs``)."""
    if not search or search.get("every_pair", True):
        return " or pair of faults", "两个错误的组合"
    tried, left = search["tried"], search["untried"]
    return (
        f", nor any of the {tried:,} likeliest pairs ({left:,} untried),",
        f"最可能的 {tried:,} 个组合（{left:,} 个未试）",
    )
