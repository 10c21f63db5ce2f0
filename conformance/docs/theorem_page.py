"""The stationary-policy part of docs/proximal_kl.md (its generated block ``theorem``) and
docs/figures/theorem_convergence.png.

``render(table=None, probes=None, residuals=None)`` returns that part (Markdown): the derivation,
the rules, the stationary-policy table of a real ``conformance.theorem.table.run`` (at 50
digits unless a table is passed), the residual at π* over random behaviour policies, and the
probe of the PyTorch backend. ``figure()`` draws the damped fixed-point iteration of several
rules on worked-v2h2 and returns PNG bytes. Both are deterministic: same code, same bytes.

Source: the stationary-policy theorem of Proximal KL (Bai, Yao, Zhang) as summarised in
[proximal-kl-summary] and derived in FRPO [frpo] (keys of docs/references.md), reconstructed in
refimpl/exact/proximal_kl.py, refimpl/exact/_tree.py and refimpl/exact/_fixed_point.py.
"""
from __future__ import annotations

import importlib.util

import mpmath

from lossproof.conformance.docs import Unavailable
from lossproof.conformance.docs.figures import new_figure, png_bytes, style
from lossproof.conformance.theorem import probe
from lossproof.conformance.theorem import table as theorem
from lossproof.refimpl.exact import _fixed_point, _tree, mp

FIGURE = "figures/theorem_convergence.png"     # relative to docs/
RANDOM_BEHAVIOURS = 20       # random μ per tree for the "every behaviour" line
DOC_DPS = 50

# The fixed-point iteration of the figure: θ ← θ + STEP·Δθ(π), from π_ref, on worked-v2h2.
FIGURE_TREE = "worked-v2h2"
FIGURE_RULES = ("proximal_kl", "sequence_is", "ratio_capped", "future_clipped", "own_token_kl",
                "proximal_kl_no_ratio", "grpo_k3", "whole_cost_clipped")
FIGURE_STEP = 4
FIGURE_ITERATIONS = 300
FIGURE_DPS = 30
FIGURE_FLOOR = 1e-30
ZOOM_ITERATIONS = FIGURE_ITERATIONS
# matplotlib's defaults with a smaller font: a wide figure with two panels and a long legend.
FIGURE_STYLE = {"font.size": 10, "axes.titlesize": 10.5}


def _sci(x, digits: int = 3) -> str:
    x = mpmath.mpf(x)
    if x == 0:
        return "0"
    return mpmath.nstr(x, digits, min_fixed=-4, max_fixed=5)


def _small(x: float, floor: float = 1e-14) -> str:
    """A float64 measurement: its last bits differ between machines, so values at rounding
    level print as a bound and the rest with 3 digits."""
    return f"< {floor:.0e}" if abs(x) < floor else _sci(x)


def _bar(row: str) -> str:
    return row.replace("|", "\\|")


def _rules_table() -> str:
    lines = ["| rule | update (loss per token) | keeps π*? | why |", "|---|---|---|---|"]
    for r in _tree.RULES.values():
        if r.name.endswith("_on_policy"):
            continue
        on = _tree.RULES[r.name + "_on_policy"]
        claim = ("yes" if r.unbiased else "no") + " off-policy; " + ("yes" if on.unbiased else "no") + " on-policy"
        params = ", ".join(f"{k} = {v}" for k, v in r.params.items())
        lines.append(f"| `{r.name}` | {_bar(r.summary)}{' (' + params + ')' if params else ''} | {claim} | "
                     f"{_bar(r.why)} |")
    return "\n".join(lines)


