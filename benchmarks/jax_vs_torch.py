"""The run time of a JAX target against the same torch target, in one process (issue 35).

    python benchmarks/jax_vs_torch.py [--objective lm.cross_entropy ...] [--dtype float64 ...]

``TORCH`` and ``JAX`` below implement the same objectives line for line (lm.cross_entropy,
dpo.loss, kl.estimator; bfloat16/float16 computed in float32, as a careful implementation does),
each in its framework's idiom: the torch target is differentiated by autograd, the JAX one by
``jax.vjp`` inside the compiled call the harness makes (``conformance/targets/jaxcall.py``). Both
run over the same vectors in all four dtypes with the harness, the JAX one first and again (the
second run finds its functions compiled: what a process that checks twice, a diagnosis, pays).
Prints the counts of each (they must agree: both implementations are correct) and the wall and
CPU times. Not part of the test suite: speed is never asserted.
"""
from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import torch

DTYPES = ("float64", "float32", "bfloat16", "float16")
OBJECTIVES = ("lm.cross_entropy", "dpo.loss", "kl.estimator")


# --- torch -------------------------------------------------------------------------------------

def _work(x):
    return x.to(torch.promote_types(x.dtype, torch.float32))


def torch_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean", z_loss=0.0,
                        softcap=None, normalizer=None):
    z = _work(logits)
    lse = torch.logsumexp(z, dim=-1)
    keep = labels != ignore_index
    picked = z.gather(-1, torch.where(keep, labels, 0)[:, None])[:, 0]
    loss = (1 - label_smoothing) * (lse - picked) + label_smoothing * (lse - z.mean(-1))
    loss = torch.where(keep, loss, 0).sum()
    return (loss / keep.sum() if reduction == "mean" else loss).to(logits.dtype)


def torch_dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
              beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05, reward_shift=0.0,
              rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    chosen = beta * (_work(policy_chosen_logps) - _work(reference_chosen_logps))
    rejected = beta * (_work(policy_rejected_logps) - _work(reference_rejected_logps))
    h = chosen - rejected
    losses = -(1 - label_smoothing) * torch.nn.functional.logsigmoid(h) \
        - label_smoothing * torch.nn.functional.logsigmoid(-h)
    dt = policy_chosen_logps.dtype
    return losses.to(dt), chosen.detach().to(dt), rejected.detach().to(dt)


def torch_kl(logp, ref_logp, kind="k3", clamp=None):
    log_ratio = _work(ref_logp) - _work(logp)
    value = {"k1": -log_ratio, "k2": 0.5 * log_ratio ** 2, "k3": torch.expm1(log_ratio) - log_ratio}[kind]
    return value.to(logp.dtype)


# --- JAX ---------------------------------------------------------------------------------------

def _jwork(x):
    return x.astype(jnp.promote_types(x.dtype, jnp.float32))


def jax_cross_entropy(logits, labels, ignore_index=-100, label_smoothing=0.0, reduction="mean", z_loss=0.0,
                      softcap=None, normalizer=None):
    z = _jwork(logits)
    lse = jax.nn.logsumexp(z, axis=-1)
    keep = labels != ignore_index
    picked = jnp.take_along_axis(z, jnp.where(keep, labels, 0)[:, None], axis=-1)[:, 0]
    loss = (1 - label_smoothing) * (lse - picked) + label_smoothing * (lse - z.mean(-1))
    loss = jnp.where(keep, loss, 0).sum()
    return (loss / keep.sum() if reduction == "mean" else loss).astype(logits.dtype)


def jax_dpo(policy_chosen_logps, policy_rejected_logps, reference_chosen_logps, reference_rejected_logps,
            beta=0.1, loss_type="sigmoid", label_smoothing=0.0, discopop_tau=0.05, reward_shift=0.0,
            rpo_alpha=0.0, nll_aggregation=None, chosen_lengths=None):
    chosen = beta * (_jwork(policy_chosen_logps) - _jwork(reference_chosen_logps))
    rejected = beta * (_jwork(policy_rejected_logps) - _jwork(reference_rejected_logps))
    h = chosen - rejected
    losses = -(1 - label_smoothing) * jax.nn.log_sigmoid(h) - label_smoothing * jax.nn.log_sigmoid(-h)
    dt = policy_chosen_logps.dtype
    return (losses.astype(dt), jax.lax.stop_gradient(chosen).astype(dt),
            jax.lax.stop_gradient(rejected).astype(dt))


def jax_kl(logp, ref_logp, kind="k3", clamp=None):
    log_ratio = _jwork(ref_logp) - _jwork(logp)
    value = {"k1": -log_ratio, "k2": 0.5 * log_ratio ** 2, "k3": jnp.expm1(log_ratio) - log_ratio}[kind]
    return value.astype(logp.dtype)


# --- the targets: one declaration, two frameworks ----------------------------------------------

def _declaration(name: str, framework: str, functions: tuple) -> dict:
    return {
        "name": name, "framework": framework,
        "objectives": dict(zip(OBJECTIVES, functions)),
        "conventions": {"lm.cross_entropy": {"reduction": ["mean", "sum"]},
                        "dpo.loss": {"loss_type": "sigmoid"},
                        "kl.estimator": {"kind": ["k3", "k1", "k2"]}},
        "params": {"lm.cross_entropy": {"z_loss": [0.0], "softcap": [None], "normalizer": [None]},
                   "dpo.loss": {"reward_shift": [0.0], "rpo_alpha": [0.0]}},
    }


TORCH = _declaration("torch-same", "torch", (torch_cross_entropy, torch_dpo, torch_kl))
JAX = _declaration("jax-same", "jax", (jax_cross_entropy, jax_dpo, jax_kl))


def _timed(target, vs, objectives, dtypes) -> tuple[list, float, float]:
    from lossproof.conformance import harness
    wall, cpu = time.perf_counter(), time.process_time()
    results = harness.run(target, vs, objective=list(objectives), dtypes=list(dtypes))
    return results, time.perf_counter() - wall, time.process_time() - cpu


def _counts(results) -> str:
    counts: dict = {}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return " ".join(f"{k} {v}" for k, v in sorted(counts.items()))


def main(argv=None) -> int:
    from lossproof.conformance.targets import from_mapping
    from lossproof.conformance.vectors.load import VectorSet
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objective", action="append", choices=OBJECTIVES)
    parser.add_argument("--dtype", action="append", choices=DTYPES)
    args = parser.parse_args(argv)
    objectives, dtypes = args.objective or OBJECTIVES, args.dtype or DTYPES
    vs = VectorSet(validate=False)
    for oid in objectives:   # read the files before either clock starts
        vs.cases(oid)
    targets = from_mapping(TORCH, "torch-same"), from_mapping(JAX, "jax-same")
    rows = [(label, *_timed(t, vs, objectives, dtypes))
            for label, t in (("torch", targets[0]), ("jax", targets[1]), ("jax, compiled already", targets[1]))]
    print(f"objectives {', '.join(objectives)}; dtypes {', '.join(dtypes)}; torch {torch.__version__}, "
          f"jax {jax.__version__}")
    for label, results, wall, cpu in rows:
        print(f"  {label:22s} wall {wall:7.1f} s  cpu {cpu:7.1f} s   {_counts(results)}")
    base = rows[0]
    for label, _, wall, cpu in rows[1:]:
        print(f"  {label} / torch: wall {wall / base[2]:.2f}×, cpu {cpu / base[3]:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
