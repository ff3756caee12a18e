"""`privbench bench`: every section runs, prints its table and writes JSON (functional only: no
timing is asserted here, timings belong to reports/performance/README.md)."""

from __future__ import annotations

import json

import pytest
import torch

from privbench.cli import main
from privbench.commands import bench, bench_measure


@pytest.mark.parametrize("model", ["lenet", "cnn"])
def test_every_round_method_computes_the_same_update(model):
    # Honest baselines: same clipped sums, same mixing (noise off). 16 x 16 inputs: on digits'
    # 8 x 8 the 5 x 5 kernels exceed the later feature maps and Opacus 1.6's conv per-sample
    # gradients are wrong there (measured: up to 100% of the largest entry).
    from privbench.commands.bench_rounds import METHODS, RoundInputs
    from privbench.models import build_model

    fm = build_model(model, (1, 16, 16), 10)
    gen = torch.Generator().manual_seed(0)
    params = torch.stack([fm.init(torch.Generator().manual_seed(i)) for i in range(3)])
    x, y = torch.randn(3, 4, 1, 16, 16, generator=gen), torch.randint(0, 10, (3, 4), generator=gen)
    inp = RoundInputs(fm, params, x, y, torch.rand(3, 3, generator=gen), gen, clip=0.5, sigma=0.0)
    ref = METHODS["naive_loop"].fn(inp)
    for key, method in METHODS.items():
        if key in ("floor", "floor_vmap") or method.missing():
            continue
        assert torch.allclose(method.fn(inp), ref, atol=1e-6), key
    # the two non-private floors: the same step (the CPU loops over a conv model's nodes)
    assert torch.allclose(METHODS["floor"].fn(inp), METHODS["floor_vmap"].fn(inp), atol=1e-6)



def test_on_digits_only_opacus_expanded_weights_matches_the_reference():
    # What the engine benchmark's Opacus rows compute on its own data (digits, 8 x 8): the FedAvg
    # CNN's second conv (5 x 5 kernel, padding 2) sees a 4 x 4 map, where Opacus 1.6's hooks and
    # functorch per-sample gradients and its ghost clipping are wrong and ExpandedWeights and
    # privbench are right (relative error of the update against the naive per-sample loop).
    pytest.importorskip("opacus")
    from privbench.commands.bench_rounds import METHODS, RoundInputs

    fm, _, x, y, p, gen = bench_measure._engine_inputs("cnn", 3, 32, torch.device("cpu"))
    params = torch.stack([fm.init(torch.Generator().manual_seed(i)) for i in range(3)])
    inp = RoundInputs(fm, params, x, y, p, gen, sigma=0.0)
    ref = METHODS["naive_loop"].fn(inp)
    scale = (ref - p @ params).norm()

    def err(key: str) -> float:
        return float((METHODS[key].fn(inp) - ref).norm() / scale)

    assert err("privbench") < 1e-4 and err("opacus_ew") < 1e-4
    assert min(err(k) for k in ("opacus_hooks", "opacus_functorch", "opacus_ghost")) > 1e-2

def test_opacus_methods_say_when_opacus_is_absent(monkeypatch, capsys):
    import importlib.util

    from privbench.commands import bench_rounds

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "opacus" else real(name, *a))
    assert bench_rounds.opacus_missing() == "Opacus not installed"
    assert main(["bench", "engine", "--model", "mlp", "--nodes", "3", "--batch-size", "2",
                 "--repeats", "1", "--defense", "none", "--device", "cpu",
                 "--method", "privbench,opacus_ghost"]) == 0
    assert "skipped: Opacus not installed" in capsys.readouterr().out


def test_default_defenses_are_the_private_ones():
    from privbench.registry import DEFENSES

    names = bench_measure.resolve_defenses(None)
    assert names and all(DEFENSES.get(n).private for n in names)
    assert set(names) == {n for n in DEFENSES.names() if DEFENSES.get(n).private}
    assert bench_measure.resolve_defenses(["none"]) == []
    assert bench_measure.resolve_defenses(["dp_sgp,dp_sgp", "dpps"]) == ["dp_sgp", "dpps"]