def _tree_table(tree: dict, dps: int) -> str:
    best = mpmath.mpf(tree["optimum"]["beta_log_z"])
    floor = mpmath.mpf(10) ** -(dps - 5)   # the printed strings carry dps digits
    lines = [f"**{tree['name']}** — {tree['description']}. β·log Z = J(π*) = {_sci(best, 12)}.", "",
             "| rule | claim | max \\|Δθ\\| at π* | KL(π_fix‖π*) | J(π_fix) | β·log Z − J(π_fix) | rest point |",
             "|---|---|---:|---:|---:|---:|---|"]
    for r in tree["rules"]:
        kl, value = mpmath.mpf(r["fixed_point_kl"]), mpmath.mpf(r["objective_at_fixed_point"])
        where = "interior" if not r["boundary"] else (
            f"boundary ({len(r['boundary'])} token{'s' if len(r['boundary']) > 1 else ''} → 0)")
        if r["note"].startswith("collapse"):
            where = "collapse (σ → 0)"
        if not r["converged"]:
            where += ", NOT converged"
        lines.append(f"| `{r['rule']}` | {'unbiased' if r['unbiased'] else 'biased'} | "
                     f"{_sci(r['residual_at_optimum'])} | {_sci(kl)} | {_sci(value, 10)} | "
                     f"{_sci(best - value) if best - value > floor else f'< 1e-{dps - 5}'} | {where} |")
    return "\n".join(lines)


def random_behaviour_residuals(dps: int = DOC_DPS, count: int = RANDOM_BEHAVIOURS) -> dict:
    """max over ``count`` random full-support μ (_tree.random_behavior, seeds 0..count−1) and
    both baselines of the proximal_kl residual at π*, per built-in tree, at ``dps`` digits."""
    out = {}
    with mp.precision(dps):
        for name, tree in _tree.BUILTIN_TREES.items():
            star = _tree.optimum(tree)["policy"]
            worst = mp.ZERO
            for seed in range(count):
                mu = _tree.random_behavior(tree, seed)
                for baseline in _tree.BASELINES:
                    upd = _tree.expected_update(tree, star, mu, rule="proximal_kl", baseline=baseline)
                    worst = max(worst, _fixed_point.residual(upd))
            out[name] = worst
    return out


def _probe_rows(probes) -> str:
    lines = ["| objective | variant | tree | rule compared | max \\|target − exact\\| | max \\|Δθ\\| at π* | "
             "π* stationary? | with 1/\\|y\\| sequence weights |",
             "|---|---|---|---|---:|---:|---|---:|"]
    for p in probes:
        variant = p["aggregation"]
        if p["objective"] == "grpo.loss":
            variant += f", kl_ratio_weight={p['params'].get('kl_ratio_weight', False)}"
        lines.append(f"| `{p['objective']}` | {variant} | {p['tree']} | `{p['rule']}` | "
                     f"{_small(p['max_abs_diff'])} | {_small(p['residual_at_optimum'])} | "
                     f"{'yes' if p['stationary'] else 'no'} | {_small(p['minibatch_residual_at_optimum'])} |")
    return "\n".join(lines)


def default_probes() -> list:
    """The probe of the built-in PyTorch backend, plus proximal_kl.loss with DeepSeekMath's
    per-sequence mean, whose 1/|y| weights move π* on the variable-length tree."""
    if importlib.util.find_spec("torch") is None:
        raise Unavailable("torch is not installed: the theorem part of docs/proximal_kl.md shows the "
                          "probe of the PyTorch backend (pip install 'torch==2.13.0')")
    out = probe.probe_all("torch")
    out.append(probe.probe("torch", tree="eos-v3h3", objective="proximal_kl.loss",
                           params={"aggregation": "seq-mean-token-mean"}))
    return out


def render(table: dict | None = None, probes: list | None = None, residuals: dict | None = None) -> str:
    """The theorem part of docs/proximal_kl.md. ``table``: a ``theorem.run`` result (default: a fresh
    50-digit run over every built-in tree and rule); ``probes``: ``probe.probe_all`` results
    (default: :func:`default_probes`); ``residuals``: :func:`random_behaviour_residuals`."""
    probes = default_probes() if probes is None else probes     # first: it says when torch is missing
    table = theorem.run(dps=DOC_DPS) if table is None else table
    residuals = random_behaviour_residuals(table["dps"]) if residuals is None else residuals
    with mpmath.workdps(table["dps"] + 10):   # read the table's decimal strings in full
        return _render(table, probes, residuals)


