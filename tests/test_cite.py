"""Citing a vector: what the digits are, the BibTeX fields and their escaping, and the number a
LaTeX row cites."""
import dataclasses

import pytest

from lossproof.conformance import cli
from lossproof.conformance.vectors import cite
from lossproof.conformance.vectors.load import VectorSet

UID = "dpo.loss:724cb4d082c94475"


@pytest.fixture(scope="module")
def case():
    return VectorSet(objectives=["dpo.loss"], validate=False).by_uid(UID)


def test_every_form_says_the_digits_are_those_of_the_stored_inputs(case):
    for form in (cite.text(case, "1.3.0", "proof"), cite.bibtex(case, "1.3.0", "proof", url=""),
                 cite.latex(case, "1.3.0", "proof")):
        assert "binary64 inputs and parameters as stored" in form


def test_bibtex_has_year_url_and_escaped_text(case):
    odd = dataclasses.replace(case, test={**case.test, "comment": "50% of x_i & {y} #1 ~ $"})
    entry = cite.bibtex(odd, "1.3.0", "proof", url="https://example.org/lossproof")
    assert "  year = {2026},\n" in entry and "  url = {https://example.org/lossproof},\n" in entry
    assert r"50\% of x\_i \& \{y\} \#1 \textasciitilde{} \$" in entry
    assert r"lossproof test vector dpo.loss:724cb4d082c94475: dpo.loss" in entry
    assert "url =" not in cite.bibtex(case, "1.3.0", "proof", url="")


def test_latex_selects_the_output_and_element(case):
    exact = case.test["expected"]["chosen_rewards"][3]
    row = cite.latex(case, "1.3.0", "proof", "chosen_rewards", "3").splitlines()[1]
    assert row == rf"\texttt{{dpo.loss}} & chosen\_rewards[3] & \num{{{exact}}} & \texttt{{724cb4d082c94475}} \\"
    grad = case.test["grads"]["policy_chosen_logps"][-1]
    row = cite.latex(case, "1.3.0", "p", "grad:policy_chosen_logps", "-1")
    assert rf"grad:policy\_chosen\_logps[7] & \num{{{grad}}}" in row
    assert rf"losses[0] & \num{{{case.test['expected']['losses'][0]}}}" in cite.latex(case, "1.3.0", "p")


