"""Message bus and log: delivery, record policy, threat-model views, safe files."""

from __future__ import annotations

import pickle

import pytest
import torch

from privbench.engine.messages import (
    MessageBus,
    MessageKind,
    MessageLog,
    RecordPolicy,
    parse_record_spec,
)
from privbench.engine.truth import GroundTruth
from privbench.errors import DataError

KINDS = (MessageKind("model", covered=True), MessageKind("cross", covered=True, per_edge=True))


def _adj():
    # 0 -> 1, 0 -> 2, 1 -> 2, 2 -> 0   ([j, i] True when i sends to j)
    adj = torch.zeros(3, 3, dtype=torch.bool)
    adj[1, 0] = adj[2, 0] = adj[2, 1] = adj[0, 2] = True
    return adj


def test_broadcast_records_once_with_edges_and_delivers_payload():
    bus = MessageBus(KINDS)
    x = torch.arange(6.0).reshape(3, 2)
    out = bus.broadcast(0, "model", x, _adj(), scale=torch.full((3, 3), 0.5))
    assert torch.equal(out, x)
    rec = bus.log.get(0, "model")
    assert rec.payload.shape == (3, 2) and rec.edges.shape == (4, 2)
    assert torch.equal(rec.sent_by(1), x[1]) and torch.all(rec.scale == 0.5)
    x.add_(100)  # the log holds a copy, not a view of live state
    assert torch.equal(rec.sent_by(1), torch.tensor([2.0, 3.0]))


def test_per_edge_payloads_are_stored_per_edge():
    bus = MessageBus(KINDS)
    src, dst = torch.tensor([0, 0, 1]), torch.tensor([1, 2, 2])
    bus.per_edge(3, "cross", torch.eye(3), src, dst)
    rec = bus.log.get(3, "cross")
    assert rec.per_edge and rec.payload.shape == (3, 3)
    seen = bus.log.observed_by({2}).get(3, "cross")  # node 2 only receives
    assert seen.edges.tolist() == [[0, 2], [1, 2]]
    assert torch.equal(seen.payload, torch.eye(3)[1:])


def test_neighbour_sees_only_what_it_receives_and_sends():
    bus = MessageBus(KINDS)
    bus.broadcast(0, "model", torch.arange(3.0)[:, None], _adj())
    view = bus.log.observed_by({1}).get(0, "model")
    assert view.senders.tolist() == [0, 1] and view.edges.tolist() == [[0, 1], [1, 2]]
    assert bus.log.observed_by({1}).get(0, "model").sent_by(2) is None
    assert bus.log.observed_by(None).get(0, "model").senders.tolist() == [0, 1, 2]


def test_record_policy_bounds_rounds_senders_and_kinds():
    bus = MessageBus(KINDS, RecordPolicy(rounds=frozenset({1}), senders=frozenset({0})))
    for t in range(3):
        bus.broadcast(t, "model", torch.ones(3, 4), _adj())
    assert bus.log.rounds() == [1]
    assert bus.log.get(1, "model").senders.tolist() == [0]
    off = MessageBus(KINDS, RecordPolicy.none())
    off.broadcast(0, "model", torch.ones(3, 4), _adj())
    assert off.log.nbytes() == 0


def test_undeclared_kind_cannot_be_sent():
    with pytest.raises(RuntimeError, match="not declared"):
        MessageBus(KINDS).broadcast(0, "secret", torch.ones(3, 1), _adj())


def test_parse_record_spec():
    pol = parse_record_spec("0:3,-2:,7", 10)
    assert pol.rounds == frozenset({0, 1, 2, 7, 8, 9})
    assert parse_record_spec("all", 5).rounds is None
    assert not parse_record_spec("none", 5).enabled
    with pytest.raises(DataError, match="bad --record spec"):
        parse_record_spec("a:b", 5)


def test_log_and_ground_truth_roundtrip(tmp_path):
    bus = MessageBus(KINDS)
    bus.broadcast(0, "model", torch.randn(3, 5), _adj(), scale=torch.rand(3, 3))
    bus.per_edge(0, "cross", torch.randn(2, 5), torch.tensor([0, 1]), torch.tensor([1, 2]))
    bus.log.save(tmp_path)
    back = MessageLog.load(tmp_path)
    for key, rec in bus.log.records.items():
        other = back.records[key]
        assert torch.equal(rec.payload, other.payload) and torch.equal(rec.edges, other.edges)
        assert rec.per_edge == other.per_edge
    gt = GroundTruth(RecordPolicy())
    gt.record(0, torch.tensor([[1, 2]]), torch.tensor([[True, False]]))
    gt.save(tmp_path)
    assert torch.equal(GroundTruth.load(tmp_path).batches[0][0], torch.tensor([[1, 2]]))


class _Evil:
    def __reduce__(self):
        return (exec, ("import pathlib; pathlib.Path('PWNED').write_text('x')",))


def test_a_planted_pickle_is_refused_and_never_executed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bus = MessageBus(KINDS)
    bus.broadcast(0, "model", torch.randn(3, 5), _adj())
    bus.log.save(tmp_path)
    (tmp_path / "messages.safetensors").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(DataError, match="not a valid safetensors file"):
        MessageLog.load(tmp_path)
    assert not (tmp_path / "PWNED").exists()


def test_truncated_or_missing_logs_are_data_errors(tmp_path):
    bus = MessageBus(KINDS)
    bus.broadcast(0, "model", torch.randn(3, 50), _adj())
    bus.log.save(tmp_path)
    data = (tmp_path / "messages.safetensors").read_bytes()
    (tmp_path / "messages.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError):
        MessageLog.load(tmp_path)
    with pytest.raises(DataError, match="not found"):
        MessageLog.load(tmp_path / "nowhere")
    (tmp_path / "messages.json").write_text('{"format": "other"}')
    bus.log.save(tmp_path / "ok")
    (tmp_path / "ok" / "messages.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        MessageLog.load(tmp_path / "ok")
