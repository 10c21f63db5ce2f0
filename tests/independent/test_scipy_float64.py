"""Float64 cross-check of every family of the exact reference against scipy.special.

refimpl.exact (50 digits) is rounded to binary64 and compared with a float64 computation
written with scipy.special (softmax, log_softmax, rel_entr, kl_div, xlogy, expit, log_expit,
expm1), scipy.stats.zscore and, for proximal_kl.future_cost (a masked suffix sum, which scipy
has no function for), NumPy cumulative sums, on random moderate inputs (fixed seeds). The
difference is then the float64 computation's own rounding error, so every tolerance below is
a bound on that error: ε = 2^-52 (one ulp at 1) times the number of roundings along the
longest dependency chain, i.e. a few ulps times the reduction length, times the condition
number of the step where a rounded argument enters (stated at each check). A mismatch beyond
that bound is a wrong formula or convention on one side, not rounding. (Measured: the largest
error is below 0.4 of its bound, most below 0.1.)
"""
from __future__ import annotations

import numpy as np
import pytest
import scipy.special as sc
import scipy.stats

from lossproof.refimpl.exact import distill, dpo, grpo, kl, mp, proximal_kl

EPS = np.finfo(np.float64).eps


def as_float(x) -> np.ndarray:
    return np.asarray(mp.to_float(np.asarray(x, dtype=object)), dtype=np.float64)


def assert_within(got, want, tol, what: str) -> None:
    err = np.abs(np.asarray(got, dtype=float) - np.asarray(want, dtype=float))
    tol = np.broadcast_to(np.asarray(tol, dtype=float), err.shape)
    assert np.all(tol > 0), f"{what}: tolerance must be positive"
    worst = np.unravel_index(np.argmax(err / tol), err.shape)
    assert np.all(err <= tol), (f"{what}: float64 {np.asarray(got)[worst]!r} vs exact "
                                f"{np.asarray(want)[worst]!r}, error {err[worst]:.3g} "
                                f"> {tol[worst]:.3g}")


# --------------------------------------------------------------------------- distillation

N, V = 5, 8


def logits(seed: int, scale: float = 3.0, neg_inf_every: int = 0) -> np.ndarray:
    z = np.random.default_rng(seed).normal(0.0, scale, (N, V))
    if neg_inf_every:
        z[::neg_inf_every, 3] = -np.inf
    return z


def softmax_rel_tol(z: np.ndarray, T: float) -> np.ndarray:
    """Relative error bound of float64 softmax(z/T) per row: x = z/T and x − max carry an absolute
    error ≤ 2ε·max|x| that exp turns into a relative one, plus ≤ V + 3 roundings (V-term sum,
    exp, division); bounded by 2ε(2·max|x| + V + 3)."""
    x = np.where(np.isfinite(z), z / T, 0.0)
    return 2 * EPS * (2 * np.max(np.abs(x), axis=-1, keepdims=True) + V + 3)


@pytest.mark.parametrize("T", [0.7, 1.0, 2.5])
def test_softmax(T):
    z = logits(11, neg_inf_every=2)
    want = sc.softmax(z / T, axis=-1)
    got = as_float(distill.softmax(z.tolist(), temperature=T))
    assert_within(got, want, softmax_rel_tol(z, T) * want + 1e-300, f"softmax T={T}")


def kl_tol(terms: np.ndarray, z: np.ndarray, t: np.ndarray, T: float) -> np.ndarray:
    """Each term a·log(a/b) inherits the softmax relative errors of a and b (δ ≤ the bounds
    above) as an absolute error ≤ a·(2δ + δ·|log(a/b)|), so the row sum is off by at most
    2δ_max·(1 + Σ|term|), plus (V + 1)ε·Σ|term| for the summation."""
    delta = np.maximum(softmax_rel_tol(z, T), softmax_rel_tol(t, T))[..., 0]
    mass = np.sum(np.abs(terms), axis=-1)
    return 2 * delta * (1 + mass) + (V + 1) * EPS * mass


