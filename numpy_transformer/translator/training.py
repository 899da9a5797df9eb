"""Training a translation model: the Trainer, its step and its loop.

    trainer = Trainer.create(TrainConfig(task="copy", steps=500), ModelConfig(d_model=64, N=2))
    trainer.fit("runs/copy")               # log, evaluate and checkpoint into a run directory
    trainer = Trainer.resume("runs/copy")  # continues exactly where the checkpoint stopped

Files on disk are the checkpoint module's and the run directory's (RunFiles); what a checkpoint
says of the run besides its model is a RunState, and what each evaluation decides (best.npz,
patience, the plateau cuts, the checkpoints averaged) is its EvaluationState's (run_state); the
ranks' share of each step and every agreement among them are distributed's (Ranks, MpiRanks); the
fine-tune's settings are config's; scores are the evaluation module's. Here: how one optimiser step
is taken (alone, in threads, or as one MPI rank of several) and the loop around it: step, then ask
the EvaluationState what an evaluation decides.
"""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import asdict, replace
from functools import partial
from pathlib import Path
from typing import Any

from ..backend import get_array_module, step_rng
from ..files import ReaderWatched
from ..machine import available_memory, cpu_cores, tune_cpu
from ..model import Transformer, TransformerConfig, build_transformer, loss_and_backward, parameter_count
from ..optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    NoamSchedule,
    WarmupCosineSchedule,
    clip_grad_norm,
    global_grad_norm,
)
from .checkpoint import (
    FILENAME,
    CheckpointError,
    average_checkpoints,
    check_meta,
    load_checkpoint,
    load_meta,
    model_from_checkpoint,
    resolve_path,
    restore_model_and_task,
    save_checkpoint,
    saved_vocabularies,
    serialized_tokenizer,
    task_recipe,
)
from .config import ModelConfig, TrainConfig, config_toml, fine_tune_settings, refuse_empty
from .corpora import printable
from .distributed import Communicator, ranks_of
from .evaluation import evaluate, format_metrics
from .run_directory import RunFiles, check_fit_directory
from .run_state import EvaluationState, RunState
from .tasks import FileTask, SubwordDropout, TranslationTask, make_task
from .thread_parallel import DataParallel, auto_threads, mask_rows


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


STOP_MESSAGES = {
    "interrupted": "interrupted",
    "another rank": "stopped with another rank",
    "reader gone": "standard output was closed",
}
PLAN_AFTER = 20  # steps timed before a time-budgeted run plans its length
PAUSE = 10.0  # a step over this many times the median of the steps timed with it was a pause, not the pace


