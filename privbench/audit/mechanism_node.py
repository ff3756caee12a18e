"""The mechanism audit's node-level reading: a node-level claim (its whole data) measured from each
node's normalised messages, per round. The sensitivity is the L1 distance between two nodes'
clean releases (replacing one node's data by another's, against the ledger's realized S), or,
where the ledger's S is a clip bound, the distance one saturating sample moves the probed node's
release (against the bound)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from privbench.audit.mechanism_epsilon import (
    PartlyMeasured,
    _claim,
    _voided,
)
from privbench.audit.mechanism_replay import RoundReplays, _kind, _sent
from privbench.engine.messages import MessageLog
from privbench.errors import NotApplicable
from privbench.results.records import MeasuredEpsilon


def _normalised(log: MessageLog, node: int, kinds: dict[str, Any]) -> Tensor | None:
    """Node's covered release divided by its push-sum weight on the same edge (both carry the
    edge's mixing weight P_ji, which cancels): s_i / a_i, flattened; None if not sent."""
    sent = _sent(log, node)
    for (kind, to), payload in sent.items():
        if kinds[_kind(kind)].covered and kinds[_kind(kind)].data_dependent:
            weight = next((w for (k, j), w in sent.items()
                           if j == to and not kinds[_kind(k)].data_dependent), None)
            if weight is not None and float(weight.abs().max()) > 0:
                return payload / weight.flatten()[0]
            return payload
    return None


def _laplace_interval(abs_sum: float, d: int, level: float) -> tuple[float, float]:
    """Interval of a Laplace scale b from the sum of d absolute draws (2 sum / b ~ chi2(2d))."""
    from scipy.stats import chi2

    if d == 0 or abs_sum == 0:
        return 0.0, 0.0
    return (2 * abs_sum / chi2.ppf(1 - level / 2, 2 * d),
            2 * abs_sum / chi2.ppf(level / 2, 2 * d))


def _node_round(rep: RoundReplays, kinds: dict[str, Any], n: int, level: float,
                own: bool = False) -> dict[str, Any] | None:
    """One audited round of a node-level mechanism: the sensitivity the releases expose (the
    largest L1 distance between two nodes' clean releases: replacing one node's data by
    another's) and the Laplace scale drawn (mean |noise|), in the releases' units: of every
    node's release, or with `own` of the probed node's alone (its sensitivity is read in its
    own release's units, divided by its own push-sum weight)."""
    clean = [_normalised(rep.clean, i, kinds) for i in range(n)]
    noisy = [_normalised(rep.noisy, i, kinds) for i in range(n)]  # type: ignore[arg-type]
    if any(c is None for c in clean) or any(v is None for v in noisy):
        return None
    rows = torch.stack(clean)  # (n, d)
    diff = torch.stack(noisy) - rows  # (n, d)
    if not bool(torch.isfinite(rows).all() and torch.isfinite(diff).all()):
        return None
    if own:
        diff = diff[rep.probed:rep.probed + 1]  # (1, d)
    s = float(torch.cdist(rows[None], rows[None], p=1.0).amax())
    abs_sum = float(diff.abs().sum())
    lo, hi = _laplace_interval(abs_sum, diff.numel(), level)
    return {"round": rep.round, "sensitivity": s, "scale": abs_sum / diff.numel(),
            "scale_interval": [lo, hi]}


def _probe_sensitivity(rep: RoundReplays, kinds: dict[str, Any]
                       ) -> tuple[float, float] | None:
    """The L1 distance one record moves the probed node's normalised release: the canary base
    vs the canary pair (the largest over the probe's scales), and a lower end that allows for
    the messages' float32 rounding (a coordinate's difference is known to one spacing of the
    float32 grid at its value, which at a release of magnitude 64 is a third of a clipped
    coordinate's move: each value is rounded to within half a spacing); None without a probe.
    Under a clip bound this is what the node's data can change, which the bound caps."""
    if rep.remove is None or not rep.saturate:
        return None
    base = _normalised(rep.remove, rep.probed, kinds)
    moved = [_normalised(log, rep.probed, kinds) for log in rep.saturate]
    if base is None or any(m is None for m in moved):
        return None
    best = max(moved, key=lambda m: float((m - base).abs().sum()))  # type: ignore[operator]
    diff = (best - base).abs()
    top = torch.maximum(best.abs(), base.abs()).float()  # (d,) both values lie within
    grid = (torch.nextafter(top, torch.full_like(top, math.inf)) - top).double()  # its spacing
    return float(diff.sum()), float((diff - grid).clamp(min=0).sum())


