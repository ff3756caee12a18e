"""ASCII math of the defenses' notes, as a page (`prose`) and as plain Unicode text for a
terminal, a log or JUnit (`plain`)."""

from __future__ import annotations

import pytest

from privbench.report.text import plain, prose


@pytest.mark.parametrize(("ascii_math", "shown"), [
    ("x_i^{t+1/2}", "xᵢᵗ⁺½"),
    ("bounded by ||g||_1", "bounded by ‖g‖₁"),
    ("alpha == 0.5", "α = 0.5"),
    ("d*eps per round, T*d*eps over T rounds", "d·ε per round, T·d·ε over T rounds"),
    ("sigma^2 / (n B)", "σ² / (n B)"),
    ("ddot g^{ij}_t", "g̈ⁱʲₜ"),
    ("x_{w,Q}", "x_(w,Q)"),  # no Unicode subscript for every character: kept as text
    ("clip bound C_bar and budget mu_bar", "clip bound C̄ and budget μ̄"),
])
def test_plain_writes_ascii_math_as_unicode(ascii_math, shown):
    assert plain(ascii_math) == shown


@pytest.mark.parametrize("text", ["control_variate", "mia_message", "eps_mode = per_run",
                                  "--eps 8", "reports/*.md", "1.03e+06"])
def test_plain_leaves_identifiers_flags_and_numbers_alone(text):
    assert plain(text) == text


def test_plain_and_prose_read_the_same_letters():
    note = "sigma_t^2 of gtil_i under alpha == 1"
    assert plain(note) == "σₜ² of g̃ᵢ under α = 1"
    assert str(prose(note)) == "σ<sub>t</sub><sup>2</sup> of g̃<sub>i</sub> under α = 1"
