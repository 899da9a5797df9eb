"""Hypothesis strategies for gradient checks in your own test suite (Hypothesis is a test
dependency, imported only when a strategy is made: pip install hypothesis).

    from hypothesis import given
    from numpy_transformer.gradient_checking import assert_gradients
    from numpy_transformer.gradient_checking.strategies import arrays

    @given(arrays(away_from=(0.0,)))
    def test_relu(x):
        assert_gradients(relu_forward, relu_backward, {"x": x})

``shapes()`` of small array shapes, ``arrays()`` of finite float64 values of a chosen magnitude
(optionally kept away from a function's kinks), ``broadcastable_shapes()`` of shape pairs that
broadcast together, ``ids()`` of integer token ids within a vocabulary, and ``masks()`` of
boolean arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy

__all__ = ["arrays", "broadcastable_shapes", "ids", "masks", "shapes"]


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
            "numpy_transformer.gradient_checking.strategies.shapes needs Hypothesis: pip install hypothesis"
        ) from error
    return array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def _hypothesis(what: str) -> Any:
    try:
        import hypothesis.extra.numpy as hnp
        import hypothesis.strategies as st
    except ImportError as error:
        raise ImportError(
            f"numpy_transformer.gradient_checking.strategies.{what} needs Hypothesis: pip install hypothesis"
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
