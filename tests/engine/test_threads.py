"""The thread and worker choice (`privbench.engine.threads`) on fake machines."""

from __future__ import annotations

import pytest

from privbench.engine.threads import (
    SMALL_WORK,
    WORKER_BYTES,
    Machine,
    _quota,
    choose_jobs,
    choose_threads,
)

GIB = 2 ** 30


def test_usable_cores_are_the_affinity_capped_by_the_cgroup_quota():
    assert Machine(8, None, 0.0).usable == 8
    assert Machine(8, 2.5, 0.0).usable == 2
    assert Machine(2, 4.0, 0.0).usable == 2
    assert Machine(4, 0.5, 0.0).usable == 1  # half a core of quota: still one thread


@pytest.mark.parametrize("load,idle", [(0.0, 4), (1.2, 2), (3.9, 1), (13.7, 1)])
def test_idle_cores_are_the_usable_ones_less_the_load(load, idle):
    assert Machine(4, None, load).idle == idle


def test_a_small_work_gets_one_thread_however_idle_the_machine():
    choice = choose_threads(Machine(16, None, 0.0), SMALL_WORK - 1)
    assert choice["threads"] == 1 and "small work" in choice["reason"]
    assert choose_threads(Machine(16, None, 0.0), None)["threads"] == 1


def test_a_large_work_gets_the_idle_usable_cores():
    assert choose_threads(Machine(2, None, 0.0), SMALL_WORK)["threads"] == 2
    assert choose_threads(Machine(8, 4.0, 0.0), 10 * SMALL_WORK)["threads"] == 4
    # two busy processes on a 2-core machine: one thread, not a pool waiting on taken cores
    busy = choose_threads(Machine(2, None, 2.0), 10 * SMALL_WORK)
    assert busy["threads"] == 1 and "load of 2.00" in busy["reason"]


def test_threads_asked_for_win_and_the_record_says_so():
    choice = choose_threads(Machine(2, 1.0, 9.0), 10 * SMALL_WORK, requested=3)
    assert choice == {"threads": 3, "reason": "--threads", "usable_cores": 1, "affinity": 2,
                      "cpu_quota": 1.0, "load_average": 9.0, "work": 10 * SMALL_WORK}


def test_jobs_default_to_the_usable_cores_bounded_by_cells_and_memory():
    assert choose_jobs(Machine(4, None, 0.0, 64 * GIB), cells=15, threads=1) == 4
    assert choose_jobs(Machine(4, None, 0.0, 64 * GIB), cells=15, threads=2) == 2
    assert choose_jobs(Machine(4, 2.0, 0.0, 64 * GIB), cells=15, threads=1) == 2
    assert choose_jobs(Machine(4, None, 0.0, 64 * GIB), cells=3, threads=1) == 3
    assert choose_jobs(Machine(4, None, 0.0, WORKER_BYTES * 3 // 2), cells=15, threads=1) == 1
    assert choose_jobs(Machine(4, None, 0.0, None), cells=15, threads=1) == 4


def test_jobs_asked_for_win_but_never_exceed_the_cells():
    assert choose_jobs(Machine(2, None, 0.0, 1), cells=15, threads=1, requested=6) == 6
    assert choose_jobs(Machine(2, None, 0.0), cells=2, threads=1, requested=6) == 2


@pytest.mark.parametrize("text,cores", [("max 100000\n", None), ("200000 100000\n", 2.0),
                                        ("150000 100000", 1.5), ("garbage", None)])
def test_cgroup_quota_is_read_as_cores(tmp_path, text, cores):
    (tmp_path / "cpu.max").write_text(text)
    assert _quota(tmp_path) == cores
    assert _quota(tmp_path / "absent") is None
