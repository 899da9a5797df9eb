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
    # the gradient checker, in a folder of its own; numpy_transformer.gradcheck is now its function
    "numpy_transformer.gradcheck": "numpy_transformer.gradient_checking",
    "numpy_transformer.testing": "numpy_transformer.gradient_checking",
    "numpy_transformer.finite_differences": "numpy_transformer.gradient_checking.differences",
    "numpy_transformer.backward_contract": "numpy_transformer.gradient_checking.contract",
}


def refuse_moved(old: str) -> NoReturn:
    """Raise ModuleNotFoundError for the old module path ``old``, naming its new place."""
    raise ModuleNotFoundError(f"{old} has moved: import {MOVED[old]} instead", name=old)
