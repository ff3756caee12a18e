"""The attacker's rebuild of push-sum releases from observed messages: a victim's pre-step model,
its mixing of observed senders, and its released gradient (a message difference over the public
step size)."""

from __future__ import annotations

import torch
from torch import Tensor

from privbench.errors import NotApplicable
from privbench.threat.observation import Observation


def observed_row(obs: Observation, t: int, kind: str, sender: int) -> Tensor:
    """Node `sender`'s round-t message of `kind` as the threat model observes it.

    Raises:
        NotApplicable: when that message is not observed (or not recorded).
    """
    rec = obs.log.get(t, kind)
    row = rec.sent_by(sender) if rec is not None else None
    if row is None:
        raise NotApplicable(f"node {sender}'s round-{t} {kind!r} message is not observed by the "
                            f"{obs.threat.kind} threat model (or not recorded)")
    return row


def push_sum_pre_step(obs: Observation, victim: int, t: int, model_kind: str = "model",
                      weight_kind: str = "weight") -> tuple[Tensor, Tensor]:
    """Reconstruct a victim's push-sum state (x_i^t, w_i^t) before its round-t local step.

    x_i^t = sum_k P^{t-1}_{ik} x_k^{t-1/2}: the victim's own half-step message (its self-share is
    not sent, but the same payload is broadcast to its out-neighbours) and every in-neighbour's.
    Round 0 starts from the shared public initialisation (x^0, w = 1).

    Raises:
        NotApplicable: when the threat model does not observe every term.
    """
    if t == 0:
        if obs.x0 is None:
            raise NotApplicable("the initial model is not known to this threat model")
        return obs.x0, torch.ones((), dtype=obs.x0.dtype)
    senders = [victim, *obs.topology.in_neighbours(t - 1, victim)]
    return observed_mix(obs, victim, t - 1, obs.topology.mixing(t - 1, "column"), senders,
                        model_kind, weight_kind)


def observed_mix(obs: Observation, victim: int, t: int, p: Tensor, senders: list[int],
                 model_kind: str = "model",
                 weight_kind: str = "weight") -> tuple[Tensor, Tensor]:
    """sum_k P_ik x_k and sum_k P_ik w_k over `senders`' observed round-t messages.

    Args:
        p: (n, n) the round's (public) mixing matrix.
        senders: the nodes whose round-t messages the victim combines (itself included).

    Raises:
        NotApplicable: when a sender's message is not observed.
    """
    xs, ws = obs.log.get(t, model_kind), obs.log.get(t, weight_kind)
    if xs is None or ws is None:
        raise NotApplicable(f"round {t} messages ({model_kind}, {weight_kind}) are not "
                            "observed/recorded, so the victim's pre-step model is unknown")
    x = w = None
    for k in senders:
        xk, wk = xs.sent_by(k), ws.sent_by(k)
        if xk is None or wk is None:
            raise NotApplicable(f"node {k}'s round-{t} message into node {victim} is not "
                                f"observed by the {obs.threat.kind} threat model")
        x = p[victim, k] * xk if x is None else x + p[victim, k] * xk
        w = p[victim, k] * wk[0] if w is None else w + p[victim, k] * wk[0]
    return x, w  # type: ignore[return-value]


def push_sum_release(obs: Observation, victim: int, t: int, lr: float,
                     model_kind: str = "model") -> tuple[Tensor, Tensor]:
    """What a push-sum node released in round t, as a step: ((x_i^t - x_i^{t+1/2}) / lr, z_i^t).

    The pre-step numerator x_i^t and weight w_i^t come from `push_sum_pre_step`; the half-step
    numerator x_i^{t+1/2} is the victim's own round-t message.

    Raises:
        NotApplicable: when any of these messages is not observed.
    """
    x_pre, w_pre = push_sum_pre_step(obs, victim, t, model_kind)
    x_half = observed_row(obs, t, model_kind, victim)
    return (x_pre - x_half) / lr, x_pre / w_pre


def _broadcast_model(obs: Observation, victim: int, t: int, model_kind: str,
                     weight_kind: str) -> tuple[Tensor, Tensor] | None:
    """The victim's round-t de-biased half-step model x_i^{t+1/2} / w_i^t and w_i^t, or None."""
    xs, ws = obs.log.get(t, model_kind), obs.log.get(t, weight_kind)
    x = xs.sent_by(victim) if xs is not None else None
    w = ws.sent_by(victim) if ws is not None else None
    if x is None or w is None:
        return None
    return x / w.reshape(-1)[0], w.reshape(-1)[0]


def push_sum_message_difference(obs: Observation, victim: int, t: int, lr: float,
                                model_kind: str = "model",
                                weight_kind: str = "weight") -> tuple[Tensor, Tensor, int]:
    """What one observer of the victim's own push-sum messages derives about its round-t step.

    With u_t = x_i^{t+1/2} / w_i^t the de-biased model the victim broadcast in round t and s < t
    the previous round whose message the observer saw, u_s - u_t = sum of the victim's steps in
    rounds s+1..t (lr g / w each) plus the change its neighbours' mixing brought. So

        G~_t = w_i^t (u_s - u_t) / (lr (t - s))       at params u_s

    estimates the victim's mean batch gradient over those rounds (exact only without mixing: the
    neighbours' share is what a lone observer cannot remove; `exact=False` views).

    Returns:
        (G~_t (d,), the params u_s (d,), s).

    Raises:
        NotApplicable: when the victim's round-t message, or any earlier one, is not observed.
    """
    now = _broadcast_model(obs, victim, t, model_kind, weight_kind)
    if now is None:
        raise NotApplicable(f"node {victim}'s round-{t} {model_kind} message is not observed "
                            f"by the {obs.threat.kind} threat model")
    for s in range(t - 1, -1, -1):
        before = _broadcast_model(obs, victim, s, model_kind, weight_kind)
        if before is not None:
            return now[1] * (before[0] - now[0]) / (lr * (t - s)), before[0], s
    raise NotApplicable(f"no earlier message of node {victim} than round {t} is observed, so no "
                        "difference of its messages exists")
