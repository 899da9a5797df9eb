"""Kernels: tuned stand-ins for the textbook's functions, one module per array backend.

The model never calls :mod:`numpy_transformer.functional` directly; it calls the functions of
``ops``, which are either the textbook's or, where the backend in use has a kernel module (NumPy:
:mod:`numpy_transformer.kernels.cpu`) and ``set_kernels("fast")`` is in effect (the default),
that module's function of the same name. A kernel has the same signature and contract as the
textbook function it stands in for, and tests/model/test_kernels.py proves the two equal in float64;
every function a backend does not tune is the textbook's.

    set_kernels("reference")   # the whole model, Adam included, runs on the textbook
    set_kernels("fast")        # the backend's kernels where it has them (the default)
    set_kernels("learner")     # the textbook, with a learner's own functions where they wrote them

The third set is filled by ``set_learner_functions``; empty, it is the textbook. A switch for a while
is one context manager: ``with using_kernels("reference"):``, or ``with using_kernels(functions):``
for the learner set of those functions (``numpy-transformer learn train`` runs the model so on the
functions of a learner's workbook, :mod:`numpy_transformer.workbook`).

The environment variable ``NUMPY_TRANSFORMER_KERNELS=reference`` chooses the textbook for a whole
run without changing its code.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from .. import functional
from ..backend import backend_name, environment_choice, on_backend_change

KERNEL_SETS = ("fast", "reference", "learner")
ENV_VAR = "NUMPY_TRANSFORMER_KERNELS"
BACKEND_KERNELS = {"numpy": "cpu", "cupy": "cuda"}  # array backend -> its kernel module in this package
_selected: str | None = None  # None until chosen: then the environment variable, or "fast"
_learner: dict[str, Callable] = {}  # the "learner" set's functions in place of the textbook's
_learner_update: Any = None  # the "learner" set's Adam update (see adam_kernel), None: the textbook's


def textbook_functions() -> dict[str, Callable]:
    """Every public function of functional.py, by name."""
    return {
        name: value
        for name, value in vars(functional).items()
        if inspect.isfunction(value) and value.__module__ == functional.__name__ and not name.startswith("_")
    }


def backend_kernels() -> Any:
    """The kernel module of the array backend in use, or None where it has none."""
    module = BACKEND_KERNELS.get(backend_name())
    if module is None:
        return None
    name = f"{__name__}.{module}"
    # the layers ask at every step (fused_layer, backward_into): a loaded module is a dictionary read
    return sys.modules.get(name) or importlib.import_module(name)


def kernel_functions(module: Any) -> dict[str, Callable]:
    """The functions of a kernel module that stand in for a textbook function of the same name."""
    textbook = textbook_functions()
    return {
        name: value
        for name, value in vars(module).items()
        if name in textbook and inspect.isfunction(value) and value.__module__ == module.__name__
    }


class _Ops:
    """The functions the model calls. The first lookup after a change fills the instance with the
    selected table, so every later call is a plain attribute read."""

    def __getattr__(self, name: str) -> Callable:
        table = textbook_functions()
        module = backend_kernels() if get_kernels() == "fast" else None
        if module is not None:
            table.update(kernel_functions(module))
        if get_kernels() == "learner":
            table.update(_learner)
        self.__dict__.update(table)
        if name not in table:
            raise AttributeError(f"no textbook function or kernel named {name!r}")
        return table[name]


ops = _Ops()
on_backend_change(ops.__dict__.clear)


def set_learner_functions(functions: dict[str, Callable]) -> None:
    """The functions the ``"learner"`` kernel set runs in place of the textbook's of the same name.

    Each name must be a textbook function's (a ValueError names any other); the set takes effect
    with ``set_kernels("learner")``.
    """
    textbook = textbook_functions()
    for name, function in functions.items():
        if name not in textbook:
            raise ValueError(f"learner function {name!r} is not a textbook function's name")
        if not callable(function):
            raise TypeError(f"learner function {name!r} must be callable, got {type(function).__name__}")
    _learner.clear()
    _learner.update(functions)
    ops.__dict__.clear()


def set_kernels(name: str) -> None:
    """Run the model on ``"fast"`` kernels (the backend's, where it has them), the ``"reference"``
    textbook, or the ``"learner"`` set (the textbook with set_learner_functions' functions)."""
    global _selected
    if name not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {KERNEL_SETS}, got {name!r}")
    _selected = name
    ops.__dict__.clear()


def get_kernels() -> str:
    """``"fast"`` or ``"reference"``: what set_kernels chose (else NUMPY_TRANSFORMER_KERNELS, else "fast")."""
    global _selected
    if _selected is None:
        _selected = environment_choice(ENV_VAR, KERNEL_SETS, "fast")
    return _selected


@contextmanager
def using_kernels(kernels: str | Mapping[str, Callable], adam_update: Any = None) -> Iterator[None]:
    """Inside the block the model runs on ``kernels``: a set's name (see set_kernels), or functions by
    textbook name, run as the ``"learner"`` set (see set_learner_functions), with ``adam_update`` (a
    class of optim.TextbookAdamUpdate's contract, or None for it) as that set's Adam update; the
    previous choice, and the learner set's previous functions and update, are restored afterwards."""
    global _learner_update
    previous, previous_learner, previous_update = get_kernels(), dict(_learner), _learner_update
    if isinstance(kernels, str):
        set_kernels(kernels)
    else:
        set_learner_functions(dict(kernels))
        _learner_update = adam_update
        set_kernels("learner")
    try:
        yield
    finally:
        set_kernels(previous)
        set_learner_functions(previous_learner)
        _learner_update = previous_update


def adam_kernel() -> Any:
    """The backend's tuned Adam update (a class, see kernels.cpu.AdamUpdate), the learner set's where it
    has one (using_kernels' adam_update), or None for the textbook's."""
    if get_kernels() == "learner":
        return _learner_update
    module = backend_kernels() if get_kernels() == "fast" else None
    return getattr(module, "AdamUpdate", None)


def fused_layer(name: str) -> Any:
    """The backend's fused kernel for a layer's steps across textbook functions (kernels.cuda.fused_layer:
    ``"dropout_add"``, ``"dropout_add_norm"``, ``"layer_norm_add_dropout"``, ``"bias_relu"``,
    ``"bias_silu"``, ``"bias_gelu_tanh"``), or None where it has none switched on: the layer runs the
    textbook's steps, as on NumPy and in the reference and learner sets."""
    module = backend_kernels() if get_kernels() == "fast" else None
    choose = getattr(module, "fused_layer", None)
    return None if choose is None else choose(name)


def backward_into(name: str) -> Any:
    """The backend's backward of the layer ``name`` (kernels.cuda.backward_into: ``"linear"``,
    ``"layer_norm"``, ``"attention"``) that writes the parameters' gradients into arrays it is given
    (a gradient's own array while it reads as zero: no copy into it after the product), or None where
    the backend has none: the layer hands the gradients of ``ops`` to its parameters' accumulate(), as
    on NumPy and in the reference and learner sets."""
    module = backend_kernels() if get_kernels() == "fast" else None
    choose = getattr(module, "backward_into", None)
    return None if choose is None else choose(name)
