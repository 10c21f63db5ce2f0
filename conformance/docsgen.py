"""Generated documentation: every table and figure in docs/ that comes from the vectors or the
exact reference, rebuilt by ``lossproof docs build`` and verified by ``lossproof docs build --check``.

``ARTIFACTS`` is the registry (path → producer). Two kinds:

- **pages**: hand-written Markdown holding generated blocks between ``<!-- generated:NAME -->``
  and ``<!-- /generated:NAME -->``. The build replaces what lies between the two markers and
  keeps every other byte of the page, so prose is edited by hand and numbers never are.
- **figures**: PNGs drawn with matplotlib (Agg, the default style, no pyplot state) from the
  exact reference and the vectors. A PNG carries no timestamp and no software version, so the
  same code and libraries give the same bytes. It carries one text chunk, ``lossproof-content``:
  the sha256 of what the figure shows (the data of every line, bar and patch, every text, colour,
  limit and tick, to 10 significant digits). ``--check`` accepts a figure whose bytes differ
  when that digest agrees — another matplotlib or zlib rasterises the same content differently —
  and the build does not rewrite such a figure; a change of content fails the check.

Writes are atomic (``vectors.write_atomically``). Problems with the inputs of the build (a page
without its markers, matplotlib missing) raise :class:`DocsError`, which the CLI reports on one
line with exit status 2.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import re
import struct
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Callable

import mpmath

from conformance import catalog, vectors

ROOT = Path(__file__).resolve().parent.parent
DIGITS = 20                      # significant digits printed in the worked-example tables
CONTENT_KEY = "lossproof-content"
THEOREM_PAGE = "docs/proximal_kl.md"
THEOREM_FIGURE = "docs/figures/theorem_convergence.png"


class DocsError(Exception):
    """The build cannot run on these inputs (exit status 2)."""


# --------------------------------------------------------------------------- generated blocks

# A marker is a whole line (so a page can mention one in running text or code).
_ANY = re.compile(r"^<!-- (/?)generated:([A-Za-z0-9_.-]+) -->[ \t]*$", re.M)


def replace_blocks(text: str, blocks: dict[str, str], where: str = "page") -> str:
    """``text`` with the content between the lines ``<!-- generated:NAME -->`` and
    ``<!-- /generated:NAME -->`` replaced by ``blocks[NAME]`` for every NAME; the markers and
    everything outside them are kept. Every NAME must occur exactly once, and every block in the
    page must have a producer."""
    out, pos, seen, open_name = [], 0, [], None
    for m in _ANY.finditer(text):
        closing, name = m.group(1) == "/", m.group(2)
        line = text.count("\n", 0, m.start()) + 1
        if not closing:
            if open_name is not None:
                raise DocsError(f"{where}:{line}: <!-- generated:{name} --> opens inside the block "
                                f"{open_name!r} (close it first)")
            if name not in blocks:
                raise DocsError(f"{where}:{line}: no producer for the generated block {name!r} "
                                f"(known here: {', '.join(blocks) or 'none'})")
            if name in seen:
                raise DocsError(f"{where}:{line}: the generated block {name!r} occurs twice")
            seen.append(name)
            out.append(text[pos:m.end()])
            open_name = name
        else:
            if name != open_name:
                raise DocsError(f"{where}:{line}: <!-- /generated:{name} --> closes a block that is not open")
            body = blocks[name].strip("\n")
            out.append("\n" + body + "\n" if body else "\n")
            pos, open_name = m.start(), None
    if open_name is not None:
        raise DocsError(f"{where}: <!-- generated:{open_name} --> has no closing <!-- /generated:{open_name} -->")
    missing = [n for n in blocks if n not in seen]
    if missing:
        raise DocsError(f"{where}: the generated block {missing[0]!r} is missing: add the lines "
                        f"<!-- generated:{missing[0]} --> and <!-- /generated:{missing[0]} -->")
    out.append(text[pos:])
    return "".join(out)


def read_blocks(text: str) -> dict[str, str]:
    """{NAME: content} of the generated blocks of a page (content without its enclosing newlines)."""
    out = {}
    pattern = r"^<!-- generated:([A-Za-z0-9_.-]+) -->[ \t]*\n(.*?)^<!-- /generated:\1 -->"
    for m in re.finditer(pattern, text, re.S | re.M):
        out[m.group(1)] = m.group(2).strip("\n")
    return out


# --------------------------------------------------------------------------- PNG with a content digest

def _num(x) -> str:
    x = float(x)
    return repr(x) if not math.isfinite(x) else f"{x:.10g}"


def _nums(values) -> list:
    import numpy as np
    return [_num(v) for v in np.asarray(values, dtype=float).ravel()]


def _color(c) -> str:
    from matplotlib import colors
    try:
        return colors.to_hex(c, keep_alpha=True)
    except (ValueError, TypeError):
        import numpy as np
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
    ``lossproof-content`` text chunk. Does not close the figure."""
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


