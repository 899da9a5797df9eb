"""Training end to end: learning, exact resume, checkpoints, divergence, Ctrl-C and the command line."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, replace

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.run.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from numpy_transformer.translator.training import Trainer, TrainingDiverged
from numpy_transformer.translator.training import trainer as trainer_module

SMALL = {"d_model": 32, "N": 1, "h": 2, "d_ff": 64, "dropout": 0.1}
TINY_MODEL = {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}


def cli(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "numpy_transformer", *args], capture_output=True, text=True, **kwargs
    )


def test_copy_task_loss_falls():
    """A broken backward or optimiser cannot get here: the loss starts near ln(14) = 2.64."""
    trainer = Trainer.create(
        TrainConfig(
            task="copy",
            steps=400,
            batch_size=32,
            lr=3e-3,
            warmup=50,
            eval_every=400,
            eval_size=50,
            log_every=20,
        ),
        SMALL,
    )
    records = trainer.fit(progress=False)
    losses = [r["loss"] for r in records if "split" not in r]
    assert losses[0] > 2.2
    dev = [r for r in records if r.get("split") == "dev"][-1]
    assert dev["loss"] < 1.1  # measured 0.92; with label smoothing 0.1 the floor is about 0.45
    assert dev["token_accuracy"] > 0.75


def _params(path):
    arrays, _ = load_checkpoint(path)
    return {k: v for k, v in arrays.items() if k.startswith(("param/", "optim/"))}


@pytest.mark.slow
@pytest.mark.parametrize("threads", ["1", "2"])  # one pass, and two row shards on two threads
def test_resume_is_bit_identical(tmp_path, threads):
    args = [
        "train",
        "--task",
        "copy",
        "--d-model",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-ff",
        "64",
        "--batch-size",
        "16",
        "--schedule",
        "constant",
        "--lr",
        "0.003",
        "--eval-every",
        "1000",
        "--eval-size",
        "20",
        "--threads",
        threads,
        "--no-progress",
    ]
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert cli(*args, "--steps", "40", "--out", str(whole)).returncode == 0
    assert cli(*args, "--steps", "20", "--out", str(split)).returncode == 0
    resumed = cli("train", "--resume", "--steps", "40", "--out", str(split), "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout and "at step 20" in resumed.stdout
    a, b = _params(whole / "model.npz"), _params(split / "model.npz")
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert load_checkpoint(split)[1]["step"] == 40


def test_checkpoint_errors(tmp_path):
    trainer = Trainer.create(TrainConfig(task="copy", steps=1), SMALL)
    path = trainer.save(tmp_path)
    data = path.read_bytes()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"truncated\.npz: corrupt or truncated"):
        load_checkpoint(truncated)
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    with pytest.raises(CheckpointError, match=r"garbage\.npz"):
        load_checkpoint(garbage)
    with pytest.raises(CheckpointError, match="no such file"):
        load_checkpoint(tmp_path / "absent.npz")
    arrays, meta = load_checkpoint(path)
    meta["model"]["d_model"] = 64  # weights of a d_model=32 model under a d_model=64 config
    mismatched = save_checkpoint(
        tmp_path / "mismatched.npz", arrays, {k: v for k, v in meta.items() if k != "format"}
    )
    with pytest.raises(CheckpointError, match=r"mismatched\.npz.*do not fit.*expected"):
        Trainer.resume(mismatched)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = save_checkpoint(tmp_path / "model.npz", {"a": np.arange(3)}, {"step": 1})

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {"a": np.arange(5)}, {"step": 2})
    arrays, meta = load_checkpoint(path)
    assert meta["step"] == 1 and arrays["a"].tolist() == [0, 1, 2]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.npz"]


def test_nan_stops_training_and_keeps_last_good_checkpoint(tmp_path):
    trainer = Trainer.create(TrainConfig(task="copy", steps=4, eval_every=2, eval_size=5, log_every=1), SMALL)
    trainer.config = replace(trainer.config, steps=2)
    trainer.fit(tmp_path, progress=False)
    good = _params(tmp_path / "model.npz")
    trainer.config = replace(trainer.config, steps=4)
    params = dict(trainer.model.named_parameters())
    params["decoder.layers.0.feed_forward_block.linear_1.weight"].data[0, 0] = np.nan
    with pytest.raises(TrainingDiverged, match=r"step 3: the gradient of .* is NaN or infinite"):
        trainer.fit(tmp_path, progress=False)
    after = _params(tmp_path / "model.npz")
    for name in good:
        np.testing.assert_array_equal(good[name], after[name])


def test_weights_an_update_made_infinite_stop_the_run_before_they_are_evaluated(tmp_path, capsys):
    """Every gradient finite, the update overflowing: the run stops before its dev evaluation, which
    would score NaN and have NumPy warn of the model's own sums."""
    trainer = Trainer.create(TrainConfig(task="copy", steps=2, eval_every=1, eval_size=5), SMALL)
    update = trainer.optimizer.step

    def overflowing(*args, **kwargs):
        update(*args, **kwargs)
        trainer.model.projection_layer.proj.bias.data[0] = np.inf

    trainer.optimizer.step = overflowing
    with pytest.raises(
        TrainingDiverged, match="step 1: the weights of projection_layer.proj.bias are NaN or infinite"
    ):
        trainer.fit(tmp_path, progress=False)
    assert "dev" not in capsys.readouterr().out
    assert not (tmp_path / "model.npz").exists()


