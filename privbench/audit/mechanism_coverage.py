"""The mechanism audit's coverage of what is sent: each parameter tensor (or block of
coordinates) of a covered message must carry the noise the rest of the message carries
(`coverage`), and every message of every kind is checked against what the defense declares of it
on a neighbouring dataset (`declared_kinds`).

The measured noise multiplier reads the noise of a whole message, so a block left unnoised (say
the biases, about 1 % of the coordinates) moves it by under 1 %, while the block itself is
released without protection. Each covered message's noise (noisy - clean, see
`privbench.audit.mechanism.noise_rows`) is split into blocks: a message laid out as the model's
parameters (all, or its first layers) by parameter tensor, any other into `SPLIT` contiguous
blocks. Each block is tested against the rest
of its message, one-sided (less noise than the rest), at the audit's level divided by the
number of blocks (Bonferroni), with the test of the noise's family:

* Gaussian: the ratio of mean squares is F(d_b, d_r) distributed when both carry one std;
* Laplace: the ratio of mean absolute values, 2 sum |x| / b ~ chi2(2 d), so F(2 d_b, 2 d_r);
* randomized response: the block's flip count against a binomial at the rest's flip rate, among
  the coordinates both replays set (`noise_rows`' live coordinates).

Together with the measured noise multiplier of the whole message (which holds the message's
noise to the ledger's), each block is then held to the ledger's scale.
"""

from __future__ import annotations

import itertools
from typing import Any

import torch
from torch import Tensor

from privbench.audit.mechanism_replay import RoundReplays, _kind, _sent

SPLIT = 8  # contiguous blocks of a message that is not laid out as the model's parameters
MIN_BLOCK = 64  # coordinates a contiguous block needs (smaller messages are one block)


