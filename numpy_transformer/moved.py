"""Import paths that moved, old -> new, in one table.

An old module path that no longer exists is a two-line module that calls ``refuse_moved(__name__)``:
importing it raises ``ModuleNotFoundError`` naming where the module went, so code written against an
earlier version is told what to change. The workbook reads the same table to tell a learner whose
file imports an old path.
"""

from __future__ import annotations

from typing import NoReturn

MOVED: dict[str, str] = {
    "numpy_transformer.blocks": "numpy_transformer.workbook.blocks",
    "numpy_transformer.learn": "numpy_transformer.workbook",
    "numpy_transformer.workbook.block_exercises": "numpy_transformer.workbook.exercises.block_exercises",
    "numpy_transformer.workbook.curriculum": "numpy_transformer.workbook.exercises.curriculum",
    "numpy_transformer.workbook.exercise": "numpy_transformer.workbook.exercises.exercise",
    "numpy_transformer.workbook.layer_exercises": "numpy_transformer.workbook.exercises.layer_exercises",
    "numpy_transformer.workbook.mistakes": "numpy_transformer.workbook.exercises.mistakes",
    "numpy_transformer.workbook.causes": "numpy_transformer.workbook.grading.causes",
    "numpy_transformer.workbook.diagnosis": "numpy_transformer.workbook.grading.diagnosis",
    "numpy_transformer.workbook.recording": "numpy_transformer.workbook.grading.recording",
    "numpy_transformer.workbook.verdicts": "numpy_transformer.workbook.grading.verdicts",
}


def refuse_moved(old: str) -> NoReturn:
    """Raise ModuleNotFoundError for the old module path ``old``, naming its new place."""
    raise ModuleNotFoundError(f"{old} has moved: import {MOVED[old]} instead", name=old)
