"""The Trainer: a model, its task, optimiser and schedule, and the Stepper that takes each step;
created for a new run, resumed from a checkpoint, trained by its loop (Loop) and saved.

    trainer = Trainer.create(TrainConfig(task="copy", steps=500), ModelConfig(d_model=64, N=2))
    trainer.fit("runs/copy")               # log, evaluate and checkpoint into a run directory
    trainer = Trainer.resume("runs/copy")  # continues exactly where the checkpoint stopped
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from ...files import refuse_empty
from ...machine import tune_cpu
from ...model import Transformer, build_transformer
from ..config import ModelConfig, TrainConfig
from ..distributed import Communicator, ranks_of
from ..evaluation import evaluate
from ..run.checkpoint import (
    FILENAME,
    CheckpointError,
    load_checkpoint,
    model_from_checkpoint,
    save_checkpoint,
)
from ..run.continuing import fine_tune_start, resumed_run, run_checkpoint
from ..run.directory import RunFiles
from ..run.state import EvaluationState, RunState
from ..tasks import FileTask, TranslationTask, make_task
from .budget import PLAN_AFTER, TimeBudget
from .loop import Loop, progress_bar
from .memory import check_memory
from .step import Stepper, check_settings, check_weights, make_optimizer, make_schedule
from .stopping import StopRequests


class Trainer:
    """Owns a model, its task, optimiser and schedule; trains, evaluates, saves and resumes.

    With a Communicator (``comm``, an MPI run of several ranks: numpy_transformer.translator.distributed)
    every rank trains its slice of each global batch and the gradients are summed across ranks;
    rank 0 alone logs, evaluates and saves. The ranks leave ``fit`` together: a rank's failure is
    held until the next all-reduce tells the others, then raised on that rank while the others
    raise AnotherRankFailed. ``ranks`` (MpiRanks, or Ranks for a run alone) does all of that: the
    Trainer asks it the same things either way.
    """

    def __init__(
        self,
        model: Transformer,
        task: TranslationTask,
        config: TrainConfig,
        step: int = 0,
        comm: Communicator | None = None,
    ) -> None:
        self.model, self.task, self.config, self.step, self.comm = model, task, config, step, comm
        self.ranks = ranks_of(comm)  # the step's all-reduce and every agreement of the ranks (or none)
        self.ranks.check(config.batch_size, config.accumulate)
        check_settings(config)
        assert config.lr is not None and config.weight_decay is not None  # check_settings refuses None
        tune_cpu()  # the process-wide allocator setting a training loop wants (see machine.tune_cpu)
        self.optimizer = make_optimizer(model, config, self.ranks.cores)  # cores None: every core
        self.stepper = Stepper(model, task, config, self.ranks, self.optimizer)  # how each step is taken
        # the run's last step: config.steps, or planned to fit the time budget (first after PLAN_AFTER steps)
        self.budget = (
            TimeBudget(config.time_budget, final_evaluations=2 if config.averages else 1)
            if config.time_budget is not None
            else None
        )
        self._planned = step + PLAN_AFTER
        self.schedule = make_schedule(config, model.config.d_model, self.steps)
        self.evaluations = EvaluationState()  # the best dev BLEU, patience, plateau cuts, checkpoints kept
        # who this run is, in every checkpoint it saves (kept by resume): average refuses another run's
        self.run_id = uuid.uuid4().hex
        # why the loop ends: "steps", "patience", "interrupted" or "another rank"; under MPI a rank's
        # own request waits in ``requests`` until the step's all-reduce makes every rank agree
        self.stop: str | None = None
        self.requests = StopRequests(self.ranks.is_root)
        self.resumed_from: Path | None = None  # the checkpoint resume() read: fit may continue its run there

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls, config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None = None, comm: Any = None
    ) -> Trainer:
        """A new run: the task built and the model sized from it, every unset setting chosen. Of a
        mapping of the model settings given, ``norm_first`` false without ``final_norm`` is the
        paper's post-norm, which ends without final norms (``train --post-norm``).

        With ``config.from_run`` (a fine-tune) the model, its weights, tokenizer and vocabularies are
        that run's, and ``model`` is a mapping of the model settings given, which must be the run's
        (``dropout`` alone may change).
        """
        if not isinstance(config, TrainConfig):
            raise TypeError(
                f"config must be a TrainConfig (TrainConfig(task='copy', ...)), got {type(config).__name__}"
            )
        if model is not None and not isinstance(model, (ModelConfig, Mapping)):
            raise TypeError(
                "model must be a ModelConfig, a mapping of the model's settings ({'d_model': 64, 'N': 2, ...}) "
                f"or None, got {type(model).__name__}"
            )
        started = time.perf_counter()
        network, task, config = _new_run(config, model)
        trainer = cls(network, task, config, comm=comm)
        if trainer.budget is not None:  # reading the corpus and learning its subwords count
            trainer.budget.spent_before = time.perf_counter() - started
        return trainer

    @classmethod
    def resume(
        cls,
        path: str | Path,
        steps: int | None = None,
        comm: Any = None,
        threads: int | None = None,
        time_budget: float | None = None,
    ) -> Trainer:
        """Restore model, optimiser, step and the run's state from the checkpoint ``path`` (a file, or
        a run directory: its newest complete checkpoint); the task is rebuilt from its recipe.

        ``steps`` (or ``time_budget``, in minutes in all, the time the run has spent so far
        included) may lengthen the run and ``threads`` change its row shards; everything else is as
        saved. A run saved by K ranks resumes on K ranks only (its batches' slices and dropout masks
        depend on K).
        """
        started = time.perf_counter()
        run = resumed_run(path, comm.size if comm else 1, steps, time_budget, threads)
        trainer = cls(run.model, run.task, run.config, step=run.state.step, comm=comm)
        trainer.restore(run.state, started, keep_plan=time_budget is None)
        trainer.resumed_from = run.checkpoint
        try:
            trainer.optimizer.load_state_dict(run.state.optimizer)
        except (ValueError, KeyError) as error:
            raise CheckpointError(
                f"checkpoint {run.checkpoint}: optimizer state does not fit ({error})"
            ) from error
        return trainer

    def restore(self, state: RunState, started: float, keep_plan: bool) -> None:
        """Continue the run from its saved ``state`` (bar the optimiser's): ``started`` is when the resume
        began (its time counts in a time budget), and ``keep_plan`` keeps the saved run's planned end
        until the next plan; a run that has spent its time budget ends at the step it reached."""
        if self.budget is not None:
            self.budget.spent_before = (state.time_spent_s or 0.0) + time.perf_counter() - started
            planned = state.steps_planned or 0  # a plan behind the run (it ended early): plan anew
            if keep_plan and planned > state.step:
                self.plan_steps(planned)
            elif self.budget.seconds - self.budget.spent() < PLAN_AFTER * state.seconds_per_step:
                # the first plan comes after PLAN_AFTER steps: were they to overrun the time left at the
                # run's pace so far (its evaluations and setup included), the run ends where it is
                self.plan_steps(self.step)
            if self.budget.spent() >= self.budget.seconds:  # nothing of its time is left: it ends where it is
                self.plan_steps(self.step)
        self.evaluations = EvaluationState.of(state)
        self.run_id = state.run_id or self.run_id  # None: saved before runs had an id, so a new one

    def run_state(self) -> RunState:
        """Where the run stands, as its checkpoints record it."""
        return RunState(
            run_id=self.run_id,
            step=self.step,
            optimizer=self.optimizer.state_dict(),
            ranks=self.ranks.size,
            **asdict(self.evaluations),
            steps_planned=self.steps,
            time_spent_s=self.budget.spent() if self.budget is not None else None,
        )

    @property
    def model_config(self) -> ModelConfig:
        return ModelConfig.from_model(self.model.config)

    # -- one step ---------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        """One optimiser step (Stepper): its batches' forward, loss and backward, the ranks' agreement
        on its loss and on stopping, then the update at the schedule's rate. Returns loss, lr, grad
        norm, tokens; under MPI see MpiRanks."""
        batches = self.stepper.batches(self.step)
        tokens = sum(batch.n_tokens for batch in batches)
        loss = self.stepper.loss_and_backward(batches, tokens, self.step)
        loss, stop, self.evaluations.lr_scale = self.ranks.agree_on_step(  # rank 0's plateau cuts, under MPI
            loss, self.requests.reason, self.evaluations.lr_scale
        )
        if stop:
            self.stop = self.stop or self.requests.reason or "another rank"
        lr = self.learning_rate(self.step + 1)
        loss, grad_norm = self.stepper.update(loss, lr, self.step)
        self.step += 1
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens": tokens}

    # -- the loop ---------------------------------------------------------------------------

    def fit(self, out_dir: str | Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
        """Train until ``config.steps``; log, evaluate and checkpoint along the way.

        Ctrl-C or SIGTERM finishes the current step, saves, and returns. A NaN/inf raises
        TrainingDiverged and leaves the last good checkpoint in place. Under MPI only rank 0 writes,
        shows progress and evaluates; every rank compares its weights' checksum with the others' at
        each log step. A failure of one rank raises there, and AnotherRankFailed on the others, at
        the next step's all-reduce, or at the end of the loop (one more collective call per run).
        """
        refuse_empty(out_dir, "out_dir")  # Path("") is the working directory
        run = RunFiles(Path(out_dir)) if out_dir is not None and self.ranks.is_root else None
        self.stop = self.requests.reason = self.ranks.failure = None
        shown = progress and self.ranks.is_root
        with self.requests.watching(), closing(progress_bar(self.steps, self.step, shown)) as bar:
            records = Loop(self, run, bar).train()
        self.ranks.finish()  # the loop's last failure (rank 0's last evaluation or save) has no step left to carry it
        return records

    @property
    def steps(self) -> int:
        """The run's last step: config.steps, or the plan that fits its time budget."""
        return self.config.steps if self.config.steps is not None else self._planned

    def learning_rate(self, step: int) -> float:
        """The schedule's rate at optimiser step ``step`` as the plateau cuts scale it (EvaluationState)."""
        return self.evaluations.learning_rate(self.schedule(step), self.config.lr_floor)

    def plan_steps(self, steps: int) -> None:
        """End a time-budgeted run at ``steps`` (not before the current step); the schedule stretches
        to it."""
        self._planned = max(steps, self.step)
        self.schedule = make_schedule(self.config, self.model.config.d_model, self.steps)

    def dev_metrics(self, model: Transformer, examples: int = 0) -> dict[str, Any]:
        """The scores of ``model`` on the run's dev pairs: every evaluation of the run is this one."""
        dev = self.task.dev[: self.config.eval_size]
        return evaluate(model, self.task, dev, self.config.label_smoothing, examples=examples)

    # -- evaluation and checkpoints -------------------------------------------------------------

    def evaluate(self, pairs: Sequence[tuple[str, str]], batch_size: int = 100) -> dict[str, Any]:
        return evaluate(self.model, self.task, pairs, self.config.label_smoothing, batch_size)

    def save(self, out: str | Path, state: RunState | None = None) -> Path:
        """Write the checkpoint atomically (a run directory's model.npz, or the .npz named) with the
        run's state (``state``, or where it stands now); weights that are NaN or infinite are never
        written (TrainingDiverged)."""
        state = state or self.run_state()
        check_weights(self.model, state.step)
        arrays, meta = run_checkpoint(self.model, self.task, self.config, state)
        out = Path(out)
        return save_checkpoint(out if out.suffix == ".npz" else out / FILENAME, arrays, meta)


def _new_run(
    config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None
) -> tuple[Transformer, TranslationTask, TrainConfig]:
    """Trainer.create's model, task and resolved settings: refused before the weights are built when
    a step would not fit in memory."""
    given, config = config, config.resolve()
    if config.from_run is not None:  # the run's model, tokenizer and vocabularies: nothing is chosen
        sizes, task, config = fine_tune_start(given, config, model)
    else:  # the sizes given are checked before the corpus is read
        if isinstance(model, ModelConfig):
            sizes_given = model
        else:  # the settings given: post-norm blocks end without a final norm unless final_norm is given
            given_model = dict(model or {})
            if given_model.get("norm_first") is False:
                given_model.setdefault("final_norm", False)  # the paper's (and Marian's) post-norm
            sizes_given = ModelConfig.from_mapping(given_model)
        corpus: dict[str, Any] = (
            {"max_length": config.max_length, "shared_vocab": config.shared_vocab}
            | {"dev": config.dev, "test": config.test}
            | ({"vocab_size": config.vocab_size} if config.vocab_size else {})
            if config.data
            else {}
        )
        task = make_task(config.task, config.data, config.seed, config.tokenizer, **corpus)
        # the saved configuration says what was chosen
        config = replace(config, vocab_size=task.vocab_size)
    src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(config.seed))
    if config.from_run is None:  # the model sized for the task
        train_pairs = len(task.train_pairs) if isinstance(task, FileTask) else None
        sizes = {
            **asdict(sizes_given.resolve(train_pairs, config.time_budget)),
            "src_vocab_size": len(task.src_vocab),
            "tgt_vocab_size": len(task.tgt_vocab),
            "src_seq_len": 2 * src_len + 8,
            "tgt_seq_len": 2 * tgt_len + 8,
            "shared_vocab": task.src_vocab is task.tgt_vocab,
        }
    longest_batch = config.batch_size if config.batch_tokens is None else -(-config.batch_tokens // tgt_len)
    check_memory(sizes, longest_batch, src_len, tgt_len, config.threads or 1)
    if config.from_run is not None:  # its weights, read only now that the step is known to fit
        arrays, meta = load_checkpoint(config.from_run)
        network = model_from_checkpoint(config.from_run, arrays, {**meta, "model": sizes})
    else:
        network = build_transformer(**sizes, seed=config.seed)
    return network, task, config
