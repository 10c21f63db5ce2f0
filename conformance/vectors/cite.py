"""Citing a vector: plain text, BibTeX and a LaTeX snippet with the exact digits."""
from __future__ import annotations

import conformance
from conformance.vectors.load import VectorCase


def _first_value(case: VectorCase) -> tuple[str, str]:
    name, value = next(iter(case.test.get("expected", {}).items()), ("", ""))
    while isinstance(value, list):
        value = value[0]
    return name, value


def text(case: VectorCase, vector_set_version: str, proof: str) -> str:
    """``proof``: the certificate's summary (conformance.vectors.certificates.summary)."""
    return (f"lossproof vector {case.uid} ({case.objective}), vector set {vector_set_version}, "
            f"lossproof {conformance.__version__}; {proof}")


def bibtex(case: VectorCase, vector_set_version: str, proof: str) -> str:
    key = case.uid.replace(".", "_").replace(":", "_")
    return (f"@misc{{lossproof_{key},\n"
            f"  author = {{{{The lossproof authors}}}},\n"   # as in CITATION.cff
            f"  title = {{lossproof test vector {case.uid}: {case.objective}}},\n"
            f"  note = {{{case.test['comment']}. Vector set {vector_set_version}, exact to 32 digits; {proof}}},\n"
            f"  howpublished = {{lossproof {conformance.__version__}, \\texttt{{lossproof show {case.uid}}}}},\n"
            f"}}")


def latex(case: VectorCase, vector_set_version: str, proof: str) -> str:
    name, value = _first_value(case)
    objective = case.objective.replace("_", r"\_")
    return (f"% lossproof {case.uid} (vector set {vector_set_version}): {proof}\n"
            f"\\texttt{{{objective}}} & {name.replace('_', chr(92) + '_')} & "
            f"\\num{{{value}}} & \\texttt{{{case.uid.split(':')[1]}}} \\\\")