@pytest.mark.parametrize("direction", ["reverse", "forward"])
@pytest.mark.parametrize("T", [1.0, 2.0])
def test_token_kl(direction, T):
    z, t = logits(21), logits(22)
    q, p = sc.softmax(z / T, axis=-1), sc.softmax(t / T, axis=-1)
    # reverse through rel_entr (q log q/p); forward through kl_div (p log p/q − p + q, whose
    # extra terms sum to 0 and whose terms are all ≥ 0)
    terms = sc.rel_entr(q, p) if direction == "reverse" else sc.kl_div(p, q)
    got = as_float(distill.token_kl(z.tolist(), t.tolist(), direction=direction, temperature=T))
    assert_within(got, terms.sum(axis=-1), kl_tol(terms, z, t, T), f"token_kl {direction} T={T}")
    if direction == "forward":
        # ∂KL(p‖q)/∂z = (q − p)/T: |error| ≤ δ(q + p)/T plus one rounding each for − and /T
        grad = as_float(distill.token_kl_vjp(np.ones(N).tolist(), z.tolist(), t.tolist(),
                                             direction=direction, temperature=T)["student_logits"])
        delta = np.maximum(softmax_rel_tol(z, T), softmax_rel_tol(t, T))
        assert_within(grad, (q - p) / T, (delta * (q + p) + 2 * EPS * np.abs(q - p)) / T + 1e-300,
                      f"token_kl forward gradient T={T}")


@pytest.mark.parametrize("T,alpha,t2_scale",
                         [(1.0, 0.5, True), (2.0, 0.3, True), (3.0, 0.7, False)])
def test_hinton(T, alpha, t2_scale):
    z, t = logits(31), logits(32)
    labels = np.random.default_rng(33).integers(0, V, N)
    hard = -sc.log_softmax(z, axis=-1)[np.arange(N), labels]
    soft_terms = sc.rel_entr(sc.softmax(t / T, axis=-1), sc.softmax(z / T, axis=-1))
    s = T * T if t2_scale else 1.0
    want = np.mean((1 - alpha) * hard + alpha * s * soft_terms.sum(axis=-1))
    got = float(distill.hinton(z.tolist(), t.tolist(), labels.tolist(), temperature=T, alpha=alpha,
                               t2_scale=t2_scale))
    # −log_softmax at the label: error ≤ softmax_rel_tol(z, 1) (its log), the soft term kl_tol·s;
    # then ≤ N + 4 roundings of the weighted mean
    tol = np.mean((1 - alpha) * softmax_rel_tol(z, 1.0)[:, 0]
                  + alpha * s * kl_tol(soft_terms, z, t, T))
    tol += (N + 4) * EPS * abs(want)
    assert_within(got, want, tol, f"hinton T={T} alpha={alpha}")


@pytest.mark.parametrize("beta,T", [(0.5, 1.0), (0.1, 2.0), (0.9, 0.5)])
def test_generalized_jsd(beta, T):
    z, t = logits(41), logits(42, neg_inf_every=2)  # teacher −inf: p = 0 there, xlogy(0, ·) = 0
    q, p = sc.softmax(z / T, axis=-1), sc.softmax(t / T, axis=-1)
    m = beta * p + (1 - beta) * q
    terms = beta * sc.xlogy(p, p / m) + (1 - beta) * sc.xlogy(q, q / m)
    got = as_float(distill.generalized_jsd(z.tolist(), t.tolist(), beta=beta, temperature=T))
    # m has the relative error of p and q plus two roundings (β·p + (1−β)·q, with β, 1−β rounded):
    # the same bound as a KL of the softmax outputs, one more δ for m, summed over the two KLs
    assert_within(got, terms.sum(axis=-1), 2 * kl_tol(terms, z, t, T), f"jsd beta={beta} T={T}")


# --------------------------------------------------------------------------- KL estimators

