"""DPDL's accounting per node of a graph (Yuan et al. 2026, Sec. V-A, Appendix A, eqs. (39)-(55),
Theorem 1; the strict, paper and full readings): the coefficient of eq. (17), the noise
multipliers every node's releases carry, the calibration of the largest node's, the plan of
uniform weights (`plan_dpdl`) and of a run's graph (`plan_dpdl_graph`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from torch import Tensor

from defenses._node_dp import gaussian_report
from privbench.accounting import (
    DEFAULT_OPTIONS,
    SAMPLINGS,
    AccountantOptions,
    EpsilonReport,
    PrivacyPlan,
)
from privbench.accounting.calibrate import calibrate_max_node
from privbench.accounting.plans import (
    GAUSSIAN_PLAN_ACCOUNTANTS,
    assemble_plan,
    check_plan_request,
    checked_factor,
)
from privbench.accounting.validation import check_choice, check_count, check_positive
from privbench.errors import ConfigError

DPDL_FULL_NOTE = (  # DPDL's `full` reading, in the plan and in the trainer's reports
    "full reading: cross-gradients + broadcast, paper noise; approximate, not an upper "
    "bound: it counts the neighbours' cross-gradient noise (eq. 40) as covering the "
    "broadcast, but under its own premise an observer sees those cross-gradients and so knows "
    "that noise (the strict reading counts the node's own noise only)")


DPDL_READINGS: tuple[str, ...] = ("paper", "full", "strict")


def dpdl_noise_ratios(
    n_agents: int, degree: int, alpha: float = 1.0, kappa: float = 1.0
) -> dict[str, float]:
    """Per-unit-sigma noise multipliers of DPDL's two releases.

    Uniform weights w_ij = 1/degree over the closed neighbourhood N_i (|N_i| = degree, self
    included). With noise sigma * C per message:
    - A (cross-gradients, n_i - 1 messages from one batch, jointly): z_A = sigma / sqrt(degree - 1).
    - B (broadcast x~, v~ via g~^i): sensitivity C (1/(sqrt(w_ii) N) + alpha kappa) (eq. 53);
      noise sigma C sqrt(sum_j 1/w_ij) / N (paper, eq. 40) or sigma C / (sqrt(w_ii) N) (strict:
      only the node's own z^ii protects against an observer of all cross-gradients).

    Returns:
        {"A": z_A/sigma (inf without neighbours), "B_paper": ..., "B_strict": ...}.
    """
    n = check_count(n_agents, "n_agents")
    deg = check_count(degree, "degree")
    if deg > n:
        raise ConfigError(f"degree must be <= n_agents={n}, got {deg}")
    check_positive(alpha, "alpha"), check_positive(kappa, "kappa")
    sens_b = math.sqrt(deg) / n + alpha * kappa  # 1/sqrt(w_ii) = sqrt(degree)
    return {
        "A": math.inf if deg == 1 else 1 / math.sqrt(deg - 1),
        "B_paper": (deg / n) / sens_b,  # sqrt(sum_j 1/w_ij) = sqrt(deg * deg)
        "B_strict": (math.sqrt(deg) / n) / sens_b,
    }


def dpdl_joint_ratio(ratios: dict[str, float], reading: str) -> float:
    """Noise multiplier per unit sigma of the round's release under a reading.

    `paper`: mechanism B only, paper noise (the object of the paper's proof, eqs. 39-55).
    `full`: A and B, paper noise. `strict`: A and B, strict noise (privbench's honest reading).
    A and B use the SAME Poisson batch and independent noise, so they form one subsampled
    Gaussian with 1/z^2 = 1/z_A^2 + 1/z_B^2 (composing them as independently subsampled would
    under-count: e^(a+b) - 1 >= (e^a - 1) + (e^b - 1)).
    """
    reading = check_choice(reading, "DPDL reading", DPDL_READINGS)
    if reading == "paper":
        return ratios["B_paper"]
    b = ratios["B_paper"] if reading == "full" else ratios["B_strict"]
    return 1 / math.sqrt(ratios["A"] ** -2 + b**-2)


@dataclass(frozen=True)
class DPDLPrivacy:
    """The noise DPDL uses and every node's ledger inputs.

    Attributes:
        sigma: (n,) noise multipliers sigma_i (noise std sigma_i C on each clipped sum).
        sample_rates: (n,) q_i.
        multipliers: per node and reading, the release's noise multiplier z.
        probe_multipliers: the same against one sample's direct effect on the release (kappa =
            0): the part of the sensitivity C (coef_ii + alpha kappa) that one round's
            replay reaches (the calibration term alpha kappa C is a bound over every state,
            eq. (53)); what the mechanism audit measures the drawn noise against.
    """

    sigma: tuple[float, ...]
    sample_rates: tuple[float, ...]
    multipliers: tuple[dict[str, float], ...]
    probe_multipliers: tuple[dict[str, float], ...] = ()


@dataclass(frozen=True)
class DPDLGraph:
    """What DPDL's accounting reads of the graph and of the defense's settings.

    Attributes:
        ws: (n, n) mixing matrices, one per graph period; N_i = support of row i (self
            included). Privacy uses each node's worst period.
        alpha: calibration weight of eq. (17); kappa: Lipschitz factor of eq. (53).
        cross_coef: "inv_sqrt_w_over_N" (eq. 17) or "w" (plain w_ij).
    """

    ws: tuple[np.ndarray, ...]
    alpha: float
    kappa: float = 1.0
    cross_coef: str = "inv_sqrt_w_over_N"

    @classmethod
    def uniform(cls, n_agents: int, degree: int, alpha: float, kappa: float) -> DPDLGraph:
        """Every node with `degree` closed neighbours (self included), weights 1/degree."""
        w = np.zeros((n_agents, n_agents))
        for k in range(degree):
            w[np.arange(n_agents), (np.arange(n_agents) + k) % n_agents] = 1 / degree
        return cls((w,), alpha, kappa)


def cross_coefficient(w: Tensor | np.ndarray, n: int, kind: str) -> Tensor | np.ndarray:
    """Coefficient of a received gradient in eq. (17): 1/(sqrt(w) N) (paper) or w (ablation),
    of mixing weights w (a tensor in the round, an array in the accounting)."""
    if kind != "inv_sqrt_w_over_N":
        return w
    return 1.0 / ((w.sqrt() if isinstance(w, Tensor) else np.sqrt(w)) * n)


def dpdl_node_parts(graph: DPDLGraph, w: np.ndarray, sigma: np.ndarray,
                    kappa: float | None = None) -> list[dict[str, float]]:
    """Per node, the noise multipliers of its two releases (`dpdl_joint_ratio`'s parts).

    Node i's data enters mechanism A (its n_i - 1 cross-gradients, one batch: z_A =
    sigma_i / sqrt(n_i - 1)) and mechanism B (x~_i, v~_i via g~^i: sensitivity
    C (coef_ii + alpha kappa); noise C sqrt(sum_j coef_ij^2 sigma_j^2) in the paper reading,
    eq. (40), or C coef_ii sigma_i in the strict one).

    Args:
        w: (n, n) mixing matrix of one period; sigma: (n,) noise multipliers (> 0).
        kappa: the sensitivity's Lipschitz factor (None: the graph's).
    """
    n = w.shape[0]
    sig = np.asarray(sigma, dtype=np.float64)
    kappa = graph.kappa if kappa is None else kappa
    out = []
    for i in range(n):
        sup = w[i] > 0
        coef = cross_coefficient(w[i][sup].astype(np.float64), n, graph.cross_coef)
        own = float(cross_coefficient(np.float64(w[i, i]), n, graph.cross_coef))
        sens = own + graph.alpha * kappa
        deg = int(sup.sum())
        out.append({"A": math.inf if deg == 1 else float(sig[i]) / math.sqrt(deg - 1),
                    "B_paper": float(np.sqrt(np.square(coef * sig[sup]).sum())) / sens,
                    "B_strict": own * float(sig[i]) / sens})
    return out


def dpdl_multipliers(graph: DPDLGraph, sigma: np.ndarray,
                     kappa: float | None = None) -> list[dict[str, float]]:
    """Per node and reading, the joint noise multiplier of its round release, minimised over
    the graph's periods."""
    per = [[{r: dpdl_joint_ratio(p, r) for r in DPDL_READINGS}
            for p in dpdl_node_parts(graph, w, sigma, kappa)] for w in graph.ws]
    return [{r: min(p[i][r] for p in per) for r in DPDL_READINGS} for i in range(len(sigma))]


def plan_dpdl_nodes(graph: DPDLGraph, rates: Sequence[float], epsilon: float, delta: float,
                    rounds: int, *, reading: str = "strict", accountant: str = "rdp",
                    options: AccountantOptions = DEFAULT_OPTIONS, sampling: str = "poisson",
                    sigma: float | None = None, sigma_rule: str = "max") -> DPDLPrivacy:
    """DPDL's noise multipliers (unless `sigma` is fixed) meeting `epsilon` under `reading`.

    sigma_rule "max": one sigma, the smallest with max_i eps_i <= epsilon.
    "per_node": start from sigma_i = z*(q_i) / r_i, each node calibrated as if its neighbours
    used its own sigma (r_i: its multiplier per unit of a uniform sigma), then raise only the
    nodes still under target, sigma_i <- sigma_i max(1, z*(q_i) / z_i(sigma)), until none is
    (z_i is increasing in every sigma_j and at least coef_ii sigma_i / sens_i, so this is
    monotone and bounded); a last common factor >= 1 removes the tolerance. (Lowering sigmas
    as well is ill-posed in the paper reading: a hub's noise comes from its neighbours, so its
    own sigma_i would shrink to 0.)

    Args:
        rates: (n,) the nodes' sample rates q_i; sampling: an accounting sampling model.
        accountant, options: what calibrates (the paper reading is RDP by the caller's choice).
    """
    n = len(rates)
    ones = np.ones(n)
    unit = dpdl_multipliers(graph, ones)
    if sigma is not None:
        sig = np.full(n, float(sigma))
    elif sigma_rule == "max":
        sig = ones * calibrate_max_node(epsilon, delta, rounds, rates, [u[reading] for u in unit],
                                        accountant, options, sampling)
    else:
        target = {q: calibrate_max_node(epsilon, delta, rounds, [q], [1.0], accountant, options,
                                        sampling) for q in set(rates)}
        z_star = np.array([target[q] for q in rates])
        sig = z_star / np.array([u[reading] for u in unit])  # as if neighbours matched
        for _ in range(1000):  # raise only the nodes under target (monotone, bounded)
            z = np.array([m[reading] for m in dpdl_multipliers(graph, sig)])
            if np.max(z_star / z) <= 1 + 1e-6:
                break
            sig = sig * np.maximum(z_star / z, 1.0)
        sig = sig * max(1.0, float(np.max(z_star / z)))  # never under target
    zero = tuple({r: 0.0 for r in DPDL_READINGS} for _ in range(n))
    mult, probe = ((zero, zero) if not sig.all() else
                   (tuple(dpdl_multipliers(graph, sig, k)) for k in (graph.kappa, 0.0)))
    return DPDLPrivacy(tuple(float(s) for s in sig), tuple(rates), mult, probe)


DPDL_NOTES = {
    "paper": "paper reading: broadcast x~, v~ only, neighbours' noise counted (eq. 40)",
    "full": DPDL_FULL_NOTE,
    "strict": "strict reading: cross-gradients + broadcast, only the node's own noise"}


def dpdl_report(z: float, q: float, rounds: int, delta: float, reading: str, accountant: str,
                options: AccountantOptions, sampling: str = "poisson",
                uncovered: tuple[str, ...] = (), node: int = 0,
                note: str = "") -> EpsilonReport:
    """One node's report under one reading: its round release's multiplier `z` at rate `q`,
    composed over `rounds` (the paper reading a paper-mode report, the `full` one approximate;
    `note` appended to the reading's note, which makes the report approximate); z = 0: no
    noise, epsilon infinite."""
    mode = "calibrated" if reading == "strict" else "paper"
    rep = gaussian_report(z, q, rounds, delta, accountant, mode, sampling,
                          DPDL_NOTES[reading] + note, options, node, uncovered)
    if z == 0:
        return rep
    return replace(rep, approximate=rep.approximate or bool(note) or reading == "full")


def plan_dpdl(
    epsilon: float, delta: float, rounds: int, sample_rate: float, accountant: str = "pld", *,
    n_agents: int = 10, degree: int | None = None, alpha: float = 1.0, kappa: float = 1.0,
    sampling: str = "poisson",
    calibrate_with: str = "calibrated", options: AccountantOptions = DEFAULT_OPTIONS,
    noise_factor: float = 1.0,
) -> PrivacyPlan:
    """DPDL: noise N(0, sigma^2 C^2) on every cross-gradient and self-gradient (eqs. 10, 13).

    `degree` is |N_i| including the agent itself (default n_agents: fully connected), with
    uniform weights 1/degree (`DPDLGraph.uniform`; the defense plans its own graph with
    `plan_dpdl_nodes`). Readings: paper = broadcast only, paper noise, RDP;
    calibrated = `strict` (cross-gradients + broadcast, own noise only) with `accountant`;
    a third report gives the `full` reading (cross-gradients + broadcast, paper noise), flagged
    approximate (`DPDL_FULL_NOTE`).
    """
    req = check_plan_request(epsilon, delta, rounds, sample_rate, accountant,
                             GAUSSIAN_PLAN_ACCOUNTANTS, calibrate_with)
    eps, delta, rounds, q, accountant = req
    sampling = check_choice(sampling, "sampling", SAMPLINGS)
    n, deg = check_count(n_agents, "n_agents"), check_count(
        n_agents if degree is None else degree, "degree")
    if deg > n:
        raise ConfigError(f"degree must be <= n_agents={n}, got {deg}")
    graph = DPDLGraph.uniform(n, deg, check_positive(alpha, "alpha"),
                              check_positive(kappa, "kappa"))
    reading, acc = ("strict", accountant) if calibrate_with == "calibrated" else ("paper", "rdp")
    sigma = plan_dpdl_nodes(graph, [q] * n, eps, delta, rounds, reading=reading,
                            accountant=acc, options=options, sampling=sampling).sigma[0]
    sigma *= checked_factor(noise_factor)
    r = dpdl_multipliers(graph, np.ones(n))[0]
    parts = dpdl_node_parts(graph, graph.ws[0], np.ones(n))[0]

    def report(reading: str, accountant: str, uncovered: tuple[str, ...] = ()
               ) -> EpsilonReport:
        return dpdl_report(sigma * r[reading], q, rounds, delta, reading, accountant, options,
                           sampling, uncovered)

    reports = [report("paper", "rdp", ("cross_gradient",)), report("strict", accountant),
               report("full", accountant)]
    noise = {"sigma": sigma, "z_cross_gradient": sigma * parts["A"],
             "z_broadcast_paper": sigma * parts["B_paper"],
             "z_broadcast_strict": sigma * parts["B_strict"]}
    return assemble_plan("dpdl", noise, reports, calibrate_with, req, (
        "one Poisson batch per round feeds all cross-gradients and the self-gradient",
    ), sigma, "noise multiplier sigma_t of every clipped sum (std sigma_t C)", noise_factor)


