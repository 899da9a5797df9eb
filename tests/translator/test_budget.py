"""--time-budget: a --data run plans its steps from the measured speed so that everything, from
reading the corpus to the last evaluation, fits the minutes it was given, and its learning-rate
schedule reaches its end there. The clock is a fake one, advanced by the steps and evaluations, so
the plans are exact and the tests do not depend on the machine's speed."""

import json
import re

import pytest

from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import (
    EVAL_EVERY,
    EVALUATION_SHARE,
    EVALUATIONS,
    TASK_STEPS,
    TrainConfig,
    planned_eval_every,
)
from numpy_transformer.translator.run.checkpoint import load_checkpoint
from numpy_transformer.translator.training import PLAN_AFTER, TimeBudget, Trainer, budget, loop
from numpy_transformer.translator.training import trainer as trainer_module

TINY_MODEL = {"d_model": 16, "N": 1, "h": 2, "d_ff": 16}


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    for module in (budget, loop, trainer_module):  # every clock of the run
        monkeypatch.setattr(module, "time", fake)
    return fake


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("".join(f"w{i % 50} x{i % 7}\tv{i % 50} y{i % 7}\n" for i in range(400)))
    return path


def timed(trainer, clock, step_s, evaluation_s):
    """Each step and each evaluation of ``trainer`` (the average's at the end too) takes the given
    seconds on ``clock``."""
    train_step, dev_metrics = trainer.train_step, trainer.dev_metrics

    def step():
        clock.now += step_s
        return train_step()

    def evaluation(model, examples=0):
        clock.now += evaluation_s
        return dev_metrics(model, examples)

    trainer.train_step, trainer.dev_metrics = step, evaluation


def test_the_plan_fills_the_time_left_with_steps_and_their_evaluations(clock):
    budget = TimeBudget(1.0, spent=6.0)  # 60 s in all, 6 of them spent reading the corpus
    budget.step_seconds = [0.1, 0.1, 0.1, 5.0, 0.1]  # a pause is not the pace: 0.1 s
    clock.now += 4.0  # 10 s spent
    # no evaluation measured yet: (60 - 10) / 0.1 steps
    assert budget.plan(step=20, eval_every=100) == 20 + 500
    budget.evaluation_seconds = [2.0, 4.0]  # 3 s each: (60 - 10 - 3) / (0.1 + 3 / 100) more steps
    assert budget.plan(step=20, eval_every=100) == 20 + int(47 / 0.13)
    # the pace is the steps' mean, not their median: long batches cost their time too
    budget.step_seconds = [0.1, 0.1, 0.4]  # 0.2 s a step
    assert budget.plan(step=23, eval_every=100) == 23 + int(47 / 0.23)
    clock.now += 100.0  # the time has run out: end here
    assert budget.plan(step=400, eval_every=100) == 400


def test_a_plan_that_chooses_the_interval_counts_its_evaluations_first(clock):
    budget = TimeBudget(1.0)  # 60 s
    budget.step_seconds, budget.evaluation_seconds = [0.1], [1.0]
    # the last evaluation and the EVALUATIONS planned: (60 - 1 - 10 * 1) / 0.1 steps
    assert budget.plan(step=0, eval_every=None) == int((60 - 1 - EVALUATIONS * 1) / 0.1)


def test_a_short_budget_is_evaluated_often_enough_for_its_patience(clock, corpus, tmp_path, capsys):
    """Not given --eval-every, a run of a few hundred steps in its budget is evaluated ten times at
    least, not every 500 steps (once, at its end), though each evaluation costs five steps' time;
    the interval it planned is saved with the run and a resume keeps it."""
    quiet = {
        "eval_size": 4,
        "eval_examples": 0,
        "patience": 0,
    }  # patience would stop this run, which learns little
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, **quiet)
    trainer = Trainer.create(config, TINY_MODEL)
    assert trainer.config.eval_every is None  # planned with the steps
    timed(trainer, clock, step_s=0.1, evaluation_s=0.5)
    records = trainer.fit(tmp_path / "run", progress=False)
    dev = [record["step"] for record in records if record.get("split") == "dev"]
    said = capsys.readouterr().out
    assert "100 ms a step: planned 299 steps, evaluated every 29 steps, to fit" in said
    assert trainer.step < EVAL_EVERY and len(dev) >= EVALUATIONS, (trainer.step, dev)
    # planned at the first plan (a tenth of 299 steps), then again when the first evaluation had
    # shown what evaluations cost, which shortened the plan
    interval = trainer.config.eval_every
    assert dev[0] == 29 and interval < 29 and all(step % interval == 0 for step in dev[1:-1])
    assert re.search(
        rf"0.5 s an evaluation: planned \d+ steps, evaluated every {interval} steps from here", said
    )
    assert f"eval_every = {interval}\n" in (tmp_path / "run" / "config.toml").read_text()
    assert load_checkpoint(tmp_path / "run")[1]["train"]["eval_every"] == interval
    resumed = Trainer.resume(tmp_path / "run", time_budget=1.0)
    assert resumed.config.eval_every == interval


