"""The mechanism audit: what a run actually drew, measured against what its ledger claims.

A statistical audit (canaries, membership inference) bounds ε from below by what an attacker
can tell apart; it cannot fail close to the claim. An auditor that holds the whole run (the
trainer, its state, the ground truth and the ledger) can measure the mechanism itself. At each
audited round t the run's own state is copied (`privbench.engine.checkpoint.snapshot`) and round t
replayed
on the copies (teacher forcing: the noisy run's state in, one round out), each replay recording
every message it sends:

* noisy: the round as the run ran it (checked equal to the run's own messages);
* clean: the same round with every draw of the "noise" streams silenced
  (`privbench.seeding.noise_off`), so noisy - clean is the noise that reached each message;
* remove / saturate: clean, with one real sample of the probed node removed, or replaced by a
  sample whose gradient is made very large (its input scaled by `scales`, its label changed).
  saturate - remove is one sample's largest contribution to each message: the sensitivity a
  clipped mechanism really enforces, in the message's own units (no step size, batch size or
  mixing weight needs to be known). Two scales tell a bounded contribution from an unbounded
  one (no clipping: it grows with the scale).

From these, per node, round and message kind: the noise's scale with a chi-square interval
(Gaussian reading; the mean absolute value for Laplace, the changed fraction for randomized
response), its freshness (correlation across audited rounds and across nodes: reused or shared
noise shows as correlation near 1), coverage (a data-dependent message the defense declares
covered must carry noise wherever the sample reaches it), the sampling drawn (every round's
realised batch sizes against the ledger's scheme and rate: a test on the rate, not the name), and
the effective noise multiplier z = noise std / contribution of the messages a node sends in a
round (independent noises compose as mu^2 = sum (contribution / std)^2, Dong, Roth and Su,
"Gaussian Differential Privacy", JRSS B 2022, Cor. 3.3).

The measured ε recomposes the ledger with what was measured, independently of the trainer's own
plan: for a defense that declares its per-release noise multipliers (`Trainer.release_noise`,
(T, n)) under Poisson or fixed-size sampling, each node's schedule scaled by the smallest ratio
measured z / ledger z of its probed rounds and composed at its measured sampling rate with
dp_accounting's PLD accountant (Poisson-subsampled or sampled-without-replacement Gaussian), at
the run's δ; with its interval (the ends of the noise and rate intervals). Where a defense's
mechanism cannot be recomposed the result says "not applicable" with the reason; the other
measurements still stand.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from privbench.config import RunConfig
from privbench.engine.messages import MessageLog, RecordPolicy
from privbench.seeding import noise_off

# (kind, receiver or -1 for a broadcast) -> the payload node i sent, flattened (float64)
Messages = dict[tuple[str, int], Tensor]


@dataclass(frozen=True)
class MechanismSettings:
    """How the audit measures.

    Attributes:
        rounds: audited rounds, spread over the run (the first two always among them); the
            probed node rotates over them, so each node's sensitivity is measured
            rounds / n times (at least once when rounds >= n).
        scales: the two input scales of the saturating sample (a bounded contribution is the
            same at both).
        level: two-sided error probability of each interval (noise scale, sampling rate):
            small, because a gate fails a correct run when an interval misses (each of n nodes
            has two).
    """

    rounds: int = 8
    scales: tuple[float, float] = (1e2, 1e4)
    level: float = 1e-5


def audited_rounds(total: int, count: int) -> list[int]:
    """`count` rounds of a `total`-round run: 0, 1 and the rest evenly spread to the last."""
    if total <= count:
        return list(range(total))
    spread = np.linspace(0, total - 1, count - 1).round().astype(int).tolist()
    return sorted({0, 1, *spread})[:count] if count > 1 else [0]


def _sent(log: MessageLog, node: int) -> Messages:
    """Every payload `node` sent in the one round `log` holds."""
    out: Messages = {}
    for (_, kind), rec in log.records.items():
        if rec.per_edge:
            for row in torch.nonzero(rec.edges[:, 0] == node).flatten().tolist():
                out[(kind, int(rec.edges[row, 1]))] = rec.payload[row].double().flatten()
        else:
            payload = rec.sent_by(node)
            if payload is not None:
                out[(kind, -1)] = payload.double().flatten()
    return out


class _Probe:
    """Wraps a copy's `draw`: one real sample of `node` removed or replaced (`scale`)."""

    def __init__(self, draw: Callable[..., tuple[Tensor, Tensor, Tensor]], node: int,
                 scale: float | None, classes: int) -> None:
        self.draw, self.node, self.scale, self.classes = draw, node, scale, classes
        self.applied = False

    def __call__(self, t: int, rates: Tensor | None = None,
                 batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        x, y, mask = self.draw(t, rates=rates, batch_size=batch_size)
        real = torch.nonzero(mask[self.node]).flatten()
        if not len(real):
            return x, y, mask
        j, i = int(real[0]), self.node
        x, y, mask = x.clone(), y.clone(), mask.clone()
        if self.scale is None:
            mask[i, j] = False
        else:
            x[i, j] = x[i, j] * self.scale
            y[i, j] = (y[i, j] + 1) % self.classes
        self.applied = True
        return x, y, mask


def _replay(built: Any, blob: bytes, t: int, clean: bool,
            probe: tuple[int, float | None] | None = None) -> tuple[MessageLog, bool]:
    """Round t replayed on a copy of the state `blob` holds (`checkpoint.snapshot` of `built`
    before round t): its messages, and whether a probe applied."""
    from privbench.engine.checkpoint import restore

    trainer, ctx = restore(blob, built, RecordPolicy(rounds=frozenset({t})))
    applied = probe is None
    wrapper = None
    if probe is not None:
        classes = int(ctx.data.y_test.max()) + 1
        wrapper = _Probe(ctx.draw, probe[0], probe[1], classes)
        ctx.draw = wrapper
    if clean:
        with noise_off():
            trainer.round(t)
    else:
        trainer.round(t)
    if wrapper is not None:
        applied = wrapper.applied
    return ctx.bus.log, applied


@dataclass
class RoundReplays:
    """What the replays of one audited round gave."""

    round: int
    probed: int
    noisy: MessageLog | None  # the run's own messages of the round (set by `attach_run`)
    clean: MessageLog
    remove: MessageLog | None
    saturate: tuple[MessageLog, ...] | None
    exact: bool | None  # noisy replay == the run's own messages (None: not recorded)


class Recorder:
    """Hooks a built run: every round's realised batch sizes, and the audited rounds' replays."""

    def __init__(self, built: Any, rounds: list[int], settings: MechanismSettings) -> None:
        self.built, self.rounds, self.settings = built, set(rounds), settings
        self.sizes: list[Tensor] = []  # per drawn batch: (n,) realised sizes
        self.epoch = False  # a round read every member (a local epoch): no sample to probe
        self.replays: list[RoundReplays] = []
        ctx = built.ctx
        draw, draw_epoch = ctx.draw, ctx.draw_epoch

        def sized_draw(t: int, rates: Tensor | None = None,
                       batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
            x, y, mask = draw(t, rates=rates, batch_size=batch_size)
            self.sizes.append(mask.sum(dim=1).cpu())
            return x, y, mask

        def sized_epoch(t: int) -> tuple[Tensor, Tensor]:
            perm, members = draw_epoch(t)
            self.sizes.append(members.sum(dim=1).cpu())
            self.epoch = True
            return perm, members

        self.hooks = {"draw": sized_draw, "draw_epoch": sized_epoch}
        vars(ctx).update(self.hooks)

    def __call__(self, t: int) -> None:
        """Replay round t (when audited) from the run's state before it."""
        if t not in self.rounds:
            return
        ctx = vars(self.built.ctx)
        for name in self.hooks:  # the copies sample through the class's own path
            del ctx[name]
        try:
            self._replay_round(t)
        finally:
            ctx.update(self.hooks)

    def _replay_round(self, t: int) -> None:
        from privbench.engine.checkpoint import snapshot

        n, b = self.built.ctx.n, self.built
        blob = snapshot(b)
        probed = sorted(self.rounds).index(t) % n
        # the noisy round is the run's own (recorded); replayed once, to check the replay
        noisy = _replay(b, blob, t, clean=False)[0] if not self.replays else None
        clean, _ = _replay(b, blob, t, clean=True)
        remove, ok = _replay(b, blob, t, clean=True, probe=(probed, None))
        saturate = None
        if ok and not self.epoch:
            # the second scale (bounded or not) at each node's first probe only
            first = probed not in {r.probed for r in self.replays}
            scales = self.settings.scales if first else self.settings.scales[:1]
            saturate = tuple(_replay(b, blob, t, clean=True, probe=(probed, s))[0]
                             for s in scales)
        self.replays.append(RoundReplays(t, probed, noisy, clean, remove if ok else None,
                                         saturate, None))  # type: ignore[arg-type]

    def attach_run(self, log: MessageLog) -> None:
        """Each audited round's noisy messages from the run's own log; the one replayed noisy
        round checked equal to them (bit for bit)."""
        for rep in self.replays:
            own = MessageLog({key: r for key, r in log.records.items() if key[0] == rep.round})
            if rep.noisy is not None:
                rep.exact = own.records.keys() == rep.noisy.records.keys() and all(
                    torch.equal(r.payload, rep.noisy.records[key].payload)
                    for key, r in own.records.items())
            rep.noisy = own


def _std_interval(sq_sum: float, d: int, level: float) -> tuple[float, float]:
    """Chi-square interval of a Gaussian std from the sum of d squared zero-mean draws."""
    from scipy.stats import chi2

    if d == 0 or sq_sum == 0:
        return 0.0, 0.0
    hi = math.sqrt(sq_sum / chi2.ppf(level / 2, d))
    lo = math.sqrt(sq_sum / chi2.ppf(1 - level / 2, d))
    return lo, hi


def _corr(a: Tensor, b: Tensor) -> float:
    den = float(a.norm() * b.norm())
    return float(a @ b) / den if den > 0 else 0.0


def noise_rows(replays: list[RoundReplays], n: int, level: float) -> list[dict[str, Any]]:
    """Per node, audited round and message: the noise that reached it (noisy - clean)."""
    rows = []
    for rep in replays:
        for i in range(n):
            clean = _sent(rep.clean, i)
            for key, noisy in _sent(rep.noisy, i).items():
                if key not in clean:
                    continue
                diff = noisy - clean[key]
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
                             "size": diff.numel(), "_noise": _pattern(diff)})
    return rows


