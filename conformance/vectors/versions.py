"""Released vector sets: version -> digest of their cases.

A paper cites a uid together with the vector-set version, so a version must name one set of
cases forever. The digest covers every test (inputs, params, expected values, gradients,
cotangents, dtypes, result, flags, provenance) and its group's conventions, and nothing that
may change without changing a case (tcIds, generator header, comments). ``lossproof vectors
lint`` refuses a vector directory whose cases differ from the digest recorded for its version:
whoever changes a case adds a new version here (the generator writes the newest one).
"""
from __future__ import annotations

RELEASED = {
    "1.0.0": "41381e87f7270313c12a63bf0cf369a66b36d54d4acfb60ee82cb16be5349d79",
}
CURRENT = next(reversed(RELEASED))
