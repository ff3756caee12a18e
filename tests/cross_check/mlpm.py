"""Side by side: privbench's RMIA and LiRA vs ML Privacy Meter's scoring, on the same signals.

Trains one non-private SGP run (digits, 6 nodes, 40 members + 40 held-out samples per node: 240
members / 240 non-members, every node a victim of its curious neighbour), two sets of K
reference systems (offline for RMIA, balanced online for LiRA), exports the signals (softmax
confidence of the true label for RMIA, logit-scaled confidence for LiRA) of every target and
reference model on the candidates and on the population (test split), then scores them with

* privbench: `attacks.rmia` (offline, a = 0.3, gamma = 1) and `attacks.lira` (online, per-example
  and global variance);
* ML Privacy Meter, read from a checkout of privacytrustlab/ml_privacy_meter (never copied into
  privbench): v2 `attacks.py::run_rmia` (imported from its file; numpy + scikit-learn only) at
  the same `a`, and the 2024 RMIA research code's LiRA scoring (`research/2024_rmia/main.py::
  aggregate_signals`, signal "loss_logit_rescaled", at the commit `RESEARCH_COMMIT` pins; only
  that function and `str2bool` are loaded from the file, since the module imports plotting and
  profiling packages the scoring does not use).

Prints AUC with 95 % bootstrap intervals and the paired interval of each difference.

    git clone https://github.com/privacytrustlab/ml_privacy_meter /tmp/mlpm   (or any checkout)
    python -m tests.cross_check.mlpm --mlpm /tmp/mlpm [--rounds 300] [--refs 16]

`tests/cross_check/test_mlpm.py` runs it as an opt-in test (with $PRIVBENCH_MLPM naming the
checkout).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from privbench.audit.candidates import candidates, last_observed_round, observed_model
from privbench.audit.reference import train_reference_models
from privbench.config import RunConfig
from privbench.engine.loop import train
from privbench.engine.runner import build
from privbench.metrics.roc import auc_ci, paired_auc_difference, roc_curve
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS
from privbench.threat.observation import observe, threat_for
from privbench.threat.signals import ModelMIAInput, model_signals

RESEARCH_COMMIT = "d32734161a3395211fe5f3cd461932290b1fafbe"


def _load_run_rmia(repo: Path) -> Any:
    """ML Privacy Meter v2's `run_rmia`, imported from its attacks.py file."""
    spec = importlib.util.spec_from_file_location("mlpm_attacks", repo / "attacks.py")
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.run_rmia


def _load_aggregate_signals(repo: Path) -> Any:
    """`aggregate_signals` of the 2024 RMIA research code, loaded from its file at the commit."""
    src = subprocess.run(["git", "-C", str(repo), "show",
                          f"{RESEARCH_COMMIT}:research/2024_rmia/main.py"],
                         check=True, capture_output=True, text=True).stdout
    tree = ast.parse(src)
    keep = [n for n in tree.body if isinstance(n, ast.FunctionDef)
            and n.name in ("aggregate_signals", "str2bool")]
    from scipy.stats import norm, trim_mean

    ns: dict[str, Any] = {"np": np, "torch": torch, "norm": norm, "trim_mean": trim_mean}
    exec(compile(ast.Module(keep, type_ignores=[]), "mlpm_main.py", "exec"), ns)
    return ns["aggregate_signals"]


def export(rounds: int, refs: int, seed: int) -> dict[str, Any]:
    """Train the target run and both reference sets; return per-victim signals."""
    load_plugins()
    run = RunConfig(dataset="digits", nodes=6, max_per_node=80, holdout=0.5, rounds=rounds,
                    batch_size=16, lr=0.2, model="mlp", seed=seed, device="cpu",
                    eval_every=rounds)
    built = build(run, "sgp")
    train(built.trainer)
    ctx, victims = built.ctx, list(range(6))
    obs = {v: observe(built, threat_for("neighbour", ctx.topology, v)) for v in victims}
    t_obs = max(last_observed_round(obs[v], v) for v in victims)
    targets = torch.stack([observed_model(obs[v], v, t_obs) for v in victims])  # (V, d)
    gen = torch.Generator().manual_seed(seed)
    sets = {}
    for name, online in (("offline", False), ("online", True)):
        models, masks = train_reference_models(obs[0], ctx.data, victims, refs, online, gen,
                                               ctx.device, t_obs)
        sets[name] = (models, masks)  # (K, V, d), per victim (K, N_v)
    fm, xt, yt = ctx.fm, ctx.data.x_test, ctx.data.y_test
    out = []
    for i, v in enumerate(victims):
        x, y, labels = candidates(ctx.data, v)
        item = {"labels": labels, "target": model_signals(fm, targets[i:i + 1], x, y),
                "pop_target": model_signals(fm, targets[i:i + 1], xt, yt)}
        for name, (models, masks) in sets.items():
            item[name] = (model_signals(fm, models[:, i], x, y),
                          model_signals(fm, models[:, i], xt, yt), masks[i])
        out.append(item)
    return {"victims": out, "observed_round": t_obs}