def _render(table, probes, residuals) -> str:
    trees = "\n\n".join(_tree_table(t, table["dps"]) for t in table["trees"])
    prox = [(t["name"], r) for t in table["trees"] for r in t["rules"] if r["rule"] == "proximal_kl"]
    worst_tree = max(mpmath.mpf(r["residual_at_optimum"]) for _, r in prox)
    worst_random = max(residuals.values())
    random_line = ", ".join(f"{name}: {_sci(v)}" for name, v in residuals.items())
    probe_section = _probe_rows(probes) if probes else "*(No probe was run.)*"
    return TEMPLATE.format(
        dps=table["dps"], trees=trees, rules=_rules_table(), random_line=random_line,
        count=RANDOM_BEHAVIOURS, count_m1=RANDOM_BEHAVIOURS - 1, worst_tree=_sci(worst_tree), worst_random=_sci(worst_random),
        probes=probe_section, figure=FIGURE, step=FIGURE_STEP, iterations=FIGURE_ITERATIONS,
        figure_tree=FIGURE_TREE, reduced_trees=", ".join(theorem.REDUCED_TREES),
        reduced_dps=theorem.REDUCED_DPS)


# --------------------------------------------------------------------------- figure

def iterate(tree: _tree.Tree, rule: str, step=FIGURE_STEP, iterations: int = FIGURE_ITERATIONS,
            dps: int = FIGURE_DPS) -> list:
    """KL(π_k‖π*) along θ_{k+1} = θ_k + step·Δθ(π_k) from π_ref (Δθ = _tree.expected_update,
    the exact population update; θ the softmax logits at every prefix), k = 0..iterations."""
    with mp.precision(dps), mpmath.workdps(dps):
        star = _tree.optimum(tree)["policy"]
        theta = {s: [mpmath.log(v) for v in row] for s, row in _tree.policy(tree, tree.ref).items()}
        out = []
        for k in range(iterations + 1):
            pol = {s: _fixed_point.softmax_row(th) for s, th in theta.items()}
            out.append(_tree.sequence_kl(tree, pol, star)["chain"])
            if k == iterations:
                break
            upd = _tree.expected_update(tree, pol, rule=rule)
            theta = {s: [th + step * d for th, d in zip(theta[s], upd[s])] for s in theta}
    return out