# --------------------------------------------------------------------------- registry

_VECTOR_SETS: dict[tuple[str, str], vectors.VectorSet] = {}


class Context:
    """What producers share: the vector set (loaded once) and the repository root."""

    def __init__(self, root: Path, vectors_dir: Path | None = None, include_slow: bool = True):
        self.root = root
        self.include_slow = include_slow
        self._vectors_dir = vectors_dir
        self._vs = None

    @property
    def vs(self) -> vectors.VectorSet:
        if self._vs is None:
            directory = Path(self._vectors_dir) if self._vectors_dir else vectors.DEFAULT_DIR
            manifest = directory / vectors.MANIFEST
            key = (str(directory.resolve()), vectors.sha256(manifest.read_bytes()) if manifest.is_file() else "")
            if key not in _VECTOR_SETS:      # loading and validating every file takes seconds
                _VECTOR_SETS[key] = vectors.VectorSet(directory)
            self._vs = _VECTOR_SETS[key]
        return self._vs

    def case(self, uid: str) -> vectors.VectorCase:
        try:
            return self.vs.by_uid(uid)
        except KeyError:
            raise DocsError(f"the docs cite vector {uid}, which {self.vs.directory} does not hold "
                            "(a vector was removed or its content changed: update conformance/docsgen.py)") from None


@dataclass(frozen=True)
class Artifact:
    path: str                                   # relative to the repository root
    produce: Callable[[Context, bytes | None, str], bytes]   # (context, current bytes, path) → bytes
    figure: bool = False
    slow: bool = False
    what: str = ""
    note: str = ""                              # printed before a long producer runs


def _page(blocks: dict[str, Callable[[Context], str]], slow: tuple[str, ...] = ()):
    """A hand-written page whose generated blocks are rebuilt; the ``slow`` ones keep their
    current content when the context leaves slow producers out."""
    def produce(ctx: Context, old: bytes | None, path: str = "") -> bytes:
        if old is None:
            raise DocsError(f"{path}: missing (a hand-written page with the generated blocks "
                            f"{', '.join(blocks)})")
        text = old.decode("utf-8")
        current = read_blocks(text)
        fresh = {n: (fn(ctx) if ctx.include_slow or n not in slow else current.get(n, ""))
                 for n, fn in blocks.items()}
        return replace_blocks(text, fresh, path).encode("utf-8")
    return produce


@contextlib.contextmanager
def _style(rc: dict | None = None):
    """matplotlib's default style plus ``rc`` (default: STYLE), whatever the user's matplotlibrc
    says, so the bytes depend only on the code and the libraries."""
    import matplotlib
    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(STYLE if rc is None else rc)
        yield


def _figure(draw: Callable[[Context], object]):
    def produce(ctx: Context, old: bytes | None, path: str = "") -> bytes:
        with _style():
            return png_bytes(draw(ctx))
    return produce


def same(artifact: Artifact, old: bytes | None, new: bytes) -> bool:
    """Whether the file on disk is up to date: the same bytes, or for a figure the same content."""
    if old == new:
        return True
    return artifact.figure and old is not None and png_content(old) is not None \
        and png_content(old) == png_content(new)


@dataclass
class Outcome:
    path: str
    status: str          # "written", "unchanged", "stale"
    seconds: float


def selected(include_slow: bool = True) -> list[Artifact]:
    return [a for a in ARTIFACTS if include_slow or not a.slow]


