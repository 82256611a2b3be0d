"""Figure plumbing shared by the pictures: fonts (a CJK font when the system has one, else ``U+XXXX`` labels
and :data:`CJK_HINT`), bilingual labels, and saving a ``matplotlib.figure.Figure`` as PNG/SVG without pyplot."""

from __future__ import annotations

import functools
import os
from contextlib import contextmanager

CJK_HINT = ("no CJK font found, so Chinese text is drawn as U+XXXX code points; install one, e.g. "
            "`apt-get install fonts-wqy-microhei` (Debian/Ubuntu) or a Noto CJK font")

# Font families known to cover CJK, in order of preference.
_CJK_FAMILIES = (
    "WenQuanYi Micro Hei", "WenQuanYi Zen Hei", "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC",
    "Noto Serif CJK SC", "Source Han Sans SC", "Source Han Sans CN", "Droid Sans Fallback", "AR PL UMing CN",
    "AR PL UKai CN", "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC", "Hiragino Sans GB", "Arial Unicode MS",
)


# --------------------------------------------------------------------------------------------------- fonts


@functools.lru_cache(maxsize=1)
def _find_cjk_font() -> str | None:
    from matplotlib import font_manager
    from matplotlib.ft2font import FT2Font

    entries = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    candidates = [n for n in _CJK_FAMILIES if n in entries]
    candidates += sorted(n for n in entries if any(w in n for w in ("CJK", "Hei", "Han Sans", "WenQuanYi", "Ming"))
                         and n not in candidates)
    for name in candidates:
        try:
            if FT2Font(entries[name]).get_char_index(ord("中")):
                return name
        except (OSError, RuntimeError, ValueError):
            continue
    return None


def cjk_font() -> str | None:
    """The family name of an installed font with Chinese glyphs, or ``None``."""
    return _find_cjk_font()


def is_cjk(ch: str) -> bool:
    o = ord(ch)
    return 0x2E80 <= o <= 0x9FFF or 0xF900 <= o <= 0xFAFF or 0xFF00 <= o <= 0xFFEF or 0x20000 <= o <= 0x2FA1F


def needs_cjk(text: str) -> bool:
    return any(is_cjk(c) for c in text)


def bi(en: str, zh: str) -> str:
    """A bilingual label when Chinese can be drawn, else the English one."""
    return f"{en} · {zh}" if cjk_font() else en


def drawable(token: str) -> str:
    """The token itself, or its code point when no installed font can draw it."""
    if cjk_font() or not needs_cjk(token):
        return token
    return "".join(f"U+{ord(c):04X}" if is_cjk(c) else c for c in token)


@contextmanager
def _fonts():
    """rcParams for one figure: DejaVu Sans for Latin text, falling back per glyph to the CJK font."""
    import matplotlib as mpl

    families = ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else [])
    with mpl.rc_context({"font.family": families, "axes.unicode_minus": True, "svg.fonttype": "path"}):
        yield


def new_figure(**kwargs):
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def save_figure(fig, path: str | os.PathLike) -> str:
    """Save ``fig`` as PNG or SVG (by extension); returns the path. Errors name the path."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"--out must end in .png, .svg or .html, got {path!r}")
    with _fonts():
        fig.savefig(path, dpi=110 if ext == ".png" else None, bbox_inches="tight")
    return path


def figure_svg(fig) -> str:
    """The figure as an SVG string (glyphs as paths: self-contained)."""
    import io

    buf = io.StringIO()
    with _fonts():
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]
