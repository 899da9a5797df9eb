"""The workbook's exercises: what an exercise is and what a drawn case is (``exercise``); each
exercise declared once, with its cases, the mistakes those cases recognise and its hints
(``layer_exercises``, ``block_exercises``; the training rungs after them, ``training_exercises``,
each rung's function with its known mistakes as keywords, ``training_mistakes``, and what a wrong
rung's numbers show where no known mistake reproduces them, ``training_symptoms``);
their order and the textbook function behind each name (``curriculum``); the recognisable mistakes'
sentences (``mistakes``)."""

from .curriculum import (
    BLOCKS,
    BY_NAME,
    EXERCISES,
    LADDER,
    OPTIONAL,
    TRAINING_BY_NAME,
    hints_of,
    textbook_function,
    unknown_exercise,
)
from .exercise import Case, Exercise
from .mistakes import SENTENCES

__all__ = [
    "BLOCKS",
    "BY_NAME",
    "EXERCISES",
    "LADDER",
    "OPTIONAL",
    "SENTENCES",
    "TRAINING_BY_NAME",
    "Case",
    "Exercise",
    "hints_of",
    "textbook_function",
    "unknown_exercise",
]