@pytest.mark.parametrize("kind", ["k1", "k2", "k3"])
def test_kl_estimator(kind):
    rng = np.random.default_rng(51)
    logp = rng.uniform(-6.0, -0.05, 12)
    ref_logp = logp + rng.normal(0.0, 0.8, 12)
    x = ref_logp - logp  # one rounding: relative error ≤ ε/2
    want = {"k1": -x, "k2": x * x / 2, "k3": sc.expm1(x) - x}[kind]
    # k3 = expm1(x) − x: expm1 (1 ulp) and x (½ ulp, amplified by e^x in expm1) feed one
    # subtraction, so the error is ≤ 4ε·(|expm1(x)|·(1 + |x|) + |x|); k1/k2 ≤ 3 roundings
    tol = {"k1": EPS * np.abs(x), "k2": 3 * EPS * np.abs(want),
           "k3": 4 * EPS * (np.abs(sc.expm1(x)) * (1 + np.abs(x)) + np.abs(x))}[kind]
    got = as_float(kl.estimator(logp.tolist(), ref_logp.tolist(), kind=kind))
    assert_within(got, want, tol, f"kl.estimator {kind}")
    if kind == "k3":
        # d k3/d logp = 1 − r = −expm1(x): relative error ≤ 2ε(1 + |x|)
        grad = as_float(kl.estimator_vjp(np.ones(12).tolist(), logp.tolist(), ref_logp.tolist(),
                                         kind="k3")["logp"])
        assert_within(grad, -sc.expm1(x), 2 * EPS * (1 + np.abs(x)) * np.abs(sc.expm1(x)),
                      "kl.estimator k3 gradient")


# --------------------------------------------------------------------------- DPO

B = 16


def pairs(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-30.0, -1.0, B) for _ in range(4)]


@pytest.mark.parametrize("loss_type,beta,ls", [("sigmoid", 0.1, 0.0), ("sigmoid", 0.5, 0.1),
                                               ("cdpo", 0.2, 0.25), ("robust", 0.1, 0.2),
                                               ("hinge", 0.3, 0.0), ("ipo", 0.1, 0.0)])
def test_dpo_loss(loss_type, beta, ls):
    pc, pr, rc, rr = pairs(61)
    delta = (pc - rc) - (pr - rr)
    z = beta * delta
    want = {
        "sigmoid": -(1 - ls) * sc.log_expit(z) - ls * sc.log_expit(-z),
        "cdpo": -(1 - ls) * sc.log_expit(z) - ls * sc.log_expit(-z),
        "robust": (-(1 - ls) * sc.log_expit(z) + ls * sc.log_expit(-z)) / (1 - 2 * ls),
        "hinge": np.maximum(0.0, 1 - z),
        "ipo": (delta - 1 / (2 * beta)) ** 2,
    }[loss_type]
    out = dpo.loss(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist(), beta=beta,
                   loss_type=loss_type, label_smoothing=ls)
    # Δ carries ≤ 3 roundings of partial sums bounded by S = |pc|+|rc|+|pr|+|rr|: |δΔ| ≤ 2ε·S,
    # and z = βΔ one more. The log σ forms move by ≤ |dℓ/dz| ≤ 1 (1/(1−2ε) robust) per unit z
    # and round ≤ 4 times relative to the magnitude of their terms (robust's terms cancel);
    # hinge moves by ≤ 1 per unit z; ipo's gap g = Δ − 1/(2β) carries |δg| ≤ 2εS + ε/β + ε|g|,
    # which g² doubles, plus one rounding of the square.
    S = np.abs(pc) + np.abs(rc) + np.abs(pr) + np.abs(rr)
    dz = beta * 2 * EPS * S + EPS * np.abs(z)
    terms = (1 - ls) * np.abs(sc.log_expit(z)) + ls * np.abs(sc.log_expit(-z))
    gap = delta - 1 / (2 * beta)
    tol = {
        "sigmoid": dz + 4 * EPS * terms,
        "cdpo": dz + 4 * EPS * terms,
        "robust": (dz + 4 * EPS * terms) / (1 - 2 * ls),
        "hinge": dz + EPS * np.abs(want),
        "ipo": 2 * np.abs(gap) * (2 * EPS * S + EPS / beta + EPS * np.abs(gap)) + EPS * gap ** 2,
    }[loss_type]
    assert_within(as_float(out["losses"]), want, tol, f"dpo {loss_type}")
    # β·(pc − rc): two roundings
    for name, gain in (("chosen_rewards", pc - rc), ("rejected_rewards", pr - rr)):
        assert_within(as_float(out[name]), beta * gain, 2 * EPS * np.abs(beta * gain), name)


