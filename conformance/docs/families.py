"""The generated parts of the family pages (distill, kl, dpo, grpo, proximal_kl) and of
docs/vectors.md: the tables of arguments, vector groups and worked examples, read from the
catalog and the vector files, and the figures drawn from the exact reference and the vectors.

Tables are Markdown strings; figures are matplotlib figures (``conformance.docs.figures``
turns them into PNG bytes). Values are printed from the vectors' decimal strings, rounded half
even to ``DIGITS`` significant digits, never through a float.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from decimal import Decimal

import mpmath

from lossproof.conformance import catalog, compare
from lossproof.conformance.docs import DocsError
from lossproof.conformance.docs.context import Context
from lossproof.conformance.docs.figures import BLUE, GREEN, GREY, ORANGE, RED, new_figure
from lossproof.conformance.vectors.load import VectorCase
from lossproof.refimpl.exact import distill, grpo, preference

DIGITS = 20                      # significant digits printed in the worked-example tables
# The source articles of the worked examples by their key in docs/references.md: a vector's
# provenance names the seed file (or already the key).
SOURCE_ARTICLES = {"000_e49910fd474b12d2.txt": "reading-math-3", "004_40cb3236a8d8fc7a.txt": "proximal-kl-summary"}

def digits(value: str, n: int = DIGITS) -> str:
    """A vector's decimal string rounded to n significant digits (round half even)."""
    d = Decimal(value)
    if d == 0:
        return "0"
    return format(d, f".{n}g")


def _flat(name: str, value, index=()) -> list[tuple[str, str]]:
    if isinstance(value, list):
        out = []
        for i, v in enumerate(value):
            out += _flat(name, v, index + (i,))
        return out
    label = name + ("[" + ",".join(map(str, index)) + "]" if index else "")
    return [(label, value)]


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _json(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))


def _default(value) -> str:
    if value is None:
        return "`None`"
    if isinstance(value, str):
        return f"`'{value}'`"
    return f"`{value!r}`"


