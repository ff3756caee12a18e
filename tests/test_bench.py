"""`privbench bench`: every section runs, prints its table and writes JSON (functional only: no
timing is asserted here, timings belong to the README "Performance" section)."""

from __future__ import annotations

import json

import pytest
import torch

from privbench import bench
from privbench.cli import main


def test_loop_and_vectorized_rounds_compute_the_same_update():
    # The loop baseline must be honest: same clipped gradients, same mixing (noise off).
    fm, params, x, y, p, gen = bench._engine_inputs("lenet", 4, 3, torch.device("cpu"))
    params = params + 0.05 * torch.randn(params.shape, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        vec = bench._round_vectorized(fm, params, x, y, p, gen, clip=0.5, sigma=0.0)
        fused = bench._round_fused(fm, params, x, y, p, gen, clip=0.5, sigma=0.0)
    loop = bench._round_loop(fm, params, x, y, p, gen, clip=0.5, sigma=0.0)
    assert vec.shape == loop.shape == params.shape
    assert torch.allclose(vec, loop, atol=1e-5) and torch.allclose(fused, loop, atol=1e-5)


def test_default_defenses_are_the_private_ones():
    from privbench.registry import DEFENSES

    names = bench.resolve_defenses(None)
    assert names and all(DEFENSES.get(n).private for n in names)
    assert set(names) == {n for n in DEFENSES.names() if DEFENSES.get(n).private}
    assert bench.resolve_defenses(["none"]) == []
    assert bench.resolve_defenses(["dp_sgp,dp_sgp", "dpps"]) == ["dp_sgp", "dpps"]


def test_engine_section_times_generic_and_real_rounds(tmp_path, capsys):
    out = tmp_path / "engine.json"
    code = main(["bench", "engine", "--model", "lenet", "--nodes", "4", "--batch-size", "2",
                 "--repeats", "1", "--defense", "dp_sgp", "--device", "cpu", "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "generic vmap" in printed and "dp_sgp" in printed and "cpu" in printed
    res = json.loads(out.read_text())
    assert res["section"] == "engine" and res["device"].startswith("cpu")
    (row,) = res["rows"]
    assert (row["model"], row["nodes"], row["batch"]) == ("lenet", 4, 2)
    for key in ("vectorized_s", "fused_s", "loop_s", "floor_s", "speedup_vs_loop",
                "fused_speedup_vs_loop", "slowdown_vs_floor"):
        assert row[key] > 0
    assert [d["defense"] for d in row["defenses"]] == ["dp_sgp"]
    assert row["defenses"][0]["round_s"] > 0


def test_engine_no_loop_and_no_defense(tmp_path):
    row = bench.bench_engine("lenet", 4, 2, 1, torch.device("cpu"), [], loop=False)
    assert row["loop_s"] is None and row["speedup_vs_loop"] is None and row["defenses"] == []


def test_attacks_section(tmp_path, capsys):
    out = tmp_path / "attacks.json"
    assert main(["bench", "attacks", "--k", "1", "--k", "2", "--steps", "1", "--device", "cpu",
                 "--repeats", "2", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [r["k"] for r in res["rows"]] == [1, 2]
    assert all(r["batched_s"] > 0 and r["sequential_s"] > 0 and r["repeats"] == 2
               for r in res["rows"])
    assert "seq/batched" in capsys.readouterr().out


def test_scale_section_writes_plot(tmp_path):
    out, png = tmp_path / "scale.json", tmp_path / "scale.png"
    assert main(["bench", "scale", "--model", "lenet", "--nodes", "4", "--nodes", "3",
                 "--batch-size", "2", "--repeats", "1", "--defense", "dp_sgp", "--device", "cpu",
                 "--json", str(out), "--plot", str(png)]) == 0
    res = json.loads(out.read_text())
    assert [r["nodes"] for r in res["rows"]] == [3, 4]  # sorted
    assert all(r["defense"] == "dp_sgp" and r["defense_s"] > 0 for r in res["rows"])
    assert all(r["fused_s"] > 0 and r["defense_skipped"] is None for r in res["rows"])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scale_skips_a_defense_whose_stack_would_not_fit():
    row = bench.bench_scale("lenet", 3, 2, 1, torch.device("cpu"), "dp_sgp", max_stack_gib=1e-9)
    assert row["defense_s"] is None and "GiB" in row["defense_skipped"]
    assert row["fused_s"] > 0 and row["stack_gib"] > 0


def test_out_degree_keeps_large_random_graphs_drawable():
    from privbench.topology import build_topology

    assert bench.out_degree(4) == 2 and bench.out_degree(256) == 8
    for n in (64, 256):
        build_topology("random_out", n, torch.Generator().manual_seed(0), k=bench.out_degree(n))


def test_bench_data_gives_every_node_a_full_batch():
    assert bench.bench_dataset(4, 32) == "digits"
    name = bench.bench_dataset(64, 32)
    assert name != "digits" and bench.bench_dataset(64, 32) == name  # registered once
    _, params, x, y, _, _ = bench._engine_inputs("mlp", 64, 32, torch.device("cpu"))
    assert y.shape == (64, 32) and x.shape[:2] == (64, 32) and params.shape[0] == 64


def test_audit_section_runs_the_sweep_in_process(tmp_path, capsys):
    out = tmp_path / "audit.json"
    assert main(["bench", "audit", "--device", "cpu", "--audit-arg=--defense=sgp",
                 "--audit-arg=--attack=mia_threshold", "--audit-arg=--rounds=2",
                 "--audit-arg=--nodes=3", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["seconds"] > 0 and "sgp@none" in res["cells"]
    assert "--defense=sgp" in res["argv"]


def test_allocation_failures_become_skipped_rows(monkeypatch):
    import resource

    def boom(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1")

    monkeypatch.setattr(bench, "time_defense_round", boom)
    before = resource.getrlimit(resource.RLIMIT_AS)
    row = bench.bench_engine("lenet", 3, 2, 1, torch.device("cpu"), ["dp_sgp"], loop=False)
    assert row["defenses"][0]["round_s"] is None and "memory" in row["defenses"][0]["skipped"]
    assert main(["bench", "engine", "--model", "lenet", "--nodes", "3", "--batch-size", "2",
                 "--repeats", "1", "--no-loop", "--defense", "dp_sgp", "--device", "cpu",
                 "--memory-limit-gib", "8"]) == 0
    assert resource.getrlimit(resource.RLIMIT_AS) == before  # the cap is lifted afterwards

    def other(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(bench, "time_defense_round", other)
    with pytest.raises(RuntimeError, match="shape mismatch"):  # real bugs are never hidden
        bench.bench_engine("lenet", 3, 2, 1, torch.device("cpu"), ["dp_sgp"], loop=False)


@pytest.mark.parametrize("args,needle", [
    (["bench", "engine", "--defense", "nope"], "unknown defense 'nope'"),
    (["bench", "engine", "--repeats", "0"], "--repeats must be >= 1"),
    (["bench", "warp"], "invalid choice"),
    (["bench", "engine", "--device", "tpu"], "device"),
])
def test_bench_bad_input_is_one_line_exit_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("privbench: error: ") and needle in err


@pytest.mark.parametrize("model", ["lenet", "cnn", "mlp"])
def test_clipped_grad_sum_equals_clip_then_masked_sum(model):
    from privbench.engine import clip_l2, clipped_grad_sum, masked_sum, per_sample_grads

    fm, params, x, y, _, _ = bench._engine_inputs(model, 3, 5, torch.device("cpu"))
    gen = torch.Generator().manual_seed(1)
    params = params + 0.05 * torch.randn(params.shape, generator=gen)
    mask = torch.rand(y.shape, generator=gen) < 0.6
    bound = torch.rand(y.shape, generator=gen) + 0.1  # per-sample bounds broadcast like clip_l2
    g = per_sample_grads(fm, params, x, y)  # (3, 5, d)
    for b in (0.3, bound):
        clipped, norms = clip_l2(g, b)
        ref = masked_sum(clipped, mask)
        for max_bytes in (2**30, None, 1):  # one chunk, default, one row per chunk
            got, got_norms = clipped_grad_sum(fm, params, x, y, mask, b, max_bytes=max_bytes)
            assert (got - ref).abs().max() <= 1e-5
            # norms are O(1..10): float32 summation order differs, so compare relatively
            assert torch.allclose(got_norms, norms, rtol=1e-5, atol=1e-6)


def test_distributed_section_times_local_and_torchrun_ranks(tmp_path, capsys):
    out = tmp_path / "dist.json"
    assert main(["bench", "distributed", "--model", "mlp", "--nodes", "4", "--rounds", "2",
                 "--ranks", "2", "--threads", "2", "--device", "cpu", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [(r["ranks"], r["nodes"]) for r in res["rows"]] == [(0, 4), (2, 4)]
    assert all(r["round_s"] > 0 for r in res["rows"]) and res["rows"][0]["speedup"] == 1.0
    assert "2 ranks" in capsys.readouterr().out
