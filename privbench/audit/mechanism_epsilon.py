"""The mechanism audit's ε: the privacy loss of the noise, sampling and sensitivity it measured,
composed per node (Gaussian releases by PLD, randomized response per coordinate), against each
node's claim."""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor

from privbench.errors import NotApplicable
from privbench.metrics.audit import clopper_pearson
from privbench.results.records import MeasuredEpsilon


class PartlyMeasured(NotApplicable):
    """The measured ε does not apply (the message says why), with what was measured on the way
    to that (`measured`), which the report writes beside the reason."""

    def __init__(self, reason: str, measured: dict[str, Any]) -> None:
        super().__init__(reason)
        self.measured = measured


def _inv_sqrt(x: float) -> float:
    return math.inf if x <= 0 else 1 / math.sqrt(x)


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
            lo, hi = clopper_pearson(total, trials, level)
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


# the integer RDP orders of the ranking reading (`gaussian_epsilon`, "rdp_rank")
RANK_ORDERS = [2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 128, 256]


def _buckets(schedule: np.ndarray, most: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """The multipliers rounded down to geometric buckets (0.1 % wide, widened until at most
    `most` distinct values remain: a PLD composition costs per distinct event) and their
    counts. Rounding a multiplier down only raises ε."""
    width = 1e-3
    while True:
        values, counts = np.unique(np.exp(np.floor(np.log(schedule) / width) * width),
                                   return_counts=True)
        if len(values) <= most:
            return values, counts
        width *= 2


def gaussian_epsilon(schedule: np.ndarray, rate: float, delta: float, scheme: str,
                     members: int, accountant: str = "pld", interval: float = 1e-3) -> float:
    """ε at δ of the composed Gaussian releases with noise multipliers `schedule` (T,) per unit
    of one sample's contribution, each on a batch drawn at `rate`.

    Poisson batches (add/remove one): dp_accounting's PLD accountant on Poisson-subsampled
    Gaussians (its RDP accountant with `accountant="rdp"`, for a ledger that composes with
    RDP; `"rdp_rank"`: RDP at 16 integer orders over at most 6 buckets, fast and coarse, to rank
    nodes). Fixed-size batches without replacement (replace one: a replaced record moves the
    release by up to twice one contribution, so z / 2): its RDP accountant, which has the
    sampled-without-replacement event (Wang, Balle, Kasiviswanathan 2019, Thm. 27) the PLD one
    lacks. Equal multipliers are self-composed, after rounding down to geometric buckets (which
    only raises ε; see `_buckets`).
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
    rank = accountant == "rdp_rank"  # a coarse, fast reading that only ranks nodes
    values, counts = _buckets(schedule, 6 if rank else 24)
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
                else rdp.RdpAccountant(orders=RANK_ORDERS if rank else None,
                                       neighboring_relation=relation))
    acc.compose(dpa.ComposedDpEvent(events))
    return max(float(acc.get_epsilon(delta)), 0.0)


def observed_share(row: dict[str, Any], releases: Any) -> float:
    """sqrt(R / m): a ledger whose joint multiplier composes R equally noised releases of one
    batch per round (its `releases`), of which the probe saw m as messages (the rest reach the
    network only inside a later model), claims z sqrt(R / m) for the m seen. Only a ledger that
    counts more releases than are seen tightens the comparison; 1 otherwise."""
    seen = row.get("releases", 0)
    if not isinstance(releases, int) or isinstance(releases, bool) or seen <= 0:
        return 1.0
    return math.sqrt(max(releases / seen, 1.0))


def _node_ratios(probes: list[dict[str, Any]], z_ledger: np.ndarray, node: int,
                 releases: Any = None) -> tuple[float, float, float] | None:
    """(point, low, high) of the smallest measured / ledger z over the node's probed rounds,
    the ledger's z taken for the releases each probe saw (`observed_share`)."""
    rows = [p for p in probes if p["node"] == node and p["measured"]
            and 0 < z_ledger[p["round"], node] < math.inf]  # a round that releases something
    if not rows:
        return None

    def z_at(p: dict[str, Any]) -> float:
        return float(z_ledger[p["round"], node]) * observed_share(p, releases)

    point = min(p["z"] / z_at(p) for p in rows)
    low = min(p["z_interval"][0] / z_at(p) for p in rows)
    high = min(p["z_interval"][1] / z_at(p) for p in rows)
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


def _voided(ledgers: list[dict[str, Any] | None]) -> MeasuredEpsilon:
    """The findings make every claim void: one sample is exposed without noise, without a bound,
    or under noise that cancels across rounds or nodes; a block of a message carries less noise
    than the rest; a message declared data-independent changes with the data.

    Raises:
        NotApplicable: no node reports a claim.
    """
    claims = [(c, i) for i, led in enumerate(ledgers) if (c := _claim(led)) is not None]
    if not claims:
        raise NotApplicable("no node reports a privacy claim")
    claimed, node = max(claims)
    return {"node": node, "epsilon": math.inf,
            "interval": [math.inf, math.inf], "claimed": claimed, "ratio": math.inf,
            "ratio_interval": [math.inf, math.inf],
            "basis": "the findings: a sample exposed without noise, without a bound, or under "
                     "reused or shared noise, a block of coordinates under less noise than its "
                     "message, or data in a message declared data-independent, is not "
                     "protected by any ε"}


def _report_multipliers(ledgers: list[dict[str, Any] | None], rounds: int,
                        key: str = "noise_multiplier") -> np.ndarray | None:
    """(T, n) each node's reported per-round noise multiplier (`noise_multiplier`: the joint
    multiplier of everything it releases in a round), when every node reports one. `key`
    "probe_multiplier": the multiplier against one sample's direct effect, reported by a ledger
    whose sensitivity bound holds a term one round's replay cannot reach."""
    zs = [(led or {}).get(key) for led in ledgers]
    if any(not isinstance(z, (int, float)) for z in zs):
        return None
    return np.tile(np.asarray(zs, dtype=float), (rounds, 1))


def _run_schedule(release: np.ndarray, rounds: int) -> np.ndarray:
    """(rounds, n) the multipliers of the rounds the run runs: a schedule longer than the run is
    cut; a shorter one (a plan for fewer rounds than run) is extended with each node's smallest
    release multiplier, which only raises ε."""
    z = np.asarray(release, dtype=float)
    if len(z) >= rounds:
        return z[:rounds]
    live = np.where((z > 0) & np.isfinite(z), z, np.inf).min(axis=0)  # (n,)
    return np.concatenate([z, np.tile(live, (rounds - len(z), 1))])


def _fmt(x: float) -> str:
    """A δ or ε as it reads best: 1e-05 as 10⁻⁵, else 3 significant digits."""
    exp = math.log10(x) if x > 0 else 0.5
    if x > 0 and exp == round(exp) and exp < -1:
        sup = str(int(exp)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
        return f"10{sup}"
    return f"{x:.3g}"


def _nodes(nodes: list[int]) -> str:
    return f"node {nodes[0]}'s ledger is" if len(nodes) == 1 else \
        f"the ledgers of nodes {', '.join(map(str, nodes))} are"


def ledger_findings(ledgers: list[dict[str, Any] | None], release: np.ndarray | None,
                    delta: float, rounds: int) -> list[str]:
    """Where a ledger is stated for something else than the run asks: a δ above the run's (ε at
    a larger δ is a weaker statement), or a round count other than the run's (its own, or the
    rows of its noise schedule)."""
    wrong: dict[str, list[int]] = {}
    for i, led in enumerate(ledgers):
        d, planned = (led or {}).get("delta"), (led or {}).get("rounds")
        if isinstance(d, (int, float)) and d > delta * (1 + 1e-9):
            wrong.setdefault(f"stated for δ = {_fmt(d)}, the run asks {_fmt(delta)}", []).append(i)
        if isinstance(planned, int) and planned != rounds:
            wrong.setdefault(f"composed over {planned} rounds, the run runs {rounds}",
                             []).append(i)
    out = [f"{_nodes(nodes)} {what}" for what, nodes in wrong.items()]
    if release is not None and len(release) != rounds:
        out.append(f"the noise schedule (Trainer.release_noise) has {len(release)} rounds, the "
                   f"run runs {rounds}")
    return out


def measured_epsilon(probes: list[dict[str, Any]], noise: list[dict[str, Any]],
                     sampling: list[dict[str, Any]], ledgers: list[dict[str, Any] | None],
                     release_noise: np.ndarray | None, rounds: int, infinite: bool,
                     level: float, delta: float | None = None) -> MeasuredEpsilon:
    """The ledger recomposed with what was measured, for the node where it is largest: point,
    interval, the claim and the ledger's own values recomposed. A randomized-response ledger is
    rescaled by the measured flip rate; a Gaussian one (noise multipliers from
    `Trainer.release_noise`, else the reports' `noise_multiplier`) recomposed by dp_accounting
    at `delta` (the run's δ; None: each ledger's own) over the `rounds` the run runs, whatever
    δ and round count the ledger was stated or calibrated for.

    Raises:
        NotApplicable: the ledger claims no finite ε, declares no noise multiplier or a
            sampling this audit does not recompose, or no probed message carries its round's
            sample.
    """
    if infinite:
        return _voided(ledgers)
    if all(_claim(led) in (None, math.inf) for led in ledgers):
        raise NotApplicable("the ledger claims no finite ε")
    if any("keep_prob" in (led or {}) for led in ledgers):
        return rr_epsilon(noise, ledgers, level)
    if release_noise is None:
        release_noise = _report_multipliers(ledgers, rounds)
    if release_noise is None:
        raise NotApplicable("the defense declares no per-release noise multiplier "
                            "(Trainer.release_noise, or `noise_multiplier` in its reports), so "
                            "its composition cannot be recomposed from what was measured")
    schemes = {(led or {}).get("sampling") for led in ledgers}
    if not schemes <= {"poisson", "fixed_without_replacement"}:
        raise NotApplicable(f"the ledger's sampling {sorted(map(str, schemes))} is not a "
                            "subsampled Gaussian this audit recomposes")
    z = _run_schedule(release_noise, rounds)  # (T, n)
    # measured z against the ledger's z for what the probe reaches; ledger z scaled by it
    z_probe = _report_multipliers(ledgers, rounds, "probe_multiplier")
    z_probe = z if z_probe is None else z_probe
    best: dict[str, Any] | None = None
    for i, (led, samp) in enumerate(zip(ledgers, sampling, strict=True)):
        ratios = _node_ratios(probes, z_probe, i, (led or {}).get("releases"))
        if ratios is None or led is None:
            continue
        q_lo, q_hi = samp.get("rate_interval", [led["sample_rate"]] * 2)
        q = samp["rate"] if samp["scheme"] == "poisson" else led["sample_rate"]
        args = (led["delta"] if delta is None else delta, led["sampling"], samp["members"],
                "rdp" if led.get("accountant") == "rdp" else "pld", 5e-3)
        # rank the nodes by measured / claimed ε (each node against its own claim: claims
        # differ across nodes where degrees or data sizes do) with the fast RDP accountant;
        # the worst one is composed as its ledger is
        with _quiet("absl"):  # its orders below 2 may not converge at small z: they are dropped
            eps = gaussian_epsilon(z[:, i] * ratios[0], q, *args[:3], "rdp_rank")
            own = gaussian_epsilon(z[:, i], led["sample_rate"], *args[:3], "rdp_rank")
        coarse = eps / own if own > 0 else math.inf
        if best is None or coarse > best["coarse"]:
            best = {"coarse": coarse, "node": i, "ratios": ratios, "q": (q, q_lo, q_hi),
                    "ledger": led, "args": args}
    if best is None:
        raise NotApplicable("no message of a probed round carries that round's sample (the "
                            "defense releases it in a later round, after mixing: a one-round "
                            "replay cannot attribute it to one node's noise)")
    i, (r, r_lo, r_hi), (q, q_lo, q_hi) = best["node"], best["ratios"], best["q"]
    col, led, args = z[:, i], best["ledger"], best["args"]

    def eps(ratio: float, rate: float) -> float:
        return math.inf if ratio <= 0 else gaussian_epsilon(col * ratio, rate, *args)

    claimed = float(led["epsilon"])
    point, low, high = eps(r, q), eps(r_hi, q_lo), eps(r_lo, q_hi)
    return {"node": i, "epsilon": point, "interval": [low, high],
            "claimed": claimed, "ledger_recomputed": eps(1.0, led["sample_rate"]),
            "ratio": point / claimed, "ratio_interval": [low / claimed, high / claimed],
            "z_ratio": r, "z_ratio_interval": [r_lo, r_hi], "rate": q,
            "ledger_rate": led["sample_rate"], "delta": args[0], "ledger_delta": led["delta"],
            "composed_rounds": len(col), "sampling": led["sampling"],
            "accountant": "dp_accounting " + ("PLD" if led["sampling"] == "poisson"
                                              and args[3] == "pld" else "RDP")}


def _rr_coordinate_epsilon(p: float) -> float:
    """ε of randomized response on one coordinate that flips with probability p (ε = 0 at
    p = 1/2; flipping more than half is undone by flipping back, hence the symmetry)."""
    p = min(p, 1 - p)
    return math.inf if p <= 0 else math.log((1 - p) / p)


def rr_epsilon(noise: list[dict[str, Any]], ledgers: list[dict[str, Any] | None],
               level: float) -> MeasuredEpsilon:
    """A randomized-response ledger (per-coordinate keep probability, composed linearly over
    coordinates and rounds) rescaled by the measured flip rate: the changed fraction of the
    most-changed message kind among the coordinates both its clean and noisy messages set (a
    zero sign has no sign to keep, and a sparsifying compressor may send other coordinates),
    pooled over every audited round and every node that claims the same keep probability (the
    flip rate is one quantity of the mechanism; pooling all of them is what resolves a claim
    near 1/2), with its Clopper-Pearson interval.

    Raises:
        NotApplicable: no node's randomized messages were measured; `PartlyMeasured` (with the
            flips read) where more coordinates change than the flips can change.
    """
    groups: dict[float, list[int]] = {}
    for i, led in enumerate(ledgers):
        if led is not None and "keep_prob" in led:
            groups.setdefault(float(led["keep_prob"]), []).append(i)
    rows_: list[dict[str, Any]] = []
    for keep, nodes in groups.items():
        rows = [r for r in noise if r["node"] in nodes and r["live"]]
        if not rows:
            continue
        led = ledgers[nodes[0]] or {}
        by_kind: dict[str, list[float]] = {}
        for r in rows:
            acc = by_kind.setdefault(r["kind"], [0.0, 0.0])
            acc[0] += r["changed_live"]
            acc[1] += r["live"]
        flips, total = max(by_kind.values(), key=lambda a: a[0] / a[1])
        p = flips / total
        p_lo, p_hi = clopper_pearson(round(flips), round(total), level)
        near = min(max(0.5, p_lo), p_hi)  # the rate in the interval nearest 1/2: lowest ε
        far = p_lo if abs(p_lo - 0.5) > abs(p_hi - 0.5) else p_hi
        ledger_coord = _rr_coordinate_epsilon(1 - keep)
        claimed = float(led["epsilon"])  # the same keep probability: the same claim
        scale = claimed / ledger_coord if ledger_coord > 0 else math.inf
        row = {"node": nodes[0], "nodes": nodes, "flip_rate": p, "flip_interval": [p_lo, p_hi],
               "flip_trials": int(total), "ledger_flip_rate": 1 - keep,
               "epsilon": _rr_coordinate_epsilon(p) * scale,
               "interval": [_rr_coordinate_epsilon(near) * scale,
                            _rr_coordinate_epsilon(far) * scale],
               "claimed": claimed}
        rows_.append(row)
    if not rows_:
        raise NotApplicable("no node's randomized messages were measured")
    best = max(rows_, key=lambda r: r["interval"][0] / r["claimed"])  # the worst node
    claimed = best["claimed"]
    over = [r for r in rows_ if r["flip_interval"][0] > 0.5 >= r["ledger_flip_rate"]]
    if over and best["interval"][0] <= claimed:
        best = over[0]
        # more coordinates change than a keep probability >= 1/2 can flip: the changes are not
        # the flips alone (another use of the noise stream, e.g. a compressor's coordinate choice)
        raise PartlyMeasured(f"the measured change rate {best['flip_rate']:.3g} is above 1/2, "
                             f"more than the ledger's flips ({best['ledger_flip_rate']:.3g}) "
                             "can change: the randomized messages change by more than their "
                             "flips, so the flip rate cannot be read from them", {"flips": best})
    half = (best["flip_interval"][1] - best["flip_interval"][0]) / 2
    resolved = abs(0.5 - best["ledger_flip_rate"]) > half
    return {**best, "ratio": best["epsilon"] / claimed,
            "ratio_interval": [v / claimed for v in best["interval"]],
            "resolved": resolved,
            **({} if resolved else {
                "note": f"the flip rate is measured to ±{half:.2g}, while the claim's flip rate "
                        f"is {abs(0.5 - best['ledger_flip_rate']):.2g} from 1/2: one run cannot "
                        "tell the claim from a weaker one; what it checks is that flips happen "
                        "at about that rate (no flips, or far fewer, are caught)"}),
            "accountant": "randomized response, composed as the ledger composes it (linearly "
                          "over coordinates and rounds)"}
