"""The checker's own arguments, refused before any work: each refusal names the argument, the value
given and what was expected."""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Mapping
from typing import Any

import numpy

from ..backend import get_array_module
from .report import GradcheckError

MODES = ("auto", "exhaustive", "fast")


KINKS = ("subgradient", "fail", "nudge")


def check_options(
    eps: Any,
    atol: Any,
    rtol: Any,
    max_entries: Any,
    mode: Any,
    kinks: Any,
    directions: Any,
    picture: Any = None,
) -> None:
    """The options of :func:`~numpy_transformer.gradient_checking.gradcheck`, whoever passes them on."""
    for label, value, positive in (("eps", eps, True), ("atol", atol, False), ("rtol", rtol, False)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{label} must be a real number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ValueError(
                f"{label} must be a finite {'positive' if positive else 'non-negative'} number, got {value!r}"
            )
    if max_entries is not None and (
        isinstance(max_entries, bool) or not isinstance(max_entries, numbers.Integral) or max_entries < 1
    ):
        raise ValueError(
            f"max_entries must be a positive whole number of entries to check per tensor (or None for all), "
            f"got {max_entries!r}"
        )
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if kinks not in KINKS:
        raise ValueError(f"kinks must be one of {KINKS}, got {kinks!r}")
    if isinstance(directions, bool) or not isinstance(directions, numbers.Integral) or directions < 1:
        raise ValueError(f"directions must be a whole number >= 1 of random projections, got {directions!r}")
    if picture is not None and not isinstance(picture, (str, os.PathLike)):
        raise TypeError(f"picture must be a file name (str or Path) or None, got {type(picture).__name__}")
    if mode == "fast" and max_entries is not None:
        raise ValueError(
            f"max_entries={max_entries} samples entries for mode='exhaustive'; mode='fast' checks every entry "
            "by projection: give one or the other"
        )


def check_variables(variables: Any, analytic: Any) -> None:
    """``variables`` and ``analytic`` map the same names to float64 arrays of the same shapes, none empty."""
    check_mapping("variables", variables, "each name to its array")
    check_mapping("analytic", analytic, "each name to its array")
    unchecked = [name for name in variables if name not in analytic]
    if unchecked:
        raise GradcheckError(
            f"no analytic gradient for {', '.join(map(repr, unchecked))}: every variable must be checked"
        )
    extra = [name for name in analytic if name not in variables]
    if extra:
        raise GradcheckError(
            f"analytic gradient for {', '.join(map(repr, extra))}, which is not one of the variables "
            f"{list(variables)}: it would go unchecked"
        )
    if not variables:
        raise ValueError("variables is empty: nothing to check, expected at least one array")
    for name, array in variables.items():
        if getattr(array, "dtype", None) != numpy.float64:
            got = getattr(array, "dtype", type(array).__name__)
            raise TypeError(f"gradcheck needs float64 for '{name}' (a float64 array), got {got}")
        if array.size == 0:
            raise ValueError(
                f"'{name}' is empty (shape {array.shape}): it has no entry to check, expected at least one"
            )
        if analytic[name] is None:
            raise GradcheckError(f"the analytic gradient of '{name}' is None: it would go unchecked")
        if getattr(analytic[name], "shape", None) is None:
            raise TypeError(
                f"analytic['{name}'] must be an array (the gradient of '{name}'), got {kind_of(analytic[name])}"
            )
        if not getattr(getattr(array, "flags", None), "writeable", True):
            raise ValueError(
                f"variables['{name}'] is read-only: gradcheck moves its entries in place (each given back its "
                f"value), expected a writeable array: pass a copy ({name}.copy()) that loss() reads"
            )
        if tuple(analytic[name].shape) != tuple(array.shape):
            raise ValueError(
                f"analytic gradient of '{name}' has shape {tuple(analytic[name].shape)}, expected {array.shape}"
            )


def check_names(label: str, names: Any, what: str, unique: bool = False) -> None:
    """TypeError unless ``names`` is a list or tuple of strings (``what`` says what they name): a bare
    string would be iterated as its characters, each taken for a name; ValueError for a name given
    twice when ``unique`` (a non-empty one: "" leaves a returned value unchecked)."""
    if isinstance(names, str):
        raise TypeError(
            f"{label} must be a list of {what}, got the str {names!r} (its characters would be taken as "
            f"names): write [{names!r}] for one"
        )
    if not isinstance(names, (list, tuple)):
        raise TypeError(f"{label} must be a list of {what}, got {type(names).__name__} {names!r}")
    odd = [name for name in names if not isinstance(name, str)]
    if odd:
        raise TypeError(f"{label} must be a list of {what}, got {type(odd[0]).__name__} {odd[0]!r} in it")
    repeated = [name for k, name in enumerate(names) if name and name in names[:k]]
    if unique and repeated:
        raise ValueError(
            f"{label} names {repeated[0]!r} more than once: each input's gradient is checked once"
        )


def check_overwrites(overwrites: Any, inputs: Mapping[str, Any]) -> None:
    """``overwrites`` names what a backward writes into on purpose: "dout", "cache" or an input."""
    if isinstance(overwrites, str) or not isinstance(overwrites, (list, tuple, set, frozenset)):
        kind = "the str" if isinstance(overwrites, str) else type(overwrites).__name__
        raise TypeError(
            f"overwrites must be a tuple of names ('dout', 'cache', or an input's), got {kind} {overwrites!r}"
        )
    if not all(isinstance(n, str) for n in overwrites):
        raise TypeError(
            f"overwrites must be a tuple of names ('dout', 'cache', or an input's), got {overwrites!r}"
        )
    unknown = [n for n in overwrites if n not in ("dout", "cache") and n not in inputs]
    if unknown:
        raise ValueError(
            f"overwrites names {unknown[0]!r}, expected 'dout', 'cache' or one of the inputs {list(inputs)}"
        )


def check_nondet_tol(nondet_tol: Any) -> None:
    if (
        isinstance(nondet_tol, bool)
        or not isinstance(nondet_tol, numbers.Real)
        or not (math.isfinite(nondet_tol) and float(nondet_tol) >= 0)
    ):
        raise ValueError(f"nondet_tol must be a finite non-negative number, got {nondet_tol!r}")


def check_mapping(label: str, value: Any, what: str) -> None:
    """TypeError unless ``value`` is a mapping (a dict of names)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{label} must map {what}, got {type(value).__name__}")


def check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, numpy.integer)) or seed < 0:
        raise (
            ValueError if isinstance(seed, (int, numpy.integer)) and not isinstance(seed, bool) else TypeError
        )(
            f"seed must be a whole number >= 0 (it seeds the random upstream gradient and directions), got {seed!r}"
        )


def kind_of(value: Any) -> str:
    """What ``value`` is, for a message: "ndarray of int64", "a float"."""
    dtype = getattr(value, "dtype", None)
    return f"{type(value).__name__} of {dtype}" if dtype is not None else f"a {type(value).__name__}"


def in_float64(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Floating arrays as float64 copies of themselves (so that the check never writes into the
    caller's arrays); anything else (ids, masks, numbers) as given. A floating array of another
    array library than the backend's is refused by name."""
    xp = get_array_module()
    backend = "numpy" if xp is numpy else str(getattr(xp, "__name__", "cupy"))
    converted = {}
    for name, value in inputs.items():
        dtype = getattr(value, "dtype", None)
        floating = dtype is not None and numpy.issubdtype(numpy.dtype(str(dtype)), numpy.floating)
        if floating and not isinstance(value, numpy.generic):
            library = "numpy" if isinstance(value, numpy.ndarray) else type(value).__module__.split(".")[0]
            library = "cupy" if library.startswith("cupy") else library
            on_backend = isinstance(value, numpy.ndarray) if xp is numpy else isinstance(value, xp.ndarray)
            if not on_backend:
                raise TypeError(
                    f"inputs[{name!r}] is a {library} array ({type(value).__name__}) but the array backend is "
                    f"{backend}: "
                    + (
                        "call numpy_transformer.backend.set_backend('cupy') before checking CuPy arrays"
                        if xp is numpy
                        else f"pass {backend} arrays ({backend}.asarray(x)), or set_backend('numpy') for NumPy ones"
                    )
                )
        converted[name] = xp.asarray(value, dtype=xp.float64).copy() if floating else value
    return converted
