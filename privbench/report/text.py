"""Text from results files made readable: ASCII math as HTML or as Unicode, one reason once.

Defenses describe their messages and views in ASCII math (`ddot g^{ij}_t`, `x_i^{t+1/2}`,
`sigma^2`); `prose` renders it with Greek letters, accents and HTML sub/superscripts for a page,
`plain` with Unicode sub/superscript characters for a terminal, a log or a JUnit file. A symbol
is one letter (or a Greek letter, or an accented letter) that starts a word; identifiers such as
`control_variate` or `mia_message` are left alone.
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "zeta": "ζ",
         "eta": "η", "vartheta": "ϑ", "theta": "θ", "kappa": "κ", "lambda": "λ", "mu": "μ",
         "xi": "ξ", "rho": "ρ", "sigma": "σ", "tau": "τ", "phi": "φ", "psi": "ψ",
         "omega": "ω", "Delta": "Δ", "Sigma": "Σ"}
_GREEK_RE = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(sorted(GREEK, key=len, reverse=True))
                       + r")(?![A-Za-z])")
# (pattern, combining mark): "ddot g" -> g̈, "hat g" -> ĝ, "x~" -> x̃, "gbar" -> ḡ, "gtil" -> g̃
ACCENTS = ((re.compile(r"(?<![A-Za-z])ddot ([A-Za-z])"), "\u0308"),
           (re.compile(r"(?<![A-Za-z])hat ([A-Za-z])"), "\u0302"),
           (re.compile(r"(?<![A-Za-z])([A-Za-z])bar(?![A-Za-z])"), "\u0304"),
           (re.compile(r"(?<![A-Za-z])([A-Za-z])til(?![A-Za-z])"), "\u0303"),
           (re.compile(r"(?<![A-Za-z])([A-Za-z])~"), "\u0303"))
_SCRIPT = (r"(?:\{[^{}]*\}|\([^()]*\)"
           r"|[A-Za-z0-9+\-]{1,3}(?:,[A-Za-z0-9]{1,3})?(?![A-Za-z0-9_]))")
_SYMBOL_RE = re.compile(r"(?<![\w\u0300-\u036f])([A-Za-z\u0370-\u03ff][\u0300-\u036f]?)"
                        r"((?:[_^]" + _SCRIPT + r")+)")
_PART_RE = re.compile(r"([_^])(" + _SCRIPT + r")")
# References to documents outside the repository, with what they enclose.
_OUTSIDE_RE = re.compile(r"\s*\((?:see )?(?:the )?card[^()]*\)|\s*\bcard(?:'s)? §[\d.]+"
                         r"(?: item \d+)?")


def _scripts(match: re.Match[str]) -> str:
    out = match.group(1)
    for kind, body in _PART_RE.findall(match.group(2)):
        body = body[1:-1] if body.startswith("{") else body
        tag = "sub" if kind == "_" else "sup"
        out += f"<{tag}>{body}</{tag}>"
    return out


def strip_outside_refs(text: str) -> str:
    """`text` without references to documents outside the repository (a parenthesised section
    number of an implementation note kept beside the papers, which a reader cannot follow)."""
    return _OUTSIDE_RE.sub("", text)


_BARRED_RE = re.compile(r"(?<![A-Za-z])([A-Za-z]|" + "|".join(GREEK) + r")_bar(?![A-Za-z])")


def _letters(s: str) -> str:
    """Accents and Greek letters of ASCII math as Unicode ("C_bar", "mu_bar": C̄, μ̄)."""
    s = _BARRED_RE.sub(lambda m: GREEK.get(m.group(1), m.group(1)) + "\u0304", s)
    for pattern, mark in ACCENTS:
        s = pattern.sub(lambda m, mark=mark: m.group(1) + mark, s)
    return _GREEK_RE.sub(lambda m: GREEK[m.group(1)], s)




_SUB = dict(zip("0123456789+-=()aehijklmnoprstuvx",
                "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎ₐₑₕᵢⱼₖₗₘₙₒₚᵣₛₜᵤᵥₓ", strict=True))
_SUP = dict(zip("0123456789+-=()abcdefghijklmnoprstuvwxyzT½",
                "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻᵀ½", strict=True))
# ASCII operators and norms of the defenses' notes, as a reader writes them
_OPERATORS = ((re.compile(r"\|\|([^|]+)\|\|_?([0-9])?"), lambda m: f"‖{m.group(1)}‖"
                + (_SUB[m.group(2)] if m.group(2) else "")),
              (re.compile(r"(?<=\*)eps(?!\w)"), "ε"), (re.compile(r" == "), " = "),
              (re.compile(r"(?<=[\w)])\*(?=[A-Za-zα-ω(])"), "·"),
              (re.compile(r"(?<![\w.])1/2(?![\w.])"), "½"), (re.compile(r" <= "), " ≤ "),
              (re.compile(r" >= "), " ≥ "), (re.compile(r" != "), " ≠ "))


def _unicode_scripts(match: re.Match[str]) -> str:
    out = match.group(1)
    for kind, body in _PART_RE.findall(match.group(2)):
        body = body[1:-1] if body[:1] in "{(" and body[-1:] in ")}" else body
        table = _SUB if kind == "_" else _SUP
        if all(ch in table for ch in body):
            out += "".join(table[ch] for ch in body)
        else:  # no Unicode form for every character: the script stays readable as text
            out += f"{kind}({body})"
    return out


def prose(text: object) -> Markup:
    """`text` escaped, its ASCII math as Unicode letters and operators with HTML
    sub/superscripts."""
    return Markup(_SYMBOL_RE.sub(_scripts, _operators(_letters(str(escape(no_paths(
        strip_outside_refs(str(text)))))))))


def _operators(s: str) -> str:
    for pattern, repl in _OPERATORS:
        s = pattern.sub(repl, s)
    return s


def plain(text: object) -> str:
    """`text` for a terminal, a log or a JUnit file: its ASCII math as Unicode (Greek letters,
    accents, ‖g‖₁, x_i^{t+1/2} -> xᵢᵗ⁺½, d*eps -> d·ε, == -> =), no markup, no escapes."""
    return _SYMBOL_RE.sub(_unicode_scripts, _operators(_letters(no_paths(strip_outside_refs(
        str(text))))))


class Notes:
    """Numbered notes for a page: a reason or a missing value's cause is written once, in the
    list, and every place it applies points to its number."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def number(self, reason: str) -> int:
        if reason not in self.reasons:
            self.reasons.append(reason)
        return self.reasons.index(reason) + 1

    def mark(self, reason: str, shown: str = "–") -> Markup:
        """`shown` with a link to the reason's note (the reason itself is written once, there)."""
        k = self.number(reason)
        return Markup('{0}<sup><a href="#note{1}">{1}</a></sup>').format(shown, k)

    def status(self, status: str) -> Markup:
        """An attack's status: short ones as written, a long reason as its kind and a note."""
        head, sep, _ = status.partition(":")
        if not sep or len(status) <= 48:
            return prose(status)
        return self.mark(status, head)


# A user's home folder at the start of an absolute path: /root/, /home/NAME/, /Users/NAME/.
_HOME_RE = re.compile(r"(?<![\w.~/-])/(?:root|home/[^/\s]+|Users/[^/\s]+)(?=/|\s|$)")


def no_paths(text: object) -> str:
    """`text` with a user's home folder written "~" (a shareable page names no machine path);
    markup stays markup (only "~" is inserted)."""
    out = _HOME_RE.sub("~", str(text))
    return Markup(out) if isinstance(text, Markup) else out
