"""The best checkpoint kept beside the last, the last N kept for averaging, averaging as the paper does
(one run's checkpoints, a running sum, never over a saved file), and a full disk during a save."""

import errno
import hashlib
import json
import os
import shutil
import tempfile
import tracemalloc

import numpy as np
import pytest

from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.run.checkpoint import (
    SaveError,
    average_checkpoints,
    load_checkpoint,
    save_checkpoint,
)
from numpy_transformer.translator.training import Trainer
from numpy_transformer.translator.training import trainer as trainer_module

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
    dev = {
        record["step"]: (record["bleu"], record["loss"])
        for record in map(json.loads, (run / "log.jsonl").read_text().splitlines())
        if record.get("split") == "dev"
    }
    # the highest BLEU; of a tie, the lowest loss; of a tie in both, the first
    chosen = max(dev, key=lambda step: (dev[step][0], -dev[step][1], -step))
    assert best["step"] == chosen and (best["best_bleu"], best["best_loss"]) == dev[chosen]


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


def test_one_step_of_a_run_is_not_averaged_twice(run):
    """A run directory's model.npz is its last step-*.npz again: giving both would weigh that step double."""
    with pytest.raises(ValueError, match=r"step-0000008.npz is step 8 of the run, as .*model.npz is"):
        average_checkpoints([run, run / "step-0000006.npz", run / "step-0000008.npz"])
    with pytest.raises(ValueError, match="weigh it double"):
        average_checkpoints([run / "step-0000006.npz", run / "step-0000006.npz"])


def test_checkpoints_of_different_models_are_not_averaged(run, tmp_path):
    other = Trainer.create(TrainConfig(task="copy", steps=1), {"d_model": 32, "N": 1, "h": 2, "d_ff": 16})
    with pytest.raises(ValueError, match="has another model than"):
        average_checkpoints([run, other.save(tmp_path / "other")])


def hashes(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(directory.iterdir())}


