"""The mechanism audit: what a run actually drew, measured against what its ledger claims.

A statistical audit (canaries, membership inference) bounds ε from below by what an attacker
can tell apart; it cannot fail close to the claim. An auditor that holds the whole run (the
trainer, its state, the ground truth and the ledger) can measure the mechanism itself. At each
audited round t the run's own state is copied (`privbench.engine.checkpoint.snapshot`) and round t
replayed on the copies (teacher forcing: the noisy run's state in, one round out), each replay
recording every message it sends:

* noisy: the round as the run ran it (checked equal to the run's own messages);
* clean: the same round with every draw of the "noise" streams silenced
  (`privbench.seeding.noise_off`), so noisy - clean is the noise that reached each message;
* remove / saturate: clean, on two neighbouring batches of the probed node built from
  white-box gradient canaries (`privbench.engine.canaries.VectorCanaries`; Nasr et al., "Tight
  Auditing of Differentially Private Machine Learning", USENIX Security 2023): in both, its
  first real sample is a canary of gradient +a u; in saturate its second is a canary of
  gradient -2 b u (a, b far beyond any clip bound, u one fixed direction), in remove it is left
  out. saturate - remove is one added record's largest contribution to each message: C where
  each sample is clipped to C, 2C where the batch is clipped as a whole (its clipped sum or mean
  goes from one end of the clip ball to the other, whatever the real samples are), in the
  message's own units (no step size, batch size or mixing weight needs to be known). Two values
  of b tell a bounded contribution from an unbounded one (no clipping: it grows with b);
* neighbour: clean, on the dataset without one member of the probed node (at each node's
  first probe): every message of every kind is compared with clean's, and a kind the defense
  declares data-independent that changes, or a kind it does not declare, is a finding
  (`privbench.audit.mechanism_coverage.declared_kinds`).

From these, per node, round and message kind: the noise's scale with a chi-square interval
(Gaussian reading; the mean absolute value for Laplace, the changed fraction for randomized
response), its freshness (correlation across audited rounds and across nodes: reused or shared
noise shows as correlation near 1), coverage (a data-dependent message the defense declares
covered must carry noise wherever the sample reaches it, and each of its parameter tensors
as much as the rest of it: `privbench.audit.mechanism_coverage.coverage`), the sampling drawn
(every round's realised batch sizes against the ledger's scheme and rate: a test on the rate,
not the name), and the effective noise multiplier z = noise std / contribution of the messages
a node sends in a round (independent noises compose as mu^2 = sum (contribution / std)^2, Dong,
Roth and Su, "Gaussian Differential Privacy", JRSS B 2022, Cor. 3.3).

The measured ε recomposes the ledger with what was measured, independently of the trainer's own
plan: for a defense that declares its per-release noise multipliers (`Trainer.release_noise`,
(T, n)) under Poisson or fixed-size sampling, each node's schedule scaled by the smallest ratio
measured z / ledger z of its probed rounds and composed at its measured sampling rate with
dp_accounting's PLD accountant (Poisson-subsampled or sampled-without-replacement Gaussian), at
the run's δ; with its interval (the ends of the noise and rate intervals). Where a defense's
mechanism cannot be recomposed the measured ε says "not applicable" with the reason; the other
measurements still stand. A defense that is not private raises `NotApplicable`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from privbench import progress
from privbench.audit.mechanism_coverage import coverage, declared_kinds
from privbench.audit.mechanism_draws import OutsideDraws, reused_finding
from privbench.audit.mechanism_epsilon import (
    PartlyMeasured,
    _inv_sqrt,
    ledger_findings,
    measured_epsilon,
    node_ledgers,
    sampling_rows,
)
from privbench.audit.mechanism_node import node_level_epsilon
from privbench.audit.mechanism_replay import (
    MechanismSettings,
    Messages,
    Recorder,
    RoundReplays,
    _flows,
    _sent,
    audited_rounds,
    node_level,
)
from privbench.config import RunConfig
from privbench.engine.messages import RecordPolicy
from privbench.errors import NotApplicable
from privbench.results.records import MeasuredEpsilon, MechanismEpsilon, MechanismReport


def _std_interval(sq_sum: float, d: int, level: float) -> tuple[float, float]:
    """Chi-square interval of a Gaussian std from the sum of d squared zero-mean draws."""
    from scipy.stats import chi2

    if d == 0 or sq_sum == 0:
        return 0.0, 0.0
    hi = math.sqrt(sq_sum / chi2.ppf(level / 2, d))
    lo = math.sqrt(sq_sum / chi2.ppf(1 - level / 2, d))
    return lo, hi


def _corr(a: Tensor, b: Tensor) -> float:
    return _corr_count(a, b)[0]


def _corr_count(a: Tensor, b: Tensor) -> tuple[float, int]:
    """Correlation of a and b over the coordinates both define (NaN: undefined, see
    `_pattern`; such patterns are centred over those coordinates), and their number."""
    if bool(a.isnan().any() or b.isnan().any()):
        both = ~(a.isnan() | b.isnan())
        a, b = a[both], b[both]
        a, b = a - a.mean(), b - b.mean()
    den = float(a.norm() * b.norm())
    return (float(a @ b) / den if den > 0 else 0.0), a.numel()


def noise_rows(replays: list[RoundReplays], n: int, level: float) -> list[dict[str, Any]]:
    """Per node, audited round and message: the noise that reached it (noisy - clean)."""
    rows = []
    for rep in replays:
        for i in range(n):
            clean = _sent(rep.clean, i)
            for key, noisy in _sent(rep.noisy, i).items():
                if key not in clean:
                    continue
                diff = _difference(noisy, clean[key])
                sq = float(diff.pow(2).sum())
                # where both messages carry a value (a zero sign has none to keep, and a
                # compressor may send other coordinates)
                live = (clean[key] != 0) & (noisy != 0)
                lo, hi = _std_interval(sq, diff.numel(), level)
                rows.append({"node": i, "round": rep.round, "kind": key[0], "to": key[1],
                             "std": math.sqrt(sq / max(1, diff.numel())), "std_interval": [lo, hi],
                             "mean_abs": float(diff.abs().mean()) if diff.numel() else 0.0,
                             "changed": float((diff != 0).double().mean()) if diff.numel() else 0.0,
                             "changed_live": int((diff[live] != 0).sum()), "live": int(live.sum()),
                             "size": diff.numel(), "_noise": _pattern(diff, live),
                             "_diff": diff, "_live": live})
    return rows


def _difference(noisy: Tensor, clean: Tensor) -> Tensor:
    """noisy - clean, 0 where both hold the same non-finite value (a diverged run's state is
    sent alike by both replays: no noise reached it)."""
    same = (noisy == clean) | (noisy.isnan() & clean.isnan())
    return torch.where(same, torch.zeros_like(noisy), noisy - clean)


def _pattern(diff: Tensor, live: Tensor) -> Tensor:
    """What freshness compares: the noise itself, or for noise that leaves many coordinates
    unchanged (randomized response flips a sign or not), the changed-coordinate indicator
    (the flipped values follow the message's own signs, correlated across rounds) on the
    coordinates the message carries a value on (NaN elsewhere: a sparsifying compressor sends
    other coordinates each round)."""
    changed = (diff != 0).double()
    if diff.numel() and float(changed.mean()) < 0.9:
        centred = changed - (changed[live].mean() if bool(live.any()) else 0.0)
        return torch.where(live, centred, torch.full_like(changed, math.nan))
    return diff


MIN_CHANGES = 10  # changed values a message needs before its noise pattern is compared


def freshness(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Largest |correlation| of the noise of one message across audited rounds (reuse) and of
    one kind across nodes in one round (shared noise), against the threshold where independent
    Gaussian noise of that size would almost never reach it (8 / sqrt(size), at least 0.2;
    size: the coordinates both messages define, at least 100). Two messages are compared only
    where each has at least MIN_CHANGES values changed by the noise: a randomized response whose
    claim flips about one value per message has no pattern to correlate."""
    by_msg: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    by_round: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r["std"] > 0:
            by_msg.setdefault((r["node"], r["kind"], r["to"]), []).append(r)
            by_round.setdefault((r["round"], r["kind"], r["to"]), []).append(r)
    findings: list[str] = []
    worst = {"rounds": 0.0, "nodes": 0.0}
    for what, groups, label in (("rounds", by_msg, "reused across rounds"),
                                ("nodes", by_round, "shared across nodes")):
        for key, group in groups.items():
            for a in range(len(group)):
                for b in range(a + 1, len(group)):
                    x, y = group[a], group[b]
                    if x["size"] != y["size"] or min(x["changed_live"], y["changed_live"]) < \
                            MIN_CHANGES:
                        continue
                    c, count = _corr_count(x["_noise"], y["_noise"])
                    c = abs(c)
                    if count < 100:  # too few coordinates in common to tell
                        continue
                    worst[what] = max(worst[what], c)
                    if c > max(0.2, 8 / math.sqrt(count)):
                        where = (f"node {key[0]}, rounds {x['round']} and {y['round']}"
                                 if what == "rounds" else
                                 f"round {key[0]}, nodes {x['node']} and {y['node']}")
                        findings.append(f"{key[1]} noise {label} ({where}: correlation {c:.2f})")
    return {"max_correlation_rounds": worst["rounds"], "max_correlation_nodes": worst["nodes"],
            "findings": sorted(set(findings))}


def _noise_groups(keys: list[tuple[str, int]], noise: Messages) -> list[list[tuple[str, int]]]:
    """Messages whose noise is one draw seen twice (|correlation| > 0.5) grouped together;
    different groups carry independent noise."""
    groups: list[list[tuple[str, int]]] = []
    for k in keys:
        for g in groups:
            ref = noise[g[0]]
            if ref.numel() == noise[k].numel() and abs(_corr(ref, noise[k])) > 0.5:
                g.append(k)
                break
        else:
            groups.append([k])
    return groups


def probe_rows(replays: list[RoundReplays], kinds: dict[str, Any], level: float,
               scale_ratio: float, sample_level: bool = True,
               keep: list[float | None] | None = None
               ) -> tuple[list[dict[str, Any]], list[str]]:
    """Per probed (node, round): one sample's contribution to each message, whether it is
    bounded, and the effective noise multiplier of everything the node sent. Under a node-level
    ledger (the records are nodes, the sensitivity a whole node's) an unbounded sample
    contribution is reported, not a finding. `keep`: each node's randomized-response keep
    probability (None: not randomized response); a message without a flip is a finding only
    where the claim makes that unlikely (keep^values <= level)."""
    rows, findings = [], []
    for rep in replays:
        i = rep.probed
        if rep.remove is None:
            rows.append({"node": i, "round": rep.round, "measured": False,
                         "reason": "the node drew no sample"})
            continue
        noisy, clean = _sent(rep.noisy, i), _sent(rep.clean, i)
        # a local epoch: one member's removal (clean - remove) is the contribution; no growth
        base = _sent(rep.remove, i)
        low = _sent(rep.saturate[0], i) if rep.saturate else clean
        high = _sent(rep.saturate[1], i) if rep.saturate and len(rep.saturate) > 1 else {}
        noise = {k: noisy[k] - clean[k] for k in clean if k in noisy}
        contrib = {k: low[k] - base[k] for k in base if k in low}
        growth = {k: float((high[k] - base[k]).norm()) / max(float(contrib[k].norm()), 1e-300)
                  for k in contrib if k in high}
        flows = _flows(contrib, clean, kinds)
        mu2, unnoised, unbounded, detail, unflipped = 0.0, [], [], {}, []
        p = keep[i] if keep else None
        for k in flows:
            std = math.sqrt(float(noise[k].pow(2).mean())) if k in noise else 0.0
            values = int(((clean[k] != 0) & (noisy.get(k, clean[k]) != 0)).sum())
            if std == 0 and p is not None and p ** values > level:
                unflipped.append(k)  # no flip, as the claim's rare flips allow
            elif std == 0:
                unnoised.append(k)
            if growth.get(k, 1.0) > 2.0 and sample_level:
                unbounded.append(k)
            detail[f"{k[0]}" + (f"->{k[1]}" if k[1] >= 0 else "")] = {
                "contribution": float(contrib[k].norm()), "std": std,
                "growth": growth.get(k, 1.0)}
        noisy_flows = [k for k in flows if k not in unnoised and k not in unflipped]
        snr_lo = snr_hi = 0.0
        groups = _noise_groups(noisy_flows, noise)  # independently noised releases
        for g in groups:
            best = max(g, key=lambda k: float(contrib[k].norm() / noise[k].pow(2).mean().sqrt()))
            sq = float(noise[best].pow(2).sum())
            lo, hi = _std_interval(sq, noise[best].numel(), level)
            c = float(contrib[best].norm())
            mu2 += c * c * noise[best].numel() / sq
            snr_lo += (c / hi) ** 2
            snr_hi += (c / lo) ** 2
        for k in unnoised:
            findings.append(f"node {i}'s {k[0]} message carries one sample's contribution "
                            f"without noise (round {rep.round})")
        for k in unbounded:
            findings.append(f"node {i}'s {k[0]} message: one sample's contribution is unbounded "
                            f"(x{growth[k]:.0f} when its gradient grows x{scale_ratio:.0f}, "
                            f"round {rep.round})")
        z = math.inf if mu2 == 0 else 1 / math.sqrt(mu2)
        rows.append({"node": i, "round": rep.round, "measured": bool(flows),
                     "releases": len(groups), "z": z if not (unnoised or unbounded) else 0.0,
                     "z_interval": [0.0 if (unnoised or unbounded) else _inv_sqrt(snr_hi),
                                    0.0 if (unnoised or unbounded) else _inv_sqrt(snr_lo)],
                     "messages": detail,
                     **({"unflipped": [k[0] for k in unflipped]} if unflipped else {}),
                     **({} if flows else {"reason": "no data-dependent message carries the "
                                                     "sample in this round"})})
    return rows, findings


def sensitivity_reading(eps: MeasuredEpsilon) -> dict[str, Any] | None:
    """Measured sensitivity / the ledger's bound, from the measured ε's reading: a Gaussian
    ledger's noise multiplier over the measured one (the probes' contribution against the
    noise drawn: measured / bound where the noise is the ledger's), with its interval; a
    node-level ledger's largest per-round sensitivity over its bound (or realized S). None where
    the ledger has no sensitivity to read (randomized response, or findings that void it)."""
    if "z_ratio" in eps:
        lo, hi = eps["z_ratio_interval"]
        return {"measured_over_bound": _ratio(1.0, eps["z_ratio"]),
                "interval": [_ratio(1.0, hi), _ratio(1.0, lo)],
                "basis": "the ledger's noise multiplier over the measured one (noise std / one "
                         "sample's largest contribution, probed by two opposite gradient "
                         "canaries)"}
    rounds = [r for r in eps.get("rounds", []) if r.get("ledger_sensitivity")]
    if not rounds:
        return None
    # the round that resolves the most (a probed sensitivity's lower end allows for rounding)
    best = max(rounds, key=lambda r: r.get("sensitivity_low", r["sensitivity"])
               / r["ledger_sensitivity"])
    bound = best["ledger_sensitivity"]
    return {"measured_over_bound": best["sensitivity"] / bound,
            "low": best.get("sensitivity_low", best["sensitivity"]) / bound,
            "round": best["round"],
            "basis": "the L1 sensitivity exposed over the ledger's, in the round whose lower "
                     "end is largest"}


def epsilon_record(measure: Callable[[], MeasuredEpsilon]
                   ) -> tuple[MechanismEpsilon, dict[str, Any] | None]:
    """The measured ε as the report writes it, with its sensitivity reading: the measurement
    with `applicable` true; where `measure` raises `NotApplicable`, `applicable` false with the
    reason and what was measured on the way (`PartlyMeasured`), and no reading."""
    try:
        eps = measure()
    except NotApplicable as why:
        partial = why.measured if isinstance(why, PartlyMeasured) else {}
        return {"applicable": False, **partial, "reason": str(why)}, None
    return {"applicable": True, **eps}, sensitivity_reading(eps)


def _ratio(a: float, b: float) -> float:
    return math.inf if b <= 0 else float(a / b)


def audit_mechanism(run: RunConfig, defense: str, overrides: dict[str, Any],
                    settings: MechanismSettings | None = None) -> MechanismReport:
    """Train the run again to its last audited round, replaying each audited round; the
    measurements, findings and measured ε (see the module docstring)."""
    from privbench.engine import train
    from privbench.engine.runner import build

    settings = settings or MechanismSettings()
    rounds = audited_rounds(run.rounds, max(settings.rounds, run.nodes))  # every node probed
    built = build(run, defense, overrides, policy=RecordPolicy(rounds=frozenset(rounds)))
    trainer = built.trainer
    if not trainer.private:
        raise NotApplicable("the defense is not private: no ledger to measure against")
    rec = Recorder(built, rounds, settings)
    draws = OutsideDraws(built.ctx.streams)

    def before(t: int) -> None:
        # the replays draw from copies of the run's streams, and one that follows a release
        # into round t + 1 draws round t + 1's noise: only the run's own rounds are recorded
        draws.at(-1)
        rec(t)
        draws.at(t)

    progress.stage(max(rounds) + 1, "probed round")
    with draws.recording():
        res = train(trainer, progress.advance, rounds=max(rounds) + 1, before_round=before,
                    evaluations=False)
    rec.attach_run(built.ctx.bus.log)
    n = built.ctx.n
    ledgers = node_ledgers(trainer.privacy(), n)
    kinds = {k.name: k for k in trainer.kinds}
    noise = noise_rows(rec.replays, n, settings.level)
    fresh = freshness(noise)
    nodes = node_level(trainer.privacy())
    keep = [None if led is None or "keep_prob" not in led else float(led["keep_prob"])
            for led in ledgers]
    layout = [(s.name, s.start, s.stop) for s in built.ctx.fm.specs]
    family = "rr" if any(p is not None for p in keep) else "laplace" if nodes else "gaussian"
    blocks, block_findings = coverage(noise, kinds, layout, family, settings.level)
    sent, kind_findings = declared_kinds(rec.replays, kinds, n)
    block_findings += kind_findings
    probes, probe_findings = probe_rows(rec.replays, kinds, settings.level,
                                        settings.scales[1] / settings.scales[0], not nodes, keep)
    sampling, sampling_findings = sampling_rows(rec.sizes, built.ctx.data.counts.tolist(),
                                                ledgers, settings.level)
    inexact = [r.round for r in rec.replays if r.exact is False]
    reused = reused_finding(draws)
    if reused:  # the "unnoised" messages carry that noise: it is reused, not absent
        probe_findings = [reused, *(f for f in probe_findings if "without noise" not in f)]
    findings = [*probe_findings, *block_findings, *fresh["findings"],
                *([f"the replay of rounds {inexact} differs from the run's own messages"]
                  if inexact else [])]
    release = trainer.release_noise()
    more, more_findings = (further_runs(run, defense, overrides, settings)
                           if family == "rr" and settings.runs > 1 else ([], []))
    noise, findings = noise + more, findings + more_findings
    voided = bool(probe_findings or block_findings or fresh["findings"] or inexact
                  or more_findings)
    eps, sensitivity = epsilon_record(
        lambda: node_level_epsilon(rec.replays, kinds, ledgers, trainer, voided, settings.level)
        if nodes else measured_epsilon(probes, noise, sampling, ledgers, release, run.rounds,
                                       voided, settings.level, run.delta))
    return {"applicable": True, "rounds": [r.round for r in rec.replays],
            "diverged_round": res.diverged_round,
            "replay_exact": not inexact if any(r.exact is not None for r in rec.replays) else None,
            "noise": [{k: v for k, v in row.items() if not k.startswith("_")} for row in noise],
            "coverage": blocks, "kinds": sent,
            "freshness": {k: v for k, v in fresh.items() if k != "findings"},
            "probes": probes, "sampling": sampling, "sampling_findings": sampling_findings,
            "epsilon": eps, "sensitivity": sensitivity, "findings": findings,
            "request": {"epsilon": run.epsilon, "delta": run.delta, "rounds": run.rounds},
            "ledger_findings": ledger_findings(ledgers, release, run.delta, run.rounds),
            "settings": {"rounds": settings.rounds, "scales": list(settings.scales),
                         "level": settings.level,
                         **({"runs": settings.runs} if settings.runs > 1 else {})}}


def further_runs(run: RunConfig, defense: str, overrides: dict[str, Any],
                 settings: MechanismSettings) -> tuple[list[dict[str, Any]], list[str]]:
    """The noise rows and findings of runs 2..`settings.runs` (seeds seed + 1, ...), each
    audited alone: randomized response pools their flips with the first run's."""
    rows, findings = [], []
    for k in range(1, settings.runs):
        seed = run.seed + k
        res = audit_mechanism(dataclasses.replace(run, seed=seed), defense, overrides,
                              dataclasses.replace(settings, runs=1))
        rows += [{**r, "run": k + 1} for r in res.get("noise", [])]
        findings += [f"run {k + 1} (seed {seed}): {f}" for f in res.get("findings", [])]
    return rows, findings
