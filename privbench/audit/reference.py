"""Reference systems: the models a membership attacker trains itself, with known membership.

Reference models (the faithful choice). The victim's model is not a model
trained alone on its data: it is one node of a decentralized run, mixing every node's updates. A
reference model must be produced by the same process, so each reference model is one whole copy of
the victim's system: the same defense and hyper-parameters, the same (public) topology, the same
number of nodes with the same local dataset sizes, trained for the same rounds, and read off the
same way (`observed_model` of the victim's slot). In copy k each victim's slot trains on a random
subset of that victim's candidates of its member count (online: balanced membership, every
candidate IN in the same number of copies, K c / N of them up to one; with holdout = 0.5 that is
exactly half, as paired complementary halves: copy 2k + 1 trains on the candidates copy 2k left
out, as in Carlini et al. and Zarifzadeh et al.; in_mask records which; offline: population
samples only), and
every other slot on samples of the attacker's population: the dataset's training split minus the
victims' candidates. All K copies are trained
at once as ONE run of K * n nodes on a block-diagonal topology (K disjoint copies of the victim's
graph), so node state is stacked (K n, d) and nothing loops over reference models. Offline
attacks use only the OUT entries of the same reference set (as LiRA's reference code does).
RMIA's population z is the dataset's test split, which no model trains on.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench import progress
from privbench.audit.candidates import (
    _victim_views,
    candidates,
    observed_model,
    take,
)
from privbench.config import RunConfig, replace_checked
from privbench.data.datasets import NodeData, load_dataset
from privbench.engine.messages import MessageBus, RecordPolicy
from privbench.engine.trainer import Context
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError
from privbench.metrics.roc import roc_curve
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.seeding import Streams
from privbench.threat.observation import Observation, ThreatModel, observe
from privbench.topology import Topology

DEFAULT_REFERENCE_MODELS = 16


# ------------------------------------------------------------------------------ reference runs
def block_topology(topo: Topology, copies: int) -> Topology:
    """`copies` disjoint copies of `topo` (node k * n + i is node i of copy k)."""
    graphs = torch.stack([torch.block_diag(*([g] * copies)) for g in topo.graphs])
    return Topology(f"{topo.name}x{copies}", topo.n * copies, graphs, topo.undirected)


def _stack(xs: list[Tensor], ys: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Pad per-node sample lists to (m, M, ...) with counts."""
    m = max(len(y) for y in ys)
    x = torch.zeros(len(xs), m, *xs[0].shape[1:], dtype=xs[0].dtype)
    y = torch.zeros(len(ys), m, dtype=torch.int64)
    for i, (xi, yi) in enumerate(zip(xs, ys, strict=True)):
        x[i, :len(yi)], y[i, :len(yi)] = xi, yi
    return x, y, torch.tensor([len(v) for v in ys])


def reference_data(data: NodeData, victims: list[int], pool_x: Tensor, pool_y: Tensor,
                   cands: list[tuple[Tensor, Tensor]], copies: int, online: bool,
                   gen: torch.Generator, picks: list[np.ndarray] | None = None
                   ) -> tuple[NodeData, list[np.ndarray]]:
    """Node data of `copies` reference systems and, per victim, the (copies, S_v) IN mask of
    its scored candidates (`picks[i]`, indices into victim i's N_v candidates; None: all).

    Slot (k, v) of a victim trains on c_v samples (v's member count): online, m_v of its scored
    candidates (m_v = c_v S_v / N_v rounded, the share of IN candidates every candidate sees)
    and c_v - m_v of its unscored ones at random; offline, population samples. Every other slot
    (k, j) trains on counts[j] population samples, drawn without replacement within a copy.
    Online membership of the scored candidates is balanced: each copy takes the m_v that are IN
    in the fewest copies so far (random order among equals), so every scored candidate is IN in
    floor or ceil(copies * m_v / S_v) copies; when all are scored and N_v = 2 c_v, copies 2k
    and 2k + 1 are complementary halves and every candidate is IN in exactly half of an even
    number of copies.
    """
    n = data.n
    counts = data.counts.cpu().tolist()
    own = {v: i for i, v in enumerate(victims)} if online else {}
    need = sum(c for j, c in enumerate(counts) if j not in own)
    if need > len(pool_y):
        raise ConfigError(f"reference copies need {need} population samples per copy; the "
                          f"population holds {len(pool_y)} (lower nodes or max_per_node)")
    picks = picks or [np.arange(len(c[1])) for c in cands]
    masks = [np.zeros((copies, len(p)), dtype=bool) for p in picks]
    times_in = [torch.zeros(len(p)) for p in picks]  # per victim: copies each scored one is IN
    xs, ys = [], []
    for k in range(copies):  # builds data once per copy; training itself is one stacked run
        perm = torch.randperm(len(pool_y), generator=gen)
        pos = 0
        for j in range(n):
            if j in own:
                i = own[j]
                chosen = _victim_slot(cands[i], picks[i], counts[j], times_in[i], masks[i][k],
                                      gen)
                xs.append(cands[i][0][chosen])
                ys.append(cands[i][1][chosen])
            else:
                idx = perm[pos:pos + counts[j]]
                pos += counts[j]
                xs.append(pool_x[idx])
                ys.append(pool_y[idx])
    x, y, cnt = _stack(xs, ys)
    empty_i = torch.zeros(n * copies, 0, dtype=torch.int64)
    nd = NodeData(x, y, torch.full(y.shape, -1), cnt, x[:, :0], empty_i, empty_i,
                  torch.zeros(n * copies, dtype=torch.int64), data.x_test.cpu(),
                  data.y_test.cpu(), data.num_classes)
    return nd, masks