@pytest.mark.slow
def test_ctrl_c_saves_before_exiting(tmp_path):
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "numpy_transformer",
            "train",
            "--task",
            "copy",
            "--d-model",
            "32",
            "--layers",
            "1",
            "--heads",
            "2",
            "--d-ff",
            "64",
            "--steps",
            "100000",
            "--log-every",
            "5",
            "--out",
            str(tmp_path),
            "--no-progress",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    log = tmp_path / "log.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and not (log.exists() and log.read_text().strip()):
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert (
        "interrupted: saved step" in stdout and "; --resume continues it (Trainer.resume in Python)" in stdout
    )
    assert "stopping after this step, then saving (Ctrl-C again: stop at once without saving)" in stderr
    _, meta = load_checkpoint(tmp_path)
    assert 5 <= meta["step"] < 100000


def test_a_second_ctrl_c_stops_at_once_with_one_line_and_a_whole_checkpoint(tmp_path, monkeypatch, capsys):
    """The second Ctrl-C arrives while the step runs: no traceback, and what was saved is whole."""
    from numpy_transformer.translator.training import Trainer as TrainerClass

    calls = []
    original = TrainerClass.train_step

    def step_then_two_interrupts(self):
        calls.append(1)
        if len(calls) == 3:
            self.requests.on_signal(signal.SIGINT, None)
            self.requests.on_signal(signal.SIGINT, None)  # raises KeyboardInterrupt, as a second Ctrl-C does
        return original(self)

    monkeypatch.setattr(TrainerClass, "train_step", step_then_two_interrupts)
    assert (
        main(
            [
                "train",
                "--task",
                "copy",
                "--d-model",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--d-ff",
                "32",
                "--steps",
                "10",
                "--eval-every",
                "2",
                "--eval-size",
                "3",
                "--no-progress",
                "--show",
                "0",
                "--out",
                str(tmp_path / "run"),
            ]
        )
        == 130
    )
    error = capsys.readouterr().err
    assert "interrupted again: stopped at once without saving this step" in error and "Traceback" not in error
    assert load_checkpoint(tmp_path / "run")[1]["step"] == 2