def test_dear_evaluations_are_fewer_and_the_steps_keep_the_budget(clock, corpus, tmp_path, capsys):
    """Evaluations that cost 50 steps' time each (a large dev set, a slow machine, an untrained model's
    long outputs): ten would take the whole budget, and the plan once ended the run at its first
    evaluation, a third of its time unused. The planned evaluations keep to EVALUATION_SHARE of the
    time left; the steps fill the rest."""
    quiet = {"eval_size": 4, "eval_examples": 0, "patience": 0}
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, **quiet)
    trainer = Trainer.create(config, TINY_MODEL)
    timed(trainer, clock, step_s=0.1, evaluation_s=5.0)
    started = clock.now
    records = trainer.fit(tmp_path / "run", progress=False)
    said = capsys.readouterr().out
    dev = [record["step"] for record in records if record.get("split") == "dev"]
    used = clock.now - started
    # the budget used, not a third of it left; bar the time kept for the average's evaluation, which
    # does not come when there are not checkpoints enough to average
    assert 30 - 5.0 - 0.2 <= used <= 30 + 0.2, (used, dev)
    evaluations_after_the_first = 5.0 * (
        len(dev) - 2
    )  # bar the first one, which taught the cost, and the last
    assert evaluations_after_the_first <= EVALUATION_SHARE * 30, dev
    assert trainer.step > 100 and "more: what 25% of the time left holds)" in said, (trainer.step, said)


def test_a_plan_for_dear_evaluations_makes_room_for_fewer(clock):
    budget = TimeBudget(1.0)  # 60 s
    budget.step_seconds, budget.evaluation_seconds = [0.1], [10.0]
    # 60 - 10 (the last evaluation) leaves 50 s: a quarter of it holds one evaluation of 10 s
    assert budget.plan(step=0, eval_every=None) == int((60 - 10 - 10) / 0.1)
    assert budget.evaluations == 1
    budget.evaluation_seconds = [0.5]
    budget.plan(step=0, eval_every=None)
    assert budget.evaluations == EVALUATIONS


def test_a_run_given_eval_every_keeps_it_and_steps_plan_a_tenth():
    assert TrainConfig(task="copy", steps=926, eval_every=500).resolve().eval_every == 500
    assert TrainConfig(task="copy", steps=926).resolve().eval_every == 92
    assert TrainConfig(task="copy", steps=5).resolve().eval_every == 1
    assert TrainConfig(task="copy", steps=10**6).resolve().eval_every == EVAL_EVERY  # as every run had
    assert TrainConfig(task="copy").resolve().eval_every == TASK_STEPS // EVALUATIONS
    assert TrainConfig(task="copy", time_budget=1.0).resolve().eval_every is None  # the plan's
    assert planned_eval_every(926, evaluations=3) == 308 and planned_eval_every(926, evaluations=0) == 926