def test_dpo_sigmoid_gradient():
    pc, pr, rc, rr = pairs(62)
    beta = 0.1
    z = beta * ((pc - rc) - (pr - rr))
    want = -beta * sc.expit(-z)  # DPO §5
    grad = dpo.loss_vjp({"losses": np.ones(B).tolist()}, pc.tolist(), pr.tolist(), rc.tolist(),
                        rr.tolist(), beta=beta)
    # d expit(−z)/dz relative to expit(−z) is expit(z) ≤ 1, so |δz| ≤ 2εβS + ε|z| enters as a
    # relative error, plus 3 roundings
    S = np.abs(pc) + np.abs(rc) + np.abs(pr) + np.abs(rr)
    tol = (2 * EPS * beta * S + EPS * np.abs(z) + 3 * EPS) * np.abs(want)
    assert_within(as_float(grad["policy_chosen_logps"]), want, tol, "dpo gradient wrt chosen")
    assert_within(as_float(grad["policy_rejected_logps"]), -want, tol, "dpo gradient wrt rejected")


# --------------------------------------------------------------------------- GRPO

def rewards(seed: int, shape=(4, 6)) -> np.ndarray:
    return np.random.default_rng(seed).normal(0.5, 1.0, shape)


@pytest.mark.parametrize("std_ddof", [0, 1])
def test_group_advantages(std_ddof):
    r = rewards(71)
    want = scipy.stats.zscore(r, axis=1, ddof=std_ddof)
    got = as_float(grpo.advantages(r.tolist(), std_ddof=std_ddof)["advantages"])
    # mean and std of G values: ≤ (G + 4) roundings each, relative to max|r|; the centred value
    # then carries an absolute error ≤ 2(G + 4)ε·max|r| before the division by std
    G = r.shape[1]
    scale = (np.max(np.abs(r), axis=1, keepdims=True)
             / np.std(r, axis=1, ddof=std_ddof, keepdims=True))
    assert_within(got, want, 2 * (G + 4) * EPS * (scale + np.abs(want)),
                  f"advantages ddof={std_ddof}")


@pytest.mark.parametrize("scale", ["batch", "none"])
def test_batch_and_unscaled_advantages(scale):
    r = rewards(72)
    centred = r - r.mean(axis=1, keepdims=True)
    eps = 1e-4
    want = centred / (np.std(r) + eps) if scale == "batch" else centred
    got = as_float(grpo.advantages(r.tolist(), scale=scale, eps=eps)["advantages"])
    n = r.size  # the batch std reduces all B·G rewards
    bound = np.max(np.abs(r)) / (np.std(r) + eps if scale == "batch" else 1.0)
    assert_within(got, want, 2 * (n + 4) * EPS * (bound + np.abs(want)), f"advantages {scale}")


@pytest.mark.parametrize("eps_low,eps_high,dual_clip", [(0.2, None, None), (0.2, 0.28, None),
                                                        (0.2, None, 3.0)])
def test_clip(eps_low, eps_high, dual_clip):
    rng = np.random.default_rng(81)
    old = rng.uniform(-5.0, -0.1, 40)
    logp = old + rng.normal(0.0, 0.5, 40)
    adv = rng.normal(0.0, 1.5, 40)
    rho = np.exp(logp - old)
    hi = 1 + (eps_low if eps_high is None else eps_high)
    want = np.minimum(rho * adv, np.clip(rho, 1 - eps_low, hi) * adv)
    if dual_clip is not None:
        want = np.where(adv < 0, np.maximum(want, dual_clip * adv), want)
    got = as_float(grpo.clip(logp.tolist(), old.tolist(), adv.tolist(), eps_low=eps_low,
                             eps_high=eps_high, dual_clip=dual_clip))
    # C is continuous in ρ, so a branch taken differently at a near-tie costs only rounding:
    # ρ has relative error ≤ ε(1 + |log ρ|) (the rounded difference enters exp), the clip bounds
    # ½ ulp, the product one more rounding
    assert_within(got, want, 3 * EPS * (1 + np.abs(logp - old)) * np.abs(want), "grpo.clip")