def _victim_slot(cand: tuple[Tensor, Tensor], scored: np.ndarray, count: int, times_in: Tensor,
                 mask_row: np.ndarray, gen: torch.Generator) -> Tensor:
    """The candidate indices one copy's victim slot trains on (`reference_data`): the scored
    candidates IN in the fewest copies so far (counted in `times_in`, marked in `mask_row`), and
    unscored ones to fill the slot to `count`."""
    total = len(cand[1])
    m = count if len(scored) == total else round(count * len(scored) / total)
    pick = torch.argsort(times_in + torch.rand(len(scored), generator=gen))[:m]
    times_in[pick] += 1
    mask_row[pick.numpy()] = True
    chosen = torch.from_numpy(scored)[pick]
    if m < count:  # the slot's other samples: candidates no score reads
        rest = torch.from_numpy(np.setdiff1d(np.arange(total), scored))
        chosen = torch.cat([chosen, rest[torch.randperm(len(rest), generator=gen)[:count - m]]])
    return chosen


def population(run: RunConfig, data: NodeData, victims: list[int]) -> tuple[Tensor, Tensor]:
    """The attacker's population: the dataset's training split minus the victims' candidates."""
    ds = load_dataset(run.dataset, run.data_root, run.download)
    used = torch.cat([torch.cat([data.idx[v], data.idx_out[v]]) for v in victims]).cpu()
    keep = torch.ones(len(ds.y_train), dtype=torch.bool)
    keep[used[used >= 0]] = False
    return ds.x_train[keep], ds.y_train[keep]


def _reference_system(obs: Observation, data: NodeData, victims: list[int], copies: int,
                      online: bool, gen: torch.Generator, device: torch.device,
                      policy: RecordPolicy, last_round: int,
                      picks: list[np.ndarray] | None = None) -> tuple[Any, list[np.ndarray]]:
    """Train `copies` reference systems as one stacked run up to `last_round`, recording
    `policy`; return the trainer (its ctx holds the log) and per victim the (copies, S_v) IN
    mask of its scored candidates (`picks`; None: all N_v)."""
    load_plugins()
    run = obs.run
    cls = DEFENSES.get(obs.defense)
    cands = [tuple(t.cpu() for t in candidates(data, v)[:2]) for v in victims]
    pool_x, pool_y = population(run, data, victims)
    ref_data, masks = reference_data(data, victims, pool_x, pool_y, cands, copies, online, gen,
                                     picks)
    ref_run = replace_checked(run, {"nodes": data.n * copies})
    seed = int(torch.randint(0, 2**62, (1,), generator=gen))
    topo = block_topology(obs.topology, copies)
    ctx = Context(ref_run, obs.fm, ref_data.to(device), topo, MessageBus(cls.kinds, policy),
                  GroundTruth(RecordPolicy.none()), Streams(seed, device), device)
    trainer = cls(obs.defense_cfg, ctx)
    progress.stage(last_round + 1, "reference round")
    for t in range(last_round + 1):
        trainer.round(t)
        progress.advance()
    return trainer, masks


