"""The fast mode: directional derivatives of the loss along random directions over a whole tensor,
two forward calls for every entry at once; a failing projection bisected (halves of the entries,
the half that still disagrees kept) down to the wrong entries, which are then checked one by one.

The stages of :func:`check_by_projections`, each on a :class:`ProjectedTensor`: draw a direction
(:meth:`~ProjectedTensor.direction`), measure the projection (:meth:`~ProjectedTensor.measure`),
find the blocks of entries that disagree (:func:`disagreeing_blocks`), bisect them to single
entries (:func:`bisect`), judge those entries (:func:`judge_entries`), and write the report
(:func:`projection_report`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy

from ..backend import Array, get_array_module
from .differences import (
    Tolerances,
    between,
    kink_at,
    loss_value,
    numeric_entries,
    rounding_allowance,
    unravel,
)
from .report import KinkReport, TensorReport, percent

MAX_LOCATED = 16  # the most disagreeing entries one bisection looks for


WIDESPREAD_LOCATED = 5  # the wrong entries located when most of a tensor is wrong


MAX_KINKS = 128  # the most non-differentiable entries located before it gives up


DIRECTIONS = 4  # random directions per tensor


BLOCKS = 16  # the contiguous blocks a failing projection is first split into


Measured = tuple[float, float, float, float, float]  # (analytic, numeric, noise, loss up, loss down)


class ProjectedTensor:
    """One tensor under projection: its entries, its analytic gradient, and the loss moved along a
    direction over a range of its (flattened) entries."""

    def __init__(
        self,
        loss: Callable[[], float],
        name: str,
        array: Array,
        analytic: Array,
        base: float,
        tolerances: Tolerances,
        scale: float,
        largest: float,
    ) -> None:
        xp = get_array_module()
        self.loss, self.name, self.array, self.base = loss, name, array, base
        self.eps, self.atol, self.rtol = tolerances
        self.scale, self.largest = scale, largest
        self.shape, self.size = tuple(array.shape), int(array.size)
        self.original = array.copy()
        self.flat = self.original.reshape(-1)
        self.grad = xp.asarray(analytic, dtype=xp.float64).reshape(-1)
        self.largest_grad = float(xp.abs(self.grad).max())
        self.typical_grad = float(xp.sqrt((self.grad * self.grad).mean()))
        self.magnitude = xp.maximum(xp.abs(self.flat), 1.0)
        self.excluded = xp.zeros(self.size, dtype=bool)  # entries judged alone: left out of later projections

    def direction(self, rng: numpy.random.Generator) -> Array:
        """v_i = s_i (1 + |z_i|) max(1, |x_i|) with a random sign s_i and z_i ~ N(0, 1), zero on the
        excluded entries. |v_i| >= 1, so one entry wrong by e shifts the projection by at least e,
        and two entries whose errors cancel (a gradient swapped between them) cancel in one
        direction with probability at most 0.57 tolerance / e (the density of |z_i| - |z_j| is at
        most 1/sqrt(pi))."""
        xp = get_array_module()
        signs = xp.asarray(rng.integers(0, 2, self.size) * 2.0 - 1.0)
        v = signs * (1.0 + xp.abs(xp.asarray(rng.standard_normal(self.size)))) * self.magnitude
        v[self.excluded] = 0.0
        return v

    def measure(self, v: Array, lo: int, hi: int, multiple: float = 1.0) -> Measured:
        """(analytic, numeric, noise, loss moved up, loss moved down) of the projection on lo:hi."""
        xp = get_array_module()
        step = xp.zeros(self.size, dtype=xp.float64)
        step[lo:hi] = (multiple * self.eps) * v[lo:hi]
        high, low = self.flat + step, self.flat - step
        self.array[...] = high.reshape(self.shape)
        plus = loss_value(self.loss())
        self.array[...] = low.reshape(self.shape)
        minus = loss_value(self.loss())
        self.array[...] = self.original
        taken = high - low  # the steps actually taken, after rounding
        h = 2 * multiple * self.eps
        numeric = (plus - minus) / h
        noise = rounding_allowance(max(self.scale, abs(plus), abs(minus)), multiple * self.eps)
        return float((self.grad * taken).sum()) / h, numeric, noise, plus, minus

    def agrees(self, analytic: float, numeric: float, v: Array, noise: float) -> bool:
        """Whether a projection's analytic and numeric values agree within the tolerance (NaN never)."""
        xp = get_array_module()
        norm = float(xp.sqrt((v * v).sum()))
        gradient_scale = max(self.largest, self.largest_grad, abs(numeric) / max(norm, 1e-300))
        allowed = self.atol * min(1.0, gradient_scale) + self.rtol * self.typical_grad + noise
        return abs(analytic - numeric) <= allowed

    def part_agrees(self, v: Array, lo: int, hi: int) -> tuple[bool, float]:
        """Whether the projection on lo:hi agrees, and by how much it misses."""
        analytic, numeric, noise, _, _ = self.measure(v, lo, hi)
        return self.agrees(analytic, numeric, v[lo:hi], noise), abs(analytic - numeric)

    def kinky(self, v: Array) -> bool:
        """Whether the loss has kinks along ``v``: its one-sided slopes' gap stays as the step doubles
        (a smooth curve's gap doubles), or its central differences at two steps disagree."""
        _, n1, noise1, plus1, minus1 = self.measure(v, 0, self.size, 1.0)
        _, n2, noise2, plus2, minus2 = self.measure(v, 0, self.size, 2.0)
        gap = ((plus1 - self.base) - (self.base - minus1)) / self.eps
        gap2 = ((plus2 - self.base) - (self.base - minus2)) / (2 * self.eps)
        largest = max(abs(n1), abs(n2), 1e-300)
        kink = abs(gap) > max(4 * noise1, 1e-6 * largest) and not 0.8 <= gap2 / (2 * gap) <= 1.25
        return kink or abs(n2 - n1) > 1e-3 * largest + 4 * max(noise1, noise2)


