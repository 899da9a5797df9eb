"""Training a translation model: the Trainer, its step, its loop and what the loop keeps.

    trainer = Trainer.create(TrainConfig(task="copy", steps=500), ModelConfig(d_model=64, N=2))
    trainer.fit("runs/copy")               # log, evaluate and checkpoint into a run directory
    trainer = Trainer.resume("runs/copy")  # continues exactly where the checkpoint stopped

The rooms: the Trainer and the optimiser step it takes (``trainer``), what a step is made of
besides the model's forward and backward (``step``: schedule, optimiser, TrainingDiverged); the
loop of Trainer.fit (``loop``), what asks it to stop (``stopping``), the dev evaluations and the
checkpoints they keep and average (``keeping``), what the loop and the keeper ask of a Trainer
(``protocol``); the time budget (``budget``); the memory a step needs (``memory``). The run on disk
(checkpoints, run state, run directory) is :mod:`numpy_transformer.translator.run`'s; the ranks'
share of each step is :mod:`numpy_transformer.translator.distributed`'s.
"""

from .budget import PAUSE, PLAN_AFTER, TimeBudget
from .memory import check_memory, training_memory
from .step import TrainingDiverged, make_optimizer, make_schedule
from .stopping import STOP_MESSAGES
from .trainer import Trainer

__all__ = [
    "PAUSE",
    "PLAN_AFTER",
    "STOP_MESSAGES",
    "TimeBudget",
    "Trainer",
    "TrainingDiverged",
    "check_memory",
    "make_optimizer",
    "make_schedule",
    "training_memory",
]
