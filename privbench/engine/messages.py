"""The message bus and its log.

Every payload that crosses an edge goes through `MessageBus` and the trainer continues with what
the bus delivers, so nothing can bypass the log. A message has a round, a sender, its receivers,
a kind and a payload:

* broadcast payloads (one value per sender, the same for all its receivers, possibly scaled by a
  public per-edge weight such as push-sum's P_ji) are stored once per sender with their edge list;
* per-edge payloads (different for each receiver, e.g. DPDL's cross-gradients) are stored per edge.

A `RecordPolicy` (rounds, senders, kinds) bounds memory. Logs are written as safetensors plus a JSON
index, a format that cannot execute code when read. The senders' true batches (ground truth for
grading attacks) are kept in a separate `GroundTruth` object and file, never in the log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from privbench.engine.comm import Comm
from privbench.errors import DataError

LOG_FORMAT = "privbench-messages/1"


@dataclass(frozen=True)
class MessageKind:
    """A kind of message a defense sends.

    Attributes:
        name: the kind's name (e.g. "model", "weight", "cross_gradient").
        covered: whether the defense's DP guarantee covers it (directly or by post-processing).
        data_dependent: whether its content depends on private data (an uncovered, data-dependent
            kind is a leak the report must show).
        per_edge: whether each receiver gets its own payload.
        description: what it carries, in the paper's notation.
    """

    name: str
    covered: bool
    data_dependent: bool = True
    per_edge: bool = False
    description: str = ""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RecordPolicy:
    """Which messages the log keeps. `None` means all.

    Attributes:
        rounds: rounds to record.
        senders: sender nodes to record.
        kinds: message kinds to record.
        enabled: False records nothing (pure training).
    """

    rounds: frozenset[int] | None = None
    senders: frozenset[int] | None = None
    kinds: frozenset[str] | None = None
    enabled: bool = True

    def wants(self, t: int, kind: str) -> bool:
        """Whether round t's messages of `kind` are recorded at all."""
        return (self.enabled and (self.rounds is None or t in self.rounds)
                and (self.kinds is None or kind in self.kinds))

    @staticmethod
    def none() -> RecordPolicy:
        """Record nothing."""
        return RecordPolicy(enabled=False)


def parse_record_spec(spec: str, total_rounds: int) -> RecordPolicy:
    """A record policy from "all", "none" or rounds like "0:10,-5:,42" (negatives from the end)."""
    spec = spec.strip().lower()
    if spec == "all":
        return RecordPolicy()
    if spec == "none":
        return RecordPolicy.none()
    rounds: set[int] = set()
    for part in filter(None, (p.strip() for p in spec.split(","))):
        try:
            if ":" in part:
                a, b = part.split(":", 1)
                rounds.update(range(total_rounds)[slice(int(a) if a else None,
                                                        int(b) if b else None)])
            else:
                r = int(part)
                rounds.add(r % total_rounds if -total_rounds <= r < total_rounds else r)
        except ValueError:
            raise DataError(f"bad --record spec {spec!r}; accepted: all, none, or comma-separated "
                            "rounds and start:stop ranges (e.g. 0:10,-5:)") from None
    return RecordPolicy(rounds=frozenset(rounds))


@dataclass(frozen=True)
class Record:
    """Messages of one kind in one round.

    Attributes:
        round: the round.
        kind: message kind.
        edges: (E, 2) int64 rows of (sender, receiver).
        payload: broadcast: (m, ...) one row per entry of `senders`; per-edge: (E, ...) per edge.
        senders: (m,) int64 for broadcast payloads; equals edges[:, 0] for per-edge ones.
        scale: (E,) public per-edge multiplier applied to the payload in transit, or None.
        per_edge: which of the two layouts `payload` has.
    """

    round: int
    kind: str
    edges: Tensor
    payload: Tensor
    senders: Tensor
    scale: Tensor | None
    per_edge: bool

    def sent_by(self, i: int) -> Tensor | None:
        """The payload node i sent (broadcast), or None when not recorded."""
        hit = torch.nonzero(self.senders == i).flatten()
        return self.payload[hit[0]] if len(hit) else None

    def restrict(self, nodes: set[int]) -> Record | None:
        """The part of this record that `nodes` send or receive (None when nothing)."""
        keep = torch.tensor([int(s) in nodes or int(r) in nodes for s, r in self.edges.tolist()],
                            dtype=torch.bool)
        if not keep.any():
            return None
        edges = self.edges[keep]
        scale = self.scale[keep] if self.scale is not None else None
        if self.per_edge:
            return Record(self.round, self.kind, edges, self.payload[keep], edges[:, 0], scale,
                          True)
        rows = torch.tensor([int(s) in set(edges[:, 0].tolist()) for s in self.senders])
        return Record(self.round, self.kind, edges, self.payload[rows], self.senders[rows], scale,
                      False)