def test_cli_bad_arguments_give_one_line():
    result = cli("train", "--steps", "0")
    assert result.returncode == 2 and "expected a positive integer, got 0" in result.stderr
    assert "Traceback" not in result.stderr
    result = cli("train", "--batch-size", "-3")
    assert result.returncode == 2 and "-3" in result.stderr
    result = cli("train", "--lr", "0")
    assert result.returncode == 2 and "expected a positive finite number, got 0.0" in result.stderr
    result = cli("train", "--threads", "-1")
    assert result.returncode == 2 and "expected an integer >= 0, got -1" in result.stderr
    result = cli("translate", "--top-p", "2", "x")
    assert result.returncode == 2 and "expected a number in (0, 1], got 2.0" in result.stderr


def test_cli_missing_data_file_and_checkpoint(tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path / "none.tsv"), "--out", str(tmp_path / "run")]) == 2
    assert "none.tsv: no such file" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(tmp_path / "nothing"), "hello"]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_train_translate_evaluate_on_tsv(tmp_path):
    data = tmp_path / "pairs.tsv"
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven"]
    data.write_text("".join(f"{a} {b}\t{b} {a}\n" for a in words for b in words))
    out = tmp_path / "run"
    result = cli(
        "train",
        "--data",
        str(data),
        "--steps",
        "60",
        "--d-model",
        "32",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-ff",
        "64",
        "--eval-every",
        "60",
        "--out",
        str(out),
        "--no-progress",
    )
    assert result.returncode == 0, result.stderr
    assert (out / "model.npz").is_file()
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert {"step", "loss", "lr", "tokens_per_s"} <= records[0].keys()
    result = cli("translate", "--checkpoint", str(out), input="one two\nseven five\n")
    assert result.returncode == 0 and len(result.stdout.splitlines()) == 2
    result = cli("translate", "--checkpoint", str(out / "model.npz"), "one zebra")
    # every byte is a unit of the subword vocabularies: a word never seen is spelled, never <unk>
    assert result.returncode == 0 and "warning" not in result.stderr
    result = cli("evaluate", "--checkpoint", str(out), "--json")
    metrics = json.loads(result.stdout)
    assert set(metrics) == {"loss", "token_accuracy", "exact_match", "bleu", "chrf", "n"} | {
        "bleu_signature",
        "chrf_signature",
        "decoding",
    }
    assert metrics["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    assert metrics["decoding"] == "beam (beam width 4, length penalty 1.0, no repeat ngram 0)"  # subwords
    result = cli("evaluate", "--checkpoint", str(out), "--json", "--strategy", "greedy")
    assert json.loads(result.stdout)["decoding"] == "greedy (no repeat ngram 0)"
    for strategy in ("sample", "beam"):
        assert cli("translate", "--checkpoint", str(out), "--strategy", strategy, "one two").returncode == 0
    other = tmp_path / "other.tsv"
    other.write_text("one two\ttwo one\nseven zebra\tzebra seven\n")
    data.unlink()  # evaluate --data needs the checkpoint and that file only
    result = cli("evaluate", "--checkpoint", str(out), "--data", str(other), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["n"] == 2
    result = cli("evaluate", "--checkpoint", str(out))  # the test split is the training corpus's
    assert result.returncode == 2 and f"the run trained on {data}, which no longer exists" in result.stderr


def test_the_command_restarts_once_with_the_openblas_setting(monkeypatch):
    from numpy_transformer import machine as cli_module

    calls = []
    monkeypatch.setattr(cli_module.os, "execv", lambda path, args: calls.append((path, args)))
    monkeypatch.setattr(
        cli_module.sys, "argv", ["numpy-transformer", "translate", "--checkpoint", "run", "one"]
    )
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    cli_module.restart_with_openblas_timeout()
    if not sys.platform.startswith("linux"):
        assert calls == []
        return
    assert calls == [
        (
            sys.executable,
            [sys.executable, "-m", "numpy_transformer", "translate", "--checkpoint", "run", "one"],
        )
    ]
    assert cli_module.os.environ["OPENBLAS_THREAD_TIMEOUT"] == "24"
    cli_module.restart_with_openblas_timeout()  # set now: no second restart
    assert len(calls) == 1


def test_the_restarted_command_runs_once(tmp_path):
    """Started without the setting, the command runs once more with it, and only once."""
    env = {k: v for k, v in __import__("os").environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = cli("translate", "--checkpoint", str(tmp_path / "missing"), "hello", env=env, timeout=120)
    assert out.returncode == 2
    assert out.stderr.count("numpy-transformer translate: error") == 1, out.stderr


def test_accumulating_k_micro_batches_gives_the_gradient_of_the_k_times_larger_batch():
    """Two micro-batches of 8 pairs, each weighted by its share of the target tokens: the gradient
    and the loss of the 16 pairs as one batch, in float64, without dropout."""
    from numpy_transformer.kernels import ops
    from numpy_transformer.translator.batches import make_batch
    from numpy_transformer.translator.vocabulary import BOS_ID, EOS_ID, PAD_ID

    model_args = {"d_model": 16, "N": 1, "h": 2, "d_ff": 16, "dropout": 0.0, "dtype": "float64"}
    trainer = Trainer.create(
        TrainConfig(task="copy", steps=1, batch_size=8, accumulate=2, clip=0.0), model_args
    )
    trainer.optimizer.step = lambda lr=None: None  # keep the weights: compare the gradient
    loss = trainer.train_step()["loss"]
    micro = [trainer.task.train_batch(k, 8, trainer.config.bucket_steps) for k in range(2)]
    keep = lambda rows, drop: [[i for i in row if i not in drop] for row in rows]  # noqa: E731
    joined = make_batch(
        keep([r for b in micro for r in b.src.tolist()], {PAD_ID}),
        keep([r for b in micro for r in b.tgt_out.tolist()], {PAD_ID, EOS_ID}),
    )
    assert joined.n_tokens == sum(b.n_tokens for b in micro) and joined.tgt_in[0, 0] == BOS_ID
    model = nt.build_transformer(**asdict(trainer.model.config))
    model.load_state_dict(trainer.model.state_dict())
    logits = model.forward(joined.src, joined.tgt_in, joined.src_mask, joined.tgt_mask)
    whole_loss, cache = ops.cross_entropy_forward(
        logits, joined.tgt_out, PAD_ID, trainer.config.label_smoothing
    )
    model.zero_grad()
    model.backward(ops.cross_entropy_backward(1.0, cache))
    assert abs(loss - whole_loss) <= 1e-12 * whole_loss
    for (name, mine), (_, whole) in zip(trainer.model.named_parameters(), model.named_parameters()):
        np.testing.assert_allclose(mine.grad, whole.grad, rtol=1e-10, atol=1e-13, err_msg=name)


def test_batches_of_about_n_target_tokens():
    task = Trainer.create(
        TrainConfig(task="reverse", steps=1), {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}
    ).task
    sizes = [task.train_batch(step, 64, 20, batch_tokens=300) for step in range(40)]
    tokens = [batch.n_tokens for batch in sizes]
    rows = [batch.src.shape[0] for batch in sizes]
    assert all(200 <= n <= 400 for n in tokens), tokens  # about 300 target tokens each
    assert max(rows) > 2 * min(rows)  # many short pairs or few long ones
    again = task.train_batch(7, 64, 20, batch_tokens=300)
    assert again.src.tolist() == sizes[7].src.tolist()  # a pure function of the step


def test_patience_stops_when_dev_bleu_stops_improving(tmp_path):
    config = TrainConfig(task="copy", steps=40, batch_size=4, eval_every=1, eval_size=2, lr=1e-9, patience=2)
    trainer = Trainer.create(config, TINY_MODEL)
    records = trainer.fit(tmp_path, progress=False)
    dev = [r for r in records if r.get("split") == "dev"]
    assert len(dev) == 3 and trainer.step == 3  # the first evaluation sets the best; two more without a gain
    assert (tmp_path / "best.npz").exists() and load_checkpoint(tmp_path)[1]["evals_since_best"] == 2


def scripted_bleus(monkeypatch, bleus):
    """The run's dev evaluations score the given BLEUs in turn."""
    scores = iter(bleus)

    def evaluate(model, task, pairs, label_smoothing=0.0, batch_size=100, examples=0):
        metrics = {"loss": 1.0, "token_accuracy": 0.5, "exact_match": 0.0, "chrf": 0.0, "n": len(pairs)}
        return {**metrics, "bleu": float(next(scores))}

    monkeypatch.setattr(trainer_module, "evaluate", evaluate)


PLATEAU = {
    "task": "copy",
    "batch_size": 4,
    "eval_every": 2,
    "eval_size": 2,
    "log_every": 1,
    "schedule": "constant",
    "average_last": 0,
    "plateau_cut": 0.5,
    "plateau_patience": 2,
    "lr_floor": 2e-4,
}
# dev BLEU at steps 2, 4, ..., 20: cuts after steps 6 (two evaluations without a gain), 12 (two since
# the gain at 8) and 16 (four since it), there to the floor; none at 20, where the rate is at it
PLATEAU_BLEUS = [5, 4, 3, 6, 6, 6, 6, 6, 6, 6]
PLATEAU_LRS = [1e-3] * 6 + [5e-4] * 6 + [2.5e-4] * 4 + [2e-4] * 4


def test_the_learning_rate_is_cut_on_a_plateau_never_below_its_floor_and_resumed(
    tmp_path, monkeypatch, capsys
):
    scripted_bleus(monkeypatch, PLATEAU_BLEUS)
    straight = Trainer.create(TrainConfig(**PLATEAU, steps=20), TINY_MODEL)
    records = straight.fit(tmp_path / "straight", progress=False)
    assert [r["lr"] for r in records if "lr" in r] == pytest.approx(PLATEAU_LRS, rel=1e-12)
    said = capsys.readouterr().out
    assert (
        "not improved for 2 evaluations: the learning rate is cut to 0.5 times the schedule's, 5.00e-04 now\n"
        in said
    )
    assert (
        "for 4 evaluations: the learning rate is cut to 0.125 times the schedule's, 2.00e-04 now (its floor)"
        in said
    )
    assert said.count("is cut to") == 3 and straight.evaluations.lr_scale == 0.125
    # the multiplier is the run's state: 10 steps, then --resume to 20, is the same run
    scripted_bleus(monkeypatch, PLATEAU_BLEUS)
    Trainer.create(TrainConfig(**PLATEAU, steps=10), TINY_MODEL).fit(tmp_path / "resumed", progress=False)
    assert load_checkpoint(tmp_path / "resumed")[1]["lr_scale"] == 0.5
    resumed = Trainer.resume(tmp_path / "resumed", steps=20)
    assert resumed.evaluations.lr_scale == 0.5 and resumed.evaluations.evals_since_best == 1
    later = resumed.fit(tmp_path / "resumed", progress=False)
    assert [r["lr"] for r in later if "lr" in r] == pytest.approx(PLATEAU_LRS[10:], rel=1e-12)
    for name, value in load_checkpoint(tmp_path / "straight")[0].items():
        np.testing.assert_array_equal(value, load_checkpoint(tmp_path / "resumed")[0][name], err_msg=name)


def test_the_plateau_cut_is_a_multiplier_of_each_schedule_and_off_by_default():
    trainer = Trainer.create(TrainConfig(task="copy", steps=100, warmup=10, lr_floor=1e-4), TINY_MODEL)
    assert trainer.config.plateau_cut == 1.0
    assert [trainer.learning_rate(step) for step in (1, 50, 100)] == [
        trainer.schedule(step) for step in (1, 50, 100)
    ]
    trainer.evaluations.lr_scale = 0.25
    assert trainer.learning_rate(50) == trainer.schedule(50) * 0.25
    assert trainer.learning_rate(1) == trainer.schedule(1)  # the warm-up below the floor: the schedule's
    assert trainer.learning_rate(70) == 1e-4 < trainer.schedule(70)  # the cut stops at the floor
    assert trainer.learning_rate(99) == trainer.schedule(99) < 1e-4  # the cosine's end goes below it
    with pytest.raises(
        ValueError, match=r"--plateau-patience 8 is not below --patience 8: the run would stop"
    ):
        TrainConfig(data="x.tsv", plateau_cut=0.5, plateau_patience=8).resolve()
    with pytest.raises(ValueError, match=r"plateau_cut must be a number in \(0, 1\], got 1.5"):
        TrainConfig(plateau_cut=1.5)


def test_each_evaluation_shows_dev_translations_and_logs_its_scores_signatures(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
    argv += ["--steps", "4", "--eval-every", "2", "--eval-size", "4", "--eval-examples", "3"]
    assert main([*argv, "--no-progress", "--show", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert sum(line.startswith("  reference  ") for line in printed) == 2 * 3  # 3 at each of 2 evaluations
    dev = [
        r for r in map(json.loads, (out / "log.jsonl").read_text().splitlines()) if r.get("split") == "dev"
    ]
    assert [len(r["examples"]) for r in dev] == [3, 3]
    assert all(r["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:char|") for r in dev)
    assert all(r["chrf_signature"].startswith("nrefs:1|case:mixed|eff:yes|nc:6|nw:0|") for r in dev)


def test_translate_lists_n_best_with_scores_and_scores_given_translations(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", "--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
    assert (
        main([*argv, "--steps", "2", "--eval-size", "2", "--no-progress", "--show", "0", "--out", str(out)])
        == 0
    )
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(out), "--n-best", "3", "abc", "ba"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [source for source, _, _ in lines] == ["abc"] * 3 + ["ba"] * 3
    for start in (0, 3):
        scores = [float(score) for _, _, score in lines[start : start + 3]]
        assert scores == sorted(scores, reverse=True)
    assert main(["translate", "--checkpoint", str(out), "--score", "abc\tabc", "abc\tcba"]) == 0
    scored = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    assert [row[:2] for row in scored] == [["abc", "abc"], ["abc", "cba"]]
    assert all(float(row[2]) < 0 for row in scored)  # log-probabilities
    assert main(["translate", "--checkpoint", str(out), "--score", "abc"]) == 2
    assert (
        "--score reads 'source<TAB>translation', but the translation to score is missing"
        in capsys.readouterr().err
    )
    assert main(["translate", "--checkpoint", str(out), "--n-best", "2", "--strategy", "greedy", "abc"]) == 2
    assert "--n-best 2 needs beam search, not --strategy greedy" in capsys.readouterr().err
    assert main(["translate", "--checkpoint", str(out), "--n-best", "5", "abc"]) == 2
    assert (
        "--n-best must be an integer in [1, --beam-width=4] (a beam keeps that many), got 5"
        in capsys.readouterr().err
    )


def test_a_fine_tune_from_a_run_resumes_exactly_and_keeps_to_its_tables(tmp_path):
    """train --from a copy run on a corpus: its model, tokenizer and vocabularies, pairs longer than its
    positional tables left out (counted in its own tokens), and a resume that replays the run."""
    base = tmp_path / "copy"
    Trainer.create(TrainConfig(task="copy", steps=2, eval_every=2, eval_size=4), TINY_MODEL).fit(base, False)
    corpus = tmp_path / "pairs.tsv"
    rng = np.random.default_rng(0)
    words = {"".join(rng.choice(list("abcdefghij"), int(rng.integers(3, 9)))) for _ in range(30)}
    corpus.write_text("".join(f"{word}\t{word[::-1]}\n" for word in words) + "ab" * 20 + "\tba\n")
    config = TrainConfig(
        data=str(corpus), from_run=str(base), steps=4, eval_every=2, eval_size=4, batch_size=8
    )
    with pytest.warns(UserWarning, match=f"1 of {len(words) + 1} pairs have more than 28 tokens"):
        whole = Trainer.create(config, {})
    assert (
        asdict(whole.model.config) == load_checkpoint(base)[1]["model"] and whole.config.tokenizer == "char"
    )
    whole.fit(tmp_path / "whole", False)
    with pytest.warns(UserWarning):
        Trainer.create(replace(config, steps=2), {}).fit(tmp_path / "halves", False)
    Trainer.resume(tmp_path / "halves", steps=4).fit(tmp_path / "halves", False)
    for name, value in load_checkpoint(tmp_path / "whole")[0].items():
        np.testing.assert_array_equal(load_checkpoint(tmp_path / "halves")[0][name], value, err_msg=name)


def test_fit_refuses_an_empty_directory_name_never_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    trainer = Trainer.create(TrainConfig(task="copy", steps=1, batch_size=4, eval_every=1), TINY_MODEL)
    with pytest.raises(ValueError, match="^out_dir is empty"):
        trainer.fit("", progress=False)
    assert trainer.step == 0 and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "variable, choices",
    [("NUMPY_TRANSFORMER_BACKEND", "numpy, cupy"), ("NUMPY_TRANSFORMER_KERNELS", "fast, reference, learner")],
)
def test_a_bad_environment_variable_is_named_before_any_work(tmp_path, variable, choices):
    env = {**os.environ, variable: "bogus"}
    for argv in (
        ["train", "--task", "copy", "--out", str(tmp_path / "run")],
        ["translate", "--checkpoint", str(tmp_path), "a"],
    ):
        result = cli(*argv, env=env)
        assert result.returncode == 2 and result.stderr.count("\n") == 1
        assert f"the environment variable {variable} is 'bogus', expected one of {choices}" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_native_windows_is_refused_before_any_work_naming_wsl(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "platform", "win32")
    out = tmp_path / "run"
    for argv in (["train", "--task", "copy", "--out", str(out)], ["learn", "start", str(tmp_path / "wb")]):
        assert main(argv) == 2
        said = capsys.readouterr().err
        assert said.startswith(f"numpy-transformer {argv[0]}: error: ") and said.count("\n") == 1
        assert "not on native Windows: run them in WSL" in said
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "saved_rates",
    [
        {"lr": 1e-5, "plateau_cut": 0.5},  # the default --lr-floor 1e-5, not below this --lr
        {"lr": 1e-4, "min_lr": 1e-3},  # a cosine --min-lr above --lr
    ],
)
def test_a_run_saved_with_rates_a_new_run_is_refused_resumes(tmp_path, capsys, saved_rates):
    """Refused for a new run, never when a run saved before those refusals is read back."""
    out = tmp_path / "run"
    given = ["--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
    given += ["--batch-size", "4", "--eval-every", "2", "--eval-size", "4", "--no-progress", "--show", "0"]
    assert main(["train", *given, "--steps", "2", "--out", str(out)]) == 0
    arrays, meta = load_checkpoint(out / "model.npz")
    meta["train"] = {**meta["train"], **saved_rates}  # as a run saved before the refusals holds them
    save_checkpoint(out / "model.npz", arrays, meta)
    with pytest.raises(ValueError, match="is (above|not below) --lr"):
        TrainConfig(**meta["train"]).resolve()  # a new run's settings: refused
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--steps", "4", "--no-progress", "--show", "0"]) == 0
    assert "error" not in capsys.readouterr().err
    arrays, meta = load_checkpoint(out / "model.npz")
    assert meta["step"] == 4 and all(meta["train"][name] == value for name, value in saved_rates.items())
    assert Trainer.resume(out / "model.npz", steps=6).config.lr == saved_rates["lr"]
