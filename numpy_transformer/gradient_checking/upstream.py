"""The scalar a check differentiates: L = sum(G * out), with G a random, non-uniform upstream
gradient, so that every output element contributes with a different weight."""

from __future__ import annotations

from typing import Any

import numpy

from ..backend import Array, get_array_module


def random_upstream(shape: tuple[int, ...], seed: int = 0) -> Array:
    """A non-uniform upstream gradient G ~ N(0, 1) in float64 on the current backend."""
    return get_array_module().asarray(numpy.random.default_rng(seed + 1).standard_normal(shape))


def weighted_sum(output: Any, upstream: Any) -> float:
    """L = sum(G * out)."""
    return float((get_array_module().asarray(output) * upstream).sum())


def rounding_scale(output: Any, upstream: Any) -> float:
    """The scale of the rounding of L = sum(G * out): the root sum of squares of its terms (their
    rounding errors, independent from one point to the next, add up as a random walk)."""
    xp = get_array_module()
    terms = xp.asarray(output) * upstream
    return float(xp.sqrt((terms * terms).sum()))
