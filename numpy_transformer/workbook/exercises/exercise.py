"""What an exercise is (the backward the learner writes, its forward, the contract, its drawn cases
with the mistakes they recognise, its hints), and what a drawn case is."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy

from ...backend import Array, get_array_module


@dataclass(frozen=True)
class Exercise:
    backward: str  # the textbook's name of the backward the learner writes
    forward: str
    grads: tuple[str, ...]  # what the backward returns, in order
    signature: str  # of the backward, as the workbook writes it
    doc: str  # the workbook's docstring, the contract: receives, returns, every shape (the insight: hints)
    params: bool = False  # a block: the last of grads is a dict, dparams, with the keys of params
    cases: Callable[[numpy.random.Generator], list[Case]] = field(kw_only=True)  # drawn afresh per check
    hints: tuple[str, ...] = field(kw_only=True)  # one step further each time; the first holds the insight

    @property
    def title(self) -> str:
        return self.backward.removesuffix("_backward").replace("_", " ")


@dataclass
class Case:
    label: str
    inputs: dict[str, Any]  # the forward's keyword arguments; float64 arrays named in grads are checked
    grads: tuple[str, ...]  # what the backward returns, "" where None is expected
    seed: int | None = None  # dropout on: a fresh generator of this seed is the forward's rng at each call
    dloss: float | None = None  # a loss: the scalar upstream gradient
    factors: dict[str, list[tuple[float, str]]] = field(
        default_factory=dict
    )  # grad -> (c, key): yours = c x right
    regions: dict[str, list[tuple[Array, str]]] = field(default_factory=dict)  # grad -> (where wrong, key)
    candidates: Callable[[Any, Any], dict[str, list[tuple[Array, str]]]] | None = None  # (cache, dout) -> ...
    max_entries: int | None = None  # central differences of this many entries per tensor (all when None)


def normal(rng: numpy.random.Generator, *shape: int) -> Array:
    return get_array_module().asarray(rng.standard_normal(shape))


def away_from_zero(rng: numpy.random.Generator, *shape: int) -> Array:
    """Normal entries at least 0.1 from 0, so that a central difference never straddles a kink."""
    x = rng.standard_normal(shape)
    return get_array_module().asarray(numpy.where(numpy.abs(x) < 0.1, numpy.sign(x + 1e-12) * 0.5, x))


def random_params(rng: numpy.random.Generator, **shapes: tuple[int, ...]) -> dict[str, Array]:
    """Normal float64 parameters of the given shapes; a name ending in gamma is 1 + 0.5 * normal."""
    xp = get_array_module()
    return {
        name: xp.asarray((1 if name.endswith("gamma") else 0) + 0.5 * rng.standard_normal(shape))
        for name, shape in shapes.items()
    }
