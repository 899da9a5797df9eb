"""Training a translation model: the Trainer, its step and its loop.

    trainer = Trainer.create(TrainConfig(task="copy", steps=500), ModelConfig(d_model=64, N=2))
    trainer.fit("runs/copy")               # log, evaluate and checkpoint into a run directory
    trainer = Trainer.resume("runs/copy")  # continues exactly where the checkpoint stopped

Files on disk are the checkpoint module's and the run directory's; scores are the evaluation
module's. Here: how one optimiser step is taken (alone, in threads, or as one MPI rank of
several) and the loop around it.
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
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any, NoReturn

from ..backend import get_array_module, resolve_dtype, step_rng
from ..machine import available_memory, blas_threads, cpu_cores, tune_cpu
from ..model import Transformer, build_transformer, parameter_count
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
    split_prefix,
    task_recipe,
)
from .config import ModelConfig, TrainConfig, config_toml, flag_of
from .data import FileTask, SubwordDropout, TranslationTask, make_task
from .distributed import AnotherRankFailed, Communicator, weights_checksum
from .evaluation import evaluate, format_metrics
from .run_directory import RunFiles
from .thread_parallel import DataParallel, auto_threads, mask_rows


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


STOP_MESSAGES = {"interrupted": "interrupted", "another rank": "stopped with another rank"}
PLAN_AFTER = 20  # steps timed before a time-budgeted run plans its length


class TimeBudget:
    """Plans a run's number of steps to fit ``minutes`` of wall-clock time in all.

    The clock counts what was ``spent`` before training (reading the corpus, learning its
    subwords; an earlier session of the run) and everything since ``start``: steps, evaluations,
    saves. ``plan`` is asked again and again as the run goes: it takes the mean time of the steps
    since it was last asked and of the evaluations so far, and returns the step at which the run
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
        if self.step_seconds:  # their median: one slow step (a pause, the first one) is not the pace
            self.per_step = sorted(self.step_seconds)[len(self.step_seconds) // 2]
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


class Trainer:
    """Owns a model, its task, optimiser and schedule; trains, evaluates, saves and resumes.

    With a Communicator (``comm``, an MPI run of several ranks: numpy_transformer.translator.distributed)
    every rank trains its slice of each global batch and the gradients are summed across ranks;
    rank 0 alone logs, evaluates and saves. The ranks leave ``fit`` together: a rank's failure is
    held until the next all-reduce tells the others, then raised on that rank while the others
    raise AnotherRankFailed.
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
        if comm is not None and config.batch_size < comm.size:
            raise ValueError(
                f"batch-size {config.batch_size} is smaller than the {comm.size} ranks: each needs a row"
            )
        if comm is not None and config.accumulate > 1:  # each micro-batch would be reduced on top of the last
            raise ValueError(
                f"accumulate {config.accumulate} is not supported on {comm.size} MPI ranks: the ranks "
                "already add their batches' gradients; use a larger --batch-size or more ranks"
            )
        if (config.steps is None) == (config.time_budget is None) or config.lr is None:
            raise ValueError(
                f"exactly one of config.steps and config.time_budget must be set, and config.lr, got "
                f"{config.steps}, {config.time_budget} and {config.lr}: TrainConfig.resolve chooses"
            )
        if config.threads > cpu_cores():  # a replica of the model per thread, for no speed
            raise ValueError(f"threads {config.threads} exceeds this machine's {cpu_cores()} cores")
        tune_cpu()  # the process-wide allocator setting a training loop wants (see machine.tune_cpu)
        self.cores = comm.cores_per_rank() if comm else None  # None: every core of the machine
        self.optimizer: Adam = (
            AdamW(model, lr=config.lr, threads=self.cores, weight_decay=config.weight_decay)
            if config.optimizer == "adamw"
            else Adam(model, lr=config.lr, threads=self.cores)
        )
        # the run's last step: config.steps, or planned to fit the time budget (first after PLAN_AFTER steps)
        self.budget = (
            TimeBudget(config.time_budget, final_evaluations=2 if self.averages else 1)
            if config.time_budget is not None
            else None
        )
        self._planned = step + PLAN_AFTER
        self.schedule = make_schedule(config, model.config["d_model"], self.steps)
        self.best_bleu = -1.0  # the best dev BLEU of this run so far (its checkpoint: best.npz)
        self.evals_since_best = 0  # evaluations since it, for config.patience and config.plateau_cut
        self.lr_scale = 1.0  # the plateau cuts' multiplier of the schedule (config.plateau_cut)
        self.kept: list[str] = []  # the evaluation checkpoints (step-*.npz) this run wrote and keeps
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
        # under MPI, this rank's failure (rank 0's save, a rank's forward pass) until the ranks agree on it
        self.failure: Exception | None = None
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
        started = time.perf_counter()
        given, config = config, config.resolve()
        if config.from_run is not None:  # the run's model, tokenizer and vocabularies: nothing is chosen
            sizes, task, config = _fine_tune_start(given, config, model)
            src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(config.seed))
        else:
            sizes_given = (
                model if isinstance(model, ModelConfig) else ModelConfig.from_mapping(dict(model or {}))
            )
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
        longest_batch = (
            config.batch_size if config.batch_tokens is None else -(-config.batch_tokens // tgt_len)
        )
        check_memory(sizes, longest_batch, src_len, tgt_len, config.threads or 1)
        if config.from_run is not None:  # its weights, read only now that the step is known to fit
            arrays, meta = load_checkpoint(config.from_run)
            network = model_from_checkpoint(config.from_run, arrays, {**meta, "model": sizes})
        else:
            network = build_transformer(**sizes, seed=config.seed)
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
        arrays, meta = load_checkpoint(path)
        if "imported_from" in meta:
            raise ValueError(
                f"--resume: {resolve_path(path)} holds an imported model, not a training run: fine-tune it "
                f"into a run of its own with train --from {path} --data FILE.tsv --out NEW_RUN"
            )
        saved_ranks, ranks = int(meta.get("ranks", 1)), comm.size if comm else 1
        if saved_ranks != ranks:
            raise ValueError(
                f"checkpoint {resolve_path(path)} was trained on {saved_ranks} rank(s) and this run has "
                f"{ranks}: resume it with mpiexec -n {saved_ranks}"
                + ("" if saved_ranks > 1 else " or without mpiexec")
            )
        started = time.perf_counter()
        config = TrainConfig(**meta["train"]).resolve()
        if steps is not None or time_budget is not None:  # the one given replaces the run's length
            config = replace(config, steps=steps, time_budget=time_budget).resolve()
        if threads is not None:
            config = replace(config, threads=threads)
        model, task = restore_model_and_task(path, arrays, meta)
        trainer = cls(model, task, config, step=int(meta["step"]), comm=comm)
        if trainer.budget is not None:
            # a run trained with --steps kept no time: its budget counts from this resumption
            trainer.budget.spent_before = (
                float(meta.get("time_spent_s") or 0.0) + time.perf_counter() - started
            )
            if time_budget is None:  # the saved run's plan, until the next one
                trainer.plan_steps(int(meta.get("steps_planned", trainer.steps)))
        trainer.best_bleu = float(meta.get("best_bleu", -1.0))
        trainer.evals_since_best = int(meta.get("evals_since_best", 0))
        trainer.lr_scale = float(meta.get("lr_scale", 1.0))
        trainer.kept = [str(name) for name in meta.get("kept", [])]
        if (
            isinstance(meta.get("run_id"), str) and meta["run_id"]
        ):  # else saved before runs had an id: a new one
            trainer.run_id = meta["run_id"]
        try:
            trainer.optimizer.load_state_dict({**split_prefix(arrays, "optim"), **meta["optimizer"]})
        except (ValueError, KeyError) as error:
            raise CheckpointError(
                f"checkpoint {resolve_path(path)}: optimizer state does not fit ({error})"
            ) from error
        return trainer

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
        """One optimiser step on the batch of the current step; returns loss, lr, grad norm, tokens.

        With ``accumulate`` K the step's batch is K micro-batches, one after another; each one's
        gradient is weighted by its share of the step's target tokens, so their sum is the gradient
        of the mean loss over all of them, as one K-times larger batch would give.
        """
        config, model = self.config, self.model
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
        if self.comm is None:
            loss = 0.0
            for k, batch in enumerate(batches):
                model.set_rng(step_rng(config.seed, self.step, k))
                share = batch.n_tokens / max(tokens, 1)
                loss += share * self._loss_and_backward(batch, slice(None), share)
        else:
            model.set_rng(step_rng(config.seed, self.step, self.comm.rank))
            loss = self._distributed_loss_and_backward(batches[0])
        grad_norm = clip_grad_norm(model, config.clip) if config.clip > 0 else global_grad_norm(model)
        self._check_finite(loss, grad_norm)
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
        if shards not in self._parallel:
            self._parallel[shards] = DataParallel(model, shards)
        size = batch.src.shape[0]
        src_mask, tgt_mask = mask_rows(batch.src_mask, rows, size), mask_rows(batch.tgt_mask, rows, size)
        return self._parallel[shards].loss_and_backward(
            src, tgt_in, src_mask, tgt_mask, labels, self.task.ids.pad, config.label_smoothing, weight
        )

    def _distributed_loss_and_backward(self, batch: Any) -> float:
        """This rank's rows with the weight n_k / N, then the all-reduce of the model's flat gradient
        (in place) and of the loss and stop flags: every rank leaves with the whole batch's gradient
        and mean loss, and stops when any rank asked to."""
        comm = self.comm
        assert comm is not None and self.model.flat is not None
        rows = comm.rows(batch.src.shape[0])
        pad = self.task.ids.pad
        total, mine = int((batch.tgt_out != pad).sum()), int((batch.tgt_out[rows] != pad).sum())
        loss = 0.0
        with blas_threads(self.cores or 1):
            # a rank whose rows hold no target token adds nothing, nor does one that failed
            if self.failure is None and (mine or not total):
                try:
                    loss = self._loss_and_backward(batch, rows, mine / max(total, 1))
                except Exception as error:  # held: raised once the others know, so that none waits for ever
                    self.failure = error
            comm.allreduce_sum(self.model.flat.gradients())
        loss, stops, failures, self.lr_scale = comm.allreduce_values(  # rank 0's evaluations cut the rate
            [
                loss * mine / max(total, 1),
                float(self.requested is not None),
                float(self.failure is not None),
                self.lr_scale if comm.rank == 0 else 0.0,
            ]
        )
        if failures > 0:  # before the update: every rank stops here, at the same step
            self._raise_failure()
        if stops > 0:
            self.stop = self.stop or self.requested or "another rank"
        return loss

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """Under MPI, an exception of the block (rank 0's log, evaluation or save) is held in
        ``failure`` until the next all-reduce tells every rank; alone, it is raised at once."""
        if self.comm is None:
            yield
            return
        try:
            yield
        except Exception as error:
            self.failure = self.failure or error

    def _raise_failure(self) -> NoReturn:
        """Every rank stops here together: a failed one raises its own exception, the others
        AnotherRankFailed."""
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
        raise AnotherRankFailed("stopped because another rank failed")

    def _check_finite(self, loss: float, grad_norm: float) -> None:
        """Stop before the update if the loss or any gradient is NaN/inf, naming the first bad parameter."""
        if math.isfinite(loss) and math.isfinite(grad_norm):
            return
        xp = get_array_module()
        for name, parameter in self.model.named_parameters():
            if not bool(xp.isfinite(parameter.grad).all()):
                raise TrainingDiverged(
                    f"step {self.step + 1}: the gradient of {name} is NaN or infinite (loss {loss})"
                )
        if not math.isfinite(loss):
            raise TrainingDiverged(f"step {self.step + 1}: the loss is {loss}")

    # -- the loop ---------------------------------------------------------------------------

    def fit(self, out_dir: str | Path | None = None, progress: bool = True) -> list[dict[str, Any]]:
        """Train until ``config.steps``; log, evaluate and checkpoint along the way.

        Ctrl-C or SIGTERM finishes the current step, saves, and returns. A NaN/inf raises
        TrainingDiverged and leaves the last good checkpoint in place. Under MPI only rank 0 writes,
        shows progress and evaluates; every rank compares its weights' checksum with the others' at
        each log step. A failure of one rank raises there, and AnotherRankFailed on the others, at
        the next step's all-reduce, or at the end of the loop (one more collective call per run).
        """
        config, root = self.config, self.comm is None or self.comm.rank == 0
        run = RunFiles(Path(out_dir)) if out_dir is not None and root else None
        bar = _progress(self.steps, self.step, progress and root)
        records: list[dict[str, Any]] = []
        self.stop = self.requested = self.failure = None
        throughput = _Throughput()
        with self._stop_on_signals(), closing(bar), ExitStack() as files:
            if run:
                with self._holding():
                    run.write_config(config_toml(self.model_config, config))
                    files.enter_context(run)
            if self.budget is not None:
                self.budget.start()
            while self.stop is None and self.step < self.steps:
                began = time.perf_counter()
                stats = self.train_step()
                if self.budget is not None:
                    self.budget.step_seconds.append(time.perf_counter() - began)
                    if self.step % config.log_every == 0 or self.step == self.steps:
                        self._plan(bar)
                last = self.step == self.steps
                logged = self.step % config.log_every == 0 or last
                if logged and self.comm is not None:  # on every rank at once: a drift stops all of them
                    self.comm.check_same(weights_checksum(self.model.parameters()), "weights")
                if self.failure is None:
                    with self._holding():  # this rank's own work (rank 0's log, evaluation and saves)
                        bar.update(1)
                        if logged:
                            record = {"step": self.step, **stats, **throughput.since_last(stats["tokens"])}
                            del record["tokens"]
                            bar.set_postfix(loss=f"{stats['loss']:.3f}", lr=f"{stats['lr']:.2e}")
                            records.append(record)
                            if run:
                                run.log(record)
                        else:
                            throughput.count(stats["tokens"])
                        if root and (self.step % config.eval_every == 0 or last):
                            began = time.perf_counter()
                            records.append(self._evaluate_and_keep(run, bar))
                            if self.budget is not None:
                                self.budget.evaluation_seconds.append(time.perf_counter() - began)
                if self.comm is None and self.requested:  # alone, a request needs no agreement
                    self.stop = self.requested
            if run and self.stop and run.saved_step != self.step and self.failure is None:
                with self._holding():
                    run.save(self)
                    if self.stop in STOP_MESSAGES:
                        saved = run.directory / FILENAME
                        bar.write(f"{STOP_MESSAGES[self.stop]}: saved step {self.step} to {saved}")
            # a run that ended (not one interrupted, to be resumed) and evaluated since it (re)started
            evaluated = any(record.get("split") == "dev" for record in records)
            if run and evaluated and self.stop in (None, "patience") and self.failure is None:
                with self._holding():  # under MPI the others wait for rank 0 in the last all-reduce
                    self._average_and_keep(run, bar, records)
        # the loop's last failure (rank 0's last evaluation or save) has no step left to carry it
        if self.comm is not None and self.comm.allreduce_values([float(self.failure is not None)])[0] > 0:
            self._raise_failure()
        return records

    @property
    def steps(self) -> int:
        """The run's last step: config.steps, or the plan that fits its time budget."""
        return self.config.steps if self.config.steps is not None else self._planned

    def learning_rate(self, step: int) -> float:
        """The schedule's rate at optimiser step ``step`` times the plateau cuts' ``lr_scale``: the cuts
        never take it below config.lr_floor, where the schedule itself may go (warm-up, the cosine's end)."""
        scheduled = self.schedule(step)
        return max(scheduled * self.lr_scale, min(scheduled, self.config.lr_floor))

    def plan_steps(self, steps: int) -> None:
        """End a time-budgeted run at ``steps`` (not before the current step); the schedule stretches
        to it."""
        self._planned = max(steps, self.step)
        self.schedule = make_schedule(self.config, self.model.config["d_model"], self.steps)

    def _plan(self, bar: Any) -> None:
        """Plan the run's end from the time left (under MPI rank 0's clock decides for every rank)."""
        assert self.budget is not None
        first = self.budget.plans == 0
        steps = self.budget.plan(self.step, self.config.eval_every)
        if self.comm is not None:
            steps = round(self.comm.allreduce_values([float(steps) if self.comm.rank == 0 else 0.0])[0])
        self.plan_steps(steps)
        bar.total = self.steps
        bar.refresh()
        if first and (self.comm is None or self.comm.rank == 0):
            bar.write(
                f"{self.budget.per_step * 1e3:.0f} ms a step: planned {self.steps} steps to fit the "
                f"{self.config.time_budget:g}-minute budget (the plan is corrected as the run goes)"
            )

    def _dev_metrics(self, model: Transformer, examples: int = 0) -> dict[str, Any]:
        """The scores of ``model`` on the run's dev pairs: every evaluation of the run is this one."""
        return evaluate(
            model,
            self.task,
            self.task.dev[: self.config.eval_size],
            self.config.label_smoothing,
            examples=examples,
        )

    def _evaluate_and_keep(self, run: RunFiles | None, bar: Any) -> dict[str, Any]:
        """Score the dev pairs; save the checkpoint (and best.npz when it improved); patience."""
        metrics = self._dev_metrics(self.model, self.config.eval_examples)
        record = {"step": self.step, "split": "dev", **metrics}
        bar.write(format_metrics(f"step {self.step} dev", metrics))
        for example in metrics.get("examples", []):
            bar.write(
                f"  source     {example['source']}\n  reference  {example['reference']}\n"
                f"  model      {example['translation']}"
            )
        improved = metrics["bleu"] > self.best_bleu
        self.best_bleu = max(self.best_bleu, metrics["bleu"])
        self.evals_since_best = 0 if improved else self.evals_since_best + 1
        stopping = self.config.patience and self.evals_since_best >= self.config.patience
        if not stopping:
            self._cut_on_plateau(bar)
        if run:
            run.log(record)
            run.save_evaluated(self, improved)
        if stopping:
            where = f", in {run.best_path}" if run else ""
            bar.write(
                f"stopping early: dev BLEU has not improved for {self.evals_since_best} evaluations "
                f"(best {self.best_bleu:.2f}{where})"
            )
            self.requested = self.requested or "patience"  # under MPI: every rank stops after one step more
        return record

    def _cut_on_plateau(self, bar: Any) -> None:
        """Multiply lr_scale by config.plateau_cut after every plateau_patience evaluations without a
        better dev BLEU, unless the learning rate is at its floor already (under MPI the next step's
        all-reduce gives every rank rank 0's lr_scale)."""
        cut, evaluations = self.config.plateau_cut, self.evals_since_best
        if cut == 1.0 or evaluations == 0 or evaluations % self.config.plateau_patience:
            return
        if self.schedule(self.step + 1) * self.lr_scale <= self.config.lr_floor:
            return
        self.lr_scale *= cut
        lr = self.learning_rate(self.step + 1)
        floor = " (its floor)" if lr == self.config.lr_floor else ""
        bar.write(
            f"dev BLEU has not improved for {evaluations} evaluations: the learning rate is cut to "
            f"{self.lr_scale:g} times the schedule's, {lr:.2e} now{floor}"
        )

    def _average_and_keep(self, run: RunFiles, bar: Any, records: list[dict[str, Any]]) -> None:
        """At the end of the run: score on dev the average of its last ``average_last`` evaluation
        checkpoints of its second half (the first half's weights are too far from the last ones to
        average with them); best.npz becomes the average when it scores a higher dev BLEU than what
        best.npz holds (the best single checkpoint), and its metadata says which it holds (``best``).
        Then only the last ``keep_checkpoints`` evaluation checkpoints stay on disk."""
        step_of = {name: int(Path(name).stem.removeprefix("step-")) for name in self.kept}
        chosen = [
            name for name in self.kept if 2 * step_of[name] > self.step and (run.directory / name).is_file()
        ][-self.config.average_last :]  # one removed by hand is left out, not the run's end failed
        if self.averages and len(chosen) >= 2 and run.best_path.is_file():
            arrays, meta = average_checkpoints([run.directory / name for name in chosen])
            metrics = self._dev_metrics(model_from_checkpoint(run.directory / chosen[-1], arrays, meta))
            steps, best_meta = [step_of[name] for name in chosen], load_meta(run.best_path)
            earlier_average = best_meta.get("best", {}).get("kept") == "average"  # a resumed run's
            held = (
                "the earlier average"
                if earlier_average
                else f"the best single checkpoint (step {best_meta['step']})"
            )
            higher = metrics["bleu"] > self.best_bleu
            choice = {
                "kept": "average" if higher else "checkpoint",
                "average": {"steps": steps, "bleu": metrics["bleu"]},
                "checkpoint": {"step": best_meta["step"], "bleu": self.best_bleu},
            }
            bar.write(format_metrics(f"average of steps {', '.join(map(str, steps))} dev", metrics))
            if higher:
                bar.write(
                    f"best.npz holds the average: its dev BLEU {metrics['bleu']:.2f} is above that of {held}, "
                    f"{self.best_bleu:.2f}"
                )
                self.best_bleu = metrics["bleu"]
                save_checkpoint(run.best_path, arrays, {**meta, "best_bleu": self.best_bleu, "best": choice})
            else:
                bar.write(
                    f"best.npz keeps {held}, dev BLEU {self.best_bleu:.2f}: the average scores {metrics['bleu']:.2f}"
                )
                if not earlier_average:  # which says so already
                    save_checkpoint(
                        run.best_path, load_checkpoint(run.best_path)[0], {**best_meta, "best": choice}
                    )
            record = {
                "step": self.step,
                "split": "dev-average",
                "steps": steps,
                "kept": choice["kept"],
                **metrics,
            }
            run.log(record)
            records.append(record)
        run.keep_last(self, self.config.keep_checkpoints)

    @contextmanager
    def _stop_on_signals(self) -> Iterator[None]:
        """Ctrl-C (SIGINT) and SIGTERM (kill, a batch system's time limit) ask the loop to stop and
        save after the current step; a second one stops at once. Only the main thread has signals."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {
            number: signal.signal(number, self._request_stop) for number in (signal.SIGINT, signal.SIGTERM)
        }
        try:
            yield
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)

    def _request_stop(self, signum: int, frame: Any) -> None:
        if self.requested == "interrupted":  # the second signal stops at once
            raise KeyboardInterrupt
        self.requested = "interrupted"
        if self.comm is not None and self.comm.rank != 0:  # mpiexec signals every rank: rank 0 says it
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

    def save(self, out: str | Path) -> Path:
        """Write the checkpoint atomically (a run directory's model.npz, or the .npz named); weights
        that are NaN or infinite are never written (TrainingDiverged)."""
        model, task = self.model, self.task
        xp = get_array_module()
        assert model.flat is not None
        if not bool(xp.isfinite(model.flat.data).all()):  # one transfer; then the names, only if needed
            bad = next(name for name, p in model.named_parameters() if not bool(xp.isfinite(p.data).all()))
            raise TrainingDiverged(f"step {self.step}: the weights of {bad} are NaN or infinite; not saved")
        arrays = {f"param/{name}": value for name, value in model.state_dict().items()}
        optimizer_state = self.optimizer.state_dict()
        arrays.update({f"optim/{k}": v for k, v in optimizer_state.items() if k.startswith(("m.", "v."))})
        meta = {
            "model": model.config,
            "run_id": self.run_id,
            "step": self.step,
            "train": asdict(self.config),
            "optimizer": {k: v for k, v in optimizer_state.items() if not k.startswith(("m.", "v."))},
            "task": task_recipe(task, self.config),
            "ranks": self.comm.size if self.comm else 1,
            "best_bleu": self.best_bleu,
            "evals_since_best": self.evals_since_best,
            "lr_scale": self.lr_scale,
            "kept": self.kept,
            "steps_planned": self.steps,
            "time_spent_s": self.budget.spent() if self.budget is not None else None,
            "src_vocab": task.src_vocab.itos,
            "tgt_vocab": task.tgt_vocab.itos,
        }
        out = Path(out)
        return save_checkpoint(out if out.suffix == ".npz" else out / FILENAME, arrays, meta)


def _fine_tune_start(
    given: TrainConfig, config: TrainConfig, model: ModelConfig | Mapping[str, Any] | None
) -> tuple[dict[str, Any], TranslationTask, TrainConfig]:
    """(the model's configuration, the task, the run's settings) of a fine-tune from ``config.from_run``,
    refusing by name a setting given (``given``: before resolve; ``model``: the model settings given)
    that the run decides otherwise: the model (bar dropout), the tokenizer and vocabularies, a
    --max-length beyond its positional tables. The corpus is split with the run's own tokenizer."""
    path = config.from_run
    assert path is not None
    try:
        meta = load_meta(path)
        check_meta(path, meta)
    except CheckpointError as error:
        raise CheckpointError(f"--from {path}: {error}") from None
    saved, recipe = ModelConfig.from_model(meta["model"]), meta["task"]
    # given: a mapping's entries, or a ModelConfig's fields that differ from their defaults
    changes = (
        {
            item.name: getattr(model, item.name)
            for item in fields(ModelConfig)
            if getattr(model, item.name) != item.default
        }
        if isinstance(model, ModelConfig)
        else {name: value for name, value in dict(model or {}).items() if value is not None}
    )
    for item in fields(ModelConfig):
        if (
            item.name in changes
            and item.name != "dropout"
            and changes[item.name] != getattr(saved, item.name)
        ):
            value, kept = changes[item.name], getattr(saved, item.name)
            flag = flag_of(item)
            if isinstance(kept, bool):  # shown as typed: the flag, or its absence
                typed, was = (flag if on != item.default else f"no {flag}" for on in (value, kept))
                difference = f"{typed} differs from the model of --from {path}, which has {was}"
            else:
                difference = f"{flag} {value!r} differs from the model of --from {path} ({kept!r})"
            raise ValueError(
                f"{difference}: a fine-tune keeps the model it starts from (only --dropout may change)"
            )
    shared = bool(meta["model"].get("shared_vocab", False))
    for flag, value, kept in (
        ("--tokenizer", given.tokenizer, recipe.get("tokenizer")),
        ("--vocab-size", given.vocab_size, recipe.get("vocab_size")),
        ("--shared-vocab", given.shared_vocab or None, shared or None),
    ):
        if value is not None and value != kept:
            raise ValueError(
                f"{flag} {value!r} differs from the run of --from {path} ({kept!r}): a fine-tune keeps its "
                "tokenizer and vocabularies"
            )
    limit = min(meta["model"]["src_seq_len"], meta["model"]["tgt_seq_len"] - 1)  # the target gains <eos>
    if given.max_length is not None and given.max_length > limit:
        raise ValueError(
            f"--max-length {given.max_length} exceeds what the model of --from {path} holds: {limit} "
            "tokens a side (its positional tables)"
        )
    if config.bpe_dropout and recipe["tokenizer"] != "bpe":
        raise ValueError(
            f"--bpe-dropout {config.bpe_dropout:g} applies to learned BPE subwords only: the run of --from "
            f"{path} is tokenized by its {recipe['tokenizer']} tokenizer"
            + (" (an imported Marian model's SentencePiece)" if recipe["tokenizer"] == "marian" else "")
        )
    max_length = min(config.max_length or limit, limit)
    config = replace(
        config,
        tokenizer=recipe["tokenizer"],
        vocab_size=recipe.get("vocab_size"),
        shared_vocab=shared,
        max_length=max_length,
    )
    task = make_task(
        None,
        config.data,
        config.seed,
        config.tokenizer,
        max_length,
        serialized_tokenizer=serialized_tokenizer(recipe),
        vocabularies=saved_vocabularies(path, meta),
        vocab_size=config.vocab_size,
    )
    _warn_unknown_share(task, path, config.data)
    return {**meta["model"], "dropout": changes.get("dropout", saved.dropout)}, task, config


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
    config: dict[str, Any], batch_size: int, src_len: int, tgt_len: int, threads: int = 1
) -> int:
    """About the bytes one training step holds, estimated from the sizes before anything is built.

    Weights, gradients and Adam's two moments (4 copies of every parameter), a gradient per extra
    thread's replica, and the forward caches of a batch of the longest pairs: per layer and token
    the projections, attention's probabilities (with dropout) over every key, the feed-forward
    hidden layer (with ReLU and dropout), and the logits with their softmax and gradient.
    """
    d, d_ff, n, heads = config["d_model"], config["d_ff"], config["N"], config.get("h", 8)
    itemsize = get_array_module().dtype(resolve_dtype(config.get("dtype", "float32"))).itemsize
    weights = parameter_count(config) * (4 + 2 * (threads - 1))
    encoder_token = n * (10 * d + 3 * d_ff + 3 * heads * src_len) + 2 * d
    decoder_token = (
        n * (19 * d + 3 * d_ff + 3 * heads * (tgt_len + src_len)) + 2 * d + 3 * config["tgt_vocab_size"]
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
