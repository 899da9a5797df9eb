"""Gradient checking by central finite differences: :func:`gradcheck`, of a scalar loss in named arrays.

The scalar checked is L = sum(G * f(inputs)) with a random, non-uniform upstream gradient G, so
every output element contributes with a different weight. Each checked entry x_i is moved by
+-h, h = eps max(1, |x_i|), and dL/dx_i ~ (L(x_i + h) - L(x_i - h)) / (2 h) is compared with the
analytic value, with the pass rule of ``torch.autograd.gradcheck``, |analytic - numeric| <= atol' +
rtol |numeric|, where atol' is atol scaled down to the largest |gradient| of the check when that is
below 1, but not below the rounding of the difference, 16 eps_mach T / h with T the larger of
|L| and sqrt(sum (G * out)^2).
Work in float64: in float32 the differences drown in rounding.

Each tensor's relative error is its largest |analytic - numeric| over the largest gradient of the
whole check. The finite-difference noise is absolute, about machine epsilon * |L| / eps and the same
for every tensor of one loss, so a tensor whose gradients are all tiny (one head attending over two
positions: largest gradient 6e-4) would otherwise report that noise (1e-9) as a 1e-6 error.

Non-differentiable points. Where an entry fails, its one-sided slopes (L(x_i + eps) - L(x_i)) / eps
and (L(x_i) - L(x_i - eps)) / eps are compared at eps and 2 eps: a smooth curve's gap between them
is eps L'' and doubles with the step, and its central differences at both steps agree; a kink's gap
stays, or grows other than twofold, or the central differences differ. Tied kink entries (equal
values) are also moved together, and the sum of their analytic values must match that derivative.
At a kink the analytic value passes when it lies between the two slopes (a subgradient: relu or abs
at 0, a max with ties), and the report says so.

Two modes. ``exhaustive`` moves every entry (two forward calls each) and names the worst
(:mod:`~numpy_transformer.gradient_checking.differences`). ``fast`` checks directional derivatives:
for a random direction u over a tensor with |u_i| >= 1 (a random sign times 1 + |N(0, 1)|),
sum(analytic * u) against (L(x + eps u) - L(x - eps u)) / (2 eps), two forward calls for every entry
at once, so one wrong entry among millions shifts the sum by at least its whole error; a failing
projection is bisected down to the wrong entries, which are then checked one by one and named
(:mod:`~numpy_transformer.gradient_checking.projections`). ``auto`` (the default) is exhaustive up to
``AUTO_EXHAUSTIVE_ENTRIES`` entries in all, fast above.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy

from ..backend import Array, get_array_module
from .arguments import check_options, check_seed, check_variables
from .contract import first_not_finite
from .differences import Tolerances, check_every_entry, entries_to_check, loss_value, numeric_entries
from .picture import draw_errors
from .projections import DIRECTIONS, check_by_projections
from .report import GradcheckResult, TensorReport, failed_tensor

AUTO_EXHAUSTIVE_ENTRIES = 4096  # mode="auto": every entry up to this many in all, projections above


def resolved_mode(mode: str, max_entries: int | None, variables: Mapping[str, Array]) -> str:
    """``mode`` with "auto" decided: exhaustive when entries are sampled or few, fast above."""
    if mode != "auto":
        return mode
    total = sum(int(array.size) for array in variables.values())
    return "exhaustive" if max_entries is not None or total <= AUTO_EXHAUSTIVE_ENTRIES else "fast"


def not_finite_report(
    loss: Callable[[], float], name: str, array: Array, analytic: Array, base: float, eps: float
) -> TensorReport | None:
    """The failed report of a tensor where no comparison can be made (an input, its analytic
    gradient or the loss not finite), or None. Where the analytic gradient is not finite and the
    loss is, the numeric derivative at that entry is computed and shown beside it."""
    size = int(array.size)
    if (where := first_not_finite(array)) is not None:
        count, index, value = where
        note = f"the input is not finite at {index}: {value} ({count} of {size} entries)"
        return failed_tensor(name, size, index, math.nan, math.nan, note)
    if (where := first_not_finite(get_array_module().asarray(analytic))) is not None:
        count, index, value = where
        numeric = (
            float(numeric_entries(loss, array, [index], eps).numeric[0]) if math.isfinite(base) else math.nan
        )
        note = f"the analytic gradient is not finite at {index}: {value} ({count} of {size} entries)"
        return failed_tensor(name, size, index, value, numeric, note)
    if not math.isfinite(base):
        note = f"the loss is not finite at the point checked ({base}): no derivative of it can be taken"
        return failed_tensor(name, size, (), math.nan, math.nan, note)
    return None


def largest_gradient(analytic: Mapping[str, Array], numerics: Mapping[str, Array]) -> float:
    """The largest |analytic| or finite |numeric| of the whole check: the scale of relative errors."""
    largest = 1e-300
    for grad in analytic.values():
        largest = max(largest, float(get_array_module().abs(grad).max()))
    for numeric in numerics.values():
        largest = max(largest, float(numpy.abs(numeric[numpy.isfinite(numeric)]).max(initial=0.0)))
    return largest


def set_relative_errors(reports: list[TensorReport], largest: float) -> None:
    """Each report's relative error: its largest absolute error over ``largest``, or the fast mode's
    own relative error where the error is spread over the tensor."""
    for report in reports:
        if math.isfinite(report.max_abs_error):
            report.relative_error = (
                report.fixed_relative if report.fixed_relative is not None else report.max_abs_error / largest
            )


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
    mode: str = "auto",
    kinks: str = "subgradient",
    directions: int = DIRECTIONS,
    picture: str | Path | None = None,
    noise_scale: float | None = None,
) -> GradcheckResult:
    """Compare ``analytic[name]`` with central differences of ``loss()`` in each of ``variables``.

    ``loss`` recomputes the scalar from the arrays in ``variables``, which are perturbed in place
    and restored. The step at an entry x is ``eps * max(1, |x|)``. ``max_entries`` samples that
    many entries per tensor (all when None; it implies the exhaustive mode). ``mode``:
    "exhaustive" (every entry), "fast" (``directions`` random projections per tensor, a failure
    bisected to the wrong entries) or "auto" (exhaustive up to ``AUTO_EXHAUSTIVE_ENTRIES``
    entries in all). ``kinks``: at a non-differentiable entry "subgradient" passes an analytic
    value between the one-sided slopes and reports the entry, "fail" fails it (``"nudge"`` acts as
    "subgradient" here; :func:`~numpy_transformer.gradient_checking.assert_gradients` moves such
    inputs). ``picture``: on failure, a PNG of the error over each failing tensor is saved there
    (needs matplotlib) and the message names it. ``noise_scale``: the scale of the loss's rounding,
    the root sum of squares of the terms it adds (sqrt(sum (G * out)^2)); |loss| when None (and
    never below it). A gradient or a loss that is not finite fails, named. On failure raises
    :class:`~numpy_transformer.gradient_checking.report.GradcheckError` naming the tensor, worst
    index, both values and errors (or, with ``raise_on_failure=False``, returns the result).
    """
    if not callable(loss):
        raise TypeError(
            f"loss must be a function of no arguments returning the scalar, got {type(loss).__name__} {loss!r}"
        )
    check_options(eps, atol, rtol, max_entries, mode, kinks, directions, picture)
    check_seed(seed)
    check_variables(variables, analytic)
    mode = resolved_mode(mode, max_entries, variables)
    rng = numpy.random.default_rng(seed)
    result = GradcheckResult()
    base = loss_value(loss())
    scale = max(abs(base), float(noise_scale or 0.0)) if math.isfinite(base) else math.inf
    result.reports = [
        report
        for name, array in variables.items()
        if (report := not_finite_report(loss, name, array, analytic[name], base, eps)) is not None
    ]
    checked = {
        name: array for name, array in variables.items() if name not in {r.name for r in result.reports}
    }
    tolerances = Tolerances(eps, atol, rtol)
    differences = {}  # the exhaustive mode's central differences, by tensor: taken before any is judged
    if mode == "exhaustive":
        for name, array in checked.items():
            entries = entries_to_check(tuple(array.shape), max_entries, rng)
            differences[name] = numeric_entries(loss, array, entries, eps)
    largest = largest_gradient(
        {name: analytic[name] for name in checked}, {n: d.numeric for n, d in differences.items()}
    )
    for name, array in checked.items():
        if name in differences:
            report, tensor_scale = check_every_entry(
                loss, name, array, analytic[name], base, tolerances, kinks, differences[name], scale, largest
            )
        else:
            report, tensor_scale = check_by_projections(
                loss, name, array, analytic[name], base, tolerances, rng, kinks, directions, scale, largest
            )
        largest = max(largest, tensor_scale)
        result.reports.append(report)
    set_relative_errors(result.reports, largest)
    if not result.passed and picture is not None:
        result.picture = draw_errors(result, variables, analytic, Path(picture))
    if raise_on_failure:
        result.raise_if_failed()
    return result
