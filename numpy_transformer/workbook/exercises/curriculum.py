"""The workbook's exercises in order, by name, and the textbook function behind each name."""

from __future__ import annotations

import difflib
from collections.abc import Callable

from ... import functional
from .. import blocks
from .block_exercises import BLOCK_EXERCISES
from .exercise import Exercise
from .layer_exercises import LAYER_EXERCISES

EXERCISES: tuple[Exercise, ...] = LAYER_EXERCISES + BLOCK_EXERCISES


BY_NAME = {exercise.backward: exercise for exercise in EXERCISES}


OPTIONAL = frozenset(
    {"multi_head_latent_attention_backward", "multi_head_latent_self_attention_backward"}
)  # the latent attentions: a block calls them only where its parameters are a latent attention's (learn
# train --attention mla); a multi-head model never does, so no rung above them waits on them


BLOCKS = (
    frozenset(e.backward for e in EXERCISES if e.params) | frozenset(e.forward for e in EXERCISES if e.params)
)  # the exercises whose textbook is numpy_transformer.workbook.blocks (learn train trains them in its encoder-decoder)


def textbook_function(name: str) -> Callable:
    """The textbook's function ``name``: of functional.py, or of blocks.py for the blocks."""
    return getattr(blocks if name in BLOCKS else functional, name)


def unknown_exercise(name: str) -> str:
    """The refusal of a name that is no exercise: the nearest names first (did you mean)."""
    every = [e.backward for e in EXERCISES]
    near = difflib.get_close_matches(name, every, n=3, cutoff=0.5)
    if not near and not name.endswith("_backward"):
        near = difflib.get_close_matches(f"{name}_backward", every, n=3, cutoff=0.5)
    guess = f"; did you mean {' or '.join(near)}?" if near else ""
    return f"{name!r} is not an exercise{guess} (the exercises: {', '.join(every)})"
