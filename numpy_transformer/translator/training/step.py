"""One optimiser step of a run (Stepper, which Trainer.train_step asks for each step): its batches,
their forward and backward, the all-reduce, clipping and the update; the step's learning-rate
schedule and optimiser, the settings it refuses, and the refusal of a step or a checkpoint whose
numbers are no longer finite (TrainingDiverged)."""

from __future__ import annotations

import math
from typing import Any

from ...backend import backend_name, get_array_module, step_rng, to_numpy
from ...machine import cpu_cores
from ...model import Transformer, check_ids_on_host, loss_and_backward
from ...optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    NoamSchedule,
    WarmupCosineSchedule,
    clip_grad_norm,
    global_grad_norm,
    grad_norm_on_device,
)
from ..config import TrainConfig
from ..distributed import MpiRanks, Ranks
from ..tasks import Batch, SubwordDropout, TranslationTask
from ..thread_parallel import DataParallel, auto_threads, mask_rows


class TrainingDiverged(RuntimeError):
    """The loss or a gradient became NaN or infinite."""


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


def check_settings(config: TrainConfig) -> None:
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


def check_finite(model: Transformer, step: int, loss: float, grad_norm: float) -> None:
    """Stop the run (TrainingDiverged) if the loss, any gradient or their norm is NaN/inf, naming the
    first bad parameter: on the host before the update, on a GPU after an update the device refused."""
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
    raise TrainingDiverged(f"step {step + 1}: the gradient norm is {grad_norm}, every gradient finite")


def check_weights(model: Transformer, step: int) -> None:
    """Refuse to save weights that are NaN or infinite (TrainingDiverged), naming the first such
    parameter: a checkpoint is never written with them."""
    xp = get_array_module()
    assert model.flat is not None
    if not bool(xp.isfinite(model.flat.data).all()):  # one transfer; then the names, only if needed
        bad = next(name for name, p in model.named_parameters() if not bool(xp.isfinite(p.data).all()))
        raise TrainingDiverged(f"step {step}: the weights of {bad} are NaN or infinite; not saved")


