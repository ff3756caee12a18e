"""Checkpoints: a run stopped midway and continued from its checkpoint in a fresh build (as a
new process would) ends exactly as the same run trained in one go, for every defense."""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from privbench.config import RunConfig
from privbench.engine import checkpoint
from privbench.engine.loop import train
from privbench.engine.runner import Built, build
from privbench.plugins import load_plugins
from privbench.registry import DEFENSES
from privbench.seeding import is_noise_generator

load_plugins()
KEY = {"run": "r", "code": "c", "device": "cpu"}


class _KilledError(Exception):
    """A kill after the checkpoint of round `at`."""


def _run() -> RunConfig:
    return replace(RunConfig(), nodes=4, rounds=4, eval_every=2, device="cpu")


def _stopped(defense: str, path: Path, at: int = 2, run: RunConfig | None = None) -> None:
    """Train `defense` with a checkpoint after every round, killed after round `at`."""
    built = build(run or _run(), defense)
    save = checkpoint.Saver(path, built, KEY, every=0.0)

    def save_then_stop(done, result):
        save(done, result)
        if done == at:
            raise _KilledError

    with pytest.raises(_KilledError):
        train(built.trainer, after_round=save_then_stop)


def _resumed(defense: str, path: Path) -> tuple[Built, checkpoint.Resumed]:
    built = build(_run(), defense)
    return built, checkpoint.load(path, built, KEY)


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The tensor's bit pattern: equal NaNs compare equal (a diverged run's models)."""
    return x.contiguous().view(torch.uint8)


def _same_log(a: Built, b: Built) -> bool:
    ra, rb = a.ctx.bus.log.records, b.ctx.bus.log.records
    return ra.keys() == rb.keys() and all(
        torch.equal(_bits(ra[k].payload), _bits(rb[k].payload))
        and torch.equal(ra[k].edges, rb[k].edges) for k in ra)


@pytest.mark.parametrize("defense", sorted(DEFENSES))
def test_a_resumed_run_ends_as_the_run_in_one_go(defense, tmp_path):
    whole = build(_run(), defense)
    expected = train(whole.trainer)
    path = tmp_path / "run.ckpt"
    _stopped(defense, path)
    built, resumed = _resumed(defense, path)
    assert resumed.rounds_done == 2
    got = train(built.trainer, start=resumed.rounds_done, result=resumed.result)
    assert torch.equal(_bits(built.trainer.models()), _bits(whole.trainer.models()))
    assert got.history == expected.history and got.node_accuracy == expected.node_accuracy
    assert got.diverged_round == expected.diverged_round
    assert built.privacy() == whole.privacy()
    # every message of all four rounds, and the batches the attacks are graded against
    assert _same_log(built, whole)
    assert built.ctx.truth.batches.keys() == whole.ctx.truth.batches.keys()
    assert all(torch.equal(built.ctx.truth.batches[t][0], whole.ctx.truth.batches[t][0])
               for t in whole.ctx.truth.batches)
    assert got.resumed_at == [2] and expected.resumed_at == []
    assert got.seconds >= resumed.result.seconds


@pytest.mark.parametrize(("model", "defense"), [
    *[(m, "dp_sgp") for m in ("cnn", "lenet", "lenet5", "psp_mlp", "resnet")],
    # the headline settings' pairs: DPPS's split ResNet, DeFL-VP's and Dyn-D2P's CNNs, DPDL's
    # LeNet-5
    ("resnet", "partpsp"), ("cnn", "defl_vp"), ("cnn", "dyn_d2p"), ("lenet5", "dpdl")])
def test_every_model_resumes_as_in_one_go(model, defense, tmp_path):
    """The model's layout is joined by reference, not stored: no model may carry state that
    training changes (running statistics) outside the stacked node state."""
    run = replace(_run(), model=model, rounds=3, batch_size=4)
    whole = build(run, defense)
    train(whole.trainer)
    _stopped(defense, tmp_path / "run.ckpt", at=1, run=run)
    again = build(run, defense)
    resumed = checkpoint.load(tmp_path / "run.ckpt", again, KEY)
    train(again.trainer, start=resumed.rounds_done, result=resumed.result)
    assert torch.equal(_bits(again.trainer.models()), _bits(whole.trainer.models()))


def test_the_stored_state_leaves_out_the_data_and_keeps_the_noise_stream(tmp_path):
    """A checkpoint holds the node state, not the dataset (the fresh build's data and model
    are joined by reference); the noise stream's generator is registered as noise again (the
    test switch `disable_noise` finds it)."""
    path = tmp_path / "run.ckpt"
    _stopped("dp_sgp", path)
    built = build(_run(), "dp_sgp")
    data, fm, trainer = built.ctx.data, built.ctx.fm, built.trainer
    checkpoint.load(path, built, KEY)
    assert built.trainer is not trainer and built.ctx.data is data and built.ctx.fm is fm
    assert built.trainer.ctx is built.ctx
    stored = path.read_bytes()
    assert data.x.contiguous().numpy().tobytes()[:4096] not in stored  # the images: not stored
    assert is_noise_generator(built.ctx.streams.get("noise"))


def test_a_generator_held_twice_comes_back_as_one(tmp_path):
    built = build(_run(), "dp_sgp")
    built.trainer.held = built.ctx.streams.get("noise")  # a second holder, as a trainer may be
    train(built.trainer, rounds=1)
    checkpoint.save(tmp_path / "run.ckpt", built, 1, train(built.trainer, rounds=0), KEY)
    again = build(_run(), "dp_sgp")
    checkpoint.load(tmp_path / "run.ckpt", again, KEY)
    assert again.trainer.held is again.ctx.streams.get("noise")
    assert torch.equal(again.trainer.held.get_state(), built.trainer.held.get_state())


def test_a_checkpoint_of_another_run_code_or_device_is_stale(tmp_path):
    path = tmp_path / "run.ckpt"
    _stopped("sgp", path)
    for field in KEY:
        with pytest.raises(checkpoint.StaleCheckpointError,
                           match=rf"made with another {field} \({KEY[field]} there, x now\)"):
            checkpoint.load(path, build(_run(), "sgp"), {**KEY, field: "x"})
    whole = path.read_bytes()
    for cut in (40, len(whole) // 2):  # in the header, and in the state after it
        path.write_bytes(whole[:cut])
        built = build(_run(), "sgp")
        trainer = built.trainer
        with pytest.raises(checkpoint.StaleCheckpointError, match="unreadable"):
            checkpoint.load(path, built, KEY)
        assert built.trainer is trainer  # left as it was: the run starts over
    path.write_bytes(pickle.dumps({"format": "something else"}))
    with pytest.raises(checkpoint.StaleCheckpointError, match="not a privbench-checkpoint/1 file"):
        checkpoint.load(path, build(_run(), "sgp"), KEY)


def test_a_checkpoint_continues_only_on_the_same_kind_of_machine(tmp_path, monkeypatch):
    """`prepare` keys a checkpoint on the kind of machine (CPU model and vector kernels, or
    GPU): other kernels give other numbers, so a run continued there would not end where it
    would have in one go; it starts over, saying why."""
    from privbench.device import machine_kind

    path, here = tmp_path / "run.ckpt", machine_kind(torch.device("cpu"))
    built = build(_run(), "sgp")
    _, _, saver = checkpoint.prepare(path, built, "r", every=1e-9)
    train(built.trainer, rounds=2, after_round=saver)
    assert checkpoint.header(path)["key"]["device"] == here
    notes: list[str] = []
    assert checkpoint.prepare(path, build(_run(), "sgp"), "r", 0.0, notes.append)[0] == 2
    monkeypatch.setattr(checkpoint, "machine_kind", lambda dev: "cpu (Other CPU, AVX2)")
    done, so_far, _ = checkpoint.prepare(path, build(_run(), "sgp"), "r", 0.0, notes.append)
    assert (done, so_far) == (0, None)
    assert notes[0].startswith("continues from round 2/4")
    assert notes[1].endswith(f"made with another device ({here} there, cpu (Other CPU, AVX2) "
                             "now)")


def test_a_saver_waits_its_interval_and_skips_the_last_round(tmp_path):
    built = build(_run(), "sgp")
    path = tmp_path / "run.ckpt"
    train(built.trainer, after_round=checkpoint.Saver(path, built, KEY, every=3600.0))
    assert not path.exists()
    built = build(_run(), "sgp")
    train(built.trainer, after_round=checkpoint.Saver(path, built, KEY, every=0.0))
    assert checkpoint.header(path)["rounds_done"] == 3  # rounds 1-3; none after the 4th


@pytest.mark.gpu
@pytest.mark.parametrize("defense", ["sgp", "dp_sgp", "dpps"])
def test_a_cuda_run_resumes_as_in_one_go(defense, tmp_path):
    """CUDA tensors and CUDA generators (their states) survive a checkpoint."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    run = replace(_run(), device="cuda")
    whole = build(run, defense)
    train(whole.trainer)
    _stopped(defense, tmp_path / "run.ckpt", run=run)
    again = build(run, defense)
    resumed = checkpoint.load(tmp_path / "run.ckpt", again, KEY)
    train(again.trainer, start=resumed.rounds_done, result=resumed.result)
    assert again.ctx.device.type == "cuda"
    # CUDA may order a reduction differently from run to run: close, not bit-equal
    torch.testing.assert_close(again.trainer.models(), whole.trainer.models(), rtol=1e-4,
                               atol=1e-5, equal_nan=True)


