"""What a family's case builder produces: one test before its exact values are computed."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Case:
    objective: str
    inputs: dict                      # name -> nested lists of Python numbers (binary64)
    params: dict = field(default_factory=dict)        # arguments that are not conventions
    conventions: dict = field(default_factory=dict)   # missing ones take the paper default
    flags: tuple = ()
    comment: str = ""
    result: str = "valid"             # valid | invalid | acceptable
    provenance: dict = field(default_factory=dict)
    low_precision: bool = False       # also meaningful in bfloat16 / float16 when representable
    cotangents: dict | None = None    # default: drawn from a seed derived from the uid
    group: str = "paper"              # the convention set this case belongs to (paper, trl-1.16, …)
    tolerance: dict | None = None     # per-case override of the tolerance policy, e.g. {"k": 64}


def article(section: str, printed: str, file: str = "000_e49910fd474b12d2.txt") -> dict:
    return {"kind": "article", "file": file, "section": section, "printed": printed}


def paper(arxiv: str, where: str) -> dict:
    return {"kind": "paper", "arxiv": arxiv, "where": where}


def generated(seed: int, recipe: str) -> dict:
    return {"kind": "generated", "seed": seed, "recipe": recipe}


# The effect of the bug classes that many flags guard against, said once: a flag's note that
# states no ``effect`` of its own is written with its bugType's (docs/vectors.md, notes).
EFFECTS = {
    "formula": "A wrong term, sign, factor or reduction changes the value and gradient of ordinary inputs.",
    "precision": ("Computing or accumulating in bfloat16/float16 instead of float32 inside, or rounding "
                  "intermediates, gives results far from the exact ones in the training dtypes."),
    "input-validation": ("Input outside the domain (NaN, shapes that disagree, parameters out of range) silently "
                         "returns a number instead of an error."),
}


def with_effect(note: dict) -> dict:
    """The note as written in a vector file: its own effect, else its bugType's (EFFECTS)."""
    if "effect" in note or note.get("bugType") not in EFFECTS:
        return note
    return {**note, "effect": EFFECTS[note["bugType"]]}


# The flags of a case whose mask empties some rows, as a token mean judges it (the sequence-mean
# counterpart adds "SeqMean"): what conformance.derive re-judges under the conventions it derives for.
ROWS_WITHOUT_TOKENS = ("FullyMaskedRow", "EntropyFullyMaskedRow")


def rows_without_tokens(conventions: dict, flag: str = "FullyMaskedRow") -> tuple[str, str]:
    """The flag and result of a case whose mask empties some rows, under the conventions that
    reduce it (``aggregation``, or ``mode`` for grpo.aggregate; an objective without one is
    token-level). Under a token mean (or a sum) such a row adds nothing to the numerator or the
    denominator: ``flag``, valid. Under a sequence mean (``seq-mean-*``) it is 0/0 in the papers;
    the exact reference leaves it out of the mean over rows and other libraries count it as a
    zero-loss row, so the case is acceptable in every group: ``flag + "SeqMean"``. Committed and
    derived cases (conformance.derive) alike take their result from here."""
    aggregation = conventions.get("aggregation", conventions.get("mode")) or "token-mean"
    return (flag + "SeqMean", "acceptable") if aggregation.startswith("seq-mean") else (flag, "valid")