def train_reference_models(obs: Observation, data: NodeData, victims: list[int], copies: int,
                           online: bool, gen: torch.Generator, device: torch.device,
                           observe_round: int | None = None,
                           picks: list[np.ndarray] | None = None
                           ) -> tuple[Tensor, list[np.ndarray]]:
    """Train `copies` reference systems as one stacked run; return their victims' observed models.

    Returns:
        (copies, V, d) reference models (read like the target: `observed_model` of each copy's
        victim slots) and per victim the (copies, S_v) IN mask of its scored candidates
        (`picks`, indices into its candidates; None: all of them).
    """
    n = data.n
    t_obs = obs.run.rounds - 1 if observe_round is None else observe_round
    slots = frozenset(k * n + v for k in range(copies) for v in victims)
    policy = RecordPolicy(rounds=frozenset({t_obs}), senders=slots)
    trainer, masks = _reference_system(obs, data, victims, copies, online, gen, device, policy,
                                       t_obs, picks)
    ctx = trainer.ctx
    ref_obs = dataclasses.replace(obs, log=ctx.bus.log, topology=ctx.topology,
                                  threat=ThreatModel("eavesdropper"), run=ctx.run)
    models = torch.stack([torch.stack([observed_model(ref_obs, k * n + v, t_obs)
                                       for v in victims]) for k in range(copies)])
    return models, masks  # (copies, V, d)


STATISTIC_COPIES = 2  # reference systems the message attack picks its statistic on


class StatisticChoice(TypedDict):
    """The message statistic reference systems chose (None: none usable), with each one's AUC."""

    statistic: str | None
    reference_auc: dict[str, float] | None


def choose_statistic(observations: dict[int, Observation], data: NodeData, atk: Any,
                     gen: torch.Generator, device: torch.device,
                     picks: list[np.ndarray] | None = None) -> StatisticChoice:
    """Pick the message statistic on reference systems, never on the target's labels.

    Two reference copies of the whole system (same defense, config, topology and sizes; each
    victim slot trains on complementary halves of its candidates, the others on population
    data) are trained and recorded like the target; each victim's slot is attacked through the
    same threat model (observers mapped into the copy) with every statistic, and the one with
    the higher mean AUC over (copy, victim) pairs (each scored against its own known
    membership; not pooled, since the statistics' scales differ between models) is graded on
    the target. Only the scored candidates (`picks`; None: all) are scored on the copies too.

    Returns:
        {"statistic": chosen, "reference_auc": {statistic: AUC}} (the label-free R^2 rule of
        `attacks.mia_message` decides, with "reference_auc" None, when no reference view exists
        or the reference run diverged).
    """
    victims = list(observations)
    obs = observations[victims[0]]
    n = data.n
    trainer, masks = _reference_system(obs, data, victims, STATISTIC_COPIES, True, gen, device,
                                       RecordPolicy(), obs.run.rounds - 1, picks)
    ctx = trainer.ctx
    system = SimpleNamespace(trainer=trainer, ctx=ctx, defense=obs.defense)  # observe's input
    defense = DEFENSES.get(obs.defense)
    attacked = []  # (victim index, copy, its views) of every usable (copy, victim) pair
    for k in range(STATISTIC_COPIES):
        for i, v in enumerate(victims):
            th = observations[v].threat
            ref_obs = observe(system, ThreatModel(th.kind, tuple(k * n + o for o in th.observers)))
            views, _ = _victim_views(defense, ref_obs, k * n + v,
                                     atk.attacked_rounds(obs.run.rounds))
            if views and masks[i][k].any() and not masks[i][k].all():
                attacked.append((i, k, views))
    progress.stage(sum(len(views) for *_, views in attacked), "reference view")
    by_stat: dict[str, list[float]] = {}
    for i, k, views in attacked:
        lab = masks[i][k]
        x, y, _ = take(candidates(data, victims[i]), picks[i] if picks else np.arange(len(lab)))
        scores, _ = atk.score_all(obs.fm, views, x.to(device), y.to(device))
        if not all(np.isfinite(sc).all() for sc in scores.values()):
            return {"statistic": None, "reference_auc": None}  # the reference run diverged
        for name, sc in scores.items():  # per (copy, victim): one model's power, unpooled
            if name in atk.statistics():  # the combined statistics the target always has
                by_stat.setdefault(name, []).append(roc_curve(sc, lab).auc)
    if not by_stat or not all(by_stat.values()):
        return {"statistic": None, "reference_auc": None}
    aucs = {name: float(np.mean(v)) for name, v in by_stat.items()}
    return {"statistic": max(aucs, key=lambda name: aucs[name]), "reference_auc": aucs}
