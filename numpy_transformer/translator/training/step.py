"""What one optimiser step is made of besides the model's forward and backward (Trainer.train_step):
its learning-rate schedule and optimiser, the settings it refuses, and the refusal of a step or a
checkpoint whose numbers are no longer finite (TrainingDiverged)."""

from __future__ import annotations

import math
from typing import Any

from ...backend import get_array_module
from ...machine import cpu_cores
from ...model import Transformer
from ...optim import Adam, AdamW, ConstantSchedule, NoamSchedule, WarmupCosineSchedule
from ..config import TrainConfig


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
