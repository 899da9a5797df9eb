"""Gradient checking by central finite differences, for functions of arrays and for modules.

The scalar checked is L = sum(G * f(inputs)) with a random, non-uniform upstream gradient G, so
every output element contributes with a different weight. Each checked entry x_i is moved by
+-eps and dL/dx_i ~ (L(x_i + eps) - L(x_i - eps)) / (2 eps) is compared with the analytic value,
with the pass rule of ``torch.autograd.gradcheck``: |analytic - numeric| <= atol + rtol |numeric|.
Work in float64: in float32 the differences drown in rounding.

Each tensor's relative error is its largest |analytic - numeric| over the largest gradient of the
whole check. The finite-difference noise is absolute, about machine epsilon * |L| / eps and the same
for every tensor of one loss, so a tensor whose gradients are all tiny (one head attending over two
positions: largest gradient 6e-4) would otherwise report that noise (1e-9) as a 1e-6 error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy

from .backend import Array, get_array_module, to_numpy


class GradcheckError(AssertionError):
    """A gradient disagreed with its finite-difference estimate; the message says where and by how much."""


@dataclass
class TensorReport:
    """How one input or parameter fared: its worst entry and the errors there."""

    name: str
    checked: int
    worst_index: tuple[int, ...]
    analytic: float
    numeric: float
    max_abs_error: float
    relative_error: float  # max |a - n| / the largest |a| or |n| of the whole check (module docstring)
    passed: bool


@dataclass
class GradcheckResult:
    reports: list[TensorReport] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(report.passed for report in self.reports)

    @property
    def max_relative_error(self) -> float:
        return max((report.relative_error for report in self.reports), default=0.0)

    def __str__(self) -> str:
        lines = [
            f"{r.name}: {'ok' if r.passed else 'FAILED'} rel {r.relative_error:.2e} abs {r.max_abs_error:.2e} "
            f"at {r.worst_index} (analytic {r.analytic:.10g}, numeric {r.numeric:.10g}, {r.checked} entries)"
            for r in self.reports
        ]
        return "\n".join(lines)


def _entries(
    shape: tuple[int, ...], max_entries: int | None, rng: numpy.random.Generator
) -> list[tuple[int, ...]]:
    size = int(numpy.prod(shape))
    flat = (
        numpy.arange(size)
        if max_entries is None or size <= max_entries
        else rng.choice(size, max_entries, replace=False)
    )
    return [numpy.unravel_index(i, shape) for i in flat]


def gradcheck(
    loss: Callable[[], float],
    variables: Mapping[str, Array],
    analytic: Mapping[str, Array],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    max_entries: int | None = None,
    seed: int = 0,
    raise_on_failure: bool = True,
) -> GradcheckResult:
    """Compare ``analytic[name]`` with central differences of ``loss()`` in each of ``variables``.

    ``loss`` recomputes the scalar from the arrays in ``variables``, which are perturbed in place
    and restored. ``max_entries`` samples that many entries per tensor (all when None).
    On failure raises :class:`GradcheckError` naming the tensor, worst index, both values and errors.
    """
    if not (isinstance(eps, (int, float)) and math.isfinite(eps) and eps > 0):
        raise ValueError(f"eps must be a positive number, got {eps!r}")
    rng = numpy.random.default_rng(seed)
    result = GradcheckResult()
    largest = 1e-300  # the largest |analytic| or |numeric| of any tensor: the scale of relative errors
    for name, array in variables.items():
        if array.dtype != numpy.float64:
            raise TypeError(f"gradcheck needs float64 for '{name}', got {array.dtype}")
        grad = to_numpy(analytic[name])
        if grad.shape != array.shape:
            raise ValueError(f"analytic gradient of '{name}' has shape {grad.shape}, expected {array.shape}")
        indices = _entries(array.shape, max_entries, rng)
        numeric = numpy.empty(len(indices))
        for k, index in enumerate(indices):
            original = float(array[index])
            array[index] = original + eps
            plus = _scalar(loss())
            array[index] = original - eps
            minus = _scalar(loss())
            array[index] = original
            numeric[k] = (plus - minus) / (2 * eps)
        analytic_values = numpy.array([grad[index] for index in indices])
        errors = numpy.abs(analytic_values - numeric)
        worst = int(numpy.argmax(errors - (atol + rtol * numpy.abs(numeric))))
        largest = max(
            largest, numpy.abs(analytic_values).max(initial=0.0), numpy.abs(numeric).max(initial=0.0)
        )
        result.reports.append(
            TensorReport(
                name=name,
                checked=len(indices),
                worst_index=tuple(int(i) for i in indices[worst]),
                analytic=float(analytic_values[worst]),
                numeric=float(numeric[worst]),
                max_abs_error=float(errors.max(initial=0.0)),
                relative_error=0.0,
                passed=bool(numpy.all(errors <= atol + rtol * numpy.abs(numeric))),
            )
        )
    for report in result.reports:
        report.relative_error = report.max_abs_error / largest
    if raise_on_failure and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _scalar(value: Any) -> float:
    """The loss as a float; anything but one number is a TypeError naming what came back."""
    size = getattr(value, "size", 1)
    if size != 1 or isinstance(value, (str, bytes, list, tuple, dict)) or value is None:
        shape = getattr(value, "shape", type(value).__name__)
        raise TypeError(f"loss() must return one number, got {shape}")
    return float(value)


def _weighted_sum(output: Array, upstream: Array) -> float:
    return float((output * upstream).sum())


def random_upstream(shape: tuple[int, ...], seed: int = 0) -> Array:
    """A non-uniform upstream gradient G ~ N(0, 1) in float64 on the current backend."""
    return get_array_module().asarray(numpy.random.default_rng(seed + 1).standard_normal(shape))


def gradcheck_function(
    forward: Callable[..., tuple[Array, Any]],
    backward: Callable[[Array, Any], Any],
    inputs: Mapping[str, Array],
    wrt: list[str],
    seed: int = 0,
    **options: Any,
) -> GradcheckResult:
    """Check a functional pair: ``forward(**inputs) -> (out, cache)``, ``backward(dout, cache)``.

    ``wrt`` names the inputs whose gradients ``backward`` returns, in its return order (a single
    gradient may be returned bare; ``None`` entries are skipped in the list by naming them ``""``).
    """
    out, cache = forward(**inputs)
    upstream = random_upstream(out.shape, seed)
    grads = backward(upstream, cache)
    grads = grads if isinstance(grads, tuple) else (grads,)
    analytic = {name: grad for name, grad in zip(wrt, grads) if name}
    variables = {name: inputs[name] for name in analytic}
    return gradcheck(
        lambda: _weighted_sum(forward(**inputs)[0], upstream), variables, analytic, seed=seed, **options
    )


def gradcheck_module(
    module: Any,
    inputs: Mapping[str, Array],
    input_grads: Callable[[Any], Mapping[str, Array]] | None = None,
    forward: Callable[..., Array] | None = None,
    seed: int = 0,
    **options: Any,
) -> GradcheckResult:
    """Check every parameter of ``module`` (and the inputs that ``input_grads`` maps) at once.

    ``forward(**inputs)`` defaults to ``module.forward``; ``module.backward(G)`` must accumulate
    parameter gradients. ``input_grads`` turns backward's return value into {input name: grad}.
    Dropout must be off (``module.eval()``) so the function is deterministic.
    """
    run = forward or module.forward
    module.zero_grad()
    upstream = random_upstream(run(**inputs).shape, seed)
    returned = module.backward(upstream)
    analytic = {name: parameter.grad.copy() for name, parameter in module.named_parameters()}
    variables = {name: parameter.data for name, parameter in module.named_parameters()}
    if input_grads is not None:
        for name, grad in input_grads(returned).items():
            analytic[name] = grad
            variables[name] = inputs[name]
    return gradcheck(
        lambda: _weighted_sum(run(**inputs), upstream), variables, analytic, seed=seed, **options
    )