def _pattern(diff: Tensor) -> Tensor:
    """What freshness compares: the noise itself, or for noise that leaves many coordinates
    unchanged (randomized response flips a sign or not), the centred changed-coordinate
    indicator (the flipped values follow the message's own signs, correlated across rounds)."""
    changed = (diff != 0).double()
    if diff.numel() and float(changed.mean()) < 0.9:
        return changed - changed.mean()
    return diff


def freshness(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Largest |correlation| of the noise of one message across audited rounds (reuse) and of
    one kind across nodes in one round (shared noise), against the threshold where independent
    Gaussian noise of that size would almost never reach it (8 / sqrt(size), at least 0.2)."""
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
                    if x["size"] != y["size"]:
                        continue
                    c = abs(_corr(x["_noise"], y["_noise"]))
                    worst[what] = max(worst[what], c)
                    if c > max(0.2, 8 / math.sqrt(x["size"])):
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
               scale_ratio: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Per probed (node, round): one sample's contribution to each message, whether it is
    bounded, and the effective noise multiplier of everything the node sent."""
    rows, findings = [], []
    for rep in replays:
        i = rep.probed
        if rep.remove is None or rep.saturate is None:
            rows.append({"node": i, "round": rep.round, "measured": False,
                         "reason": "the round reads every member (no one sample to probe)"
                         if rep.remove is not None else "the node drew no sample"})
            continue
        noisy, clean = _sent(rep.noisy, i), _sent(rep.clean, i)
        base, low = _sent(rep.remove, i), _sent(rep.saturate[0], i)
        high = _sent(rep.saturate[1], i) if len(rep.saturate) > 1 else {}
        noise = {k: noisy[k] - clean[k] for k in clean if k in noisy}
        contrib = {k: low[k] - base[k] for k in base if k in low}
        growth = {k: float((high[k] - base[k]).norm()) / max(float(contrib[k].norm()), 1e-300)
                  for k in contrib if k in high}
        # data-dependent kinds the defense declares covered (an uncovered kind is reported as
        # such by the coverage bound) that this sample reaches
        flows = [k for k in contrib if kinds[k[0]].data_dependent and kinds[k[0]].covered
                 and float(contrib[k].norm()) > 1e-6 * (float(clean[k].norm()) + 1e-12)]
        mu2, unnoised, unbounded, detail = 0.0, [], [], {}
        for k in flows:
            std = math.sqrt(float(noise[k].pow(2).mean())) if k in noise else 0.0
            if std == 0:
                unnoised.append(k)
            if growth.get(k, 1.0) > 2.0:
                unbounded.append(k)
            detail[f"{k[0]}" + (f"->{k[1]}" if k[1] >= 0 else "")] = {
                "contribution": float(contrib[k].norm()), "std": std,
                "growth": growth.get(k, 1.0)}
        noisy_flows = [k for k in flows if k not in unnoised]
        snr_lo = snr_hi = 0.0
        for g in _noise_groups(noisy_flows, noise):
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
                            f"(x{growth[k]:.0f} when its input grows x{scale_ratio:.0f}, "
                            f"round {rep.round})")
        z = math.inf if mu2 == 0 else 1 / math.sqrt(mu2)
        rows.append({"node": i, "round": rep.round, "measured": bool(flows),
                     "z": z if not (unnoised or unbounded) else 0.0,
                     "z_interval": [0.0 if (unnoised or unbounded) else _inv_sqrt(snr_hi),
                                    0.0 if (unnoised or unbounded) else _inv_sqrt(snr_lo)],
                     "messages": detail,
                     **({} if flows else {"reason": "no data-dependent message carries the "
                                                     "sample in this round"})})
    return rows, findings


