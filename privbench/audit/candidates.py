"""Membership candidates and the model an attacker observes.

Candidates: the victim's members `NodeData.x[v, :counts[v]]` (label 1) and its held-out samples
`NodeData.x_out[v, :counts_out[v]]` (label 0). The target model *as the attacker observes it*
(`observed_model`): from the recorded messages, the push-sum `model` payload over the `weight`
payload of the victim's last recorded round (the de-biased model z = x^{t+1/2} / w the victim
broadcast), or the gossip `model` payload. The sample an attack scores (`SampleRule`,
`draw_sample`): enough non-members to resolve the lowest FPR shown and as many members,
stratified by node and by member / non-member, drawn from the cell's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench.data.datasets import NodeData
from privbench.errors import ConfigError, NotApplicable
from privbench.metrics.roc import CI_LEVEL, DEFAULT_FPRS, clopper_pearson
from privbench.seeding import derive_seed
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


# ------------------------------------------------------------------------------------ sampling
LOWEST_FPR = min(DEFAULT_FPRS)  # the lowest FPR a membership result shows (0.1 %)
FALSE_POSITIVES = 3  # k: the false positives the sample admits at that FPR


@dataclass(frozen=True)
class SampleRule:
    """How many candidates a membership attack scores: enough to resolve the lowest FPR shown.

    Rule: with FPR f shown, at least k / f non-members (k = `false_positives`), so that the
    threshold at FPR f admits k false positives and the FPR it reaches has a Clopper-Pearson
    interval of a few multiples of f (k = 3, f = 0.1 %: 3,000 non-members, FPR interval
    [0.02 %, 0.29 %]) rather than a single non-member deciding it; as many members (the TPR's
    interval is binomial in them, the AUC's in both). A side with fewer candidates is taken
    whole. Scoring every candidate instead (60,000 on Fashion-MNIST) buys intervals narrower
    than the FPR grid reads while the message attack's per-round N x N solve grows as N^3.
    """

    fpr: float = LOWEST_FPR
    false_positives: int = FALSE_POSITIVES

    def size(self) -> int:
        """k / f: the non-members (and members) the rule asks for."""
        return math.ceil(self.false_positives / self.fpr - 1e-9)


def allocate(available: np.ndarray, want: int) -> np.ndarray:
    """(V,) how many of each stratum's `available` (V,) candidates a sample of `want` takes:
    proportional to the stratum's size, largest remainders first (ties: the lower index), never
    more than a stratum has; every candidate when `want` covers them all."""
    available = np.asarray(available, dtype=np.int64)
    total = int(available.sum())
    if want >= total:
        return available.copy()
    share = available * want / total  # (V,) exact proportional shares
    take = np.floor(share).astype(np.int64)
    rest = want - int(take.sum())
    order = np.argsort(-(share - take), kind="stable")[:rest]
    take[order] += 1
    return np.minimum(take, available)


class Sample(TypedDict):
    """The candidates a membership attack scored and why that many (JSON-ready)."""

    rule: str
    fpr: float
    false_positives: int
    members: int
    nonmembers: int
    members_available: int
    nonmembers_available: int
    per_node: dict[str, list[int]]
    false_positives_at_fpr: int
    fpr_ci: list[float]
    resolved: bool
    ci_level: float


def draw_sample(data: NodeData, victims: list[int], rule: SampleRule, gen: torch.Generator,
                cap: int = 0) -> tuple[list[np.ndarray], Sample]:
    """A sample of the victims' candidates stratified by node and by member / non-member.

    Each side (members, non-members) takes `rule.size()` candidates (all of them when fewer),
    allotted to the victims in proportion to their own counts (`allocate`), at most `cap` per
    victim and side when `cap` > 0, each victim's drawn uniformly without replacement by `gen`
    (members first, then held-out samples, each in index order). A side taken whole draws
    nothing, so a sample of every candidate leaves `gen` untouched.

    Returns:
        per victim, the indices into its `candidates` that are scored; and the `Sample` record.
    """
    sides = [np.array([int(data.counts[v]) for v in victims]),
             np.array([int(data.counts_out[v]) for v in victims])]  # (V,) each
    takes = [allocate(avail, rule.size()) for avail in sides]
    if cap > 0:
        takes = [np.minimum(t, cap) for t in takes]
    picks = []
    for i in range(len(victims)):
        parts = []
        for avail, take, offset in ((sides[0][i], takes[0][i], 0),
                                    (sides[1][i], takes[1][i], sides[0][i])):
            if take == avail:
                parts.append(np.arange(avail) + offset)
            else:
                pick = torch.randperm(int(avail), generator=gen)[:int(take)].sort().values
                parts.append(pick.numpy() + offset)
        picks.append(np.concatenate(parts))
    return picks, describe_sample(rule, sides, takes, victims)


def describe_sample(rule: SampleRule, available: list[np.ndarray], taken: list[np.ndarray],
                    victims: list[int]) -> Sample:
    """The `Sample` record: the counts, and the Clopper-Pearson interval of the FPR reached at
    the rule's FPR (floor(f n0) false positives among the n0 non-members scored)."""
    n1, n0 = int(taken[0].sum()), int(taken[1].sum())
    fp = math.floor(rule.fpr * n0 + 1e-9)
    return {"rule": f"at least k / f non-members and as many members (k = "
                    f"{rule.false_positives} false positives at the lowest FPR shown, "
                    f"f = {100 * rule.fpr:g} %), stratified by node; a side with fewer is "
                    "taken whole",
            "fpr": rule.fpr, "false_positives": rule.false_positives, "members": n1,
            "nonmembers": n0, "members_available": int(available[0].sum()),
            "nonmembers_available": int(available[1].sum()),
            "per_node": {str(v): [int(taken[0][i]), int(taken[1][i])]
                         for i, v in enumerate(victims)},
            "false_positives_at_fpr": fp, "fpr_ci": clopper_pearson(fp, n0), "resolved": fp >= 1,
            "ci_level": CI_LEVEL}


def take(cands: tuple[Tensor, Tensor, np.ndarray],
         idx: np.ndarray) -> tuple[Tensor, Tensor, np.ndarray]:
    """The candidates at `idx` (all of them, as they are, when `idx` covers every one)."""
    x, y, labels = cands
    if len(idx) == len(labels):
        return cands
    sel = torch.from_numpy(idx)
    return x[sel], y[sel], labels[idx]


def sample_generator(seed: int) -> torch.Generator:
    """The generator a cell's membership sample is drawn with: from the cell's seed alone, so
    every membership attack of the cell scores the same candidates."""
    return torch.Generator().manual_seed(derive_seed(seed, "membership", "sample"))


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