def figure(tree: str = FIGURE_TREE, rules=FIGURE_RULES, step=FIGURE_STEP,
           iterations: int = FIGURE_ITERATIONS, dps: int = FIGURE_DPS) -> bytes:
    """KL(π_k‖π*) of the damped fixed-point iteration (:func:`iterate`) for ``rules`` on
    ``tree``, with each rule's rest point (_fixed_point.fixed_point) dotted, as PNG bytes
    (``conformance.docs.figures.png_bytes``: no timestamp, a content digest)."""
    import matplotlib  # optional dependency ([docs] extra): only the colour map is needed here
    tr = _tree.BUILTIN_TREES[tree]
    with style(FIGURE_STYLE):
        fig = new_figure(12, 5.8)
        full, zoom = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.25, 1]})
        colors = matplotlib.colormaps["tab10"].colors
        ks = list(range(iterations + 1))
        zoom_k = min(iterations, ZOOM_ITERATIONS)
        top = 0.0
        for i, rule in enumerate(rules):
            kls = [float(v) for v in iterate(tr, rule, step, iterations, dps)]
            with mp.precision(dps):
                fp = _fixed_point.fixed_point(tr, rule)
                with mpmath.workdps(dps):
                    rest = float(_tree.sequence_kl(tr, fp["policy"], _tree.optimum(tr)["policy"])["chain"])
            unbiased = _tree.unbiased_on(tr, rule)[0]
            label = rule + (" (= grpo_k3_ratio_weighted)" if rule == "own_token_kl" else "")
            label += "   keeps π*" if unbiased else f"   rest point KL = {rest:.3g}"
            line = {"color": colors[i % len(colors)], "lw": 2.4 if unbiased else 1.6,
                    "ls": "-" if unbiased or i % 2 == 0 else (0, (5, 1.5))}
            full.semilogy(ks, [max(v, FIGURE_FLOOR / 10) for v in kls], label=label, **line)
            zoom.plot(ks[:zoom_k + 1], kls[:zoom_k + 1], **line)
            if not unbiased:
                zoom.axhline(rest, color=line["color"], lw=0.9, ls=":")
            top = max(top, max(kls[:zoom_k + 1]), rest)
        full.set_ylim(FIGURE_FLOOR, 1)
        full.set_xlim(0, iterations)
        full.set_title("all iterations, log scale: the unbiased rules reach π*")
        full.set_ylabel("KL(π_k ‖ π*)   (sequence level)")
        zoom.set_ylim(0, top * 1.05)
        zoom.set_xlim(0, zoom_k)
        zoom.set_title(("linear scale" if zoom_k == iterations else f"first {zoom_k} iterations, linear scale")
                       + ": each biased rule settles on\nits own rest point (dotted: _fixed_point.fixed_point)")
        for ax in (full, zoom):
            ax.set_xlabel("iteration k")
            ax.grid(True, which="major", alpha=0.3)
        fig.suptitle(f"Exact fixed-point iteration θ ← θ + {step}·Δθ(π) from π_ref on {tree} "
                     f"(β = {float(_tree.num(tr.beta)):g}, μ = the tree's behaviour policy)", fontsize=12)
        fig.legend(loc="lower center", ncol=2, fontsize=9, frameon=False)
        fig.tight_layout(rect=(0, 0.17, 1, 1))
        return png_bytes(fig)


