"""The old import paths answer with the new place (numpy_transformer.moved), and the new place gives
what the old one did."""

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


def _tombstones() -> list[str]:
    """The old module paths that answer with their new place (a module of two lines each), less
    those whose package holds a name of its own there (numpy_transformer.gradcheck, a function)."""
    old_modules = []
    for old in sorted(MOVED):
        package, _, module = old.rpartition(".")
        if importlib.util.find_spec(package) is None:
            continue
        parent = importlib.import_module(package)
        if not hasattr(parent, "__path__") or module in vars(parent):  # a name moved out of a module
            continue
        if importlib.util.find_spec(old) is not None:
            old_modules.append(old)
    return old_modules


def test_the_old_module_paths_are_found():
    assert "numpy_transformer.translator.checkpoint" in _tombstones() and len(_tombstones()) >= 15


@pytest.mark.parametrize("old", _tombstones())
def test_an_old_module_path_imported_from_its_package_names_its_new_place(old):
    """`from numpy_transformer.translator import checkpoint`, the usual spelling, is told where the
    module went, as `import numpy_transformer.translator.checkpoint` is (not "cannot import name")."""
    package, _, module = old.rpartition(".")
    expected = rf"^{re.escape(old)} has moved: import {re.escape(MOVED[old])} instead$"
    with pytest.raises(ModuleNotFoundError, match=expected):
        exec(f"from {package} import {module}", {})


@pytest.mark.parametrize("old", ["saved_state", "saved_settings"])
def test_the_resume_readers_name_the_one_call_that_replaced_them(old):
    from numpy_transformer.translator.run import continuing

    new = "numpy_transformer.translator.run.continuing.resumed_run"
    moved = rf"continuing.{old} has moved: import {re.escape(new)} instead$"
    with pytest.raises(AttributeError, match=moved):
        getattr(continuing, old)
    with pytest.raises(ModuleNotFoundError, match=moved):
        exec(f"from numpy_transformer.translator.run.continuing import {old}", {})
    assert callable(continuing.resumed_run) and not hasattr(continuing, old)


# the names that moved out of a module that stays (its __getattr__ answers them); every other old
# path of MOVED was a module
MODULES_NAMES_MOVED_OUT_OF = (
    "numpy_transformer.layers",
    "numpy_transformer.translator.config",
    "numpy_transformer.translator.run.continuing",
    "numpy_transformer.translator.tokenizers",
)
NAMES_MOVED_OUT = sorted(old for old in MOVED if old.rpartition(".")[0] in MODULES_NAMES_MOVED_OUT_OF)


def test_the_names_moved_out_of_a_module_are_found():
    assert "numpy_transformer.translator.config.check_value" in NAMES_MOVED_OUT and len(NAMES_MOVED_OUT) == 18


@pytest.mark.parametrize("old", sorted(set(MOVED) - set(NAMES_MOVED_OUT)))
def test_every_old_module_path_imported_names_its_new_place(old):
    """`import numpy_transformer.blocks` as `import numpy_transformer.translator.checkpoint`: each old
    module path is a module that says where it went, never "No module named"."""
    expected = rf"^{re.escape(old)} has moved: import {re.escape(MOVED[old])} instead$"
    with pytest.raises(ModuleNotFoundError, match=expected):
        importlib.import_module(old)


@pytest.mark.parametrize("old", NAMES_MOVED_OUT)
def test_a_name_moved_out_of_a_module_is_absent_to_hasattr_and_named_to_the_rest(old):
    """hasattr answers False; the attribute, getattr and `from module import name` name the new place."""
    package, _, name = old.rpartition(".")
    module = importlib.import_module(package)
    expected = rf"^{re.escape(old)} has moved: import {re.escape(MOVED[old])} instead$"
    assert not hasattr(module, name)
    with pytest.raises(AttributeError, match=expected):
        getattr(module, name)
    with pytest.raises(ModuleNotFoundError, match=expected):
        exec(f"from {package} import {name}", {})
