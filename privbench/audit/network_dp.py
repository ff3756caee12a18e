"""Pairwise network DP: the privacy loss of one node towards a set of curious nodes.

Cyffers & Bellet, "Privacy Amplification by Decentralization", AISTATS 2022, and Cyffers, Even,
Bellet, Massoulie, "Muffliato: Peer-to-Peer Privacy Amplification for Decentralized
Optimization", NeurIPS 2022, define network DP: node u's loss towards node v (or a set) counts
only what v observes, and for gossip with local Gaussian noise it falls with the graph distance,
because what reaches v from u is mixed with the other nodes' noise.

We compute it for every linear-gossip defense (`privbench.threat.gossip_inversion.LinearGossip`)
from the observer set's exact view rather than from Muffliato's closed form (its theorem is for
symmetric gossip averaging with one noise draw per value; ours run one gossip step per noisy
release, push-sum included). Release s of node x is g_x^s + N(0, (z_x^s C / B)^2 I) and one sample
of u moves g_u^s by at most C / B (per-sample clipping). Every observed message is linear in the
releases (`build_system`, one unknown per node and round), so the observers' whole view is K (g +
noise), K (R, n S): a Gaussian mechanism. Whitening the noise (K~ = K diag(z)), a change delta of
u's releases shifts the view by K~ delta~ with delta~_s = delta_s / z_u^s, and

    mu^2 = max delta~' P_uu delta~ <= min(sum_{s, s'} |P_uu[s, s']| / (z_u^s z_u^s'),
                                          lambda_max(P_uu) sum_s 1 / z_u^s^2),

P = K~^+ K~ the projection on K~'s row space and P_uu its block on u's S releases (the bound
lets every round's change point the same way, the worst case). An eavesdropper identifies every
release (P_uu = I) and mu^2 = sum_s 1 / z_u^s^2: local DP without subsampling. A far observer
sees u's releases only mixed with everybody's noise of every round: P_uu is small and so is mu
(since P_uu <= I, never above the eavesdropper's).
The number is read as epsilon at the run's delta through mu-GDP.

Assumptions (reported with every number): (i) the observers see exactly the messages sent to
them, over every round of the run; (ii) the victim's sample is in every round's batch (no
amplification by subsampling: conservative); (iii) the releases are treated as a non-adaptive
linear Gaussian mechanism: as in Muffliato's analysis, that later honest releases depend on
noise the observers did not see is not charged; (iv) the worst-case bounds above. On D-PSGD-DP
(ring of 8, 50 rounds, eps = 1) mu falls from 0.90 (eavesdropper) to 0.46, 0.34, 0.29 for one
observer 2, 3, 4 hops away. Assumption
(iii) is not proven for these algorithms, so this is reported as a third epsilon beside the paper's
and the calibrated (local, subsampled) one, which remains the guarantee; `epsilon` is the
minimum of the two.
"""

from __future__ import annotations

from typing import TypedDict

import numpy as np

from privbench.accounting.gdp import gdp_epsilon
from privbench.errors import NotApplicable
from privbench.threat.gossip_inversion import LinearGossip, build_system
from privbench.threat.observation import ThreatModel
from privbench.topology import Topology

ASSUMPTIONS = ("(i) the observers see the messages sent to them in every round",
               "(ii) the victim's sample is in every batch (no subsampling amplification)",
               "(iii) releases treated as a non-adaptive linear Gaussian mechanism (as in "
               "Muffliato; the dependence of later releases on unseen noise is not charged)",
               "(iv) worst-case alignment of the per-round changes")
RANK_RTOL = 1e-9


def observed_pairs(topology: Topology, threat: ThreatModel, rounds: int) -> list[tuple[int, int]]:
    """The (sender, round) messages a threat model receives over `rounds` message rounds."""
    n = topology.n
    if threat.kind == "eavesdropper":
        return [(j, t) for t in range(rounds) for j in range(n)]
    obs = set(threat.observers)
    out = []
    for t in range(rounds):
        senders = set(obs)
        for o in obs:
            senders.update(topology.in_neighbours(t, o))
        out += [(j, t) for j in sorted(senders)]
    return out