class TimeBudget:
    """Plans a run's number of steps to fit ``minutes`` of wall-clock time in all.

    The clock counts what was ``spent`` before training (reading the corpus, learning its
    subwords; an earlier session of the run) and everything since ``start``: steps, evaluations,
    saves. ``plan`` is asked again and again as the run goes: it takes the mean time of the steps
    since it was last asked (bar pauses) and of the evaluations so far, and returns the step at which the run
    should end so that the steps left, their evaluations and the ``final_evaluations`` (the last
    one, and the average's when the run averages its checkpoints) fill the time left.
    """

    def __init__(self, minutes: float, spent: float = 0.0, final_evaluations: int = 1) -> None:
        self.seconds, self.spent_before, self.final_evaluations = 60.0 * minutes, spent, final_evaluations
        self.started = time.perf_counter()
        self.step_seconds: list[float] = []  # the steps' own times since the last plan
        self.evaluation_seconds: list[float] = []  # every evaluation's (with its checkpoint saves)
        self.per_step = 0.0  # the pace the last plan assumed
        self.plans = 0

    def start(self) -> None:
        self.spent_before, self.started = self.spent(), time.perf_counter()

    def spent(self) -> float:
        return self.spent_before + time.perf_counter() - self.started

    def plan(self, step: int, eval_every: int) -> int:
        """The last step: where steps of the measured time, one evaluation every ``eval_every`` of
        them and the final ones use up the time left (``step`` itself when it has run out)."""
        self.plans += 1
        if self.step_seconds:
            # their mean, bar pauses: bucketed batches of every length take turns, and their median
            # (the middle length's time) would promise more steps than the time holds
            typical = sorted(self.step_seconds)[len(self.step_seconds) // 2]
            paced = [seconds for seconds in self.step_seconds if seconds <= PAUSE * typical]
            self.per_step = sum(paced) / len(paced)
            self.step_seconds = []
        per_evaluation = sum(self.evaluation_seconds) / max(len(self.evaluation_seconds), 1)
        left = self.seconds - self.spent() - self.final_evaluations * per_evaluation  # they come in any case
        steps_left = left / max(self.per_step + per_evaluation / eval_every, 1e-9)
        return step + max(int(steps_left), 0)


def make_schedule(config: TrainConfig, d_model: int, steps: int) -> Any:
    """The learning rate of each optimiser step (1 for the first update) of a run of ``steps``, as
    the config names it (a resolved one: TrainConfig.resolve chooses the peak)."""
    if config.lr is None or config.warmup is None:
        raise ValueError("config.lr or config.warmup is None: TrainConfig.resolve chooses them")
    if config.schedule == "noam":
        return NoamSchedule(d_model, config.warmup, config.factor)
    if config.schedule == "constant":
        return ConstantSchedule(config.lr)
    return WarmupCosineSchedule(config.lr, config.warmup, steps, config.min_lr)


def make_optimizer(model: Transformer, config: TrainConfig, threads: int | None) -> Adam:
    """The run's optimiser (config.optimizer): Adam, or AdamW with config.weight_decay."""
    assert config.lr is not None and config.weight_decay is not None  # _check_settings refuses None
    if config.optimizer == "adamw":
        return AdamW(model, lr=config.lr, threads=threads, weight_decay=config.weight_decay)
    return Adam(model, lr=config.lr, threads=threads)


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
        _check_settings(config)
        assert config.lr is not None and config.weight_decay is not None  # _check_settings refuses None
        tune_cpu()  # the process-wide allocator setting a training loop wants (see machine.tune_cpu)
        self.cores = self.ranks.cores  # None: every core of the machine
        self.optimizer = make_optimizer(model, config, self.cores)
        # the run's last step: config.steps, or planned to fit the time budget (first after PLAN_AFTER steps)
        self.budget = (
            TimeBudget(config.time_budget, final_evaluations=2 if self.averages else 1)
            if config.time_budget is not None
            else None
        )
        self._planned = step + PLAN_AFTER
        self.schedule = make_schedule(config, model.config.d_model, self.steps)
        self.evaluations = EvaluationState()  # the best dev BLEU, patience, plateau cuts, checkpoints kept
        # training batches' segmentations (config.bpe_dropout), never longer than the position tables
        self.subword_dropout = (
            SubwordDropout(task, config.bpe_dropout, (model.src_pos.seq_len, model.tgt_pos.seq_len - 1))
            if config.bpe_dropout
            else None
        )
        # who this run is, in every checkpoint it saves (kept by resume): average refuses another run's
        self.run_id = uuid.uuid4().hex
        # why the loop ends: "steps", "patience", "interrupted" or "another rank"; under MPI a rank's
        # own request waits in ``requested`` until the step's all-reduce makes every rank agree
        self.stop: str | None = None
        self.requested: str | None = None
        self.resumed_in: Path | None = None  # the run directory resume() read: fit may continue it there
        self._parallel: dict[int, DataParallel] = {}

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def create(
        cls, config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None = None, comm: Any = None
    ) -> Trainer:
        """A new run: the task built and the model sized from it, every unset setting chosen.

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
        """Restore model, optimiser, step and the run's state; the task is rebuilt from its recipe.

        ``steps`` (or ``time_budget``, in minutes in all, the time the run has spent so far
        included) may lengthen the run and ``threads`` change its row shards; everything else is as
        saved. A run saved by K ranks resumes on K ranks only (its batches' slices and dropout masks
        depend on K).
        """
        model, task, config, state, started = _saved_run(
            path, comm.size if comm else 1, steps, time_budget, threads
        )
        trainer = cls(model, task, config, step=state.step, comm=comm)
        trainer.restore(state, started, keep_plan=time_budget is None)
        trainer.resumed_in = resolve_path(path).resolve().parent
        try:
            trainer.optimizer.load_state_dict(state.optimizer)
        except (ValueError, KeyError) as error:
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: optimizer state does not fit ({error})"
            ) from error
        return trainer

    def restore(self, state: RunState, started: float, keep_plan: bool) -> None:
        """Continue the run from its saved ``state`` (bar the optimiser's): ``started`` is when the resume
        began (its time counts in a time budget), and ``keep_plan`` keeps the saved run's planned end
        until the next plan."""
        if self.budget is not None:
            self.budget.spent_before = (state.time_spent_s or 0.0) + time.perf_counter() - started
            planned = state.steps_planned or 0  # a plan behind the run (it ended early): plan anew
            if keep_plan and planned > state.step:
                self.plan_steps(planned)
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

    @property
    def averages(self) -> bool:
        """Whether the run averages its last evaluation checkpoints at its end (config.average_last)."""
        return self.config.average_last >= 2

    @property
    def checkpoints_kept(self) -> int:
        """The evaluation checkpoints (step-*.npz) kept while the run goes: those it may average too."""
        return max(self.config.keep_checkpoints, self.config.average_last if self.averages else 0)

    # -- one step ---------------------------------------------------------------------------

    def train_step(self) -> dict[str, float]:
        """One optimiser step, as nanoGPT's: the micro-batches' forward, loss and backward (each gradient
        weighted by its share of the step's target tokens, as one K-times larger batch would give), the
        all-reduce, clipping, the update. Returns loss, lr, grad norm, tokens; under MPI see MpiRanks."""
        config, model, ranks = self.config, self.model, self.ranks
        batches = [
            self.task.train_batch(
                self.step * config.accumulate + k,
                config.batch_size,
                config.bucket_steps,
                config.batch_tokens,
                self.subword_dropout,
            )
            for k in range(config.accumulate)
        ]
        tokens = sum(batch.n_tokens for batch in batches)
        model.train()
        self.optimizer.zero_grad()
        loss = 0.0
        with ranks.threads():
            for k, batch in enumerate(batches):
                model.set_rng(step_rng(config.seed, self.step, ranks.rank * config.accumulate + k))
                part = ranks.part(batch, tokens, self.task.ids.pad)  # this rank's rows: alone, all
                if part.rows is not None:
                    with ranks.holding():  # under MPI a failure waits for the all-reduce to tell the others
                        loss += ranks.weigh(self._loss_and_backward(batch, part.rows, part.weight), part)
            ranks.all_reduce(model)
        loss, stop, self.evaluations.lr_scale = ranks.agree_on_step(  # rank 0's plateau cuts, under MPI
            loss, self.requested, self.evaluations.lr_scale
        )
        if stop:
            self.stop = self.stop or self.requested or "another rank"
        grad_norm = clip_grad_norm(model, config.clip) if config.clip > 0 else global_grad_norm(model)
        _check_finite(model, self.step, loss, grad_norm)
        lr = self.learning_rate(self.step + 1)
        self.optimizer.step(lr)
        self.step += 1
        return {"loss": loss, "lr": lr, "grad_norm": grad_norm, "tokens": tokens}

    def _loss_and_backward(self, batch: Any, rows: slice, weight: float) -> float:
        """Forward and backward of ``rows`` of the batch, its gradient scaled by ``weight``; the rows'
        mean loss."""
        config, model = self.config, self.model
        src, tgt_in, labels = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        length = max(src.shape[1], tgt_in.shape[1])
        shards = config.threads or auto_threads(model, src.shape[0], length, self.cores)
        size = batch.src.shape[0]
        masks = mask_rows(batch.src_mask, rows, size), mask_rows(batch.tgt_mask, rows, size)
        arguments = (src, tgt_in, *masks, labels, self.task.ids.pad, config.label_smoothing, weight)
        if shards == 1:  # the model's own step; DataParallel runs it on each of several row shards
            return loss_and_backward(model, *arguments)
        if shards not in self._parallel:
            self._parallel[shards] = DataParallel(model, shards)
        return self._parallel[shards].loss_and_backward(*arguments)

    # -- the loop ---------------------------------------------------------------------------

    def fit(self, out_dir: str | Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
        """Train until ``config.steps``; log, evaluate and checkpoint along the way.

        Ctrl-C or SIGTERM finishes the current step, saves, and returns. A NaN/inf raises
        TrainingDiverged and leaves the last good checkpoint in place. Under MPI only rank 0 writes,
        shows progress and evaluates; every rank compares its weights' checksum with the others' at
        each log step. A failure of one rank raises there, and AnotherRankFailed on the others, at
        the next step's all-reduce, or at the end of the loop (one more collective call per run).
        """
        ranks = self.ranks
        refuse_empty(out_dir, "out_dir")  # Path("") is the working directory
        run = RunFiles(Path(out_dir)) if out_dir is not None and ranks.is_root else None
        records: list[dict[str, Any]] = []
        self.stop = self.requested = ranks.failure = None
        throughput = _Throughput()
        with _stop_requests(self), ExitStack() as files:
            bar = files.enter_context(closing(_progress(self.steps, self.step, progress and ranks.is_root)))
            if run:
                with ranks.holding():  # a directory holding another run is refused before it is written
                    check_fit_directory(run.directory, self.run_id, self.resumed_in)
                    run.write_config(config_toml(self.model_config, self.config))
                    files.enter_context(run)
            if self.budget is not None:
                self.budget.start()
            while self.stop is None and self.step < self.steps:
                began = time.perf_counter()
                stats = self.train_step()
                _after_step(self, stats, time.perf_counter() - began, throughput, run, bar, records)
                self.stop = self.stop or ranks.stop_at_once(self.requested)
            if run and ranks.failure is None:
                with ranks.holding():  # under MPI the others wait for rank 0 in the last all-reduce
                    _end(self, run, bar, records)
        ranks.finish()  # the loop's last failure (rank 0's last evaluation or save) has no step left to carry it
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

    def _plan(self, bar: Any) -> None:
        """Plan the run's end from the time left (under MPI rank 0's clock decides for every rank)."""
        assert self.budget is not None
        first = self.budget.plans == 0
        steps = self.budget.plan(self.step, self.config.eval_every)
        self.plan_steps(self.ranks.agree_on_plan(steps))
        bar.total = self.steps
        bar.refresh()
        if first and self.ranks.is_root:
            bar.write(
                f"{self.budget.per_step * 1e3:.0f} ms a step: planned {self.steps} steps to fit the "
                f"{self.config.time_budget:g}-minute budget (the plan is corrected as the run goes)"
            )

    def _dev_metrics(self, model: Transformer, examples: int = 0) -> dict[str, Any]:
        """The scores of ``model`` on the run's dev pairs: every evaluation of the run is this one."""
        dev = self.task.dev[: self.config.eval_size]
        return evaluate(model, self.task, dev, self.config.label_smoothing, examples=examples)

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self.requested == "interrupted":  # the second signal stops at once
            raise KeyboardInterrupt
        self.requested = "interrupted"
        if not self.ranks.is_root:  # mpiexec signals every rank: rank 0 says it
            return
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(
            f"\n{name}: stopping after this step, then saving ({name} again: stop at once without saving)",
            file=sys.stderr,
            flush=True,
        )

    # -- evaluation and checkpoints -------------------------------------------------------------

    def evaluate(self, pairs: Sequence[tuple[str, str]], batch_size: int = 100) -> dict[str, Any]:
        return evaluate(self.model, self.task, pairs, self.config.label_smoothing, batch_size)

    def save(self, out: str | Path, state: RunState | None = None) -> Path:
        """Write the checkpoint atomically (a run directory's model.npz, or the .npz named) with the
        run's state (``state``, or where it stands now); weights that are NaN or infinite are never
        written (TrainingDiverged)."""
        arrays, meta = _checkpoint(self.model, self.task, self.config, state or self.run_state())
        out = Path(out)
        return save_checkpoint(out if out.suffix == ".npz" else out / FILENAME, arrays, meta)


def _check_settings(config: TrainConfig) -> None:
    """Refuse a configuration that TrainConfig.resolve did not resolve, or more threads than cores."""
    if (config.steps is None) == (config.time_budget is None) or None in (
        config.lr,
        config.optimizer,
        config.weight_decay,
    ):
        raise ValueError(
            f"exactly one of config.steps and config.time_budget must be set, and config.lr, optimizer and "
            f"weight_decay, got {config.steps}, {config.time_budget}, {config.lr}, {config.optimizer} and "
            f"{config.weight_decay}: TrainConfig.resolve chooses"
        )
    if config.threads > cpu_cores():  # a replica of the model per thread, for no speed
        raise ValueError(f"threads {config.threads} exceeds this machine's {cpu_cores()} cores")


def _checkpoint(
    model: Transformer, task: TranslationTask, config: TrainConfig, state: RunState
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A checkpoint's arrays and metadata: the model, the run's settings, its task's recipe and
    vocabularies, and its state; weights that are NaN or infinite are refused (TrainingDiverged)."""
    xp = get_array_module()
    assert model.flat is not None
    if not bool(xp.isfinite(model.flat.data).all()):  # one transfer; then the names, only if needed
        bad = next(name for name, p in model.named_parameters() if not bool(xp.isfinite(p.data).all()))
        raise TrainingDiverged(f"step {state.step}: the weights of {bad} are NaN or infinite; not saved")
    state_arrays, state_meta = state.to_checkpoint()
    arrays = {**{f"param/{name}": value for name, value in model.state_dict().items()}, **state_arrays}
    meta = {
        "model": asdict(model.config),
        "train": asdict(config),
        "task": task_recipe(task, config),
        **state_meta,
        "src_vocab": task.src_vocab.itos,
        "tgt_vocab": task.tgt_vocab.itos,
    }
    return arrays, meta


def _new_run(
    config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None
) -> tuple[Transformer, TranslationTask, TrainConfig]:
    """Trainer.create's model, task and resolved settings: refused before the weights are built when
    a step would not fit in memory."""
    given, config = config, config.resolve()
    if config.from_run is not None:  # the run's model, tokenizer and vocabularies: nothing is chosen
        sizes, task, config = _fine_tune_start(given, config, model)
        src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(config.seed))
    else:
        sizes_given = model if isinstance(model, ModelConfig) else ModelConfig.from_mapping(dict(model or {}))
        corpus: dict[str, Any] = (
            {"max_length": config.max_length, "shared_vocab": config.shared_vocab}
            | ({"vocab_size": config.vocab_size} if config.vocab_size else {})
            if config.data
            else {}
        )
        task = make_task(config.task, config.data, config.seed, config.tokenizer, **corpus)
        # the saved configuration says what was chosen
        config = replace(config, vocab_size=task.vocab_size)
        train_pairs = len(task.train_pairs) if isinstance(task, FileTask) else None
        src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(config.seed))
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


def _saved_run(
    path: str | Path, ranks: int, steps: int | None, time_budget: float | None, threads: int | None
) -> tuple[Transformer, TranslationTask, TrainConfig, RunState, float]:
    """Trainer.resume's model, task, settings and run state from the checkpoint ``path``, refused on
    another number of ``ranks`` than saved it, and when its time counts from."""
    arrays, meta = load_checkpoint(path)
    held = "an imported model" if "imported_from" in meta else "an average" if "averaged_from" in meta else ""
    if held:  # an average's optimiser state is its last checkpoint's, which its weights did not reach
        raise ValueError(
            f"--resume: {resolve_path(path)} holds {held}, not a training run: fine-tune it "
            f"into a run of its own with train --from {path} --data FILE.tsv --out NEW_RUN"
        )
    state = RunState.from_checkpoint(arrays, meta, path)
    saved_ranks = state.ranks
    if saved_ranks != ranks:
        raise ValueError(
            f"checkpoint {resolve_path(path)} was trained on {saved_ranks} rank(s) and this run has "
            f"{ranks}: resume it with mpiexec -n {saved_ranks}"
            + ("" if saved_ranks > 1 else " or without mpiexec")
        )
    started = time.perf_counter()
    config = TrainConfig(**meta["train"]).resolve(saved=True)  # as saved: a new run's refusals aside
    if steps is not None or time_budget is not None:  # the one given replaces the run's length
        config = replace(config, steps=steps, time_budget=time_budget).resolve(saved=True)
    if threads is not None:
        config = replace(config, threads=threads)
    model, task = restore_model_and_task(path, arrays, meta)
    return model, task, config, state, started


# -- the loop's work between steps, and at its end ----------------------------------------------


def _after_step(
    trainer: Trainer,
    stats: dict[str, float],
    seconds: float,
    throughput: _Throughput,
    run: RunFiles | None,
    bar: Any,
    records: list[dict[str, Any]],
) -> None:
    """After a step that took ``seconds``: plan a time-budgeted run's end, compare the ranks'
    weights, log, and (rank 0) evaluate and save."""
    config = trainer.config
    if trainer.budget is not None:
        trainer.budget.step_seconds.append(seconds)
        if trainer.step % config.log_every == 0 or trainer.step == trainer.steps:
            trainer._plan(bar)
    last = trainer.step == trainer.steps
    logged = trainer.step % config.log_every == 0 or last
    if logged:  # on every rank at once: a drift stops all of them
        trainer.ranks.check_same_weights(trainer.model)
    if trainer.ranks.failure is not None:
        return
    with trainer.ranks.holding():  # this rank's own work (rank 0's log, evaluation and saves)
        bar.update(1)
        if logged:
            record = {"step": trainer.step, **stats, **throughput.since_last(stats["tokens"])}
            del record["tokens"]
            bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}")
            records.append(record)
            if run:
                run.log(record)
        else:
            throughput.count(stats["tokens"])
        if trainer.ranks.is_root and (trainer.step % config.eval_every == 0 or last):
            began = time.perf_counter()
            records.append(_evaluate_and_keep(trainer, run, bar))
            if trainer.budget is not None:
                trainer.budget.evaluation_seconds.append(time.perf_counter() - began)


def _end(trainer: Trainer, run: RunFiles, bar: Any, records: list[dict[str, Any]]) -> None:
    """Save the step a stopped run stopped at; average a finished run's last checkpoints."""
    if trainer.stop and run.saved_step != trainer.step:
        run.save(trainer.run_state(), trainer.save)
        if trainer.stop in STOP_MESSAGES:
            saved = run.directory / FILENAME
            bar.write(f"{STOP_MESSAGES[trainer.stop]}: saved step {trainer.step} to {saved}")
    # a run that ended (not one interrupted, to be resumed) and evaluated since it (re)started
    evaluated = any(record.get("split") == "dev" for record in records)
    if evaluated and trainer.stop in (None, "patience"):
        _average_and_keep(trainer, run, bar, records)
    if trainer.budget is not None and trainer.stop is None:  # why it ended where it did
        used, budget = trainer.budget.spent(), trainer.budget.seconds
        bar.write(
            f"ended at step {trainer.step}, where the plan for the {budget / 60:g}-minute budget ended: "
            f"{used:.0f} s of its {budget:.0f} s used"
        )


# -- the run's evaluations: dev scores, best.npz, patience, plateau cuts and the final average ------


def _evaluate_and_keep(trainer: Trainer, run: RunFiles | None, bar: Any) -> dict[str, Any]:
    """Score the dev pairs and do what the score decides (EvaluationState.judge): save the checkpoint
    (and best.npz when it improved), cut the learning rate on a plateau, stop when patience runs out."""
    metrics = trainer._dev_metrics(trainer.model, trainer.config.eval_examples)
    record = {"step": trainer.step, "split": "dev", **metrics}
    bar.write(format_metrics(f"step {trainer.step} dev", metrics))
    for example in metrics.get("examples", []):
        bar.write(
            f"  source     {printable(example['source'])}\n  reference  {printable(example['reference'])}\n"
            f"  model      {printable(example['translation'])}"
        )
    evaluations = trainer.evaluations
    verdict = evaluations.judge(metrics["bleu"], trainer.config, trainer.schedule(trainer.step + 1))
    if verdict.cut:  # under MPI the next step's all-reduce gives every rank rank 0's lr_scale
        lr = trainer.learning_rate(trainer.step + 1)
        floor = " (its floor)" if lr == trainer.config.lr_floor else ""
        bar.write(
            f"dev BLEU has not improved for {evaluations.evals_since_best} evaluations: the learning rate "
            f"is cut to {evaluations.lr_scale:g} times the schedule's, {lr:.2e} now{floor}"
        )
    if run:
        run.log(record)
        saved = run.save_evaluated(
            trainer.run_state(), trainer.save, verdict.improved, trainer.checkpoints_kept
        )
        evaluations.kept = saved.kept
    if verdict.stop:
        where = f", in {run.best_path}" if run else ""
        bar.write(
            f"stopping early: dev BLEU has not improved for {evaluations.evals_since_best} evaluations "
            f"(best {evaluations.best_bleu:.2f}{where})"
        )
        trainer.requested = trainer.requested or "patience"  # under MPI: every rank stops after one step more
    return record


def _average_and_keep(trainer: Trainer, run: RunFiles, bar: Any, records: list[dict[str, Any]]) -> None:
    """At the end of the run: score on dev the average of its last ``average_last`` evaluation
    checkpoints of its second half (EvaluationState.to_average); best.npz becomes the average when it
    scores a higher dev BLEU than what best.npz holds (the best single checkpoint), and its metadata
    says which it holds (``best``). Then only the last ``keep_checkpoints`` evaluation checkpoints stay
    on disk."""
    evaluations = trainer.evaluations
    chosen = evaluations.to_average(trainer.step, trainer.config.average_last, run.directory)
    if trainer.averages and len(chosen) >= 2 and run.best_path.is_file():
        paths, steps = [run.directory / name for name in chosen], list(chosen.values())
        arrays, meta = average_checkpoints(paths)
        metrics = trainer._dev_metrics(model_from_checkpoint(paths[-1], arrays, meta))
        best_meta, single = load_meta(run.best_path), evaluations.best_bleu
        earlier_average = best_meta.get("best", {}).get("kept") == "average"  # a resumed run's
        held = (
            "the earlier average"
            if earlier_average
            else f"the best single checkpoint (step {best_meta['step']})"
        )
        higher = evaluations.judge_average(metrics["bleu"])
        choice = {
            "kept": "average" if higher else "checkpoint",
            "average": {"steps": steps, "bleu": metrics["bleu"]},
            "checkpoint": {"step": best_meta["step"], "bleu": single},
        }
        bar.write(format_metrics(f"average of steps {', '.join(map(str, steps))} dev", metrics))
        if higher:
            bar.write(
                f"best.npz holds the average: its dev BLEU {metrics['bleu']:.2f} is above that of {held}, "
                f"{single:.2f}"
            )
            save_checkpoint(
                run.best_path, arrays, {**meta, "best_bleu": evaluations.best_bleu, "best": choice}
            )
        else:
            bar.write(
                f"best.npz keeps {held}, dev BLEU {single:.2f}: the average scores {metrics['bleu']:.2f}"
            )
            if not earlier_average:  # which says so already
                save_checkpoint(
                    run.best_path, load_checkpoint(run.best_path)[0], {**best_meta, "best": choice}
                )
        record = {
            "step": trainer.step,
            "split": "dev-average",
            "steps": steps,
            "kept": choice["kept"],
            **metrics,
        }
        run.log(record)
        records.append(record)
    evaluations.kept = run.keep_last(trainer.run_state(), trainer.save, trainer.config.keep_checkpoints).kept


def _check_finite(model: Transformer, step: int, loss: float, grad_norm: float) -> None:
    """Stop before the update if the loss or any gradient is NaN/inf, naming the first bad parameter."""
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return
    xp = get_array_module()
    for name, parameter in model.named_parameters():
        if not bool(xp.isfinite(parameter.grad).all()):
            raise TrainingDiverged(
                f"step {step + 1}: the gradient of {name} is NaN or infinite (loss {loss})"
            )
    if not math.isfinite(loss):
        raise TrainingDiverged(f"step {step + 1}: the loss is {loss}")


def _reader_gone(trainer: Trainer) -> None:
    """Standard output or error was closed by its reader (``| head``, quitting ``less``): stop
    after this step and save, as after a first Ctrl-C."""
    trainer.requested = trainer.requested or "reader gone"
    print(
        "standard output was closed (its reader went away): stopping after this step, then saving",
        file=sys.stderr,
        flush=True,
    )


@contextmanager
def _stop_requests(trainer: Trainer) -> Iterator[None]:
    """What asks the run to stop after its step and save: signals (_signals_call), and standard output
    or error closed by its reader, both made ReaderWatched streams meanwhile."""
    streams = sys.stdout, sys.stderr
    gone = partial(_reader_gone, trainer)
    sys.stdout, sys.stderr = ReaderWatched(sys.stdout, gone), ReaderWatched(sys.stderr, gone)
    try:
        with _signals_call(trainer._request_stop):
            yield
    finally:
        sys.stdout, sys.stderr = streams


@contextmanager
def _signals_call(handler: Any) -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM (kill, a batch system's time limit) ask the loop to stop and
    save after the current step; a second one stops at once. Only the main thread has signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, saved in previous.items():
            signal.signal(number, saved)


def _fine_tune_start(
    given: TrainConfig, config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None
) -> tuple[dict[str, Any], TranslationTask, TrainConfig]:
    """(the model's configuration, the task, the run's settings) of a fine-tune from ``config.from_run``
    (config.fine_tune_settings refuses the settings given that the run decides otherwise). The corpus
    is split with the run's own tokenizer."""
    path = config.from_run
    assert path is not None
    try:
        meta = load_meta(path)
        check_meta(path, meta)
    except CheckpointError as error:
        raise CheckpointError(f"--from {path}: {error}") from None
    sizes, config = fine_tune_settings(given, config, model, meta)
    assert config.max_length is not None  # the run's tables bound it
    task = make_task(
        None,
        config.data,
        config.seed,
        config.tokenizer,
        config.max_length,
        serialized_tokenizer=serialized_tokenizer(meta["task"]),
        vocabularies=saved_vocabularies(path, meta),
        vocab_size=config.vocab_size,
    )
    _warn_unknown_share(task, path, config.data)
    return sizes, task, config


def _warn_unknown_share(task: Any, path: str | Path, data: str | None, sample: int = 10_000) -> None:
    """Warn, with the share, when the corpus of a fine-tune holds tokens outside the vocabularies of
    the run it starts from (they become <unk>): counted over up to ``sample`` training pairs."""
    pairs = getattr(task, "train_pairs", [])[:sample]
    unknown = total = 0
    for source, target in pairs:
        for vocab, tokens in (
            (task.src_vocab, task.tokenizer.tokenize_source(source)),
            (task.tgt_vocab, task.tokenizer.tokenize(target)),
        ):
            unknown += len(vocab.encode(tokens)[1])
            total += len(tokens)
    if unknown:
        warnings.warn(
            f"--data {data}: {unknown / total:.1%} of its tokens ({unknown:,} of {total:,}"
            f"{' in its first ' + format(sample, ',') + ' training pairs' if len(pairs) == sample else ''}) "
            f"are outside the vocabulary of --from {path} and become <unk>",
            stacklevel=3,
        )


def training_memory(
    config: TransformerConfig | Mapping[str, Any],
    batch_size: int,
    src_len: int,
    tgt_len: int,
    threads: int = 1,
) -> int:
    """About the bytes one training step holds, estimated from the sizes before anything is built.

    Weights, gradients and Adam's two moments (4 copies of every parameter), a gradient per extra
    thread's replica, and the forward caches of a batch of the longest pairs: per layer and token
    the projections, attention's probabilities (with dropout) over every key, the feed-forward
    hidden layer (with ReLU and dropout), and the logits with their softmax and gradient.
    """
    config = TransformerConfig.of(config)
    d, d_ff, n, heads = config.d_model, config.d_ff, config.N, config.h
    itemsize = get_array_module().dtype(config.dtype).itemsize
    weights = parameter_count(config) * (4 + 2 * (threads - 1))
    encoder_token = n * (10 * d + 3 * d_ff + 3 * heads * src_len) + 2 * d
    decoder_token = (
        n * (19 * d + 3 * d_ff + 3 * heads * (tgt_len + src_len)) + 2 * d + 3 * config.tgt_vocab_size
    )
    return itemsize * (weights + batch_size * (src_len * encoder_token + tgt_len * decoder_token))


def check_memory(
    config: dict[str, Any], batch_size: int, src_len: int, tgt_len: int, threads: int = 1
) -> None:
    """Refuse, before anything is built, a run whose training_memory exceeds the memory available."""
    needed, available = training_memory(config, batch_size, src_len, tgt_len, threads), available_memory()
    if available is not None and needed > available:
        raise ValueError(
            f"a training step of this model needs about {needed / 2**30:.1f} GiB (d_model "
            f"{config['d_model']}, N {config['N']}, d_ff {config['d_ff']}, batch_size {batch_size}, pairs of "
            f"up to {src_len} source and {tgt_len} target tokens, {threads} thread(s)), but only "
            f"{available / 2**30:.1f} GiB is available: use a smaller --batch-size or model, or fewer "
            "--threads"
        )


class _Throughput:
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


class _NoBar:
    total: int | None = None

    def refresh(self) -> None: ...
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kwargs: Any) -> None: ...
    def write(self, text: str) -> None:
        print(text, flush=True)

    def close(self) -> None: ...


def _progress(total: int | None, initial: int, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        print(
            "tqdm is not installed (pip install 'numpy_transformer[train]'): training without a progress bar"
        )
        return _NoBar()
    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