def run(root: Path | str | None = None, check: bool = False, include_slow: bool = True,
        vectors_dir: Path | None = None, on_start: Callable[[Artifact], None] | None = None) -> list[Outcome]:
    """Build (or, with ``check``, verify) every artifact under ``root`` (default: this checkout).

    Check mode writes nothing and stops at the first out-of-date file (its Outcome is last, with
    status "stale"). Build mode writes only the files whose content changed."""
    root = Path(root) if root else ROOT
    if not (root / "docs").is_dir():
        raise DocsError(f"{root / 'docs'}: not found (lossproof docs build runs in a source checkout)")
    try:
        import matplotlib
    except ImportError:
        raise DocsError("matplotlib is needed to draw the figures: pip install 'lossproof[docs]'") from None
    matplotlib.use("Agg")
    ctx = Context(root, vectors_dir, include_slow)
    outcomes = []
    for art in selected(include_slow):
        if on_start:
            on_start(art)
        start = time.perf_counter()
        path = root / art.path
        old = path.read_bytes() if path.is_file() else None
        new = art.produce(ctx, old, art.path)
        if same(art, old, new):
            status = "unchanged"
        elif check:
            outcomes.append(Outcome(art.path, "stale", time.perf_counter() - start))
            return outcomes
        else:
            vectors.write_atomically(path, new)
            status = "written"
        outcomes.append(Outcome(art.path, status, time.perf_counter() - start))
    return outcomes


# --------------------------------------------------------------------------- numbers and tables

def digits(value: str, n: int = DIGITS) -> str:
    """A vector's decimal string rounded to n significant digits (round half even)."""
    d = Decimal(value)
    if d == 0:
        return "0"
    return format(d, f".{n}g")


def _flat(name: str, value, index=()) -> list[tuple[str, str]]:
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            out += _flat(name, v, index + (i,))
        return out
    label = name + ("[" + ",".join(map(str, index)) + "]" if index else "")
    return [(label, value)]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _default(value) -> str:
    if value is None:
        return "`None`"
    if isinstance(value, str):
        return f"`'{value}'`"
    return f"`{value!r}`"


