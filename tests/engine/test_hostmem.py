"""The CLI keeps freed host memory in the heap (privbench.engine.hostmem): a large tensor is
served without mmap, and `PRIVBENCH_HOST_MALLOC=system` leaves glibc's defaults (its mmap)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from privbench.cli import main

# In a fresh interpreter: apply the mode the environment asks for, then count glibc's mmapped
# blocks (mallinfo2().hblks) while a 256 MiB tensor is alive.
_PROBE = """
import ctypes, torch
from privbench.engine.hostmem import describe, keep_freed_memory
kept = keep_freed_memory()
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
before = libc.mallinfo2().hblks
big = torch.ones(64 * 2**20)  # 256 MiB, far above glibc's largest mmap threshold
print(kept, libc.mallinfo2().hblks - before, float(big.sum()), describe().replace(" ", "_"))
"""

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


def _probe(mode: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "PRIVBENCH_HOST_MALLOC"}
    if mode is not None:
        env["PRIVBENCH_HOST_MALLOC"] = mode
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, check=True, timeout=120)
    return out.stdout.split()


@glibc
def test_kept_by_default_the_large_block_comes_from_the_heap():
    assert _probe(None) == ["True", "0", str(float(64 * 2**20)), "glibc,_freed_memory_kept"]


@glibc
def test_system_mode_leaves_glibc_mapping_the_large_block():
    assert _probe("system") == ["False", "1", str(float(64 * 2**20)), "glibc_defaults"]


def test_a_bad_mode_is_a_one_line_error(monkeypatch, capsys):
    monkeypatch.setenv("PRIVBENCH_HOST_MALLOC", "jemalloc")
    assert main(["account", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "PRIVBENCH_HOST_MALLOC='jemalloc'" in err and "accepted: keep, system" in err
