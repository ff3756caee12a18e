"""Replaying an audited round of a trained run from its snapshot: with and without noise, with
probes, recording what each node sent."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from privbench.engine.canaries import VectorCanaries, inserted
from privbench.engine.messages import MessageLog, RecordPolicy
from privbench.seeding import noise_off

# (kind, receiver or -1 for a broadcast) -> the payload node i sent, flattened (float64)
Messages = dict[tuple[str, int], Tensor]


@dataclass(frozen=True)
class MechanismSettings:
    """How the audit measures.

    Attributes:
        rounds: audited rounds, spread over the run (the first four always among them); the
            probed node rotates over them, so each node's sensitivity is measured
            rounds / n times (at least once when rounds >= n).
        scales: the two gradient norms of the probe's second canary (`_canaries`; the first
            has the first norm; in a batch mean, relative to the real samples' gradient sum,
            see `VectorCanaries.batch_mean`): a bounded contribution is the same at both.
        level: two-sided error probability of each interval (noise scale, sampling rate):
            small, because a gate fails a correct run when an interval misses (each of n nodes
            has two).
        runs: independent runs audited (the run's seed, seed + 1, ...): randomized response's
            flip rate is pooled over every run (its interval narrows as 1 / sqrt(runs)); every
            run's findings count. Other mechanisms read the first run's ε.
    """

    rounds: int = 8
    scales: tuple[float, float] = (1e4, 1e6)
    level: float = 1e-5
    runs: int = 1


EARLY = 4  # consecutive audited rounds at the start of a run


def audited_rounds(total: int, count: int) -> list[int]:
    """`count` rounds of a `total`-round run: the first EARLY (consecutive, so that a run that
    goes non-finite early still has noisy rounds to compare for reuse) and the rest evenly
    spread from there to the last."""
    if total <= count:
        return list(range(total))
    early = list(range(min(EARLY, count)))
    rest = count - len(early)
    spread = np.linspace(len(early), total - 1, rest).round().astype(int).tolist() if rest else []
    return sorted({*early, *spread})


def _sent(log: MessageLog, node: int) -> Messages:
    """Every payload `node` sent in the rounds `log` holds; a kind sent `k` rounds after the
    first is named "kind@+k" (a replay that follows the sample into later releases)."""
    out: Messages = {}
    first = min((r for r, _ in log.records), default=0)
    for (r, name), rec in log.records.items():
        kind = name if r == first else f"{name}@+{r - first}"
        if rec.per_edge:
            for row in torch.nonzero(rec.edges[:, 0] == node).flatten().tolist():
                out[(kind, int(rec.edges[row, 1]))] = rec.payload[row].double().flatten()
        else:
            payload = rec.sent_by(node)
            if payload is not None:
                out[(kind, -1)] = payload.double().flatten()
    return out


# what a probe does to the probed node's first real samples of the probed round: "remove" drops
# one from the batch, "canary<j>" makes it canary j (its gradient chosen, `_canaries`)
BASE = ("canary0", "remove")  # the neighbour without the second sample
PAIR = ("canary0", "canary1")  # ... and with it, as a canary opposite to the first


class _Probe:
    """Wraps a copy's `draw`: the first real samples of `node` in round `at` changed by
    `actions` (see BASE, PAIR; nothing where the node drew fewer samples); and its `draw_epoch`
    (`epoch`): one member removed from a local epoch (nothing else applies there)."""

    def __init__(self, draw: Callable[..., tuple[Tensor, Tensor, Tensor]], node: int,
                 actions: tuple[str, ...], at: int) -> None:
        self.draw, self.node, self.actions = draw, node, actions
        self.at = at  # the probed round (later rounds of a replay are drawn unchanged)
        self.applied = False

    def __call__(self, t: int, rates: Tensor | None = None,
                 batch_size: int | None = None) -> tuple[Tensor, Tensor, Tensor]:
        x, y, mask = self.draw(t, rates=rates, batch_size=batch_size)
        real = torch.nonzero(mask[self.node]).flatten()
        if t != self.at or len(real) < len(self.actions):
            return x, y, mask
        i = self.node
        y, mask = y.clone(), mask.clone()
        for j, action in zip(real.tolist(), self.actions, strict=False):
            if action == "remove":
                mask[i, j] = False
            else:  # canary k's label (`privbench.engine.canaries`)
                y[i, j] = -(int(action.removeprefix("canary")) + 1)
        self.applied = True
        return x, y, mask

    def epoch(self, draw_epoch: Callable[[int], tuple[Tensor, Tensor]], t: int
              ) -> tuple[Tensor, Tensor]:
        perm, members = draw_epoch(t)  # (n, M) slot order, (n, M) real-member slots
        real = torch.nonzero(members[self.node]).flatten()
        if t != self.at or "remove" not in self.actions or not len(real):
            return perm, members
        members = members.clone()
        members[self.node, int(real[0])] = False
        self.applied = True
        return perm, members


def _canaries(d: int, norms: tuple[float, float]) -> VectorCanaries:
    """The probe's two canaries: gradients +norms[0] u and -2 norms[1] u along one direction u
    (a fixed random sign vector / sqrt(d)). Each alone is far beyond any clip bound, and
    together they point the other way: the released clipped quantity moves from the bound's
    one end to the other, whether the defense clips per sample (one bound: C) or the batch as
    a whole (its clipped sum or mean moves by 2C, the worst case of an added record, which
    one real sample reaches only when the rest of the batch happens to point against it)."""
    gen = torch.Generator().manual_seed(0)
    u = (torch.randint(0, 2, (d,), generator=gen) * 2 - 1).double() / d ** 0.5
    return VectorCanaries(torch.stack([norms[0] * u, -2 * norms[1] * u]))


def _without_member(data: Any, node: int) -> Any:
    """`data` (`NodeData`) with node's last member removed: a neighbouring dataset in the sense
    of the DP definition (one record fewer: the node's member count and everything derived
    from it change, not only one batch)."""
    import dataclasses

    counts = data.counts.clone()
    counts[node] -= 1
    return dataclasses.replace(data, counts=counts)


def _replay(built: Any, blob: bytes, t: int, clean: bool,
            probe: tuple[int, tuple[str, ...], tuple[float, float]] | None = None, lag: int = 0,
            at_release: bool = False, neighbour: int | None = None) -> tuple[MessageLog, bool]:
    """Round t replayed on a copy of the state `blob` holds (`checkpoint.snapshot` of `built`
    before round t), then `lag` more rounds (where round t's batch is released only later, e.g.
    in the next round's model): their messages, and whether a probe applied. `probe`: (node,
    `_Probe` actions, the canaries' norms, see `_canaries`); `neighbour`: the replay runs on the
    dataset without one member of that node (`_without_member`).

    Which noise is on: without `at_release`, round t's (noisy replay only) and no later one: the
    noise a defense adds before the release (to the gradient, into the state). With it, round
    t's in every replay (the same draws, so they cancel between replays) and the later rounds'
    in the noisy replay only: the fresh noise a defense adds when it releases (earlier noise
    mixed into the state was released before, and protects nothing new)."""
    from privbench.engine.checkpoint import restore

    trainer, ctx = restore(blob, built, RecordPolicy(rounds=frozenset(range(t, t + lag + 1))))
    if neighbour is not None:
        ctx.data = _without_member(ctx.data, neighbour)
    applied = probe is None
    wrapper = None
    hooks = contextlib.ExitStack()
    if probe is not None:
        wrapper = _Probe(ctx.draw, probe[0], probe[1], t)
        ctx.draw = wrapper
        epoch = ctx.draw_epoch
        ctx.draw_epoch = lambda r: wrapper.epoch(epoch, r)  # type: ignore[method-assign]
        hooks.enter_context(inserted(_canaries(ctx.fm.d, probe[2])))
    with hooks:
        with noise_off() if clean and not at_release else contextlib.nullcontext():
            trainer.round(t)
        with noise_off() if clean or not at_release else contextlib.nullcontext():
            for later in range(t + 1, t + lag + 1):
                trainer.round(later)
    if wrapper is not None:
        applied = wrapper.applied
    return ctx.bus.log, applied


@dataclass
class RoundReplays:
    """What the replays of one audited round gave."""

    round: int
    probed: int
    noisy: MessageLog | None  # the round's noisy messages (the run's own where lag = 0)
    clean: MessageLog
    remove: MessageLog | None
    saturate: tuple[MessageLog, ...] | None
    exact: bool | None  # noisy replay == the run's own messages (None: not recorded)
    lag: int = 0  # later rounds the replays followed, see `_replay`
    at_release: bool = False  # the noise measured is the later rounds' (see `_replay`)
    neighbour: MessageLog | None = None  # clean, without one member of the probed node's data


class Recorder:
    """Hooks a built run: every round's realised batch sizes, and the audited rounds' replays."""

    def __init__(self, built: Any, rounds: list[int], settings: MechanismSettings) -> None:
        self.built, self.rounds, self.settings = built, set(rounds), settings
        self.last = built.ctx.run.rounds - 1
        self.lag = 0  # 1 once a round's sample is found only in the next round's messages
        # a node-level ledger is measured on the round's own releases (`node_level_epsilon`)
        self.follow = not node_level(built.trainer.privacy())
        self.at_release = False  # ... and the defense noises what it releases (`_replay`)
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

        blob = snapshot(self.built)
        rep = self._replays(blob, t, min(self.lag, self.last - t))
        kinds = self.built.trainer.kinds
        if self.follow and not self.replays and not self.lag and t < self.last \
                and rep.remove is not None \
                and not _reaches(rep, kinds):
            # no message of round t carries its sample: follow it into round t + 1
            self.lag, self.at_release = 1, _noised(rep, kinds)
            rep = self._replays(blob, t, 1)
        self.replays.append(rep)

    def _replays(self, blob: bytes, t: int, lag: int) -> RoundReplays:
        b = self.built
        probed = sorted(self.rounds).index(t) % b.ctx.n
        # the noisy round is the run's own (recorded); replayed once, to check the replay, and
        # always where the replay follows later rounds (those are replayed without noise)
        late = self.at_release and lag > 0
        noisy = (_replay(b, blob, t, clean=False, lag=lag, at_release=late)[0]
                 if lag or not self.replays else None)
        clean, _ = _replay(b, blob, t, clean=True, lag=lag, at_release=late)
        low = self.settings.scales[0]
        remove, ok = _replay(b, blob, t, clean=True, probe=(probed, BASE, (low, low)), lag=lag,
                             at_release=late)
        saturate = None
        first = probed not in {r.probed for r in self.replays}
        # every message of every kind on a neighbouring dataset, at each node's first probe
        neighbour = (_replay(b, blob, t, clean=True, lag=lag, at_release=late,
                             neighbour=probed)[0] if first else None)
        if ok and not self.epoch:
            # the second scale (bounded or not) at each node's first probe only
            scales = self.settings.scales if first else self.settings.scales[:1]
            saturate = tuple(_replay(b, blob, t, clean=True, probe=(probed, PAIR, (low, s)),
                                     lag=lag, at_release=late)[0] for s in scales)
        return RoundReplays(t, probed, noisy, clean, remove if ok else None,
                            saturate, None, lag, late, neighbour)  # type: ignore[arg-type]

    def attach_run(self, log: MessageLog) -> None:
        """Each audited round's noisy messages from the run's own log; the one replayed noisy
        round checked equal to them (bit for bit)."""
        for rep in self.replays:
            own = MessageLog({key: r for key, r in log.records.items() if key[0] == rep.round})
            if rep.noisy is not None:
                mine = {key: r for key, r in rep.noisy.records.items() if key[0] == rep.round}
                rep.exact = own.records.keys() == mine.keys() and all(
                    torch.equal(r.payload, mine[key].payload) for key, r in own.records.items())
            if not rep.lag:
                rep.noisy = own


def _kind(name: str) -> str:
    """The message kind of a `_sent` key's name ("model@+1" -> "model")."""
    return name.split("@", 1)[0]


def _flows(contrib: Messages, clean: Messages, kinds: dict[str, Any]) -> list[tuple[str, int]]:
    """The messages one sample reaches, of data-dependent kinds the defense declares covered
    (an uncovered kind is reported as such by the coverage bound)."""
    declared = [(k, kinds.get(_kind(k[0]))) for k in contrib]  # undeclared: `declared_kinds`
    return [k for k, kind in declared if kind is not None and kind.data_dependent and kind.covered
            and float(contrib[k].norm()) > 1e-6 * (float(clean[k].norm()) + 1e-12)]


def _reaches(rep: RoundReplays, kinds: Any) -> bool:
    """Whether some message of the replayed rounds carries the probed sample."""
    i, by_name = rep.probed, {k.name: k for k in kinds}
    base, clean = _sent(rep.remove, i), _sent(rep.clean, i)  # type: ignore[arg-type]
    low = _sent(rep.saturate[0], i) if rep.saturate else _sent(rep.clean, i)
    contrib = {k: low[k] - base[k] for k in base if k in low}
    return bool(_flows(contrib, clean, by_name))


def _noised(rep: RoundReplays, kinds: Any) -> bool:
    """Whether the probed node's covered messages of the replayed round carry noise (the
    defense noises its releases, rather than what goes into its state)."""
    covered = {k.name for k in kinds if k.covered}
    noisy, clean = _sent(rep.noisy, rep.probed), _sent(rep.clean, rep.probed)  # type: ignore
    return any(not torch.equal(noisy[k], clean[k]) for k in clean
               if k in noisy and _kind(k[0]) in covered)


def node_level(privacy: list[dict[str, Any]]) -> bool:
    """Whether the ledger's records are nodes under additive noise (DPPS, PartPSP, PEDFL:
    node-level Laplace; randomized response is measured by its flip rate instead)."""
    return bool(privacy) and all(r.get("unit") == "node-level" and "keep_prob" not in r
                                 for r in privacy)
