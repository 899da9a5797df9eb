"""Gradient checking by central finite differences, for functions of arrays and for modules.

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
values) are also moved together, and the sum of their analytic values must match that derivative. At a kink the
analytic value passes when it lies between the two slopes (a subgradient: relu or abs at 0, a max
with ties), and the report says so.

Two modes. ``exhaustive`` moves every entry (two forward calls each) and names the worst. ``fast``
checks directional derivatives: for a random direction u over a tensor with |u_i| >= 1 (a random
sign times 1 + |N(0, 1)|), sum(analytic * u) against (L(x + eps u) - L(x - eps u)) / (2 eps), two
forward calls for every entry at once, so one wrong entry among millions shifts the sum by at least
its whole error. A failing projection is bisected
(halves of the entries, the half that still disagrees kept) down to the wrong entries, which are
then checked one by one and named. ``auto`` (the default) is exhaustive up to
``AUTO_EXHAUSTIVE_ENTRIES`` entries in all, fast above.

:func:`gradcheck_function` and :func:`gradcheck_module` also check the contract of a backward pass
before any difference is taken (:func:`check_backward_contract`): the forward leaves its inputs as
given and computes in the precision it is given; the backward leaves ``dout``, the inputs and the
cache as given, returns each gradient in its input's dtype, shape and array library, returns the same
bits for the same arguments, and returns arrays that a later call does not overwrite.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy

from .backend import Array, get_array_module, to_numpy

AUTO_EXHAUSTIVE_ENTRIES = 4096  # mode="auto": every entry up to this many in all, projections above
MODES = ("auto", "exhaustive", "fast")
KINKS = ("subgradient", "fail", "nudge")
MAX_LOCATED = 16  # fast mode: the most disagreeing entries one bisection looks for
WIDESPREAD_LOCATED = 5  # fast mode: the wrong entries located when most of a tensor is wrong
MAX_KINKS = 128  # fast mode: the most non-differentiable entries located before it gives up
DIRECTIONS = 4  # fast mode: random directions per tensor
NOISE_FACTOR = 16  # rounding allowance of a difference: NOISE_FACTOR eps_mach sum|terms| / step
FLOAT64_EPS = float(numpy.finfo(numpy.float64).eps)


class GradcheckError(AssertionError):
    """A gradient disagreed with its finite-difference estimate, or a backward broke its contract;
    the message says which fault, which argument and where."""


@dataclass
class KinkReport:
    """An entry where the one-sided slopes disagree: the function is not differentiable there."""

    name: str
    index: tuple[int, ...]
    left: float
    right: float
    analytic: float
    subgradient: bool
    tied: int = 0  # > 0: one of that many tied entries, judged with them (its slopes alone need not hold it)

    def __str__(self) -> str:
        low, high = sorted((self.left, self.right))
        verdict = (
            f"outside {low:.6g} .. {high:.6g}, which moving one of {self.tied} tied entries alone need not "
            "give: judged with the tied entries together"
            if self.tied
            else f"a subgradient (between {low:.6g} and {high:.6g})"
            if self.subgradient
            else f"NOT a subgradient (outside {low:.6g} .. {high:.6g}): wrong"
        )
        return (
            f"non-differentiable at entry {self.index} of '{self.name}': left slope {self.left:.6g}, "
            f"right slope {self.right:.6g}, analytic {self.analytic:.6g} is {verdict}"
        )


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
    mode: str = "exhaustive"
    kinks: list[KinkReport] = field(default_factory=list)
    worst: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)  # (index, a, n)
    note: str = ""
    error_map: Any = None  # exhaustive mode: |analytic - numeric| over the tensor's shape, for the picture
    ties: list[str] = field(default_factory=list)  # tied entries moved together, and the verdict
    fixed_relative: float | None = None  # fast mode, an error spread widely: the projection's relative error
    many_kinks: bool = False  # fast mode: too many kinks to tell apart from wrong entries


@dataclass
class GradcheckResult:
    reports: list[TensorReport] = field(default_factory=list)
    picture: str | None = None  # the file a failure's picture was saved to, if one was asked for

    @property
    def passed(self) -> bool:
        return all(report.passed for report in self.reports)

    @property
    def max_relative_error(self) -> float:
        return max((report.relative_error for report in self.reports), default=0.0)

    @property
    def kinks(self) -> list[KinkReport]:
        return [kink for report in self.reports for kink in report.kinks]

    def __str__(self) -> str:
        lines = []
        for r in self.reports:
            how = f"{r.checked} entries" if r.mode == "exhaustive" else f"{r.checked} entries by projection"
            lines.append(
                f"{r.name}: {'ok' if r.passed else 'FAILED'} rel {r.relative_error:.2e} abs {r.max_abs_error:.2e} "
                f"at {r.worst_index} (analytic {r.analytic:.10g}, numeric {r.numeric:.10g}, {how})"
            )
            if r.note:
                lines.append(f"  {r.note}")
            lines.extend(f"  {kink}" for kink in r.kinks[:8])
            lines.extend(f"  {tie}" for tie in r.ties[:8])
            if len(r.kinks) > 8:
                lines.append(f"  ... and {len(r.kinks) - 8} more non-differentiable entries")
            if not r.passed and r.worst:
                lines.append(
                    "  worst entries:   index            analytic             numeric           |error|"
                )
                lines.extend(
                    f"  {index!s:>22} {a:>19.10g} {n:>19.10g} {abs(a - n):>17.3e}" for index, a, n in r.worst
                )
        if self.picture:
            lines.append(f"picture of the error: {self.picture}")
        return "\n".join(lines)


# -- the checker's own arguments --------------------------------------------------------------


def _check_options(
    eps: Any, atol: Any, rtol: Any, max_entries: Any, mode: Any, kinks: Any, directions: Any
) -> None:
    for label, value, positive in (("eps", eps, True), ("atol", atol, False), ("rtol", rtol, False)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{label} must be a real number, got {type(value).__name__} {value!r}")
        if not math.isfinite(value) or value < 0 or (positive and value == 0):
            raise ValueError(
                f"{label} must be a finite {'positive' if positive else 'non-negative'} number, got {value!r}"
            )
    if max_entries is not None and (
        isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1
    ):
        raise ValueError(
            f"max_entries must be a positive whole number of entries to check per tensor (or None for all), "
            f"got {max_entries!r}"
        )
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if kinks not in KINKS:
        raise ValueError(f"kinks must be one of {KINKS}, got {kinks!r}")
    if isinstance(directions, bool) or not isinstance(directions, int) or directions < 1:
        raise ValueError(f"directions must be a whole number >= 1 of random projections, got {directions!r}")


def _entries(
    shape: tuple[int, ...], max_entries: int | None, rng: numpy.random.Generator
) -> list[tuple[int, ...]]:
    size = int(numpy.prod(shape))
    flat = (
        numpy.arange(size)
        if max_entries is None or size <= max_entries
        else rng.choice(size, max_entries, replace=False)
    )
    return [tuple(int(i) for i in numpy.unravel_index(i, shape)) for i in flat]


def _step(value: float, eps: float) -> float:
    """The step at an entry of value ``value``: eps relative to it above 1 (a fixed step drowns in
    the rounding of a large entry: at 1e8 one unit in the last place is 1.5e-8), eps below."""
    return eps * max(1.0, abs(value))


def _noise(scale: float, step: float) -> float:
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
    value = _scalar(loss())
    for index, original in zip(indices, originals):
        array[index] = original
    return value, taken


def _sides(
    loss: Callable[[], float], array: Array, indices: Sequence[tuple[int, ...]], eps: float, base: float
) -> tuple[float, float, float, float, float]:
    """One-sided slopes (left, right) at the step h and at 2 h with the entries of ``indices`` moved
    together, and h."""
    h = _step(float(array[indices[0]]), eps)
    slopes = []
    for multiple in (1.0, 2.0):
        plus, up = _moved(loss, array, indices, multiple * h)
        minus, down = _moved(loss, array, indices, -multiple * h)
        slopes += [(base - minus) / -down, (plus - base) / up]
    return slopes[0], slopes[1], slopes[2], slopes[3], h


def _kink(
    loss: Callable[[], float],
    array: Array,
    index: tuple[int, ...],
    eps: float,
    base: float,
    scale: float = 1.0,
    rtol: float = 1e-3,
) -> tuple[float, float, bool]:
    """The one-sided slopes at ``index`` and whether they disagree as at a kink. A smooth curve's
    gap between them is h f'' and doubles with the step h, and its central differences at h and 2 h
    agree to h^2 f'''; at a kink within 2 h the gap stays or grows other than twofold, or the two
    central differences differ."""
    left, right, left2, right2, h = _sides(loss, array, [index], eps, base)
    gap, gap2 = right - left, right2 - left2
    size = max(abs(right), abs(left), 1e-300)
    noise = _noise(max(abs(base), scale), h)
    central, central2 = (left + right) / 2, (left2 + right2) / 2
    is_kink = (abs(gap) > max(1e-6 * size, noise) and not 0.8 <= gap2 / (2 * gap) <= 1.25) or abs(
        central2 - central
    ) > rtol * size + 4 * noise
    return left, right, is_kink


def _between(value: float, left: float, right: float, atol: float, rtol: float) -> bool:
    low, high = sorted((left, right))
    slack = atol + rtol * max(abs(low), abs(high))
    return low - slack <= value <= high + slack


def _not_finite(values: Array) -> tuple[int, tuple[int, ...], float] | None:
    """(how many, the first index, its value) of the entries of ``values`` that are not finite."""
    xp = get_array_module()
    bad = ~xp.isfinite(values)
    count = int(bad.sum())
    if count == 0:
        return None
    flat = int(bad.reshape(-1).argmax())
    index = _index(flat, tuple(values.shape))
    return count, index, float(values.reshape(-1)[flat])


def _failed(
    name: str, size: int, index: tuple[int, ...], analytic: float, numeric: float, note: str
) -> TensorReport:
    return TensorReport(
        name=name,
        checked=size,
        worst_index=index,
        analytic=analytic,
        numeric=numeric,
        max_abs_error=math.inf,
        relative_error=math.inf,
        passed=False,
        note=note,
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
    "subgradient" here; :func:`gradcheck_function` moves such inputs). ``picture``: on failure, a
    PNG of the error over each failing tensor is saved there (needs matplotlib) and the message
    names it. ``noise_scale``: the scale of the loss's rounding, the root sum of squares of the terms
    it adds (sqrt(sum (G * out)^2)); |loss| when None (and never below it). A gradient or a loss that is not finite
    fails, named. On failure raises :class:`GradcheckError` naming the tensor, worst index, both
    values and errors.
    """
    _check_options(eps, atol, rtol, max_entries, mode, kinks, directions)
    if mode == "fast" and max_entries is not None:
        raise ValueError(
            f"max_entries={max_entries} samples entries for mode='exhaustive'; mode='fast' checks every entry "
            "by projection: give one or the other"
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
        if tuple(analytic[name].shape) != tuple(array.shape):
            raise ValueError(
                f"analytic gradient of '{name}' has shape {tuple(analytic[name].shape)}, expected {array.shape}"
            )
    total = sum(int(array.size) for array in variables.values())
    if mode == "auto":
        mode = "exhaustive" if max_entries is not None or total <= AUTO_EXHAUSTIVE_ENTRIES else "fast"
    rng = numpy.random.default_rng(seed)
    result = GradcheckResult()
    base = _scalar(loss())
    scale = max(abs(base), float(noise_scale or 0.0)) if math.isfinite(base) else math.inf
    checked: dict[str, Array] = {}
    for name, array in variables.items():
        xp = get_array_module()
        if (where := _not_finite(array)) is not None:
            count, index, value = where
            note = f"the input is not finite at {index}: {value} ({count} of {array.size} entries)"
            result.reports.append(_failed(name, int(array.size), index, math.nan, math.nan, note))
        elif (where := _not_finite(xp.asarray(analytic[name]))) is not None:
            count, index, value = where
            note = (
                f"the analytic gradient is not finite at {index}: {value} ({count} of {array.size} entries)"
            )
            result.reports.append(_failed(name, int(array.size), index, value, math.nan, note))
        elif not math.isfinite(base):
            note = f"the loss is not finite at the point checked ({base}): no derivative of it can be taken"
            result.reports.append(_failed(name, int(array.size), (), math.nan, math.nan, note))
        else:
            checked[name] = array
    largest = 1e-300  # the largest |analytic| or |numeric| of the whole check: the scale of relative errors
    for name in checked:
        largest = max(largest, float(get_array_module().abs(analytic[name]).max()))
    numerics = {}
    if mode == "exhaustive":
        for name, array in checked.items():
            numerics[name] = _numeric_entries(
                loss, array, _entries(tuple(array.shape), max_entries, rng), eps
            )
            finite = numerics[name][1][numpy.isfinite(numerics[name][1])]
            largest = max(largest, float(numpy.abs(finite).max(initial=0.0)))
    for name, array in checked.items():
        if mode == "exhaustive":
            indices, numeric, steps = numerics[name]
            report, tensor_scale = _exhaustive(
                loss,
                name,
                array,
                analytic[name],
                base,
                atol,
                rtol,
                kinks,
                eps,
                indices,
                numeric,
                steps,
                scale,
                largest,
            )
        else:
            report, tensor_scale = _fast(
                loss,
                name,
                array,
                analytic[name],
                base,
                eps,
                atol,
                rtol,
                rng,
                kinks,
                directions,
                scale,
                largest,
            )
        largest = max(largest, tensor_scale)
        result.reports.append(report)
    for report in result.reports:
        if math.isfinite(report.max_abs_error):
            report.relative_error = (
                report.fixed_relative if report.fixed_relative is not None else report.max_abs_error / largest
            )
    if not result.passed and picture is not None:
        result.picture = _draw(result, variables, analytic, Path(picture))
    if raise_on_failure and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _numeric_entries(
    loss: Callable[[], float], array: Array, indices: list[tuple[int, ...]], eps: float
) -> tuple[list[tuple[int, ...]], Any, Any]:
    """Central differences at each of ``indices``: (indices, numeric values, steps)."""
    numeric = numpy.empty(len(indices))
    steps = numpy.empty(len(indices))
    for k, index in enumerate(indices):
        original = float(array[index])
        h = _step(original, eps)
        array[index] = original + h
        high = float(array[index])
        plus = _scalar(loss())
        array[index] = original - h
        low = float(array[index])
        minus = _scalar(loss())
        array[index] = original
        numeric[k] = (plus - minus) / (high - low)
        steps[k] = h
    return indices, numeric, steps


def _exhaustive(
    loss: Callable[[], float],
    name: str,
    array: Array,
    analytic: Array,
    base: float,
    atol: float,
    rtol: float,
    kinks: str,
    eps: float,
    indices: list[tuple[int, ...]],
    numeric: Any,
    steps: Any,
    scale: float,
    largest: float,
) -> tuple[TensorReport, float]:
    grad = to_numpy(analytic)
    analytic_values = numpy.array([grad[index] for index in indices], dtype=numpy.float64)
    errors = numpy.abs(analytic_values - numeric)
    # the absolute tolerance scales with the gradient (atol times the largest |gradient| below 1),
    # down to the rounding of the differences, never above atol
    absolute = numpy.minimum(atol, numpy.maximum(atol * min(1.0, largest), _noise(scale, 1.0) / steps))
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
        left, right, is_kink = _kink(loss, array, indices[k], eps, base, scale, rtol)
        if is_kink:
            valid = _between(float(analytic_values[k]), left, right, float(absolute[k]), rtol)
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
        left, right, _, _, h = _sides(loss, array, moved, eps, base)
        noise = _noise(scale, h)
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


def _fast(
    loss: Callable[[], float],
    name: str,
    array: Array,
    analytic: Array,
    base: float,
    eps: float,
    atol: float,
    rtol: float,
    rng: numpy.random.Generator,
    kinks: str,
    directions: int,
    scale: float,
    largest: float,
) -> tuple[TensorReport, float]:
    """Directional derivatives along random directions; a failing one bisected to its entries.

    Each direction is v_i = s_i (1 + |z_i|) max(1, |x_i|) with a random sign s_i and z_i ~ N(0, 1):
    |v_i| >= 1, so one entry wrong by e shifts the projection by at least e, and two entries whose
    errors cancel (a gradient swapped between them) cancel in one direction with probability at most
    0.57 tolerance / e (the density of |z_i| - |z_j| is at most 1/sqrt(pi))."""
    xp = get_array_module()
    shape, size = tuple(array.shape), int(array.size)
    original = array.copy()
    flat0 = original.reshape(-1)
    grad = xp.asarray(analytic, dtype=xp.float64).reshape(-1)
    largest_grad = float(xp.abs(grad).max())
    typical_grad = float(xp.sqrt((grad * grad).mean()))
    magnitude = xp.maximum(xp.abs(flat0), 1.0)

    def measure(
        v: Array, lo: int, hi: int, multiple: float = 1.0
    ) -> tuple[float, float, float, float, float]:
        """(analytic, numeric, noise, loss moved up, loss moved down) of the projection on lo:hi."""
        step = xp.zeros(size, dtype=xp.float64)
        step[lo:hi] = (multiple * eps) * v[lo:hi]
        high, low = flat0 + step, flat0 - step
        array[...] = high.reshape(shape)
        plus = _scalar(loss())
        array[...] = low.reshape(shape)
        minus = _scalar(loss())
        array[...] = original
        taken = high - low  # the steps actually taken, after rounding
        h = 2 * multiple * eps
        numeric = (plus - minus) / h
        noise = _noise(max(scale, abs(plus), abs(minus)), multiple * eps)
        return float((grad * taken).sum()) / h, numeric, noise, plus, minus

    def tolerance(n: float, v: Array, noise: float) -> float:
        norm = float(xp.sqrt((v * v).sum()))
        gradient_scale = max(largest, largest_grad, abs(n) / max(norm, 1e-300))
        return atol * min(1.0, gradient_scale) + rtol * typical_grad + noise

    excluded = xp.zeros(size, dtype=bool)
    found: list[KinkReport] = []
    located: list[tuple[int, float, float]] = []  # (flat index, analytic, numeric) of wrong entries
    worst_a = worst_n = worst_err = 0.0
    note = ""
    many_kinks = False
    widespread: tuple[float, float, int, int] | None = None
    stopped = False
    not_finite = None
    for _ in range(directions):
        signs = xp.asarray(rng.integers(0, 2, size) * 2.0 - 1.0)
        v = signs * (1.0 + xp.abs(xp.asarray(rng.standard_normal(size)))) * magnitude
        v[excluded] = 0.0
        a, n, noise, _, _ = measure(v, 0, size)
        while not (abs(a - n) <= tolerance(n, v, noise)) and not located:
            if not math.isfinite(n):
                not_finite = n
                break
            blocks = _blocks(size)
            disagree = []
            for lo, hi in blocks:
                pa, pn, pnoise, _, _ = measure(v, lo, hi)
                if not abs(pa - pn) <= tolerance(pn, v[lo:hi], pnoise):
                    disagree.append((abs(pa - pn), (lo, hi)))
            limit = MAX_LOCATED
            if len(blocks) >= 8 and len(disagree) >= len(blocks) // 2:
                # wrong (or kinks) over most of the tensor: a few entries located stand for the rest
                if _kinky(measure, v, size, base, eps):
                    many_kinks = True
                    break
                widespread = (a, n, len(disagree), len(blocks))
                limit = WIDESPREAD_LOCATED
            stack = [part for _, part in sorted(disagree)]  # the larger disagreement last: popped first
            leaves: list[int] = []
            while stack and len(leaves) < limit:
                lo, hi = stack.pop()
                if hi - lo == 1:
                    leaves.append(lo)
                    continue
                mid = (lo + hi) // 2
                halves = []
                for part in ((lo, mid), (mid, hi)):
                    pa, pn, pnoise, _, _ = measure(v, *part)
                    if not abs(pa - pn) <= tolerance(pn, v[part[0] : part[1]], pnoise):
                        halves.append((abs(pa - pn), part))
                stack.extend(part for _, part in sorted(halves))
            stopped = len(leaves) >= limit
            if not leaves:  # no half disagrees alone: the error is spread thin over many entries
                widespread = (a, n, 0, 0)
                for flat in _sample(rng, [(0, size)], WIDESPREAD_LOCATED):
                    _, entry_n, _ = _numeric_entries(loss, array, [_index(flat, shape)], eps)
                    located.append((flat, float(grad[flat]), float(entry_n[0])))
                break
            for flat in leaves:
                index = _index(flat, shape)
                entry_a = float(grad[flat])
                left, right, is_kink = _kink(loss, array, index, eps, base, scale, rtol)
                entry_n = (left + right) / 2
                excluded[flat] = True
                if is_kink:
                    valid = _between(entry_a, left, right, atol, rtol)
                    found.append(KinkReport(name, index, left, right, entry_a, valid))
                    if valid and kinks != "fail":
                        continue
                if is_kink or not abs(entry_a - entry_n) <= atol * min(1.0, largest) + rtol * abs(entry_n):
                    located.append((flat, entry_a, entry_n))
            if located:
                break
            if len(found) >= MAX_KINKS:  # only kinks so far, and too many to locate one by one
                many_kinks = True
                break
            v[excluded] = 0.0  # the rest must agree without the kinks
            a, n, noise, _, _ = measure(v, 0, size)
        if located or many_kinks or widespread or not_finite is not None:
            break
        if abs(a - n) > worst_err:
            worst_a, worst_n, worst_err = a, n, abs(a - n)
    passed = not (located or many_kinks or widespread or not_finite is not None)
    fixed_relative = None
    worst_index: tuple[int, ...] = ()
    worst_list: list[tuple[tuple[int, ...], float, float]] = []
    entries = sorted(located, key=lambda e: -abs(e[1] - e[2]))
    if entries:
        flat, worst_a, worst_n = entries[0]
        worst_index = _index(flat, shape)
        worst_list = [(_index(f, shape), ea, en) for f, ea, en in entries[:5]]
    if not_finite is not None:
        worst_a, worst_n = a, not_finite
        note = "the loss is not finite one step away from the point checked (along a random direction)"
    elif widespread is not None:
        pa, pn, count, parts = widespread
        spread = (
            f"{count} of {parts} blocks of entries disagree" if parts else "no half of it disagrees alone"
        )
        wrong = [abs(ea - en) / max(abs(ea), abs(en), 1e-300) for _, ea, en in entries]
        fixed_relative = max(wrong, default=abs(pa - pn) / max(abs(pa), abs(pn), 1e-300))
        if entries and parts:
            plural = "y" if len(entries) == 1 else "ies"
            head = f"located by bisecting the projection: {len(entries)} wrong entr{plural}"
        elif entries:
            head = f"{len(entries)} entries sampled"
        else:
            head = "no entry located"
            worst_a, worst_n = pa, pn
        note = (
            f"{head}, each wrong by up to {fixed_relative:.0%} of its value; the error is spread over many "
            f"entries ({spread}; the projection on a random direction is wrong by "
            f"{abs(pa - pn) / max(abs(pa), abs(pn), 1e-300):.1%}: analytic {pa:.10g}, numeric {pn:.10g}): "
            "run mode='exhaustive' to see them all"
        )
    elif many_kinks:
        worst_a, worst_n = a, n
        note = (
            f"non-differentiable entries (kinks) throughout the tensor (more than {MAX_KINKS}, or most blocks of "
            "entries): the fast mode cannot tell them apart from wrong entries one by one"
        )
    elif entries:
        note = (
            f"located by bisecting the projection: {len(entries)} wrong entr{'y' if len(entries) == 1 else 'ies'}"
            + (f" (stopped at {MAX_LOCATED}: run mode='exhaustive' for all)" if stopped else "")
        )
    worst_err = abs(worst_a - worst_n) if math.isfinite(worst_n) else math.inf
    report = TensorReport(
        name=name,
        checked=size,
        worst_index=worst_index,
        analytic=worst_a,
        numeric=worst_n,
        max_abs_error=worst_err,
        relative_error=0.0,
        passed=passed,
        mode="fast",
        kinks=found,
        worst=worst_list,
        note=note,
        fixed_relative=fixed_relative,
        many_kinks=many_kinks,
    )
    sampled = max((abs(en) for _, _, en in located), default=0.0)
    return report, max(largest_grad, sampled)


def _blocks(size: int, count: int = 16) -> list[tuple[int, int]]:
    """``count`` contiguous ranges covering 0..size (fewer when size is smaller)."""
    bounds = sorted({size * k // count for k in range(count + 1)})
    return [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]


def _sample(rng: numpy.random.Generator, parts: list[tuple[int, int]], count: int) -> list[int]:
    picks = []
    for k in range(count):
        lo, hi = parts[k % len(parts)]
        picks.append(int(rng.integers(lo, hi)))
    return sorted(set(picks))


def _kinky(
    measure: Callable[..., tuple[float, float, float, float, float]],
    v: Array,
    size: int,
    base: float,
    eps: float,
) -> bool:
    """Whether the loss has kinks along ``v``: its one-sided slopes' gap stays as the step doubles
    (a smooth curve's gap doubles), or its central differences at two steps disagree."""
    _, n1, noise1, plus1, minus1 = measure(v, 0, size, 1.0)
    _, n2, noise2, plus2, minus2 = measure(v, 0, size, 2.0)
    gap = ((plus1 - base) - (base - minus1)) / eps
    gap2 = ((plus2 - base) - (base - minus2)) / (2 * eps)
    largest = max(abs(n1), abs(n2), 1e-300)
    kink = abs(gap) > max(4 * noise1, 1e-6 * largest) and not 0.8 <= gap2 / (2 * gap) <= 1.25
    return kink or abs(n2 - n1) > 1e-3 * largest + 4 * max(noise1, noise2)


def _draw(
    result: GradcheckResult, variables: Mapping[str, Array], analytic: Mapping[str, Array], path: Path
) -> str:
    """A PNG of |analytic - numeric| over each failing tensor's checked entries (or, in fast mode,
    the located entries marked on the analytic gradient). Needs matplotlib, imported only here."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return f"(no picture saved to {path}: matplotlib is not installed; pip install matplotlib)"
    failing = [r for r in result.reports if not r.passed]
    figure, axes = plt.subplots(1, len(failing), figsize=(5 * len(failing), 4), squeeze=False)
    for axis, report in zip(axes[0], failing):
        grad = to_numpy(analytic[report.name]).astype(numpy.float64)
        error = report.error_map if report.error_map is not None else numpy.zeros(grad.shape)
        for index, a, n in report.worst:
            error[index] = abs(a - n)
        image = error.reshape(-1, grad.shape[-1]) if grad.ndim >= 2 else error.reshape(1, -1)
        shown = axis.imshow(image, aspect="auto", cmap="magma", interpolation="nearest")
        figure.colorbar(shown, ax=axis, label="|analytic - numeric|")
        axis.set_title(f"{report.name}: |analytic - numeric| (rows: leading axes flattened)")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)


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


# -- the contract of a backward pass ----------------------------------------------------------


def _is_array(value: Any) -> bool:
    return (
        hasattr(value, "shape")
        and hasattr(value, "dtype")
        and hasattr(value, "copy")
        and not isinstance(value, numpy.generic)
    )


def _arrays_in(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any]]:
    """Every array inside a cache: tuples, named tuples, lists, dicts and simple objects, walked."""
    if depth > 6:
        return
    if _is_array(value):
        yield path, value
    elif isinstance(value, tuple) and hasattr(value, "_fields"):
        for key, item in zip(value._fields, value):
            yield from _arrays_in(item, f"{path}.{key}", depth + 1)
    elif isinstance(value, (tuple, list)):
        for k, item in enumerate(value):
            yield from _arrays_in(item, f"{path}[{k}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays_in(item, f"{path}[{key!r}]", depth + 1)
    elif not callable(value) and type(value).__module__ != "builtins":
        for key, item in _attributes(value):
            yield from _arrays_in(item, f"{path}.{key}", depth + 1)


def _attributes(value: Any) -> list[tuple[str, Any]]:
    """An object's attributes: its __dict__, its __slots__ (a dataclass(slots=True)) and its
    dataclass fields."""
    names = list(vars(value)) if hasattr(value, "__dict__") else []
    for klass in type(value).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [slots] if isinstance(slots, str) else list(slots)
    if dataclasses.is_dataclass(value):
        names += [f.name for f in dataclasses.fields(value)]
    seen: list[tuple[str, Any]] = []
    for name in dict.fromkeys(names):
        if name in ("__dict__", "__weakref__") or not hasattr(value, name):
            continue
        seen.append((name, getattr(value, name)))
    return seen


def _keys_in(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, Any, tuple[Any, ...]]]:
    """Every dict (and object's attribute set) inside a cache with its keys: a backward that adds
    one (a gradient memoized in the cache) writes into the cache."""
    if depth > 6 or _is_array(value):
        return
    if isinstance(value, dict):
        yield path, value, tuple(value)
        for key, item in value.items():
            yield from _keys_in(item, f"{path}[{key!r}]", depth + 1)
    elif isinstance(value, (tuple, list)):
        for k, item in enumerate(value):
            yield from _keys_in(item, f"{path}[{k}]", depth + 1)
    elif hasattr(value, "__dict__") and not callable(value) and type(value).__module__ != "builtins":
        yield path, value, tuple(vars(value))
        for key, item in vars(value).items():
            yield from _keys_in(item, f"{path}.{key}", depth + 1)


def _library(value: Any) -> str:
    if isinstance(value, (numpy.ndarray, numpy.generic)):
        return "numpy"
    xp = get_array_module()
    if xp is not numpy and isinstance(value, xp.ndarray):
        return str(getattr(xp, "__name__", "cupy"))
    return type(value).__module__.split(".")[0]


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in numpy.unravel_index(flat, shape)) if shape else ()


def _difference(before: Any, after: Any, tolerance: float = 0.0) -> str | None:
    """None when ``after`` holds ``before``'s values (bit for bit, NaN equal to NaN, or within
    ``tolerance``); otherwise how many entries changed and the first of them."""
    xp = get_array_module()
    if tuple(before.shape) != tuple(after.shape):
        return f"shape {tuple(before.shape)} became {tuple(after.shape)}"
    if before.size == 0:
        return None
    floating = numpy.dtype(str(before.dtype)).kind in "fc"
    if tolerance > 0 and floating:
        differs = xp.abs(after - before) > tolerance
    else:
        differs = after != before
    if floating:
        differs = differs & ~(xp.isnan(after) & xp.isnan(before))
    count = int(differs.sum())
    if count == 0:
        return None
    flat = int(differs.reshape(-1).argmax())
    where = _index(flat, tuple(before.shape))
    b, a = before.reshape(-1)[flat], after.reshape(-1)[flat]
    largest = f", largest difference {float(xp.abs(after - before).max()):.3g}" if floating else ""
    return f"{count} of {before.size} entries differ, the first at {where}: {b.item()!r} then {a.item()!r}{largest}"


def _snapshot(arrays: Sequence[tuple[str, Any]]) -> list[tuple[str, Any, Any]]:
    return [(path, array, array.copy()) for path, array in arrays]


def _changed(snapshot: Sequence[tuple[str, Any, Any]]) -> list[tuple[str, str]]:
    return [(path, diff) for path, array, copy in snapshot if (diff := _difference(copy, array)) is not None]


def backward_writes(
    backward: Callable[[Any, Any], Any], dout: Any, cache: Any, inputs: Mapping[str, Any] | None = None
) -> tuple[Any, list[tuple[str, str]]]:
    """Call ``backward(dout, cache)`` and say what it wrote into: ``(what it returned, [(where,
    difference)])``, ``where`` one of ``"dout"``, ``"input 'name'"`` (an array of ``inputs``) or a
    path inside the cache (``"cache.probs"``). The third rule of :func:`check_backward_contract`,
    for a caller that grades the values its own way."""
    returned, writes = _watched_backward(backward, dout, cache, inputs)
    return returned, [(path, diff) for path, diff, _ in writes]


def _watched_backward(
    backward: Callable[[Any, Any], Any], dout: Any, cache: Any, inputs: Mapping[str, Any] | None = None
) -> tuple[Any, list[tuple[str, str, Any]]]:
    """:func:`backward_writes` with the array written into (None for a key added) beside each write."""
    watched = [("dout", dout)] if _is_array(dout) else []
    watched += [(f"input '{name}'", value) for name, value in (inputs or {}).items() if _is_array(value)]
    snapshot = _snapshot(watched + list(_arrays_in(cache, "cache")))
    keys = list(_keys_in(cache, "cache"))
    returned = backward(dout, cache)
    writes: list[tuple[str, str, Any]] = [
        (path, diff, array)
        for path, array, copy in snapshot
        if (diff := _difference(copy, array)) is not None
    ]
    for path, holder, before in keys:
        after = tuple(holder) if isinstance(holder, dict) else tuple(vars(holder))
        added = [key for key in after if key not in before]
        if added:
            writes.append((path, f"the key(s) {', '.join(map(repr, added))} added", None))
    return returned, writes


def _check_gradient_type(name: str, grad: Any, like: Any, where: str) -> str | None:
    """A fault line when ``grad`` differs from its input ``like`` in array library, dtype or shape."""
    if _library(grad) != _library(like):
        return (
            f"gradient of '{name}' is a {_library(grad)} array ({type(grad).__name__}) for an input that is "
            f"a {_library(like)} array: {where} must return the input's array library"
        )
    if str(grad.dtype) != str(like.dtype):
        return (
            f"gradient of '{name}' is {grad.dtype}, its input {like.dtype}: {where} must return the "
            "input's dtype (a lower one loses the precision the check is made in)"
        )
    if tuple(grad.shape) != tuple(like.shape):
        return f"gradient of '{name}' has shape {tuple(grad.shape)}, its input {tuple(like.shape)}"
    return None


def _precision_probe(output: Callable[[], Any], variables: Mapping[str, Array], given: str) -> str | None:
    """A fault line when the forward computes in lower precision than float64: a relative change of
    2^-30 in an input entry (resolved in float64, lost in float32) leaves its output bit for bit the
    same at every probed entry, while a change of 1e-3 moves it."""
    xp = get_array_module()
    base = output()
    probed = suspicious = mixed = 0
    probed_name = ""
    for name, array in variables.items():
        probed_name = name
        flat = array.reshape(-1)
        picks = numpy.unique(to_numpy(xp.argsort(xp.abs(flat))[-4:])) if array.size > 4 else range(array.size)
        for k in picks:
            index = _index(int(k), tuple(array.shape))
            original = float(array[index])
            if abs(original) < 1e-290:  # 0, or so small that 2^-30 of it is below the smallest float64
                continue
            array[index] = original * (1 + 2.0**-30)
            tiny = output()
            array[index] = original * (1 + 2.0**-16)
            middle = output()
            array[index] = original + 1e-3 * max(abs(original), 1.0)
            big = output()
            array[index] = original
            if _same(big, base) or not _resolvable(
                base, big, abs(original) * 2.0**-30 / (1e-3 * max(abs(original), 1.0))
            ):
                continue  # the output does not depend on this entry here, or float64 cannot resolve 2^-30 of it
            probed += 1
            suspicious += _same(tiny, base)
            mixed += _slopes_differ(base, tiny, middle, abs(original))
        if probed >= 2:
            break
    if probed >= 2 and suspicious < probed and mixed == probed:
        return (
            f"{given} computes part of its output in lower precision than float64: its change for a relative "
            f"change of 2^-30 in '{probed_name}' (which float64 resolves and float32 does not) is not 2^-14 times "
            f"its change for 2^-16, at all {probed} entries probed: a branch computed in float32 (or float16) "
            "that the small change does not reach; finite differences of such a function are rounding noise, "
            "not a gradient. Compute every branch in the input's dtype"
        )
    if probed >= 2 and suspicious == probed:
        return (
            f"{given} computes in lower precision than float64: a relative change of 2^-30 in "
            f"'{probed_name}' (which float64 resolves and float32 does not) leaves its output "
            f"unchanged, bit for bit, at all {probed} entries probed; finite differences of such a function are "
            "rounding noise, not a gradient. Compute in the input's dtype"
        )
    return None


def _resolvable(base: Any, big: Any, fraction: float) -> bool:
    """Whether ``fraction`` of the change from ``base`` to ``big`` is 64 units in the last place of the
    output somewhere: a change float64 resolves (x + 1 at x = 1e-38 does not)."""
    xp = get_array_module()
    base, big = xp.asarray(base, dtype=xp.float64), xp.asarray(big, dtype=xp.float64)
    return bool((xp.abs(big - base) * fraction > 64 * FLOAT64_EPS * xp.abs(base)).any())


def _slopes_differ(base: Any, tiny: Any, middle: Any, size: float) -> bool:
    """Whether the output's change per unit of input differs, beyond rounding and curvature, between
    a relative change of 2^-30 and one of 2^-16 (a float32 branch sees the second only)."""
    xp = get_array_module()
    base, tiny, middle = (xp.asarray(v, dtype=xp.float64) for v in (base, tiny, middle))
    small, large = size * 2.0**-30, size * 2.0**-16
    slope, slope2 = (tiny - base) / small, (middle - base) / large
    rounding = float((4 * FLOAT64_EPS * (xp.abs(base) + xp.abs(tiny))).sum()) / small
    differ = float(xp.abs(slope - slope2).sum())
    return differ > 0.05 * float(xp.abs(slope2).sum()) + rounding


def _same(a: Any, b: Any) -> bool:
    if _is_array(a) and _is_array(b):
        return _difference(b, a) is None
    return bool(float(a) == float(b))


def _lower_precision_output(out: Any, given: str) -> str | None:
    dtype = getattr(out, "dtype", None)
    if dtype is None:
        return None
    kind = numpy.dtype(str(dtype))
    if kind.kind == "f" and kind.itemsize < 8:
        return (
            f"{given} computes in lower precision than it is given: it returns {dtype} for float64 inputs; "
            f"finite differences of a {dtype} function are rounding noise, not a gradient"
        )
    return None


def _raise(faults: list[str], where: str) -> None:
    if faults:
        raise GradcheckError(f"{where}:\n" + "\n".join(f"- {fault}" for fault in faults))


_OVERWRITE_HELP = "if it does so on purpose, name it in overwrites=(...)"


def check_backward_contract(
    forward: Callable[..., tuple[Any, Any]],
    backward: Callable[[Any, Any], Any],
    inputs: Mapping[str, Any],
    wrt: list[str],
    seed: int = 0,
    overwrites: Sequence[str] = (),
    nondet_tol: float = 0.0,
) -> tuple[dict[str, Any], Any]:
    """Check what a forward/backward pair must keep, without finite differences, and return
    ``(analytic gradients by name, upstream gradient)`` for the central differences to check.

    Faults, each named with its argument and the first entry that shows it (a GradcheckError):
    the forward writes into an input; the forward returns a lower precision than float64; the
    backward writes into ``dout``, an input or the cache the forward returned; a gradient's dtype,
    shape or array library differs from its input's; the backward returns different results for
    the same arguments (bit for bit, or within ``nondet_tol``); a gradient it returned changes when
    it is called again (a buffer it reuses). ``overwrites`` names what the backward writes into on
    purpose ("dout", "cache", or an input's name): the check then gives it a fresh copy each call.
    """
    if isinstance(overwrites, str) or not all(isinstance(n, str) for n in overwrites):
        raise TypeError(
            f"overwrites must be a tuple of names ('dout', 'cache', or an input's), got {overwrites!r}"
        )
    unknown = [n for n in overwrites if n not in ("dout", "cache") and n not in inputs]
    if unknown:
        raise ValueError(
            f"overwrites names {unknown[0]!r}, expected 'dout', 'cache' or one of the inputs {list(inputs)}"
        )
    if (
        isinstance(nondet_tol, bool)
        or not isinstance(nondet_tol, numbers.Real)
        or not (math.isfinite(nondet_tol) and nondet_tol >= 0)
    ):
        raise ValueError(f"nondet_tol must be a finite non-negative number, got {nondet_tol!r}")
    _check_seed(seed)
    input_arrays = [(f"input '{name}'", value) for name, value in inputs.items() if _is_array(value)]
    for path, value in input_arrays:
        if numpy.dtype(str(value.dtype)).kind in "fc" and (where := _not_finite(value)) is not None:
            count, index, bad = where
            raise GradcheckError(
                f"the {path} is not finite at {index}: {bad} ({count} of {value.size} entries): no derivative "
                "can be taken there"
            )
    before = _snapshot(input_arrays)

    def run_forward() -> tuple[Any, Any]:
        returned = forward(**inputs)
        if returned is None:
            raise TypeError("forward returned None (nothing), expected (output, cache): return out, cache")
        if not (isinstance(returned, tuple) and len(returned) == 2):
            raise TypeError(
                f"forward must return (output, cache), got {type(returned).__name__}"
                + (f" of {len(returned)}" if isinstance(returned, tuple) else "")
            )
        return returned

    out, cache = run_forward()
    written = _changed(before)
    if written:
        _raise(
            [
                f"forward wrote into its {path}: {diff} — a forward must leave its inputs as given "
                "(compute into a new array: x = x - m, not x -= m)"
                for path, diff in written
            ],
            "forward broke its contract",
        )
    shape = _output_shape(out, "forward")
    faults = [fault] if (fault := _lower_precision_output(out, "forward")) else []
    _raise(faults, "forward broke its contract")
    _raise(_forward_faults(out, None, "forward"), "forward broke its contract")
    upstream = random_upstream(shape, seed)
    other = (
        -2.0 * upstream
    )  # a different dout, and one the gradients must follow: the backward is linear in it

    def dout(g: Any) -> Any:
        return float(g) if shape == () else g.copy()

    def allowed(path: str, array: Any) -> bool:
        if path == "dout":
            return "dout" in overwrites
        if path.startswith("input "):
            return path.split("'")[1] in overwrites
        if "cache" in overwrites:
            return True
        # an input the cache holds, named in overwrites, is that input
        return array is not None and any(
            name in overwrites and _overlap(array, inputs[name])
            for name, _ in inputs.items()
            if _is_array(inputs[name])
        )

    grads, writes = _watched_backward(backward, dout(upstream), cache, inputs)
    for path, diff, array in writes:
        if allowed(path, array):
            continue
        if path == "dout":
            faults.append(f"backward wrote into dout: {diff} — {_OVERWRITE_HELP}")
        elif path.startswith("input "):
            faults.append(f"backward wrote into its {path}: {diff} — {_OVERWRITE_HELP}")
        else:
            faults.append(
                f"backward wrote into the cache the forward returned, at {path}: {diff} — {_OVERWRITE_HELP}"
            )
    analytic = _gradients(grads, wrt, "backward")
    unknown = [name for name in analytic if name not in inputs]
    if unknown:
        raise ValueError(f"wrt names {unknown[0]!r}, which is not one of the inputs {list(inputs)}")
    for name, grad in analytic.items():
        if (fault := _check_gradient_type(name, grad, inputs[name], "backward")) is not None:
            faults.append(fault)
    _raise(faults, "backward broke its contract")
    overwritten = [(path, array, copy) for path, array, copy in before if path.split("'")[1] in overwrites]

    def restore() -> None:
        for _, array, copy in overwritten:
            array[...] = copy

    def again(g: Any) -> dict[str, Any]:
        nonlocal cache
        restore()
        if faults_in_inputs := [p for p, _ in _changed(before)]:
            raise GradcheckError(f"the inputs changed between calls: {faults_in_inputs}")
        if "cache" in overwrites or overwritten:  # a fresh cache for each call
            cache = run_forward()[1]
        return _gradients(backward(dout(g), cache), wrt, "backward")

    first = {name: grad.copy() for name, grad in analytic.items()}
    scaled = again(other)  # a buffer reused across calls now holds other values
    for name, grad in analytic.items():
        if (diff := _difference(first[name], grad)) is not None:
            faults.append(
                f"the gradient of '{name}' returned by one call changed when backward was called again "
                f"(with another dout): {diff} — it is a buffer the backward reuses; return a new array"
            )
    _raise(faults, "backward broke its contract")
    for name in analytic:
        if (diff := _linear(first[name], scaled[name], -2.0, nondet_tol)) is not None:
            faults.append(
                f"backward does not follow its dout: the gradient of '{name}' for dout * -2 is not -2 times "
                f"its gradient for dout: {diff} — a gradient kept from an earlier call (memoized in the cache "
                "or the backward) instead of computed from the dout it is given"
            )
    _raise(faults, "backward broke its contract")
    repeat = again(upstream)
    restore()
    for name in analytic:
        if (diff := _difference(first[name], repeat[name], nondet_tol)) is not None:
            faults.append(
                f"backward is not deterministic: the gradient of '{name}' differs between two calls with the "
                f"same arguments: {diff}"
                + (
                    " (nondet_tol=... accepts differences up to a bound)"
                    if nondet_tol == 0
                    else f" (nondet_tol={nondet_tol})"
                )
            )
    _raise(faults, "backward broke its contract")
    return first, upstream


def _check_seed(seed: Any) -> None:
    if isinstance(seed, bool) or not isinstance(seed, (int, numpy.integer)) or seed < 0:
        raise (
            ValueError if isinstance(seed, (int, numpy.integer)) and not isinstance(seed, bool) else TypeError
        )(
            f"seed must be a whole number >= 0 (it seeds the random upstream gradient and directions), got {seed!r}"
        )


def _linear(base: Any, scaled: Any, factor: float, tolerance: float) -> str | None:
    """None when ``scaled`` is ``factor * base`` (within rounding, or ``tolerance`` times |factor|)."""
    xp = get_array_module()
    expected = factor * base
    bound = abs(factor) * tolerance + 1e-10 * float(xp.abs(expected).max()) if base.size else 0.0
    return _difference(expected, scaled, bound) if bound > 0 else _difference(expected, scaled)


def _overlap(a: Any, b: Any) -> bool:
    """Whether two arrays share memory (the same array, or views of one)."""
    if a is b:
        return True
    if isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray):
        return bool(numpy.shares_memory(a, b))
    shares = getattr(get_array_module(), "shares_memory", None)
    if shares is not None:
        try:
            return bool(shares(a, b))
        except (TypeError, NotImplementedError):
            pass
    return getattr(a, "base", None) is b or getattr(b, "base", None) is a


def _forward_faults(out: Any, again: Callable[[], Any] | None, given: str) -> list[str]:
    """A forward whose output is not finite, or differs between two calls with the same inputs."""
    value = out if _is_array(out) else get_array_module().asarray(float(out))
    if (where := _not_finite(value)) is not None:
        count, index, bad = where
        return [
            f"the {given}'s output is not finite at {index}: {bad} ({count} of {value.size} entries): no "
            "derivative of it can be taken (a log or a division at 0, an overflow?)"
        ]
    if again is None:
        return []
    second = again()
    second = second if _is_array(second) else get_array_module().asarray(float(second))
    if (diff := _difference(value, second)) is not None:
        return [
            f"the {given} is not deterministic: two calls with the same inputs return different outputs: {diff} "
            "— random draws (dropout, sampling) must be off or seeded inside the forward"
        ]
    return []


def gradcheck_function(
    forward: Callable[..., tuple[Array, Any]],
    backward: Callable[[Array, Any], Any],
    inputs: Mapping[str, Array],
    wrt: list[str],
    seed: int = 0,
    overwrites: Sequence[str] = (),
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check a functional pair: ``forward(**inputs) -> (out, cache)``, ``backward(dout, cache)``.

    ``wrt`` names the inputs whose gradients ``backward`` returns, in its return order (a single
    gradient may be returned bare; ``None`` entries are skipped in the list by naming them ``""``).
    First :func:`check_backward_contract` (``overwrites``, ``nondet_tol``), then the forward's
    precision, then central differences (``options`` go to :func:`gradcheck`). With
    ``kinks="nudge"``, inputs found at a non-differentiable point are moved by 1000 eps away from
    it and the whole check is run again there.
    """
    _check_options(
        options.get("eps", 1e-6),
        options.get("atol", 1e-5),
        options.get("rtol", 1e-3),
        options.get("max_entries"),
        options.get("mode", "auto"),
        options.get("kinks", "subgradient"),
        options.get("directions", DIRECTIONS),
    )
    if options.get("mode") == "fast" and options.get("max_entries") is not None:
        raise ValueError(
            f"max_entries={options['max_entries']} samples entries for mode='exhaustive'; mode='fast' checks every "
            "entry by projection: give one or the other"
        )
    analytic, upstream = check_backward_contract(forward, backward, inputs, wrt, seed, overwrites, nondet_tol)
    variables = {name: inputs[name] for name in analytic}
    first = forward(**inputs)[0]
    first = first.copy() if _is_array(first) else first
    _raise(_forward_faults(first, lambda: forward(**inputs)[0], "forward"), "forward broke its contract")
    fault = _precision_probe(lambda: forward(**inputs)[0], variables, "forward")
    if fault:
        raise GradcheckError(f"forward broke its contract:\n- {fault}")
    terms = _terms(forward(**inputs)[0], upstream)
    raising = options.pop("raise_on_failure", True)
    result = gradcheck(
        lambda: _weighted_sum(forward(**inputs)[0], upstream),
        variables,
        analytic,
        seed=seed,
        noise_scale=terms,
        **{**options, "raise_on_failure": False},
    )
    kinks = options.get("kinks", "subgradient")
    crowded = [report.name for report in result.reports if report.many_kinks]
    wrong = [report for report in result.reports if not report.passed and not report.many_kinks]
    if not wrong and kinks != "fail" and (crowded or (kinks == "nudge" and result.kinks)):
        # move the kinks' entries off them, each by its own amount (ties broken), and check there
        eps = float(options.get("eps", 1e-6))
        rng = numpy.random.default_rng(seed + 104729)
        xp = get_array_module()
        for name in crowded:
            array = inputs[name]
            amounts = xp.asarray(
                rng.uniform(1000, 2000, tuple(array.shape)) * rng.choice([-1.0, 1.0], tuple(array.shape))
            )
            array[...] = array + eps * amounts * xp.maximum(xp.abs(array), 1.0)
        kinked = [kink for kink in result.kinks if kink.name not in crowded]
        for k, kink in enumerate(kinked):
            array = inputs[kink.name]
            value = float(array[kink.index])
            array[kink.index] = value + _step(value, eps) * 1000 * (1 + k / len(kinked))
        nudged = {**options, "kinks": "subgradient", "raise_on_failure": raising}
        again = gradcheck_function(forward, backward, inputs, wrt, seed, overwrites, nondet_tol, **nudged)
        for report in again.reports:
            if report.name in crowded:
                report.note = (
                    f"non-differentiable entries (kinks) throughout '{report.name}', too many to locate one by one: "
                    "checked at the input moved off them (each entry by its own 1000 to 2000 eps)"
                    + (", as kinks='nudge' asks" if kinks == "nudge" else ", as kinks='nudge' would")
                    + (f"; {report.note}" if report.note else "")
                )
        return again
    if raising and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _terms(output: Any, upstream: Any) -> float:
    """The scale of the rounding of L = sum(G * out): the root sum of squares of its terms (their
    rounding errors, independent from one point to the next, add up as a random walk)."""
    xp = get_array_module()
    terms = xp.asarray(output) * upstream
    return float(xp.sqrt((terms * terms).sum()))


def gradcheck_module(
    module: Any,
    inputs: Mapping[str, Array],
    input_grads: Callable[[Any], Mapping[str, Array]] | None = None,
    forward: Callable[..., Array] | None = None,
    seed: int = 0,
    nondet_tol: float = 0.0,
    **options: Any,
) -> GradcheckResult:
    """Check every parameter of ``module`` (and the inputs that ``input_grads`` maps) at once.

    ``forward(**inputs)`` defaults to ``module.forward``; ``module.backward(G)`` must accumulate
    parameter gradients. ``input_grads`` turns backward's return value into {input name: grad}.
    Dropout must be off (``module.eval()``) so the function is deterministic. Before the central
    differences: the forward and backward leave the inputs and the upstream gradient as given,
    each gradient has its array's dtype, shape and library, a second forward and backward with
    the same arguments give the same gradients (bit for bit, or within ``nondet_tol``), and a
    returned input gradient is not overwritten by a later call.
    """
    _check_seed(seed)
    if not list(module.named_parameters()) and input_grads is None:
        raise ValueError(
            f"{type(module).__name__} has no parameters and input_grads is None: nothing to check; map the "
            "inputs' gradients from the backward's return value with input_grads (lambda dx: {'x': dx})"
        )
    run = forward or module.forward
    input_arrays = [(f"input '{name}'", value) for name, value in inputs.items() if _is_array(value)]
    before = _snapshot(input_arrays)

    def once(upstream: Any | None) -> tuple[Any, dict[str, Any], Any]:
        module.zero_grad()
        out = run(**inputs)
        if out is None:
            raise TypeError("the module's forward returned None (nothing), expected its output array")
        shape = _output_shape(out, "the module's forward")
        g = random_upstream(shape, seed) if upstream is None else upstream
        given = g.copy() if shape != () else float(g)
        returned = module.backward(given)
        faults = [f"forward or backward wrote into its {p}: {d}" for p, d in _changed(before)]
        if shape != () and (diff := _difference(g, given)) is not None:
            faults.append(f"backward wrote into dout (the upstream gradient it was given): {diff}")
        _raise(faults, f"{type(module).__name__} broke its contract")
        mapped: dict[str, Any] = {}
        if input_grads is not None:
            mapped = dict(_mapped(input_grads(returned), inputs))
        grads = {name: parameter.grad.copy() for name, parameter in module.named_parameters()}
        both = [name for name in mapped if name in grads]
        if both:
            raise ValueError(f"input_grads names {both[0]!r}, which is also a parameter's name")
        return g, {**grads, **mapped}, out

    upstream, analytic, out = once(None)
    faults = [fault] if (fault := _lower_precision_output(out, "the module's forward")) else []
    parameters = dict(module.named_parameters())
    for name, grad in analytic.items():
        like = parameters[name].data if name in parameters else inputs[name]
        if (fault := _check_gradient_type(name, grad, like, "backward")) is not None:
            faults.append(fault)
    _raise(faults, f"{type(module).__name__} broke its contract")
    mapped_first = {name: grad for name, grad in analytic.items() if name not in parameters}
    kept = {name: grad.copy() for name, grad in mapped_first.items()}
    once(random_upstream(_output_shape(out, "the module's forward"), seed + 7919))
    for name, grad in mapped_first.items():
        if (diff := _difference(kept[name], grad)) is not None:
            faults.append(
                f"the gradient of '{name}' returned by one backward changed when backward was called again: "
                f"{diff} — it is a buffer the backward reuses; return a new array"
            )
    _, repeat, _ = once(upstream)
    for name, grad in analytic.items():
        if (diff := _difference(kept.get(name, grad), repeat[name], nondet_tol)) is not None:
            faults.append(
                f"backward is not deterministic: the gradient of '{name}' differs between two calls with the "
                f"same arguments: {diff}"
            )
    _raise(faults, f"{type(module).__name__} broke its contract")
    variables = {name: parameter.data for name, parameter in module.named_parameters()}
    for name in analytic:
        if name not in variables:
            variables[name] = inputs[name]
    shared = _merge_shared(variables, analytic, type(module).__name__)
    first = run(**inputs)
    first = first.copy() if _is_array(first) else first
    _raise(
        _forward_faults(first, lambda: run(**inputs), "module's forward"),
        f"{type(module).__name__} broke its contract",
    )
    fault = _precision_probe(lambda: run(**inputs), variables, "the module's forward")
    if fault:
        raise GradcheckError(f"{type(module).__name__} broke its contract:\n- {fault}")
    raising = options.pop("raise_on_failure", True)
    result = gradcheck(
        lambda: _weighted_sum(run(**inputs), upstream),
        variables,
        analytic,
        seed=seed,
        noise_scale=_terms(first, upstream),
        **{**options, "raise_on_failure": False},
    )
    for report in result.reports:
        if report.name in shared:
            others = ", ".join(repr(name) for name in shared[report.name])
            report.note = (
                f"'{report.name}' shares its memory with {others} (one array, tied weights): checked once, against "
                "the sum of their gradients" + (f"; {report.note}" if report.note else "")
            )
    if raising and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _merge_shared(variables: dict[str, Array], analytic: dict[str, Any], owner: str) -> dict[str, list[str]]:
    """Variables that are one array (parameters sharing their data: tied weights) merged into the first,
    checked against the sum of their gradients; partly overlapping ones refused, named."""
    shared: dict[str, list[str]] = {}
    names = list(variables)
    for k, first in enumerate(names):
        if first not in variables:
            continue
        for second in names[k + 1 :]:
            if second not in variables or not _overlap(variables[first], variables[second]):
                continue
            a, b = variables[first], variables[second]
            same = a is b or (
                tuple(a.shape) == tuple(b.shape)
                and getattr(a, "strides", None) == getattr(b, "strides", None)
                and _data_pointer(a) == _data_pointer(b)
            )
            if not same:
                raise GradcheckError(
                    f"{owner}: '{first}' and '{second}' share part of their memory (overlapping views of one "
                    "array): moving an entry of one moves the other, so neither gradient can be checked alone"
                )
            analytic[first] = analytic[first] + analytic.pop(second)
            del variables[second]
            shared.setdefault(first, []).append(second)
    return shared


def _data_pointer(array: Any) -> int | None:
    interface = getattr(array, "__array_interface__", None) or getattr(
        array, "__cuda_array_interface__", None
    )
    if interface is not None:
        return int(interface["data"][0])
    data = getattr(array, "data", None)
    return getattr(data, "ptr", None)


def _mapped(mapped: Any, inputs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    if not isinstance(mapped, Mapping):
        raise TypeError(f"input_grads must return {{input name: gradient}}, got {type(mapped).__name__}")
    for name, grad in mapped.items():
        if name not in inputs:
            raise ValueError(f"input_grads names {name!r}, which is not one of the inputs {list(inputs)}")
        yield name, grad
