"""Keep freed host memory inside the process (glibc's malloc): part of the CPU engine's speed.

On a CPU, torch takes each step's large temporaries from malloc. A vmapped convolution over n
nodes unfolds its input into one buffer (the FedAvg CNN's second layer, 10 nodes x 64 images:
10 x 64 x 196 positions x 800 taps x 4 B = 400 MB), and glibc serves every block above its mmap
threshold (32 MiB at most) with a fresh `mmap`, unmapped again at `free`: each step then pays one
page fault per 4 KiB it touches. Measured on this project's 2-core machine (one thread, beside
another training process, two passes of five steps each way), a vmapped 10-node CNN gradient
step of batch 64 took 1.11-1.20 s user + 0.42-0.48 s kernel time with glibc's defaults and
1.13-1.22 s user + at most 0.06 s kernel with memory kept (these two measurements and the run
below set the same through glibc's MALLOC_MMAP_MAX_ / MALLOC_TRIM_THRESHOLD_ environment
variables): about a quarter less CPU time. The arithmetic is the same (torch aligns every
tensor to 64 bytes whatever malloc returns): the DeFL-VP reduced D-PSGD+RR run (eta_sign 0.003,
epsilon 4, seed 0) wrote the same line in every field but its seconds both ways (493 s kept,
510 s with glibc's defaults), and every pinned privacy plan
(`tests/accounting/test_plans_pinned.py`, numpy's side) composed to the same 392 numbers.

`keep_freed_memory` serves every block from the heap (`M_MMAP_MAX` = 0) and keeps up to 2 GiB of
free memory at its top (`M_TRIM_THRESHOLD`), so the next step reuses the pages already faulted in;
the process holds its peak memory until it exits, as torch's GPU caching allocator does. The
CLI applies it to every command (and `privbench reproduce --jobs` to its worker processes);
`PRIVBENCH_HOST_MALLOC=system` keeps glibc's defaults. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import platform

from privbench.errors import ConfigError

ENV = "PRIVBENCH_HOST_MALLOC"
MODES = ("keep", "system")  # the first is the default
# mallopt parameter numbers (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4
_KEEP_TOP = 2**31 - 1  # bytes of free heap top kept: the largest value the int parameter takes
_kept = False  # whether keep_freed_memory applied to this process


def host_malloc_mode() -> str:
    """The mode `ENV` asks for (`keep` when unset).

    Raises:
        ConfigError: for a value not in `MODES`.
    """
    mode = os.environ.get(ENV, MODES[0]).strip().lower() or MODES[0]
    if mode not in MODES:
        raise ConfigError(f"{ENV}={os.environ[ENV]!r} is not a host allocator mode; accepted: "
                          f"{', '.join(MODES)} (default {MODES[0]})")
    return mode


def keep_freed_memory() -> bool:
    """Apply `ENV`'s mode to this process; True when glibc now keeps freed memory.

    Raises:
        ConfigError: for a bad `ENV` value (checked on every platform).
    """
    global _kept
    mode = host_malloc_mode()
    if mode != "keep" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(None)  # the running process's own symbols, glibc's mallopt among them
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _kept = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_TOP))
    return _kept


def describe() -> str:
    """How this process allocates host memory, for a benchmark's header and JSON."""
    if _kept:
        return "glibc, freed memory kept"
    return "glibc defaults" if platform.libc_ver()[0] == "glibc" else "the platform's malloc"

