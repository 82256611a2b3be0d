"""The report of a whole model: the block doctor's :class:`Report` with what a model adds (``kind: "lm"``, the
sizes, one row per layer, findings that name their layers; docs/doctor.md, "Checking a whole model")."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from anatomy.doctor.report.findings import PROBE_TITLES, Finding, Report, _fault_lines, passed_lines, where_lines, wrap
from anatomy.doctor.report.words import _t

__anatomy_transparent__ = True


@dataclass
class ModelReport(Report):
    layers: list[dict[str, Any]] = field(default_factory=list)  # per block: index, path, class, status, faults

    def to_dict(self, strict: bool = False) -> dict[str, Any]:
        return {**super().to_dict(strict), "layers": self.layers}

    def groups(self) -> list[tuple[str | None, list[Finding]]]:
        """As the block doctor's, with the end-to-end causal leak and the blocks' own (no fault named for either)
        in one group: one mistake, counted once."""
        out = super().groups()
        lead = next((g for g in out if g[0] is None and g[1][0].probe == "lm_causal_leak"), None)
        if lead is None:
            return out
        rest = []
        for g in out:
            if g is not lead and g[0] is None and g[1][0].probe == "causal_leak" and g[1][0].severity == "error":
                lead[1].extend(g[1])
            else:
                rest.append(g)
        return rest

    def render(self, lang: str = "en", width: int = 80, strict: bool = False) -> str:
        return "\n".join(_render(self, lang, width, strict))


def _found(r: ModelReport, lang: str) -> list[tuple[str, str]]:
    f = r.found
    rows = [(_t(lang, "call", "调用"), f"{f.get('call', '?')} → {f.get('returns', '?')}")]
    rows += [("", note["zh" if lang == "zh" else "en"]) for note in f.get("call_notes") or []]
    loss = f.get("loss") or {}
    if loss.get("examined"):
        k = loss.get("shift")
        text = {
            0: _t(
                lang,
                "logits[:, t] against targets[:, t] (the caller shifts)",
                "logits[:, t] 对 targets[:, t]（由调用方错位）",
            ),
            1: _t(
                lang,
                "logits[:, t] against targets[:, t + 1] (shifted inside)",
                "logits[:, t] 对 targets[:, t + 1]（模型内错位）",
            ),
            2: "logits[:, t] ↔ targets[:, t + 2]",
            -1: "logits[:, t] ↔ targets[:, t - 1]",
        }.get(
            k if isinstance(k, int) else 99,
            _t(lang, "not a plain cross-entropy of any shift", "不是任何错位下的普通交叉熵"),
        )
        if loss.get("labels") == "ids":  # made inside from the ids (return_loss=True)
            text = text.replace("targets", "ids") + _t(
                lang, "; the labels are the ids themselves", "；标签就是 ids 本身"
            )
        rows.append((_t(lang, "loss", "损失"), text))
    elif loss:
        rows.append((_t(lang, "loss", "损失"), _t(lang, "not examined: ", "未检查：") + str(loss.get("reason"))))
    stack = f.get("stack")
    rows.append(
        (
            "blocks",
            f"{stack['path'] or _t(lang, '(the model)', '（模型本身）')}: {stack['count']} × {stack['class']}"
            if stack
            else _t(lang, "no stack of repeated blocks found", "没有找到重复的 block 堆叠"),
        )
    )
    for row in r.layers:
        status = row["status"]
        if status == "checked":
            errors = f"{row['errors']} error(s)" if row["errors"] else _clean(row, lang)
            status = ", ".join(row["faults"]) or errors
        rows.append(("", f"{row['index']} {row['class']}: {status}"))
    return rows


def _clean(row: dict[str, Any], lang: str) -> str:
    """A layer with no error: "ok" only when the diagnosis compared it with the reference; a layer whose weights
    could not be mapped passed the probes but was not compared."""
    if row.get("diagnosis") == "unavailable":
        return _t(
            lang,
            "no error found; not compared with the reference (weights not mapped)",
            "未发现错误；未与参考实现比较（无法映射权重）",
        )
    return "ok"


def _render(r: ModelReport, lang: str, width: int, strict: bool) -> list[str]:
    s = r.settings
    out = [f"anatomy check · {r.target}"]
    out += wrap(
        f"lm · vocab_size={s['vocab_size']}, d_model={s['d_model']}, n_heads={s['n_heads']}, "
        f"n_layers={s['n_layers']}, block_size={s['block_size']} · {s.get('dtype', 'float64')}, B={s['batch']}, "
        f"T={s['seq']}, "
        f"seed {s['seed']}",
        width,
    )
    out += ["", _t(lang, "found", "发现")]
    for key, text in _found(r, lang):
        out += wrap(text, width, first="  " + key.ljust(10), rest=" " * 12)
    for fault, fs in r.groups():
        out.append("")
        bad = any(f.severity == "error" for f in fs)
        mark = ("✗ " + _t(lang, "error", "错误")) if bad else ("! " + _t(lang, "warning", "警告"))
        title = PROBE_TITLES.get(fs[0].probe, (fs[0].probe, fs[0].probe))[1 if lang == "zh" else 0]
        out += _fault_lines(fault, mark, lang, width) if fault else wrap(f"{mark} · {title}", width, rest="    ")
        shown: set[tuple[Any, ...]] = set()
        for f in fs:
            out += wrap(f.text(lang), width, first="    - ", rest="      ")
            out += where_lines(f, shown, lang, width)
    out.append("")
    out += passed_lines(r.passed, r.skipped, lang, width)
    errors, warnings = r.counts()
    out += [
        "",
        _t(
            lang,
            f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)} → exit "
            f"{r.exit_code(strict)}",
            f"{errors} 个错误，{warnings} 个警告 → 退出码 {r.exit_code(strict)}",
        ),
    ]
    return out
