"""The gate's results where CI users read them: a Markdown summary (GitHub's job summary,
`$GITHUB_STEP_SUMMARY`, or any file) and GitHub Actions workflow commands (`::error`,
`::warning`) that annotate a run with its failed and inconclusive checks."""

from __future__ import annotations

from collections.abc import Sequence

from privbench.report.gate import Check, verdict_word
from privbench.report.text import plain

# failures first, then what a reader must still look at, then what holds
_ORDER = {"FAIL": 0, "INCONCLUSIVE": 1, "N/A": 2, "PASS": 3}


def _cell(text: str) -> str:
    """A Markdown table cell: math as Unicode, pipes escaped, one line."""
    return " ".join(plain(text).replace("|", "\\|").split())


def markdown_summary(checks: Sequence[Check], results: str, policy: str) -> str:
    """The checks as a Markdown section: a headline with the counts, then one table row per
    check, failures first (the order of `run_checks` kept within each result)."""
    words = [verdict_word(c) for c in checks]
    counts = {w: words.count(w) for w in _ORDER if w in words}
    outcome = "failed" if any(not c.passed for c in checks) else "passed"  # inconclusive: policy
    head = ", ".join(f"{n} {w.lower() if w != 'N/A' else 'not applicable'}"
                     for w, n in counts.items())
    lines = [f"## privbench check {outcome}", "",
             f"`{_cell(results)}` against the policy `{_cell(policy)}`: {head or 'no checks'}.",
             "", "| check | result | detail |", "|---|---|---|"]
    ranked = sorted(zip(words, checks, strict=True), key=lambda wc: _ORDER[wc[0]])
    lines += [f"| {_cell(c.name)} | **{w}** | {_cell(c.detail)} |" if w != "PASS"
              else f"| {_cell(c.name)} | {w} | {_cell(c.detail)} |" for w, c in ranked]
    return "\n".join(lines) + "\n"


def _escape_data(text: str) -> str:
    """A workflow command's message (GitHub's escaping of %, CR and LF)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    """A workflow command's property value (also ':' and ',')."""
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotations(checks: Sequence[Check], results: str) -> list[str]:
    """One `::error` per failed check and one `::warning` per inconclusive one, each titled by
    the check and attached to the results file."""
    kinds = {"FAIL": "error", "INCONCLUSIVE": "warning"}
    out = []
    for c in checks:
        kind = kinds.get(verdict_word(c))
        if kind:
            out.append(f"::{kind} file={_escape_property(results)},"
                       f"title={_escape_property('privbench check ' + c.name)}::"
                       f"{_escape_data(c.name + ': ' + plain(c.detail))}")
    return out