@dataclass
class MessageLog:
    """Recorded messages, indexed by (round, kind)."""

    records: dict[tuple[int, str], Record] = field(default_factory=dict)

    def add(self, rec: Record) -> None:
        """Store one record (a second record for the same round and kind is an error)."""
        key = (rec.round, rec.kind)
        if key in self.records:
            raise RuntimeError(f"message kind {rec.kind!r} sent twice in round {rec.round}")
        self.records[key] = rec

    def get(self, t: int, kind: str) -> Record | None:
        """The record of `kind` in round t, if recorded."""
        return self.records.get((t, kind))

    def rounds(self, kind: str | None = None) -> list[int]:
        """Recorded rounds (of one kind)."""
        return sorted({t for t, k in self.records if kind is None or k == kind})

    def kinds(self) -> list[str]:
        """Recorded kinds."""
        return sorted({k for _, k in self.records})

    def observed_by(self, receivers: Iterable[int] | None) -> MessageLog:
        """What a set of curious nodes sees: everything they receive or send themselves.

        None stands for an eavesdropper on every edge, who sees everything.
        """
        if receivers is None:
            return MessageLog(dict(self.records))
        rs = {int(r) for r in receivers}
        out = MessageLog()
        for rec in self.records.values():
            part = rec.restrict(rs)
            if part is not None:
                out.add(part)
        return out

    @staticmethod
    def merge(logs: Iterable[MessageLog]) -> MessageLog:
        """One log from the logs of the ranks of one run (each: what its nodes sent or received).

        An edge between two ranks is in both logs; it is kept once. Edges are put in the order the
        single-process bus records them, (receiver, sender), so the merged log equals the log of
        the same run in one process.
        """
        parts: dict[tuple[int, str], list[Record]] = {}
        for log in logs:
            for key, rec in log.records.items():
                parts.setdefault(key, []).append(rec)
        out = MessageLog()
        for key in sorted(parts, key=lambda k: (k[0], k[1])):
            out.add(_merge_records(parts[key]))
        return out

    def nbytes(self) -> int:
        """Memory held by payloads."""
        return sum(r.payload.numel() * r.payload.element_size() for r in self.records.values())

    def save(self, folder: str | Path) -> None:
        """Write `messages.safetensors` and `messages.json` (index) into `folder`."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors: dict[str, Tensor] = {}
        index = []
        for n, rec in enumerate(self.records.values()):
            tensors[f"{n}.edges"] = rec.edges.contiguous()
            tensors[f"{n}.payload"] = rec.payload.contiguous()
            tensors[f"{n}.senders"] = rec.senders.contiguous()
            if rec.scale is not None:
                tensors[f"{n}.scale"] = rec.scale.contiguous()
            index.append({"id": n, "round": rec.round, "kind": rec.kind, "per_edge": rec.per_edge})
        save_file(tensors, str(folder / "messages.safetensors"))
        (folder / "messages.json").write_text(json.dumps({"format": LOG_FORMAT, "records": index}))

    @staticmethod
    def load(folder: str | Path) -> MessageLog:
        """Read a log written by `save` (never executes code; one-line errors when corrupt)."""
        folder = Path(folder)
        tensors = load_tensors(folder / "messages.safetensors")
        index = _load_index(folder / "messages.json")
        log = MessageLog()
        try:
            for item in index["records"]:
                n = item["id"]
                log.add(Record(int(item["round"]), str(item["kind"]), tensors[f"{n}.edges"],
                               tensors[f"{n}.payload"], tensors[f"{n}.senders"],
                               tensors.get(f"{n}.scale"), bool(item["per_edge"])))
        except (KeyError, TypeError) as exc:
            raise DataError(f"message log {folder} is inconsistent (missing {exc})") from None
        return log


def _edge_order(edges: Tensor) -> Tensor:
    """Indices sorting (E, 2) (sender, receiver) rows by (receiver, sender), without duplicates."""
    key = edges[:, 1] * (int(edges.max()) + 1 if len(edges) else 1) + edges[:, 0]
    uniq, first = _first_index(key)
    return first[torch.argsort(uniq)]


def _first_index(key: Tensor) -> tuple[Tensor, Tensor]:
    """Unique values of `key` and the index of each one's first occurrence."""
    uniq, inv = torch.unique(key, return_inverse=True)
    first = torch.full((len(uniq),), len(key), dtype=torch.int64)
    first.scatter_reduce_(0, inv, torch.arange(len(key)), reduce="amin")
    return uniq, first


def _merge_records(recs: list[Record]) -> Record:
    """Union of one (round, kind) record as seen by several ranks."""
    head = recs[0]
    edges = torch.cat([r.edges for r in recs])
    order = _edge_order(edges)
    scale = torch.cat([r.scale for r in recs])[order] if head.scale is not None else None
    edges = edges[order]
    if head.per_edge:
        payload = torch.cat([r.payload for r in recs])[order]
        return Record(head.round, head.kind, edges, payload, edges[:, 0], scale, True)
    senders, first = _first_index(torch.cat([r.senders for r in recs]))
    payload = torch.cat([r.payload for r in recs])[first]
    return Record(head.round, head.kind, edges, payload, senders, scale, False)


