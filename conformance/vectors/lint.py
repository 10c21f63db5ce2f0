"""Lint: what a vector directory must satisfy beyond its schema (canonical bytes, uids that
match their content, tcIds in order, representable low-precision inputs, 30 digits, bulky
tests in the objective's compressed part and nowhere else)."""
from __future__ import annotations

from lossproof.conformance import catalog, numbers
from lossproof.conformance.vectors import versions
from lossproof.conformance.vectors.format import cases_digest, json_path, serialize, split_large, uid
from lossproof.conformance.vectors.load import VectorSet


def lint(vs: VectorSet) -> list[str]:
    """Problems beyond the schema: an empty list means the directory is clean."""
    problems = []
    seen_uids: dict[str, str] = {}
    for rel, doc in vs.files.items():
        where = vs.directory / rel
        canonical = dict(zip((rel, vs.large_part(rel)), split_large(doc)))
        for part, _ in vs.parts(rel):
            if canonical.get(part) is None or serialize(canonical[part]) != vs.raw[part]:
                problems.append(f"{vs.directory / part}: $: not in canonical formatting or split (a bulky test, "
                                "flagged Large or longer than format.BULKY_BYTES, belongs in the objective's "
                                ".large.json.gz, every other test in its .json: "
                                "regenerate the file)")
        if doc["objective"] not in catalog.BY_ID:
            problems.append(f"{where}: $.objective: unknown objective {doc['objective']!r}")
            continue
        spec = catalog.get(doc["objective"])
        expected_rel = f"{spec.family}/{spec.name}.json"
        if rel != expected_rel:
            problems.append(f"{where}: $: objective {spec.id} belongs in {expected_rel}")
        tcids = []
        for gi, group in enumerate(doc["testGroups"]):
            if set(group["conventions"]) != set(spec.conventions):
                problems.append(f"{where}: {json_path(['testGroups', gi, 'conventions'])}: "
                                f"must name exactly the conventions {sorted(spec.conventions)}")
            for ti, test in enumerate(group["tests"]):
                jp = json_path(["testGroups", gi, "tests", ti])
                tcids.append(test["tcId"])
                if test["uid"] in seen_uids:
                    problems.append(f"{where}: {jp}.uid: duplicate of {seen_uids[test['uid']]}")
                seen_uids[test["uid"]] = f"{rel} {jp}"
                inputs = {k: numbers.decode_input(v) for k, v in test["inputs"].items()}
                conventions = {n: group["conventions"].get(n, spec.defaults[n]) for n in spec.conventions}
                if uid(spec.id, inputs, test["params"], spec.uid_conventions(conventions)) != test["uid"]:
                    problems.append(f"{where}: {jp}.uid: does not match the content hash")
                if test["result"] == "acceptable" and not test["flags"]:
                    problems.append(f"{where}: {jp}.flags: an acceptable case must carry a flag")
                for dtype in test["dtypes"]:
                    for name, value in test["inputs"].items():
                        kind = next((i.kind for i in spec.inputs if i.name == name), None)
                        if kind is None:
                            problems.append(f"{where}: {jp}.inputs.{name}: not an input of {spec.id}")
                            break
                        if kind == "float" and not all(
                                numbers.representable(v, dtype)
                                for v in numbers.flat_floats(numbers.decode_input(value))):
                            problems.append(f"{where}: {jp}.inputs.{name}: not exactly representable in {dtype}")
                for section in ("expected", "grads"):
                    for name, value in test.get(section, {}).items():
                        for s in _flat(value):
                            if s not in ("0", "Infinity", "-Infinity") and _significant(s) < 30:
                                problems.append(f"{where}: {jp}.{section}.{name}: fewer than 30 digits ({s})")
                                break
        if sorted(tcids) != list(range(1, len(tcids) + 1)) or tcids != sorted(tcids):
            problems.append(f"{where}: $.testGroups: tcIds must run 1..n in order")
        if doc["numberOfTests"] != len(tcids):
            problems.append(f"{where}: $.numberOfTests: says {doc['numberOfTests']}, file holds {len(tcids)}")
    problems += _version_problems(vs)
    return problems


def _version_problems(vs: VectorSet) -> list[str]:
    problems = []
    for rel, doc in vs.files.items():
        version, where = doc["vectorSetVersion"], vs.directory / rel
        released = versions.RELEASED.get(version)
        if released is None:
            problems.append(f"{where}: $.vectorSetVersion: {version} is not recorded in conformance/vectors/versions.py")
        elif released.get(doc["objective"]) != cases_digest(doc):
            problems.append(f"{where}: $.testGroups: the cases differ from those released as vector set {version} "
                            f"(a changed case needs a new version in conformance/vectors/versions.py)")
    return problems


def _flat(x):
    if isinstance(x, list):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def _significant(s: str) -> int:
    mantissa = s.lstrip("-").split("e")[0].replace(".", "").lstrip("0")
    return len(mantissa)
