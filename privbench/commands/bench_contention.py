"""`privbench bench contention`: the audit's wall time under the default thread choice against
one thread (and against one thread per core, torch's own default), on a machine that other busy
processes share.

`--busy K` busy processes (pure Python loops, each ending by itself after `BUSY_LIMIT_S` and
ended by this section when it is done) hold cores while `privbench attack --defense D --eps 1
--jobs 1` runs as a fresh process once per variant and repeat, the variants interleaved in a
rotated order so a drift of the machine's load reaches each alike. `--jobs 1`: one process per
audit, so only the thread count differs. Reports per variant the median and every wall time,
the threads each run chose (its timings.json), the load average before and after, and the ratio
default / one thread (the thread policy's aim: at most 1.3).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TypedDict

BUSY_LIMIT_S = 3600  # a busy process ends by itself after this long, whatever happens here
CONTENTION_DEFENSES = ("dp_sgp", "dyn_d2p")


class ContentionRow(TypedDict):
    variant: str
    threads_flag: int | None  # --threads given (None: the default choice)
    threads: list[int]  # what each run computed with
    seconds: list[float]
    median_s: float


class ContentionPayload(TypedDict):
    rows: list[ContentionRow]
    busy: int
    defenses: list[str]
    repeats: int
    load_before: list[float]
    load_after: list[float]
    default_over_one_thread: float


def busy_processes(count: int, limit_s: float = BUSY_LIMIT_S) -> list[subprocess.Popen[bytes]]:
    """`count` processes spinning in a Python loop, each stopping by itself after `limit_s`."""
    loop = f"import time\nend = time.monotonic() + {limit_s}\nwhile time.monotonic() < end: pass"
    return [subprocess.Popen([sys.executable, "-c", loop]) for _ in range(count)]


def time_audit(defenses: list[str], threads: int | None) -> tuple[float, int]:
    """Wall seconds of `privbench attack` (a fresh process) and the threads it computed with."""
    flag = [] if threads is None else ["--threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the policy decides
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "privbench", "attack", "--defense",
                               ",".join(defenses), "--eps", "1", "--jobs", "1", "--quiet",
                               "--out", str(out), *flag], env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            from privbench.errors import PrivbenchError

            tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
            raise PrivbenchError(f"bench contention: the audit failed ({tail[0]})")
        chosen = json.loads((out / "timings.json").read_text())["threads"]["threads"]
    return seconds, int(chosen)


def bench_contention(defenses: list[str], busy: int, repeats: int, cores: int
                     ) -> ContentionPayload:
    """Interleaved wall times of the audit per thread variant under `busy` busy processes."""
    variants: list[tuple[str, int | None]] = [("default choice", None), ("one thread", 1),
                                              (f"{cores} threads (one per core)", cores)]
    times: dict[str, list[tuple[float, int]]] = {name: [] for name, _ in variants}
    load_before = list(os.getloadavg())
    procs = busy_processes(busy)
    try:
        for r in range(repeats):
            for name, threads in variants[r % 3:] + variants[:r % 3]:
                times[name].append(time_audit(defenses, threads))
                print(f"repeat {r + 1}, {name}: {times[name][-1][0]:.1f} s "
                      f"({times[name][-1][1]} thread(s), load average {os.getloadavg()[0]:.2f})",
                      file=sys.stderr, flush=True)
    finally:
        for p in procs:
            p.kill()
            p.wait()
    rows: list[ContentionRow] = [
        {"variant": name, "threads_flag": flag, "threads": [t for _, t in times[name]],
         "seconds": [s for s, _ in times[name]],
         "median_s": statistics.median(s for s, _ in times[name])} for name, flag in variants]
    return {"rows": rows, "busy": busy, "defenses": defenses, "repeats": repeats,
            "load_before": load_before, "load_after": list(os.getloadavg()),
            "default_over_one_thread": rows[0]["median_s"] / rows[1]["median_s"]}
