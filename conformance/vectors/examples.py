"""The source article's worked examples, read from the vectors, and the reals the article prints
for their inputs.

A vector stores binary64 numbers: the article's teacher probabilities (0.8, 0.2) become the
logits log 0.8 = -0.2231435513142097… and log 0.2, its ε = 0.2 the binary64 number
0.200000000000000011102230246251565…, and the exact value at those inputs moves from about the
17th digit on from the value at the printed reals. ``PRINTED`` names, for each worked example
whose inputs are not exact as printed, the reals the article means: the vector's binary64 inputs
are their roundings (tests/test_examples.py checks it), and
``conformance.vectors.certify.at_printed`` proves the digits of the value at them. A float
parameter stands for its shortest decimal (``repr``: 0.1, 0.2), which is how the article prints
it; integers and logits such as (2, 0) are exact as printed and need no entry.
"""
from __future__ import annotations

from decimal import Decimal

from lossproof.conformance.vectors.load import VectorCase, VectorSet

# Article part 3, "Destilación on-policy": teacher (0.8, 0.2) and student (0.4, 0.6) over cat, dog.
_CAT_DOG = {"student_logits": ("log", [["0.4", "0.6"]]), "teacher_logits": ("log", [["0.8", "0.2"]])}
# "Un token muestreado o todo el vocabulario": student (0.5, 0.2, 0.3), teacher (0.6, 0.3, 0.1).
_THREE = {"student_logits": ("log", [["0.5", "0.2", "0.3"]]), "teacher_logits": ("log", [["0.6", "0.3", "0.1"]])}

# {uid: {input: (transform, nested decimal strings)}}; transform "log": the input is the log of
# the printed probabilities, "": the printed numbers themselves.
PRINTED: dict[str, dict[str, tuple[str, list]]] = {
    **{f"distill.{uid}": _CAT_DOG for uid in (
        "hinton:e6ba2cad6bdf9dd2", "hinton:1df830366ec4f199", "skew_kl:122a3ab51e9b20f1",
        "skew_kl:0d3d16c46d2d7f2b", "symmetric_kl:01fa091e053d6cf1", "symmetric_kl:5c30323d42946216",
        "token_kl:12aa8b78f4e4db79", "token_kl:f54e6621a6e1b392", "token_kl:e8fe7187c29c947d",
        "tvd:517e60d49c00485b")},
    **{f"distill.{uid}": _THREE for uid in (
        "skew_kl:e334b4cb9debc10c", "skew_kl:50d254af89f6a202", "token_kl:2998b48966debb47",
        "tvd:33a45d5ff4ea2ea5")},
    # "GRPO ... Qué cambia respecto a PPO": probability 0.20 then 0.24; ratios 1.5 and 0.5
    "grpo.clip:feae24b8480c7fd5": {"logp": ("log", ["0.24"]), "old_logp": ("log", ["0.20"])},
    "grpo.clip:c112848979dae3f3": {"logp": ("log", ["1.5"])},
    "grpo.clip:711dd655ddec928f": {"logp": ("log", ["0.5"])},
    # the sampled «cat» of the three-token example: student 0.5, reference 0.6
    "kl.estimator:c86edf64307eb8fb": {"logp": ("log", ["0.5"]), "ref_logp": ("log", ["0.6"])},
}


def is_article(case: VectorCase) -> bool:
    return case.test["provenance"]["kind"] == "article"


def parameters(case: VectorCase) -> dict:
    """The example's parameters (conventions and test parameters) that are set."""
    return {k: v for k, v in {**case.conventions, **case.test["params"]}.items() if v is not None}


def printed_reals(case: VectorCase) -> dict[str, tuple[str, list]] | None:
    """The inputs and parameters of an article example whose printed real is not their binary64
    number: ``PRINTED``'s inputs, and every float parameter whose shortest decimal is not exact
    in binary (β = 0.1 but not T = 2.0). Empty: the value at the printed reals is the vector's.
    None: an example with non-integer inputs that ``PRINTED`` does not record (unknown reals)."""
    if case.uid not in PRINTED and not all(float(v).is_integer() for v in _leaves(case.test["inputs"])):
        return None
    out = dict(PRINTED.get(case.uid, {}))
    for name, v in parameters(case).items():
        if isinstance(v, float) and Decimal(v) != Decimal(repr(v)):
            out[name] = ("", repr(v))
    return out


def _leaves(x):
    if isinstance(x, dict):
        x = list(x.values())
    if isinstance(x, list):
        for v in x:
            yield from _leaves(v)
    elif not isinstance(x, str):   # ±Infinity/NaN strings are not printed reals of an example
        yield x


def describe(reals: dict[str, tuple[str, list]]) -> str:
    """The printed reals as text: ``teacher_logits = log [[0.8, 0.2]]; beta = 0.1``."""
    def show(x):
        return f"[{', '.join(show(v) for v in x)}]" if isinstance(x, list) else x
    return "; ".join(f"{name} = {transform + ' ' if transform else ''}{show(decimals)}"
                     for name, (transform, decimals) in reals.items())


def article_rows(vs: VectorSet) -> list[dict]:
    rows = []
    for case in vs.cases():
        if not is_article(case):
            continue
        prov = case.test["provenance"]
        rows.append({
            "uid": case.uid,
            "objective": case.objective,
            "section": prov["section"],
            "inputs": case.test["inputs"],
            "params": parameters(case),
            "printed": prov["printed"],
            "exact": case.test.get("expected", {}),
            "printed_reals": printed_reals(case),        # None: not recorded
            "comment": case.test["comment"],
        })
    return rows
