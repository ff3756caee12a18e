"""The input-canary audit: crafted samples inserted as extra members of a victim, scored by a
reference-free membership attack."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NotRequired, TypedDict

import numpy as np
import torch
from torch import Tensor

from privbench.audit.attack import reads_messages
from privbench.audit.candidates import (
    _victim_views,
    claims,
    observed_model,
)
from privbench.config import JSONObject, RunConfig, replace_checked
from privbench.data.datasets import NodeData, load_dataset
from privbench.engine.messages import MessageBus
from privbench.engine.trainer import Context, Trainer, provides
from privbench.engine.truth import GroundTruth
from privbench.errors import ConfigError, NotApplicable
from privbench.plugins import load_plugins
from privbench.registry import ATTACKS, DEFENSES
from privbench.seeding import Streams
from privbench.threat.observation import Observation, ThreatModel, observe, threat_for


# ------------------------------------------------------------------------- one-run canary audit
def with_extra_members(data: NodeData, victim: int, x_extra: Tensor, y_extra: Tensor) -> NodeData:
    """A copy of `data` where node `victim` also trains on x_extra (k, C, H, W), y_extra (k,)."""
    c = int(data.counts[victim])
    k = len(y_extra)
    m = max(data.x.shape[1], c + k)
    pad = m - data.x.shape[1]
    x = torch.cat([data.x, data.x.new_zeros(data.n, pad, *data.x.shape[2:])], dim=1)
    y = torch.cat([data.y, data.y.new_zeros(data.n, pad)], dim=1)
    idx = torch.cat([data.idx, data.idx.new_full((data.n, pad), -1)], dim=1)
    x[victim, c:c + k] = x_extra.to(x)
    y[victim, c:c + k] = y_extra.to(y)
    idx[victim, c:c + k] = -1  # canaries are not dataset members
    counts = data.counts.clone()
    counts[victim] = c + k
    return dataclasses.replace(data, x=x, y=y, idx=idx, counts=counts)


class ThreatJSON(TypedDict):
    """A threat model as an audit result records it."""

    kind: str
    observers: list[int]


class InputCanaryAudit(TypedDict):
    """`canary_audit`'s JSON-ready result (see its Returns)."""

    kind: str
    defense: str
    victim: int
    canaries: int
    attack: NotRequired[str]
    included: NotRequired[int]
    mislabelled: NotRequired[bool]
    threat: NotRequired[ThreatJSON]
    claimed_epsilon: NotRequired[dict[str, JSONObject]]  # per mode, the victim's claim
    cap: NotRequired[float]
    one_run: NotRequired[dict[str, object]]  # `metrics.audit.one_run_audit`
    one_run_sweep: NotRequired[dict[str, object]]  # `metrics.audit.one_run_audit_sweep`


