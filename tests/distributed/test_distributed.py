"""The distributed backend equals the single-process engine.

One torchrun launch per world size (2 and 4 gloo processes on loopback) trains every registered
defense through `privbench train --backend distributed` (tests/distributed/rank_worker.py). Each
output must equal the same run in one process: the trained models, the merged message log, the
ground truth, the results (accuracy, per-node privacy), and an attack on the merged log
(`privbench attack --messages`) must give the same metrics. Nodes = 6, so 4 ranks hold 2, 2, 1
and 1 nodes (uneven blocks). Also: a rank that dies stops the others and nothing is written; a
world size larger than the node count is a one-line error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from privbench.cli import main
from privbench.commands.common import EXIT_DIVERGED
from privbench.engine.messages import MessageLog
from privbench.engine.truth import GroundTruth
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.results.fingerprint import LOCK_NAME

load_plugins()
ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("rank_worker.py")
TRAIN = ["--nodes", "6", "--rounds", "4", "--record", "all", "--device", "cpu", "--eps", "2",
         "--batch-size", "8", "--set", "eval_every=2"]
NAMES = DEFENSES.names()
# PartPSP calibrated to a real epsilon diverges (reports/reproduce/dpps/README.md), so no attack
# would run on it: it is also trained with the paper's noise knob b = 1 and the oracle sensitivity
# (the reproduction's setting), which stays finite and exercises the oracle path.
# DeFL-VP's default G2 message is a local epoch's pseudo-gradient, which iDLG does not invert
# ("not applicable"): it is also trained with G1 (one mini-batch gradient per round).
EXTRA = {"partpsp-b1": "partpsp@defense.b=1@defense.sensitivity_mode=oracle",
         "defl_vp-g1": "defl_vp@defense.gradient=G1"}
# The five papers' defenses and the non-private baselines: their merged logs are attacked.
ATTACKED = ("sgp", "d_psgd", "adp_vrsgp", "defl_vp-g1", "dyn_d2p", "partpsp-b1", "dpdl")


def _env() -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("PRIVBENCH_TEST_DIE", None)
    return env


def _rank_env(rank: int, world: int, port: int, **extra: str) -> dict[str, str]:
    """The environment torchrun would give `rank` (to launch ranks by hand)."""
    return dict(_env(), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **extra)


def _torchrun(nproc: int, out: Path, names: list[str], extra: list[str] | None = None,
              env: dict[str, str] | None = None,
              timeout: float = 400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={nproc}", str(WORKER), str(out), *names, "--", *TRAIN,
           *(extra or [])]
    return subprocess.run(cmd, cwd=ROOT, env=env or _env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """Every defense trained in this process (the reference).

    With one thread, as each rank has (OMP_NUM_THREADS=1): a different thread count changes the
    order of float reductions, which the diverging runs (DPPS/PartPSP reach 1e17) amplify past
    any tolerance; the comparison is about the process layout, not the thread count.
    """
    out = tmp_path_factory.mktemp("single")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in NAMES:  # DPPS / PartPSP diverge here (exit code 1, results written)
            assert main(["train", "--defense", name, "--quiet", "--out", str(out / name),
                         *TRAIN]) in (0, EXIT_DIVERGED)
        for folder, spec in EXTRA.items():
            name, *sets = spec.split("@")
            assert main(["train", "--defense", name, "--quiet", "--out", str(out / folder),
                         *TRAIN, *[a for kv in sets for a in ("--set", kv)]]) in (0, EXIT_DIVERGED)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)],
                ids=["2-ranks", "4-ranks"])
def ranks(request, tmp_path_factory) -> tuple[int, Path]:
    """Every defense trained by one torchrun launch of 2 or 4 gloo processes (4: a slow test,
    its launch alone takes 40 s of the default run's budget)."""
    out = tmp_path_factory.mktemp(f"ranks{request.param}")
    proc = _torchrun(request.param, out, [*NAMES, *(f"{k}={v}" for k, v in EXTRA.items())])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return request.param, out


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.allclose(a.double(), b.double(), rtol=1e-5, atol=1e-6,
                                                 equal_nan=True)


@pytest.mark.parametrize("name", [*NAMES, *EXTRA])
def test_models_log_truth_and_results_equal_single_process(name, single, ranks):
    _, dist_root = ranks
    a, b = single / name, dist_root / name
    assert _close(load_file(a / "models.safetensors")["models"],
                  load_file(b / "models.safetensors")["models"])
    la, lb = MessageLog.load(a), MessageLog.load(b)
    assert la.records.keys() == lb.records.keys() and la.records
    for key, ra in la.records.items():
        rb = lb.records[key]
        assert torch.equal(ra.edges, rb.edges), key
        assert torch.equal(ra.senders, rb.senders), key
        assert ra.per_edge == rb.per_edge and (ra.scale is None) == (rb.scale is None), key
        assert ra.scale is None or _close(ra.scale, rb.scale), key
        assert _close(ra.payload, rb.payload), key
    ta, tb = GroundTruth.load(a), GroundTruth.load(b)
    assert ta.batches.keys() == tb.batches.keys()
    for t, (slots, mask) in ta.batches.items():
        assert torch.equal(mask, tb.batches[t][1]) and torch.equal(slots[mask],
                                                                    tb.batches[t][0][mask])
    ja, jb = (json.loads((p / "results.json").read_text()) for p in (a, b))
    assert ja["privacy"] == jb["privacy"]
    assert ja["diverged_round"] == jb["diverged_round"]
    acc_a, acc_b = (torch.tensor(j["accuracy"]["per_node"]) for j in (ja, jb))
    assert _close(acc_a, acc_b)
    assert [h["round"] for h in ja["history"]] == [h["round"] for h in jb["history"]]


def _attack(folder: Path, out: Path, cfg: Path) -> dict:
    assert main(["attack", "--messages", str(folder), "--attack", "idlg,mia_message",
                 "--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    cell = json.loads((out / "results.json").read_text())["cells"][0]
    return cell["attacks"]


@pytest.mark.parametrize("name", ATTACKED)
def test_attack_on_merged_log_gives_the_same_metrics(name, single, ranks, tmp_path):
    _, dist_root = ranks
    cfg = tmp_path / "a.toml"
    cfg.write_text("[audit.attack_config.idlg]\nadam_steps = 20\n")
    want = _attack(single / name, tmp_path / "a", cfg)
    got = _attack(dist_root / name, tmp_path / "b", cfg)
    assert want.keys() == got.keys()
    compared = 0
    for attack, res in want.items():
        assert got[attack]["status"] == res["status"], (attack, got[attack])
        for key, value in res.get("metrics", {}).items():
            if isinstance(value, float):
                assert got[attack]["metrics"][key] == pytest.approx(value, rel=1e-4, abs=1e-5,
                                                                    nan_ok=True), (attack, key)
                compared += 1
    assert compared, f"{name}: no attack produced metrics to compare"


def test_merging_the_ranks_views_gives_the_single_process_log(single):
    """What each rank logs (messages its nodes send or receive) merges back into the full log."""
    for name in ("sgp", "dpdl", "dpps"):
        full = MessageLog.load(single / name)
        for blocks in ([[0, 1, 2], [3, 4, 5]], [[0, 1], [2, 3], [4], [5]]):
            merged = MessageLog.merge(full.observed_by(b) for b in blocks)
            assert merged.records.keys() == full.records.keys()
            for key, rec in full.records.items():
                got = merged.records[key]
                assert torch.equal(got.edges, rec.edges) and torch.equal(got.senders, rec.senders)
                assert torch.equal(got.payload.nan_to_num(), rec.payload.nan_to_num())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_rank_that_dies_stops_the_others_and_nothing_is_written(tmp_path):
    """Rank 1 SIGKILLs itself after round 1; rank 0 must stop with a one-line error, exit 2."""
    port, out = _free_port(), tmp_path / "out"
    procs = []
    for rank in (0, 1):
        env = _rank_env(rank, 2, port, PRIVBENCH_TEST_DIE="1:1")
        procs.append(subprocess.Popen(
            [sys.executable, str(WORKER), str(out), "sgp", "--", *TRAIN, "--rounds", "50",
             "--dist-timeout", "60"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    err0 = procs[0].communicate(timeout=120)[1]
    procs[1].communicate(timeout=120)
    assert procs[1].returncode == -signal.SIGKILL
    assert procs[0].returncode == 2, err0
    lines = [ln for ln in err0.splitlines() if ln.startswith("privbench: error:")]
    assert len(lines) == 1 and "another rank stopped" in lines[0], err0
    assert "Traceback" not in err0
    written = [p for p in tmp_path.rglob("*") if p.is_file() and p.name != LOCK_NAME]
    assert written == [], written


def test_torchrun_rank_death_stops_the_launch(tmp_path):
    """Under torchrun the agent stops the surviving ranks: non-zero exit, no output files."""
    env = dict(_env(), PRIVBENCH_TEST_DIE="1:1")
    proc = _torchrun(2, tmp_path / "out", ["sgp"], ["--rounds", "50"], env=env, timeout=120)
    assert proc.returncode != 0
    assert [p for p in tmp_path.rglob("*") if p.is_file() and p.name != LOCK_NAME] == []


def test_more_ranks_than_nodes_is_a_one_line_error(tmp_path):
    env = _rank_env(0, 4, _free_port())
    proc = subprocess.run([sys.executable, "-m", "privbench", "train", "--backend",
                           "distributed", "--nodes", "3", "--rounds", "2", "--out",
                           str(tmp_path / "o"), "--quiet"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("privbench: error: 4 processes but only 3 nodes: every rank "
                                   "needs at least one node (use --nodes >= 4 or "
                                   "--nproc-per-node <= 3)")


def test_distributed_backend_outside_torchrun_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    assert main(["train", "--backend", "distributed", "--nodes", "4", "--rounds", "2",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "must be launched by torchrun" in err


def test_cli_train_under_torchrun_equals_one_process(tmp_path, single):
    """The documented command line: torchrun -m privbench train --backend distributed."""
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "privbench", "train", "--backend", "distributed", "--defense", "dp_sgp",
           "--out", str(out), "--quiet", *TRAIN]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2 ranks" in proc.stdout and proc.stdout.count("average-model test accuracy") == 1
    assert _close(load_file(out / "models.safetensors")["models"],
                  load_file(single / "dp_sgp" / "models.safetensors")["models"])


def test_two_torchrun_agents_rendezvous_like_two_machines(tmp_path, single):
    """The multi-machine launch (--nnodes 2, c10d rendezvous), both agents on localhost."""
    out, port = tmp_path / "run", _free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
           "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=pbtest",
           "-m", "privbench", "train", "--backend", "distributed", "--defense", "dpdl",
           "--out", str(out), "--quiet", *TRAIN]
    agents = [subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [a.communicate(timeout=300) for a in agents]
    assert [a.returncode for a in agents] == [0, 0], outputs[0][1][-2000:]
    assert sum("2 ranks" in o for o, _ in outputs) == 1  # global rank 0 reports and writes
    assert _close(load_file(out / "models.safetensors")["models"],
                  load_file(single / "dpdl" / "models.safetensors")["models"])


@pytest.mark.parametrize(("n", "world", "sizes"), [(6, 4, [2, 2, 1, 1]), (6, 2, [3, 3]),
                                                   (5, 5, [1] * 5), (7, 1, [7])])
def test_partition_gives_contiguous_blocks_differing_by_at_most_one(n, world, sizes):
    from privbench.engine.comm import partition

    owner = partition(n, world)
    assert torch.bincount(owner, minlength=world).tolist() == sizes
    assert torch.equal(owner, owner.sort().values)  # contiguous blocks


def test_a_rank_holds_only_its_nodes_data(digits):
    from privbench.data.datasets import split_nodes

    data = split_nodes(digits, 4, seed=0)
    mine = torch.tensor([False, True, True, False])
    held = data.restrict(mine)
    assert held.x[~mine].abs().sum() == 0 and held.x_out[~mine].abs().sum() == 0
    assert torch.equal(held.x[mine], data.x[mine]) and torch.equal(held.counts, data.counts)
    gen_a, gen_b = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    slots, mask = held.poisson(0.2, gen_a)
    slots_all, mask_all = data.poisson(0.2, gen_b)
    assert torch.equal(slots, slots_all)  # the whole network's draw, whatever is held
    assert torch.equal(mask, mask_all & mine[:, None])


def test_an_unwritable_output_stops_every_rank_before_training(tmp_path):
    port = _free_port()
    blocker = tmp_path / "file"
    blocker.write_text("x")  # --out below a regular file cannot be created
    procs = [subprocess.Popen(
        [sys.executable, "-m", "privbench", "train", "--backend", "distributed", "--nodes", "4",
         "--rounds", "2", "--out", str(blocker / "out"), "--quiet"], cwd=ROOT,
        env=_rank_env(r, 2, port), stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    errs = [p.communicate(timeout=120)[1] for p in procs]
    assert [p.returncode for p in procs] == [2, 2], errs
    assert errs[0].startswith("privbench: error: cannot create output folder")
    assert errs[1].strip() == (f"privbench: error: rank 0 cannot write the output folder "
                               f"{blocker / 'out'}")
