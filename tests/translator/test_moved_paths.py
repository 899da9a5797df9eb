"""The toolkit's old module paths answer with the new place (numpy_transformer.moved), and the new
place gives what the old one did."""

import importlib
import re

import pytest

import numpy_transformer as nt
from numpy_transformer.moved import MOVED

HUGGING_FACE = {
    "numpy_transformer.translator.pretrained": (
        "load_pretrained",
        "read_config",
        "MarianTokenizer",
    ),
    "numpy_transformer.translator.export": ("export_pretrained", "export_ctranslate2", "ExportError"),
}


@pytest.mark.parametrize("old", sorted(HUGGING_FACE))
def test_an_old_module_path_names_its_new_place(old):
    new = "numpy_transformer.translator.huggingface"
    assert MOVED[old] == new
    with pytest.raises(
        ModuleNotFoundError, match=rf"^{re.escape(old)} has moved: import {re.escape(new)} instead$"
    ):
        importlib.import_module(old)
    with pytest.raises(ModuleNotFoundError):  # every time, not only the first: nothing half-made is kept
        importlib.import_module(old)
    package = importlib.import_module(new)
    assert all(callable(getattr(package, name)) for name in HUGGING_FACE[old])


def test_the_package_level_load_pretrained_is_the_new_modules():
    from numpy_transformer.translator.huggingface.loading import load_pretrained

    assert nt.load_pretrained is load_pretrained


@pytest.mark.parametrize("old", ["saved_state", "saved_settings"])
def test_the_resume_readers_name_the_one_call_that_replaced_them(old):
    from numpy_transformer.translator.run import continuing

    new = "numpy_transformer.translator.run.continuing.resumed_run"
    with pytest.raises(
        ModuleNotFoundError, match=rf"continuing.{old} has moved: import {re.escape(new)} instead$"
    ):
        getattr(continuing, old)
    assert callable(continuing.resumed_run)