def test_a_run_ends_within_its_budget_and_its_schedule_reaches_its_end(clock, corpus, tmp_path, capsys):
    config = TrainConfig(
        task=None,
        data=str(corpus),
        tokenizer="word",
        time_budget=0.5,
        eval_every=50,
        eval_size=4,
        log_every=10,
        patience=0,  # it ends where its plan ends, and says so
    )
    trainer = Trainer.create(config, TINY_MODEL)
    assert trainer.config.steps is None and trainer.steps == PLAN_AFTER  # timed first, then planned
    trainer.budget.spent_before = 2.0  # reading the corpus took 2 s
    timed(trainer, clock, step_s=0.1, evaluation_s=1.0)
    started = clock.now
    trainer.fit(tmp_path / "run", progress=False)
    spent = 2.0 + clock.now - started
    # 30 s: 2 of setup, then about 28 s / (0.1 + 1/50) steps less the last evaluation's second and
    # the second of the average's, which the plan counts
    assert 30.0 * 0.97 <= spent <= 30.0 + 0.1, spent
    assert trainer.step == trainer.steps > 200
    said = capsys.readouterr().out
    assert (
        f"ended at step {trainer.step}, where the plan for the 0.5-minute budget ended: {spent:.0f} s of its 30 s"
        in said
    ), said[-300:]
    assert trainer.schedule(trainer.step) == pytest.approx(config.min_lr, abs=1e-12)  # the cosine's end
    records = [json.loads(line) for line in (tmp_path / "run" / "log.jsonl").read_text().splitlines()]
    assert records[-1]["step"] == trainer.step and records[-1]["split"] == "dev-average"


def test_a_slower_stretch_shortens_the_plan(clock, corpus, tmp_path):
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, eval_every=1000)
    trainer = Trainer.create(config, TINY_MODEL)
    pace = {"step_s": 0.05}
    train_step = trainer.train_step

    def step():
        clock.now += pace["step_s"]
        if trainer.step == 100:  # the machine gets busy: steps take four times as long
            pace["step_s"] = 0.2
        return train_step()

    trainer.train_step = step
    started = clock.now
    trainer.fit(None, progress=False)
    assert 30.0 * 0.97 <= clock.now - started <= 30.0 + 0.2
    assert trainer.step < 600  # the first plan, at 0.05 s a step, was about 600


def test_the_resumed_run_counts_the_time_it_has_spent(clock, corpus, tmp_path):
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, eval_every=1000)
    trainer = Trainer.create(config, TINY_MODEL)
    timed(trainer, clock, step_s=0.1, evaluation_s=0.0)
    trainer.budget.seconds = 10.0  # stop after about 100 steps of the 30 s
    trainer.fit(tmp_path / "run", progress=False)
    first = trainer.step
    resumed = Trainer.resume(tmp_path / "run", time_budget=0.5)  # 30 s in all, about 10 of them spent
    assert resumed.budget.spent_before == pytest.approx(first * 0.1, rel=0.05)
    timed(resumed, clock, step_s=0.1, evaluation_s=0.0)
    resumed.fit(tmp_path / "run", progress=False)
    assert resumed.step == pytest.approx(300, abs=25)


def test_steps_or_a_time_budget(corpus):
    data = {"task": None, "data": str(corpus), "tokenizer": "word"}
    assert TrainConfig(**data).resolve().time_budget == 15.0  # a --data run's default
    assert TrainConfig(**data, steps=100).resolve().time_budget is None  # --steps wins over the default
    assert TrainConfig(task="copy").resolve().steps == TASK_STEPS  # a generated task counts steps
    budgeted = TrainConfig(task="copy", time_budget=2.0).resolve()
    assert budgeted.steps is None and budgeted.time_budget == 2.0
    with pytest.raises(
        ValueError, match=r"give --steps or --time-budget, not both \(steps 100, time-budget 2\)"
    ):
        TrainConfig(**data, steps=100, time_budget=2.0).resolve()
    with pytest.raises(ValueError, match="time_budget must be a positive finite number, got 0"):
        TrainConfig(**data, time_budget=0)


