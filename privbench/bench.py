"""`privbench bench`: speed of the vectorized engine against the way peers' code runs.

Section `engine` times one DP round (per-sample gradients, L2 clipping, Gaussian noise, push-sum
mixing) three ways, on the same samples:

* vectorized: all nodes and samples in one `vmap(vmap(grad))` call (privbench's engine);
* loop: a Python loop over nodes and, inside, over samples, each a forward/backward of an
  `nn.Module` (how per-node reference implementations run DP-SGD);
* floor: non-private batched gradients of the same samples (no per-sample work), mixing included.

Times are medians over repeats after a warm-up; ratios are loop / vectorized and vectorized / floor.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from privbench.data import load_digits, split_nodes
from privbench.device import device_description, resolve_device
from privbench.engine import batch_grads, clip_l2, masked_sum, per_sample_grads
from privbench.models import FlatModel, build_model
from privbench.results import write_json
from privbench.topology import build_topology


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    fn()  # warm-up (allocations, kernel selection)
    _sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _round_vectorized(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, p: Tensor,
                      gen: torch.Generator, clip: float = 1.0, sigma: float = 1.0) -> Tensor:
    g = per_sample_grads(fm, params, x, y)  # (n, B, d)
    g, _ = clip_l2(g, clip)
    mask = torch.ones(y.shape, dtype=torch.bool, device=y.device)
    noisy = masked_sum(g, mask) + sigma * clip * torch.randn(params.shape, generator=gen,
                                                             device=params.device)
    return p @ (params - 0.1 * noisy / y.shape[1])


def _round_loop(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, p: Tensor,
                gen: torch.Generator, clip: float = 1.0, sigma: float = 1.0) -> Tensor:
    module = fm.module
    out = []
    for i in range(params.shape[0]):  # the per-node loop of reference code
        torch.nn.utils.vector_to_parameters(params[i], module.parameters())
        total = torch.zeros(fm.d, device=params.device)
        for b in range(x.shape[1]):  # the per-sample loop of DP-SGD without vmap
            module.zero_grad(set_to_none=True)
            F.cross_entropy(module(x[i, b:b + 1]), y[i, b:b + 1]).backward()
            g = torch.cat([q.grad.reshape(-1) for q in module.parameters()])
            total += g * min(1.0, clip / (float(g.norm()) + 1e-12))
        total += sigma * clip * torch.randn(fm.d, generator=gen, device=params.device)
        out.append(params[i] - 0.1 * total / x.shape[1])
    return p @ torch.stack(out)


def _round_floor(fm: FlatModel, params: Tensor, x: Tensor, y: Tensor, p: Tensor,
                 gen: torch.Generator) -> Tensor:
    return p @ (params - 0.1 * batch_grads(fm, params, x, y))


def bench_engine(model: str, n: int, batch: int, repeats: int,
                 device: torch.device) -> dict[str, Any]:
    """Time one DP round three ways for `n` nodes of `model` on digits-shaped data."""
    ds = load_digits()
    data = split_nodes(ds, n, seed=0).to(device)
    fm = build_model(model, ds.input_shape, ds.num_classes).to(device)
    gen = torch.Generator(device=device).manual_seed(0)
    slots, _ = data.sample(batch, gen)
    x, y = data.gather(slots)
    params = fm.init(torch.Generator().manual_seed(0)).to(device).expand(n, -1).clone()
    p = build_topology("random_out", n, torch.Generator().manual_seed(0)).mixing(0).to(device)
    with torch.no_grad():
        t_vec = _median_time(lambda: _round_vectorized(fm, params, x, y, p, gen), repeats, device)
        t_floor = _median_time(lambda: _round_floor(fm, params, x, y, p, gen), repeats, device)
    t_loop = _median_time(lambda: _round_loop(fm, params, x, y, p, gen), max(1, repeats // 2),
                          device)
    return {"model": model, "nodes": n, "batch": batch, "d": fm.d,
            "vectorized_s": t_vec, "loop_s": t_loop, "floor_s": t_floor,
            "speedup_vs_loop": t_loop / t_vec, "slowdown_vs_floor": t_vec / t_floor}


def run_bench(args: argparse.Namespace) -> int:
    """Run the chosen section, print a table, optionally write JSON."""
    device = resolve_device(args.device)
    rows = [bench_engine(m, n, args.batch_size, args.repeats, device)
            for m in (args.model or ["lenet"]) for n in (args.nodes or [16])]
    print(f"engine: one DP round (per-sample grads + clip + noise + push-sum), "
          f"device {device_description(device)}, torch {torch.__version__}")
    print(f"{'model':8} {'n':>4} {'B':>4} {'vectorized':>11} {'loop':>9} {'floor':>9} "
          f"{'loop/vec':>9} {'vec/floor':>9}")
    for r in rows:
        print(f"{r['model']:8} {r['nodes']:>4} {r['batch']:>4} {r['vectorized_s'] * 1e3:>9.1f}ms "
              f"{r['loop_s'] * 1e3:>7.0f}ms {r['floor_s'] * 1e3:>7.1f}ms "
              f"{r['speedup_vs_loop']:>8.1f}x {r['slowdown_vs_floor']:>8.1f}x")
    if args.json_out:
        write_json(args.json_out, {"section": "engine", "device": device_description(device),
                                   "torch": torch.__version__, "rows": rows})
    return 0
