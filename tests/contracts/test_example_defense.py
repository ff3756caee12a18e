"""The README's minimal example defense, copied out of the README, meets the contract.

The block after `<!-- example-defense -->` in README.md is written to `my_defense.py` and loaded as
a plugin (`$PRIVBENCH_PLUGINS`) in subprocesses, so this process's registry stays as it is. It
must pass the contract and sampling-contract tests that every registered defense passes, and its
2-rank distributed run must equal the single-process one (models, message log, privacy).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from privbench.engine.messages import MessageLog

ROOT = Path(__file__).resolve().parents[2]
NAME = "my_dp_gossip"
TRAIN = ["--nodes", "6", "--rounds", "4", "--record", "all", "--device", "cpu", "--eps", "2",
         "--batch-size", "8", "--set", "eval_every=2", "--quiet"]


def readme_example() -> str:
    """The Python block right after the `<!-- example-defense -->` marker of README.md."""
    text = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- example-defense -->\n```python\n(.*?)```", text, re.S)
    assert found, "README.md lost its example-defense block"
    return found.group(1)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("plugin")
    (folder / "my_defense.py").write_text(readme_example())
    return dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{folder}",
                PRIVBENCH_PLUGINS="my_defense", OMP_NUM_THREADS="1")


@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_the_example_passes_the_contract_tests(plugin_env):
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "tests/contracts/test_defense_contract.py", "tests/contracts/test_sampling_contract.py",
         "-k", NAME],
        cwd=ROOT, env=plugin_env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert passed and int(passed.group(1)) >= 3, proc.stdout[-1000:]  # it was collected


@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_the_example_runs_distributed_as_in_one_process(plugin_env, tmp_path):
    single, dist = tmp_path / "single", tmp_path / "dist"
    one = subprocess.run([sys.executable, "-m", "privbench", "train", "--defense", NAME,
                          "--out", str(single / NAME), *TRAIN], cwd=ROOT, env=plugin_env,
                         capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                          "--nproc-per-node=2", str(ROOT / "tests/distributed/rank_worker.py"),
                          str(dist), NAME, "--", *TRAIN], cwd=ROOT, env=plugin_env,
                         capture_output=True, text=True, timeout=400)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = single / NAME, dist / NAME
    ma, mb = (load_file(p / "models.safetensors")["models"] for p in (a, b))
    assert torch.allclose(ma.double(), mb.double(), rtol=1e-5, atol=1e-6)
    la, lb = MessageLog.load(a), MessageLog.load(b)
    assert la.records.keys() == lb.records.keys() and la.records
    for key, rec in la.records.items():
        assert torch.allclose(rec.payload.double(), lb.records[key].payload.double(),
                              rtol=1e-5, atol=1e-6), key
    ja, jb = (json.loads((p / "results.json").read_text()) for p in (a, b))
    assert ja["privacy"] == jb["privacy"] and ja["privacy"]
    assert all(r["epsilon"] <= 2.0 for r in ja["privacy"] if r["mode"] == "calibrated")


def test_an_unimportable_plugin_is_a_one_line_error(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PRIVBENCH_PLUGINS="no_such_module_xyz")
    proc = subprocess.run([sys.executable, "-m", "privbench", "train", "--rounds", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "PRIVBENCH_PLUGINS" in lines[0] and "no_such_module_xyz" in lines[0]


def test_the_example_is_accounted_through_its_contract(plugin_env):
    # `privbench account` asks the plugin's declared plan: no code beyond the contract
    proc = subprocess.run(
        [sys.executable, "-m", "privbench", "account", "--defense", NAME, "--eps", "1",
         "--delta", "1e-5", "--rounds", "20", "--sample-rate", "0.05", "--json"],
        cwd=ROOT, env=plugin_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (plan,) = json.loads(proc.stdout)
    assert plan["defense"] == NAME and plan["calibrated_with"] == "calibrated"
    paper, calibrated = plan["reports"]
    assert paper["accountant"] == "rdp" and 0.98 <= calibrated["epsilon"] <= 1.0
    assert plan["noise"]["sigma"] > 0


def test_the_example_declares_the_clip_bound_the_canary_audit_reads(plugin_env):
    code = ("from privbench.plugins import load_plugins; from privbench.registry import DEFENSES\n"
            "load_plugins(); cls = DEFENSES.get('my_dp_gossip')\n"
            "print(cls.clip_bound(cls.Config(clip=0.5)).value)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=plugin_env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "0.5", proc.stderr[-2000:]
