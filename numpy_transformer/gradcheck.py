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

Non-differentiable points. Where an entry fails, its one-sided slopes (L(x_i + eps) - L(x_i)) / eps
and (L(x_i) - L(x_i - eps)) / eps are compared at eps and 2 eps: a smooth curve's gap between them
is eps L'' and doubles with the step; a kink's stays, or grows other than twofold. At a kink the
analytic value passes when it lies between the two slopes (a subgradient: relu or abs at 0, a max
with ties), and the report says so.

Two modes. ``exhaustive`` moves every entry (two forward calls each) and names the worst. ``fast``
checks directional derivatives: for a random +-1 direction u over a tensor, sum(analytic * u)
against (L(x + eps u) - L(x - eps u)) / (2 eps), two forward calls for every entry at once, so one
wrong entry among millions shifts the sum by its whole error. A failing projection is bisected
(halves of the entries, the half that still disagrees kept) down to the wrong entries, which are
then checked one by one and named. ``auto`` (the default) is exhaustive up to
:data:`AUTO_EXHAUSTIVE_ENTRIES` entries in all, fast above.

:func:`gradcheck_function` and :func:`gradcheck_module` also check the contract of a backward pass
before any difference is taken (:func:`check_backward_contract`): the forward leaves its inputs as
given and computes in the precision it is given; the backward leaves ``dout``, the inputs and the
cache as given, returns each gradient in its input's dtype, shape and array library, returns the same
bits for the same arguments, and returns arrays that a later call does not overwrite.
"""

from __future__ import annotations

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
MAX_KINKS = 128  # fast mode: the most non-differentiable entries located before it gives up
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

    def __str__(self) -> str:
        low, high = sorted((self.left, self.right))
        verdict = (
            f"a subgradient (between {low:.6g} and {high:.6g})"
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


def _kink(
    loss: Callable[[], float], array: Array, index: tuple[int, ...], eps: float, base: float
) -> tuple[float, float, bool]:
    """The one-sided slopes at ``index`` (step eps) and whether they disagree as at a kink: their gap
    stays as the step doubles (a smooth curve's gap doubles with the step)."""
    original = float(array[index])
    values = {}
    for step in (eps, -eps, 2 * eps, -2 * eps):
        array[index] = original + step
        values[step] = _scalar(loss())
    array[index] = original
    right, left = (values[eps] - base) / eps, (base - values[-eps]) / eps
    gap = right - left
    gap2 = (values[2 * eps] - base) / (2 * eps) - (base - values[-2 * eps]) / (2 * eps)
    scale = max(abs(right), abs(left), 1e-300)
    noise = 64 * FLOAT64_EPS * max(abs(base), 1.0) / eps
    # smooth: the gap is h f'' and doubles with the step; at a kink it stays, or grows other than twofold
    is_kink = abs(gap) > max(1e-6 * scale, noise) and not 0.8 <= gap2 / (2 * gap) <= 1.25
    return left, right, is_kink


def _between(value: float, left: float, right: float, atol: float, rtol: float) -> bool:
    low, high = sorted((left, right))
    slack = atol + rtol * max(abs(low), abs(high))
    return low - slack <= value <= high + slack


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
    directions: int = 2,
    picture: str | Path | None = None,
) -> GradcheckResult:
    """Compare ``analytic[name]`` with central differences of ``loss()`` in each of ``variables``.

    ``loss`` recomputes the scalar from the arrays in ``variables``, which are perturbed in place
    and restored. ``max_entries`` samples that many entries per tensor (all when None; it implies
    the exhaustive mode). ``mode``: "exhaustive" (every entry), "fast" (``directions`` random
    projections per tensor, a failure bisected to the wrong entries) or "auto" (exhaustive up to
    :data:`AUTO_EXHAUSTIVE_ENTRIES` entries in all). ``kinks``: at a non-differentiable entry
    "subgradient" passes an analytic value between the one-sided slopes and reports the entry,
    "fail" fails it (``"nudge"`` acts as "subgradient" here; :func:`gradcheck_function` moves such
    inputs). ``picture``: on failure, a PNG of the error over each failing tensor is saved there
    (needs matplotlib) and the message names it. On failure raises :class:`GradcheckError` naming
    the tensor, worst index, both values and errors.
    """
    _check_options(eps, atol, rtol, max_entries, mode, kinks, directions)
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
    largest = 1e-300  # the largest |analytic| or |numeric| of any tensor: the scale of relative errors
    for name, array in variables.items():
        if mode == "exhaustive":
            report, scale = _exhaustive(
                loss, name, array, analytic[name], base, eps, atol, rtol, max_entries, rng, kinks
            )
        else:
            report, scale = _fast(
                loss, name, array, analytic[name], base, eps, atol, rtol, rng, kinks, directions
            )
        largest = max(largest, scale)
        result.reports.append(report)
    for report in result.reports:
        report.relative_error = report.max_abs_error / largest
    if not result.passed and picture is not None:
        result.picture = _draw(result, variables, analytic, Path(picture))
    if raise_on_failure and not result.passed:
        raise GradcheckError("gradient check failed:\n" + str(result))
    return result