def privbench_scores(item: dict[str, Any]) -> dict[str, np.ndarray]:
    """privbench's RMIA (offline set) and LiRA (online set) on one victim's signals."""
    ref, pop_ref, _ = item["offline"]
    no_in = np.zeros(ref.prob.shape, dtype=bool)
    inp = ModelMIAInput(item["target"], ref, no_in, item["pop_target"], pop_ref)
    cls = ATTACKS.get("rmia")
    out = {"rmia": cls().score(inp),  # a = 0.3, gamma = 1 (the defaults)
           "rmia_gamma2": cls(cls.Config(gamma=2.0)).score(inp)}  # the former default
    ref_on, _, mask = item["online"]
    for key, variance in (("lira", "per_example"), ("lira_fixed", "global")):
        lira = ATTACKS.get("lira")(ATTACKS.get("lira").Config(online=True, variance=variance))
        out[key] = lira.score(ModelMIAInput(item["target"], ref_on, mask))
    return out


def mlpm_scores(item: dict[str, Any], run_rmia: Any, aggregate: Any) -> dict[str, np.ndarray]:
    """ML Privacy Meter's run_rmia (offline set) and research LiRA (online set), same signals."""
    ref, pop_ref, _ = item["offline"]
    k = ref.prob.shape[0]
    t, tz = item["target"].prob[0], item["pop_target"].prob[0]
    # columns: target, its "paired" model (run_rmia skips it; a copy), then the K references
    sig = np.column_stack([t, t, ref.prob.T])  # (N, K + 2)
    pop = np.column_stack([tz, tz, pop_ref.prob.T])  # (Z, K + 2)
    mem = np.zeros(sig.shape, dtype=bool)  # offline: every reference is OUT for every candidate
    mem[:, 0] = item["labels"]
    out = {"rmia": run_rmia(0, sig, pop, mem, k, 0.3)}
    ref_on, _, mask = item["online"]
    for key, fixed in (("lira", False), ("lira_fixed", True)):
        out[key] = mlpm_lira(aggregate, item["labels"], item["target"].logit[0], ref_on.logit,
                             mask, fixed)
    return out


def mlpm_lira(aggregate: Any, labels: np.ndarray, target: np.ndarray, ref: np.ndarray,
              mask: np.ndarray, fixed: bool) -> np.ndarray:
    """ML Privacy Meter's online LiRA scores (higher = member) of N candidates from the target's
    logit-scaled confidences (N,), the references' (K, N) and their IN mask (K, N)."""
    configs = {"audit": {"num_ref_models": ref.shape[0], "nb_augmentation": 1,
                         "augmentation": "none", "fix_variance": str(fixed), "offline": "False"}}
    n = len(labels)
    pred, _ = aggregate("loss_logit_rescaled", labels, torch.from_numpy(target[:, None]),
                        np.arange(n), mask, torch.from_numpy(ref[:, :, None]), np.arange(1),
                        configs)
    return -np.asarray(pred).ravel()  # its scores are "lower = member"


def _row(name: str, ours: np.ndarray, theirs: np.ndarray, labels: np.ndarray) -> str:
    a, b = roc_curve(ours, labels).auc, roc_curve(theirs, labels).auc
    ca, cb = auc_ci(ours, labels), auc_ci(theirs, labels)
    d = paired_auc_difference(ours, theirs, labels)
    return (f"| {name} | {a:.3f} [{ca[0]:.3f}, {ca[1]:.3f}] | {b:.3f} [{cb[0]:.3f}, {cb[1]:.3f}] "
            f"| {d['difference']:+.3f} [{d['ci'][0]:+.3f}, {d['ci'][1]:+.3f}] |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mlpm", type=Path, required=True, help="checkout of ml_privacy_meter")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--refs", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    run_rmia, aggregate = _load_run_rmia(args.mlpm), _load_aggregate_signals(args.mlpm)
    data = export(args.rounds, args.refs, args.seed)
    ours = [privbench_scores(it) for it in data["victims"]]
    theirs = [mlpm_scores(it, run_rmia, aggregate) for it in data["victims"]]
    labels = np.concatenate([it["labels"] for it in data["victims"]])
    print(f"non-private SGP, {int(labels.sum())} members / {int((~labels).sum())} non-members, "
          f"{args.refs} reference systems per set, observed round {data['observed_round']}")
    print("| attack | privbench AUC [95 % CI] | ML Privacy Meter AUC [95 % CI] "
          "| privbench - MLPM [paired 95 % CI] |")
    print("|---|---|---|---|")
    rows = (("RMIA offline, a = 0.3 (privbench gamma = 1 vs MLPM run_rmia)", "rmia", "rmia"),
            ("RMIA offline, a = 0.3 (privbench gamma = 2, its former default, vs run_rmia)",
             "rmia_gamma2", "rmia"),
            ("LiRA online, per-example variance", "lira", "lira"),
            ("LiRA online, fixed variance", "lira_fixed", "lira_fixed"))
    for name, ours_key, theirs_key in rows:
        print(_row(name, np.concatenate([o[ours_key] for o in ours]),
                   np.concatenate([t[theirs_key] for t in theirs]), labels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
