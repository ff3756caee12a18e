"""Side by side: privbench's multi-step inversion vs breaching's, on identical local updates.

For every (E local steps, batch B) it draws K digits batches and K random `mlp` models
(`privbench.audit.inversion.synthetic_local_views`: E plain SGD steps of size `--local-lr` on
the same batch, released as the parameter difference, the multi-step user of Geiping et al.
2020, Sec. 5) and inverts each update with

* privbench: `attacks.geiping_multistep` (Inverting Gradients' signed Adam, box, step decay,
  global cosine, one restart) with the iteration budget and α_TV given (default 0, as
  breaching's run below); labels inferred from the update (never read from the truth);
* breaching (JonasGeiping/breaching, read from a checkout, never copied into privbench): its
  `invertinggradients` attack configuration (the same optimiser, cosine objective and budget)
  on a multi-step user's update (`shared_data` with `local_hyperparams`: lr, steps,
  data_per_step and the true labels, which breaching's multi-step user hands to the attacker,
  sorted as privbench's inference assigns them to its dummy slots), its
  total-variation prior switched off (breaching's TV is a 3-channel convolution and cannot take
  1-channel digits).

Both start from the same dummy images (privbench's first draw from its generator, handed to
breaching as `initial_data`), so a difference is the algorithms', not the initialisations' luck
(from a poor start either can stall in a local minimum at ~20-30 dB where another start reaches
~90 dB). Both reconstructions are graded by privbench's metrics (one-to-one matching, PSNR in
[0, 1]).

    git clone https://github.com/JonasGeiping/breaching /tmp/breaching   (or any checkout)
    pip install hydra-core
    PYTHONPATH=. python -m tests.cross_check.breaching_multistep --breaching /tmp/breaching

`tests/cross_check/test_breaching_multistep.py` runs it as an opt-in test ($PRIVBENCH_BREACHING
naming the checkout).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from privbench.audit.inversion import synthetic_local_views
from privbench.metrics import image as im
from privbench.models import FlatModel
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS
from privbench.threat.observation import GradientView

SHAPE = (1, 8, 8)


def load_breaching(repo: Path) -> Any:
    """The breaching package of a checkout (its folder put first on sys.path)."""
    sys.path.insert(0, str(repo))
    import breaching

    return breaching


def mean_psnr(rec: torch.Tensor, true: torch.Tensor) -> float:
    """Mean PSNR of the one-to-one matched pairs of one target (B, C, H, W) each."""
    r, c = im.match(rec, true)
    return sum(im.psnr(rec[i], true[j]) for i, j in zip(r, c, strict=True)) / len(r)


def privbench_run(views: list[GradientView], fm: FlatModel, iterations: int, tv: float,
                  seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """privbench's reconstructions (K, B, C, H, W) of every view, and the dummy images they
    started from (its generator's first draw, `attacks._inversion.init_dummy`)."""
    cls = ATTACKS.get("geiping_multistep")
    rec = cls(cls.Config(steps=iterations, tv=tv)).reconstruct(
        views, fm, SHAPE, 10, torch.device("cpu"), torch.Generator().manual_seed(seed))
    start = torch.randn((len(views), views[0].samples, *SHAPE),
                        generator=torch.Generator().manual_seed(seed))
    return rec.images, start


def breaching_run(breaching: Any, view: GradientView, fm: FlatModel, labels: torch.Tensor,
                  iterations: int, start: torch.Tensor) -> torch.Tensor:
    """breaching's reconstruction (B, C, H, W) of one view's update from dummy images `start`."""
    cfg = breaching.get_attack_config("invertinggradients", overrides=[
        f"optim.max_iterations={iterations}", f"optim.callback={iterations}",
        "regularization.total_variation.scale=0"])
    module = fm.module
    attacker = breaching.attacks.prepare_attack(module, torch.nn.CrossEntropyLoss(), cfg,
                                                {"dtype": torch.float, "device": "cpu"})
    model = fm.unflatten(view.params)
    delta = fm.unflatten(-view.gradient * view.local.scale)  # θ_E - θ_0, breaching's sign
    params = [model[s.name] for s in fm.specs]
    meta = SimpleNamespace(shape=SHAPE, modality="vision", classes=10)
    steps = len(view.local.steps)
    hyper = {"lr": view.local.lr, "steps": steps, "data_per_step": view.local.samples,
             "labels": [labels] * steps}
    shared = {"gradients": [delta[s.name] for s in fm.specs], "buffers": None,
              "metadata": {"num_data_points": view.local.samples, "labels": labels,
                           "local_hyperparams": hyper}}
    out, _ = attacker.reconstruct([{"parameters": params, "buffers": None, "metadata": meta}],
                                  [shared], {}, initial_data=start, dryrun=False)
    return out["data"].detach().clamp(0, 1)


def compare(breaching: Any, local_steps: list[int], batches: list[int], targets: int,
            iterations: int, local_lr: float, tv: float = 0.0) -> list[dict[str, Any]]:
    """One row per (E, B): mean PSNR of both sides over the K targets, and seconds."""
    load_plugins()
    rows = []
    for b in batches:
        for e in local_steps:
            views, fm, x, y = synthetic_local_views(targets, b, e, local_lr, seed=b * 100 + e)
            t0 = time.perf_counter()
            ours, start = privbench_run(views, fm, iterations, tv, seed=0)
            t1 = time.perf_counter()
            # labels sorted: the slot order privbench's label inference assigns (the dummy slots
            # are free, so the order carries nothing; with the same start it must match)
            theirs = [breaching_run(breaching, v, fm, y[k].sort().values, iterations, start[k])
                      for k, v in enumerate(views)]
            t2 = time.perf_counter()
            p = [mean_psnr(ours[k], x[k]) for k in range(targets)]
            q = [mean_psnr(theirs[k], x[k]) for k in range(targets)]
            rows.append({"local_steps": e, "batch": b, "privbench": sum(p) / targets,
                         "breaching": sum(q) / targets, "privbench_s": t1 - t0,
                         "breaching_s": t2 - t1, "per_target": list(zip(p, q, strict=True))})
            print(_line(rows[-1]), flush=True)
    return rows


def _line(r: dict[str, Any]) -> str:
    d = r["privbench"] - r["breaching"]
    return (f"| {r['local_steps']} | {r['batch']} | {r['privbench']:.2f} | {r['breaching']:.2f} "
            f"| {d:+.2f} | {r['privbench_s']:.0f} / {r['breaching_s']:.0f} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--breaching", required=True, type=Path, help="a breaching checkout")
    ap.add_argument("--local-steps", default="1,5,10")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--targets", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=1000)
    ap.add_argument("--local-lr", type=float, default=0.1)
    ap.add_argument("--tv", type=float, default=0.0, help="privbench's α_TV")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    print("| E | B | privbench PSNR dB | breaching PSNR dB | difference | seconds (ours / theirs) "
          "|")
    print("|---|---|---|---|---|---|")
    compare(load_breaching(a.breaching), [int(v) for v in a.local_steps.split(",")],
            [int(v) for v in a.batches.split(",")], a.targets, a.iterations, a.local_lr, a.tv)


if __name__ == "__main__":
    main()
