"""Float64 central differences against the analytic gradient at every entry (the exhaustive mode):
the step at each entry, the rounding allowance of a difference, one-sided slopes telling a
non-differentiable point from a wrong gradient, and tied entries checked together. The fast mode's
random projections are :mod:`~numpy_transformer.gradient_checking.projections`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy

from ..backend import Array, to_numpy
from .report import KinkReport, TensorReport

FLOAT64_EPS = float(numpy.finfo(numpy.float64).eps)


class Tolerances(NamedTuple):
    """The step and the pass rule of a check: |analytic - numeric| <= atol' + rtol |numeric|."""

    eps: float
    atol: float
    rtol: float


NOISE_FACTOR = 16  # rounding allowance of a difference: NOISE_FACTOR eps_mach sum|terms| / step


def entries_to_check(
    shape: tuple[int, ...], max_entries: int | None, rng: numpy.random.Generator
) -> list[tuple[int, ...]]:
    size = int(numpy.prod(shape))
    flat = (
        numpy.arange(size)
        if max_entries is None or size <= max_entries
        else rng.choice(size, max_entries, replace=False)
    )
    return [tuple(int(i) for i in numpy.unravel_index(i, shape)) for i in flat]


def step_at(value: float, eps: float) -> float:
    """The step at an entry of value ``value``: eps relative to it above 1 (a fixed step drowns in
    the rounding of a large entry: at 1e8 one unit in the last place is 1.5e-8), eps below."""
    return eps * max(1.0, abs(value))


def rounding_allowance(scale: float, step: float) -> float:
    """The rounding allowance of a difference quotient (L(+) - L(-)) / (2 step): each loss carries a
    rounding of a few eps_mach times ``scale`` (the larger of |L| and the terms' root sum of squares)."""
    return NOISE_FACTOR * FLOAT64_EPS * scale / step


def _moved(
    loss: Callable[[], float], array: Array, indices: Sequence[tuple[int, ...]], step: float
) -> tuple[float, float]:
    """(the loss, the step actually taken) with every entry of ``indices`` moved by ``step``."""
    originals = [float(array[index]) for index in indices]
    for index, original in zip(indices, originals):
        array[index] = original + step
    taken = float(array[indices[0]]) - originals[0]
    value = loss_value(loss())
    for index, original in zip(indices, originals):
        array[index] = original
    return value, taken


class Moves(NamedTuple):
    """The loss with an entry moved one step up and one down, and the steps actually taken (the
    entry's rounding: ``up`` > 0 > ``down``)."""

    plus: float
    up: float
    minus: float
    down: float


def sides(
    loss: Callable[[], float],
    array: Array,
    indices: Sequence[tuple[int, ...]],
    eps: float,
    base: float,
    at_h: Moves | None = None,
) -> tuple[float, float, float, float, float]:
    """One-sided slopes (left, right) at the step h and at 2 h with the entries of ``indices`` moved
    together, and h. ``at_h``: the moves by h, where the central difference took them already."""
    h = step_at(float(array[indices[0]]), eps)
    slopes = []
    for multiple in (1.0, 2.0):
        if multiple == 1.0 and at_h is not None:
            plus, up, minus, down = at_h
        else:
            plus, up = _moved(loss, array, indices, multiple * h)
            minus, down = _moved(loss, array, indices, -multiple * h)
        slopes += [(base - minus) / -down, (plus - base) / up]
    return slopes[0], slopes[1], slopes[2], slopes[3], h


def kink_at(
    loss: Callable[[], float],
    array: Array,
    index: tuple[int, ...],
    eps: float,
    base: float,
    scale: float = 1.0,
    rtol: float = 1e-3,
    at_h: Moves | None = None,
) -> tuple[float, float, bool]:
    """The one-sided slopes at ``index`` and whether they disagree as at a kink. A smooth curve's
    gap between them is h f'' and doubles with the step h, and its central differences at h and 2 h
    agree to h^2 f'''; at a kink within 2 h the gap stays or grows other than twofold, or the two
    central differences differ. ``at_h``: the moves by h the central difference took (see sides)."""
    left, right, left2, right2, h = sides(loss, array, [index], eps, base, at_h)
    gap, gap2 = right - left, right2 - left2
    size = max(abs(right), abs(left), 1e-300)
    noise = rounding_allowance(max(abs(base), scale), h)
    central, central2 = (left + right) / 2, (left2 + right2) / 2
    is_kink = (abs(gap) > max(1e-6 * size, noise) and not 0.8 <= gap2 / (2 * gap) <= 1.25) or abs(
        central2 - central
    ) > rtol * size + 4 * noise
    return left, right, is_kink