class Stepper:
    """How a run takes one optimiser step, as nanoGPT's: the micro-batches' forward, loss and backward
    (each gradient weighted by its share of the step's target tokens, as one K-times larger batch
    would give; a batch split into row shards on threads of their own where worth it), the ranks'
    all-reduce (``ranks``: MpiRanks, or Ranks alone), then clipping and the update. On a GPU the step
    reads the device once, at its end, the loss and the gradient norm together (the update before it
    is guarded on the device by their being finite): every check that would read the device in the
    middle of the step is made on the host batch instead (MPI, whose ranks agree on host numbers, is
    refused on a GPU: Communicator.from_environment)."""

    def __init__(
        self,
        model: Transformer,
        task: TranslationTask,
        config: TrainConfig,
        ranks: Ranks | MpiRanks,
        optimizer: Adam,
    ) -> None:
        self.model, self.task, self.config, self.ranks, self.optimizer = model, task, config, ranks, optimizer
        # training batches' segmentations (config.bpe_dropout), never longer than the position tables
        self.subword_dropout = (
            SubwordDropout(task, config.bpe_dropout, (model.src_pos.seq_len, model.tgt_pos.seq_len - 1))
            if config.bpe_dropout
            else None
        )
        self._parallel: dict[int, DataParallel] = {}  # by the number of row shards

    def batches(self, step: int) -> list[Batch]:
        """The micro-batches of optimiser step ``step`` (counted from 0), config.accumulate of them."""
        config = self.config
        return [
            self.task.train_batch(
                step * config.accumulate + k,
                config.batch_size,
                config.bucket_steps,
                config.batch_tokens,
                self.subword_dropout,
            )
            for k in range(config.accumulate)
        ]

    def loss_and_backward(self, batches: list[Batch], tokens: int, step: int) -> Any:
        """The gradients of step ``step``'s ``batches`` (``tokens`` target tokens in all) in the model's
        (zeroed first), summed across the ranks; their loss, this rank's part of it: a float, or on a
        GPU a 0-d array of the device."""
        config, model, ranks = self.config, self.model, self.ranks
        model.train()
        self.optimizer.zero_grad()
        loss: Any = 0.0
        with ranks.threads():
            for k, batch in enumerate(batches):
                model.set_rng(step_rng(config.seed, step, ranks.rank * config.accumulate + k))
                part = ranks.part(batch, tokens, self.task.ids.pad)  # this rank's rows: alone, all
                if part.rows is not None:
                    with ranks.holding():  # under MPI a failure waits for the all-reduce to tell the others
                        rows_loss = self._loss_and_backward(batch, part.rows, part.weight)
                        loss = loss + ranks.weigh(rows_loss, part)
            ranks.all_reduce(model)
        return loss

    def update(self, loss: Any, lr: float, step: int) -> tuple[float, float]:
        """The update of step ``step`` (counted from 0) at ``lr``, the gradients clipped (config.clip);
        (the loss, the gradient norm) as floats. A step whose loss or gradients are not finite is
        refused (TrainingDiverged): on the host before the update, on a GPU with the update undone."""
        if self.on_device:
            return self._update_then_read(loss, lr, step)
        config, model = self.config, self.model
        grad_norm = clip_grad_norm(model, config.clip) if config.clip > 0 else global_grad_norm(model)
        check_finite(model, step, loss, grad_norm)
        self.optimizer.step(lr)
        return loss, grad_norm

    @property
    def on_device(self) -> bool:
        """Whether the step runs on a GPU (the CuPy backend)."""
        return backend_name() == "cupy"

    def _loss_and_backward(self, batch: Batch, rows: slice, weight: float) -> Any:
        """Forward and backward of ``rows`` of the batch, its gradient scaled by ``weight``; the rows'
        mean loss: a float, or on a GPU a 0-d array of the device, the ids checked on the host batch
        (where the batch has one) instead of on the device."""
        config, model = self.config, self.model
        src, tgt_in, labels = batch.src[rows], batch.tgt_in[rows], batch.tgt_out[rows]
        length = max(src.shape[1], tgt_in.shape[1])
        shards = config.threads or auto_threads(model, src.shape[0], length, self.ranks.cores)
        size = batch.src.shape[0]
        masks = mask_rows(batch.src_mask, rows, size), mask_rows(batch.tgt_mask, rows, size)
        arguments = (src, tgt_in, *masks, labels, self.task.ids.pad, config.label_smoothing, weight)
        if self.on_device and batch.host is not None:
            host_src, host_tgt_in, host_labels = (ids[rows] for ids in batch.host)
            check_ids_on_host(model, host_src, host_tgt_in, host_labels, self.task.ids.pad)
            return loss_and_backward(model, *arguments, on_device=True)
        if shards == 1:  # the model's own step; DataParallel runs it on each of several row shards
            return loss_and_backward(model, *arguments)
        if shards not in self._parallel:
            self._parallel[shards] = DataParallel(model, shards)
        return self._parallel[shards].loss_and_backward(*arguments)

    def _update_then_read(self, loss: Any, lr: float, step: int) -> tuple[float, float]:
        """The GPU step's end: the gradient norm computed (and the gradients clipped, config.clip) on the
        device, the update guarded there by the loss and the norm being finite, then the step's one host
        synchronisation, the two read together. Where they are not finite the update wrote nothing: its
        count is taken back and TrainingDiverged names what diverged (check_finite)."""
        xp = get_array_module()
        norm = grad_norm_on_device(self.model, self.config.clip or None)
        numbers = xp.stack([xp.asarray(loss, dtype=xp.float64), norm])
        self.optimizer.step(lr, finite=xp.isfinite(numbers).all())
        loss_value, norm_value = to_numpy(numbers).tolist()
        if not (math.isfinite(loss_value) and math.isfinite(norm_value)):
            self.optimizer.take_back_step()
            check_finite(self.model, step, loss_value, norm_value)
        return loss_value, norm_value
