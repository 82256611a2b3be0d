"""Figure plumbing shared by the pictures: fonts (a CJK font when the system has one, else ``U+XXXX`` labels
and :data:`CJK_HINT`), bilingual labels, and saving a ``matplotlib.figure.Figure`` as PNG/SVG without pyplot."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

CJK_HINT = (
    "no CJK font found, so Chinese text is drawn as U+XXXX code points; install one, e.g. "
    "`apt-get install fonts-wqy-microhei` (Debian/Ubuntu) or a Noto CJK font"
)

# Font families known to cover CJK, in order of preference.
_CJK_FAMILIES = (
    "WenQuanYi Micro Hei",
    "WenQuanYi Zen Hei",
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans SC",
    "Noto Serif CJK SC",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "Droid Sans Fallback",
    "AR PL UMing CN",
    "AR PL UKai CN",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
    "Hiragino Sans GB",
    "Arial Unicode MS",
)


# --------------------------------------------------------------------------------------------------- fonts


# File names of fonts known to cover CJK, for looking past matplotlib's font cache.
_CJK_FILE_HINTS = (
    "wqy",
    "wenquanyi",
    "notosanscjk",
    "notoserifcjk",
    "noto-cjk",
    "notosanssc",
    "sourcehansans",
    "droidsansfallback",
    "uming",
    "ukai",
    "simhei",
    "msyh",
    "pingfang",
    "hiragino",
    "arialuni",
)
_FONT_DIRS = (
    "/usr/share/fonts",
    "/usr/local/share/fonts",
    "~/.local/share/fonts",
    "~/.fonts",
    "/Library/Fonts",
    "/System/Library/Fonts",
    "~/Library/Fonts",
    "C:/Windows/Fonts",
)
_FONT_EXTENSIONS = (".ttf", ".ttc", ".otf", ".otc")
_unloadable: list[str] = []  # CJK font files found on disk that matplotlib could not load (named in the hint)


def _has_han(path: str) -> bool:
    from matplotlib.ft2font import FT2Font

    try:
        return bool(FT2Font(path).get_char_index(ord("中")))
    except (OSError, RuntimeError, ValueError):
        return False


def _cached_cjk_font() -> str | None:
    """A CJK family from matplotlib's font list (built once and cached on disk, so it can predate a font)."""
    from matplotlib import font_manager

    entries = {f.name: f.fname for f in font_manager.fontManager.ttflist}
    candidates = [n for n in _CJK_FAMILIES if n in entries]
    candidates += sorted(
        n
        for n in entries
        if any(w in n for w in ("CJK", "Hei", "Han Sans", "WenQuanYi", "Ming")) and n not in candidates
    )
    return next((name for name in candidates if _has_han(entries[name])), None)


def _font_files_on_disk() -> list[str]:
    """CJK font files fontconfig knows (``fc-list :lang=zh``), then those in the usual font folders whose names
    say CJK. Neither depends on matplotlib's cache."""
    import glob
    import shutil
    import subprocess

    files: list[str] = []
    if shutil.which("fc-list"):
        try:
            out = subprocess.run(["fc-list", ":lang=zh", "file"], capture_output=True, text=True, timeout=10).stdout
            files += [line.split(":")[0].strip() for line in out.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    extra = [d for d in os.environ.get("ANATOMY_FONT_DIRS", "").split(os.pathsep) if d]
    for folder in (*extra, *_FONT_DIRS):
        for path in glob.glob(os.path.join(os.path.expanduser(folder), "**", "*"), recursive=True):
            name = os.path.basename(path).lower().replace(" ", "").replace("_", "")
            if name.endswith(_FONT_EXTENSIONS) and (folder in extra or any(h in name for h in _CJK_FILE_HINTS)):
                files.append(path)
    return [f for f in dict.fromkeys(files) if f.lower().endswith(_FONT_EXTENSIONS)]


@functools.lru_cache(maxsize=1)
def _find_cjk_font() -> str | None:
    """matplotlib's cached font list first; if it has no CJK font (none installed, or one installed after the
    cache was built), a CJK font file on disk is added to matplotlib's font manager for this process."""
    from matplotlib import font_manager

    _unloadable.clear()
    found = _cached_cjk_font()
    if found:
        return found
    for path in _font_files_on_disk():
        if not _has_han(path):
            _unloadable.append(path)  # a file that says CJK but FreeType cannot read, or one without Chinese glyphs
            continue
        try:
            font_manager.fontManager.addfont(path)
            return font_manager.FontProperties(fname=path).get_name()
        except (OSError, RuntimeError, ValueError):
            _unloadable.append(path)
    return None


def cjk_hint() -> str:
    """What to do about Chinese labels drawn as code points: install a font, or (when one is on disk but could
    not be loaded) say which file was seen."""
    if _unloadable:
        return (
            f"a CJK font file exists ({_unloadable[0]}) but it could not be loaded or has no Chinese glyphs, so "
            "Chinese text is drawn as U+XXXX code points; install another, e.g. `apt-get install "
            "fonts-wqy-microhei`"
        )
    return CJK_HINT


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
def _fonts() -> Iterator[None]:
    """rcParams for one figure: DejaVu Sans for Latin text, falling back per glyph to the CJK font."""
    import matplotlib as mpl

    families = ["DejaVu Sans"] + ([cjk_font()] if cjk_font() else [])
    with mpl.rc_context({"font.family": families, "axes.unicode_minus": True, "svg.fonttype": "path"}):
        yield


def new_figure(**kwargs: Any) -> Figure:
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> str:
    """Save ``fig`` as PNG or SVG (by extension); returns the path. Errors name the path."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext not in (".png", ".svg"):
        raise ValueError(f"--out must end in .png, .svg or .html, got {path!r}")
    with _fonts():
        fig.savefig(path, dpi=110 if ext == ".png" else None, bbox_inches="tight")
    return path


def figure_svg(fig: Figure) -> str:
    """The figure as an SVG string (glyphs as paths: self-contained)."""
    import io

    buf = io.StringIO()
    with _fonts():
        fig.savefig(buf, format="svg", bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg") :]