def arguments_table(objective_ids) -> str:
    """Inputs and parameters of each objective, from the catalog (the contract)."""
    parts = []
    for oid in objective_ids:
        spec = catalog.get(oid)
        lines = [f"**`{oid}`** — {_cell(spec.summary)} Outputs: {', '.join(f'`{o}`' for o in spec.outputs)}; "
                 f"gradient with respect to {', '.join(f'`{g}`' for g in spec.grads) or 'nothing (no gradient)'}. "
                 f"Source: {_cell(spec.source)}.", "",
                 "| argument | role | shape / choices | paper default | where the default comes from |",
                 "|---|---|---|---|---|"]
        for i in spec.inputs:
            kind = {"int": "integer input", "mask": "0/1 mask"}.get(i.kind, "input")
            note = "−inf allowed (an impossible token)" if i.neg_inf else ""
            lines.append(f"| `{i.name}` | {kind} | `[{i.shape}]` | — | {note} |")
        for p in spec.params:
            role = "convention" if p.convention else "parameter"
            choices = ", ".join(_default(c) for c in p.choices) if p.choices else ""
            lines.append(f"| `{p.name}` | {role} | {choices} | {_default(p.default)} | {_cell(p.source)} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _defaults_differ(oid: str, conventions: dict) -> dict:
    defaults = catalog.get(oid).defaults
    return {k: v for k, v in conventions.items() if defaults.get(k) != v}


def groups_table(ctx: Context, objective_ids) -> str:
    """The vector groups of the objectives (one per convention set a library uses), from the
    vector files: name, conventions that differ from the paper, number of cases, source."""
    rows, sources, order = [], {}, []
    for oid in objective_ids:
        doc = next((d for d in ctx.vs.files.values() if d["objective"] == oid), None)
        if doc is None:
            raise DocsError(f"no vector file for {oid} in {ctx.vs.directory}")
        for g in doc["testGroups"]:
            if g["group"] == "invalid":
                continue
            diff = _defaults_differ(oid, g["conventions"])
            conv = ", ".join(f"`{k}={v!r}`" for k, v in diff.items()) or "paper defaults"
            rows.append(f"| `{g['group']}` | `{oid}` | {conv} | {len(g['tests'])} |")
            if g["group"] not in sources:
                sources[g["group"]] = g["source"]
                order.append(g["group"])
    head = ["| group | objective | conventions (where they differ from the paper) | cases |", "|---|---|---|---:|"]
    notes = "\n".join(f"- **`{name}`**: {sources[name]}" for name in order)
    intro = "What each group follows (library files are cited by version and path):"
    return "\n".join(head + rows) + f"\n\n{intro}\n\n" + notes


def _example_row(ctx: Context, case: vectors.VectorCase, article: bool) -> str:
    t = case.test
    params = {k: v for k, v in {**case.conventions, **t["params"]}.items() if v is not None}
    given = "<br>".join(f"`{k}` = `{_json(v)}`" for k, v in {**t["inputs"], **params}.items())
    values = []
    for name, value in t.get("expected", {}).items():
        values += [f"`{label}` = `{digits(v)}`" for label, v in _flat(name, value)]
    what = f"«{_cell(t['provenance']['printed'])}»" if article else _cell(t["comment"])
    uid = f"`{case.uid}`" + (f"<br>{_cell(t['comment'])}" if article else "")
    return f"| {uid} | {given} | {what} | {'<br>'.join(values)} |"


def examples_table(ctx: Context, family: str) -> str:
    """The source article's worked examples of a family (provenance kind 'article')."""
    order = {o.id: i for i, o in enumerate(catalog.OBJECTIVES)}
    rows = sorted((c for c in ctx.vs.cases(f"{family}.*") if c.test["provenance"]["kind"] == "article"),
                  key=lambda c: (order[c.objective], c.test["tcId"]))
    if not rows:
        raise DocsError(f"no article example for the family {family!r} in {ctx.vs.directory}")
    head = ["| uid and case | inputs and parameters | the article prints | exact value (20 significant digits) |",
            "|---|---|---|---|"]
    return "\n".join(head + [_example_row(ctx, c, True) for c in rows])


def cases_table(ctx: Context, uids) -> str:
    head = ["| uid | inputs and parameters | what it checks | exact value (20 significant digits) |",
            "|---|---|---|---|"]
    return "\n".join(head + [_example_row(ctx, ctx.case(u), False) for u in uids])


def tolerance_table(_ctx: Context) -> str:
    from conformance import compare
    lines = ["| objective | `K_BASE` | n = length of | k at n = 1 | k at n = 1024 |", "|---|---:|---|---:|---:|"]
    for spec in catalog.OBJECTIVES:
        kb = compare.K_BASE[spec.id]
        n_of = "—" if not spec.reduction else (f"last axis of `{spec.reduction}`" if spec.family == "distill"
                                               else f"`{spec.reduction}` (all elements)")
        big = f"{kb * 11:g}" if spec.reduction else "— (n = 1)"
        lines.append(f"| `{spec.id}` | {kb:g} | {n_of} | {kb:g} | {big} |")
    lines += ["", "| dtype | unit roundoff u |", "|---|---|"]
    lines += [f"| {d} | 2^−{-int(math.log2(u))} ≈ {u:.3g} |" for d, u in compare.UNIT_ROUNDOFF.items()]
    return "\n".join(lines)


def figures_table(_ctx: Context) -> str:
    lines = ["| figure | shows | on the page |", "|---|---|---|"]
    for art in ARTIFACTS:
        if art.figure:
            rel = art.path.removeprefix("docs/")
            page = FIGURE_PAGES.get(art.path, "")
            lines.append(f"| [`{rel}`]({rel}) | {art.what} | [{page}]({page}) |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures

BLUE, ORANGE, GREEN, RED, GREY = "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f"
STYLE = {"font.size": 10, "axes.titlesize": 10.5, "axes.spines.top": False, "axes.spines.right": False,
         "figure.dpi": 110, "savefig.dpi": 110}

# The vectors the figures and tables quote (content-addressed: stable as long as the case is).
UID = {
    "softmax_t1": "distill.softmax:9cfd3ad3952a45da",
    "softmax_t2": "distill.softmax:b6309f9537961a6a",
    "kl_forward": "distill.token_kl:f54e6621a6e1b392",
    "kl_reverse": "distill.token_kl:12aa8b78f4e4db79",
    "kl_vocab": "distill.token_kl:2998b48966debb47",
    "kl_one_token": "kl.estimator:c86edf64307eb8fb",
    "dpo_gains": "dpo.loss:19ddf3dcdf2a7002",
    "grpo_adv": "grpo.advantages:cb725563a3114348",
    "clip_up": "grpo.clip:c112848979dae3f3",
    "clip_down": "grpo.clip:711dd655ddec928f",
}
PROXIMAL_KL_EXAMPLES = (
    "proximal_kl.loss:607d50d196800a54",          # B = T = 1
    "proximal_kl.loss:1dc30c70283439a3",          # future cost cancelling to 0 or 2^−40
    "proximal_kl.loss:b56c3eba90994ffd",          # masked padding
    "proximal_kl.future_cost:0c5720f7c2442a78",   # F = 0 for a single token
    "proximal_kl.future_cost:a9aa228f22e95663",   # F_t from terms of order 1 that cancel
)


def _new_figure(width: float, height: float):
    """A figure on an Agg canvas, outside pyplot (no global figure manager)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _f(s) -> float:
    return float(mpmath.mpf(s))


def _short(x, n=4) -> str:
    return mpmath.nstr(mpmath.mpf(x), n, strip_zeros=False).replace("-", "−")


def _uid_note(ax, *uids, y=-0.2):
    ax.text(0.5, y, "\n".join(uids), transform=ax.transAxes, ha="center", va="top", fontsize=7.5, color=GREY,
            family="monospace")


def fig_temperature(ctx: Context):
    """The softmax of logits (2, 0) at T = 1 and T = 2 (distill.softmax, article §Destilación clásica)."""
    fig = _new_figure(7.6, 3.7)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key in zip(axes, ("softmax_t1", "softmax_t2")):
        case = ctx.case(UID[key])
        temp = case.test["params"]["temperature"]
        probs = case.test["expected"]["probs"]
        ax.bar([0, 1], [_f(p) for p in probs], width=0.55, color=[BLUE, ORANGE])
        for x, p in enumerate(probs):
            ax.text(x, _f(p) + 0.025, _short(p), ha="center", va="bottom")
        ax.set_xticks([0, 1], ["cat  (logit 2)", "dog  (logit 0)"])
        ax.set_ylim(0, 1.08)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_title(f"T = {temp:g}:  q = softmax((2, 0) / {temp:g})")
        _uid_note(ax, case.uid, y=-0.14)
    axes[0].set_ylabel("probability")
    fig.suptitle("Same logits, higher temperature: the smaller score gets more of the probability")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def _softmax_row(logits) -> list:
    from refimpl.exact import distill
    return list(distill.softmax(logits)[0]) if isinstance(logits[0], list) else list(distill.softmax(logits))


def fig_kl_weights(ctx: Context):
    """Forward KL(p‖q) weights the log-ratios by the teacher, reverse KL(q‖p) by the student."""
    fwd, rev = ctx.case(UID["kl_forward"]), ctx.case(UID["kl_reverse"])
    with mpmath.workdps(50):
        q = _softmax_row(fwd.test["inputs"]["student_logits"])
        p = _softmax_row(fwd.test["inputs"]["teacher_logits"])
        panels = [
            ("forward  KL(p ‖ q) = Σ p·log(p/q)", p, [mpmath.log(a / b) for a, b in zip(p, q)], ORANGE,
             "teacher weight p", fwd),
            ("reverse  KL(q ‖ p) = Σ q·log(q/p)", q, [mpmath.log(b / a) for a, b in zip(p, q)], BLUE,
             "student weight q", rev),
        ]
    fig = _new_figure(8.2, 4.0)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (title, weights, logs, color, label, case) in zip(axes, panels):
        ax.bar([0, 1], [float(w) for w in weights], width=0.55, color=color, label=label)
        for x, (w, lr) in enumerate(zip(weights, logs)):
            ax.text(x, float(w) + 0.02, f"weight {_short(w, 2)}\nlog-ratio {_short(lr, 3)}", ha="center",
                    va="bottom", fontsize=9)
        ax.set_xticks([0, 1], ["cat", "dog"])
        ax.set_ylim(0, 1.12)
        ax.set_title(f"{title}\n= {_short(case.test['expected']['kl'][0], 6)}")
        _uid_note(ax, case.uid, y=-0.11)
    axes[0].set_ylabel("weight of the token's log-ratio")
    fig.suptitle("Teacher p = (0.8, 0.2), student q = (0.4, 0.6): the first argument of the KL supplies the weights")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_one_token(ctx: Context):
    """Full-vocabulary reverse KL at one prefix against the one-token (sampled) estimate."""
    vocab, one = ctx.case(UID["kl_vocab"]), ctx.case(UID["kl_one_token"])
    with mpmath.workdps(50):
        q = _softmax_row(vocab.test["inputs"]["student_logits"])
        p = _softmax_row(vocab.test["inputs"]["teacher_logits"])
        terms = [a * mpmath.log(a / b) for a, b in zip(q, p)]
    full = vocab.test["expected"]["kl"][0]
    sampled = one.test["expected"]["value"][0]
    names = ["cat", "dog", "fox"]
    fig = _new_figure(9.4, 4.2)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.45]})
    xs = [0, 1, 2]
    left.bar([x - 0.19 for x in xs], [float(v) for v in q], width=0.36, color=BLUE, label="student q")
    left.bar([x + 0.19 for x in xs], [float(v) for v in p], width=0.36, color=ORANGE, label="teacher p")
    left.set_xticks(xs, ["cat\n(sampled)", "dog", "fox"])
    left.set_ylim(0, 0.75)
    left.set_ylabel("probability after «The animal is a»")
    left.legend(frameon=False, loc="upper right")
    left.set_title("next-token probabilities")
    xr = [0, 1, 2, 3.3, 4.5]
    heights = [float(t) for t in terms] + [_f(full), _f(sampled)]
    colors = [BLUE, BLUE, BLUE, GREEN, RED]
    right.bar(xr, heights, width=0.6, color=colors)
    right.axhline(0, color="black", lw=0.8)
    for x, h, text in zip(xr, heights, [_short(t, 3) for t in terms] + [_short(full, 3), _short(sampled, 3)]):
        right.text(x, h + (0.012 if h >= 0 else -0.012), text, ha="center", va="bottom" if h >= 0 else "top")
    right.set_xticks(xr, [f"{n}\nq·log(q/p)" for n in names] + ["Σ = d_t\n(full vocab.)", "cat only\n(one token)"])
    right.set_ylim(-0.26, 0.42)
    right.set_ylabel("nats")
    right.set_title("reverse KL at this prefix: all three terms vs the sampled token")
    _uid_note(right, vocab.uid, one.uid, y=-0.2)
    fig.suptitle("One sampled token or the whole vocabulary: a one-token sample can be negative, the KL cannot")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_dpo_gains(ctx: Context):
    """Two DPO pairs with the same margin Δ = 3: the loss cannot tell them apart, the gains can."""
    case = ctx.case(UID["dpo_gains"])
    inp = case.test["inputs"]
    beta = case.test["params"].get("beta", catalog.get("dpo.loss").defaults["beta"])
    pc, pr, rc, rr = (inp[k] for k in ("policy_chosen_logps", "policy_rejected_logps",
                                         "reference_chosen_logps", "reference_rejected_logps"))
    losses = case.test["expected"]["losses"]
    fig = _new_figure(8.2, 4.2)
    axes = fig.subplots(1, 2, sharey=True)
    for i, ax in enumerate(axes):
        gc, gr = pc[i] - rc[i], pr[i] - rr[i]
        ax.bar([0, 1], [gc, gr], width=0.55, color=[GREEN, RED])
        ax.axhline(0, color="black", lw=0.8)
        for x, g in enumerate((gc, gr)):
            ax.text(x, g + (0.15 if g >= 0 else -0.15), f"{g:+g}".replace("-", "−"), ha="center",
                    va="bottom" if g >= 0 else "top", fontsize=11)
        ax.annotate("", xy=(0.5, gr), xytext=(0.5, gc), arrowprops={"arrowstyle": "<->", "color": GREY})
        ax.text(0.5, (gc + gr) / 2, f"Δ = {gc - gr:g}", ha="center", va="center", color="black",
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})
        verdict = "preferred gains probability" if gc > 0 else "preferred LOSES probability"
        ax.set_title(f"case {i + 1}: {verdict}\nloss = {_short(losses[i], 8)}")
        ax.set_xticks([0, 1], ["preferred y_w\ng_w = log π/π_ref", "rejected y_l\ng_l = log π/π_ref"])
        ax.set_ylim(-5.2, 3.2)
    axes[0].set_ylabel("gain: change of log-probability vs the reference")
    _uid_note(axes[0], case.uid, y=-0.19)
    _uid_note(axes[1], f"β = {beta:g}: loss = −log σ(β·Δ) = −log σ(0.3)", y=-0.19)
    fig.suptitle("Same margin Δ = g_w − g_l = 3, same DPO loss: report the gains, not only the margin")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_grpo_advantages(ctx: Context):
    """Group-relative advantages of the article's group: rewards (0, 1, 1, 0) → (−1, 1, 1, −1)."""
    case = ctx.case(UID["grpo_adv"])
    rewards = case.test["inputs"]["rewards"][0]
    adv = [_f(a) for a in case.test["expected"]["advantages"][0]]
    with mpmath.workdps(50):
        r = [mpmath.mpf(x) for x in rewards]
        mean = mpmath.fsum(r) / len(r)
        std = mpmath.sqrt(mpmath.fsum((x - mean) ** 2 for x in r) / len(r))
    answers = ["«3»", "«4»", "«4»", "«5»"]
    fig = _new_figure(8.6, 3.9)
    left, right = fig.subplots(1, 2)
    xs = list(range(len(rewards)))
    left.bar(xs, rewards, width=0.55, color=[GREEN if x > mean else RED for x in r])
    for x, v in zip(xs, rewards):
        left.text(x, v + 0.03, f"r = {v:g}", ha="center", va="bottom")
    left.axhline(float(mean), color="black", lw=1.2, ls="--", label=f"group mean = {_short(mean, 2)}")
    left.annotate("", xy=(3.55, float(mean + std)), xytext=(3.55, float(mean)),
                  arrowprops={"arrowstyle": "<->", "color": GREY})
    left.text(3.5, float(mean + std / 2), f"population\nstd = {_short(std, 2)}", ha="right", va="center",
              fontsize=8.5, color=GREY)
    left.set_xticks(xs, answers)
    left.set_xlim(-0.6, 3.8)
    left.set_ylim(0, 1.35)
    left.set_ylabel("reward r_i")
    left.set_title("verifier rewards of G = 4 answers to «2 + 2?»")
    left.legend(frameon=False, loc="upper left", fontsize=8.5)
    right.bar(xs, adv, width=0.55, color=[GREEN if a > 0 else RED for a in adv])
    right.axhline(0, color="black", lw=0.8)
    for x, a in enumerate(adv):
        right.text(x, a + (0.06 if a >= 0 else -0.06), f"{a:+g}".replace("-", "−"), ha="center",
                   va="bottom" if a >= 0 else "top")
    right.set_xticks(xs, answers)
    right.set_ylim(-1.45, 1.45)
    right.set_ylabel("advantage A_i")
    right.set_title("A_i = (r_i − mean) / std")
    _uid_note(right, case.uid, y=-0.12)
    fig.suptitle("GRPO: each answer is judged against its own group")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


CLIP_GRID = [i / 200 for i in range(40, 381)]     # ρ from 0.2 to 1.9


def fig_clip(ctx: Context):
    """C_t = min(ρA, clip(ρ, 1−ε, 1+ε)·A) against ρ for A = +1 and A = −1, ε = 0.2 (exact reference)."""
    from refimpl.exact import grpo
    eps = 0.2
    logps = [math.log(r) for r in CLIP_GRID]
    curves = {}
    with mpmath.workdps(50):
        rho = [float(mpmath.exp(mpmath.mpf(lp))) for lp in logps]
        for a in (1.0, -1.0):
            n = len(logps)
            value = grpo.clip(logps, [0.0] * n, [a] * n, eps_low=eps)
            grad = grpo.clip_vjp([1.0] * n, logps, [0.0] * n, [a] * n, eps_low=eps)["logp"]
            curves[a] = ([float(v) for v in value], [float(g) for g in grad])
    points = {1.0: ctx.case(UID["clip_up"]), -1.0: ctx.case(UID["clip_down"])}
    fig = _new_figure(9.0, 4.1)
    axes = fig.subplots(1, 2)
    for ax, a in zip(axes, (1.0, -1.0)):
        values, grads = curves[a]
        ax.plot(rho, [r * a for r in rho], color=GREY, lw=1.0, ls="--", label="unclipped ρ·A")
        ax.plot(rho, values, color=BLUE if a > 0 else RED, lw=2.4, label="C_t (exact)")
        flat = [r for r, g in zip(rho, grads) if g == 0]
        lo, hi = min(flat), max(flat)
        ax.axvspan(lo, hi, color=GREY, alpha=0.15, label="flat: gradient 0")
        ax.axvline(1 - eps, color="black", lw=0.6, ls=":")
        ax.axvline(1 + eps, color="black", lw=0.6, ls=":")
        case = points[a]
        r_pt = math.exp(case.test["inputs"]["logp"][0] - case.test["inputs"]["old_logp"][0])
        c_pt = _f(case.test["expected"]["objective"][0])
        label = f"article: ρ = {r_pt:g} → C = {c_pt:.1f}".replace("-", "−")
        ax.plot([r_pt], [c_pt], "o", color="black", ms=6, label=label)
        ax.set_xlim(0.2, 1.9)
        ax.set_xticks([0.2, 0.5, 0.8, 1.0, 1.2, 1.5, 1.9])
        ax.set_xlabel("ratio ρ = π_θ / π_old")
        ax.set_ylabel("C_t  (maximised)")
        sign = "+1" if a > 0 else "−1"
        ax.set_title(f"A = {sign}, ε = {eps:g}: flat for ρ " + ("> 1 + ε" if a > 0 else "< 1 − ε"))
        ax.legend(frameon=False, fontsize=8.5, loc="upper left" if a > 0 else "lower left")
        _uid_note(ax, case.uid, y=-0.17)
    fig.suptitle("The clipped objective: where moving ρ further would help, the term goes flat (no hard limit on ρ)")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def _theorem_page(ctx: Context) -> str:
    from conformance import theorem_doc
    return theorem_doc.render()


def _theorem_figure(ctx: Context, old: bytes | None, path: str = "") -> bytes:
    import tempfile
    from conformance import theorem_doc
    with tempfile.TemporaryDirectory() as tmp, _style({}):
        out = theorem_doc.figure(Path(tmp) / "figure.png")
        return out.read_bytes()


def _family(family: str) -> tuple[str, ...]:
    return tuple(o.id for o in catalog.OBJECTIVES if o.family == family)


def _family_blocks(family: str, examples=None) -> dict:
    ids = _family(family)
    blocks = {
        "arguments": lambda ctx: arguments_table(ids),
        "libraries": lambda ctx: groups_table(ctx, ids),
        "examples": (lambda ctx: examples_table(ctx, family)) if examples is None
        else (lambda ctx: cases_table(ctx, examples)),
    }
    return blocks


def _theorem_blocks() -> dict:
    blocks = _family_blocks("proximal_kl", PROXIMAL_KL_EXAMPLES)
    blocks["theorem"] = _theorem_page
    return blocks


FIGURE_PAGES = {
    "docs/figures/softmax_temperature.png": "distill.md",
    "docs/figures/kl_weights.png": "distill.md",
    "docs/figures/one_token_vs_vocabulary.png": "distill.md",
    "docs/figures/dpo_gains.png": "dpo.md",
    "docs/figures/grpo_advantages.png": "grpo.md",
    "docs/figures/clip_objective.png": "grpo.md",
    THEOREM_FIGURE: "proximal_kl.md",
}

# Fast artifacts first; the two that run the 50-digit theorem last (about a minute together).
ARTIFACTS: tuple[Artifact, ...] = (
    Artifact("docs/figures/softmax_temperature.png", _figure(fig_temperature), figure=True,
             what="softmax of logits (2, 0) at T = 1 and T = 2"),
    Artifact("docs/figures/kl_weights.png", _figure(fig_kl_weights), figure=True,
             what="forward vs reverse KL weights, teacher (0.8, 0.2), student (0.4, 0.6)"),
    Artifact("docs/figures/one_token_vs_vocabulary.png", _figure(fig_one_token), figure=True,
             what="one sampled token vs the full vocabulary (cat, dog, fox)"),
    Artifact("docs/figures/dpo_gains.png", _figure(fig_dpo_gains), figure=True,
             what="DPO gains of two pairs with the same margin Δ = 3"),
    Artifact("docs/figures/grpo_advantages.png", _figure(fig_grpo_advantages), figure=True,
             what="GRPO advantages of rewards (0, 1, 1, 0)"),
    Artifact("docs/figures/clip_objective.png", _figure(fig_clip), figure=True,
             what="clipped objective C_t against the ratio, A = ±1, ε = 0.2"),
    Artifact("docs/distill.md", _page(_family_blocks("distill"))),
    Artifact("docs/kl.md", _page(_family_blocks("kl"))),
    Artifact("docs/dpo.md", _page(_family_blocks("dpo"))),
    Artifact("docs/grpo.md", _page(_family_blocks("grpo"))),
    Artifact("docs/vectors.md", _page({"tolerances": tolerance_table})),
    Artifact("docs/index.md", _page({"figures": figures_table})),
    Artifact(THEOREM_FIGURE, _theorem_figure, figure=True, slow=True,
             what="exact fixed-point iteration of several update rules (the stationary-policy theorem)",
             note="iterating the exact updates of 8 rules at 30 digits (about 10 s)"),
    Artifact(THEOREM_PAGE, _page(_theorem_blocks(), slow=("theorem",)),
             note="running the 50-digit stationary-policy table and the probe (about a minute)"),
)
