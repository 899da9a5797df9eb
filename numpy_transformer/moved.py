"""Import paths that moved, old -> new, in one table.

An old module path that no longer exists is a two-line module that calls ``refuse_moved(__name__)``:
importing it raises ``ModuleNotFoundError`` naming where the module went, so code written against an
earlier version is told what to change. The workbook reads the same table to tell a learner whose
file imports an old path. A public name that moved out of a module that stays is answered by that
module's ``__getattr__`` (refuse_moved_name): told where it went, and absent to ``hasattr``.
"""

from __future__ import annotations

import dis
import sys
from typing import NoReturn

MOVED: dict[str, str] = {
    "numpy_transformer.blocks": "numpy_transformer.workbook.blocks",
    "numpy_transformer.learn": "numpy_transformer.workbook",
    "numpy_transformer.translator.export": "numpy_transformer.translator.huggingface",
    "numpy_transformer.translator.pretrained": "numpy_transformer.translator.huggingface",
    "numpy_transformer.translator.checkpoint": "numpy_transformer.translator.run.checkpoint",
    "numpy_transformer.translator.run_directory": "numpy_transformer.translator.run.directory",
    "numpy_transformer.translator.run_state": "numpy_transformer.translator.run.state",
    "numpy_transformer.translator.config.SettingTypeError": "numpy_transformer.settings.SettingTypeError",
    "numpy_transformer.translator.config.check_value": "numpy_transformer.settings.check_value",
    "numpy_transformer.translator.config.expected": "numpy_transformer.settings.expected",
    "numpy_transformer.translator.config.flag_of": "numpy_transformer.settings.flag_of",
    "numpy_transformer.translator.config.setting": "numpy_transformer.settings.setting",
    "numpy_transformer.translator.config.TASK_SIZES": "numpy_transformer.presets.SMALL",
    "numpy_transformer.workbook.block_exercises": "numpy_transformer.workbook.exercises.block_exercises",
    "numpy_transformer.workbook.curriculum": "numpy_transformer.workbook.exercises.curriculum",
    "numpy_transformer.workbook.exercise": "numpy_transformer.workbook.exercises.exercise",
    "numpy_transformer.workbook.layer_exercises": "numpy_transformer.workbook.exercises.layer_exercises",
    "numpy_transformer.workbook.mistakes": "numpy_transformer.workbook.exercises.mistakes",
    "numpy_transformer.workbook.causes": "numpy_transformer.workbook.grading.causes",
    "numpy_transformer.workbook.diagnosis": "numpy_transformer.workbook.grading.diagnosis",
    "numpy_transformer.workbook.recording": "numpy_transformer.workbook.grading.recording",
    "numpy_transformer.workbook.verdicts": "numpy_transformer.workbook.grading.verdicts",
    # the gradient checker, in a folder of its own; numpy_transformer.gradcheck is now its function
    "numpy_transformer.gradcheck": "numpy_transformer.gradient_checking",
    "numpy_transformer.testing": "numpy_transformer.gradient_checking",
    "numpy_transformer.finite_differences": "numpy_transformer.gradient_checking.differences",
    "numpy_transformer.backward_contract": "numpy_transformer.gradient_checking.contract",
    # the blocks and stacks the layers compose into, in a module of their own
    "numpy_transformer.layers.Decoder": "numpy_transformer.stacks.Decoder",
    "numpy_transformer.layers.DecoderBlock": "numpy_transformer.stacks.DecoderBlock",
    "numpy_transformer.layers.Encoder": "numpy_transformer.stacks.Encoder",
    "numpy_transformer.layers.EncoderBlock": "numpy_transformer.stacks.EncoderBlock",
    "numpy_transformer.layers.ResidualConnection": "numpy_transformer.stacks.ResidualConnection",
    # tokenizer.json, a Hugging Face format, among the others
    "numpy_transformer.translator.tokenizers.CHAR_PATTERN": (
        "numpy_transformer.translator.huggingface.tokenizer_json.CHAR_PATTERN"
    ),
    "numpy_transformer.translator.tokenizers.TokenizerExportError": (
        "numpy_transformer.translator.huggingface.tokenizer_json.TokenizerExportError"
    ),
    "numpy_transformer.translator.tokenizers.from_huggingface": (
        "numpy_transformer.translator.huggingface.tokenizer_json.from_huggingface"
    ),
    "numpy_transformer.translator.tokenizers.huggingface_tokenizer": (
        "numpy_transformer.translator.huggingface.tokenizer_json.huggingface_tokenizer"
    ),
    "numpy_transformer.translator.tokenizers.library_bpe": (
        "numpy_transformer.translator.huggingface.tokenizer_json.library_bpe"
    ),
    # a resumed run is read back in one call
    "numpy_transformer.translator.run.continuing.saved_state": (
        "numpy_transformer.translator.run.continuing.resumed_run"
    ),
    "numpy_transformer.translator.run.continuing.saved_settings": (
        "numpy_transformer.translator.run.continuing.resumed_run"
    ),
}


def refuse_moved(old: str) -> NoReturn:
    """Raise ModuleNotFoundError for the old module path ``old``, naming its new place. The error
    carries no module ``name``: ``from package import old_module`` would take one equal to the path
    it asked for as a module that does not exist, and answer "cannot import name" instead."""
    raise ModuleNotFoundError(f"{old} has moved: import {MOVED[old]} instead")


class MovedNameError(AttributeError):
    """A public name that moved out of a module that stays, looked up there: an AttributeError (so
    that ``hasattr`` answers False) whose message names the new place."""


def refuse_moved_name(module: str, name: str) -> NoReturn:
    """Raise for ``module.name``, a name of MOVED, looked up by the caller of ``module``'s
    ``__getattr__``, naming its new place. ``from module import name`` gets ModuleNotFoundError:
    Python's import statement swaps an AttributeError for "cannot import name", dropping its message.
    Any other lookup (``module.name``, ``getattr``, ``hasattr``) gets MovedNameError."""
    old = f"{module}.{name}"
    message = f"{old} has moved: import {MOVED[old]} instead"
    looking = sys._getframe(2)  # 0: here, 1: the module's __getattr__, 2: the code that looked it up
    if looking.f_code.co_code[looking.f_lasti] == dis.opmap["IMPORT_FROM"]:
        raise ModuleNotFoundError(message)
    raise MovedNameError(message)