def network_mu(spec: LinearGossip, pairs: list[tuple[int, int]], victim: int,
               z: np.ndarray) -> tuple[float, float]:
    """(mu, visible): the GDP mu of the victim towards the observed messages `pairs`, and the
    mean diagonal of P_uu (the fraction of its releases the observers separate).

    Args:
        z: (S, n) noise multipliers of every node's release per round (all > 0).
    """
    last = max(t for _, t in pairs)
    system = build_system(spec, pairs, set(), 1, last, svd=False)
    cols = system.columns  # (n S, 2) (node, round)
    scale = z[cols[:, 1], cols[:, 0]]  # (n S,) noise std of each release, in units of C / B
    k = system.k * scale[None, :]  # (R, n S) whitened
    _, sv, vh = np.linalg.svd(k, full_matrices=False)
    r = int((sv > RANK_RTOL * sv[0]).sum()) if sv.size and sv[0] > 0 else 0
    mine = np.nonzero(cols[:, 0] == victim)[0]  # (S,) the victim's releases, by round
    basis = vh[:r][:, mine]  # (r, S)
    p_uu = basis.T @ basis  # (S, S)
    inv = 1.0 / scale[mine]  # (S,) whitened sensitivity per round
    # two valid bounds on max a' P_uu a over |a_s| <= inv_s: all rounds aligned (tight when
    # P_uu is nearly diagonal) and lambda_max ||inv||^2 (never above local DP: P_uu <= I)
    mu2 = min(float(inv @ np.abs(p_uu) @ inv),
              float(np.linalg.eigvalsh(p_uu)[-1]) * float(inv @ inv))
    return float(np.sqrt(mu2)), float(np.mean(np.diag(p_uu)))


class NetworkEpsilon(TypedDict, total=False):
    """A victim's network-DP epsilon towards a threat model (`pairwise_epsilon`), JSON-ready."""

    network_mu: float
    network_epsilon: float
    local_full_mu: float
    local_full_epsilon: float
    calibrated_epsilon: float | None
    delta: float
    visibility: float
    epsilon: float
    assumptions: list[str]


def pairwise_epsilon(spec: LinearGossip, topology: Topology, threat: ThreatModel, victim: int,
                     z: np.ndarray, delta: float, calibrated: float | None = None
                     ) -> NetworkEpsilon:
    """The victim's network-DP epsilon towards a threat model, beside its local epsilons.

    Args:
        z: (S, n) noise multipliers (the trainer's `release_noise()`).
        delta: the run's delta.
        calibrated: the victim's calibrated (local, subsampled) epsilon, if known.

    Returns:
        JSON-ready: network_mu / network_epsilon, local_full_epsilon (the same reading for an
        observer of every release: local DP without subsampling), calibrated_epsilon, epsilon
        (min of network and calibrated), visibility, the assumptions.

    Raises:
        NotApplicable: a release without noise (a multiplier that is 0 or not finite).
    """
    if not np.all(np.isfinite(z)) or np.any(z <= 0):
        raise NotApplicable("a release without noise: no network-DP bound")
    pairs = observed_pairs(topology, threat, spec.releases)
    mu, visible = network_mu(spec, pairs, victim, z)
    mu_local = float(np.sqrt(np.sum(1.0 / z[:, victim] ** 2)))
    net = gdp_epsilon(mu, delta) if mu > 0 else 0.0
    return {"network_mu": mu, "network_epsilon": net, "local_full_mu": mu_local,
            "local_full_epsilon": gdp_epsilon(mu_local, delta), "calibrated_epsilon": calibrated,
            "delta": delta, "visibility": visible,
            "epsilon": min(net, calibrated) if calibrated is not None else net,
            "assumptions": list(ASSUMPTIONS)}