def test_engine_section_times_every_method_and_real_rounds(tmp_path, capsys):
    out = tmp_path / "engine.json"
    code = main(["bench", "engine", "--model", "lenet", "--nodes", "4", "--batch-size", "2",
                 "--repeats", "2", "--defense", "dp_sgp", "--device", "cpu", "--threads", "1",
                 "--json", str(out)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "interleaved" in printed and "dp_sgp" in printed and "load average" in printed
    res = json.loads(out.read_text())
    assert res["section"] == "engine" and res["device"].startswith("cpu") and res["threads"] == 1
    assert res["host_malloc"] in printed  # the header's setting, the one the JSON records
    rows = {r["method"]: r for r in res["rows"]}
    expected = {"privbench", "func_per_node", "floor", "defense:dp_sgp"}
    assert expected <= set(rows) and "naive_loop" not in rows
    for key in expected:
        r = rows[key]
        assert (r["model"], r["nodes"], r["batch"]) == ("lenet", 4, 2)
        assert len(r["times_s"]) == 2 and r["min_s"] <= r["median_s"] <= r["max_s"]
        assert len(r["cpu_times_s"]) == 2 and r["cpu_median_s"] > 0  # CPU time of each call
    (ratios,) = res["ratios"]
    assert ratios["privbench_over_floor"] == rows["privbench"]["median_s"] / rows["floor"][
        "median_s"]
    assert ratios["privbench_over_floor_cpu"] == rows["privbench"]["cpu_median_s"] / rows[
        "floor"]["cpu_median_s"]
    ran = [k for k in bench_measure.OPACUS_METHODS if rows[k]["median_s"] is not None]
    fastest = min(ran, key=lambda k: rows[k]["median_s"]) if ran else None  # None: no Opacus
    assert ratios["fastest_opacus"] == fastest


def test_interleaving_rotates_the_order():
    calls = []
    fns = {k: (lambda k=k: calls.append(k)) for k in "abc"}
    times = bench_measure.time_interleaved(fns, 3, torch.device("cpu"))
    assert calls == list("abc") + list("abc") + list("bca") + list("cab")  # warm-up, 3 passes
    assert all(len(v) == 3 for v in times.values())


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
    row = bench_measure.bench_scale("lenet", 3, 2, 1, torch.device("cpu"), "dp_sgp",
                                    max_stack_gib=1e-9)
    assert row["defense_s"] is None and "GiB" in row["defense_skipped"]
    assert row["fused_s"] > 0 and row["stack_gib"] > 0


def test_out_degree_keeps_large_random_graphs_drawable():
    from privbench.topology import build_topology

    assert bench_measure.out_degree(4) == 2 and bench_measure.out_degree(256) == 8
    for n in (64, 256):
        build_topology("random_out", n, torch.Generator().manual_seed(0),
                       k=bench_measure.out_degree(n))


def test_bench_data_gives_every_node_a_full_batch():
    assert bench_measure.bench_dataset(4, 32) == "digits"
    name = bench_measure.bench_dataset(64, 32)
    assert name != "digits" and bench_measure.bench_dataset(64, 32) == name  # registered once
    _, params, x, y, _, _ = bench_measure._engine_inputs("mlp", 64, 32, torch.device("cpu"))
    assert y.shape == (64, 32) and x.shape[:2] == (64, 32) and params.shape[0] == 64


def test_audit_bench_calls_the_sweep_and_reads_its_timings():
    res = bench_measure.bench_audit(torch.device("cpu"), "quick", ["sgp"], ["mia_threshold"],
                            {"rounds": 2, "nodes": 3})
    t = res["timings"]
    assert res["seconds"] > 0 and set(t["cells"]) == {"sgp@none"}
    assert set(t["cells"]["sgp@none"]) == {"build_s", "train_s", "summary_s", "mia_threshold_s"}
    assert abs(t["sum_s"] - res["seconds"]) <= 0.05 * res["seconds"]


def test_audit_bench_times_the_audit_with_the_presets_tuned_values():
    # what `privbench attack` runs: the committed tuned values of the preset apply, each at
    # its own ε (DP-SGP has an entry at ε = 8 only: its ε = 1 cell runs the defaults)
    res = bench_measure.bench_audit(torch.device("cpu"), "quick", ["dp_sgp"], ["mia_threshold"])
    assert res["tuned_cells"] == ["dp_sgp@8"]


def test_audit_section_prints_the_breakdown(monkeypatch, tmp_path, capsys):
    real = bench_measure.bench_audit

    def small(device, preset, defenses, **kw):
        return real(device, preset, defenses, ["mia_threshold"], {"rounds": 2, "nodes": 3}, **kw)

    monkeypatch.setattr(bench, "bench_audit", small)
    out = tmp_path / "audit.json"
    assert main(["bench", "audit", "--defense", "sgp", "--device", "cpu", "--json",
                 str(out)]) == 0
    printed = capsys.readouterr().out
    assert "sum of parts" in printed and "sgp@none" in printed and "report" in printed
    assert "threads 1 (small work" in printed and "load average (1 min)" in printed
    data = json.loads(out.read_text())
    assert data["timings"]["cells"]["sgp@none"]["train_s"] >= 0
    assert data["timings"]["threads"]["threads"] == 1 and data["machine"]["affinity"] >= 1
    assert len(data["load_before"]) == len(data["load_after"]) == 3


def test_contention_section_interleaves_the_variants_beside_busy_processes(monkeypatch, capsys):
    from privbench.commands import bench_contention

    seen, started = [], []
    real_busy = bench_contention.busy_processes

    def busy(count):
        procs = real_busy(count, limit_s=60)
        started.extend(procs)
        return procs

    def fake_audit(defenses, threads):
        assert all(p.poll() is None for p in started)  # the busy processes run meanwhile
        seen.append(threads)
        return {None: 10.0, 1: 8.0, 2: 30.0}[threads], threads or 1

    monkeypatch.setattr(bench_contention, "busy_processes", busy)
    monkeypatch.setattr(bench_contention, "time_audit", fake_audit)
    res = bench_contention.bench_contention(["dp_sgp"], busy=2, repeats=3, cores=2)
    assert seen == [None, 1, 2, 1, 2, None, 2, None, 1]  # rotated, so each goes first once
    assert len(started) == 2 and all(p.poll() is not None for p in started)  # ended after
    assert res["default_over_one_thread"] == 10.0 / 8.0
    assert [r["threads"] for r in res["rows"]] == [[1, 1, 1], [1, 1, 1], [2, 2, 2]]


def test_bench_and_cli_import_no_circle():
    import ast
    from pathlib import Path

    import privbench

    root = Path(privbench.__file__).parent / "commands"
    for name in ("bench.py", "bench_measure.py", "bench_rounds.py"):
        tree = ast.parse((root / name).read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        mods |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert "privbench.cli" not in mods and not any(m and m.startswith("attacks") for m in mods)


def test_allocation_failures_become_skipped_rows(monkeypatch):
    import resource

    def boom(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1")

    monkeypatch.setattr(bench_measure, "_build_trainer", boom)
    before = resource.getrlimit(resource.RLIMIT_AS)
    rows = bench_measure.bench_engine("lenet", 3, 2, 1, torch.device("cpu"), ["dp_sgp"], ["floor"])
    assert rows[-1]["median_s"] is None and "memory" in rows[-1]["skipped"]
    assert main(["bench", "engine", "--model", "lenet", "--nodes", "3", "--batch-size", "2",
                 "--repeats", "1", "--method", "floor", "--defense", "dp_sgp", "--device", "cpu",
                 "--memory-limit-gib", "8"]) == 0
    assert resource.getrlimit(resource.RLIMIT_AS) == before  # the cap is lifted afterwards

    def other(*args, **kwargs):
        raise RuntimeError("shape mismatch")

    monkeypatch.setattr(bench_measure, "_build_trainer", other)
    with pytest.raises(RuntimeError, match="shape mismatch"):  # real bugs are never hidden
        bench_measure.bench_engine("lenet", 3, 2, 1, torch.device("cpu"), ["dp_sgp"], ["floor"])


@pytest.mark.parametrize("args,needle", [
    (["bench", "engine", "--defense", "nope"], "unknown defense 'nope'"),
    (["bench", "engine", "--repeats", "0"], "--repeats must be >= 1"),
    (["bench", "engine", "--method", "warp"], "unknown --method 'warp'"),
    (["bench", "engine", "--threads", "0"], "--threads must be >= 1"),
    (["bench", "warp"], "invalid choice"),
    (["bench", "engine", "--device", "tpu"], "device"),
])
def test_bench_bad_input_is_one_line_exit_2(args, needle, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("privbench: error: ") and needle in err


@pytest.mark.parametrize("model", ["lenet", "cnn", "mlp"])
def test_clipped_grad_sum_equals_clip_then_masked_sum(model):
    from privbench.engine.grads import clip_l2, clipped_grad_sum, masked_sum, per_sample_grads

    fm, params, x, y, _, _ = bench_measure._engine_inputs(model, 3, 5, torch.device("cpu"))
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


@pytest.mark.slow  # 20 s or more on 2 cores: .ci/run runs it in its slow step
def test_distributed_section_times_local_and_torchrun_ranks(tmp_path, capsys):
    out = tmp_path / "dist.json"
    assert main(["bench", "distributed", "--model", "mlp", "--nodes", "4", "--rounds", "2",
                 "--ranks", "2", "--threads", "2", "--device", "cpu", "--json", str(out)]) == 0
    res = json.loads(out.read_text())
    assert [(r["ranks"], r["nodes"]) for r in res["rows"]] == [(0, 4), (2, 4)]
    assert all(r["round_s"] > 0 for r in res["rows"]) and res["rows"][0]["speedup"] == 1.0
    assert "2 ranks" in capsys.readouterr().out


def test_bench_plans_times_both_composers_on_the_same_noise():
    from privbench.accounting.report import ApproximateAccountingWarning
    from privbench.commands.bench_measure import bench_plans

    # Dyn-D2P's plan carries its paper reading, the GDP CLT, which says it is no upper bound
    with pytest.warns(ApproximateAccountingWarning, match="central-limit"):
        rows = bench_plans(rounds=20, eps=(4.0,), plans=["dyn_d2p"], repeats=2,
                           composers=("privbench", "dp_accounting"))
    by = {r["composer"]: r for r in rows}
    assert set(by) == {"privbench", "dp_accounting"}
    assert by["privbench"]["noise"] == pytest.approx(by["dp_accounting"]["noise"], rel=1e-9)
    assert by["privbench"]["warm_s"] is not None and by["dp_accounting"]["warm_s"] is None
    for r in rows:
        assert r["repeats"] == 2 and r["cold_min_s"] <= r["cold_s"] <= r["cold_max_s"]
    assert main(["bench", "plans", "--method", "nope", "--rounds", "5"]) == 2


def test_round_budget_times_a_slower_call_once(monkeypatch, tmp_path):
    monkeypatch.setattr(bench_measure, "ROUND_BUDGET_S", bench_measure.ROUND_BUDGET_S)  # restored
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--model", "mlp", "--nodes", "3", "--batch-size", "2",
                 "--repeats", "3", "--defense", "none", "--device", "cpu", "--method",
                 "privbench,floor", "--round-budget-s", "1e-9", "--json", str(out)]) == 0
    assert bench_measure.ROUND_BUDGET_S == 1e-9  # the flag reaches the timing loop
    rows = json.loads(out.read_text())["rows"]
    assert [len(r["times_s"]) for r in rows] == [1, 1]
