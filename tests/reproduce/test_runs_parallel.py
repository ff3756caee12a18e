"""`privbench.reproduce.runs` with jobs side by side: the lines of a sequential run, a failed
job named, and a stopped reproduction (SIGTERM, Ctrl-C) stopping its workers too."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from privbench.cli import main
from privbench.errors import PrivbenchError
from privbench.reproduce import runs as runs_mod
from privbench.reproduce.runs import RUNS_FILE, read_runs, reproduce
from tests.reproduce.grids import (
    tiny,
)


@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_jobs_side_by_side_write_the_lines_of_a_sequential_run(tmp_path, capsys):
    repro, scale = tiny()
    one = reproduce(repro, scale, (0,), tmp_path / "one")
    two = reproduce(repro, scale, (0,), tmp_path / "two", workers=2)
    assert [r["fingerprint"] for r in two] == [r["fingerprint"] for r in one]
    assert [r["accuracy"] for r in two] == pytest.approx([r["accuracy"] for r in one], abs=1e-6)
    lines = read_runs(tmp_path / "two" / RUNS_FILE)  # one line per job, whatever the order
    assert sorted((r["method"], r["eps"] or 0.0) for r in lines) == \
        sorted((r["method"], r["eps"] or 0.0) for r in one)
    assert main(["reproduce", "dyn_d2p", "--jobs", "0", "--out", str(tmp_path / "x")]) == 2
    assert "--jobs 0" in capsys.readouterr().err


def test_a_failed_job_among_parallel_ones_is_named_and_the_others_kept(tmp_path):
    from privbench.reproduce import Method

    repro, scale = tiny()
    broken = Method("Broken", "const_d2p", (("no_such_field", 1.0),), grid=(1.0,))
    repro = dataclasses.replace(repro, methods=(*repro.methods[:2], broken), orderings=(),
                                paper=repro.paper[:2])
    with pytest.raises(PrivbenchError, match=r"1 of 4 runs failed .*Broken epsilon=1 seed 0"):
        reproduce(repro, scale, (0,), tmp_path, workers=2)
    kept = read_runs(tmp_path / RUNS_FILE)
    assert sorted((r["method"], r["eps"] or 0.0) for r in kept) == \
        [("Const-D2P", 1.0), ("Const-D2P", 3.0), ("Non-private", 0.0)]


_PARALLEL_CLI = """
import pickle, signal, sys
# as started from a terminal: a shell's background job (`cmd &`, CI launched so) starts with
# SIGINT ignored, and Python then installs no KeyboardInterrupt handler
signal.signal(signal.SIGINT, signal.default_int_handler)
from privbench.cli import main
from privbench.reproduce import REPRODUCTIONS, load
load()
with open(sys.argv[1], "rb") as f:
    REPRODUCTIONS.add("slow_test", pickle.load(f))
sys.exit(main(["reproduce", "slow_test", "--jobs", "2", "--quiet", "--out", sys.argv[2]]))
"""


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    """A process's state letter and parent pid from /proc (None once it has gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[0], int(fields[1])


def _alive(pid: int) -> bool:
    found = _state_and_parent(pid)
    return found is not None and found[0] != "Z"


def _spawned_workers(parent: int) -> list[int]:
    """Live (not zombie) processes whose parent is `parent` and that run multiprocessing's
    spawn_main (the pool's workers; the resource tracker runs another entry point)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        pid = int(proc.name)
        state = _state_and_parent(pid)
        if state is None or state[0] == "Z" or state[1] != parent:
            continue
        try:
            if b"spawn_main" in (proc / "cmdline").read_bytes():
                found.append(pid)
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads a mask from /proc")
def test_a_ctrl_c_while_the_workers_are_spawned_is_held_back_not_lost():
    """The pool spawned its workers with SIGINT ignored (so that they inherit it): a Ctrl-C in
    that window was lost, and the parent trained on for hours. Now it is held back and raised
    when the window ends, and what is spawned inside still never receives it."""
    import signal
    import subprocess
    import sys
    import threading

    from privbench.reproduce.runs import _held_back

    reached = False
    status = "print(open('/proc/self/status').read())"
    # Python's own Ctrl-C handler, as in a terminal (a background job starts ignoring SIGINT)
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt), _held_back(signal.SIGINT):
            signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
            child = subprocess.run([sys.executable, "-c", status], capture_output=True,
                                   text=True, check=True)
            reached = True
    finally:  # None: the previous handler was not set from Python
        signal.signal(signal.SIGINT, signal.SIG_DFL if old is None else old)
    assert reached
    blocked = next(ln for ln in child.stdout.splitlines() if ln.startswith("SigBlk:"))
    assert int(blocked.split()[1], 16) >> (signal.SIGINT - 1) & 1


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("how", ["sigterm", "ctrl-c"])
def test_a_stopped_parallel_reproduction_stops_its_workers_too(tmp_path, how):
    """`kill PID` (SIGTERM, what a scheduler or `pkill` sends) used to end the parent alone: its
    workers went on training for hours with no one to keep their lines. Ctrl-C (SIGINT to the
    whole process group) ends with one line too, not a traceback per worker."""
    import pickle
    import signal
    import subprocess
    import sys
    import time

    repro, _ = tiny(rounds=200_000)  # each run far longer than the test waits
    (tmp_path / "repro.pkl").write_bytes(pickle.dumps(repro))
    err_file = tmp_path / "stderr"  # a file, not a pipe: orphaned workers would hold a pipe open
    workers: list[int] = []
    with err_file.open("w") as err:
        proc = subprocess.Popen([sys.executable, "-c", _PARALLEL_CLI, str(tmp_path / "repro.pkl"),
                                 str(tmp_path / "out")], stderr=err, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            workers = _spawned_workers(proc.pid)
        assert len(workers) == 2, f"the two workers never started (exit {proc.poll()})"
        time.sleep(1.0)  # past their start-up: they are importing or training
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            code, head = 128 + signal.SIGTERM, "privbench: stopped (SIGTERM); "
        else:  # a terminal's Ctrl-C: the foreground process group
            os.killpg(proc.pid, signal.SIGINT)
            code, head = 130, "privbench: interrupted; "
        assert proc.wait(timeout=60) == code, err_file.read_text()
        kept = f"kept: 0 runs in {tmp_path / 'out' / RUNS_FILE}; `privbench reproduce slow_test"
        lines = err_file.read_text().strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(head + kept), err_file.read_text()
        deadline = time.monotonic() + 20
        while any(map(_alive, workers)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(map(_alive, workers)), "a worker outlived its stopped reproduction"
        assert not (tmp_path / "out" / RUNS_FILE).exists() or \
            read_runs(tmp_path / "out" / RUNS_FILE) == []
    finally:  # a failing run must not leave training processes behind
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
        proc.wait()


def test_stopped_workers_leave_no_pool_thread_to_race_interpreter_exit():
    """`_stop_workers` returns once the pool's manager thread has ended: interpreter exit wakes
    every live manager through a pipe the manager closes as it ends, unguarded, and that race
    printed an OSError traceback after the one-line message about once in 50 stops."""
    import multiprocessing
    import time
    from concurrent.futures import ProcessPoolExecutor

    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(time.sleep, 600) for _ in range(3)]
    procs = list(pool._processes.values())
    manager = pool._executor_manager_thread
    runs_mod._stop_workers(pool)
    assert not manager.is_alive()
    assert not any(p.is_alive() for p in procs)
    assert all(f.done() for f in futures)  # cancelled, or failed as the pool broke