def node_level_epsilon(replays: list[RoundReplays], kinds: dict[str, Any],
                       ledgers: list[dict[str, Any] | None], trainer: Any, voided: bool,
                       level: float) -> MeasuredEpsilon:
    """A node-level Laplace ledger recomposed with what was measured: per audited round the
    exposed sensitivity S and the drawn scale b (per-round ε = S / b, Dwork and Roth 2014,
    Thm. 3.6) beside the ledger's own (its S_real / scale, the realized reading); the claim
    scaled by the measured / ledger ratio of the round whose ratio is largest at the lower end
    of its interval (its composition is linear in the per-round ε; the round that resolves the
    most: rounding blurs a probed sensitivity where a release's values are large), with the
    interval of the scale and of the probed sensitivity.

    Raises:
        NotApplicable: the ledger reports no sensitivity trace; `PartlyMeasured` (with the
            rounds read) where no round gives a finite reading or the claim is not finite.
    """
    if voided:
        return _voided(ledgers)
    trace = trainer.sensitivity_trace() or {}
    real, scale = trace.get("S_real", []), trace.get("scale", [])
    claims = [(c, i) for i, led in enumerate(ledgers) if (c := _claim(led)) is not None]
    if not claims or not real:
        raise NotApplicable("the node-level ledger reports no per-round sensitivity and scale "
                            "(`sensitivity_trace`) to measure against")
    claimed, node = max(claims)
    # a clip bound is the ledger's S itself (`S_used`), and what one node's data moves its
    # release is measured by the probes; otherwise the realized S_real between two nodes
    bound = any((led or {}).get("sensitivity_basis") == "clip_bound" for led in ledgers)
    ledger_s = trace.get("S_used", []) if bound else real
    rounds, worst = [], None
    for rep in replays:
        row = _node_round(rep, kinds, len(ledgers), level, own=bound)
        t = rep.round
        low = row["sensitivity"] if row is not None else None
        if row is not None and bound:
            probed = _probe_sensitivity(rep, kinds)
            row["sensitivity"], low = probed if probed is not None else (None, None)
            row["sensitivity_low"] = low
        if row is None or row["sensitivity"] is None or t >= len(ledger_s) or not scale[t] \
                or not math.isfinite(ledger_s[t]):
            continue
        ledger_eps, lo, hi = ledger_s[t] / scale[t], *row["scale_interval"]
        row.update(ledger_sensitivity=ledger_s[t], ledger_scale=scale[t],
                   epsilon=row["sensitivity"] / row["scale"] if row["scale"] else math.inf,
                   epsilon_interval=[low / hi if hi else math.inf,
                                     row["sensitivity"] / lo if lo else math.inf],
                   ledger_epsilon=ledger_eps)
        rounds.append(row)
        if ledger_eps > 0:
            ratio = [row["epsilon"] / ledger_eps, *(e / ledger_eps
                                                     for e in row["epsilon_interval"])]
            if worst is None or (ratio[1], ratio[0]) > (worst[1], worst[0]):
                worst, at = ratio, row
    if worst is None or not math.isfinite(claimed):
        raise PartlyMeasured("no audited round released a finite, noised node-level vector "
                             "with a finite realized sensitivity (a diverged run, or no noise)"
                             if math.isfinite(claimed) else "the ledger claims no finite ε",
                             {"rounds": rounds})
    return {"node": node, "epsilon": claimed * worst[0],
            "interval": [claimed * worst[1], claimed * worst[2]], "claimed": claimed,
            "ratio": worst[0], "ratio_interval": worst[1:], "rounds": rounds,
            "basis": f"round {at['round']}: sensitivity {at['sensitivity']:.4g} vs "
                     f"{'the clip bound' if bound else 'realized'} "
                     f"{at['ledger_sensitivity']:.4g}, Laplace scale {at['scale']:.4g} vs "
                     f"{at['ledger_scale']:.4g}",
            "accountant": "the ledger's composition, scaled by the largest per-round ratio of "
                          "measured to ledger ε (S / b)"}
