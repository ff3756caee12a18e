"""LiRA's variance by reference count: privbench against ML Privacy Meter on identical signals.

Trains one non-private SGP run (every node a victim of its curious neighbour, half of each
node's samples held out) and ONE set of `--refs` balanced online reference systems
(`privbench.audit.reference.train_reference_models`), and exports the logit-scaled confidence
of the target and of every reference model on each victim's candidates. The first K copies of
that set are themselves a balanced reference set (copies 2k and 2k + 1 are complementary
halves), so each K of `--counts` scores the same signals with its first K references:

* privbench: `attacks.lira` (online) at `variance` = "per_example", "global" and "auto" (the
  rule: global below `global_below` reference models, per example at or above it);
* ML Privacy Meter: its 2024 research code's LiRA scoring (`aggregate_signals(
  "loss_logit_rescaled", ...)`, `fix_variance` False and True, loaded from a checkout by
  `tests.cross_check.mlpm`, never copied into privbench).

Prints a markdown table (AUC, TPR at 0.1 % and 1 % FPR with their intervals, and the paired
AUC difference privbench - ML Privacy Meter). The signals are cached in `--signals` (an .npz),
so a second call only scores.

    git clone https://github.com/privacytrustlab/ml_privacy_meter /tmp/mlpm
    python -m tests.cross_check.lira_variance --mlpm /tmp/mlpm --dataset fashion-mnist \
        --signals /tmp/lira-fmnist.npz
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.audit.candidates import candidates, last_observed_round, observed_model
from privbench.audit.reference import train_reference_models
from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.metrics.roc import paired_auc_difference, roc_summary
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS
from privbench.threat.observation import observe, threat_for
from privbench.threat.signals import ModelMIAInput, Signals, model_signals
from tests.cross_check.mlpm import _load_aggregate_signals, mlpm_lira

# privbench's variance mode -> ML Privacy Meter's `fix_variance` of the same estimate
MODES = (("per_example", False), ("global", True))


def export(run: RunConfig, refs: int) -> dict[str, np.ndarray]:
    """Train the target run and `refs` balanced online reference systems; per victim v the
    arrays v{v}_labels (N,), v{v}_target (N,), v{v}_ref (refs, N) and v{v}_mask (refs, N)."""
    load_plugins()
    built = build(run, "sgp")
    train(built.trainer)
    ctx = built.ctx
    victims = list(range(ctx.n))
    obs = {v: observe(built, threat_for("neighbour", ctx.topology, v)) for v in victims}
    t_obs = max(last_observed_round(obs[v], v) for v in victims)
    targets = torch.stack([observed_model(obs[v], v, t_obs) for v in victims])  # (V, d)
    gen = torch.Generator().manual_seed(run.seed)
    models, masks = train_reference_models(obs[0], ctx.data, victims, refs, True, gen,
                                           ctx.device, t_obs)  # (refs, V, d), (refs, N_v)
    out: dict[str, np.ndarray] = {"observed_round": np.array(t_obs)}
    for i, v in enumerate(victims):
        x, y, labels = candidates(ctx.data, v)
        out[f"v{v}_labels"] = labels
        out[f"v{v}_target"] = model_signals(ctx.fm, targets[i:i + 1], x, y).logit[0]
        out[f"v{v}_ref"] = model_signals(ctx.fm, models[:, i], x, y).logit
        out[f"v{v}_mask"] = masks[i]
    return out


def _victims(sig: dict[str, np.ndarray]) -> list[str]:
    return sorted({k.split("_")[0] for k in sig if k.startswith("v")}, key=lambda s: int(s[1:]))


def _logit_input(target: np.ndarray, ref: np.ndarray, mask: np.ndarray) -> ModelMIAInput:
    """A LiRA input carrying only the logit-scaled confidences (what LiRA reads)."""
    def signals(logit: np.ndarray) -> Signals:
        return Signals(prob=np.zeros_like(logit), logit=logit, loss=np.zeros_like(logit))
    return ModelMIAInput(signals(target[None]), signals(ref), mask)


def scores(sig: dict[str, np.ndarray], k: int, aggregate: Any, global_below: int
           ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray, str]:
    """Every victim's candidates scored with the first `k` references: privbench per mode
    (and "auto"), ML Privacy Meter per `fix_variance`; the pooled labels; auto's choice."""
    cls = ATTACKS.get("lira")
    ours: dict[str, list[np.ndarray]] = {m: [] for m in ("per_example", "global", "auto")}
    theirs: dict[str, list[np.ndarray]] = {m: [] for m, _ in MODES}
    labels = []
    for v in _victims(sig):
        t, ref, mask = sig[f"{v}_target"], sig[f"{v}_ref"][:k], sig[f"{v}_mask"][:k]
        inp = _logit_input(t, ref, mask)
        for mode in ours:
            ours[mode].append(cls(cls.Config(variance=mode, global_below=global_below)).score(inp))
        for mode, fixed in MODES:
            theirs[mode].append(mlpm_lira(aggregate, sig[f"{v}_labels"], t, ref, mask, fixed))
        labels.append(sig[f"{v}_labels"])
    choice = cls(cls.Config(global_below=global_below)).variance_choice(k)["variance"]
    return ({m: np.concatenate(s) for m, s in ours.items()},
            {m: np.concatenate(s) for m, s in theirs.items()}, np.concatenate(labels), choice)