TEMPLATE = """\
<!-- Generated by conformance/docs/theorem_page.py (render, figure): do not edit by hand. -->
## The stationary-policy theorem

**What this part is built from.** The Proximal KL paper (H. Bai, J. Yao, T. Zhang) is *not
public in our sources*. The update implemented here is **reconstructed** from a summary of it
([proximal-kl-summary](references.md#proximal-kl-summary): "corrige cada palabra según cómo se
muestreó y también resta un costo limitado que depende de palabras posteriores y de un modelo de
referencia fijo"; "el teorema sobre la política estacionaria supone una actualización exacta
sobre toda la población y que se contabiliza por completo el efecto KL futuro") and from the
companion paper FRPO ([frpo](references.md#frpo), arXiv 2601.10201), which derives the same
per-token update. Where the summary is silent (aggregation, how the cost is bounded) we say what
we chose. Code: `refimpl/exact/proximal_kl.py` (the loss), `refimpl/exact/_tree.py` (token
trees, exact population updates), `refimpl/exact/_fixed_point.py` (rest points),
`refimpl/exact/tabular.py` (the catalog's `tabular.*` objectives on them),
`conformance/theorem/table.py` (the table), `conformance/theorem/probe.py` (the probe of any
implementation).

### The update

A response y = (y_0, …, y_{{T−1}}) is generated token by token; s_t = y_{{<t}} is the prefix
(the prompt is fixed). For tokens sampled by a behaviour policy μ (an older policy, a different
engine):

    ρ_t = π(y_t|s_t) / μ(y_t|s_t)                  per-token ratio (the gradient flows through π)
    k_u = log π(y_u|s_u) − log π_ref(y_u|s_u)      per-token log-ratio to the reference
    F_t = Σ_{{u>t}} k_u                              the future KL cost (detached)
    ℓ_t = −ρ_t · sg(A − β·(k_t + F_t))             sg = stop-gradient; A = r(y) − b

averaged over the tokens of the minibatch. Its gradient with respect to the softmax logits
θ_s of π(·|s) is −ρ_t·(A − β·Σ_{{u≥t}} k_u)·(e_{{y_t}} − π(·|s_t)). In the large-minibatch limit
the token mean divides the sum over a sequence's tokens by the constant E_μ|y|, which moves no
rest point, so the *expected update* is

    Δθ_s = E_{{y~μ}} [ Σ_{{t: s_t = s}} ρ_t·(A − β·Σ_{{u≥t}} k_u)·(e_{{y_t}} − π(·|s)) ].

### The theorem and its derivation

**Objective.** J(π) = E_{{y~π}}[r(y)] − β·KL(π‖π_ref), the KL over whole responses. Its unique
maximiser is π*(y) = π_ref(y)·exp(r(y)/β) / Z, with J(π*) = β·log Z.

**Soft Bellman.** Token by token, π* is obtained from the soft values
V*(y) = r(y) at a complete response and, at a prefix,

    V*(s) = β·log Σ_a π_ref(a|s)·exp(V*(s·a)/β),      π*(a|s) = π_ref(a|s)·exp((V*(s·a) − V*(s))/β).

Multiplying the token probabilities along y recovers π_ref(y)·exp((r(y) − V*(∅))/β) with
β·log Z = V*(∅) (`_tree.optimum` computes it so; `_tree.enumerated_optimum` checks it against
the closed form over every sequence).

**Path consistency.** Taking logs, β·k*_u = β·log(π*(y_u|s_u)/π_ref(y_u|s_u)) = V*(s_{{u+1}}) − V*(s_u).
The sum telescopes along any path:

    r(y) − β·Σ_{{u≥t}} log(π*(y_u|s_u)/π_ref(y_u|s_u)) = V*(s_t)      for every y through s_t.

**Stationarity.** At π = π*, the coefficient of the update is therefore
A − β·(k_t + F_t) = r(y) − b − β·Σ_{{u≥t}} k*_u = V*(s_t) − b: a number that depends on the prefix
only — not on the token chosen at s_t, nor on anything sampled after it. Grouping the
expected update at prefix s by the token a chosen there,

    Δθ_s = P_μ(s)·(V*(s) − b)·Σ_a μ(a|s)·(π*(a|s)/μ(a|s))·(e_a − π*(·|s))
         = P_μ(s)·(V*(s) − b)·Σ_a π*(a|s)·(e_a − π*(·|s)) = 0,

because Σ_a π(a|s)·e_a = π(·|s). The ratio ρ turns μ's token weights into π*'s; μ must give every
token positive probability for ρ to exist (full support), and then nothing else about μ matters:
**π* is a rest point of the exact Proximal KL update for every behaviour μ with full support**.
Any constant baseline b works (it only shifts the constant V*(s) − b). The two hypotheses of the
summary are visible in the derivation: the expectation must be exact over the whole population
(`_tree.expected_update` enumerates every response; a finite batch only samples this sum), and the
future cost must be counted in full (the telescoping sum needs every later k_u).

**Why the other rules move the rest point.** Each breaks one step above:

- *No ratio* (`proximal_kl_no_ratio`): tokens are weighted by μ(a|s): Σ_a μ(a|s)·c·(e_a − π*) =
  c·(μ(·|s) − π*(·|s)) ≠ 0 wherever c = V*(s) − b ≠ 0 and μ ≠ π*.
- *Own-token KL only* (`own_token_kl`, and TRL's ratio-weighted k3, whose gradient
  d(ρ·k3)/dlog π = ρ·k_t is the same): the coefficient r − b − β·k*_t = V*(s) − b + (r − V*(s·a))
  keeps the future term r − V*(s·a), whose μ-expectation given s·a is not zero in general: the rest point
  solves π ∝ π_ref·exp(E_μ[r|s·a]/β) instead of the soft value.
- *GRPO's k3 as a loss* (`grpo_k3`): the penalty's gradient β·(1 − π_ref/π) is not importance
  weighted by ρ and carries no future KL; on-policy it is the gradient of KL(π_ref‖π) per token, the reverse
  direction, so even μ = π does not help.
- *Bounded cost* (`future_clipped`, `future_window`, `whole_cost_clipped`): the identity needs
  the whole sum Σ_{{u≥t}} k*_u; wherever the bound binds at π* the coefficient is no longer
  V*(s_t) − b. A window W is harmless only when every response has at most W + 1 tokens.
  Clipping the whole cost removes the KL barrier of some tokens, and the rest point goes to the
  boundary of the simplex.
- *Truncated ratio* (`ratio_capped`): the token weight min(π*, C·μ) is not proportional to π*
  where π*(a|s) > C·μ(a|s).
- *σ-normalised advantage* (`sigma_normalized`): (r − b)/σ − β·Σk = (1/σ)·(r − b − β·σ·Σk): the
  rest point is the optimum for β·σ, not β.
- *GSPO's sequence ratio* (`gspo`, [gspo](references.md#gspo)): s = (π(y)/μ(y))^{{1/|y|}} is
  the geometric mean of the token ratios, not an importance weight, so Σ_y μ(y)·s(y)·f(y) is not
  Σ_y π(y)·f(y); the KL enters as grpo_k3's k3 loss. On-policy s = 1 and the rule is
  grpo_k3_on_policy with weights 1/|y|. GSPO's own clip (3·10^−4 / 4·10^−4) is left open here:
  off-policy it would exclude every sequence of the built-in trees at π* (the hand-written part
  of this page says why).
- *CISPO* (`cispo`, [cispo](references.md#cispo)): the detached weight min(ρ_t, 1 + ε_high) on
  A·∇log π is token-level truncated importance sampling on the GRPO k3 loss: grpo_k3's bias plus
  ratio_capped's where π*(a|s) > (1 + ε)·μ(a|s). On-policy it is grpo_k3_on_policy.
- *Truncated sequence IS* (`sequence_tis`, [tis](references.md#tis)): sequence_is with the weight
  min(π(y)/μ(y), C), no longer proportional to π(y) where π*(y) > C·μ(y). On-policy the cap never
  binds and the update is ∇J.
- *KL in the reward* (`kl_in_reward`, [ziegler2019](references.md#ziegler2019)): REINFORCE on
  r − β·Σ_u k_u, the same coefficient at every token. On-policy it is ∇J: the KL placed in the
  reward keeps π*, the k3 loss does not. Off-policy without a ratio, sequences are weighted by
  μ(y), and the past KL Σ_{{u<t}} k_u (a constant at s_t, which π's token weights cancel) no
  longer cancels under μ's.
- *Per-sequence means* (not a rule of the table; found by the probe below): DeepSeekMath's
  1/|o_i| weighting, `aggregation='seq-mean-token-mean'`, weights a sequence by 1/|y|; where
  lengths vary, the weight E_μ[1/|y| | s·a] depends on the token a and the sum above no longer
  vanishes. The token mean (the paper default) and constant-length normalisations
  (`seq-mean-token-sum-norm`) keep π*.

Two qualifications. The theorem says π* is *a* rest point; that the update reaches it is checked,
not proved: `_fixed_point.fixed_point` starts every solve at π_ref and finds π* for every unbiased rule
on every tree (KL(π_fix‖π*) below 10^−100 in the table). And "biased" means biased *in
expectation*: on a finite batch every rule is noisy; the unbiased ones are noisy around π*.

### The rules

{rules}

(`*_on_policy` variants: μ = π, held constant during the step. On-policy the ratio is 1, so
dropping it or capping it is harmless, and Proximal KL is the exact policy gradient of J.
`gspo`, `sequence_tis` and `kl_in_reward` off-policy, and `gspo` on-policy, couple the prefixes:
their update at s depends on π above s too, and `_fixed_point.fixed_point` iterates passes over
the prefixes, then Newton on all of them together.)

### The table (`lossproof theorem`)

Generated from a real run of `lossproof theorem` at {dps} significant digits (`conformance.theorem.table.run`;
`--json PATH` writes every digit, the rest points included). For each tree and rule:
the largest component of the exact expected update at π* (the residual), the rest point the
update reaches (`_fixed_point.fixed_point`, solved from π_ref), its distance KL(π_fix‖π*) and its
objective J(π_fix) ≤ β·log Z. A residual at rounding level (10^−{dps} scale) is the theorem;
a KL far above the solver's tolerance (10^−({dps}−8)) is the bias. CI runs the reduced table
(`lossproof theorem --reduced`: {reduced_trees} at {reduced_dps} digits) through the test suite.

{trees}

**Every behaviour μ.** The off-policy rows use each tree's own μ. Over {count} further random
full-support behaviour policies per tree (`_tree.random_behavior`, seeds 0–{count_m1}) and
both baselines (b = E_μ[r] and b = 0), the largest proximal_kl residual at π* is
{random_line} (below 10^−40 everywhere; the table's own μ gives at most {worst_tree}).

### The probe: does an implementation keep π* stationary?

`lossproof probe --target SPEC` (module `conformance/theorem/probe.py`) turns the theorem into a test of
any implementation of `proximal_kl.loss` or `grpo.loss` — ours or a third party's, any target
that `lossproof check` accepts. On each tree it feeds the target every complete response as
its own minibatch (B = 1, padded to the horizon with the mask), with the log-probabilities of
its tokens under π, μ and π_ref and the advantage A = r − E_μ[r]; takes the target's gradient
with respect to `logp` (autograd, or the declared VJP); chains it to the softmax logits
(∂log π(a|s)/∂θ_s = e_a − π(·|s)); and sums with the weights μ(y). With B = 1 every aggregation
mode is the token sum times a known factor (1/|y|, 1 or 1/T), which the probe divides out: the
result is the large-minibatch token mean, whatever mode the target uses — exactly what
`_tree.expected_update` computes. It is compared with the exact update of the matching rule at
π* and at a generic policy (`grpo.loss` with the clip opened so that it never binds), and the
target's own update at π* is the verdict: stationary or not. The last column applies the
sequence weights 1/|y| that `seq-mean-token-mean` gives in a real minibatch.

The built-in PyTorch backend (float64, CPU):

{probes}

Our `proximal_kl.loss` reproduces the exact expected update to rounding and keeps π* stationary
on every tree; our `grpo.loss` reproduces the exact update of GRPO's rule just as well — and that
rule moves π* (the residual at π* is its bias; the table above gives its rest point). A
mutant of `proximal_kl.loss` without the ratio is caught (tests/test_probe.py).

### Convergence

![KL(π_k‖π*) along the damped fixed-point iteration of several rules on {figure_tree}]({figure})

The exact population update iterated from π_ref, θ ← θ + {step}·Δθ, {iterations} steps on
{figure_tree}. The unbiased rules (`proximal_kl`, `sequence_is`: whole-sequence importance
sampling) converge to π* geometrically, through the plot's floor (10^−30); every biased rule
settles on its own rest point (dotted line: `_fixed_point.fixed_point`'s value, the table's
KL(π_fix‖π*)) — except `whole_cost_clipped`, which is still creeping towards the boundary of the
simplex, where its rest point lies.

This part of the page and the figure are regenerated by `lossproof docs build` (about a minute:
it reruns the 50-digit table); `lossproof docs build --check`, which CI runs, fails when they are
out of date.
"""
