"""A forward/backward pair checked in one call: :func:`assert_gradients`. Its stages: the inputs
made float64 copies and ``wrt`` settled (:func:`values_to_check`), the backward's contract
(:func:`~numpy_transformer.gradient_checking.contract.check_backward_contract`), the forward's
determinism and precision, central differences
(:func:`~numpy_transformer.gradient_checking.gradcheck`), and where kinks crowd a tensor (or
``kinks="nudge"`` asks) the whole check again off them (:meth:`PairCheck.off_the_kinks`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy

from ..backend import get_array_module
from .arguments import check_mapping, check_names, check_options, in_float64, kind_of
from .checker import gradcheck
from .contract import check_backward_contract, check_forward
from .differences import step_at
from .projections import DIRECTIONS
from .report import GradcheckError, GradcheckResult
from .upstream import rounding_scale, weighted_sum

NUDGE_SEED = 104729  # added to the seed for the amounts that move entries off their kinks


def values_to_check(inputs: Mapping[str, Any], wrt: list[str] | None) -> tuple[dict[str, Any], list[str]]:
    """The inputs with every floating array a float64 copy, and ``wrt`` (every floating input when
    None), once each name of it is a float64 array with an entry to check."""
    if wrt is not None:
        check_names("wrt", wrt, "input names, in the order backward returns their gradients")
    if not inputs:
        raise ValueError(
            "inputs is empty: expected {name: array} of the forward's arguments, at least one floating"
        )
    values = in_float64(inputs)
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
            kinds = ", ".join(f"{name!r} is {kind_of(value)}" for name, value in values.items())
            raise TypeError(
                f"inputs hold no floating array to check ({kinds}): a gradient is checked for real "
                "floating arrays only; pass one as numpy.asarray(x, dtype=float)"
            )
        raise ValueError(f"wrt: nothing to check, expected the names of floating inputs, got {wrt!r}")
    for name in filter(None, wrt):
        value: Any = values[name]
        if getattr(value, "dtype", None) != numpy.float64:
            raise TypeError(
                f"inputs[{name!r}] is {kind_of(value)}: a gradient is checked for a floating array only"
            )
        if value.size == 0:
            raise ValueError(
                f"inputs[{name!r}] is empty (shape {value.shape}): it has no entry to check, "
                "expected an array with at least one entry"
            )
    return values, wrt


@dataclass(frozen=True)
class PairCheck:
    """One check of a forward/backward pair: the backward's contract, the forward's, then central
    differences of sum(G * out) in the checked ``inputs`` (which it moves, and moves off their kinks
    where it must, checking again there). ``options`` go to
    :func:`~numpy_transformer.gradient_checking.gradcheck`."""

    forward: Callable[..., tuple[Any, Any]]
    backward: Callable[[Any, Any], Any]
    inputs: dict[str, Any]
    wrt: list[str]
    seed: int
    overwrites: Sequence[str]
    nondet_tol: float
    options: dict[str, Any]

    def run(self) -> GradcheckResult:
        options = self.options
        check_options(
            options.get("eps", 1e-6),
            options.get("atol", 1e-5),
            options.get("rtol", 1e-3),
            options.get("max_entries"),
            options.get("mode", "auto"),
            options.get("kinks", "subgradient"),
            options.get("directions", DIRECTIONS),
            options.get("picture"),
        )
        forward, inputs = self.forward, self.inputs
        analytic, upstream = check_backward_contract(
            forward, self.backward, inputs, self.wrt, self.seed, self.overwrites, self.nondet_tol
        )
        variables = {name: inputs[name] for name in analytic}
        first = check_forward(
            lambda: forward(**inputs)[0], variables, "forward", "forward broke its contract"
        )
        result = gradcheck(
            lambda: weighted_sum(forward(**inputs)[0], upstream),
            variables,
            analytic,
            seed=self.seed,
            noise_scale=rounding_scale(first, upstream),
            **{**options, "raise_on_failure": False},
        )
        crowded = [report.name for report in result.reports if report.many_kinks]
        wrong = [report for report in result.reports if not report.passed and not report.many_kinks]
        kinks = options.get("kinks", "subgradient")
        if not wrong and kinks != "fail" and (crowded or (kinks == "nudge" and result.kinks)):
            return self.off_the_kinks(result, crowded)
        if options.get("raise_on_failure", True):
            result.raise_if_failed()
        return result

    def off_the_kinks(self, result: GradcheckResult, crowded: list[str]) -> GradcheckResult:
        """Move the kinks' entries off them, each by its own amount (ties broken), and check there:
        every entry of a ``crowded`` tensor by 1000 to 2000 eps, each kink of ``result`` elsewhere by
        1000 steps and more."""
        eps = float(self.options.get("eps", 1e-6))
        rng = numpy.random.default_rng(self.seed + NUDGE_SEED)
        xp = get_array_module()
        for name in crowded:
            array = self.inputs[name]
            shape = tuple(array.shape)
            amounts = xp.asarray(rng.uniform(1000, 2000, shape) * rng.choice([-1.0, 1.0], shape))
            array[...] = array + eps * amounts * xp.maximum(xp.abs(array), 1.0)
        kinked = [kink for kink in result.kinks if kink.name not in crowded]
        for k, kink in enumerate(kinked):
            array = self.inputs[kink.name]
            value = float(array[kink.index])
            array[kink.index] = value + step_at(value, eps) * 1000 * (1 + k / len(kinked))
        asked = self.options.get("kinks") == "nudge"
        again = replace(self, options={**self.options, "kinks": "subgradient"}).run()
        for report in again.reports:
            if report.name in crowded:
                report.note = (
                    f"non-differentiable entries (kinks) throughout '{report.name}', too many to locate one by "
                    "one: checked at the input moved off them (each entry by its own 1000 to 2000 eps)"
                    + (", as kinks='nudge' asks" if asked else ", as kinks='nudge' would")
                    + (f"; {report.note}" if report.note else "")
                )
        return again


def assert_gradients(
    forward: Callable[..., tuple[Any, Any]],
    backward: Callable[[Any, Any], Any],
    inputs: Mapping[str, Any],
    wrt: list[str] | None = None,
    seed: int = 0,
    overwrites: Sequence[str] = (),
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check ``backward`` against central differences of ``forward`` and return the per-gradient report.

    ``forward(**inputs) -> (out, cache)``, ``out`` an array or one number (a loss, such as
    ``cross_entropy_forward``'s float, whose backward then gets a float ``dloss``);
    ``backward(dout, cache)`` returns the gradients of the inputs named by ``wrt`` in that order, as
    a tuple (one may be returned bare). ``wrt`` defaults to every floating array of ``inputs``, in
    their order. Every name of ``wrt`` is checked: a backward returning fewer gradients than ``wrt``
    names, or more, fails naming the missing ones or the count of the extra (name a returned value
    ``""`` in ``wrt`` to leave it unchecked on purpose). Floating inputs are checked as float64
    copies, whatever their dtype: the caller's arrays are never written into.

    Before any difference is taken, the contract of the pair
    (:func:`~numpy_transformer.gradient_checking.contract.check_backward_contract`):
    ``overwrites`` names what the backward writes into on purpose ("dout", "cache" or an input's
    name), ``nondet_tol`` the difference allowed between two calls with the same arguments.
    ``options`` go to :func:`~numpy_transformer.gradient_checking.gradcheck` (``atol``, ``rtol``,
    ``eps``, ``max_entries``, ``mode``, ``kinks``, ``directions``, ``picture``); with
    ``kinks="nudge"``, inputs found at a non-differentiable point are moved by 1000 eps away from
    it and the whole check is run again there. Raises
    :class:`~numpy_transformer.gradient_checking.report.GradcheckError` on a wrong gradient or a
    broken contract, a TypeError or ValueError naming the argument for inputs it cannot check.
    """
    if not callable(forward) or not callable(backward):
        raise TypeError(
            f"forward and backward must be callable, got {type(forward).__name__}, {type(backward).__name__}"
        )
    check_mapping("inputs", inputs, "each forward argument's name to its value")
    values, checked = values_to_check(inputs, wrt)
    name = getattr(backward, "__name__", "backward")
    try:
        return PairCheck(forward, backward, values, checked, seed, overwrites, nondet_tol, options).run()
    except GradcheckError as error:
        raise GradcheckError(f"{name}: {error}") from None
