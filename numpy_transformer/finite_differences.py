"""Float64 central differences against the analytic gradient: every entry (exhaustive), or random
directions over the whole tensor with a failure bisected down to its entries (fast); one-sided slopes
telling a non-differentiable point from a wrong gradient, and tied entries checked together. The
entry point is :func:`numpy_transformer.gradcheck.gradcheck`."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy

from .backend import Array, get_array_module, to_numpy
from .backward_contract import FLOAT64_EPS, unravel

MAX_LOCATED = 16  # fast mode: the most disagreeing entries one bisection looks for


WIDESPREAD_LOCATED = 5  # fast mode: the wrong entries located when most of a tensor is wrong


MAX_KINKS = 128  # fast mode: the most non-differentiable entries located before it gives up


DIRECTIONS = 4  # fast mode: random directions per tensor


NOISE_FACTOR = 16  # rounding allowance of a difference: NOISE_FACTOR eps_mach sum|terms| / step


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
    value = loss_value(loss())
    for index, original in zip(indices, originals):
        array[index] = original
    return value, taken


def _sides(
    loss: Callable[[], float], array: Array, indices: Sequence[tuple[int, ...]], eps: float, base: float
) -> tuple[float, float, float, float, float]:
    """One-sided slopes (left, right) at the step h and at 2 h with the entries of ``indices`` moved
    together, and h."""
    h = step_at(float(array[indices[0]]), eps)
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


def failed_tensor(
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


def numeric_entries(
    loss: Callable[[], float], array: Array, indices: list[tuple[int, ...]], eps: float
) -> tuple[list[tuple[int, ...]], Any, Any]:
    """Central differences at each of ``indices``: (indices, numeric values, steps)."""
    numeric = numpy.empty(len(indices))
    steps = numpy.empty(len(indices))
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
    return indices, numeric, steps


def check_every_entry(
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


def check_by_projections(
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
        plus = loss_value(loss())
        array[...] = low.reshape(shape)
        minus = loss_value(loss())
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
                    _, entry_n, _ = numeric_entries(loss, array, [unravel(flat, shape)], eps)
                    located.append((flat, float(grad[flat]), float(entry_n[0])))
                break
            for flat in leaves:
                index = unravel(flat, shape)
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
        worst_index = unravel(flat, shape)
        worst_list = [(unravel(f, shape), ea, en) for f, ea, en in entries[:5]]
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


def draw_errors(
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
    try:  # a failure to save is said in the message: it must never hide the failed check itself
        path.parent.mkdir(parents=True, exist_ok=True)
        # the format named, so that a name without a suffix is the file written (not name.png)
        figure.savefig(path, dpi=100, format=path.suffix[1:].lower() or "png")
    except (OSError, ValueError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        return f"(no picture saved to {path}: {reason})"
    finally:
        plt.close(figure)
    return str(path)


def loss_value(value: Any) -> float:
    """The loss as a float; anything but one number is a TypeError naming what came back."""
    size = getattr(value, "size", 1)
    if size != 1 or isinstance(value, (str, bytes, list, tuple, dict)) or value is None:
        shape = getattr(value, "shape", type(value).__name__)
        raise TypeError(f"loss() must return one number, got {shape}")
    return float(value)
