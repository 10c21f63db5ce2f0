"""Small valid inputs for every catalog objective, as NumPy arrays, and their conversion to
what each reference backend takes; shared by the tests that feed the three backends the same
call (tests/test_bad_input_properties.py, tests/test_convention_checks.py)."""
from __future__ import annotations

import importlib

import numpy as np

try:
    import torch
except ImportError:   # without torch, the "torch" cases skip with a reason (tests/conftest.py)
    torch = None

from lossproof.conformance import catalog

BACKENDS = ("exact", "arrays", "torch")


def function(backend: str, objective_id: str, vjp: bool = False):
    """``refimpl.<backend>.<family>.<name>`` (``_vjp`` appended when ``vjp``), or None."""
    spec = catalog.get(objective_id)
    module = importlib.import_module(f"lossproof.refimpl.{backend}.{spec.family}")
    return getattr(module, spec.name + ("_vjp" if vjp else ""), None)


def backends_of(objective_id: str) -> tuple[str, ...]:
    """The reference backends that implement the objective (tabular: the exact one only)."""
    return ("exact",) if objective_id.startswith("tabular.") else BACKENDS


def valid_inputs(objective_id: str, seed: int) -> dict:
    """Small valid inputs (NumPy, float64; labels int64; masks 0/1 with a token per row).
    Tabular objectives get the tree V = 2, H = 2 (3 prefixes, 4 leaves) as arrays, with
    its vocab and horizon among the inputs."""
    rng = np.random.default_rng(seed)
    n, v, b, t, g = 3, 4, 2, 5, 4

    def logp(*shape):
        return -rng.uniform(0.05, 4.0, size=shape)

    mask = (rng.uniform(size=(b, t)) > 0.3).astype(np.float64)
    mask[:, 0] = 1.0
    if objective_id == "distill.softmax":
        return {"logits": rng.normal(size=(n, v))}
    if objective_id in ("distill.token_kl", "distill.generalized_jsd", "distill.symmetric_kl", "distill.skew_kl",
                        "distill.tvd"):
        return {"student_logits": rng.normal(size=(n, v)), "teacher_logits": rng.normal(size=(n, v))}
    if objective_id == "distill.hinton":
        return {"student_logits": rng.normal(size=(n, v)), "teacher_logits": rng.normal(size=(n, v)),
                "labels": rng.integers(0, v, size=n)}
    if objective_id == "distill.sparse_kl":   # a top-2 teacher in a random order, mass below 1
        return {"student_logits": rng.normal(size=(n, v)),
                "teacher_ids": np.array([rng.permutation(v)[:2] for _ in range(n)]),
                "teacher_logps": np.log(rng.dirichlet(np.ones(2), size=n) * 0.9)}
    if objective_id == "kl.estimator":
        return {"logp": logp(n), "ref_logp": logp(n)}
    if objective_id == "dpo.loss":
        return {**{k: logp(b) * 20 for k in ("policy_chosen_logps", "policy_rejected_logps",
                                             "reference_chosen_logps", "reference_rejected_logps")},
                "chosen_lengths": rng.integers(1, 30, size=b)}
    if objective_id == "preference.simpo":
        return {"chosen_logps": logp(b) * 20, "rejected_logps": logp(b) * 20,
                "chosen_lengths": rng.integers(1, 30, size=b), "rejected_lengths": rng.integers(1, 30, size=b)}
    if objective_id == "preference.cpo":
        return {"chosen_logps": logp(b), "rejected_logps": logp(b), "chosen_lengths": rng.integers(1, 30, size=b)}
    if objective_id == "preference.orpo":
        return {"chosen_logps": logp(b), "rejected_logps": logp(b)}
    if objective_id == "preference.kto":
        return {"policy_logps": logp(n) * 20, "reference_logps": logp(n) * 20,
                "desirable": np.array([1.0, 0.0, 1.0]), "kl_policy_logps": logp(b) * 20,
                "kl_reference_logps": logp(b) * 20}
    if objective_id == "grpo.advantages":
        return {"rewards": rng.integers(0, 3, size=(b, g)).astype(np.float64)}
    if objective_id == "grpo.clip":
        return {"logp": logp(n), "old_logp": logp(n), "advantages": rng.normal(size=n)}
    if objective_id == "grpo.aggregate":
        return {"values": rng.normal(size=(b, t)), "mask": mask}
    if objective_id == "grpo.loss":
        return {"logp": logp(b, t), "old_logp": logp(b, t), "ref_logp": logp(b, t),
                "advantages": rng.normal(size=b), "mask": mask}
    if objective_id == "grpo.rollout_correction":
        return {"old_logp": logp(b, t), "rollout_logp": logp(b, t), "mask": mask}
    if objective_id == "proximal_kl.future_cost":
        return {"logp": logp(b, t), "ref_logp": logp(b, t), "mask": mask}
    if objective_id == "proximal_kl.loss":
        return {"logp": logp(b, t), "behavior_logp": logp(b, t), "ref_logp": logp(b, t),
                "advantages": rng.normal(size=b), "mask": mask}
    if objective_id == "gae.advantages":
        return {"rewards": rng.normal(size=(b, t)), "values": rng.normal(size=(b, t)), "mask": mask}
    if objective_id == "gae.kl_rewards":
        return {"scores": rng.normal(size=b), "logp": logp(b, t), "ref_logp": logp(b, t), "mask": mask}
    if objective_id in ("lm.cross_entropy", "lm.token_logprobs"):
        # a label at V − 1: logits with a shorter vocabulary are invalid input
        return {"logits": rng.normal(size=(n, v)), "labels": np.array([v - 1, *rng.integers(0, v, size=n - 1)])}
    if objective_id == "lm.entropy":
        return {"logits": rng.normal(size=(n, v))}
    if objective_id == "lm.linear_cross_entropy":
        return {"hidden": rng.normal(size=(n, 2)), "weight": rng.normal(size=(v, 2)),
                "labels": np.array([v - 1, *rng.integers(0, v, size=n - 1)]), "bias": rng.normal(size=v)}
    if objective_id == "moe.router_z_loss":
        return {"router_logits": rng.normal(size=(n, v)), "mask": np.array([1.0, 0.0, 1.0])}
    if objective_id == "moe.load_balancing":
        return {"router_logits": rng.normal(size=(n, v)), "mask": np.array([1.0, 0.0, 1.0])}
    if objective_id == "ppo.entropy_bonus":
        return {"entropy": rng.uniform(0.0, 3.0, size=(b, t)), "mask": mask}
    if objective_id == "ppo.value_loss":
        values = rng.normal(size=(b, t))
        return {"values": values, "old_values": values + rng.normal(0, 0.5, size=(b, t)),
                "returns": values + rng.normal(size=(b, t)), "mask": mask}
    if objective_id == "reward.pairwise":
        return {"chosen_rewards": rng.normal(size=n), "rejected_rewards": rng.normal(size=n),
                "margin": rng.uniform(0.0, 1.0, size=n)}
    if objective_id.startswith("tabular."):
        def policy():
            w = rng.uniform(0.2, 1.0, size=(3, 2))
            return w / w.sum(axis=1, keepdims=True)
        tree = {"vocab": 2, "horizon": 2}
        if objective_id == "tabular.optimum":
            return {"pi_ref": policy(), "rewards": rng.uniform(0, 1, size=4), **tree}
        if objective_id == "tabular.sequence_kl":
            return {"pi": policy(), "rho": policy(), **tree}
        return {"pi": policy(), "mu": policy(), "pi_ref": policy(), "rewards": rng.uniform(0, 1, size=4),
                **tree}
    raise KeyError(objective_id)


def required_params(objective_id: str) -> dict:
    """Values for the parameters without a default (tabular's and gae.kl_rewards' beta; vocab and
    horizon come with the inputs)."""
    return {"beta": 0.5} if objective_id in ("tabular.optimum", "tabular.expected_update", "gae.kl_rewards") else {}


def to_backend(backend: str, value):
    """NumPy inputs as the backend takes them (torch: tensors; others: NumPy arrays)."""
    if backend == "torch" and isinstance(value, np.ndarray) and value.dtype != object:
        return torch.from_numpy(value.copy())
    return value