def _inv_sqrt(x: float) -> float:
    return math.inf if x <= 0 else 1 / math.sqrt(x)


def _clopper_pearson(k: int, n: int, level: float) -> tuple[float, float]:
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(level / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - level / 2, k + 1, n - k))
    return lo, hi


def node_ledgers(privacy: list[dict[str, Any]], n: int) -> list[dict[str, Any] | None]:
    """Each node's headline claim: its calibrated report (the rigorous accountant), else its
    paper report."""
    from privbench.results.store import headline_reports

    cal, paper = headline_reports(privacy, "calibrated"), headline_reports(privacy, "paper")
    return [cal.get(i, paper.get(i)) for i in range(n)]


def sampling_rows(sizes: list[Tensor], counts: list[int], ledgers: list[dict[str, Any] | None],
                  level: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Per node: the batch sizes drawn in every round against the ledger's scheme and rate."""
    if not sizes:
        return [], ["the run drew no batch through the context's sampling path"]
    drawn = torch.stack(sizes).long()  # (draws, n)
    rows, findings = [], []
    for i, ledger in enumerate(ledgers):
        scheme = (ledger or {}).get("sampling", "none")
        rate = (ledger or {}).get("sample_rate")
        total, trials = int(drawn[:, i].sum()), len(drawn) * counts[i]
        row: dict[str, Any] = {"node": i, "scheme": scheme, "ledger_rate": rate,
                               "rate": total / trials if trials else None,
                               "draws": len(drawn), "members": counts[i]}
        if scheme == "poisson" and rate is not None:
            lo, hi = _clopper_pearson(total, trials, level)
            row.update(rate_interval=[lo, hi], consistent=lo <= rate <= hi)
        elif scheme.startswith("fixed") and rate is not None:
            want = round(rate * counts[i])
            row.update(batch_sizes=sorted(set(drawn[:, i].tolist())),
                       consistent=bool((drawn[:, i] == want).all()))
        else:
            row.update(consistent=True, note="the ledger claims no sampling amplification")
        if not row["consistent"]:
            findings.append(f"node {i} drew {scheme} batches at rate {row['rate']:.4g} "
                            f"where its ledger accounts {rate:.4g}")
        rows.append(row)
    return rows, findings


def gaussian_epsilon(schedule: np.ndarray, rate: float, delta: float, scheme: str,
                     members: int, accountant: str = "pld", interval: float = 1e-3) -> float:
    """ε at δ of the composed Gaussian releases with noise multipliers `schedule` (T,) per unit
    of one sample's contribution, each on a batch drawn at `rate`.

    Poisson batches (add/remove one): dp_accounting's PLD accountant on Poisson-subsampled
    Gaussians (its RDP accountant with `accountant="rdp"`, for a ledger that composes with
    RDP). Fixed-size batches without replacement (replace one: a replaced record moves the
    release by up to twice one contribution, so z / 2): its RDP accountant, which has the
    sampled-without-replacement event (Wang, Balle, Kasiviswanathan 2019, Thm. 27) the PLD one
    lacks. Equal multipliers are self-composed, after rounding down to 0.1 % buckets (which only
    raises ε).
    """
    import dp_accounting as dpa
    from dp_accounting.pld import pld_privacy_accountant as pld
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    if np.any(np.isnan(schedule)) or np.any(schedule < 0) or rate <= 0:
        return math.inf
    # rounds without a release (`release_noise` gives them 0 or inf)
    schedule = schedule[(schedule > 0) & ~np.isposinf(schedule)]
    if not len(schedule):
        return 0.0
    buckets = np.exp(np.floor(np.log(schedule) / 1e-3) * 1e-3)
    values, counts = np.unique(buckets, return_counts=True)
    poisson = scheme == "poisson"
    events = []
    for z, c in zip(values.tolist(), counts.tolist(), strict=True):
        if poisson:
            ev: Any = dpa.PoissonSampledDpEvent(min(rate, 1.0), dpa.GaussianDpEvent(z))
        else:
            size = min(members, max(1, round(rate * members)))
            ev = dpa.SampledWithoutReplacementDpEvent(members, size, dpa.GaussianDpEvent(z / 2))
        events.append(dpa.SelfComposedDpEvent(ev, c))
    relation = (dpa.NeighboringRelation.ADD_OR_REMOVE_ONE if poisson
                else dpa.NeighboringRelation.REPLACE_ONE)
    acc: Any = (pld.PLDAccountant(value_discretization_interval=interval)
                if poisson and accountant == "pld"
                else rdp.RdpAccountant(neighboring_relation=relation))
    acc.compose(dpa.ComposedDpEvent(events))
    return max(float(acc.get_epsilon(delta)), 0.0)


def _node_ratios(probes: list[dict[str, Any]], z_ledger: np.ndarray, node: int
                 ) -> tuple[float, float, float] | None:
    """(point, low, high) of the smallest measured / ledger z over the node's probed rounds."""
    rows = [p for p in probes if p["node"] == node and p["measured"]
            and 0 < z_ledger[p["round"], node] < math.inf]  # a round that releases something
    if not rows:
        return None
    point = min(p["z"] / z_ledger[p["round"], node] for p in rows)
    low = min(p["z_interval"][0] / z_ledger[p["round"], node] for p in rows)
    high = min(p["z_interval"][1] / z_ledger[p["round"], node] for p in rows)
    return point, low, high


@contextlib.contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """`logger`'s warnings silenced inside the block."""
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _claim(led: dict[str, Any] | None) -> float | None:
    """A node's claimed ε as a float (inf for an infinite claim), None where there is none."""
    if led is None or led.get("epsilon") is None:
        return None
    return math.inf if led["epsilon"] in ("inf", math.inf) else float(led["epsilon"])


def _voided(ledgers: list[dict[str, Any] | None]) -> dict[str, Any]:
    """The findings make every claim void: one sample is exposed without noise, without a bound,
    or under noise that cancels across rounds or nodes."""
    claims = [(c, i) for i, led in enumerate(ledgers) if (c := _claim(led)) is not None]
    if not claims:
        return {"applicable": False, "reason": "no node reports a privacy claim"}
    claimed, node = max(claims)
    return {"applicable": True, "node": node, "epsilon": math.inf,
            "interval": [math.inf, math.inf], "claimed": claimed, "ratio": math.inf,
            "ratio_interval": [math.inf, math.inf],
            "basis": "the findings: a sample exposed without noise, without a bound, or under "
                     "reused or shared noise, is not protected by any ε"}


def _report_multipliers(ledgers: list[dict[str, Any] | None], rounds: int) -> np.ndarray | None:
    """(T, n) each node's reported per-round noise multiplier (`noise_multiplier`: the joint
    multiplier of everything it releases in a round), when every node reports one."""
    zs = [(led or {}).get("noise_multiplier") for led in ledgers]
    if any(not isinstance(z, (int, float)) for z in zs):
        return None
    return np.tile(np.asarray(zs, dtype=float), (rounds, 1))


def measured_epsilon(probes: list[dict[str, Any]], noise: list[dict[str, Any]],
                     sampling: list[dict[str, Any]], ledgers: list[dict[str, Any] | None],
                     release_noise: np.ndarray | None, rounds: int, infinite: bool,
                     level: float) -> dict[str, Any]:
    """The ledger recomposed with what was measured, for the node where it is largest: point,
    interval, the claim and the ledger's own values recomposed. A randomized-response ledger is
    rescaled by the measured flip rate; a Gaussian one (noise multipliers from
    `Trainer.release_noise`, else the reports' `noise_multiplier`) recomposed by dp_accounting."""
    if infinite:
        return _voided(ledgers)
    if all(_claim(led) in (None, math.inf) for led in ledgers):
        return {"applicable": False, "reason": "the ledger claims no finite ε"}
    if any("keep_prob" in (led or {}) for led in ledgers):
        return rr_epsilon(noise, ledgers, level)
    if release_noise is None:
        release_noise = _report_multipliers(ledgers, rounds)
    if release_noise is None:
        return {"applicable": False,
                "reason": "the defense declares no per-release noise multiplier "
                          "(Trainer.release_noise, or `noise_multiplier` in its reports), so "
                          "its composition cannot be recomposed from what was measured"}
    schemes = {(led or {}).get("sampling") for led in ledgers}
    if not schemes <= {"poisson", "fixed_without_replacement"}:
        return {"applicable": False,
                "reason": f"the ledger's sampling {sorted(map(str, schemes))} is not a "
                          "subsampled Gaussian this audit recomposes"}
    z = np.asarray(release_noise, dtype=float)  # (T, n)
    best: dict[str, Any] | None = None
    for i, (led, samp) in enumerate(zip(ledgers, sampling, strict=True)):
        ratios = _node_ratios(probes, z, i)
        if ratios is None or led is None:
            continue
        q_lo, q_hi = samp.get("rate_interval", [led["sample_rate"]] * 2)
        q = samp["rate"] if samp["scheme"] == "poisson" else led["sample_rate"]
        args = (led["delta"], led["sampling"], samp["members"],
                "rdp" if led.get("accountant") == "rdp" else "pld", 5e-3)
        # rank the nodes with the fast RDP accountant; the worst one is composed as its ledger is
        with _quiet("absl"):  # its orders below 2 may not converge at small z: they are dropped
            eps = gaussian_epsilon(z[:, i] * ratios[0], q, *args[:3], "rdp")
        if best is None or eps > best["coarse"]:
            best = {"coarse": eps, "node": i, "ratios": ratios, "q": (q, q_lo, q_hi),
                    "ledger": led, "args": args}
    if best is None:
        return {"applicable": False,
                "reason": "no message of a probed round carries that round's sample (the "
                          "defense releases it in a later round, after mixing: a one-round "
                          "replay cannot attribute it to one node's noise)"}
    i, (r, r_lo, r_hi), (q, q_lo, q_hi) = best["node"], best["ratios"], best["q"]
    col, led, args = z[:, i], best["ledger"], best["args"]

    def eps(ratio: float, rate: float) -> float:
        return math.inf if ratio <= 0 else gaussian_epsilon(col * ratio, rate, *args)

    claimed = float(led["epsilon"])
    point, low, high = eps(r, q), eps(r_hi, q_lo), eps(r_lo, q_hi)
    return {"applicable": True, "node": i, "epsilon": point, "interval": [low, high],
            "claimed": claimed, "ledger_recomputed": eps(1.0, led["sample_rate"]),
            "ratio": point / claimed, "ratio_interval": [low / claimed, high / claimed],
            "z_ratio": r, "z_ratio_interval": [r_lo, r_hi], "rate": q,
            "ledger_rate": led["sample_rate"], "delta": led["delta"],
            "sampling": led["sampling"],
            "accountant": "dp_accounting " + ("PLD" if led["sampling"] == "poisson"
                                              and args[3] == "pld" else "RDP")}


def _rr_coordinate_epsilon(p: float) -> float:
    """ε of randomized response on one coordinate that flips with probability p (ε = 0 at
    p = 1/2; flipping more than half is undone by flipping back, hence the symmetry)."""
    p = min(p, 1 - p)
    return math.inf if p <= 0 else math.log((1 - p) / p)


def rr_epsilon(noise: list[dict[str, Any]], ledgers: list[dict[str, Any] | None],
               level: float) -> dict[str, Any]:
    """A randomized-response ledger (per-coordinate keep probability, composed linearly over
    coordinates and rounds) rescaled by each node's measured flip rate: the changed fraction of
    its most-changed message among the coordinates both its clean and noisy messages set (a zero
    sign has no sign to keep, and a sparsifying compressor may send other coordinates), pooled
    over the audited rounds, with its Clopper-Pearson interval.
    """
    best = None
    for i, led in enumerate(ledgers):
        rows = [r for r in noise if r["node"] == i and r["live"]]
        if led is None or not rows or "keep_prob" not in led:
            continue
        by_kind: dict[str, list[float]] = {}
        for r in rows:
            acc = by_kind.setdefault(r["kind"], [0.0, 0.0])
            acc[0] += r["changed_live"]
            acc[1] += r["live"]
        flips, total = max(by_kind.values(), key=lambda a: a[0] / a[1])
        p = flips / total
        p_lo, p_hi = _clopper_pearson(round(flips), round(total), level)
        near = min(max(0.5, p_lo), p_hi)  # the rate in the interval nearest 1/2: lowest ε
        far = p_lo if abs(p_lo - 0.5) > abs(p_hi - 0.5) else p_hi
        ledger_coord = _rr_coordinate_epsilon(1 - float(led["keep_prob"]))
        scale = float(led["epsilon"]) / ledger_coord if ledger_coord > 0 else math.inf
        row = {"node": i, "flip_rate": p, "flip_interval": [p_lo, p_hi],
               "ledger_flip_rate": 1 - float(led["keep_prob"]),
               "epsilon": _rr_coordinate_epsilon(p) * scale,
               "interval": [_rr_coordinate_epsilon(near) * scale,
                            _rr_coordinate_epsilon(far) * scale],
               "claimed": float(led["epsilon"])}
        if best is None or row["interval"][0] > best["interval"][0] or row["flip_rate"] > 0.5:
            best = row
    if best is None:
        return {"applicable": False, "reason": "no node's randomized messages were measured"}
    claimed = best["claimed"]
    if best["flip_interval"][0] > 0.5 >= best["ledger_flip_rate"]:
        # more coordinates change than a keep probability >= 1/2 can flip: the changes are not
        # the flips alone (another use of the noise stream, e.g. a compressor's coordinate choice)
        return {"applicable": False, "flips": best,
                "reason": f"the measured change rate {best['flip_rate']:.3g} is above 1/2, "
                          f"more than the ledger's flips ({best['ledger_flip_rate']:.3g}) can "
                          "change: the randomized messages change by more than their flips, so "
                          "the flip rate cannot be read from them"}
    return {"applicable": True, **best, "ratio": best["epsilon"] / claimed,
            "ratio_interval": [v / claimed for v in best["interval"]],
            "accountant": "randomized response, composed as the ledger composes it (linearly "
                          "over coordinates and rounds)"}


def audit_mechanism(run: RunConfig, defense: str, overrides: dict[str, Any],
                    settings: MechanismSettings | None = None) -> dict[str, Any]:
    """Train the run again to its last audited round, replaying each audited round; the
    measurements, findings and measured ε (see the module docstring)."""
    from privbench.engine.loop import train
    from privbench.engine.runner import build

    settings = settings or MechanismSettings()
    rounds = audited_rounds(run.rounds, max(settings.rounds, run.nodes))  # every node probed
    built = build(run, defense, overrides, policy=RecordPolicy(rounds=frozenset(rounds)))
    trainer = built.trainer
    if not trainer.private:
        return {"applicable": False, "reason": "the defense is not private: no ledger to "
                                               "measure against"}
    rec = Recorder(built, rounds, settings)
    res = train(trainer, rounds=max(rounds) + 1, before_round=rec, evaluations=False)
    rec.attach_run(built.ctx.bus.log)
    n = built.ctx.n
    ledgers = node_ledgers(trainer.privacy(), n)
    kinds = {k.name: k for k in trainer.kinds}
    noise = noise_rows(rec.replays, n, settings.level)
    fresh = freshness(noise)
    probes, probe_findings = probe_rows(rec.replays, kinds, settings.level,
                                        settings.scales[1] / settings.scales[0])
    sampling, sampling_findings = sampling_rows(rec.sizes, built.ctx.data.counts.tolist(),
                                                ledgers, settings.level)
    inexact = [r.round for r in rec.replays if r.exact is False]
    findings = [*probe_findings, *fresh["findings"],
                *([f"the replay of rounds {inexact} differs from the run's own messages"]
                  if inexact else [])]
    release = trainer.release_noise() if hasattr(trainer, "release_noise") else None
    eps = measured_epsilon(probes, noise, sampling, ledgers, release, run.rounds,
                           bool(probe_findings or fresh["findings"] or inexact), settings.level)
    return {"applicable": True, "rounds": [r.round for r in rec.replays],
            "diverged_round": res.diverged_round,
            "replay_exact": not inexact if any(r.exact is not None for r in rec.replays) else None,
            "noise": [{k: v for k, v in row.items() if k != "_noise"} for row in noise],
            "freshness": {k: v for k, v in fresh.items() if k != "findings"},
            "probes": probes, "sampling": sampling, "sampling_findings": sampling_findings,
            "epsilon": eps, "findings": findings,
            "settings": {"rounds": settings.rounds, "scales": list(settings.scales),
                         "level": settings.level}}
