"""Figures drawn with matplotlib (an optional dependency: the ``[docs]`` extra), in one house
style and written as PNG bytes that depend only on the code, the data and the libraries.

A PNG carries no timestamp and no software version. It carries one text chunk,
``lossproof-content``: the sha256 of what the figure shows (the data of every line, bar and
patch, every text, colour, limit and tick, to 10 significant digits). The build accepts a
figure whose bytes differ when that digest agrees — another matplotlib or zlib rasterises the
same content differently — and a change of content fails ``--check``.

matplotlib is imported inside the functions that need it, so that the rest of lossproof (and
``lossproof docs build``'s error message) works without it.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import struct

import numpy as np

from lossproof.conformance.docs import DocsError

CONTENT_KEY = "lossproof-content"
BLUE, ORANGE, GREEN, RED, GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"
DPI = 110
STYLE = {"font.size": 10, "axes.titlesize": 10.5, "axes.spines.top": False, "axes.spines.right": False,
         "figure.dpi": DPI, "savefig.dpi": DPI}


def require_matplotlib() -> None:
    """Select the Agg backend; a missing matplotlib is a DocsError that says how to install it."""
    try:
        import matplotlib
    except ImportError:
        raise DocsError("matplotlib is needed to draw the figures: pip install 'lossproof[docs]'") from None
    matplotlib.use("Agg")


@contextlib.contextmanager
def style(rc: dict | None = None):
    """matplotlib's default style plus ``rc`` (default: STYLE), whatever the user's matplotlibrc
    says, so that the bytes depend only on the code and the libraries."""
    import matplotlib
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(STYLE if rc is None else rc)
        yield


def new_figure(width: float, height: float):
    """A figure on an Agg canvas, outside pyplot (no global figure manager to leak into)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


# --------------------------------------------------------------------------- content digest

def _num(x) -> str:
    x = float(x)
    return repr(x) if not math.isfinite(x) else f"{x:.10g}"


def _nums(values) -> list:
    return [_num(v) for v in np.asarray(values, dtype=float).ravel()]


def _color(c) -> str:
    from matplotlib import colors
    try:
        return colors.to_hex(c, keep_alpha=True)
    except (ValueError, TypeError):
        return ",".join(colors.to_hex(x, keep_alpha=True) for x in np.atleast_2d(c))


def _text(t) -> list:
    return [t.get_text(), _nums(t.get_position()), _num(t.get_fontsize()), _color(t.get_color()),
            t.get_ha(), t.get_va(), _num(t.get_rotation()), t.get_fontweight(), t.get_visible()]


def _patch(p) -> list:
    verts = p.get_patch_transform().transform(p.get_path().vertices)
    return [type(p).__name__, _nums(verts), _color(p.get_facecolor()), _color(p.get_edgecolor()),
            _num(p.get_linewidth()), str(p.get_hatch()), p.get_visible()]


def _handle(h) -> str:
    if hasattr(h, "get_facecolor"):
        return _color(h.get_facecolor())
    if hasattr(h, "get_color"):
        return _color(h.get_color())
    return type(h).__name__


def _legend(leg) -> list:
    if leg is None:
        return []
    return [[_text(t) for t in leg.get_texts()], [_handle(h) for h in leg.legend_handles]]


def content(fig) -> dict:
    """What a figure shows, independent of the rasteriser: size; every axes' titles, labels,
    limits, scales and ticks; its lines (data, colour, width, style, marker, label), patches
    (bars, spans: vertices in data coordinates, colours, hatch), collections, texts, legends.
    Call after ``fig.canvas.draw()`` (tick labels exist only then)."""
    axes = []
    for ax in fig.axes:
        axes.append({
            "titles": [_text(t) for t in (ax.title, ax._left_title, ax._right_title)],
            "labels": [_text(ax.xaxis.label), _text(ax.yaxis.label)],
            "limits": _nums(list(ax.get_xlim()) + list(ax.get_ylim())),
            "scales": [ax.get_xscale(), ax.get_yscale()],
            "ticks": [_nums(ax.get_xticks()), _nums(ax.get_yticks()),
                      [t.get_text() for t in ax.get_xticklabels()], [t.get_text() for t in ax.get_yticklabels()]],
            "lines": [[_nums(ln.get_xydata()), _color(ln.get_color()), _num(ln.get_linewidth()),
                       str(ln.get_linestyle()), str(ln.get_marker()), ln.get_label(), ln.get_visible()]
                      for ln in ax.get_lines()],
            "patches": [_patch(p) for p in ax.patches],
            "collections": [[type(c).__name__, [_nums(p.vertices) for p in c.get_paths()],
                             _color(c.get_facecolor()) if len(c.get_facecolor()) else "none"]
                            for c in ax.collections],
            "texts": [_text(t) for t in ax.texts],
            "legend": _legend(ax.get_legend()),
        })
    return {"size": _nums(fig.get_size_inches()), "dpi": _num(fig.dpi), "axes": axes,
            "texts": [_text(t) for t in fig.texts], "legends": [_legend(leg) for leg in fig.legends]}


def content_digest(fig) -> str:
    text = json.dumps(content(fig), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def png_bytes(fig) -> bytes:
    """The figure as a PNG without timestamp or software version, with its content digest in a
    ``lossproof-content`` text chunk."""
    fig.canvas.draw()
    digest = content_digest(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None, CONTENT_KEY: digest})
    return buf.getvalue()


def png_content(data: bytes | None) -> str | None:
    """The ``lossproof-content`` digest of a PNG (None when absent or not a PNG)."""
    if not data or data[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    pos = 8
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"tEXt" and b"\0" in body:
            key, value = body.split(b"\0", 1)
            if key.decode("latin-1") == CONTENT_KEY:
                return value.decode("latin-1")
        if kind == b"IEND":
            break
        pos += 12 + length
    return None


def same_figure(old: bytes | None, new: bytes) -> bool:
    """Whether the PNG on disk shows what ``new`` shows: the same bytes or the same digest."""
    if old == new:
        return True
    return old is not None and png_content(old) is not None and png_content(old) == png_content(new)