def between(value: float, left: float, right: float, atol: float, rtol: float) -> bool:
    """Whether ``value`` lies between the one-sided slopes (a subgradient), within atol and rtol."""
    low, high = sorted((left, right))
    slack = atol + rtol * max(abs(low), abs(high))
    return low - slack <= value <= high + slack


class Differences(NamedTuple):
    """numeric_entries' central differences: at each of ``indices`` its value, the step h and the
    moves by h (kept: a failing entry's kink check starts from them)."""

    indices: list[tuple[int, ...]]
    numeric: Any
    steps: Any
    moves: list[Moves]


def numeric_entries(
    loss: Callable[[], float], array: Array, indices: list[tuple[int, ...]], eps: float
) -> Differences:
    """Central differences at each of ``indices``."""
    numeric = numpy.empty(len(indices))
    steps = numpy.empty(len(indices))
    moves = []
    for k, index in enumerate(indices):
        original = float(array[index])
        h = step_at(original, eps)
        array[index] = original + h
        high = float(array[index])
        plus = loss_value(loss())
        array[index] = original - h
        low = float(array[index])
        minus = loss_value(loss())
        array[index] = original
        numeric[k] = (plus - minus) / (high - low)
        steps[k] = h
        moves.append(Moves(plus, high - original, minus, low - original))
    return Differences(indices, numeric, steps, moves)


def check_every_entry(
    loss: Callable[[], float],
    name: str,
    array: Array,
    analytic: Array,
    base: float,
    tolerances: Tolerances,
    kinks: str,
    differences: Differences,
    scale: float,
    largest: float,
) -> tuple[TensorReport, float]:
    """Judge each entry's central difference (``differences``: :func:`numeric_entries`' indices,
    values and steps) against the analytic gradient, the failing ones checked for kinks and ties.
    Returns the report and the tensor's gradient scale (its largest |analytic| or |numeric|)."""
    eps, atol, rtol = tolerances
    indices, numeric, steps, moves = differences
    grad = to_numpy(analytic)
    analytic_values = numpy.array([grad[index] for index in indices], dtype=numpy.float64)
    errors = numpy.abs(analytic_values - numeric)
    # the absolute tolerance scales with the gradient (atol times the largest |gradient| below 1),
    # down to the rounding of the differences, never above atol
    absolute = numpy.minimum(
        atol, numpy.maximum(atol * min(1.0, largest), rounding_allowance(scale, 1.0) / steps)
    )
    allowed = absolute + rtol * numpy.abs(numeric)
    bad = ~(errors <= allowed)  # NaN is bad
    found: list[KinkReport] = []
    where: dict[int, KinkReport] = {}
    # a kink's central difference is no error where the analytic value is a subgradient
    judged = errors.copy()
    note = ""
    if not numpy.isfinite(numeric).all():
        k = int(numpy.flatnonzero(~numpy.isfinite(numeric))[0])
        note = (
            f"the numeric derivative is not finite at {indices[k]} ({numeric[k]}): the loss is not finite "
            "one step away from the point checked"
        )
    for k in (int(i) for i in numpy.flatnonzero(bad & numpy.isfinite(numeric))):
        left, right, is_kink = kink_at(loss, array, indices[k], eps, base, scale, rtol, moves[k])
        if is_kink:
            valid = between(float(analytic_values[k]), left, right, float(absolute[k]), rtol)
            kink = KinkReport(name, indices[k], left, right, float(analytic_values[k]), valid)
            found.append(kink)
            where[k] = kink
            if valid and kinks != "fail":
                bad[k] = False
                judged[k] = 0.0
    ties = _check_ties(
        loss, name, array, indices, analytic_values, where, base, eps, atol * min(1.0, largest), rtol, scale
    )
    for group, ok, _ in ties:
        if not ok:
            for k in group:
                bad[k] = True
                judged[k] = max(judged[k], abs(float(analytic_values[k]) - float(numeric[k])), 1e-300)
        elif (
            len(group) >= 3 and kinks != "fail"
        ):  # moving one of three tied entries alone reaches two pieces only
            for k in group:
                if not where[k].subgradient:
                    where[k].subgradient, where[k].tied = True, len(group)
                    bad[k] = False
                    judged[k] = 0.0
    judged[~numpy.isfinite(judged)] = numpy.inf
    worst = int(numpy.argmax(numpy.where(bad, judged, -numpy.inf) if bad.any() else judged - allowed))
    order = [int(k) for k in numpy.argsort(-judged, kind="stable")[:5]]
    error_map = numpy.zeros(tuple(array.shape))
    for k, index in enumerate(indices):
        error_map[index] = judged[k]
    report = TensorReport(
        name=name,
        checked=len(indices),
        worst_index=indices[worst],
        analytic=float(analytic_values[worst]),
        numeric=float(numeric[worst]),
        max_abs_error=float(judged.max(initial=0.0)),
        relative_error=0.0,
        passed=not bool(bad.any()),
        kinks=found,
        worst=[(indices[k], float(analytic_values[k]), float(numeric[k])) for k in order],
        error_map=error_map,
        note=note,
        ties=[line for _, _, line in ties],
    )
    finite = numpy.abs(numeric[numpy.isfinite(numeric)])
    tensor_scale = max(numpy.abs(analytic_values).max(initial=0.0), finite.max(initial=0.0))
    return report, float(tensor_scale)


