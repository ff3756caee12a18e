"""Which code made a result: the git commit of the checkout privbench runs from.

A fingerprint (`privbench.fingerprint`) hashes what a run was asked to do and the structure the
code builds from it, not the code itself: a changed step rule or noise formula with the same
configuration keeps its fingerprint. So that such a result can still be traced to the code that
made it, every results file and reproduction line records the commit (outside the fingerprint:
a new commit does not invalidate a result, it only says where to look), and whether privbench's
own code (`privbench/`, `attacks/`, `defenses/`, `pyproject.toml`) differed from that commit.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

# The paths whose changes can change a result (reports, tests and the README cannot).
CODE_PATHS = ("privbench", "attacks", "defenses", "pyproject.toml")
NOT_A_CHECKOUT = "not a git checkout (an installed copy: see the privbench version)"


def revision(root: Path) -> str:
    """"git <40-hex commit>", with " + uncommitted changes to <paths>" when the code under `root`
    differs from it; `NOT_A_CHECKOUT` when `root` is not the top of a git work tree (or git is
    missing or refuses the folder)."""
    def git(*args: str) -> str:
        # no optional locks: `status` must not write the index while a user's git runs
        return subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args],
                              capture_output=True, text=True, timeout=30, check=True).stdout

    try:
        if Path(git("rev-parse", "--show-toplevel").strip()).resolve() != root.resolve():
            return NOT_A_CHECKOUT  # e.g. installed into a virtual environment inside a repo
        commit = git("rev-parse", "HEAD").strip()
        # porcelain lines are "XY path" (X may be a space: no strip); untracked files count (a
        # new module changes results)
        changed = sorted({line[3:].split("/", 1)[0] for line in
                          git("status", "--porcelain", "--", *CODE_PATHS).splitlines()})
    except (OSError, subprocess.SubprocessError):
        return NOT_A_CHECKOUT
    return f"git {commit}" + (f" + uncommitted changes to {', '.join(changed)}"
                              if changed else "")


@functools.lru_cache(maxsize=1)
def code_revision() -> str:
    """`revision` of the checkout this privbench package was imported from, read once per
    process (at its first result, before anything long runs)."""
    return revision(Path(__file__).resolve().parent.parent)