def _exhaustive(
    loss: Callable[[], float],
    name: str,
    array: Array,
    analytic: Array,
    base: float,
    eps: float,
    atol: float,
    rtol: float,
    max_entries: int | None,
    rng: numpy.random.Generator,
    kinks: str,
) -> tuple[TensorReport, float]:
    grad = to_numpy(analytic)
    indices = _entries(tuple(array.shape), max_entries, rng)
    numeric = numpy.empty(len(indices))
    for k, index in enumerate(indices):
        original = float(array[index])
        array[index] = original + eps
        plus = _scalar(loss())
        array[index] = original - eps
        minus = _scalar(loss())
        array[index] = original
        numeric[k] = (plus - minus) / (2 * eps)
    analytic_values = numpy.array([grad[index] for index in indices], dtype=numpy.float64)
    errors = numpy.abs(analytic_values - numeric)
    bad = errors > atol + rtol * numpy.abs(numeric)
    found: list[KinkReport] = []
    # a kink's central difference is no error where the analytic value is a subgradient
    judged = errors.copy()
    for k in (int(i) for i in numpy.flatnonzero(bad)):
        left, right, is_kink = _kink(loss, array, indices[k], eps, base)
        if is_kink:
            valid = _between(float(analytic_values[k]), left, right, atol, rtol)
            found.append(KinkReport(name, indices[k], left, right, float(analytic_values[k]), valid))
            if valid and kinks != "fail":
                bad[k] = False
                judged[k] = 0.0
    worst = int(numpy.argmax(judged - (atol + rtol * numpy.abs(numeric))))
    order = [int(k) for k in numpy.argsort(-judged)[:5]]
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
    )
    scale = max(numpy.abs(analytic_values).max(initial=0.0), numpy.abs(numeric).max(initial=0.0))
    return report, float(scale)


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
) -> tuple[TensorReport, float]:
    """Directional derivatives along random +-1 directions; a failing one bisected to its entries."""
    xp = get_array_module()
    shape, size = tuple(array.shape), int(array.size)
    original = array.copy()
    grad = xp.asarray(analytic, dtype=xp.float64).reshape(-1)
    largest_grad = float(xp.abs(grad).max())
    typical_grad = float(xp.sqrt((grad * grad).mean()))
    # an entry wrong by more than this (plus the rounding noise of the loss) shifts a projection past it
    tolerance = atol + rtol * typical_grad

    def directional(u: Array, lo: int, hi: int) -> tuple[float, float, float]:
        """(analytic, numeric, noise) of the projection on the entries lo:hi along u."""
        step = xp.zeros(size, dtype=xp.float64)
        step[lo:hi] = u[lo:hi]
        values = []
        for h in (eps, -eps):
            array[...] = original + (h * step).reshape(shape)
            values.append(_scalar(loss()))
        array[...] = original
        numeric = (values[0] - values[1]) / (2 * eps)
        noise = 64 * FLOAT64_EPS * max(abs(values[0]), abs(values[1]), abs(base), 1.0) / eps
        return float((grad[lo:hi] * u[lo:hi]).sum()), numeric, noise

    excluded: set[int] = set()
    found: list[KinkReport] = []
    located: list[tuple[int, float, float]] = []  # (flat index, analytic, numeric) of wrong entries
    worst_a = worst_n = 0.0
    worst_err = 0.0
    note = ""
    many_kinks = False
    leaves: list[int] = []
    for _ in range(directions):
        u = xp.asarray(rng.integers(0, 2, size) * 2.0 - 1.0)
        if excluded:
            u[xp.asarray(sorted(excluded))] = 0.0
        a, n, noise = directional(u, 0, size)
        while abs(a - n) > tolerance + noise and not located:
            # bisect: keep every half whose projection still disagrees, down to single entries
            stack = [(0, size)]
            leaves = []
            while stack and len(leaves) < MAX_LOCATED:
                lo, hi = stack.pop()
                if hi - lo == 1:
                    leaves.append(lo)
                    continue
                mid = (lo + hi) // 2
                halves = []
                for part in ((lo, mid), (mid, hi)):
                    pa, pn, pnoise = directional(u, *part)
                    if abs(pa - pn) > tolerance + pnoise:
                        halves.append((abs(pa - pn), part))
                stack.extend(part for _, part in sorted(halves))  # the larger disagreement first
            if not leaves:  # no half disagrees alone: the error is spread thin over many entries
                located.append((-1, a, n))
                break
            for flat in leaves:
                index = _index(flat, shape)
                entry_a = float(grad[flat])
                left, right, is_kink = _kink(loss, array, index, eps, base)
                entry_n = (left + right) / 2
                excluded.add(flat)
                if is_kink:
                    valid = _between(entry_a, left, right, atol, rtol)
                    found.append(KinkReport(name, index, left, right, entry_a, valid))
                    if valid and kinks != "fail":
                        continue
                if is_kink or abs(entry_a - entry_n) > atol + rtol * abs(entry_n):
                    located.append((flat, entry_a, entry_n))
            if located:
                break
            if len(found) >= MAX_KINKS:  # only kinks so far, and too many to locate one by one
                many_kinks = True
                located.append((-1, a, n))
                break
            u[xp.asarray(sorted(excluded))] = 0.0  # the rest must agree without the kinks
            a, n, noise = directional(u, 0, size)
        if located:
            break
        if abs(a - n) > worst_err:
            worst_a, worst_n, worst_err = a, n, abs(a - n)
    passed = not located
    if located:
        entries = [entry for entry in located if entry[0] >= 0]
        if entries:
            flat, worst_a, worst_n = max(entries, key=lambda e: abs(e[1] - e[2]))
            worst_index = tuple(int(i) for i in numpy.unravel_index(flat, shape))
            note = (
                f"located by bisecting the projection: {len(entries)} wrong entr{'y' if len(entries) == 1 else 'ies'}"
                + (
                    f" (stopped at {MAX_LOCATED}: run mode='exhaustive' for all)"
                    if len(leaves) >= MAX_LOCATED
                    else ""
                )
            )
        else:
            _, worst_a, worst_n = located[-1]
            worst_index = ()
            note = (
                f"more than {MAX_KINKS} non-differentiable entries (kinks) along the projection: the fast mode "
                "cannot tell them all apart from a wrong entry; run mode='exhaustive' or kinks='nudge'"
                if many_kinks
                else f"the projection on random directions disagrees (analytic {worst_a:.10g}, numeric {worst_n:.10g}) "
                "but no single entry does: many entries are slightly wrong; run mode='exhaustive' to see them"
            )
        worst_err = abs(worst_a - worst_n)
        worst_list = [
            (tuple(int(i) for i in numpy.unravel_index(f, shape)), ea, en)
            for f, ea, en in sorted(entries, key=lambda e: -abs(e[1] - e[2]))[:5]
        ]
    else:
        worst_index, worst_list = (), []
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
    )
    return report, max(largest_grad, abs(worst_n) if worst_index else 0.0)


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
    elif hasattr(value, "__dict__") and not callable(value) and type(value).__module__ != "builtins":
        for key, item in vars(value).items():
            yield from _arrays_in(item, f"{path}.{key}", depth + 1)


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
    watched = [("dout", dout)] if _is_array(dout) else []
    watched += [(f"input '{name}'", value) for name, value in (inputs or {}).items() if _is_array(value)]
    snapshot = _snapshot(watched + list(_arrays_in(cache, "cache")))
    returned = backward(dout, cache)
    return returned, _changed(snapshot)


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
    probed = suspicious = 0
    probed_name = ""
    for name, array in variables.items():
        probed_name = name
        flat = array.reshape(-1)
        picks = numpy.unique(to_numpy(xp.argsort(xp.abs(flat))[-4:])) if array.size > 4 else range(array.size)
        for k in picks:
            index = _index(int(k), tuple(array.shape))
            original = float(array[index])
            if original == 0.0:
                continue
            array[index] = original * (1 + 2.0**-30)
            tiny = output()
            array[index] = original + 1e-3 * max(abs(original), 1.0)
            big = output()
            array[index] = original
            if _same(big, base):
                continue  # the output does not depend on this entry here
            probed += 1
            suspicious += _same(tiny, base)
        if probed >= 2:
            break
    if probed >= 2 and suspicious == probed:
        return (
            f"{given} computes in lower precision than float64: a relative change of 2^-30 in "
            f"'{probed_name}' (which float64 resolves and float32 does not) leaves its output "
            f"unchanged, bit for bit, at all {probed} entries probed; finite differences of such a function are "
            "rounding noise, not a gradient. Compute in the input's dtype"
        )
    return None


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
            "finite differences of a float32 function are rounding noise, not a gradient"
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
    input_arrays = [(f"input '{name}'", value) for name, value in inputs.items() if _is_array(value)]
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
    upstream = random_upstream(shape, seed)
    other = random_upstream(shape, seed + 7919)

    def dout(g: Any) -> Any:
        return float(g) if shape == () else g.copy()

    grads, writes = backward_writes(backward, dout(upstream), cache, inputs)
    for path, diff in writes:
        if path == "dout":
            if "dout" not in overwrites:
                faults.append(f"backward wrote into dout: {diff} — {_OVERWRITE_HELP}")
        elif path.startswith("input "):
            if path.split("'")[1] not in overwrites:
                faults.append(f"backward wrote into its {path}: {diff} — {_OVERWRITE_HELP}")
        elif "cache" not in overwrites:
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

    def again(g: Any) -> dict[str, Any]:
        nonlocal cache
        if faults_in_inputs := [p for p, _ in _changed(before)]:
            raise GradcheckError(f"the inputs changed between calls: {faults_in_inputs}")
        if "cache" in overwrites or any(n in overwrites for n in inputs):  # a fresh cache for each call
            for _, array, copy in before:
                array[...] = copy
            cache = run_forward()[1]
        return _gradients(backward(dout(g), cache), wrt, "backward")

    first = {name: grad.copy() for name, grad in analytic.items()}
    again(other)  # a different dout: a buffer reused across calls now holds other values
    for name, grad in analytic.items():
        if (diff := _difference(first[name], grad)) is not None:
            faults.append(
                f"the gradient of '{name}' returned by one call changed when backward was called again "
                f"(with another dout): {diff} — it is a buffer the backward reuses; return a new array"
            )
    _raise(faults, "backward broke its contract")
    repeat = again(upstream)
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
        options.get("directions", 2),
    )
    analytic, upstream = check_backward_contract(forward, backward, inputs, wrt, seed, overwrites, nondet_tol)
    variables = {name: inputs[name] for name in analytic}
    fault = _precision_probe(lambda: forward(**inputs)[0], variables, "forward")
    if fault:
        raise GradcheckError(f"forward broke its contract:\n- {fault}")
    result = gradcheck(
        lambda: _weighted_sum(forward(**inputs)[0], upstream), variables, analytic, seed=seed, **options
    )
    if options.get("kinks") == "nudge" and result.kinks:
        eps = options.get("eps", 1e-6)
        for kink in result.kinks:
            array = inputs[kink.name]
            array[kink.index] = float(array[kink.index]) + 1000 * eps
        nudged = {**options, "kinks": "subgradient"}
        return gradcheck_function(forward, backward, inputs, wrt, seed, overwrites, nondet_tol, **nudged)
    return result


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
    fault = _precision_probe(lambda: run(**inputs), variables, "the module's forward")
    if fault:
        raise GradcheckError(f"{type(module).__name__} broke its contract:\n- {fault}")
    return gradcheck(
        lambda: _weighted_sum(run(**inputs), upstream), variables, analytic, seed=seed, **options
    )


def _mapped(mapped: Any, inputs: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    if not isinstance(mapped, Mapping):
        raise TypeError(f"input_grads must return {{input name: gradient}}, got {type(mapped).__name__}")
    for name, grad in mapped.items():
        if name not in inputs:
            raise ValueError(f"input_grads names {name!r}, which is not one of the inputs {list(inputs)}")
        yield name, grad