def arguments_table(objective_ids) -> str:
    """Inputs and parameters of each objective, from the catalog (the contract)."""
    parts = []
    for oid in objective_ids:
        spec = catalog.get(oid)
        lines = [f"**`{oid}`** — {_cell(spec.summary)} Outputs: {', '.join(f'`{o}`' for o in spec.outputs)}; "
                 f"gradient with respect to {', '.join(f'`{g}`' for g in spec.grads) or 'nothing (no gradient)'}. "
                 f"Source: {_cell(spec.source)}.", "",
                 "| argument | role | shape / choices | paper default | where the default comes from |",
                 "|---|---|---|---|---|"]
        for i in spec.inputs:
            kind = {"int": "integer input", "mask": "0/1 mask"}.get(i.kind, "input")
            note = "−inf allowed (an impossible token)" if i.neg_inf else ""
            lines.append(f"| `{i.name}` | {kind} | `[{i.shape}]` | — | {note} |")
        for p in spec.params:
            role = "convention" if p.convention else "parameter"
            choices = ", ".join(_default(c) for c in p.choices) if p.choices else ""
            lines.append(f"| `{p.name}` | {role} | {choices} | {_default(p.default)} | {_cell(p.source)} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _defaults_differ(oid: str, conventions: dict) -> dict:
    defaults = catalog.get(oid).defaults
    return {k: v for k, v in conventions.items() if defaults.get(k) != v}


def groups_table(ctx: Context, objective_ids) -> str:
    """The vector groups of the objectives (one per convention set a library uses), from the
    vector files: name, conventions that differ from the paper, number of cases, source."""
    rows, sources, order = [], {}, []
    for oid in objective_ids:
        doc = next((d for d in ctx.vs.files.values() if d["objective"] == oid), None)
        if doc is None:
            raise DocsError(f"no vector file for {oid} in {ctx.vs.directory}")
        for g in doc["testGroups"]:
            if g["group"] == "invalid":
                continue
            diff = _defaults_differ(oid, g["conventions"])
            conv = ", ".join(f"`{k}={v!r}`" for k, v in diff.items()) or "paper defaults"
            rows.append(f"| `{g['group']}` | `{oid}` | {conv} | {len(g['tests'])} |")
            if g["group"] not in sources:
                sources[g["group"]] = g["source"]
                order.append(g["group"])
    head = ["| group | objective | conventions (where they differ from the paper) | cases |", "|---|---|---|---:|"]
    notes = "\n".join(f"- **`{name}`**: {sources[name]}" for name in order)
    intro = "What each group follows (library files are cited by version and path):"
    return "\n".join(head + rows) + f"\n\n{intro}\n\n" + notes


def _example_row(ctx: Context, case: VectorCase, article: bool) -> str:
    t = case.test
    params = {k: v for k, v in {**case.conventions, **t["params"]}.items() if v is not None}
    given = "<br>".join(f"`{k}` = `{_json(v)}`" for k, v in {**t["inputs"], **params}.items())
    values = []
    for name, value in t.get("expected", {}).items():
        values += [f"`{label}` = `{digits(v)}`" for label, v in _flat(name, value)]
    what = f"«{_cell(t['provenance']['printed'])}»" if article else _cell(t["comment"])
    uid = f"`{case.uid}`" + (f"<br>{_cell(t['comment'])}" if article else "")
    return f"| {uid} | {given} | {what} | {'<br>'.join(values)} |"


def examples_table(ctx: Context, family: str) -> str:
    """The source article's worked examples of a family (provenance kind 'article')."""
    order = {o.id: i for i, o in enumerate(catalog.OBJECTIVES)}
    rows = sorted((c for c in ctx.vs.cases(f"{family}.*") if c.test["provenance"]["kind"] == "article"),
                  key=lambda c: (order[c.objective], c.test["tcId"]))
    if not rows:
        raise DocsError(f"no article example for the family {family!r} in {ctx.vs.directory}")
    keys = []
    for c in rows:
        source = c.test["provenance"]["file"]
        key = source if source in SOURCE_ARTICLES.values() else SOURCE_ARTICLES.get(source)
        if key is None:
            raise DocsError(f"{c.uid} quotes {source}, which has no entry in docs/references.md "
                            "(add it there and to SOURCE_ARTICLES in conformance/docs/families.py)")
        keys.append(key)
    cited = ", ".join(f"[{k}](references.md#{k})" for k in dict.fromkeys(keys))
    head = [f"| uid and case | inputs and parameters | the article prints ({cited}) | exact value (20 significant digits) |",
            "|---|---|---|---|"]
    return "\n".join(head + [_example_row(ctx, c, True) for c in rows])


def cases_table(ctx: Context, uids) -> str:
    head = ["| uid | inputs and parameters | what it checks | exact value (20 significant digits) |",
            "|---|---|---|---|"]
    return "\n".join(head + [_example_row(ctx, ctx.case(u), False) for u in uids])


def tolerance_table(_ctx: Context) -> str:
    """The tolerance policy's constants (conformance.compare), for docs/vectors.md."""
    lines = [("| objective | `k_base` | n = length of | k_base·(1 + log2 n) at n = 1 | at n = 1024 | V = length of "
              "| k_base + ⌈V/L⌉ + L − 2 at V = 128256, float64 / float32 |"), "|---|---:|---|---:|---:|---|---:|"]
    for spec in catalog.OBJECTIVES:
        kb = spec.k_base
        n_of = "—" if not spec.reduction else (f"last axis of `{spec.reduction}`" if spec.family == "distill"
                                               else f"`{spec.reduction}` (all elements)")
        big = f"{kb * 11:g}" if spec.reduction else "— (n = 1)"
        axes = next((i.shape.split(",") for i in spec.inputs if i.name == spec.reduction), [])
        v_of, lane = ("—", "—") if "V" not in axes else (
            f"{'last' if axes[-1] == 'V' else 'first'} axis of `{spec.reduction}`",
            f"{kb + compare.lane_chain(128256, 'float64'):g} / {kb + compare.lane_chain(128256, 'float32'):g}")
        lines.append(f"| `{spec.id}` | {kb:g} | {n_of} | {kb:g} | {big} | {v_of} | {lane} |")
    lines += ["", "| dtype | unit roundoff u |", "|---|---|"]
    lines += [f"| {d} | 2^−{-int(math.log2(u))} ≈ {u:.3g} |" for d, u in compare.UNIT_ROUNDOFF.items()]
    return "\n".join(lines)


# --------------------------------------------------------------------------- figures

# The vectors the figures and tables quote (content-addressed: stable as long as the case is).
UID = {
    "softmax_t1": "distill.softmax:9cfd3ad3952a45da",
    "softmax_t2": "distill.softmax:b6309f9537961a6a",
    "kl_forward": "distill.token_kl:f54e6621a6e1b392",
    "kl_reverse": "distill.token_kl:12aa8b78f4e4db79",
    "kl_vocab": "distill.token_kl:2998b48966debb47",
    "kl_one_token": "kl.estimator:c86edf64307eb8fb",
    "dpo_gains": "dpo.loss:19ddf3dcdf2a7002",
    "grpo_adv": "grpo.advantages:cb725563a3114348",
    "clip_up": "grpo.clip:c112848979dae3f3",
    "clip_down": "grpo.clip:711dd655ddec928f",
    "simpo_length": "preference.simpo:e88372469ce5bb62",
    "skew_forward": "distill.skew_kl:122a3ab51e9b20f1",
}


def _f(s) -> float:
    return float(mpmath.mpf(s))


def _short(x, n=4) -> str:
    return mpmath.nstr(mpmath.mpf(x), n, strip_zeros=False).replace("-", "−")


def _uid_note(ax, *uids, y=-0.2):
    ax.text(0.5, y, "\n".join(uids), transform=ax.transAxes, ha="center", va="top", fontsize=7.5, color=GREY,
            family="monospace")


def fig_temperature(ctx: Context):
    """The softmax of logits (2, 0) at T = 1 and T = 2 (distill.softmax; [reading-math-3] §Destilación clásica)."""
    fig = new_figure(7.6, 3.7)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, key in zip(axes, ("softmax_t1", "softmax_t2")):
        case = ctx.case(UID[key])
        temp = case.test["params"]["temperature"]
        probs = case.test["expected"]["probs"]
        ax.bar([0, 1], [_f(p) for p in probs], width=0.55, color=[BLUE, ORANGE])
        for x, p in enumerate(probs):
            ax.text(x, _f(p) + 0.025, _short(p), ha="center", va="bottom")
        ax.set_xticks([0, 1], ["cat  (logit 2)", "dog  (logit 0)"])
        ax.set_ylim(0, 1.08)
        ax.set_yticks([0, 0.25, 0.5, 0.75, 1.0])
        ax.set_title(f"T = {temp:g}:  q = softmax((2, 0) / {temp:g})")
        _uid_note(ax, case.uid, y=-0.14)
    axes[0].set_ylabel("probability")
    fig.suptitle("Same logits, higher temperature: the smaller score gets more of the probability")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def _softmax_row(logits) -> list:
    return list(distill.softmax(logits)[0]) if isinstance(logits[0], list) else list(distill.softmax(logits))


def fig_kl_weights(ctx: Context):
    """Forward KL(p‖q) weights the log-ratios by the teacher, reverse KL(q‖p) by the student."""
    fwd, rev = ctx.case(UID["kl_forward"]), ctx.case(UID["kl_reverse"])
    with mpmath.workdps(50):
        q = _softmax_row(fwd.test["inputs"]["student_logits"])
        p = _softmax_row(fwd.test["inputs"]["teacher_logits"])
        panels = [
            ("forward  KL(p ‖ q) = Σ p·log(p/q)", p, [mpmath.log(a / b) for a, b in zip(p, q)], ORANGE,
             "teacher weight p", fwd),
            ("reverse  KL(q ‖ p) = Σ q·log(q/p)", q, [mpmath.log(b / a) for a, b in zip(p, q)], BLUE,
             "student weight q", rev),
        ]
    fig = new_figure(8.2, 4.0)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (title, weights, logs, color, label, case) in zip(axes, panels):
        ax.bar([0, 1], [float(w) for w in weights], width=0.55, color=color, label=label)
        for x, (w, lr) in enumerate(zip(weights, logs)):
            ax.text(x, float(w) + 0.02, f"weight {_short(w, 2)}\nlog-ratio {_short(lr, 3)}", ha="center",
                    va="bottom", fontsize=9)
        ax.set_xticks([0, 1], ["cat", "dog"])
        ax.set_ylim(0, 1.12)
        ax.set_title(f"{title}\n= {_short(case.test['expected']['kl'][0], 6)}")
        _uid_note(ax, case.uid, y=-0.11)
    axes[0].set_ylabel("weight of the token's log-ratio")
    fig.suptitle("Teacher p = (0.8, 0.2), student q = (0.4, 0.6): the first argument of the KL supplies the weights")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_one_token(ctx: Context):
    """Full-vocabulary reverse KL at one prefix against the one-token (sampled) estimate."""
    vocab, one = ctx.case(UID["kl_vocab"]), ctx.case(UID["kl_one_token"])
    with mpmath.workdps(50):
        q = _softmax_row(vocab.test["inputs"]["student_logits"])
        p = _softmax_row(vocab.test["inputs"]["teacher_logits"])
        terms = [a * mpmath.log(a / b) for a, b in zip(q, p)]
    full = vocab.test["expected"]["kl"][0]
    sampled = one.test["expected"]["value"][0]
    names = ["cat", "dog", "fox"]
    fig = new_figure(9.4, 4.2)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.45]})
    xs = [0, 1, 2]
    left.bar([x - 0.19 for x in xs], [float(v) for v in q], width=0.36, color=BLUE, label="student q")
    left.bar([x + 0.19 for x in xs], [float(v) for v in p], width=0.36, color=ORANGE, label="teacher p")
    left.set_xticks(xs, ["cat\n(sampled)", "dog", "fox"])
    left.set_ylim(0, 0.75)
    left.set_ylabel("probability after «The animal is a»")
    left.legend(frameon=False, loc="upper right")
    left.set_title("next-token probabilities")
    xr = [0, 1, 2, 3.3, 4.5]
    heights = [float(t) for t in terms] + [_f(full), _f(sampled)]
    colors = [BLUE, BLUE, BLUE, GREEN, RED]
    right.bar(xr, heights, width=0.6, color=colors)
    right.axhline(0, color="black", lw=0.8)
    for x, h, text in zip(xr, heights, [_short(t, 3) for t in terms] + [_short(full, 3), _short(sampled, 3)]):
        right.text(x, h + (0.012 if h >= 0 else -0.012), text, ha="center", va="bottom" if h >= 0 else "top")
    right.set_xticks(xr, [f"{n}\nq·log(q/p)" for n in names] + ["Σ = d_t\n(full vocab.)", "cat only\n(one token)"])
    right.set_ylim(-0.26, 0.42)
    right.set_ylabel("nats")
    right.set_title("reverse KL at this prefix: all three terms vs the sampled token")
    _uid_note(right, vocab.uid, one.uid, y=-0.2)
    fig.suptitle("One sampled token or the whole vocabulary: a one-token sample can be negative, the KL cannot")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_dpo_gains(ctx: Context):
    """Two DPO pairs with the same margin Δ = 3: the loss cannot tell them apart, the gains can."""
    case = ctx.case(UID["dpo_gains"])
    inp = case.test["inputs"]
    beta = case.test["params"].get("beta", catalog.get("dpo.loss").defaults["beta"])
    pc, pr, rc, rr = (inp[k] for k in ("policy_chosen_logps", "policy_rejected_logps",
                                         "reference_chosen_logps", "reference_rejected_logps"))
    losses = case.test["expected"]["losses"]
    fig = new_figure(8.2, 4.2)
    axes = fig.subplots(1, 2, sharey=True)
    for i, ax in enumerate(axes):
        gc, gr = pc[i] - rc[i], pr[i] - rr[i]
        ax.bar([0, 1], [gc, gr], width=0.55, color=[GREEN, RED])
        ax.axhline(0, color="black", lw=0.8)
        for x, g in enumerate((gc, gr)):
            ax.text(x, g + (0.15 if g >= 0 else -0.15), f"{g:+g}".replace("-", "−"), ha="center",
                    va="bottom" if g >= 0 else "top", fontsize=11)
        ax.annotate("", xy=(0.5, gr), xytext=(0.5, gc), arrowprops={"arrowstyle": "<->", "color": GREY})
        ax.text(0.5, (gc + gr) / 2, f"Δ = {gc - gr:g}", ha="center", va="center", color="black",
                bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none"})
        verdict = "preferred gains probability" if gc > 0 else "preferred LOSES probability"
        ax.set_title(f"case {i + 1}: {verdict}\nloss = {_short(losses[i], 8)}")
        ax.set_xticks([0, 1], ["preferred y_w\ng_w = log π/π_ref", "rejected y_l\ng_l = log π/π_ref"])
        ax.set_ylim(-5.2, 3.2)
    axes[0].set_ylabel("gain: change of log-probability vs the reference")
    _uid_note(axes[0], case.uid, y=-0.19)
    _uid_note(axes[1], f"β = {beta:g}: loss = −log σ(β·Δ) = −log σ(0.3)", y=-0.19)
    fig.suptitle("Same margin Δ = g_w − g_l = 3, same DPO loss: report the gains, not only the margin")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_simpo_margin(ctx: Context):
    """SimPO's loss against the per-token margin, with and without the target margin γ, and the
    pair whose sums and per-token averages disagree (the length bias SimPO removes)."""
    case = ctx.case(UID["simpo_length"])
    inp, par = case.test["inputs"], case.test["params"]
    beta, gamma = par["beta"], par["gamma"]
    grid = [i / 20 for i in range(-60, 81)]  # c̄ − r̄ from −3 to 4 (one token each: c̄ = c)
    zeros, ones = [0.0] * len(grid), [1] * len(grid)
    fig = new_figure(8.2, 4.4)
    ax = fig.subplots()
    for g, colour in ((gamma, BLUE), (0.0, GREY)):
        curve = preference.simpo(grid, zeros, ones, ones, beta=beta, gamma=g)["losses"]
        ax.plot(grid, [float(v) for v in curve], color=colour, lw=2,
                label=f"γ = {g:g}" + (" (SimPO)" if g else " (no target margin)"))
    ax.axvline(gamma / beta, color=BLUE, ls=":", lw=1)
    ax.text(gamma / beta, 1.6, f" loss = log 2 at c̄ − r̄ = γ/β = {gamma / beta:g}", color=BLUE, fontsize=9)
    losses = case.test["expected"]["losses"]
    for i in range(len(losses)):
        c, r = inp["chosen_logps"][i], inp["rejected_logps"][i]
        margin = c / inp["chosen_lengths"][i] - r / inp["rejected_lengths"][i]
        ax.plot([margin], [_f(losses[i])], "o", color=ORANGE, ms=8)
        ax.annotate(f"sums {c:g} vs {r:g}: the rejected wins\naverages: margin {margin:+.3g}".replace("-", "−"),
                    (margin, _f(losses[i])), textcoords="offset points", xytext=(-150, 40 + 45 * i), fontsize=8.5,
                    arrowprops={"arrowstyle": "->", "color": ORANGE})
    ax.set_xlabel("per-token margin c̄ − r̄ = log π(y_w)/|y_w| − log π(y_l)/|y_l|")
    ax.set_ylabel(f"SimPO loss (β = {beta:g})")
    ax.set_ylim(0, 3.2)
    ax.legend(loc="upper right")
    _uid_note(ax, case.uid, y=-0.16)
    fig.suptitle("SimPO: the loss falls below log 2 only once the average margin exceeds γ/β")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


def fig_grpo_advantages(ctx: Context):
    """Group-relative advantages of the article's group: rewards (0, 1, 1, 0) → (−1, 1, 1, −1)."""
    case = ctx.case(UID["grpo_adv"])
    rewards = case.test["inputs"]["rewards"][0]
    adv = [_f(a) for a in case.test["expected"]["advantages"][0]]
    with mpmath.workdps(50):
        r = [mpmath.mpf(x) for x in rewards]
        mean = mpmath.fsum(r) / len(r)
        std = mpmath.sqrt(mpmath.fsum((x - mean) ** 2 for x in r) / len(r))
    answers = ["«3»", "«4»", "«4»", "«5»"]
    fig = new_figure(8.6, 3.9)
    left, right = fig.subplots(1, 2)
    xs = list(range(len(rewards)))
    left.bar(xs, rewards, width=0.55, color=[GREEN if x > mean else RED for x in r])
    for x, v in zip(xs, rewards):
        left.text(x, v + 0.03, f"r = {v:g}", ha="center", va="bottom")
    left.axhline(float(mean), color="black", lw=1.2, ls="--", label=f"group mean = {_short(mean, 2)}")
    left.annotate("", xy=(3.55, float(mean + std)), xytext=(3.55, float(mean)),
                  arrowprops={"arrowstyle": "<->", "color": GREY})
    left.text(3.5, float(mean + std / 2), f"population\nstd = {_short(std, 2)}", ha="right", va="center",
              fontsize=8.5, color=GREY)
    left.set_xticks(xs, answers)
    left.set_xlim(-0.6, 3.8)
    left.set_ylim(0, 1.35)
    left.set_ylabel("reward r_i")
    left.set_title("verifier rewards of G = 4 answers to «2 + 2?»")
    left.legend(frameon=False, loc="upper left", fontsize=8.5)
    right.bar(xs, adv, width=0.55, color=[GREEN if a > 0 else RED for a in adv])
    right.axhline(0, color="black", lw=0.8)
    for x, a in enumerate(adv):
        right.text(x, a + (0.06 if a >= 0 else -0.06), f"{a:+g}".replace("-", "−"), ha="center",
                   va="bottom" if a >= 0 else "top")
    right.set_xticks(xs, answers)
    right.set_ylim(-1.45, 1.45)
    right.set_ylabel("advantage A_i")
    right.set_title("A_i = (r_i − mean) / std")
    _uid_note(right, case.uid, y=-0.12)
    fig.suptitle("GRPO: each answer is judged against its own group")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


SKEW_GRID = [i / 400 for i in range(1, 400)]     # the student's q(cat) from 0.0025 to 0.9975


def fig_skew_kl(ctx: Context):
    """DistiLLM's skew KL (Ko et al. 2024, §3): the mixture m = αp + (1−α)q keeps at least α·p on
    every token the teacher allows, so KL(p‖m) stays finite where KL(p‖q) blows up (exact reference)."""
    case = ctx.case(UID["skew_forward"])
    teacher = case.test["inputs"]["teacher_logits"][0]
    with mpmath.workdps(50):
        p = _softmax_row(teacher)
    alpha, q_bar = 0.1, (0.01, 0.99)
    m_bar = [alpha * pv + (1 - alpha) * qv for pv, qv in zip(p, q_bar)]
    students = [[math.log(c), math.log(1 - c)] for c in SKEW_GRID]
    teachers = [teacher] * len(students)
    curves = [(distill.token_kl(students, teachers, direction="forward"), "KL(p ‖ q), plain forward", GREY, None)]
    curves += [(distill.skew_kl(students, teachers, alpha=a), f"KL(p ‖ {a:g}p + {1 - a:g}q), α = {a:g}", colour, a)
               for a, colour in ((0.1, ORANGE), (0.5, BLUE))]
    fig = new_figure(9.4, 4.3)
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.45]})
    xs = [0, 1]
    for shift, values, colour, label in ((-0.27, p, ORANGE, "teacher p"), (0, q_bar, BLUE, "student q"),
                                         (0.27, m_bar, GREEN, f"m = {alpha:g}p + {1 - alpha:g}q")):
        left.bar([x + shift for x in xs], [float(v) for v in values], width=0.25, color=colour, label=label)
        for x, v in zip(xs, values):
            left.text(x + shift, float(v) + 0.02, _short(v, 2), ha="center", va="bottom", fontsize=8.5)
    floor = float(alpha * p[0])
    left.plot([-0.45, 0.45], [floor, floor], color=GREEN, lw=1, ls=":")
    left.annotate(f"m(cat) ≥ α·p(cat) = {_short(alpha * p[0], 2)}", (0.27, floor + 0.05), xytext=(0.4, 0.5),
                  ha="center", color=GREEN, fontsize=8.5, arrowprops={"arrowstyle": "->", "color": GREEN})
    left.set_xticks(xs, ["cat", "dog"])
    left.set_ylim(0, 1.3)
    left.set_ylabel("probability")
    left.set_title(f"student q = ({q_bar[0]:g}, {q_bar[1]:g}): the mixture, α = {alpha:g}")
    left.legend(frameon=False, loc="upper left", fontsize=8.5)
    for values, label, colour, a in curves:
        right.plot(SKEW_GRID, [float(v) for v in values], color=colour, lw=2, label=label)
        if a is not None:
            bound = -mpmath.log(a)
            right.axhline(float(bound), color=colour, lw=0.8, ls=":")
            right.text(0.5, float(bound) - 0.05, f"bound −log {a:g} = {_short(bound, 3)}", color=colour,
                       fontsize=8.5, ha="center", va="top")
    q_case = _softmax_row(case.test["inputs"]["student_logits"])[0]
    value = case.test["expected"]["kl"][0]
    right.plot([float(q_case)], [_f(value)], "o", color="black", ms=5,
               label=f"vector: q = (0.4, 0.6), α = {alpha:g} → {_short(value, 5)}")
    right.set_xlim(0, 1)
    right.set_ylim(0, 3.6)
    right.set_xlabel("student's q(cat)   (q(dog) = 1 − q(cat))")
    right.set_ylabel("nats")
    right.set_title("forward KL and skew KL against the student, teacher p = (0.8, 0.2)")
    right.legend(frameon=False, fontsize=8, loc="upper right")
    _uid_note(right, case.uid, y=-0.17)
    fig.suptitle("Skew KL (DistiLLM): mixing α of the teacher into the student keeps the divergence finite")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