def canary_audit(run: RunConfig, defense: str, victim: int, canaries: int = 200,
                 attack: str = "mia_message", attack_cfg: Mapping[str, object] | None = None,
                 overrides: Mapping[str, object] | None = None,
                 gen: torch.Generator | None = None,
                 threat: ThreatModel | None = None, k_plus: int | None = None,
                 k_minus: int | None = None, mislabel: bool = True,
                 kind: str = "input") -> InputCanaryAudit:
    """One-run audit (Steinke, Nasr, Jagielski 2023) of node `victim`'s sample-level claim with
    input-space canaries (the white-box gradient canaries are `privbench.audit.canary_audit`).

    `canaries` records, each added to the victim's training data with probability 1/2; the run is
    trained once; every canary is scored; the top k+ are guessed "in", the bottom k- "out" (fixed
    a priori: m / 4 each by default), and the exact binomial test gives the epsilon lower bound at
    the claim's delta. The victim's claim is re-read from the trained defense (its local dataset
    grew, so its sampling rate and calibration changed accordingly).

    kind "input": samples that no node holds (the dataset's training split minus every node's
    share), relabelled to a random wrong class when `mislabel` (the strongest input-space canary in
    ML Privacy Meter's DP-audit documentation), scored by `attack` (one without reference models:
    mia_threshold or mia_message).

    Returns:
        JSON-ready dict: one_run (`one_run_audit` result), one_run_sweep (best over a (k+, k-)
        grid; optimistic), cap (the bound a perfect guesser certifies with these m, k+, k- and
        delta), claimed_epsilon, canaries, included, attack, threat.

    Raises:
        NotApplicable: the run diverged or the canaries cannot be inserted.
    """
    from privbench.engine.runner import build
    from privbench.metrics.audit import one_run_audit, one_run_audit_sweep, one_run_cap

    if kind not in CANARY_KINDS:
        raise ConfigError(f"unknown canary kind {kind!r}; accepted: {', '.join(CANARY_KINDS)}")
    load_plugins()
    base = build(run, defense, overrides)
    ctx = base.ctx
    gen = gen or ctx.streams.fresh("mia", "canary", device="cpu")
    atk = _reference_free_attack(attack, attack_cfg)
    cx, cy = _input_canaries(run, ctx.data, canaries, mislabel, gen)
    included = (torch.rand(canaries, generator=gen) < 0.5).numpy()
    inc = torch.from_numpy(included)
    built = _train_with_members(base, victim, cx[inc], cy[inc])
    threat = threat or threat_for("neighbour", built.ctx.topology, victim)
    obs = observe(built, threat)
    privacy = built.trainer.privacy()  # the canary run's reports, composed once
    scores = _input_canary_scores(atk, obs, type(built.trainer), victim, cx, cy, ctx)
    claimed = claims(privacy, victim)
    delta = claimed.get("calibrated", claimed.get("paper", {})).get("delta", run.delta)
    kp = canaries // 4 if k_plus is None else k_plus
    km = canaries // 4 if k_minus is None else k_minus
    head: InputCanaryAudit = {"kind": kind, "attack": attack,
            "defense": defense, "victim": victim, "canaries": canaries,
            "included": int(included.sum()), "mislabelled": mislabel,
            "threat": {"kind": threat.kind, "observers": list(threat.observers)},
            "claimed_epsilon": claimed,
            "cap": one_run_cap(canaries, kp + km, delta)}
    if not np.isfinite(scores).all():
        raise NotApplicable("non-finite canary scores: the run diverged (non-finite messages)",
                            non_finite=True)
    return {**head,
            "one_run": one_run_audit(scores, included, kp, km, delta),
            "one_run_sweep": one_run_audit_sweep(scores, included, delta)}


CANARY_KINDS = ("input",)


def _reference_free_attack(attack: str, attack_cfg: Mapping[str, object] | None) -> Any:
    cls_atk = ATTACKS.get(attack)
    atk = cls_atk(replace_checked(cls_atk.Config(), attack_cfg or {}, where="attack"))
    if "reference_systems" in atk.needs:
        raise ConfigError(f"the canary audit runs one training: attack {attack!r} needs reference "
                          "models (use mia_threshold or mia_message)")
    return atk