def test_average_never_clears_a_run_nor_replaces_one_of_its_inputs(run, tmp_path, capsys):
    mine, other = tmp_path / "mine", tmp_path / "other"
    shutil.copytree(run, mine)
    shutil.copytree(run, other)
    before = hashes(mine), hashes(other)
    steps = sorted(str(path) for path in mine.glob("step-*.npz"))
    refused = {
        "into the run it averages": (["average", *steps, "--out", str(mine), "--overwrite"], "training run"),
        "into another run": (["average", *steps, "--out", str(other), "--overwrite"], "training run"),
        "onto its own input": (["average", str(mine), "--out", str(mine), "--overwrite"], "checkpoint 1 of"),
        "onto an input file": (
            ["average", *steps, "--out", steps[1], "--overwrite"],
            "checkpoint 2 of those being averaged",
        ),
        "onto the run's best.npz": (
            ["average", *steps, "--out", str(mine / "best.npz"), "--overwrite"],
            "a file of the training run",
        ),
        "onto a file that is no checkpoint": (
            ["average", *steps, "--out", str(mine / "log.jsonl"), "--overwrite"],
            "neither a directory nor a .npz file",
        ),
    }
    for case, (argv, expected) in refused.items():
        assert main(argv) == 2, case
        error = capsys.readouterr().err
        assert expected in error and len(error.strip().splitlines()) == 1, (case, error)
    assert (hashes(mine), hashes(other)) == before  # nothing written, nothing removed
    averaged = mine / "average.npz"
    assert main(["average", *steps, "--out", str(averaged)]) == 0
    assert main(["average", *steps[1:], "--out", str(averaged)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["average", *steps[1:], "--out", str(averaged), "--overwrite"]) == 0  # that one file
    assert load_checkpoint(averaged)[1]["averaged_from"] == steps[1:]
    assert {name: digest for name, digest in hashes(mine).items() if name != "average.npz"} == before[0]
    new = tmp_path / "new"  # a directory gets model.npz, which --checkpoint DIR finds
    assert main(["average", *steps, "--out", str(new)]) == 0
    assert main(["average", *steps, "--out", str(new), "--overwrite"]) == 0
    assert sorted(path.name for path in new.iterdir()) == ["model.npz"]


def without_run_id(path, out):
    arrays, meta = load_checkpoint(path)
    del meta["run_id"]
    return save_checkpoint(out, arrays, meta)


def test_average_refuses_checkpoints_of_another_run(run, tmp_path, capsys):
    """A reverse-task model has the copy-task model's sizes and vocabularies: only the run id tells."""
    reverse = tmp_path / "reverse"
    argv = [arg if arg != "copy" else "reverse" for arg in TINY]
    assert main(["train", *argv, "--steps", "2", "--out", str(reverse)]) == 0
    assert load_checkpoint(reverse)[1]["model"] == load_checkpoint(run)[1]["model"]
    with pytest.raises(ValueError, match=f"checkpoint {reverse / 'model.npz'} is of another run"):
        average_checkpoints([run / "step-0000008.npz", reverse])
    capsys.readouterr()
    assert main(["average", str(run), str(reverse), "--out", str(tmp_path / "mixed.npz")]) == 2
    assert f"{reverse / 'model.npz'} is of another run" in capsys.readouterr().err
    assert not (tmp_path / "mixed.npz").exists()
    # checkpoints saved before runs recorded an id: refused, or accepted when the user vouches for them
    old = [without_run_id(path, tmp_path / f"old-{path.name}") for path in sorted(run.glob("step-*.npz"))]
    with pytest.raises(ValueError, match=f"checkpoint {old[0]} records no run id.*--allow-no-run-id"):
        average_checkpoints(old)
    assert main(["average", *map(str, old), "--out", str(tmp_path / "old.npz")]) == 2
    assert "--allow-no-run-id" in capsys.readouterr().err
    assert main(["average", *map(str, old), "--allow-no-run-id", "--out", str(tmp_path / "old.npz")]) == 0
    average_checkpoints([old[0], run / "step-0000008.npz"], allow_no_run_id=True)  # ids there agree
    with pytest.raises(ValueError, match="is of another run"):  # and must still agree
        average_checkpoints([old[0], run, reverse], allow_no_run_id=True)


def test_the_run_id_is_kept_across_resume(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--steps", "2", "--out", str(out)]) == 0
    first = load_checkpoint(out)[1]["run_id"]
    assert isinstance(first, str) and len(first) == 32
    assert main(["train", "--resume", "--steps", "4", "--no-progress", "--show", "0", "--out", str(out)]) == 0
    meta = load_checkpoint(out)[1]
    assert meta["step"] == 4 and meta["run_id"] == first
    old = without_run_id(out / "model.npz", tmp_path / "old" / "model.npz")
    assert len(Trainer.resume(old).run_id) == 32  # a run saved without one gets one from now on


def test_average_is_a_running_sum_equal_to_the_mean_of_all(run):
    kept = sorted(run.glob("step-*.npz"))
    arrays, _ = average_checkpoints(kept)
    loaded = [load_checkpoint(path)[0] for path in kept]
    for name in (name for name in arrays if name.startswith("param/")):
        mean = (sum(a[name].astype(np.float64) for a in loaded) / len(loaded)).astype(loaded[0][name].dtype)
        np.testing.assert_array_equal(arrays[name], mean)
    assert all(np.array_equal(arrays[n], loaded[-1][n]) for n in arrays if not n.startswith("param/"))


def test_averaging_holds_one_checkpoint_in_memory_at_a_time(tmp_path):
    trainer = Trainer.create(TrainConfig(task="copy", steps=1), {"d_model": 128, "N": 2, "h": 4, "d_ff": 512})
    paths = []
    for number in range(8):
        for parameter in trainer.model.parameters():
            parameter.data += 0.01
        trainer.step += 1  # eight steps of one run
        paths.append(trainer.save(tmp_path / f"step-{number}.npz"))
    size = paths[0].stat().st_size

    def peak(count):
        tracemalloc.start()
        try:
            average_checkpoints(paths[:count])
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    two, eight = peak(2), peak(8)
    assert eight < two + size, (two, eight, size)  # six more checkpoints cost less than one more


def full_disk(monkeypatch, fails):
    """np.savez raises ENOSPC, after writing part of the file, when ``fails(temporary file name)``."""
    real_savez, real_mkstemp, names = np.savez, tempfile.mkstemp, {}

    def mkstemp(*args, **kwargs):
        handle, name = real_mkstemp(*args, **kwargs)
        names[handle] = os.path.basename(name)
        return handle, name

    def savez(file, *args, **kwargs):
        if fails(names[file.fileno()]):
            file.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_savez(file, *args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    monkeypatch.setattr(np, "savez", savez)


def test_a_full_disk_while_training_keeps_the_last_checkpoints_and_says_so(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    saves = []
    full_disk(monkeypatch, lambda name: saves.append(name) or len(saves) > 3)  # model, step, best; then full
    argv = ["train", *TINY, "--steps", "6", "--keep-checkpoints", "1", "--out", str(out)]
    assert main(argv) == 1
    error = capsys.readouterr().err
    assert error.splitlines() == [
        f"numpy-transformer train: error: could not write {out / 'step-0000004.npz'}: [Errno 28] "
        "No space left on device; nothing was written there"
    ]
    assert sorted(path.name for path in out.glob("*.npz")) == ["best.npz", "model.npz", "step-0000002.npz"]
    assert load_checkpoint(out)[1]["step"] == 2 and load_checkpoint(out / "step-0000002.npz")[1]["step"] == 2
    assert not list(out.glob(".*.tmp"))
    saves.clear()  # now model.npz itself
    full_disk(monkeypatch, lambda name: name.startswith(".model.npz."))
    before = (out / "model.npz").read_bytes()
    assert main(["train", "--resume", "--no-progress", "--show", "0", "--out", str(out)]) == 1
    error = capsys.readouterr().err
    assert "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert f"could not write {out / 'model.npz'}: [Errno 28] No space left on device; the previous " in error
    assert (out / "model.npz").read_bytes() == before and not list(out.glob(".*.tmp"))


def test_a_full_disk_while_averaging_keeps_the_previous_average(run, tmp_path, capsys, monkeypatch):
    out = tmp_path / "average.npz"
    kept = sorted(str(path) for path in run.glob("step-*.npz"))
    assert main(["average", *kept, "--out", str(out)]) == 0
    before = out.read_bytes()
    full_disk(monkeypatch, lambda name: True)
    assert main(["average", *kept[1:], "--out", str(out), "--overwrite"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"numpy-transformer average: error: could not write {out}: [Errno 28] No space left on device; "
        "the previous average.npz is unchanged"
    )
    assert out.read_bytes() == before and sorted(path.name for path in tmp_path.iterdir()) == ["average.npz"]
    with pytest.raises(SaveError) as raised:
        save_checkpoint(tmp_path / "api.npz", {}, {})
    assert raised.value.errno == errno.ENOSPC and isinstance(raised.value, OSError)


# -- the run's own averaging at its end -------------------------------------------------------------


def scripted_evaluations(monkeypatch, bleus, last_loss=1.0):
    """The run's dev evaluations score the given BLEUs in turn (the last: the average's, at the end),
    each at a dev loss of 1.0 but the last, of ``last_loss``; returns the weights each evaluation
    saw, by step, and the models evaluated."""
    seen, models = {}, []
    scores = iter(bleus)

    def evaluate(model, task, pairs, label_smoothing=0.0, batch_size=100, examples=0):
        models.append(model)
        seen[len(models)] = {name: value.copy() for name, value in model.state_dict().items()}
        loss = last_loss if len(models) == len(bleus) else 1.0
        metrics = {"loss": loss, "token_accuracy": 0.5, "exact_match": 0.0, "chrf": 0.0, "n": len(pairs)}
        return {**metrics, "bleu": float(next(scores))}

    monkeypatch.setattr(trainer_module, "evaluate", evaluate)
    return seen, models


TINY_RUN = {"task": "copy", "steps": 12, "eval_every": 2, "eval_size": 2, "batch_size": 4}


@pytest.mark.parametrize(
    "average_bleu, average_loss, kept",
    [(12.0, 1.0, "average"), (3.0, 1.0, "checkpoint"), (9.0, 0.5, "average"), (9.0, 1.0, "checkpoint")],
)
def test_the_run_keeps_the_average_of_its_last_checkpoints_when_it_scores_higher(
    tmp_path, monkeypatch, capsys, average_bleu, average_loss, kept
):
    # evaluations at steps 2, 4, ..., 12: the best single one is step 4's; the second half's (8, 10, 12)
    # are averaged (average_last 5); of the best's BLEU, the average is kept at a lower dev loss alone
    seen, models = scripted_evaluations(monkeypatch, [5, 9, 7, 8, 6, 8, average_bleu], average_loss)
    trainer = Trainer.create(TrainConfig(**TINY_RUN), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16})
    trainer.fit(tmp_path, progress=False)
    assert len(models) == 7 and models[-1] is not trainer.model  # the average, a model of its own
    best, meta = load_checkpoint(tmp_path / "best.npz")
    at_step = {2 * number: seen[number] for number in range(1, 7)}
    for name in at_step[12]:
        expected = (
            sum(at_step[step][name].astype(np.float64) for step in (8, 10, 12)) / 3
            if kept == "average"
            else at_step[4][name]
        )
        np.testing.assert_allclose(best[f"param/{name}"], expected, rtol=1e-6, atol=1e-7, err_msg=name)
        if kept == "average":  # what was scored is what is kept
            np.testing.assert_array_equal(best[f"param/{name}"], seen[7][name])
    assert meta["best"] == {
        "kept": kept,
        "average": {"steps": [8, 10, 12], "bleu": average_bleu},
        "checkpoint": {"step": 4, "bleu": 9.0},
    }
    assert meta["best_bleu"] == max(9.0, average_bleu) == load_checkpoint(tmp_path)[1]["best_bleu"]
    last = json.loads((tmp_path / "log.jsonl").read_text().splitlines()[-1])
    assert (last["split"], last["steps"], last["kept"], last["bleu"]) == (
        "dev-average",
        [8, 10, 12],
        kept,
        average_bleu,
    )
    said = capsys.readouterr().out
    assert "average of steps 8, 10, 12 dev: " in said
    if kept == "average" and average_bleu > 9.0:
        assert (
            "best.npz holds the average: its dev BLEU 12.00 is above that of the best single checkpoint (step 4), 9.00"
            in said
        )
    elif kept == "average":
        assert (
            "best.npz holds the average: its dev BLEU 9.00 is that of the best single checkpoint (step 4), at a "
            "lower dev loss: 0.5000 against 1.0000" in said
        )
    elif average_bleu < 9.0:
        assert (
            "best.npz keeps the best single checkpoint (step 4), dev BLEU 9.00: the average scores 3.00"
            in said
        )
    else:
        assert (
            "best.npz keeps the best single checkpoint (step 4), dev BLEU 9.00: the average scores the same at a "
            "dev loss not lower, 1.0000 against 1.0000" in said
        )
    assert meta["best_loss"] == (average_loss if kept == "average" else 1.0)
    # the checkpoints kept for the average are gone (keep_checkpoints 0), and model.npz says so
    assert not list(tmp_path.glob("step-*.npz")) and load_checkpoint(tmp_path)[1]["kept"] == []


@pytest.mark.parametrize(
    "settings, evaluations, left",
    [
        ({"steps": 4}, 2, []),  # step 4's alone is of the second half: nothing to average
        ({"average_last": 0}, 6, []),  # off
        ({"average_last": 1}, 6, []),  # an average of one is that one: off too
        ({"keep_checkpoints": 2}, 7, ["step-0000010.npz", "step-0000012.npz"]),
        # more asked to be kept than the run wrote: every one stays
        ({"steps": 4, "keep_checkpoints": 5}, 2, ["step-0000002.npz", "step-0000004.npz"]),
        (
            {"average_last": 2, "keep_checkpoints": 3},
            7,
            ["step-0000008.npz", "step-0000010.npz", "step-0000012.npz"],
        ),
    ],
)
def test_the_average_needs_two_checkpoints_and_the_run_keeps_keep_checkpoints_of_them(
    tmp_path, monkeypatch, settings, evaluations, left
):
    _, models = scripted_evaluations(monkeypatch, [5, 9, 7, 8, 6, 8, 1])
    trainer = Trainer.create(
        TrainConfig(**{**TINY_RUN, **settings}), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}
    )
    trainer.fit(tmp_path, progress=False)
    assert len(models) == evaluations
    assert (
        sorted(path.name for path in tmp_path.glob("step-*.npz"))
        == left
        == load_checkpoint(tmp_path)[1]["kept"]
    )
    averaged = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert any(record.get("split") == "dev-average" for record in averaged) == (evaluations == 7)
    if settings.get("average_last") == 2:
        assert load_checkpoint(tmp_path / "best.npz")[1]["best"]["average"]["steps"] == [10, 12]
    # a resumed run that ends without a new evaluation does not average again
    Trainer.resume(tmp_path).fit(tmp_path, progress=False)
    assert len(models) == evaluations


def test_a_resumed_run_compares_its_new_average_with_the_earlier_one(tmp_path, monkeypatch, capsys):
    scripted_evaluations(monkeypatch, [5, 9, 7, 8, 6, 8, 12, 7, 8, 10])
    trainer = Trainer.create(TrainConfig(**TINY_RUN), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16})
    trainer.fit(tmp_path, progress=False)
    first = (tmp_path / "best.npz").read_bytes()
    resumed = Trainer.resume(tmp_path, steps=16)
    assert resumed.evaluations.best_bleu == 12.0  # the average's, recorded in model.npz
    resumed.fit(tmp_path, progress=False)
    assert (
        "best.npz keeps the earlier average, dev BLEU 12.00: the average scores 10.00"
        in capsys.readouterr().out
    )
    assert (tmp_path / "best.npz").read_bytes() == first


def test_a_run_saved_before_best_npz_had_its_loss_keeps_it_on_a_tie_and_says_why(
    tmp_path, monkeypatch, capsys
):
    scripted_evaluations(monkeypatch, [5, 9, 7, 8, 6, 8, 3, 7, 8, 9], last_loss=0.5)
    trainer = Trainer.create(TrainConfig(**TINY_RUN), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16})
    trainer.fit(tmp_path, progress=False)
    arrays, meta = load_checkpoint(tmp_path)
    del meta["best_loss"]  # as a run saved before checkpoints recorded it
    save_checkpoint(tmp_path / "model.npz", arrays, meta)
    Trainer.resume(tmp_path, steps=16).fit(tmp_path, progress=False)  # evaluations 7 and 8, the average 9
    assert (
        "best.npz keeps the best single checkpoint (step 4), dev BLEU 9.00: the average scores the same, and "
        "best.npz's dev loss is not recorded to compare" in capsys.readouterr().out
    )
    kept = load_checkpoint(tmp_path / "best.npz")[1]
    assert kept["best"]["kept"] == "checkpoint" and kept["step"] == 4


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_checkpoint_holding_nan_or_inf_is_refused_by_file_and_weight(run, tmp_path, capsys, bad):
    arrays, meta = load_checkpoint(run / "step-0000004.npz")
    arrays["param/projection_layer.proj.weight"].flat[3] = bad
    damaged = save_checkpoint(tmp_path / "damaged.npz", arrays, meta)
    with pytest.raises(ValueError, match="its weight projection_layer.proj.weight holds NaN or infinite"):
        average_checkpoints([damaged, run / "step-0000006.npz"])
    out = tmp_path / "average.npz"
    assert main(["average", str(run / "step-0000006.npz"), str(damaged), "--out", str(out)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and f"checkpoint {damaged}: its weight" in error
    assert not out.exists()  # nothing written


def test_resume_refuses_an_average_as_it_refuses_an_imported_model(run, tmp_path, capsys):
    out = tmp_path / "averaged"
    steps = [str(run / f"step-000000{step}.npz") for step in (6, 8)]
    assert main(["average", *steps, "--out", str(out)]) == 0
    saved = (out / "model.npz").read_bytes()
    assert main(["train", "--resume", "--out", str(out), "--steps", "12", "--no-progress"]) == 2
    error = capsys.readouterr().err
    assert f"{out / 'model.npz'} holds an average, not a training run: fine-tune it" in error
    with pytest.raises(ValueError, match="holds an average, not a training run"):
        Trainer.resume(out)
    assert sorted(path.name for path in out.iterdir()) == ["model.npz"]
    assert (out / "model.npz").read_bytes() == saved
