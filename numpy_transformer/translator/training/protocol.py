"""The Trainer as its loop and its keeper of checkpoints see it: a Protocol, so that they need not
import the Trainer, which imports them (Trainer.fit runs a Loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ...model import Transformer
from ..config import ModelConfig, TrainConfig
from ..distributed import Ranks
from ..run.state import EvaluationState, RunState
from .budget import TimeBudget
from .stopping import StopRequests


class Training(Protocol):
    """What Loop and Keeper read and change of the run they serve (Trainer's attributes and methods)."""

    model: Transformer
    config: TrainConfig
    ranks: Ranks
    step: int
    stop: str | None
    requests: StopRequests
    budget: TimeBudget | None
    evaluations: EvaluationState
    schedule: Any
    run_id: str
    resumed_from: Path | None

    @property
    def steps(self) -> int: ...
    @property
    def model_config(self) -> ModelConfig: ...
    def train_step(self) -> dict[str, float]: ...
    def learning_rate(self, step: int) -> float: ...
    def plan_steps(self, steps: int) -> None: ...
    def dev_metrics(self, model: Transformer, examples: int = 0) -> dict[str, Any]: ...
    def run_state(self) -> RunState: ...
    def save(self, out: str | Path, state: RunState | None = None) -> Path: ...