def _check_ties(
    loss: Callable[[], float],
    name: str,
    array: Array,
    indices: list[tuple[int, ...]],
    analytic_values: Any,
    kinks: Mapping[int, KinkReport],
    base: float,
    eps: float,
    atol: float,
    rtol: float,
    scale: float,
) -> list[tuple[list[int], bool, str]]:
    """Kink entries of equal value (a tie: max, sort, a median), each group moved together: along
    that common direction a tie stays a tie, so the derivative there exists, and the analytic values
    of the group must add up to it (each tied entry alone may lie between its slopes while the sum
    is wrong: every tied entry given the whole gradient)."""
    groups: dict[float, list[int]] = {}
    for k in kinks:
        groups.setdefault(float(array[indices[k]]), []).append(k)
    checked = []
    for value, group in groups.items():
        if len(group) < 2:
            continue
        moved = [indices[k] for k in group]
        left, right, _, _, h = sides(loss, array, moved, eps, base)
        noise = rounding_allowance(scale, h)
        if abs(right - left) > atol + rtol * max(abs(left), abs(right)) + 4 * noise:
            continue  # a kink along the common direction too (relu at several zeros): each entry alone decides
        derivative = (left + right) / 2
        total = float(sum(float(analytic_values[k]) for k in group))
        ok = abs(total - derivative) <= len(group) * atol + rtol * abs(derivative) + 4 * noise
        shown = ", ".join(str(index) for index in moved[:6]) + (", ..." if len(moved) > 6 else "")
        checked.append(
            (
                group,
                ok,
                f"tied entries {shown} of '{name}' (equal values {value:.6g}), moved together: derivative "
                f"{derivative:.6g}, the sum of their analytic values {total:.6g}"
                + (
                    " agrees" if ok else ": wrong (the tied entries' gradients must add up to the derivative)"
                ),
            )
        )
    return checked


def loss_value(value: Any) -> float:
    """The loss as a float; anything but one number is a TypeError naming what came back."""
    size = getattr(value, "size", 1)
    if size != 1 or isinstance(value, (str, bytes, list, tuple, dict)) or value is None:
        shape = getattr(value, "shape", type(value).__name__)
        raise TypeError(f"loss() must return one number, got {shape}")
    return float(value)


def unravel(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The index of entry ``flat`` of an array of ``shape`` (C order), as a tuple of ints."""
    return tuple(int(i) for i in numpy.unravel_index(flat, shape)) if shape else ()