def test_privbench_train_continues_from_its_checkpoint(tmp_path, monkeypatch, capsys):
    """`privbench train --checkpoint-every`: killed after round 2's checkpoint, the same command
    continues to the results of the run in one go, and the checkpoint is then deleted."""
    import json

    from privbench.cli import main

    args = ["train", "--defense", "dp_sgp", "--nodes", "4", "--rounds", "4", "--set",
            "eval_every=2", "--device", "cpu", "--quiet", "--record", "all"]
    assert main([*args, "--out", str(tmp_path / "whole")]) == 0
    real = checkpoint.Saver

    class KilledAfter(real):
        def __call__(self, done, result):
            super().__call__(done, result)
            if done == 2:
                raise KeyboardInterrupt

    out = tmp_path / "stopped"
    with monkeypatch.context() as m:
        m.setattr(checkpoint, "Saver", KilledAfter)
        assert main([*args, "--checkpoint-every", "0.000001", "--out", str(out)]) == 130
    assert (out / "checkpoint.ckpt").is_file() and not (out / "results.json").exists()
    assert main([*args, "--checkpoint-every", "10", "--out", str(out)]) == 0
    assert not (out / "checkpoint.ckpt").exists()
    whole = json.loads((tmp_path / "whole" / "results.json").read_text())
    got = json.loads((out / "results.json").read_text())
    assert got["resumed_at"] == [2] and "resumed_at" not in whole
    for key in ("accuracy", "history", "privacy", "diverged_round", "run", "defense_config"):
        assert got[key] == whole[key], key
    assert (out / "messages.safetensors").read_bytes() == \
        (tmp_path / "whole" / "messages.safetensors").read_bytes()


def test_train_checkpoints_are_local_only_and_need_a_number(tmp_path, capsys):
    from privbench.cli import main

    assert main(["train", "--backend", "distributed", "--checkpoint-every", "5", "--out",
                 str(tmp_path)]) == 2
    assert "--checkpoint-every: accepted with --backend local only" in capsys.readouterr().err
    assert main(["train", "--checkpoint-every", "-2", "--out", str(tmp_path)]) == 2
    assert "--checkpoint-every '-2': accepted: minutes" in capsys.readouterr().err


def test_train_starts_over_from_a_checkpoint_that_is_not_its_own(tmp_path, capsys):
    from privbench.cli import main

    (tmp_path / "checkpoint.ckpt").write_bytes(b"not a checkpoint")
    assert main(["train", "--nodes", "3", "--rounds", "2", "--device", "cpu", "--checkpoint-every",
                 "5", "--out", str(tmp_path)]) == 0
    assert "train sgp: starts over: the checkpoint " in capsys.readouterr().err
    assert not (tmp_path / "checkpoint.ckpt").exists() and (tmp_path / "results.json").exists()
