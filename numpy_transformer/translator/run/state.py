"""The state of a training run that its checkpoints carry besides the model: one typed object.

A checkpoint holds the model (its configuration and weights), the run's settings, its task's
recipe and vocabularies, and this: where the run stands. ``RunState.to_checkpoint`` writes it and
``RunState.from_checkpoint`` reads it back, the one place each way; checkpoints saved before a
field existed load with that field's default. Dropout masks need no state of their own: they come
from generators seeded by (seed, step, rank or micro-batch), so the step alone replays them.

Part of it changes only when the run evaluates: the best dev BLEU, the evaluations since it, the
plateau cuts of the learning rate and the evaluation checkpoints kept. That part is an
EvaluationState, which also decides what an evaluation leads to (``judge``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy

from ..config import TrainConfig
from .checkpoint import CheckpointError, resolve_path

KEPT_NAME = re.compile(r"step-\d{7}\.npz")  # exactly the names a run writes (RunFiles.save_evaluated)
OPTIMIZER_ARRAYS = ("m.", "v.")  # the optimiser state's arrays (Adam's moments), stored under OPTIMIZER
OPTIMIZER = "optim/"  # the checkpoint's prefix of those arrays: written and read here alone


@dataclass(frozen=True)
class Verdict:
    """What a dev evaluation decides: dev BLEU improved (``improved``), best.npz is saved (``best``: BLEU
    improved, or tied at a lower dev loss), the run stops (``stop``: BLEU has not improved for
    config.patience evaluations), the learning rate was cut (``cut``: a plateau)."""

    improved: bool
    best: bool
    stop: bool
    cut: bool


@dataclass
class EvaluationState:
    """Where a run's dev evaluations stand, and what the next one decides: the Trainer trains a step,
    evaluates, and asks ``judge``. A fresh run starts from the defaults; a checkpoint saves the fields
    in its RunState, and ``of`` resumes from them."""

    best_bleu: float = -1.0  # the best dev BLEU so far (its checkpoint: best.npz)
    evals_since_best: int = 0  # evaluations since it (config.patience, config.plateau_cut)
    lr_scale: float = 1.0  # the plateau cuts' multiplier of the schedule
    kept: tuple[str, ...] = ()  # the evaluation checkpoints (step-*.npz) the run wrote and keeps
    # best.npz's dev loss: of two checkpoints of one dev BLEU it keeps the lower loss's (a plateau's
    # later, better converged one); None: not known (a run saved before it was kept), ties keep the first
    best_loss: float | None = None

    @classmethod
    def of(cls, state: RunState) -> EvaluationState:
        """Where a saved run's evaluations stood."""
        return cls(**{item.name: getattr(state, item.name) for item in fields(cls)})

    def judge(self, bleu: float, loss: float, config: TrainConfig, scheduled: float) -> Verdict:
        """Record an evaluation's dev ``bleu`` and ``loss`` and say what follows: best.npz when it
        improved on the best (keep_best); a stop when BLEU has not improved for config.patience
        evaluations; else, after every config.plateau_patience of them, lr_scale multiplied by
        config.plateau_cut unless the rate is at config.lr_floor already (``scheduled``: the
        schedule's rate at the next step)."""
        improved = bleu > self.best_bleu
        best = self.keep_best(bleu, loss)
        self.evals_since_best = 0 if improved else self.evals_since_best + 1
        stop = 0 < (config.patience or 0) <= self.evals_since_best  # patience 0: never
        cut = (
            not stop
            and config.plateau_cut != 1.0
            and self.evals_since_best > 0
            and self.evals_since_best % config.plateau_patience == 0
            and scheduled * self.lr_scale > config.lr_floor
        )
        if cut:
            self.lr_scale *= config.plateau_cut
        return Verdict(improved, best, stop, cut)

    def learning_rate(self, scheduled: float, floor: float) -> float:
        """The schedule's rate ``scheduled`` times lr_scale: the cuts never take it below ``floor``,
        where the schedule itself may go (warm-up, the cosine's end)."""
        return max(scheduled * self.lr_scale, min(scheduled, floor))

    def to_average(self, step: int, last: int, directory: Path) -> dict[str, int]:
        """The last ``last`` evaluation checkpoints kept from the second half of a run of ``step``
        steps (the first half's weights are too far from the last ones to average with them), name
        to step; one no longer in ``directory`` (removed by hand) is left out."""
        steps = {name: int(Path(name).stem.removeprefix("step-")) for name in self.kept}
        chosen = [name for name in self.kept if 2 * steps[name] > step and (directory / name).is_file()]
        return {name: steps[name] for name in chosen[-last:]}

    def keep_best(self, bleu: float, loss: float) -> bool:
        """Whether weights of dev ``bleu`` and ``loss`` are better than best.npz's, recorded as the
        best if so: a higher BLEU, or the same at a lower loss (where best.npz's is known; a loss that
        is not finite is not known)."""
        known = loss if math.isfinite(loss) else None
        tied = (
            bleu == self.best_bleu
            and self.best_loss is not None
            and known is not None
            and known < self.best_loss
        )
        if bleu > self.best_bleu or tied:
            self.best_bleu, self.best_loss = bleu, known
            return True
        return False


