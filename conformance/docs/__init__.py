"""Generated documentation (maintainer side): every table, figure, console session and page of
``docs/`` and ``README.md`` that comes from the vectors, the exact reference or a real run.
``lossproof docs build`` rebuilds them and ``lossproof docs build --check`` verifies them; the
registry of what is generated, from which inputs, is ``conformance.docs.build.ARTIFACTS``.

- ``blocks``: the ``<!-- generated:NAME -->`` markers of a hand-written page.
- ``figures``: the house style, and PNG bytes that carry a digest of what they show.
- ``context``: what every producer shares (the checkout's root, the vector set loaded once).
- ``families``: the tables and figures of the family pages and of docs/vectors.md.
- ``theorem_page``: the stationary-policy part of docs/proximal_kl.md and its figure.
- ``conventions``: docs/conventions.md, from real runs of the third-party adapters.
- ``distributed``: the figure and the results of docs/distributed.md (real rank processes).
- ``performance``: the tables and figures of docs/performance.md, from benchmarks/results/*.json.
- ``mutation``: docs/mutation.md, from the kill table recorded from the mutants (docs/mutation.json).
- ``sessions``: the console sessions shown in README.md and docs/, run and captured.
- ``build``: the registry and the build.
"""
from __future__ import annotations

from lossproof.conformance.errors import LossproofError


class DocsError(LossproofError):
    """The build cannot run on these inputs (a page without its markers, matplotlib missing, a
    session whose command fails); the CLI reports it on one line with exit status 2."""


class Unavailable(LossproofError):
    """An artifact's inputs are not on this machine (a peer library, torch, the
    recorded kill table): the build leaves the file as it is and reports it as skipped,
    with this message as the reason."""
