"""Which code made a result: the git commit of the checkout privbench runs from, and a digest
of the code itself.

A fingerprint (`privbench.results.fingerprint`) hashes what a run was asked to do and the structure
the code builds from it, not the code itself: a changed step rule or noise formula with the same
configuration keeps its fingerprint. So that such a result can still be traced to the code that made
it, every results file and reproduction line records (outside the fingerprint: new code does not
invalidate a result, it says where to look):
- `revision`: the commit, and which of privbench's code paths (`privbench/`, `attacks/`,
  `defenses/`, `pyproject.toml`) differed from it; an installed copy (or a copy of a work tree
  without its `.git`, as on a lent GPU machine) has none;
- `digest`: a SHA-256 of the files of the three packages (relative path and bytes, caches
  left out), the same for the same code wherever it runs, so a line made on a copy can be
  matched to a commit (`privbench --version` prints both).
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

# The paths whose changes can change a result (reports, tests and the README cannot).
CODE_PATHS = ("privbench", "attacks", "defenses", "pyproject.toml")
PACKAGES = ("privbench", "attacks", "defenses")  # what an installed copy has of them
NOT_A_CHECKOUT = "not a git checkout (an installed or copied tree: see the code digest)"


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


def digest(root: Path) -> str:
    """SHA-256 (hex) of every file under `root`'s packages, in path order: each file's path
    relative to `root` (POSIX), a NUL, its size and its bytes; `__pycache__` left out."""
    h = hashlib.sha256()
    files = sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        data = path.read_bytes()
        h.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        h.update(data)
    return h.hexdigest()


def _root() -> Path:
    return Path(__file__).resolve().parents[2]


@functools.lru_cache(maxsize=1)
def code_revision() -> str:
    """`revision` of the checkout this privbench package was imported from, read once per
    process: `runner.build` reads it before anything trains (and a bench before it measures),
    so a result written at the end of a long run names the code the process imported, not
    commits made meanwhile."""
    return revision(_root())


@functools.lru_cache(maxsize=1)
def code_digest() -> str:
    """`digest` of the packages this privbench was imported from, read once per process."""
    return digest(_root())


def code_provenance() -> dict[str, str]:
    """{"revision": `code_revision()`, "sha256": `code_digest()`}: a result's `code`."""
    return {"revision": code_revision(), "sha256": code_digest()}