@dataclass(frozen=True)
class RunState:
    """Where a run stands: everything a --resume needs besides the model, its settings and its task."""

    run_id: str | None  # who the run is (average refuses another run's checkpoints); None: saved before ids
    step: int  # optimiser steps taken
    optimizer: dict[str, Any] = field(repr=False)  # Adam's state_dict: moments (host arrays), step, lr, ...
    ranks: int = 1  # the MPI ranks that trained it: a run resumes on as many
    # the EvaluationState's fields, a fresh run's values by default
    best_bleu: float = EvaluationState.best_bleu
    evals_since_best: int = EvaluationState.evals_since_best
    lr_scale: float = EvaluationState.lr_scale
    kept: tuple[str, ...] = EvaluationState.kept
    best_loss: float | None = EvaluationState.best_loss
    steps_planned: int | None = None  # the run's last step as planned when it was saved
    time_spent_s: float | None = None  # a time-budgeted run's time so far (None: not budgeted)

    @property
    def seconds_per_step(self) -> float:
        """A time-budgeted run's time so far for each of its steps, its setup and evaluations shared among
        them (0.0 where not known)."""
        return (self.time_spent_s or 0.0) / self.step if self.step else 0.0

    def to_checkpoint(self) -> tuple[dict[str, numpy.ndarray], dict[str, Any]]:
        """The checkpoint's arrays (optim/...) and metadata fields that hold this state."""
        arrays = {OPTIMIZER + k: v for k, v in self.optimizer.items() if k.startswith(OPTIMIZER_ARRAYS)}
        meta = {
            "run_id": self.run_id,
            "step": self.step,
            "optimizer": {k: v for k, v in self.optimizer.items() if not k.startswith(OPTIMIZER_ARRAYS)},
            "ranks": self.ranks,
            "best_bleu": self.best_bleu,
            "best_loss": self.best_loss,
            "evals_since_best": self.evals_since_best,
            "lr_scale": self.lr_scale,
            "kept": list(self.kept),
            "steps_planned": self.steps_planned,
            "time_spent_s": self.time_spent_s,
        }
        return arrays, meta

    @classmethod
    def from_checkpoint(
        cls, arrays: dict[str, numpy.ndarray], meta: dict[str, Any], path: str | Path
    ) -> RunState:
        """The state a checkpoint ``path`` holds (``load_checkpoint``'s arrays and metadata); fields
        an older checkpoint lacks take their defaults, a field of the wrong kind is a CheckpointError
        naming the file and the field."""

        def number(name: str, default: Any, minimum: float = 0, integer: bool = True) -> Any:
            value = meta.get(name, default)
            if value is None and default is None and name != "step":  # optional: None is its value
                return None
            kinds = (int,) if integer else (int, float)  # what JSON holds
            if isinstance(value, bool) or not isinstance(value, kinds) or not minimum <= value < float("inf"):
                raise CheckpointError(
                    f"checkpoint {resolve_path(path)}: its metadata field {name!r} is {value!r}, expected "
                    f"{'an integer' if integer else 'a finite number'} >= {minimum:g}"
                )
            return int(value) if integer else float(value)

        run_id, kept = meta.get("run_id"), meta.get("kept", [])
        return cls(
            run_id=run_id if isinstance(run_id, str) and run_id else None,
            step=number("step", None),
            optimizer={
                **{k.removeprefix(OPTIMIZER): v for k, v in arrays.items() if k.startswith(OPTIMIZER)},
                **meta.get("optimizer", {}),
            },
            ranks=number("ranks", cls.ranks, minimum=1),
            best_bleu=number("best_bleu", cls.best_bleu, minimum=-1, integer=False),
            best_loss=number("best_loss", None, integer=False),
            evals_since_best=number("evals_since_best", cls.evals_since_best),
            lr_scale=number("lr_scale", cls.lr_scale, integer=False),
            # a name read back is trusted only as one the run writes in its own directory
            kept=tuple(
                name for name in map(str, kept if isinstance(kept, list) else []) if KEPT_NAME.fullmatch(name)
            ),
            steps_planned=number("steps_planned", None),
            time_spent_s=number("time_spent_s", None, integer=False),
        )
