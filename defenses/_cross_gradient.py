"""Cross-gradients g_ij = grad f_i(x_j), sent by i to each neighbour j, shared by DPDL and DP-CGA:
the rows a round computes them on, and gradient views from the observed messages."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from privbench.errors import NotApplicable
from privbench.threat.observation import GradientView, Observation


def cross_gradient_rows(x_recv: Tensor, x: Tensor, src: Tensor,
                        dst: Tensor) -> tuple[Tensor, Tensor]:
    """The round's gradient rows: one per directed edge i -> j (sender i's data at receiver j's
    model), then one per node (its own data at its own model).

    Args:
        x_recv: (n, d) the models as received; x: (n, d) the nodes' own models.
        src, dst: (E,) every edge's sender and receiver.

    Returns:
        (E + n,) the data owner of every row and (E + n, d) the model it is taken at.
    """
    owner = torch.cat([src, torch.arange(x.shape[0], device=src.device)])
    return owner, torch.cat([x_recv[dst], x])


def cross_gradient_view(obs: Observation, victim: int, t: int,
                        source: Callable[[int, int], str]) -> GradientView:
    """The victim's round-t cross-gradient message as a gradient view at the receiver's model.

    Shared by DPDL and DP-CGA (both send g_ij = grad f_i(x_j) to each neighbour j); `source(i, j)`
    names the message for the view's provenance line.
    """
    rec = obs.log.get(t, "cross_grad")
    if rec is None:
        raise NotApplicable(f"round-{t} cross_grad messages are not observed/recorded")
    hit = torch.nonzero(rec.edges[:, 0] == victim).flatten()
    if not len(hit):
        raise NotApplicable(f"no cross_grad sent by node {victim} in round {t} is observed")
    models = obs.log.get(t, "model")
    for e in hit.tolist():
        j = int(rec.edges[e, 1])
        x_j = models.sent_by(j) if models is not None else None
        if x_j is None and t == 0 and obs.x0 is not None:
            x_j = obs.x0  # round 0: every model is the shared public initialisation
        if x_j is not None:
            return GradientView(victim, t, x_j, rec.payload[e], "gradient", None,
                                obs.run.batch_size, source(victim, j))
    raise NotApplicable(f"the receivers' round-{t} model messages are not observed")
