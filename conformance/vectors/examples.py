"""The source article's worked examples, read from the vectors."""
from __future__ import annotations

from conformance.vectors.load import VectorSet


def article_rows(vs: VectorSet) -> list[dict]:
    rows = []
    for case in vs.cases():
        prov = case.test["provenance"]
        if prov["kind"] != "article":
            continue
        params = {**case.conventions, **case.test["params"]}
        rows.append({
            "uid": case.uid,
            "objective": case.objective,
            "section": prov["section"],
            "inputs": case.test["inputs"],
            "params": {k: v for k, v in params.items() if v is not None},
            "printed": prov["printed"],
            "exact": case.test.get("expected", {}),
            "comment": case.test["comment"],
        })
    return rows
