"""The training loop, one call of Trainer.fit: step after step until the run ends or is asked to
stop; between the steps the time budget's plan, the ranks' weights compared, the log and rank 0's
evaluations and saves (Keeper); at its end the last save and the average of the last checkpoints."""

from __future__ import annotations

import sys
import time
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from ..config import EVALUATION_SHARE, EVALUATIONS, config_toml, planned_eval_every
from ..run.checkpoint import FILENAME
from ..run.directory import RunFiles, check_fit_directory
from .keeping import Keeper
from .protocol import Training
from .stopping import STOP_MESSAGES


class Loop:
    """Trains ``trainer`` into its run directory ``run`` (None: one that writes nothing, or a rank
    other than 0) with the progress ``bar``; ``records`` is what it logged. The state it changes
    besides the trainer's: the log records, the throughput since the last of them, and the time
    budget's measured steps and evaluations."""

    def __init__(self, trainer: Training, run: RunFiles | None, bar: Any) -> None:
        self.trainer, self.run, self.bar = trainer, run, bar
        self.keeper = Keeper(trainer, run, bar)
        self.records: list[dict[str, Any]] = []
        self.throughput = Throughput()
        # a run not given --eval-every plans its interval again once its first evaluation is timed
        self.replan_evaluations = False

    def train(self) -> list[dict[str, Any]]:
        """Step until the trainer's last step, a stop it was asked for, or a rank's failure; then
        save where a stopped run stopped, or average a finished run's last checkpoints."""
        trainer, ranks, run = self.trainer, self.trainer.ranks, self.run
        with ExitStack() as files:
            if run:
                with ranks.holding():  # a directory holding another run is refused before it is written
                    check_fit_directory(
                        run.directory,
                        trainer.run_id,
                        trainer.resumed_from.resolve().parent if trainer.resumed_from else None,
                    )
                    run.write_config(config_toml(trainer.model_config, trainer.config))
                    files.enter_context(run)
            if trainer.budget is not None:
                trainer.budget.start()
            while trainer.stop is None and trainer.step < trainer.steps:
                began = time.perf_counter()
                stats = trainer.train_step()
                self.after_step(stats, time.perf_counter() - began)
                trainer.stop = trainer.stop or ranks.stop_at_once(trainer.requests.reason)
            if run and ranks.failure is None:
                with ranks.holding():  # under MPI the others wait for rank 0 in the last all-reduce
                    self.end(run)
        return self.records

    def after_step(self, stats: dict[str, float], seconds: float) -> None:
        """After a step that took ``seconds``: plan a time-budgeted run's end, compare the ranks'
        weights, log, and (rank 0) evaluate and save."""
        trainer, run, bar, records = self.trainer, self.run, self.bar, self.records
        if trainer.budget is not None:
            trainer.budget.step_seconds.append(seconds)
            if trainer.step % trainer.config.log_every == 0 or trainer.step == trainer.steps:
                self.plan()
        config = trainer.config  # a time budget's first plan chose its eval_every
        last = trainer.step == trainer.steps
        logged = trainer.step % config.log_every == 0 or last
        if logged:  # on every rank at once: a drift stops all of them
            trainer.ranks.check_same_weights(trainer.model)
        if trainer.ranks.failure is not None:
            return
        with trainer.ranks.holding():  # this rank's own work (rank 0's log, evaluation and saves)
            bar.update(1)
            if logged:
                record = {"step": trainer.step, **stats, **self.throughput.since_last(stats["tokens"])}
                del record["tokens"]
                bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}")
                records.append(record)
                if run:
                    run.log(record)
            else:
                self.throughput.count(stats["tokens"])
            evaluates = config.eval_every is not None and trainer.step % config.eval_every == 0
            if trainer.ranks.is_root and (evaluates or last):
                began = time.perf_counter()
                records.append(self.keeper.evaluate())
                if trainer.budget is not None:
                    trainer.budget.evaluation_seconds.append(time.perf_counter() - began)

    def end(self, run: RunFiles) -> None:
        """Save the step a stopped run stopped at; average a finished run's last checkpoints."""
        trainer, bar, records = self.trainer, self.bar, self.records
        if trainer.stop and run.saved_step != trainer.step:
            run.save(trainer.run_state(), trainer.save)
            if trainer.stop in STOP_MESSAGES:
                saved = run.directory / FILENAME
                again = (
                    "; --resume continues it (Trainer.resume in Python)"
                    if trainer.stop == "interrupted"
                    else ""
                )
                bar.write(f"{STOP_MESSAGES[trainer.stop]}: saved step {trainer.step} to {saved}{again}")
        # a run that ended (not one interrupted, to be resumed) and evaluated since it (re)started
        evaluated = any(record.get("split") == "dev" for record in records)
        if evaluated and trainer.stop in (None, "patience"):
            self.keeper.average(records)
        if trainer.budget is not None and trainer.stop is None:  # why it ended where it did
            used, budget = trainer.budget.spent(), trainer.budget.seconds
            bar.write(
                f"ended at step {trainer.step}, where the plan for the {budget / 60:g}-minute budget ended: "
                f"{used:.0f} s of its {budget:.0f} s used"
            )

    def plan(self) -> None:
        """Plan the run's end from the time left (under MPI rank 0's clock decides for every rank);
        for a run not given --eval-every, its interval of evaluations with it: a tenth of the steps
        planned (fewer evaluations when ten would take more than EVALUATION_SHARE of the time left),
        at the first plan and once more when the first evaluation's time is known (which shortens the
        plan), kept from then on: the run's configuration holds it (config.toml, every checkpoint)."""
        trainer, bar, budget = self.trainer, self.bar, self.trainer.budget
        assert budget is not None
        first = budget.plans == 0
        interval = trainer.config.eval_every
        planning = interval is None or (self.replan_evaluations and bool(budget.evaluation_seconds))
        steps = budget.plan(trainer.step, None if planning else interval)
        trainer.plan_steps(trainer.ranks.agree_on_plan(steps))
        if planning:
            self.replan_evaluations = interval is None
            interval_planned = planned_eval_every(trainer.steps, budget.evaluations)
            trainer.config = replace(trainer.config, eval_every=interval_planned)
            if self.run:
                self.run.write_config(config_toml(trainer.model_config, trainer.config))
            if interval is not None and trainer.ranks.is_root:  # the first evaluation shortened the plan
                seconds = sum(budget.evaluation_seconds) / len(budget.evaluation_seconds)
                fewer = (
                    f" ({budget.evaluations} more: what {EVALUATION_SHARE:.0%} of the time left holds)"
                    if budget.evaluations < EVALUATIONS
                    else ""
                )
                bar.write(
                    f"{seconds:.1f} s an evaluation: planned {trainer.steps} steps, evaluated every "
                    f"{interval_planned} steps from here on{fewer}"
                )
        bar.total = trainer.steps
        bar.refresh()
        if first and trainer.ranks.is_root:
            evaluated = f", evaluated every {trainer.config.eval_every} steps," if planning else ""
            bar.write(
                f"{budget.per_step * 1e3:.0f} ms a step: planned {trainer.steps} steps{evaluated} to fit "
                f"the {trainer.config.time_budget:g}-minute budget (the plan is corrected as the run goes)"
            )


class Throughput:
    """Target tokens per second since the last log record, and the time since training started."""

    def __init__(self) -> None:
        self.started = self.window_start = time.perf_counter()
        self.tokens = 0.0

    def count(self, tokens: float) -> None:
        self.tokens += tokens

    def since_last(self, tokens: float) -> dict[str, float]:
        now, tokens = time.perf_counter(), self.tokens + tokens
        self.tokens, start, self.window_start = 0, self.window_start, now
        return {"tokens_per_s": tokens / max(now - start, 1e-9), "elapsed_s": now - self.started}


class NoBar:
    total: int | None = None

    def refresh(self) -> None: ...
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kwargs: Any) -> None: ...
    def write(self, text: str) -> None:
        print(text, flush=True)

    def close(self) -> None: ...


def progress_bar(total: int | None, initial: int, enabled: bool) -> Any:
    """tqdm's bar where asked and standard error is a terminal (into a file the bar is one endless line of
    carriage returns); else no bar, the log lines telling the progress."""
    if not enabled or not sys.stderr.isatty():
        return NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        print(
            "tqdm is not installed (pip install 'numpy_transformer[train]'): training without a progress bar"
        )
        return NoBar()
    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
