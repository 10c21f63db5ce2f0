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
