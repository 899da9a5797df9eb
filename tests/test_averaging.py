"""The best checkpoint kept beside the last, the last N kept for averaging, and averaging as the paper does."""

import json

import numpy as np
import pytest

from numpy_transformer.checkpoint import average_checkpoints, load_checkpoint
from numpy_transformer.cli import main
from numpy_transformer.config import TrainConfig
from numpy_transformer.training import Trainer

TINY = [
    "--task",
    "copy",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "16",
    "--batch-size",
    "8",
    "--eval-every",
    "2",
    "--eval-size",
    "4",
    "--no-progress",
    "--show",
    "0",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("avg") / "run"
    assert main(["train", *TINY, "--steps", "8", "--keep-checkpoints", "3", "--out", str(out)]) == 0
    return out


def test_the_run_keeps_its_best_and_its_last_n_checkpoints(run):
    assert sorted(path.name for path in run.glob("step-*.npz")) == [
        "step-0000004.npz",
        "step-0000006.npz",
        "step-0000008.npz",
    ]
    best = load_checkpoint(run / "best.npz")[1]
    dev_bleus = {
        record["step"]: record["bleu"]
        for record in map(json.loads, (run / "log.jsonl").read_text().splitlines())
        if record.get("split") == "dev"
    }
    assert best["step"] == max(dev_bleus, key=lambda step: (dev_bleus[step], -step))  # the first best
    assert best["best_bleu"] == max(dev_bleus.values())


def test_averaging_is_the_mean_of_the_weights_and_translates(run, tmp_path, capsys):
    kept = sorted(run.glob("step-*.npz"))
    arrays, meta = average_checkpoints(kept)
    loaded = [load_checkpoint(path)[0] for path in kept]
    for name in (name for name in arrays if name.startswith("param/")):
        np.testing.assert_allclose(
            arrays[name], sum(a[name].astype(np.float64) for a in loaded) / 3, rtol=1e-6
        )
        assert arrays[name].dtype == loaded[0][name].dtype
    assert meta["averaged_from"] == [str(path) for path in kept]
    out = tmp_path / "averaged"
    assert main(["average", *map(str, kept), "--out", str(out)]) == 0
    assert main(["translate", "--checkpoint", str(out), "abc"]) == 0
    assert main(["average", str(run), "--out", str(out)]) == 2  # a checkpoint is there already
    assert "--overwrite" in capsys.readouterr().err


def test_checkpoints_of_different_models_are_not_averaged(run, tmp_path):
    other = Trainer.create(TrainConfig(task="copy", steps=1), {"d_model": 32, "N": 1, "h": 2, "d_ff": 16})
    with pytest.raises(ValueError, match="has another model than"):
        average_checkpoints([run, other.save(tmp_path / "other")])
