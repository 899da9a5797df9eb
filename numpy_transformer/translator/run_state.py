"""The state of a training run that its checkpoints carry besides the model: one typed object.

A checkpoint holds the model (its configuration and weights), the run's settings, its task's
recipe and vocabularies, and this: where the run stands. ``RunState.to_checkpoint`` writes it and
``RunState.from_checkpoint`` reads it back, the one place each way; checkpoints saved before a
field existed load with that field's default. Dropout masks need no state of their own: they come
from generators seeded by (seed, step, rank or micro-batch), so the step alone replays them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy

from .checkpoint import CheckpointError, resolve_path, split_prefix

KEPT_NAME = re.compile(r"step-\d{7}\.npz")  # exactly the names a run writes (RunFiles.save_evaluated)
OPTIMIZER_ARRAYS = ("m.", "v.")  # the optimiser state's arrays (Adam's moments), stored under optim/


@dataclass(frozen=True)
class RunState:
    """Where a run stands: everything a --resume needs besides the model, its settings and its task."""

    run_id: str | None  # who the run is (average refuses another run's checkpoints); None: saved before ids
    step: int  # optimiser steps taken
    optimizer: dict[str, Any] = field(repr=False)  # Adam's state_dict: moments (host arrays), step, lr, ...
    ranks: int = 1  # the MPI ranks that trained it: a run resumes on as many
    best_bleu: float = -1.0  # the best dev BLEU so far (its checkpoint: best.npz)
    evals_since_best: int = 0  # evaluations since it (patience, plateau cuts)
    lr_scale: float = 1.0  # the plateau cuts' multiplier of the schedule
    kept: tuple[str, ...] = ()  # the evaluation checkpoints (step-*.npz) the run wrote and keeps
    steps_planned: int | None = None  # the run's last step as planned when it was saved
    time_spent_s: float | None = None  # a time-budgeted run's time so far (None: not budgeted)

    def to_checkpoint(self) -> tuple[dict[str, numpy.ndarray], dict[str, Any]]:
        """The checkpoint's arrays (optim/...) and metadata fields that hold this state."""
        arrays = {f"optim/{k}": v for k, v in self.optimizer.items() if k.startswith(OPTIMIZER_ARRAYS)}
        meta = {
            "run_id": self.run_id,
            "step": self.step,
            "optimizer": {k: v for k, v in self.optimizer.items() if not k.startswith(OPTIMIZER_ARRAYS)},
            "ranks": self.ranks,
            "best_bleu": self.best_bleu,
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
            optimizer={**split_prefix(arrays, "optim"), **meta.get("optimizer", {})},
            ranks=number("ranks", 1, minimum=1),
            best_bleu=number("best_bleu", -1.0, minimum=-1, integer=False),
            evals_since_best=number("evals_since_best", 0),
            lr_scale=number("lr_scale", 1.0, integer=False),
            # a name read back is trusted only as one the run writes in its own directory
            kept=tuple(
                name for name in map(str, kept if isinstance(kept, list) else []) if KEPT_NAME.fullmatch(name)
            ),
            steps_planned=number("steps_planned", None),
            time_spent_s=number("time_spent_s", None, integer=False),
        )
