"""Training on the real Fashion-MNIST files found without flags (the Debian package
`dataset-fashion-mnist`, which `.ci/run` installs): a few nodes and rounds, a few seconds."""

from __future__ import annotations

import json

import pytest

from privbench.cli import main
from privbench.data import files as datafiles

PACKAGE, FOLDER = datafiles.DEBIAN["fashion-mnist"]
pytestmark = pytest.mark.skipif(
    not (FOLDER / "train-images-idx3-ubyte.gz").is_file(),
    reason=f"Debian package {PACKAGE} not installed ({FOLDER} missing; .ci/run installs it "
           "where apt-get runs as root)")


def test_trains_on_real_fashion_mnist_without_data_root(tmp_path, monkeypatch):
    monkeypatch.delenv(datafiles.ENV_VAR, raising=False)
    out = tmp_path / "run"
    code = main(["train", "--defense", "sgp", "--dataset", "fashion-mnist", "--model", "mlp",
                 "--nodes", "4", "--rounds", "40", "--batch-size", "32", "--lr", "0.1",
                 "--record", "none", "--device", "cpu", "--quiet", "--out", str(out),
                 "--set", "eval_every=20", "--set", "eval_subset=500"])
    assert code == 0
    res = json.loads((out / "results.json").read_text())
    assert res["data_source"] == str(FOLDER)
    # 40 rounds x 4 nodes x 32 samples: far above chance (0.1) on the real test set
    assert res["accuracy"]["average_model"] > 0.5, res["accuracy"]
    assert [h["test_samples"] for h in res["history"]] == [500, 10000]
    timing = res["timing"]
    assert timing["eval_seconds"] > 0 and timing["train_seconds"] > 0
