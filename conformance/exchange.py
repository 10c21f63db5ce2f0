"""Out-of-process conformance, for implementations in other languages or frameworks.

``export_prompts`` writes, per objective, the inputs of every vector (no expected values);
the implementation computes its outputs (and gradients: VJPs with the given cotangents)
and writes a responses file; ``validate`` judges that file against the vectors.

Responses (``lossproof-responses/1``)::

    {"schema": "lossproof-responses/1", "target": "my-impl", "dtype": "float32",
     "responses": {UID: {"outputs": {name: nested numbers}, "grads": {input: nested numbers}}
                   | {"error": "message"}}}
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lossproof.conformance import catalog, compare, numbers, plan, verdict
from lossproof.conformance._io import write_atomically
from lossproof.conformance.results import CaseResult
from lossproof.conformance.vectors.load import VectorError, VectorSet

PROMPTS_SCHEMA = "lossproof-prompts/1"
RESPONSES_SCHEMA = "lossproof-responses/1"


def export_prompts(vs: VectorSet, directory: Path, objective: str = "*") -> dict[str, int]:
    by_objective: dict[str, list] = {}
    for case in vs.cases(objective):
        t = case.test
        by_objective.setdefault(case.objective, []).append({
            "uid": case.uid, "result": t["result"], "dtypes": t["dtypes"], "inputs": t["inputs"],
            "params": t["params"], "conventions": case.conventions, "cotangents": t.get("cotangents", {}),
        })
    for objective_id, cases in by_objective.items():
        spec = catalog.get(objective_id)
        doc = {"schema": PROMPTS_SCHEMA, "objective": objective_id,
               "arguments": [i.name for i in spec.inputs] + [p.name for p in spec.params],
               "outputs": list(spec.outputs), "grads": list(spec.grads), "cases": cases}
        write_atomically(directory / spec.family / f"{spec.name}.json",
                         (json.dumps(doc, indent=1) + "\n").encode())
    return {k: len(v) for k, v in by_objective.items()}


def _load_responses(path: Path) -> dict:
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise VectorError(path, "$", f"cannot read responses: {err}") from None
    if not isinstance(doc, dict) or doc.get("schema") != RESPONSES_SCHEMA:
        raise VectorError(path, "$.schema", f"expected {RESPONSES_SCHEMA!r}")
    if doc.get("dtype") not in compare.UNIT_ROUNDOFF:
        raise VectorError(path, "$.dtype", f"must be one of {', '.join(compare.UNIT_ROUNDOFF)}")
    if not isinstance(doc.get("responses"), dict):
        raise VectorError(path, "$.responses", "must be an object keyed by uid")
    return doc


def validate(vs: VectorSet, path: Path, tolerances: compare.Tolerances | None = None) -> list[CaseResult]:
    tolerances = tolerances or compare.Tolerances({})
    doc = _load_responses(path)
    dtype, name = doc["dtype"], str(doc.get("target", path.stem))
    index = {c.uid: c for c in vs.cases()}
    results = []
    for uid, response in doc["responses"].items():
        case = index.get(uid)
        if case is None:
            raise VectorError(path, f"$.responses[{uid!r}]", "no vector with this uid")
        spec, test = catalog.get(case.objective), case.test
        p = plan.response(case, dtype, tolerances)
        res = CaseResult(uid, case.objective, name, dtype, "-", "pass", test["flags"],
                                 repro=f"lossproof validate {path}", result=test["result"])
        results.append(res)
        if not isinstance(response, dict):
            res.status, res.message = "error", "response must be an object"
            continue
        if test["result"] == "invalid":
            if "error" in response:
                verdict.judge_invalid(res, {"type": "reported", "message": response["error"]}, True, test)
            else:
                values = [numbers.decode_input(v) for v in response.get("outputs", {}).values()]
                finite = all(np.isfinite(np.asarray(v, dtype=np.float64)).all() for v in values)
                verdict.judge_invalid(res, None, finite, test)
            continue
        if "error" in response:
            res.status, res.message = "error", f"reported error: {str(response['error'])[:300]}"
            continue
        if p.status != "run":
            res.status, res.message = p.status, p.why
            continue
        outputs, grads = response.get("outputs", {}), response.get("grads")
        if spec.outputs[0] not in outputs:
            res.status, res.message = "error", (f"the response has no primary output {spec.outputs[0]!r} "
                                                f"({spec.id} outputs: {', '.join(spec.outputs)})")
            continue
        judged = verdict.Judgement(res, p.tolerance)
        for out in spec.outputs:
            if out not in outputs:
                judged.missing(out)
                continue
            got = np.asarray(numbers.decode_input(outputs[out]), dtype=np.float64)
            judged.output(out, got, test["expected"][out])
        if grads is not None and test.get("grads"):
            for g in spec.grads_of(test["inputs"]):
                if g not in grads:
                    judged.missing(f"grad:{g}")
                    continue
                got = np.asarray(numbers.decode_input(grads[g]), dtype=np.float64)
                judged.output(f"grad:{g}", got, test["grads"][g])
        judged.decide(test["result"])
    return results
