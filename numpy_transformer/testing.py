"""Gradient checks for your own pytest suite, one line each.

    from numpy_transformer.testing import assert_gradients, assert_module_gradients, shapes

    assert_gradients(gelu_forward, gelu_backward, {"x": x})        # a forward/backward pair
    assert_module_gradients(my_layer, {"x": x}, lambda dx: {"x": dx})   # a Module's parameters (and inputs)

Both compare the analytic gradients with float64 central differences
(:mod:`numpy_transformer.gradcheck`): floating inputs are checked in float64 whatever their dtype,
and a failure raises :class:`~numpy_transformer.gradcheck.GradcheckError` (an AssertionError, so
pytest shows it as a failed assertion) naming each gradient, its worst entry, the analytic and
numeric values there and the errors. Before any difference is taken they check the contract of
the backward: nothing it was given written into (``dout``, the inputs, the cache), gradients in
their input's dtype, shape and array library, the same bits for the same arguments, no returned
gradient overwritten by a later call, and a forward that neither writes into its inputs nor
computes in lower precision than float64. At a non-differentiable point (relu or abs at 0, a max
with ties) an analytic value between the one-sided slopes passes and is reported. Above 4096
entries the check projects on random directions (every entry at once) and bisects a failure down
to the wrong entries.

Hypothesis strategies (Hypothesis is a test dependency, imported only when one is called):
``shapes()`` of small array shapes, ``arrays()`` of finite float64 values of a chosen magnitude
(optionally kept away from a function's kinks), ``broadcastable_shapes()`` of shape pairs that
broadcast together, ``ids()`` of integer token ids within a vocabulary, and ``masks()`` of
boolean arrays.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy

from .backend import get_array_module
from .backward_contract import check_names
from .gradcheck import GradcheckError, GradcheckResult, gradcheck_function, gradcheck_module

__all__ = [
    "GradcheckError",
    "arrays",
    "assert_gradients",
    "assert_module_gradients",
    "broadcastable_shapes",
    "ids",
    "masks",
    "shapes",
]


def _in_float64(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """Floating arrays as float64 copies of themselves; anything else (ids, masks, numbers) as given."""
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


def assert_gradients(
    forward: Callable[..., tuple[Any, Any]],
    backward: Callable[[Any, Any], Any],
    inputs: Mapping[str, Any],
    wrt: list[str] | None = None,
    seed: int = 0,
    **options: Any,
) -> GradcheckResult:
    """Check ``backward`` against central differences of ``forward`` and return the per-gradient report.

    ``forward(**inputs) -> (out, cache)``, ``out`` an array or one number (a loss, such as
    ``cross_entropy_forward``'s float, whose backward then gets a float ``dloss``);
    ``backward(dout, cache)`` returns the gradients of the inputs named by ``wrt`` in that order, as
    a tuple (one may be returned bare). ``wrt`` defaults to every floating array of ``inputs``, in
    their order. Every name of ``wrt`` is checked: a backward returning fewer gradients than ``wrt``
    names, or more, fails naming the missing ones or the count of the extra (name a returned value
    ``""`` in ``wrt`` to leave it unchecked on purpose). ``options`` go to
    :func:`~numpy_transformer.gradcheck.gradcheck` (``atol``, ``rtol``, ``eps``, ``max_entries``).
    Raises GradcheckError on a wrong gradient, a TypeError or ValueError naming the argument for
    inputs it cannot check.
    """
    if not callable(forward) or not callable(backward):
        raise TypeError(
            f"forward and backward must be callable, got {type(forward).__name__}, {type(backward).__name__}"
        )
    if not isinstance(inputs, Mapping):
        raise TypeError(
            f"inputs must map each forward argument's name to its value, got {type(inputs).__name__}"
        )
    if wrt is not None:
        check_names("wrt", wrt, "input names, in the order backward returns their gradients")
    values = _in_float64(inputs)
    wrt_given = wrt is not None
    if wrt is None:
        wrt = [name for name, value in values.items() if getattr(value, "dtype", None) == numpy.float64]
    wrt = list(wrt)
    missing = [name for name in wrt if name and name not in values]
    if missing:
        raise ValueError(f"wrt names {missing[0]!r}, which is not one of the inputs {list(values)}")
    repeated = sorted({name for name in wrt if name and wrt.count(name) > 1})
    if repeated:
        raise ValueError(f"wrt names {repeated[0]!r} more than once: each input's gradient is checked once")
    if not [name for name in wrt if name]:
        numbers = [name for name, value in values.items() if isinstance(value, (float, list, tuple))]
        if numbers:
            raise TypeError(
                f"inputs[{numbers[0]!r}] is a {type(values[numbers[0]]).__name__}, not an array: the checker "
                f"moves the entries of floating arrays; pass numpy.asarray(...) to check its gradient"
            )
        if not wrt_given and values:  # wrt not given: name what the inputs are instead of the empty wrt
            kinds = ", ".join(f"{name!r} is {_kind(value)}" for name, value in values.items())
            raise TypeError(
                f"inputs hold no floating array to check ({kinds}): a gradient is checked for real "
                "floating arrays only; pass one as numpy.asarray(x, dtype=float)"
            )
        raise ValueError(f"wrt: nothing to check, expected the names of floating inputs, got {wrt!r}")
    for name in filter(None, wrt):
        value: Any = values[name]
        if getattr(value, "dtype", None) != numpy.float64:
            raise TypeError(
                f"inputs[{name!r}] is {type(value).__name__}"
                f"{' of ' + str(value.dtype) if hasattr(value, 'dtype') else ''}: "
                "a gradient is checked for a floating array only"
            )
        if value.size == 0:
            raise ValueError(
                f"inputs[{name!r}] is empty (shape {value.shape}): it has no entry to check, "
                "expected an array with at least one entry"
            )
    name = getattr(backward, "__name__", "backward")
    try:
        return gradcheck_function(forward, backward, values, wrt, seed=seed, **options)
    except GradcheckError as error:
        raise GradcheckError(f"{name}: {error}") from None


def assert_module_gradients(
    module: Any,
    inputs: Mapping[str, Any],
    input_grads: Callable[[Any], Mapping[str, Any]] | None = None,
    seed: int = 0,
    unchecked: tuple[str, ...] = (),
    **options: Any,
) -> GradcheckResult:
    """Check every parameter of a Module (and the inputs ``input_grads`` maps from its backward's
    return value) against central differences of its forward, with dropout off (``eval()``).

    The module's parameters must be float64 (build it with ``dtype="float64"``); floating inputs
    are converted. The contract is checked as by :func:`assert_gradients` (inputs and the upstream
    gradient left as given, gradients in their array's dtype, shape and library, determinism, no
    returned gradient overwritten later); ``options`` are those of :func:`assert_gradients`.
    Every floating input must be checked: one that ``input_grads`` maps no gradient for fails the
    call by name, unless ``unchecked`` names it (a float mask, say).
    Raises GradcheckError naming each wrong gradient.
    """
    if isinstance(module, type) or not callable(getattr(module, "named_parameters", None)):
        what = (
            f"the class {module.__name__}, not one of its instances"
            if isinstance(module, type)
            else type(module).__name__
        )
        raise TypeError(f"module must be a Module (numpy_transformer.module.Module) to check, got {what}")
    if not isinstance(inputs, Mapping):
        raise TypeError(
            f"inputs must map each forward argument's name to its value, got {type(inputs).__name__}"
        )
    if input_grads is not None and not callable(input_grads):
        raise TypeError(
            "input_grads must be a function of the backward's return value giving {input name: gradient}, "
            f"got {type(input_grads).__name__}"
        )
    if (
        isinstance(unchecked, str)
        or not isinstance(unchecked, (tuple, list, set, frozenset))
        or not all(isinstance(name, str) for name in unchecked)
    ):
        raise TypeError(f"unchecked must be a tuple (or a set) of input names, got {unchecked!r}")
    unknown = [name for name in unchecked if name not in inputs]
    if unknown:
        raise ValueError(f"unchecked names {unknown[0]!r}, which is not one of the inputs {list(inputs)}")
    for parameter_name, parameter in module.named_parameters():
        if parameter.data.dtype != numpy.float64:
            raise TypeError(
                f"module parameter {parameter_name!r} is {parameter.data.dtype}: build the module with "
                "dtype='float64' to check it"
            )
    values = _in_float64(inputs)
    # checked with dropout off; the module is given back as it came: each part's mode, every gradient
    modes = [(part, part.training) for part in module.modules()] if hasattr(module, "modules") else []
    owners = {id(p.owner): p.owner for _, p in module.named_parameters() if hasattr(p, "owner")}
    grads = [(p, p.grad.copy()) for p in owners.values()]
    module.eval()
    try:
        result = gradcheck_module(module, values, input_grads, seed=seed, **options)
    except GradcheckError as error:
        raise GradcheckError(f"{type(module).__name__}: {error}") from None
    finally:
        for part, training in modes:
            object.__setattr__(part, "training", training)  # as Module.train sets it
        for parameter, grad in grads:
            parameter.grad[...] = grad
    checked = {report.name for report in result.reports}
    skipped = [
        name
        for name, value in values.items()
        if getattr(value, "dtype", None) == numpy.float64 and name not in checked and name not in unchecked
    ]
    if skipped:
        raise GradcheckError(
            f"{type(module).__name__}: no gradient checked for the floating input(s) "
            f"{', '.join(map(repr, skipped))}: map it from the backward's return value with input_grads "
            f"(lambda dx: {{{skipped[0]!r}: dx}}), or name it in unchecked=(...) to leave it out on purpose"
        )
    return result


def _kind(value: Any) -> str:
    dtype = getattr(value, "dtype", None)
    return f"{type(value).__name__} of {dtype}" if dtype is not None else f"a {type(value).__name__}"


def _shape(label: str, shape: Any, empty: str | None = None) -> Any:
    """``shape`` as given to a strategy: None, a Hypothesis strategy, or a shape (a whole number or a
    tuple of them), checked now rather than where Hypothesis draws from it; ``empty``: why a side of
    0 is refused (None: allowed)."""
    if shape is None or hasattr(shape, "example"):  # a strategy of shapes is Hypothesis's to check
        return shape
    sides = (shape,) if isinstance(shape, (int, numpy.integer)) and not isinstance(shape, bool) else shape
    if not isinstance(sides, (tuple, list)) or not all(
        isinstance(side, (int, numpy.integer)) and not isinstance(side, bool) for side in sides
    ):
        raise TypeError(
            f"{label}: shape must be a tuple of whole numbers, a strategy of shapes or None, got {shape!r}"
        )
    least = 0 if empty is None else 1
    if any(side < least for side in sides):
        reason = f": {empty}" if empty and any(side == 0 for side in sides) else ""
        raise ValueError(f"{label}: every side of shape must be at least {least}, got {tuple(sides)}{reason}")
    return tuple(int(side) for side in sides)


def _allowed(magnitude: float, kinks: tuple[float, ...], margin: float) -> list[tuple[float, float]]:
    """The closed intervals of [-magnitude, magnitude] at least ``margin`` from every kink."""
    intervals = [(-magnitude, magnitude)]
    for kink in sorted(kinks):
        low, high = kink - margin, kink + margin
        intervals = [
            piece
            for a, b in intervals
            for piece in ((a, min(b, low)), (max(a, high), b))
            if piece[0] <= piece[1]
        ]
    return intervals


def shapes(min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 5) -> Any:
    """A Hypothesis strategy of array shapes (Hypothesis is a test dependency: pip install hypothesis).

    ``min_side`` is at least 1: an array with a side of 0 has no entry whose gradient could be checked.
    """
    for label, value, least in (("min_dims", min_dims, 0), ("max_dims", max_dims, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{label} must be a whole number >= {least}, got {value!r}")
    for label, value in (("min_side", min_side), ("max_side", max_side)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"{label} must be a whole number >= 1 (an array with a side of 0 has no entry to check), "
                f"got {value!r}"
            )
    if max_dims < min_dims or max_side < min_side:
        raise ValueError(
            f"shapes: the bounds are crossed, got min_dims={min_dims}, max_dims={max_dims}, "
            f"min_side={min_side}, max_side={max_side}"
        )
    try:
        from hypothesis.extra.numpy import array_shapes
    except ImportError as error:
        raise ImportError(
            "numpy_transformer.testing.shapes needs Hypothesis: pip install hypothesis"
        ) from error
    return array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def _hypothesis(what: str) -> Any:
    try:
        import hypothesis.extra.numpy as hnp
        import hypothesis.strategies as st
    except ImportError as error:
        raise ImportError(
            f"numpy_transformer.testing.{what} needs Hypothesis: pip install hypothesis"
        ) from error
    return hnp, st


def _whole(label: str, value: Any, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{label} must be a whole number >= {least}, got {value!r}")


def arrays(
    shape: Any = None,
    magnitude: float = 1.0,
    away_from: tuple[float, ...] = (),
    margin: float = 1e-3,
) -> Any:
    """A Hypothesis strategy of float64 arrays with finite values in [-magnitude, magnitude].

    ``shape``: a shape, a strategy of shapes, or None (``shapes()``). ``away_from``: a function's
    kinks (``(0.0,)`` for relu or abs): every value is kept at least ``margin`` from each, so a
    finite difference never straddles one.
    """
    if (
        isinstance(magnitude, bool)
        or not isinstance(magnitude, (int, float))
        or not (math.isfinite(magnitude) and magnitude > 0)
    ):
        raise ValueError(f"magnitude must be a finite positive number, got {magnitude!r}")
    if (
        isinstance(margin, bool)
        or not isinstance(margin, (int, float))
        or not (math.isfinite(margin) and margin >= 0)
    ):
        raise ValueError(f"margin must be a finite non-negative number, got {margin!r}")
    if not isinstance(away_from, (tuple, list)) or not all(
        isinstance(k, (int, float)) and not isinstance(k, bool) and math.isfinite(k) for k in away_from
    ):
        raise TypeError(f"away_from must be a tuple of finite numbers (the kinks), got {away_from!r}")
    shape = _shape("arrays", shape, "an array with a side of 0 has no entry to check")
    hnp, st = _hypothesis("arrays")
    kinks = tuple(float(k) for k in away_from)
    # drawn from what is left of [-magnitude, magnitude] around the kinks: a value moved off one kink
    # could land past magnitude or beside another
    intervals = _allowed(float(magnitude), kinks, float(margin)) if kinks else [(-magnitude, magnitude)]
    if not intervals:
        raise ValueError(
            f"arrays: no value of [-{magnitude}, {magnitude}] is {margin} away from every kink of away_from="
            f"{away_from!r}: give a larger magnitude or a smaller margin"
        )
    elements = st.one_of(
        [st.floats(a, b, allow_nan=False, allow_infinity=False, width=64) for a, b in intervals]
    ).filter(lambda v: all(abs(v - k) >= margin for k in kinks))  # rounding at an interval's end
    return hnp.arrays(numpy.float64, shapes() if shape is None else shape, elements=elements)


def broadcastable_shapes(min_dims: int = 1, max_dims: int = 3, max_side: int = 4) -> Any:
    """A Hypothesis strategy of pairs of shapes that broadcast together, such as ((3, 1, 4), (2, 4))
    or ((5,), (1,)): for a binary layer's forward and the reduction its backward must do."""
    _whole("min_dims", min_dims, 0)
    _whole("max_dims", max_dims, 0)
    _whole("max_side", max_side, 1)
    if max_dims < min_dims:
        raise ValueError(f"broadcastable_shapes: max_dims {max_dims} < min_dims {min_dims}")
    hnp, _ = _hypothesis("broadcastable_shapes")
    return hnp.mutually_broadcastable_shapes(
        num_shapes=2, min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=max_side
    ).map(lambda shapes: tuple(shapes.input_shapes))


def ids(vocab: int, shape: Any = None) -> Any:
    """A Hypothesis strategy of int64 id arrays with every id in [0, vocab): token ids for an
    embedding or a loss. ``shape``: a shape, a strategy of shapes, or None (``shapes()``)."""
    _whole("vocab", vocab, 1)
    if vocab > numpy.iinfo(numpy.int64).max:
        raise ValueError(f"vocab must be at most {numpy.iinfo(numpy.int64).max} (int64 ids), got {vocab}")
    shape = _shape("ids", shape)
    hnp, st = _hypothesis("ids")
    return hnp.arrays(numpy.int64, shapes() if shape is None else shape, elements=st.integers(0, vocab - 1))


def masks(shape: Any = None, at_least_one: bool = True) -> Any:
    """A Hypothesis strategy of boolean masks; with ``at_least_one`` each has a True entry (an
    all-masked attention row has no softmax to differentiate)."""
    if not isinstance(at_least_one, bool):
        raise TypeError(f"at_least_one must be True or False, got {at_least_one!r}")
    shape = _shape("masks", shape, "an empty mask has no True entry" if at_least_one else None)
    hnp, st = _hypothesis("masks")
    strategy = hnp.arrays(numpy.bool_, shapes() if shape is None else shape, elements=st.booleans())
    return strategy.filter(lambda m: bool(m.any())) if at_least_one else strategy
