"""`.ci/run` runs the README's test command (its "Set up" command 2), whatever either says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _test_command(text: str) -> str:
    """From the `.[test]` install to the end of the line: `-e ".[test]" && ruff ... && pytest ...`
    (pip's own flags, such as `-q` in CI, are left out)."""
    found = re.findall(r'pip install[^\n]*?(-e "\.\[test\]"[^\n]*)', text)
    assert len(found) == 1, found
    return found[0].strip()


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    command = _test_command(readme)
    assert "pytest" in command
    assert _test_command(ci) == command