def _input_canaries(run: RunConfig, data: NodeData, canaries: int, mislabel: bool,
                    gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """`canaries` samples no node holds, (m, C, H, W) and (m,) (labels shifted when mislabel)."""
    ds = load_dataset(run.dataset, run.data_root, run.download)
    used = torch.cat([data.idx.flatten(), data.idx_out.flatten()]).cpu()
    free = torch.ones(len(ds.y_train), dtype=torch.bool)
    free[used[used >= 0]] = False
    pool = torch.nonzero(free).flatten()
    if len(pool) < canaries:
        raise ConfigError(f"{canaries} canaries need {canaries} samples no node holds; only "
                          f"{len(pool)} are free (lower nodes or max_per_node)")
    pick = pool[torch.randperm(len(pool), generator=gen)[:canaries]]
    cx, cy = ds.x_train[pick], ds.y_train[pick].clone()
    if mislabel:
        shift = torch.randint(1, data.num_classes, (canaries,), generator=gen)
        cy = (cy + shift) % data.num_classes
    return cx, cy


def claimed_clip(trainer: Trainer) -> float:
    """The per-sample clip bound the defense declares for its config (`Trainer.clip_bound`).

    Raises:
        NotApplicable: it declares none (with its reason): gradient canaries need one.
    """
    bound = type(trainer).clip_bound(trainer.cfg)
    if bound.value is None:
        raise NotApplicable(f"the defense declares no clip bound ({bound.reason}): gradient "
                            "canaries need one")
    return bound.value


def clip_or(trainer: Trainer, default: float) -> float:
    """The declared clip bound, or `default` (the canary norm) for defenses without one."""
    try:
        return claimed_clip(trainer)
    except NotApplicable:
        return default


def _gradient_canaries(base: Any, canaries: int, norm_factor: float, gen: torch.Generator
                       ) -> tuple[Any, Tensor, Tensor]:
    """A `GradientCanaries` bank on distinct random coordinates, with the zero input records
    (and labels) that carry the canaries through the data stack."""
    from privbench.engine.canaries import GradientCanaries

    d = base.ctx.fm.d
    if not 0 < canaries <= d:
        raise ConfigError(f"gradient canaries need 1 <= m <= d = {d} distinct coordinates, "
                          f"got m = {canaries}")
    if not norm_factor >= 1:
        raise ConfigError(f"canary norm factor must be >= 1 (a canary at least as large as the "
                          f"clip bound), got {norm_factor}")
    coords = torch.randperm(d, generator=gen)[:canaries]
    clip = clip_or(base.trainer, 1.0)
    bank = GradientCanaries(coords, norm_factor * clip)
    data = base.ctx.data
    cx = torch.zeros(canaries, *data.x.shape[2:], dtype=data.x.dtype)
    return bank, cx, bank.labels(torch.arange(canaries))


def _train_with_members(base: Any, victim: int, x_extra: Tensor, y_extra: Tensor) -> Any:
    """A fresh copy of `base`'s run where `victim` also holds (x_extra, y_extra), trained."""
    from privbench.engine.loop import train
    from privbench.engine.runner import Built

    ctx = base.ctx
    cls = DEFENSES.get(base.defense)
    new_data = with_extra_members(ctx.data.to(torch.device("cpu")), victim, x_extra,
                                  y_extra).to(ctx.device)
    policy = ctx.bus.policy
    ctx2 = dataclasses.replace(ctx, data=new_data, bus=MessageBus(cls.kinds, policy),
                               truth=GroundTruth(policy), streams=Streams(ctx.run.seed, ctx.device))
    built = Built(type(base.trainer)(base.trainer.cfg, ctx2), ctx2, base.defense)
    train(built.trainer)
    return built


def _sample_rate(privacy: list[JSONObject], victim: int, ctx: Context) -> float:
    """The victim's claimed sampling rate (its privacy report's), else batch / members."""
    for rep in privacy:
        if rep.get("node", victim) == victim and isinstance(rep.get("sample_rate"), (int, float)):
            return float(rep["sample_rate"])
    return min(1.0, ctx.run.batch_size / max(1, int(ctx.data.counts[victim])))


def _all_victim_views(obs: Observation, cls: type, victim: int) -> list[Any]:
    """Every gradient view of the victim the observation supports (`_victim_views`), or
    NotApplicable when there is none."""
    if not provides(cls, "gradient_views"):
        raise NotApplicable(f"defense {obs.defense!r} provides no gradient views")
    views, _ = _victim_views(cls, obs, victim)
    if not views:
        raise NotApplicable(f"no gradient view of node {victim} is observed")
    return views


def _view_llr(view: Any, coords: Tensor, clip: float, rate: float) -> np.ndarray:
    """(m,) one view's evidence per canary (0 where the canary's coordinate is not observed).

    "gradient" / "partial" views: the subsampled-Gaussian log-likelihood ratio of one release,
    log((1 - q) + q exp((a x - a^2 / 2) / s^2)) with a = C / B the contribution of one sampled
    canary clipped to the claimed C and s the noise scale estimated over the observed coordinates
    (1.4826 x their median absolute deviation). "sign"
    views (randomized response on signs): the observed sign on the canary's coordinate (the
    canary pushes it to +1; the likelihood ratio of randomized response is monotone in it).
    """
    g = view.gradient.detach().double().cpu()  # (d,)
    seen = (torch.ones_like(g, dtype=torch.bool) if view.mask is None
            else view.mask.detach().cpu().bool())  # (d,)
    if view.kind == "sign":
        return (torch.sign(g[coords]) * seen[coords]).numpy()
    obs = g[seen]
    if obs.numel() == 0:
        return np.zeros(len(coords))
    a = clip / max(1, view.batch_size)  # one sampled canary's contribution to the mean
    s = max(1.4826 * float((obs - obs.median()).abs().median()), 1e-6 * a)
    llr = (a * g[coords] - a * a / 2) / (s * s)  # (m,)
    q = min(max(rate, 1e-12), 1.0)
    out = torch.logaddexp(torch.full_like(llr, math.log1p(-q) if q < 1 else -math.inf),
                          math.log(q) + llr)
    return (out * seen[coords]).numpy()


def _input_canary_scores(atk: Any, obs: Observation, cls: type, victim: int, cx: Tensor,
                         cy: Tensor, ctx: Context) -> np.ndarray:
    """Input-space canaries scored by a reference-free membership attack."""
    x, y = cx.to(ctx.device), cy.to(ctx.device)
    if reads_messages(type(atk)):
        return atk.score(ctx.fm, _all_victim_views(obs, cls, victim), x, y)
    from privbench.threat.signals import ModelMIAInput, model_signals

    target = observed_model(obs, victim).to(ctx.device)[None]
    return atk.score(ModelMIAInput(model_signals(ctx.fm, target, x, y)))