def _rates(s: np.ndarray, labels: np.ndarray) -> str:
    """AUC [CI] | TPR@0.1% [CI] | TPR@1% [CI] cells."""
    summ = roc_summary(s, labels)
    ci = summ["auc_ci"]
    cells = [f"{summ['auc']:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"]
    for f in ("0.1%", "1%"):
        tpr, lo_hi = summ[f"tpr_at_{f}_fpr"], summ[f"tpr_at_{f}_fpr_ci"]
        cells.append("unresolved" if tpr is None
                     else f"{tpr:.3f} [{lo_hi[0]:.3f}, {lo_hi[1]:.3f}]")
    return " | ".join(cells)


def table(sig: dict[str, np.ndarray], counts: list[int], aggregate: Any,
          global_below: int) -> list[str]:
    """The comparison table's markdown lines."""
    lines = ["| K | variance | privbench AUC [95 % CI] | TPR@0.1% | TPR@1% "
             "| ML Privacy Meter AUC [95 % CI] | TPR@0.1% | TPR@1% "
             "| privbench - MLPM AUC [paired 95 % CI] |", "|---|---|---|---|---|---|---|---|---|"]
    for k in counts:
        ours, theirs, labels, choice = scores(sig, k, aggregate, global_below)
        # (row name, privbench mode, ML Privacy Meter mode of the same estimate)
        rows = [(m, m, m) for m, _ in MODES] + [(f"auto ({choice})", "auto", choice)]
        for name, mode, other_mode in rows:
            mine, other = ours[mode], theirs[other_mode]
            d = paired_auc_difference(mine, other, labels)
            lines.append(f"| {k} | {name} | {_rates(mine, labels)} | {_rates(other, labels)} "
                         f"| {d['difference']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mlpm", type=Path, required=True, help="checkout of ml_privacy_meter")
    p.add_argument("--signals", type=Path, required=True, help=".npz cache of the signals")
    p.add_argument("--dataset", default="fashion-mnist")
    p.add_argument("--nodes", type=int, default=8)
    p.add_argument("--per-node", type=int, default=250, help="samples per node, half held out")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--refs", type=int, default=64, help="reference systems trained")
    p.add_argument("--counts", default="16,64", help="reference counts scored (first K)")
    p.add_argument("--global-below", type=int, default=64, help="LiRA's auto threshold")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    load_plugins()
    aggregate = _load_aggregate_signals(args.mlpm)
    t0 = time.time()
    if not args.signals.exists():
        run = RunConfig(dataset=args.dataset, nodes=args.nodes, max_per_node=args.per_node,
                        holdout=0.5, rounds=args.rounds, batch_size=16, lr=args.lr, model="mlp",
                        seed=args.seed, device="cpu", eval_every=args.rounds)
        np.savez_compressed(args.signals, **export(run, args.refs))
    sig = dict(np.load(args.signals))
    counts = [int(c) for c in args.counts.split(",")]
    if max(counts) > sig[f"{_victims(sig)[0]}_ref"].shape[0]:
        print(f"error: --counts asks for {max(counts)} references, {args.signals} holds "
              f"{sig[f'{_victims(sig)[0]}_ref'].shape[0]}", file=sys.stderr)
        return 2
    labels = np.concatenate([sig[f"{v}_labels"] for v in _victims(sig)])
    print(f"non-private SGP, {int(labels.sum())} members / {int((~labels).sum())} non-members, "
          f"observed round {int(sig['observed_round'])}, signals {args.signals}")
    print("\n".join(table(sig, counts, aggregate, args.global_below)))
    print(f"({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
