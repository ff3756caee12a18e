"""Replaying an audited round of a trained run from its snapshot: with and without noise, with
probes, recording what each node sent."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from privbench.engine.messages import MessageLog, RecordPolicy
from privbench.seeding import noise_off

# (kind, receiver or -1 for a broadcast) -> the payload node i sent, flattened (float64)
Messages = dict[tuple[str, int], Tensor]


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