CLIP_GRID = [i / 200 for i in range(40, 381)]     # ρ from 0.2 to 1.9


def fig_clip(ctx: Context):
    """C_t = min(ρA, clip(ρ, 1−ε, 1+ε)·A) against ρ for A = +1 and A = −1, ε = 0.2 (exact reference)."""
    eps = 0.2
    logps = [math.log(r) for r in CLIP_GRID]
    curves = {}
    with mpmath.workdps(50):
        rho = [float(mpmath.exp(mpmath.mpf(lp))) for lp in logps]
        for a in (1.0, -1.0):
            n = len(logps)
            value = grpo.clip(logps, [0.0] * n, [a] * n, eps_low=eps)
            grad = grpo.clip_vjp([1.0] * n, logps, [0.0] * n, [a] * n, eps_low=eps)["logp"]
            curves[a] = ([float(v) for v in value], [float(g) for g in grad])
    points = {1.0: ctx.case(UID["clip_up"]), -1.0: ctx.case(UID["clip_down"])}
    fig = new_figure(9.0, 4.1)
    axes = fig.subplots(1, 2)
    for ax, a in zip(axes, (1.0, -1.0)):
        values, grads = curves[a]
        ax.plot(rho, [r * a for r in rho], color=GREY, lw=1.0, ls="--", label="unclipped ρ·A")
        ax.plot(rho, values, color=BLUE if a > 0 else RED, lw=2.4, label="C_t (exact)")
        flat = [r for r, g in zip(rho, grads) if g == 0]
        lo, hi = min(flat), max(flat)
        ax.axvspan(lo, hi, color=GREY, alpha=0.15, label="flat: gradient 0")
        ax.axvline(1 - eps, color="black", lw=0.6, ls=":")
        ax.axvline(1 + eps, color="black", lw=0.6, ls=":")
        case = points[a]
        r_pt = math.exp(case.test["inputs"]["logp"][0] - case.test["inputs"]["old_logp"][0])
        c_pt = _f(case.test["expected"]["objective"][0])
        label = f"article: ρ = {r_pt:g} → C = {c_pt:.1f}".replace("-", "−")
        ax.plot([r_pt], [c_pt], "o", color="black", ms=6, label=label)
        ax.set_xlim(0.2, 1.9)
        ax.set_xticks([0.2, 0.5, 0.8, 1.0, 1.2, 1.5, 1.9])
        ax.set_xlabel("ratio ρ = π_θ / π_old")
        ax.set_ylabel("C_t  (maximised)")
        sign = "+1" if a > 0 else "−1"
        ax.set_title(f"A = {sign}, ε = {eps:g}: flat for ρ " + ("> 1 + ε" if a > 0 else "< 1 − ε"))
        ax.legend(frameon=False, fontsize=8.5, loc="upper left" if a > 0 else "lower left")
        _uid_note(ax, case.uid, y=-0.17)
    fig.suptitle("The clipped objective: where moving ρ further would help, the term goes flat (no hard limit on ρ)")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    return fig


# --------------------------------------------------------------------------- the blocks of a family page

def family_blocks(family: str, examples: tuple[str, ...] | None = None) -> dict[str, Callable[[Context], str]]:
    """The three generated blocks of a family page: ``arguments`` (from the catalog),
    ``libraries`` (the vector groups) and ``examples`` (the source article's worked examples, or
    the cases ``examples`` names)."""
    ids = tuple(o.id for o in catalog.OBJECTIVES if o.family == family)
    return {
        "arguments": lambda ctx: arguments_table(ids),
        "libraries": lambda ctx: groups_table(ctx, ids),
        "examples": (lambda ctx: examples_table(ctx, family)) if examples is None
        else (lambda ctx: cases_table(ctx, examples)),
    }