@dataclass
class Search:
    """What the projections found in one tensor."""

    found: list[KinkReport] = field(default_factory=list)
    located: list[tuple[int, float, float]] = field(default_factory=list)  # (flat index, analytic, numeric)
    many_kinks: bool = False
    widespread: tuple[float, float, int, int] | None = None  # (analytic, numeric, blocks disagreeing, blocks)
    stopped: bool = False  # the bisection stopped at its limit of entries
    not_finite: float | None = None  # the numeric projection, when it is not finite
    last: tuple[float, float] = (0.0, 0.0)  # the last projection measured: (analytic, numeric)
    worst: tuple[float, float] = (0.0, 0.0)  # the passing projection that missed most

    @property
    def failed(self) -> bool:
        return bool(self.located or self.many_kinks or self.widespread or self.not_finite is not None)


def blocks(size: int, count: int = BLOCKS) -> list[tuple[int, int]]:
    """``count`` contiguous ranges covering 0..size (fewer when size is smaller)."""
    bounds = sorted({size * k // count for k in range(count + 1)})
    return [(lo, hi) for lo, hi in itertools.pairwise(bounds) if hi > lo]


def disagreeing_blocks(tensor: ProjectedTensor, v: Array) -> tuple[list[tuple[float, tuple[int, int]]], int]:
    """The blocks of entries whose projection disagrees, each with its miss, and how many blocks there are."""
    parts = blocks(tensor.size)
    disagree = []
    for lo, hi in parts:
        agrees, miss = tensor.part_agrees(v, lo, hi)
        if not agrees:
            disagree.append((miss, (lo, hi)))
    return disagree, len(parts)


def bisect(
    tensor: ProjectedTensor, v: Array, disagree: list[tuple[float, tuple[int, int]]], limit: int
) -> list[int]:
    """Halve each disagreeing range, keeping the halves that still disagree, the larger miss first,
    down to at most ``limit`` single entries (their flat indices)."""
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
            agrees, miss = tensor.part_agrees(v, *part)
            if not agrees:
                halves.append((miss, part))
        stack.extend(part for _, part in sorted(halves))
    return leaves


def judge_entries(tensor: ProjectedTensor, leaves: list[int], kinks: str, search: Search) -> None:
    """Each located entry's one-sided slopes: a kink whose analytic value is a subgradient passes
    (unless ``kinks`` is "fail"); any other disagreeing entry is wrong. Every entry judged is left
    out of later projections."""
    for flat in leaves:
        index = unravel(flat, tensor.shape)
        entry_a = float(tensor.grad[flat])
        left, right, is_kink = kink_at(
            tensor.loss, tensor.array, index, tensor.eps, tensor.base, tensor.scale, tensor.rtol
        )
        entry_n = (left + right) / 2
        tensor.excluded[flat] = True
        if is_kink:
            valid = between(entry_a, left, right, tensor.atol, tensor.rtol)
            search.found.append(KinkReport(tensor.name, index, left, right, entry_a, valid))
            if valid and kinks != "fail":
                continue
        allowed = tensor.atol * min(1.0, tensor.largest) + tensor.rtol * abs(entry_n)
        if is_kink or not abs(entry_a - entry_n) <= allowed:
            search.located.append((flat, entry_a, entry_n))


def sample_entries(tensor: ProjectedTensor, rng: numpy.random.Generator, search: Search) -> None:
    """An error spread too thin for any half to disagree alone: a few entries sampled and measured."""
    picks = sorted({int(rng.integers(0, tensor.size)) for _ in range(WIDESPREAD_LOCATED)})
    for flat in picks:
        numeric = numeric_entries(
            tensor.loss, tensor.array, [unravel(flat, tensor.shape)], tensor.eps
        ).numeric
        search.located.append((flat, float(tensor.grad[flat]), float(numeric[0])))


def locate(
    tensor: ProjectedTensor,
    v: Array,
    measured: tuple[float, float],
    rng: numpy.random.Generator,
    kinks: str,
    search: Search,
) -> bool:
    """Locate the entries behind a failing projection ``measured`` along ``v``; True when the search
    is over (wrong entries found, or kinks or an error everywhere), False to measure again without
    the kinks just found."""
    disagree, parts = disagreeing_blocks(tensor, v)
    limit = MAX_LOCATED
    if parts >= 8 and len(disagree) >= parts // 2:
        # wrong (or kinks) over most of the tensor: a few entries located stand for the rest
        if tensor.kinky(v):
            search.many_kinks = True
            return True
        search.widespread = (*measured, len(disagree), parts)
        limit = WIDESPREAD_LOCATED
    leaves = bisect(tensor, v, disagree, limit)
    search.stopped = len(leaves) >= limit
    if not leaves:  # no half disagrees alone: the error is spread thin over many entries
        search.widespread = (*measured, 0, 0)
        sample_entries(tensor, rng, search)
        return True
    judge_entries(tensor, leaves, kinks, search)
    if search.located:
        return True
    if len(search.found) >= MAX_KINKS:  # only kinks so far, and too many to locate one by one
        search.many_kinks = True
        return True
    return False


def search_directions(
    tensor: ProjectedTensor, rng: numpy.random.Generator, kinks: str, directions: int
) -> Search:
    """Measure ``directions`` random projections, locating the entries behind any that fails."""
    search = Search()
    worst_err = 0.0
    for _ in range(directions):
        v = tensor.direction(rng)
        a, n, noise, _, _ = tensor.measure(v, 0, tensor.size)
        while not tensor.agrees(a, n, v, noise) and not search.located:
            if not math.isfinite(n):
                search.not_finite = n
                break
            if locate(tensor, v, (a, n), rng, kinks, search):
                break
            v[tensor.excluded] = 0.0  # the rest must agree without the kinks
            a, n, noise, _, _ = tensor.measure(v, 0, tensor.size)
        search.last = (a, n)
        if search.failed:
            break
        if abs(a - n) > worst_err:
            search.worst, worst_err = (a, n), abs(a - n)
    return search


def _widespread_note(search: Search, entries: list[tuple[int, float, float]]) -> tuple[str, float]:
    """The note of an error spread over many entries, and the relative error it reports."""
    assert search.widespread is not None
    pa, pn, count, parts = search.widespread
    spread = f"{count} of {parts} blocks of entries disagree" if parts else "no half of it disagrees alone"
    projected = abs(pa - pn) / max(abs(pa), abs(pn), 1e-300)
    wrong = [abs(ea - en) / max(abs(ea), abs(en), 1e-300) for _, ea, en in entries]
    relative = max(wrong, default=projected)
    if entries and parts:
        plural = "y" if len(entries) == 1 else "ies"
        head = f"located by bisecting the projection: {len(entries)} wrong entr{plural}"
    elif entries:
        head = f"{len(entries)} entries sampled"
    else:
        head = "no entry located"
    note = (
        f"{head}, each wrong by up to {percent(relative)} of its value; the error is spread over many "
        f"entries ({spread}; the projection on a random direction is wrong by {percent(projected)}: "
        f"analytic {pa:.10g}, numeric {pn:.10g}): run mode='exhaustive' to see them all"
    )
    return note, relative


def projection_report(tensor: ProjectedTensor, search: Search) -> TensorReport:
    """The tensor's report: its worst located entry (or projection) and a note saying what was found."""
    entries = sorted(search.located, key=lambda e: -abs(e[1] - e[2]))
    worst_a, worst_n = search.worst
    worst_index: tuple[int, ...] = ()
    if entries:
        flat, worst_a, worst_n = entries[0]
        worst_index = unravel(flat, tensor.shape)
    note, fixed_relative = "", None
    if search.not_finite is not None:
        worst_a, worst_n = search.last[0], search.not_finite
        note = "the loss is not finite one step away from the point checked (along a random direction)"
    elif search.widespread is not None:
        note, fixed_relative = _widespread_note(search, entries)
        if not entries:
            worst_a, worst_n = search.widespread[:2]
    elif search.many_kinks:
        worst_a, worst_n = search.last
        note = (
            f"non-differentiable entries (kinks) throughout the tensor (more than {MAX_KINKS}, or most blocks of "
            "entries): the fast mode cannot tell them apart from wrong entries one by one"
        )
    elif entries:
        note = (
            f"located by bisecting the projection: {len(entries)} wrong entr{'y' if len(entries) == 1 else 'ies'}"
            + (f" (stopped at {MAX_LOCATED}: run mode='exhaustive' for all)" if search.stopped else "")
        )
    return TensorReport(
        name=tensor.name,
        checked=tensor.size,
        worst_index=worst_index,
        analytic=worst_a,
        numeric=worst_n,
        max_abs_error=abs(worst_a - worst_n) if math.isfinite(worst_n) else math.inf,
        relative_error=0.0,
        passed=not search.failed,
        mode="fast",
        kinks=search.found,
        worst=[(unravel(f, tensor.shape), ea, en) for f, ea, en in entries[:5]],
        note=note,
        fixed_relative=fixed_relative,
        many_kinks=search.many_kinks,
    )


def check_by_projections(
    loss: Callable[[], float],
    name: str,
    array: Array,
    analytic: Array,
    base: float,
    tolerances: Tolerances,
    rng: numpy.random.Generator,
    kinks: str,
    directions: int,
    scale: float,
    largest: float,
) -> tuple[TensorReport, float]:
    """Check ``array``'s gradient by ``directions`` random projections (``tolerances``: eps, atol,
    rtol); a failing one bisected to its entries. Returns the report and the tensor's gradient
    scale (its largest |analytic| or sampled |numeric|)."""
    tensor = ProjectedTensor(loss, name, array, analytic, base, tolerances, scale, largest)
    search = search_directions(tensor, rng, kinks, directions)
    sampled = max((abs(en) for _, _, en in search.located), default=0.0)
    return projection_report(tensor, search), max(tensor.largest_grad, sampled)
