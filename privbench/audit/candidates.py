"""Membership candidates and the model an attacker observes.

Candidates: the victim's members `NodeData.x[v, :counts[v]]` (label 1) and its held-out samples
`NodeData.x_out[v, :counts_out[v]]` (label 0). The target model *as the attacker observes it*
(`observed_model`): from the recorded messages, the push-sum `model` payload over the `weight`
payload of the victim's last recorded round (the de-biased model z = x^{t+1/2} / w the victim
broadcast), or the gossip `model` payload.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench.data.datasets import NodeData
from privbench.errors import ConfigError, NotApplicable
from privbench.threat.observation import Observation

# ----------------------------------------------------------------------------------- observation
MODEL_KINDS = ("model", "shared")


def observed_model(obs: Observation, victim: int, round: int | None = None,
                   model_kind: str | None = None, weight_kind: str = "weight") -> Tensor:
    """The victim's model as the attacker sees it in messages.

    Push-sum (a `weight` record exists for the round): the victim's model payload divided by its
    `weight` payload (x_i^{t+1/2} / w_i^t, the de-biased model it broadcast). Gossip: the model
    payload itself. The model payload is the `model` kind, else `shared` (DPPS, whose `shared`
    numerator is the whole model when every layer is shared). `round=None` takes the last round
    in which the victim's model is observed.

    Raises:
        NotApplicable: when no model message of the victim is observed (in that round), or the
            message carries only part of the model (PartPSP's shared layers).
    """
    kind = model_kind or next((k for k in MODEL_KINDS if obs.log.rounds(k)), MODEL_KINDS[0])
    rounds = obs.log.rounds(kind) if round is None else [round]
    for t in reversed(rounds):
        rec = obs.log.get(t, kind)
        x = rec.sent_by(victim) if rec is not None else None
        if x is None:
            continue
        if x.numel() != obs.fm.d:
            raise NotApplicable(f"node {victim}'s {kind!r} message holds {x.numel()} of the "
                                f"model's {obs.fm.d} parameters, not a whole model")
        wrec = obs.log.get(t, weight_kind)
        if wrec is None:
            return x.float()
        w = wrec.sent_by(victim)
        if w is None:
            raise NotApplicable(f"node {victim}'s round-{t} {weight_kind!r} message is not "
                                "observed, so its de-biased model is unknown")
        return (x / w.reshape(-1)[0]).float()
    where = "any round" if round is None else f"round {round}"
    raise NotApplicable(f"no {kind!r} message of node {victim} is observed in {where}")


def last_observed_round(obs: Observation, victim: int, model_kind: str | None = None) -> int:
    """The last round in which a model message of the victim is observed."""
    kind = model_kind or next((k for k in MODEL_KINDS if obs.log.rounds(k)), MODEL_KINDS[0])
    for t in reversed(obs.log.rounds(kind)):
        rec = obs.log.get(t, kind)
        if rec is not None and rec.sent_by(victim) is not None:
            return t
    raise NotApplicable(f"no {kind!r} message of node {victim} is observed")


def candidates(data: NodeData, victim: int) -> tuple[Tensor, Tensor, np.ndarray]:
    """The victim's members then held-out samples.

    Returns:
        x (N, C, H, W), y (N,), labels (N,) True for members.
    """
    c, co = int(data.counts[victim]), int(data.counts_out[victim])
    if c == 0 or co == 0:
        raise ConfigError(f"node {victim} needs members and held-out samples for membership "
                          f"inference (has {c} and {co}; set holdout > 0)")
    x = torch.cat([data.x[victim, :c], data.x_out[victim, :co]])
    y = torch.cat([data.y[victim, :c], data.y_out[victim, :co]])
    return x, y, np.r_[np.ones(c, dtype=bool), np.zeros(co, dtype=bool)]


def subsample(cands: tuple[Tensor, Tensor, np.ndarray], cap: int,
              gen: torch.Generator) -> tuple[Tensor, Tensor, np.ndarray]:
    """At most `cap` members and `cap` held-out samples of `candidates`, drawn uniformly without
    replacement by `gen` (members still first; `cap` 0: all of them, `gen` untouched)."""
    x, y, labels = cands
    if cap <= 0 or (labels.sum() <= cap and (~labels).sum() <= cap):
        return cands
    keep = []
    for side in (np.flatnonzero(labels), np.flatnonzero(~labels)):
        pick = torch.randperm(len(side), generator=gen)[:cap].sort().values.numpy()
        keep.append(side[pick])
    idx = torch.from_numpy(np.concatenate(keep))
    return x[idx], y[idx], labels[idx.numpy()]


# --------------------------------------------------------------------------------- claims, JSON
class Claim(TypedDict):
    """One mode's claimed epsilon of a victim, as its report states it."""

    epsilon: float
    delta: float
    accountant: str | None
    unit: str | None
    uncovered: list[str]


def claims(privacy: list[dict[str, Any]], victim: int) -> dict[str, Claim]:
    """The victim's claimed epsilon per mode ("paper", "calibrated") from `trainer.privacy()`."""
    from privbench.results.store import headline_reports

    out: dict[str, Claim] = {}
    mine = [r for r in privacy if r.get("node", victim) == victim]
    for mode in ("paper", "calibrated"):
        for rep in headline_reports(mine, mode).values():
            eps = rep.get("epsilon")
            out[mode] = {"epsilon": math.inf if eps == "inf" else float(eps),
                         "delta": float(rep.get("delta", 0.0)),
                         "accountant": rep.get("accountant"), "unit": rep.get("unit"),
                         "uncovered": rep.get("uncovered", [])}
    return out


def _victim_views(defense: Any, obs: Observation, victim: int,
                  rounds: frozenset[int] | None = None) -> tuple[list[Any], list[str]]:
    """The victim's gradient views in every recorded round (of `rounds` only, when given), and
    why the other rounds gave none (a source with `all_views`, e.g. gossip inversion, gives them
    all at once)."""
    every = defense.all_views(obs, victim)
    if every is not None:
        return [v for v in every if rounds is None or v.round in rounds], []
    views, reasons = [], []
    for t in obs.log.rounds():
        if rounds is not None and t not in rounds:
            continue
        try:
            views += defense.gradient_views(obs, victim, [t])
        except NotApplicable as exc:
            reasons.append(str(exc))
    return views, reasons