@pytest.mark.parametrize("aggregation,eps_high,beta", [("seq-mean-token-mean", None, 0.04),
                                                       ("token-mean", 0.28, 0.1)])
def test_grpo_loss(aggregation, eps_high, beta):
    rng = np.random.default_rng(91)
    Bq, T = 3, 7
    old = rng.uniform(-4.0, -0.1, (Bq, T))
    logp = old + rng.normal(0.0, 0.3, (Bq, T))
    ref = logp + rng.normal(0.0, 0.3, (Bq, T))
    adv = rng.normal(0.0, 1.0, Bq)
    mask = (np.arange(T)[None, :] < np.array([[7], [4], [2]])).astype(float)
    rho = np.exp(logp - old)
    eps_low = 0.2  # the default of grpo.loss
    hi = 1 + (eps_low if eps_high is None else eps_high)
    clipped = np.minimum(rho * adv[:, None], np.clip(rho, 1 - eps_low, hi) * adv[:, None])
    log_r = ref - logp
    per_token = -clipped + beta * (sc.expm1(log_r) - log_r)
    if aggregation == "token-mean":
        weights = mask / mask.sum()
    else:
        weights = mask / mask.sum(axis=1, keepdims=True) / Bq
    want = np.sum(weights * per_token)
    got = float(grpo.loss(logp.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(),
                          eps_high=eps_high, beta=beta, aggregation=aggregation))
    # each token: the clip bound above plus the k3 bound (4ε(|expm1|(1+|x|) + |x|)), then
    # ≤ B·T + 4 roundings of the weighted reduction over Σ w·|ℓ|
    token_tol = (3 * EPS * (1 + np.abs(logp - old)) * np.abs(clipped)
                 + beta * 4 * EPS * (np.abs(sc.expm1(log_r)) * (1 + np.abs(log_r)) + np.abs(log_r)))
    tol = np.sum(weights * token_tol) + (Bq * T + 4) * EPS * np.sum(weights * np.abs(per_token))
    assert_within(got, want, tol, f"grpo.loss {aggregation}")


# --------------------------------------------------------------------------- Proximal KL

@pytest.mark.parametrize("clip,window", [(None, None), (0.5, None), (None, 3)])
def test_future_cost(clip, window):
    rng = np.random.default_rng(101)
    Bq, T = 3, 9
    ref = rng.uniform(-5.0, -0.1, (Bq, T))
    logp = ref + rng.normal(0.0, 0.4, (Bq, T))
    mask = (rng.uniform(size=(Bq, T)) < 0.8).astype(float)
    k = mask * (logp - ref)
    # F_t = Σ_{u>t} k_u (u ≤ t + window): a reversed cumulative sum, shifted by one position
    tail = np.cumsum(k[:, ::-1], axis=1)[:, ::-1]
    want = np.concatenate([tail[:, 1:], np.zeros((Bq, 1))], axis=1)
    if window is not None:
        beyond = np.concatenate([tail[:, 1 + window:], np.zeros((Bq, 1 + window))], axis=1)
        want = want - beyond
    abs_tail = np.cumsum(np.abs(k[:, ::-1]), axis=1)[:, ::-1]
    mass = np.concatenate([abs_tail[:, 1:], np.zeros((Bq, 1))], axis=1)
    if clip is not None:
        want = np.clip(want, -clip, clip)
    got = as_float(proximal_kl.future_cost(logp.tolist(), ref.tolist(), mask.tolist(), clip=clip,
                                           window=window))
    # each k_u one rounding, the cumulative sums ≤ T roundings each (two of them when windowed),
    # all relative to the Σ|k_u| they run over (clipping only shrinks the error)
    assert_within(got, want, 2 * (T + 2) * EPS * mass + 1e-300,
                  f"future_cost clip={clip} window={window}")
