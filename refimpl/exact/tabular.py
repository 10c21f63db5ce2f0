"""The catalog's tabular objectives: ``tabular.optimum``, ``tabular.sequence_kl`` and
``tabular.expected_update`` with the catalog's signatures (conformance/catalog.py).

Source: the stationary-policy theorem of Proximal KL (H. Bai, J. Yao, T. Zhang) as summarised in
[proximal-kl-summary], and FRPO (arXiv 2601.10201); the exact optimum, sequence KL and population update
are those of ``refimpl.exact._tree`` (its docstring has the definitions and the update rules).

A tree travels as arrays (conformance/catalog.py, _TREE_ENCODING): params vocab, horizon, eos;
a policy as a [P, V] array whose rows follow the tree's prefixes (breadth first, then
lexicographic); rewards as an [L] array in the order of its leaves. These functions decode the
arrays, compute on the tree, and return arrays in the same orders.
"""
from __future__ import annotations

from lossproof.refimpl import validate
from lossproof.refimpl.exact import _tree, mp

__all__ = ["optimum", "sequence_kl", "expected_update"]

CATALOG_EXTRA_DPS = 20   # at π* an update cancels ~17 digits: compute beyond the printed ones


def tree_of(vocab, horizon, eos=None, pi_ref=None, rewards=None, beta=1) -> _tree.Tree:
    """The tree that the catalog's arrays describe: π_ref rows in prefix order (uniform when
    None), rewards in leaf order (0 when None)."""
    vocab = validate.vocab(vocab)
    horizon = validate.horizon(horizon)
    eos = validate.eos(eos, vocab)
    skeleton = _tree.skeleton(vocab, horizon, eos)
    ends = _tree.leaves(skeleton)
    ref = (rows_to_policy(skeleton, "pi_ref", pi_ref) if pi_ref is not None
           else {s: _tree.uniform(vocab) for s in _tree.prefixes(skeleton)})
    if rewards is None:
        rw = [0] * len(ends)
    else:
        rw = mp.array("rewards", rewards)
        if rw.shape != (len(ends),):
            validate.fail("rewards", f"expected shape ({len(ends)},) (one reward per leaf), got {rw.shape}")
    return _tree.Tree("arrays", vocab, horizon, beta, dict(zip(ends, list(rw))), ref, eos=eos)


def rows_to_policy(tree: _tree.Tree, name: str, rows) -> dict:
    """A [P, V] array (rows in prefix order) as a policy dict (validated by ``_tree.policy``)."""
    a = mp.array(name, rows)
    shape = (len(_tree.prefixes(tree)), tree.vocab)
    if a.shape != shape:
        validate.fail(name, f"expected shape {shape} (prefixes × vocab), got {a.shape}")
    return {s: list(a[i]) for i, s in enumerate(_tree.prefixes(tree))}


def _rows(tree: _tree.Tree, p: dict):
    out = mp.zeros((len(_tree.prefixes(tree)), tree.vocab))
    for i, s in enumerate(_tree.prefixes(tree)):
        out[i, :] = p[s]
    return out


def _beta(beta):
    validate.regularization_beta(beta)
    return _tree.num(beta, "beta")


@mp.exact
def optimum(pi_ref, rewards, vocab=None, horizon=None, eos=None, beta=None) -> dict:
    """The optimum of E[r] − β·KL(π‖π_ref) on the tree (``_tree.optimum``: soft Bellman backup):
    {"policy": π*[P, V], "beta_log_z": β·log Z}."""
    b = _beta(beta)
    tree = tree_of(vocab, horizon, eos, pi_ref, rewards, beta=b)
    with mp.precision(mp.get_dps() + CATALOG_EXTRA_DPS):
        out = _tree.optimum(tree, beta=b)
        return {"policy": _rows(tree, out["policy"]), "beta_log_z": out["beta_log_z"]}


@mp.exact
def sequence_kl(pi, rho, vocab=None, horizon=None, eos=None) -> dict:
    """KL(π‖ρ) between the sequence distributions (``_tree.sequence_kl``): {"kl": the chain-rule
    sum (equal to the enumerated KL, and accurate when it is tiny), "reach": P_π(s)[P],
    "token_kl": KL(π(·|s)‖ρ(·|s))[P], "per_step": [H]}."""
    tree = tree_of(vocab, horizon, eos)
    p, q = rows_to_policy(tree, "pi", pi), rows_to_policy(tree, "rho", rho)
    with mp.precision(mp.get_dps() + CATALOG_EXTRA_DPS):
        out = _tree.sequence_kl(tree, p, q)
        pre = _tree.prefixes(tree)
        return {"kl": out["chain"],
                "reach": mp.array("reach", [out["per_prefix"][s]["reach"] for s in pre]),
                "token_kl": mp.array("token_kl", [out["per_prefix"][s]["token_kl"] for s in pre]),
                "per_step": mp.array("per_step", out["per_step"])}


@mp.exact
def expected_update(pi, mu, pi_ref, rewards, vocab=None, horizon=None, eos=None, beta=None,
                    rule: str = "proximal_kl", baseline: str = "mean") -> dict:
    """The exact population update of ``rule`` at every prefix (``_tree.expected_update``) with
    the rules' recorded parameters: {"update": Δθ[P, V]}. ``mu`` is validated always and
    ignored by the *_on_policy rules."""
    validate.update_rule(rule)
    validate.baseline(baseline)
    b = _beta(beta)
    tree = tree_of(vocab, horizon, eos, pi_ref, rewards, beta=b)
    p, m = rows_to_policy(tree, "pi", pi), rows_to_policy(tree, "mu", mu)
    _tree.policy(tree, m, "mu")
    with mp.precision(mp.get_dps() + CATALOG_EXTRA_DPS):
        out = _tree.expected_update(tree, p, mu=m, beta=b, rule=rule, baseline=baseline)
        return {"update": _rows(tree, out)}