def tensor_metadata(path: Path) -> dict[str, str]:
    """The string metadata of a safetensors file (read after `load_tensors` validated it)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        return fh.metadata() or {}


def load_tensors(path: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise DataError(f"message log file {path} not found (expected messages.safetensors "
                        "written by `privbench train`)")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        reason = str(exc).replace("\n", " ")
        raise DataError(f"{path} is not a valid safetensors file ({reason})") from None


def _load_index(path: Path) -> dict:
    try:
        index = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError(f"message index {path} not found") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(index, dict) or index.get("format") != LOG_FORMAT:
        raise DataError(f"{path} is not a privbench message index (format {LOG_FORMAT} expected)")
    return index


class MessageBus:
    """Carries, delivers and records every message of a run.

    Args:
        kinds: the defense's message kinds (sending an undeclared kind is an error).
        policy: what to record.
        storage: device where recorded payloads are kept (CPU by default, to bound GPU memory).
        comm: where the nodes run. With several ranks, each sender's row is brought from the rank
            that owns it before delivery, and this rank's log keeps what its nodes send or receive
            (`MessageLog.merge` joins the ranks' logs).
    """

    def __init__(self, kinds: Iterable[MessageKind], policy: RecordPolicy | None = None,
                 storage: torch.device | str = "cpu", comm: Comm | None = None) -> None:
        self.kinds = {k.name: k for k in kinds}
        self.policy = policy or RecordPolicy()
        self.storage = torch.device(storage)
        self.comm = comm or Comm()
        self.log = MessageLog()

    def _check(self, kind: str, per_edge: bool) -> None:
        if kind not in self.kinds:
            raise RuntimeError(f"message kind {kind!r} not declared (declared: {list(self.kinds)})")
        if self.kinds[kind].per_edge != per_edge:
            raise RuntimeError(f"message kind {kind!r} sent with the wrong layout")

    def broadcast(self, t: int, kind: str, payload: Tensor, adjacency: Tensor,
                  scale: Tensor | None = None) -> Tensor:
        """Send row i of `payload` from node i to every j with adjacency[j, i].

        Args:
            t: round.
            kind: declared message kind.
            payload: (n, ...) one value per sender.
            adjacency: (n, n) bool, [j, i] True when i sends to j.
            scale: optional (n, n) public multiplier, [j, i] applied on edge i -> j (push-sum P).

        Returns:
            The delivered payload (n, ...): what receivers combine.
        """
        self._check(kind, per_edge=False)
        payload = self.comm.gather_rows(payload)
        if self.policy.wants(t, kind):
            dst, src = torch.nonzero(adjacency, as_tuple=True)
            keep = self._sender_mask(src) & self._touches_mine(src, dst)
            src, dst = src[keep], dst[keep]
            senders = torch.unique(src)
            edges = torch.stack([src, dst], dim=1).to(self.storage)
            sc = scale[dst, src].to(self.storage) if scale is not None else None
            rec = Record(t, kind, edges, payload[senders].detach().to(self.storage, copy=True),
                         senders.to(self.storage), sc, False)
            if len(senders):
                self.log.add(rec)
        return payload

    def per_edge(self, t: int, kind: str, payload: Tensor, src: Tensor, dst: Tensor) -> Tensor:
        """Send payload[e] from src[e] to dst[e] (one payload per edge).

        Args:
            payload: (E, ...).
            src, dst: (E,) int64 sender and receiver of each edge.

        Returns:
            The delivered payload (E, ...).
        """
        self._check(kind, per_edge=True)
        payload = self.comm.gather_rows(payload, senders=src)
        if self.policy.wants(t, kind):
            keep = self._sender_mask(src) & self._touches_mine(src, dst)
            edges = torch.stack([src[keep], dst[keep]], dim=1).cpu()
            if len(edges):
                order = _edge_order(edges)  # (receiver, sender), as broadcast records are
                rows = torch.nonzero(keep).flatten().cpu()[order]
                edges = edges[order].to(self.storage)
                self.log.add(Record(t, kind, edges,
                                    payload[rows.to(payload.device)].detach().to(self.storage,
                                                                                 copy=True),
                                    edges[:, 0], None, True))
        return payload

    def _touches_mine(self, src: Tensor, dst: Tensor) -> Tensor:
        """(E,) bool: edges this rank logs, those whose sender or receiver it runs."""
        if not self.comm.distributed:
            return torch.ones_like(src, dtype=torch.bool)
        mine = self.comm.mine(len(self.comm.owner), src.device)  # type: ignore[arg-type]  # (n,)
        return mine[src] | mine[dst]

    def _sender_mask(self, src: Tensor) -> Tensor:
        if self.policy.senders is None:
            return torch.ones_like(src, dtype=torch.bool)
        allowed = torch.tensor(sorted(self.policy.senders), device=src.device)
        return torch.isin(src, allowed)
