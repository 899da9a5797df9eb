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
    if max_entries is not None and (
        isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1
    ):
        raise ValueError(
            f"max_entries must be a positive whole number of entries to check per tensor (or None for all), "
            f"got {max_entries!r}"
        )
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
    rng = numpy.random.default_rng(seed)
    result = GradcheckResult()
    largest = 1e-300  # the largest |analytic| or |numeric| of any tensor: the scale of relative errors
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


def _weighted_sum(output: Any, upstream: Any) -> float:
    return float((get_array_module().asarray(output) * upstream).sum())


def _output_shape(output: Any, where: str) -> tuple[int, ...]:
    """The shape of what the forward returned: an array's, or () for one number (a loss)."""
    if isinstance(output, (bool, str, bytes)) or output is None:
        raise TypeError(f"{where} must return an array or a number, got {type(output).__name__}")
    if isinstance(output, (int, float, numpy.number)):
        return ()
    shape = getattr(output, "shape", None)
    if shape is None:
        raise TypeError(f"{where} must return an array or a number, got {type(output).__name__}")
    return tuple(shape)


def _gradients(grads: Any, wrt: list[str], where: str) -> dict[str, Any]:
    """Pair backward's return value with ``wrt``, refusing a missing, extra or non-array gradient."""
    if grads is None:
        raise GradcheckError(
            f"{where} returned None, expected the gradients of {[n for n in wrt if n]} (a tuple, or one array)"
        )
    if isinstance(grads, list):
        raise TypeError(
            f"{where} returned a list of {len(grads)}, expected a tuple of the gradients of {wrt} "
            "(or one array)"
        )
    grads = grads if isinstance(grads, tuple) else (grads,)
    if len(grads) < len(wrt):
        missing = [name for name in wrt[len(grads) :] if name]
        raise GradcheckError(
            f"{where} returned {len(grads)} gradient(s) for wrt {wrt}: no gradient for "
            f"{', '.join(map(repr, missing))}, which would go unchecked"
        )
    if any(grad is not None for grad in grads[len(wrt) :]):  # a None past wrt: nothing left unchecked
        raise GradcheckError(
            f"{where} returned {len(grads)} values but wrt names {len(wrt)} ({wrt}): the extra "
            f"{sum(g is not None for g in grads[len(wrt) :])} would go unchecked; name every returned gradient in wrt "
            '("" for one not to check)'
        )
    analytic = {}
    for name, grad in zip(wrt, grads):
        if not name:
            continue
        if grad is None:
            raise GradcheckError(f"{where} returned None for the gradient of '{name}': it would go unchecked")
        if not hasattr(grad, "shape"):
            raise TypeError(
                f"{where} returned a {type(grad).__name__} for the gradient of '{name}', expected an array"
            )
        analytic[name] = grad
    return analytic


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
    returned = forward(**inputs)
    if not (isinstance(returned, tuple) and len(returned) == 2):
        raise TypeError(
            f"forward must return (output, cache), got {type(returned).__name__}"
            + (f" of {len(returned)}" if isinstance(returned, tuple) else "")
        )
    out, cache = returned
    shape = _output_shape(out, "forward")
    upstream = random_upstream(shape, seed)
    # a forward returning one number (a loss) gets its upstream gradient as one number too
    grads = backward(float(upstream) if shape == () else upstream, cache)
    analytic = _gradients(grads, wrt, "backward")
    unknown = [name for name in analytic if name not in inputs]
    if unknown:
        raise ValueError(f"wrt names {unknown[0]!r}, which is not one of the inputs {list(inputs)}")
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
    upstream = random_upstream(_output_shape(run(**inputs), "the module's forward"), seed)
    returned = module.backward(upstream)
    # a gradient never accumulated is zero (made so on first use), and checked as zero
    analytic = {name: parameter.grad.copy() for name, parameter in module.named_parameters()}
    variables = {name: parameter.data for name, parameter in module.named_parameters()}
    if input_grads is not None:
        mapped = input_grads(returned)
        if not isinstance(mapped, Mapping):
            raise TypeError(f"input_grads must return {{input name: gradient}}, got {type(mapped).__name__}")
        for name, grad in mapped.items():
            if name not in inputs:
                raise ValueError(f"input_grads names {name!r}, which is not one of the inputs {list(inputs)}")
            if name in variables:
                raise ValueError(f"input_grads names {name!r}, which is also a parameter's name")
            analytic[name] = grad
            variables[name] = inputs[name]
    return gradcheck(
        lambda: _weighted_sum(run(**inputs), upstream), variables, analytic, seed=seed, **options
    )