def blocks(size: int, layout: list[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
    """The blocks of a message of `size` coordinates: the parameter tensors of `layout`
    ((name, start, stop), the model's flat order) where the message has the size of the model
    or of its first tensors (a defense that shares its first layers), else up to SPLIT
    contiguous blocks of at least MIN_BLOCK coordinates."""
    stops = [stop for _, _, stop in layout]
    if size in stops:
        return layout[:stops.index(size) + 1]
    parts = max(1, min(SPLIT, size // MIN_BLOCK))
    edges = torch.linspace(0, size, parts + 1).round().long().tolist()
    return [(f"coordinates {a}-{b - 1}", a, b) for a, b in itertools.pairwise(edges)]


def _p_below(family: str, diff: Tensor, live: Tensor, block: slice) -> tuple[float, float]:
    """(p-value that the block carries as much noise as the rest, block / rest noise ratio)."""
    from scipy.stats import binom, f

    inside = torch.zeros(diff.numel(), dtype=torch.bool)
    inside[block] = True
    if family == "rr":
        changed = diff != 0
        k_b, n_b = int((changed & live & inside).sum()), int((live & inside).sum())
        k_r, n_r = int((changed & live & ~inside).sum()), int((live & ~inside).sum())
        if n_b == 0 or n_r == 0 or k_r == 0:
            return 1.0, 1.0
        rate = k_r / n_r
        return float(binom.cdf(k_b, n_b, rate)), (k_b / n_b) / rate
    power = 2 if family == "gaussian" else 1  # mean square (Gaussian), mean |x| (Laplace)
    stat = diff.abs().pow(power)
    d_b, d_r = int(inside.sum()), int((~inside).sum())
    rest = float(stat[~inside].sum()) / d_r
    if rest == 0:
        return 1.0, 1.0
    ratio = float(stat[inside].sum()) / d_b / rest
    dof = 1 if family == "gaussian" else 2
    return float(f.cdf(ratio, dof * d_b, dof * d_r)), ratio ** (1 / power)


def coverage(rows: list[dict[str, Any]], kinds: dict[str, Any], layout: list[tuple[str, int, int]],
             family: str, level: float) -> tuple[dict[str, Any], list[str]]:
    """Every covered, noised message's blocks tested against the rest of it (module docstring):
    a summary per (kind, block) (the smallest p-value and noise ratio over the messages) and a
    finding per (kind, block) that carries less noise than the rest of its message."""
    worst: dict[tuple[str, str], dict[str, Any]] = {}
    tested = 0
    for r in rows:
        kind = kinds.get(r["kind"].split("@", 1)[0])
        diff, live = r["_diff"], r["_live"]
        if kind is None or not kind.covered or r["std"] == 0 or \
                not bool(torch.isfinite(diff).all()):
            continue
        parts = blocks(diff.numel(), layout)
        if len(parts) < 2:
            continue
        tested += 1
        for name, a, b in parts:
            p, ratio = _p_below(family, diff, live, slice(a, b))
            key = (r["kind"], name)
            cell = worst.setdefault(key, {"kind": r["kind"], "block": name,
                                          "share": (b - a) / diff.numel(), "messages": 0,
                                          "below": 0, "p": 1.0, "ratio": ratio,
                                          "first": None})
            cell["messages"] += 1
            cell["ratio"] = min(cell["ratio"], ratio)
            cell["p"] = min(cell["p"], p)
            if p < level / len(parts):
                cell["below"] += 1
                cell["first"] = cell["first"] or (r["node"], r["round"])
    findings = [f"{c['kind']} noise on {c['block']} ({100 * c['share']:.2g} % of the message) "
                f"is below the rest of the message's: x{c['ratio']:.2f} (node {c['first'][0]}, "
                f"round {c['first'][1]}; {c['below']} of {c['messages']} messages)"
                for c in worst.values() if c["below"]]
    blocks_ = sorted(worst.values(), key=lambda c: c["p"])
    return {"family": family, "messages": tested,
            "blocks": [{k: v for k, v in c.items() if k != "first"} for c in blocks_]}, findings


def _changed(a: Tensor, b: Tensor) -> float:
    """Largest |a - b| (coordinates non-finite alike in both count as equal; inf where the
    shapes differ)."""
    if a.shape != b.shape:
        return float("inf")
    same = (a == b) | (a.isnan() & b.isnan())
    return float((a - b)[~same].abs().max()) if bool((~same).any()) else 0.0


def declared_kinds(replays: list[RoundReplays], kinds: dict[str, Any], n: int
                   ) -> tuple[dict[str, Any], list[str]]:
    """Every message of every kind, from the Trainer contract alone (its declared `kinds` and
    what its rounds send): a kind sent that the defense does not declare, and a kind declared
    data-independent whose messages change between the clean replay and the same replay on a
    neighbouring dataset (one member of the probed node removed, noise off), are findings.

    Returns:
        the rounds replayed on a neighbour and, per kind, declared, data_dependent and the
        largest change the neighbour made to any of its messages (of any sender); the
        findings.
    """
    seen: dict[str, dict[str, Any]] = {}
    leaks: dict[str, list[str]] = {}  # kind -> each message that changed, described
    replayed = 0
    for rep in replays:
        logs = [log for log in (rep.noisy, rep.clean, rep.neighbour) if log is not None]
        for name in {_kind(k) for log in logs for _, k in log.records}:
            declared = kinds.get(name)
            seen.setdefault(name, {"declared": declared is not None,
                                   "data_dependent": getattr(declared, "data_dependent", None),
                                   "change": 0.0})
        if rep.neighbour is None:
            continue
        replayed += 1
        for node in range(n):
            clean, other = _sent(rep.clean, node), _sent(rep.neighbour, node)
            for key in clean.keys() | other.keys():
                row = seen[_kind(key[0])]
                change = (_changed(clean[key], other[key]) if key in clean and key in other
                          else float("inf"))  # sent in one replay only
                row["change"] = max(row["change"], change)
                if change > 0 and row["declared"] and not row["data_dependent"]:
                    leaks.setdefault(key[0], []).append(
                        f"node {node}'s, when one member of node {rep.probed}'s data is removed "
                        f"(round {rep.round}, noise off: by up to {change:.3g})")
    findings = [f"{kind} messages, declared data-independent, change with the data: {found[0]}"
                + (f"; {len(found) - 1} more" if len(found) > 1 else "")
                for kind, found in leaks.items()]
    findings += [f"{name} messages are sent, but the defense does not declare that kind"
                 for name, row in seen.items() if not row["declared"]]
    return {"neighbour_rounds": replayed, "kinds": seen}, findings