@pytest.mark.parametrize("argv, message", [
    (["--latex", "--output", "loss"], "--output 'loss': dpo.loss:724cb4d082c94475 holds losses, chosen_rewards"),
    (["--latex", "--element", "8"], "index 8 is outside an axis of length 8 of losses"),
    (["--latex", "--element", "0,1"], "losses has 1 axis"),
    (["--latex", "--element", "a"], "expected indices such as 0 or 1,3"),
    (["--element", "1"], "--output and --element select the number of a --latex row"),
])
def test_a_number_the_vector_does_not_hold_is_a_usage_error(argv, message, capsys):
    assert cli.main(["cite", UID, *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lossproof: error: ") and message in err and len(err.splitlines()) == 1


def test_every_released_vector_set_has_a_year():
    from lossproof.conformance.vectors import versions
    assert set(versions.YEARS) == set(versions.RELEASED)


# --------------------------------------------------------------------------- the article's printed inputs

KL_UID = "distill.token_kl:f54e6621a6e1b392"   # forward KL, teacher (0.8, 0.2), student (0.4, 0.6)


@pytest.fixture(scope="module")
def article():
    from lossproof.conformance.vectors import examples
    vs = VectorSet(objectives=["distill.*", "grpo.*", "dpo.loss", "kl.estimator"], validate=False)
    return {c.uid: c for c in vs.cases() if examples.is_article(c)}


def _real(transform: str, decimal: str):
    import mpmath
    return mpmath.log(mpmath.mpf(decimal)) if transform == "log" else mpmath.mpf(decimal)


def test_the_printed_reals_round_to_the_stored_inputs(article):
    """What the vector stores is each real of the table computed from its binary64 decimal: the table names the
    reals of these very vectors, and every article example with an input that is not exact as
    printed (a non-integer) has an entry."""
    import mpmath
    from lossproof.conformance.vectors import examples
    assert set(examples.PRINTED) <= set(article)
    for uid, case in article.items():
        reals = examples.PRINTED.get(uid, {})
        for name, stored in case.test["inputs"].items():
            flat = list(_flat(stored))
            if name not in reals:
                assert all(float(v).is_integer() for v in flat), f"{uid}: {name} needs its printed reals"
                continue
            transform, decimals = reals[name]
            # the generator took the log of the binary64 probability (math.log(0.8)), rounded to
            # nearest: up to 2 ulps from log 0.8 itself
            with mpmath.workdps(60):
                assert [float(_real(transform, float(d))) for d in _flat(decimals)] == flat, (uid, name)


def _flat(x):
    if isinstance(x, list):
        for v in x:
            yield from _flat(v)
    else:
        yield x


def test_parameters_stand_for_their_shortest_decimal(article):
    from lossproof.conformance.vectors import examples
    assert examples.printed_reals(article["dpo.loss:19ddf3dcdf2a7002"]) == {"beta": ("", "0.1")}
    # T = 1.0 and α = 0.5 are exact: only the logits and the skew's α = 0.1 stand for other reals
    assert set(examples.printed_reals(article["distill.skew_kl:122a3ab51e9b20f1"])) == {
        "student_logits", "teacher_logits", "alpha"}
    assert examples.printed_reals(article["distill.softmax:9cfd3ad3952a45da"]) == {}


def _independent():
    """The values at the printed reals from the formulas written out in mpmath (50 digits)."""
    import mpmath
    m = mpmath.mpf
    log = mpmath.log
    sig = lambda x: 1 / (1 + mpmath.exp(-x))  # noqa: E731
    return {
        KL_UID: ("kl", [m("0.8") * log(2) + m("0.2") * log(m(1) / 3)]),                      # Σ p log p/q
        "distill.token_kl:12aa8b78f4e4db79": ("kl", [m("0.4") * log(m(1) / 2) + m("0.6") * log(3)]),  # Σ q log q/p
        "distill.token_kl:2998b48966debb47": ("kl", [m("0.5") * log(m(5) / 6) + m("0.2") * log(m(2) / 3)
                                                     + m("0.3") * log(3)]),
        "distill.tvd:517e60d49c00485b": ("tvd", [m("0.4")]),
        "distill.tvd:33a45d5ff4ea2ea5": ("tvd", [m("0.2")]),
        "kl.estimator:c86edf64307eb8fb": ("value", [log(m(5) / 6)]),
        "grpo.clip:c112848979dae3f3": ("objective", [m("1.2")]),
        "grpo.clip:711dd655ddec928f": ("objective", [m("-0.8")]),
        "dpo.loss:19ddf3dcdf2a7002": ("losses", [-log(sig(m("0.3")))] * 2),
    }


def test_the_value_at_the_printed_reals_is_proven_and_matches_the_formulas(article):
    import mpmath
    from lossproof.conformance import numbers
    from lossproof.conformance.vectors import certify, examples
    with mpmath.workdps(50):
        expected = {uid: (out, numbers.encode_exact(v)) for uid, (out, v) in _independent().items()}
    for uid, (output, digits) in expected.items():
        values, bits = certify.at_printed(article[uid], examples.printed_reals(article[uid]))
        assert values[output] == digits and bits == certify.PRECISIONS[0], uid


def test_the_printed_reals_move_the_digits_from_the_17th_on(article):
    """KL(teacher (0.8, 0.2) ‖ student (0.4, 0.6)): the values at the stored binary64 logits and at
    log 0.8, … share 15 significant digits, and the 16th differs (a relative change of 1.7e-16)."""
    from lossproof.conformance.vectors import certify, examples
    case = article[KL_UID]
    at, _ = certify.at_printed(case, examples.printed_reals(case))
    stored, printed = case.test["expected"]["kl"][0], at["kl"][0]
    assert stored[:17] == printed[:17] == "0.334795286714334" and (stored[17], printed[17]) == ("2", "3")


def test_an_example_on_a_kink_is_not_proven_and_says_why(article):
    """ρ = 0.24/0.20 = 1.2 = 1 + ε exactly at the printed reals: the clip's branch is undecidable in
    balls (the binary64 ratio, 1.1999999999999997927…, lies inside the band)."""
    from lossproof.conformance.vectors import certify, examples
    case = article["grpo.clip:feae24b8480c7fd5"]
    with pytest.raises(ValueError, match="not proven at 40000 bits: the printed reals sit on a kink"):
        certify.at_printed(case, examples.printed_reals(case))


def test_standing_for_is_scoped_and_validation_sees_the_binary64_numbers():
    from flint import arb

    from lossproof.refimpl.certified import _ball, kl
    x = -0.6931471805599453
    with _ball.precision(192), _ball.standing_for({x: lambda: -arb(2).log()}):
        assert _ball.ball(x).overlaps(-arb(2).log()) and not _ball.ball(x).contains(arb(x))
        with pytest.raises(Exception, match="finite"):
            kl.estimator([float("nan")], [x])
    assert _ball.ball(x) == arb(x)


def test_cite_carries_the_value_at_the_printed_inputs(capsys):
    printed = "0.33479528671433430925473664978204"
    reals = "student_logits = log [[0.4, 0.6]]; teacher_logits = log [[0.8, 0.2]]"
    assert cli.main(["cite", KL_UID]) == 0
    out = capsys.readouterr().out
    assert "binary64 inputs and parameters as stored" in out
    assert f'at the article\'s printed inputs ({reals}) the exact value is kl = ["{printed}"] ' \
           "(proven to 32 digits at 192 bits)" in out
    assert cli.main(["cite", KL_UID, "--latex"]) == 0
    comment, row = capsys.readouterr().out.splitlines()[1:]
    assert comment == rf"% at the article's printed inputs ({reals}): kl[0] = \num{{{printed}}} (proven at 192 bits)"
    assert row.startswith(r"\texttt{distill.token\_kl} & kl[0] & \num{0.33479528671433425270171379262561}")
    assert cli.main(["cite", KL_UID, "--bibtex"]) == 0
    assert r"printed inputs (student\_logits = log [[0.4, 0.6]]" in capsys.readouterr().out


def test_cite_of_an_example_exact_as_printed_and_of_a_generated_case(case, capsys):
    assert cli.main(["cite", "distill.softmax:9cfd3ad3952a45da"]) == 0
    assert "the article prints these binary64 inputs exactly, so the digits are also its value" in capsys.readouterr().out
    assert cli.main(["cite", UID]) == 0
    assert "printed" not in capsys.readouterr().out


def test_every_article_example_has_its_printed_value_or_says_why(article, capsys):
    printed = [cli._printed(case) for case in article.values()]
    assert sum(p.reals == "" for p in printed) == 5                     # integer logits and rewards
    assert sum(p.values is not None for p in printed) == 18
    assert [p.reason for p in printed if p.reals and p.values is None] == [
        "not proven at 40000 bits: the printed reals sit on a kink of the objective, a branch that balls "
        "around them cannot decide"]
    assert cli.main(["examples"]) == 0
    out = capsys.readouterr().out
    assert "at the reals the article prints" in out and out.count("the same: the inputs are exact as") == 5


def test_an_article_example_whose_printed_reals_are_not_recorded_claims_nothing(article, capsys):
    """A new article example with non-integer inputs and no PRINTED entry: cite says nothing about
    the printed inputs rather than calling the binary64 numbers exact."""
    from lossproof.conformance.vectors import examples
    case = article["distill.tvd:517e60d49c00485b"]
    unknown = dataclasses.replace(case, test={**case.test, "uid": "distill.tvd:0000000000000000"})
    assert examples.printed_reals(unknown) is None and cli._printed(unknown) is None
    assert "printed" not in cite.text(unknown, "1.4.0", "proof", printed=cli._printed(unknown))
