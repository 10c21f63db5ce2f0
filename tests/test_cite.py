"""Citing a vector: what the digits are, the BibTeX fields and their escaping, and the number a
LaTeX row cites."""
import dataclasses

import pytest

from conformance import cli
from conformance.vectors import cite
from conformance.vectors.load import VectorSet

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
    from conformance.vectors import versions
    assert set(versions.YEARS) == set(versions.RELEASED)
