"""Citing a vector: plain text, BibTeX and a LaTeX snippet with the exact digits.

Every form says what the digits are: the exact value at the inputs and parameters *as stored*,
binary64 numbers taken exactly, not at the shorter decimals a paper may print (ε = 0.2 is
stored as 0.200000000000000011102230246251565…, and the value moves from the 17th digit on).
A worked example of the source article also carries the value at the reals the article prints
(:class:`Printed`, conformance.vectors.examples), proven by the certified reference.
"""
from __future__ import annotations

import importlib.metadata
import json
import re
from dataclasses import dataclass

from lossproof import conformance
from lossproof.conformance.vectors.load import VectorCase
from lossproof.conformance.vectors.versions import YEARS

AS_STORED = ("the digits are those of the exact value at the binary64 inputs and parameters as stored "
             "(lossproof show {uid}), not at shorter decimal inputs")


@dataclass(frozen=True)
class Printed:
    """An article example's value at the reals the article prints. ``reals``: those reals as
    text ("" when every input and parameter is exact as printed: the stored digits are then the
    printed inputs' too); ``values``: {output: nested 32-digit strings} proven at ``bits``, or
    None with ``reason`` ("not proven at N bits: why") when no precision proves them."""
    reals: str
    values: dict | None = None
    bits: int | None = None
    reason: str = ""

    def sentence(self) -> str:
        if not self.reals:
            return "the article prints these binary64 inputs exactly, so the digits are also its value"
        where = f"at the article's printed inputs ({self.reals})"
        if self.values is None:
            return f"{where} the value is {self.reason}"
        shown = ", ".join(f"{k} = {json.dumps(v)}" for k, v in self.values.items())
        return f"{where} the exact value is {shown} (proven to 32 digits at {self.bits} bits)"

    def element(self, label: str, index: tuple) -> str | None:
        """The digits of one output element at the printed reals (None: a gradient, or unproven)."""
        if not self.reals:
            return None
        value = (self.values or {}).get(label)
        for i in index:
            value = None if value is None else value[i]
        return value


class CiteError(ValueError):
    """An output or element that the vector does not hold (the CLI reports it as a usage error)."""


def values(case: VectorCase) -> dict:
    """Every number a vector holds by label: its outputs by name, its gradients as ``grad:NAME``."""
    return {**case.test.get("expected", {}), **{f"grad:{k}": v for k, v in case.test.get("grads", {}).items()}}


def select(case: VectorCase, output: str | None = None, element: str | None = None) -> tuple[str, tuple, str]:
    """(label, index, the 32-digit string) of one number: ``output`` (default: the first output),
    ``element`` as comma-separated indices, e.g. "0,2" (default: the first element)."""
    held = values(case)
    if not held:
        raise CiteError(f"{case.uid} is an invalid input: it holds no exact value to cite")
    label = output or next(iter(held))
    if label not in held:
        raise CiteError(f"--output {label!r}: {case.uid} holds {', '.join(held)}")
    value, index = held[label], []
    wanted = None if element is None else element.replace(" ", "").split(",")
    try:
        positions = [int(i) for i in wanted] if wanted is not None else None
    except ValueError:
        raise CiteError(f"--element {element!r}: expected indices such as 0 or 1,3") from None
    while isinstance(value, list):
        i = positions[len(index)] if positions is not None and len(index) < len(positions) else 0
        if not -len(value) <= i < len(value):
            raise CiteError(f"--element {element!r}: index {i} is outside an axis of length {len(value)} "
                            f"of {label}")
        value, index = value[i], index + [i % len(value)]
    if positions is not None and len(positions) != len(index):
        raise CiteError(f"--element {element!r}: {label} has {len(index)} ax{'i' if len(index) == 1 else 'e'}s")
    return label, tuple(index), value


_BIBTEX_SPECIALS = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "$": r"\$",
                    "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def escape(text: str) -> str:
    """``text`` with the characters BibTeX and LaTeX give a meaning written as literals."""
    return re.sub(r"[\\{}&%$#_~^]", lambda m: _BIBTEX_SPECIALS[m.group()], text)


def homepage() -> str:
    """The project's URL from the installed distribution's metadata (``[project.urls]``), or ""."""
    try:
        meta = importlib.metadata.metadata("lossproof")
    except importlib.metadata.PackageNotFoundError:
        return ""
    urls = [u.partition(",")[2].strip() for u in meta.get_all("Project-URL") or []]
    return next((u for u in urls if u), meta.get("Home-page") or "")


def _also(printed: Printed | None) -> str:
    return f"; {printed.sentence()}" if printed else ""


def text(case: VectorCase, vector_set_version: str, proof: str, printed: Printed | None = None) -> str:
    """``proof``: the certificate's summary (conformance.vectors.certificates.summary);
    ``printed``: an article example's value at the printed inputs."""
    return (f"lossproof vector {case.uid} ({case.objective}), vector set {vector_set_version}, "
            f"lossproof {conformance.__version__}; {proof}; {AS_STORED.format(uid=case.uid)}{_also(printed)}")


def bibtex(case: VectorCase, vector_set_version: str, proof: str, url: str | None = None,
           printed: Printed | None = None) -> str:
    """``url``: the project's (default: :func:`homepage`); the field is left out without one."""
    key = case.uid.replace(".", "_").replace(":", "_")
    url = homepage() if url is None else url
    fields = [
        ("author", "{The lossproof authors}"),   # as in CITATION.cff
        ("title", escape(f"lossproof test vector {case.uid}: {case.objective}")),
        ("year", str(YEARS.get(vector_set_version, ""))),
        ("note", escape(f"{case.test['comment']}. Vector set {vector_set_version}, exact to 32 digits; {proof}; "
                        f"{AS_STORED.format(uid=case.uid)}{_also(printed)}")),
        ("howpublished", f"lossproof {escape(conformance.__version__)}, \\texttt{{lossproof show {escape(case.uid)}}}"),
        ("url", url),
    ]
    body = "".join(f"  {name} = {{{value}}},\n" for name, value in fields if value)
    return f"@misc{{lossproof_{key},\n{body}}}"


def latex(case: VectorCase, vector_set_version: str, proof: str, output: str | None = None,
          element: str | None = None, printed: Printed | None = None) -> str:
    """A table row: objective, the output (and its element when it has axes), the 32 digits in
    siunitx's ``\\num``, the uid's hash. For an article example, a second comment line gives the
    same element at the printed inputs (to put in the row instead when the table means those)."""
    label, index, value = select(case, output, element)
    where = escape(label) + (f"[{','.join(map(str, index))}]" if index else "")
    head = f"% lossproof {case.uid} (vector set {vector_set_version}): {proof}; {AS_STORED.format(uid=case.uid)}\n"
    if printed is not None:
        at = printed.element(label, index)
        head += (f"% {printed.sentence()}\n" if at is None else
                 f"% at the article's printed inputs ({printed.reals}): {where} = \\num{{{at}}} "
                 f"(proven at {printed.bits} bits)\n")
    return (f"{head}\\texttt{{{escape(case.objective)}}} & {where} & "
            f"\\num{{{value}}} & \\texttt{{{case.uid.split(':')[1]}}} \\\\")
