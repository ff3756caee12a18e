"""The `-n auto` worker count of tests/conftest.py: CPUs under a cgroup quota, capped by memory."""

from __future__ import annotations

import os

import pytest

from tests.conftest import WORKER_MEMORY, auto_workers, available_memory, usable_cpus

MASK = len(os.sched_getaffinity(0))


@pytest.mark.parametrize(("cpu_max", "expected"), [
    ("max 100000\n", MASK),                   # no quota: the affinity mask
    ("50000 100000\n", 1),                    # half a CPU still runs one worker
    (f"{100000 * MASK + 1} 100000\n", MASK),  # a quota above the mask: the mask
    ("150000 100000\n", min(MASK, 2)),        # 1.5 CPUs: two workers share them
    ("garbage\n", MASK),                      # an unknown format: the mask
])
def test_cgroup_quota_caps_the_affinity_mask(tmp_path, cpu_max, expected):
    path = tmp_path / "cpu.max"
    path.write_text(cpu_max)
    assert usable_cpus(path) == expected


def test_missing_cgroup_file_leaves_the_mask(tmp_path):
    assert usable_cpus(tmp_path / "absent") == MASK


def test_meminfo_is_read_in_bytes(tmp_path):
    path = tmp_path / "meminfo"
    path.write_text("MemTotal:       24000000 kB\nMemAvailable:   8388608 kB\n")
    assert available_memory(path) == 8 * 2**30
    assert available_memory(tmp_path / "absent") is None


@pytest.mark.parametrize(("cpus", "memory", "expected"), [
    (2, 100 * WORKER_MEMORY, 2),    # memory to spare: one per CPU
    (16, 3 * WORKER_MEMORY, 3),     # memory for three: three
    (4, WORKER_MEMORY // 2, 1),     # not even one worker's worth: still one
    (8, None, 8),                   # memory unknown: the CPUs decide
])
def test_workers_are_cpus_capped_by_memory(cpus, memory, expected):
    assert auto_workers(cpus, memory) == expected