def test_the_command_says_what_it_plans(clock, corpus, tmp_path, capsys, monkeypatch):
    real_fit = Trainer.fit

    def fit(self, out_dir=None, progress=True):
        timed(self, clock, step_s=0.05, evaluation_s=0.0)
        self.budget.seconds = 5.0
        return real_fit(self, out_dir, progress)

    monkeypatch.setattr(Trainer, "fit", fit)
    argv = ["train", "--data", str(corpus), "--tokenizer", "word", "--d-model", "16", "--heads", "2"]
    argv += ["--layers", "1", "--d-ff", "16", "--no-progress", "--show", "0", "--out", str(tmp_path / "r")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "for 15 minutes in all, steps planned from the measured speed (--steps N to fix them)" in out
    # at step 20 one of the 5 s is spent: 20 + 4 / 0.05 steps
    # and the evaluations with them: a tenth of the steps planned
    assert "50 ms a step: planned 100 steps, evaluated every 10 steps, to fit the 15-minute budget" in out
    assert (
        main(["train", "--resume", "--steps", "3", "--time-budget", "1", "--out", str(tmp_path / "r")]) == 2
    )
    assert "give --steps or --time-budget, not both" in capsys.readouterr().err


SMALL = ["--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
QUIET = ["--no-progress", "--show", "0", "--eval-every", "3", "--eval-size", "4", "--batch-size", "8"]


def test_a_run_trained_with_steps_resumes_with_a_time_budget(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["train", *SMALL, *QUIET, "--steps", "3", "--out", out]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--time-budget", "0.02", *QUIET[:3], "--out", out]) == 0
    assert "NoneType" not in capsys.readouterr().err


def test_a_spent_budget_is_said_with_the_time_spent_as_it_is(tmp_path, capsys):
    """A budget smaller than the time a run has taken: the minutes spent are said with the digits
    that show them, never rounded to 0.0 below the budget they spent."""
    out = str(tmp_path / "r")
    assert main(["train", *SMALL, *QUIET, "--steps", "3", "--out", out]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--time-budget", "0.0001", *QUIET[:3], "--out", out]) == 0
    said = re.search(r"has spent its (\S+) minutes \((\S+) so far\)", capsys.readouterr().err)
    assert said is not None and said[1] == "0.0001"
    assert float(said[2]) >= 0.0001


def test_a_resume_with_nothing_left_to_train_says_so(tmp_path, capsys):
    out = str(tmp_path / "r")
    assert main(["train", *SMALL, *QUIET, "--steps", "3", "--out", out]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", "--steps", "2", *QUIET[:3], "--out", out]) == 0
    said = capsys.readouterr()
    assert "at step 3 and --steps 2 asks for no more: nothing is left to train" in said.err
    assert "stays at step 3: nothing trained" in said.out and "resuming" not in said.out
    assert main(["train", "--resume", *QUIET[:3], "--out", out]) == 0
    said = capsys.readouterr()
    assert "nothing is left to train" in said.err and "stays at step 3: nothing trained" in said.out


def test_a_run_that_ended_its_plan_early_resumes_with_the_time_it_has_left(clock, corpus, tmp_path):
    """A budgeted run whose plan ended with time to spare (the steps ran faster than planned) is
    resumed with its saved budget: the saved plan's end is behind it, so it plans again."""
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, eval_every=1000)
    trainer = Trainer.create(config, TINY_MODEL)
    timed(trainer, clock, step_s=0.1, evaluation_s=0.0)
    trainer.budget.seconds = 10.0  # its plan ends after about 100 steps, 10 s of the 30
    trainer.fit(tmp_path / "run", progress=False)
    resumed = Trainer.resume(tmp_path / "run")  # the saved 0.5 minutes, 20 s of them left
    assert resumed.steps > resumed.step
    timed(resumed, clock, step_s=0.1, evaluation_s=0.0)
    resumed.fit(tmp_path / "run", progress=False)
    assert resumed.step == pytest.approx(300, abs=25)


def test_a_run_that_ended_its_plan_with_a_sliver_left_is_not_trained_on(clock, corpus, tmp_path):
    """A budgeted run whose plan ended with less time left than the PLAN_AFTER steps a resumed run
    takes before it plans (at the pace the run kept): resumed with its saved budget, it stays where it
    is rather than overrun the budget by them."""
    config = TrainConfig(task=None, data=str(corpus), tokenizer="word", time_budget=0.5, eval_every=1000)
    trainer = Trainer.create(config, TINY_MODEL)
    timed(trainer, clock, step_s=0.1, evaluation_s=0.0)
    trainer.budget.seconds = 29.5  # its plan ends half a second (five steps) before the saved 30 s
    trainer.fit(tmp_path / "run", progress=False)
    resumed = Trainer.resume(tmp_path / "run")
    assert resumed.budget.spent() < resumed.budget.seconds and resumed.steps == resumed.step == trainer.step
