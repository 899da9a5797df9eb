"""The workbook's exercises in order, by name, and the textbook function behind each name."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from ... import functional
from .. import blocks, optimiser
from .block_exercises import BLOCK_EXERCISES
from .exercise import Exercise
from .layer_exercises import LAYER_EXERCISES
from .training_exercises import TRAINING_EXERCISES, TrainingExercise

EXERCISES: tuple[Exercise, ...] = LAYER_EXERCISES + BLOCK_EXERCISES  # the backwards


BY_NAME = {exercise.backward: exercise for exercise in EXERCISES}


TRAINING_BY_NAME: dict[str, TrainingExercise] = {exercise.name: exercise for exercise in TRAINING_EXERCISES}


LADDER: tuple[str, ...] = tuple(e.backward for e in EXERCISES) + tuple(
    TRAINING_BY_NAME
)  # every rung, in order


def hints_of(name: str) -> tuple[str, ...]:
    """The hints of the rung ``name``, a backward's or a training rung's."""
    return TRAINING_BY_NAME[name].hints if name in TRAINING_BY_NAME else BY_NAME[name].hints


OPTIONAL = frozenset(
    {"multi_head_latent_attention_backward", "multi_head_latent_self_attention_backward"}
)  # the latent attentions: a block calls them only where its parameters are a latent attention's (learn
# train --attention mla); a multi-head model never does, so no rung above them waits on them


BLOCKS = (
    frozenset(e.backward for e in EXERCISES if e.params) | frozenset(e.forward for e in EXERCISES if e.params)
)  # the exercises whose textbook is numpy_transformer.workbook.blocks (learn train trains them in its encoder-decoder)


def textbook_function(name: str) -> Callable:
    """The textbook's function ``name``: of functional.py, of blocks.py for the blocks, of the workbook's
    optimiser.py for the training rungs."""
    if name in TRAINING_BY_NAME:
        return optimiser.TEXTBOOK[name]
    return getattr(blocks if name in BLOCKS else functional, name)


def unknown_exercise(name: str) -> str:
    """The refusal of a name that is no exercise: the nearest names first (did you mean)."""
    every = list(LADDER)
    near = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
    if not near and not name.endswith("_backward"):
        near = difflib.get_close_matches(f"{name}_backward", every, n=3, cutoff=0.5)
    guess = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{name!r} is not an exercise{guess} (the exercises: {', '.join(every)})"
