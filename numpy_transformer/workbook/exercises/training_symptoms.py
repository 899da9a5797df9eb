"""What a wrong training rung's numbers show where no known mistake reproduces them: which part of a
schedule is wrong and what it does instead, the constant that clipping's scale or AdamW's decay uses in
place of the textbook's. Each reads the graded calls (Observed) and gives the key of
the sentence that names the cause and the numbers the sentence shows, or None where its pattern does
not hold on every call it reads."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy

from ...backend import to_numpy


class Observed(NamedTuple):
    """One graded call: its arguments by name (arrays as they were handed in), what the learner's
    function returned and what the textbook's did (each value float64 and flat, a list of arrays one), and
    its case."""

    arguments: dict[str, Any]
    yours: list[numpy.ndarray]
    right: list[numpy.ndarray]
    case: str = ""  # the label of the case it is a call of


Symptom = tuple[str | tuple[str, ...], dict[str, Any]] | None  # a key, or two where two slips show
AGREE = 1e-9  # two numbers the same but for rounding, relative to the larger
# the call a value kept in a global is from
FIRST_CALL = "the first call the grader made (its first case's call 1)"


def _same(a: Any, b: Any) -> bool:
    a, b = numpy.asarray(a, dtype=numpy.float64), numpy.asarray(b, dtype=numpy.float64)
    scale = float(numpy.abs(b).max(initial=0.0))
    return a.shape == b.shape and bool((numpy.abs(a - b) <= AGREE * scale + 1e-300).all())


def _rate(observed: Observed) -> tuple[float, float]:
    """A schedule's call: the learner's rate and the textbook's."""
    return float(observed.yours[0][0]), float(observed.right[0][0])  # flat: one entry


def schedule_factor(observed: list[Observed]) -> Symptom:
    """Every rate the same multiple of the textbook's: the schedule's shape right, a constant factor off."""
    ratios = []
    for o in observed:
        yours, right = _rate(o)
        if right == 0 and yours == 0:
            continue  # any factor keeps a 0
        if right == 0 or not math.isfinite(yours):
            return None
        ratios.append(yours / right)
    if not ratios or _same(ratios[0], 1.0) or ratios[0] == 0:  # 0 everywhere is no factor of the schedule
        return None
    return ("schedule_factor", {"times": ratios[0]}) if all(_same(r, ratios[0]) for r in ratios) else None


# -- any rung: an earlier call's answer given again -------------------------------------------------


def earlier_answer(observed: list[Observed]) -> Symptom:
    """Every wrong call's results the very ones the learner gave, right, on an earlier call of another case
    (other arguments, other right results): an answer kept from one call to the next, as a cache keyed on
    some of the arguments alone, or a global, gives. The first such call and the earlier one are named."""
    found = None
    for index, o in enumerate(observed):
        if all(_same(yours, right) for yours, right in zip(o.yours, o.right)):
            continue
        earlier = next((before for before in observed[:index] if _answers(o, before)), None)
        if earlier is None:
            return None
        found = found or (o, earlier)
    if found is None:
        return None
    return "earlier_answer", {"these": _said(found[0]), "earlier": _said(found[1])}


def _answers(call: Observed, before: Observed) -> bool:
    """Whether ``call`` gave ``before``'s results again: ``before`` a call of another case that the learner
    got right, whose right results are not ``call``'s."""
    return (
        call.case != before.case
        and all(_same(yours, right) for yours, right in zip(before.yours, before.right))
        and any(not _same(mine, right) for mine, right in zip(call.right, before.right))
        and all(numpy.array_equal(mine, yours) for mine, yours in zip(call.yours, before.yours))
    )


def _said(o: Observed) -> str:
    """A call's number arguments, as name value."""
    return ", ".join(f"{name} {value:.6g}" for name, value in o.arguments.items() if _a_number(value))


# -- any rung: its arguments mixed up --------------------------------------------------------------


def mixed_arguments(textbook: Callable, observed: list[Observed]) -> Symptom:
    """Every call's results the textbook's (``textbook``, called with the arguments by name) with two of its
    number arguments swapped (arguments_swapped), or with one's value where another's belongs
    (argument_misplaced); the swaps are tried first."""
    found = _mixed(textbook, observed, dict)
    if found is None:
        return None
    return ("arguments_swapped", found) if "first" in found else ("argument_misplaced", found)


def handed_on_mixed(
    below: str, order: tuple[str, ...], handed: Callable[[dict[str, Any]], dict[str, Any]], textbook: Callable,
    observed: list[Observed],
) -> Symptom:  # fmt: skip
    """Every call's results those of the rung below (``below``, its textbook ``textbook``, its arguments in
    ``order``) on what the rung hands on to it (``handed``: from the rung's own arguments) with two of those
    number arguments swapped (handed_on_swapped), or one's value where another's belongs
    (handed_on_misplaced): the rung's own part right, the call to the one below mixed up."""
    found = _mixed(textbook, observed, handed)
    if found is None:
        return None
    said = {"below": below, "order": ", ".join(order), **found}
    return ("handed_on_swapped", said) if "first" in found else ("handed_on_misplaced", said)


def _mixed(
    textbook: Callable, observed: list[Observed], handed: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, str] | None:
    """The two number arguments of ``handed``'s (what ``textbook`` is called with, from each call's
    arguments) swapped ({"first", "second"}), or the one used where another belongs ({"used", "belongs"}),
    with which ``textbook`` gives the learner's results on every call, each value moved pinned by them
    (_pinned); the swaps first; or None."""
    given = handed(observed[0].arguments) if observed else {}
    names = [name for name, value in given.items() if _kind(value) is not None]
    kinds = {name: _kind(given[name]) for name in names}
    swaps = [
        (first, second)
        for index, first in enumerate(names)
        for second in names[index + 1 :]
        if kinds[first] == kinds[second]
    ]
    for first, second in swaps:
        if _pinned(textbook, observed, ((first, second), (second, first)), handed):
            return {"first": first, "second": second}
    for used in names:
        for belongs in names:
            same_kind = used != belongs and kinds[used] == kinds[belongs]
            if same_kind and _pinned(textbook, observed, ((belongs, used),), handed):
                return {"used": used, "belongs": belongs}
    return None


COMMON_DEFAULTS = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}  # written from habit in an argument's place


def argument_unused(
    textbook: Callable, observed: list[Observed], beside: tuple[tuple[str, Callable], ...] = ()
) -> Symptom:
    """Every call's results the textbook's (``textbook``, called with the arguments by name) with one number
    argument held at one value, the one it has on some call, whatever the call hands in: the argument is not
    used (a constant written in its place, or a default's). The value held must be pinned by the results
    (set off by NUDGE, up or down, they are no longer the learner's), so a value that changes nothing on
    these calls is no evidence. Where no argument held gives the textbook's results, each mistake of
    ``beside`` (its key, its function) is read with each held, as a second slip beside it; where none does,
    two or more arguments held at once (arguments_unused), each at a value handed on some call or a common
    default (COMMON_DEFAULTS), each pinned."""
    given = observed[0].arguments if observed else {}
    names = [name for name, value in given.items() if _a_number(value)]
    handed = {name: sorted({o.arguments[name] for o in observed}) for name in names}
    for key, function in (("", textbook), *beside):
        for name in names:
            for value in handed[name] if len(handed[name]) > 1 else []:
                if _held_pinned(function, observed, {name: value}):
                    held = {
                        "name": name,
                        "value": value,
                        "handed": _values(handed[name]),
                        "kept": _kept_from_first(observed, name, value),
                    }
                    return (("argument_unused", key) if key else "argument_unused"), held
    values = {
        name: sorted({*handed[name], *([COMMON_DEFAULTS[name]] if name in COMMON_DEFAULTS else [])})
        for name in names
        if len(handed[name]) > 1
    }
    for size in range(2, len(values) + 1):
        for held_names in itertools.combinations(values, size):
            for held_values in itertools.product(*(values[name] for name in held_names)):
                if _held_pinned(textbook, observed, dict(zip(held_names, held_values))):
                    return "arguments_unused", {
                        "names": " and ".join(held_names),
                        "held": ", ".join(f"{n} held at {v:.6g}" for n, v in zip(held_names, held_values)),
                        "handed": "; ".join(f"{name} {_values(handed[name])}" for name in held_names),
                    }
    return None


def _kept_from_first(observed: list[Observed], name: str, value: float) -> str:
    """The second reading of an argument held at the value the first call handed in, which the numbers
    cannot tell from a constant: a value kept from that call (a global filled once); "" for another value."""
    if not observed or not _same(value, float(observed[0].arguments[name])):
        return ""
    return (
        f"; {value:.6g} is what {FIRST_CALL} handed in, so {name} kept from that call for every call after it "
        "(a global filled once) gives them too"
    )


def _held_pinned(function: Callable, observed: list[Observed], held: dict[str, Any]) -> bool:
    """Whether ``function`` with each argument of ``held`` at its value gives the learner's results on every
    call, and no longer does with any one of those values set off by NUDGE, up or down."""
    if not _reproduced(function, observed, (), _held(held)):
        return False
    return not any(
        _reproduced(function, observed, (), _held({**held, name: _set_off(value, way)}))
        for name, value in held.items()
        for way in (1.0, -1.0)
    )


def _values(handed: list[Any]) -> str:
    return ", ".join(f"{each:.6g}" for each in handed)


def _held(held: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A call's arguments with each of ``held`` at its value."""
    return lambda arguments: {**arguments, **held}


def _a_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> tuple[int, ...] | None:
    """What may stand in a value's place: () for a number, an array's shape for an array of it, None for
    anything else (a list, a flag)."""
    if _a_number(value):
        return ()
    shape = getattr(value, "shape", None)
    return tuple(shape) if shape is not None and len(shape) > 0 else None


NUDGE = 1e-3  # how far a moved value is set off to see that the learner's results depend on it


def _pinned(
    textbook: Callable,
    observed: list[Observed],
    mixed: tuple[tuple[str, str], ...],
    handed: Callable[[dict[str, Any]], dict[str, Any]],
) -> bool:
    """Whether the mix-up ``mixed`` gives the learner's results (_reproduced) and they depend on every value
    it moves: confirmed on second sets of numbers, each moved value set off by NUDGE in turn, up and down,
    the results are no longer the learner's. A mix-up whose results a guard or a clamp of the formula's
    makes whatever the value moved, or on one side of it (as a progress held at 1 is, whatever total is, or
    for any total up to step), is no evidence of it."""
    if not _reproduced(textbook, observed, mixed, handed):
        return False
    for nudged in mixed:
        for way in (1.0, -1.0):
            off = tuple((name, source, way if nudged == (name, source) else 0.0) for name, source in mixed)
            if _reproduced(textbook, observed, off, handed):
                return False
    return True


def _reproduced(
    textbook: Callable,
    observed: list[Observed],
    mixed: tuple[tuple[str, str], ...] | tuple[tuple[str, str, float], ...],
    handed: Callable[[dict[str, Any]], dict[str, Any]],
) -> bool:
    """Whether the textbook on every call's arguments (as ``handed`` gives them on) mixed up as ``mixed``
    says (each argument named first given the value of the one named second, set off by NUDGE up or down
    where a third entry, 1 or -1, says so) differs from the textbook's results somewhere and is the
    learner's everywhere: each value's difference from the textbook's the same, to rounding."""
    differs = False
    for o in observed:
        given = handed(o.arguments)
        moved = {mix[0]: _set_off(given[mix[1]], *mix[2:]) for mix in mixed}
        try:
            results = textbook(**{**given, **moved})
        except (ArithmeticError, ValueError, TypeError):
            return False
        flat = [_flat(part) for part in (results if isinstance(results, tuple) else (results,))]
        for yours, right, theirs in zip(o.yours, o.right, flat):
            if yours.shape != right.shape or theirs.shape != right.shape:
                return False
            # a nan or inf the mix-up gives is the learner's
            finite = numpy.isfinite(right) & numpy.isfinite(theirs)
            if not (
                numpy.array_equal(numpy.isfinite(theirs), numpy.isfinite(yours))
                and numpy.array_equal(numpy.isnan(theirs), numpy.isnan(yours))
                and numpy.isfinite(right).all()
            ):
                return False
            floor = 1e-12 * float(numpy.abs(right[finite]).max(initial=0.0)) + 1e-300
            mistaken, learners = theirs[finite] - right[finite], yours[finite] - right[finite]
            scale = float(numpy.abs(mistaken).max(initial=0.0))
            if not bool((numpy.abs(learners - mistaken) <= AGREE * scale + floor).all()):
                return False
            differs = differs or scale > floor or not finite.all()
    return differs


def _set_off(value: Any, way: float = 0.0) -> Any:
    """``value`` set off by NUDGE ``way`` (1 up, -1 down, 0 not at all): relative, or NUDGE itself where it
    is 0."""
    if not way:
        return value
    if not _a_number(value):  # an array: each entry set off
        return value * (1.0 + way * NUDGE)
    return value * (1.0 + way * NUDGE) if value else way * NUDGE


def _flat(value: Any) -> numpy.ndarray:
    """A result as float64 entries, flat (a list of arrays one after the other)."""
    parts = value if isinstance(value, list) else [value]
    return numpy.concatenate(
        [numpy.asarray(to_numpy(part), dtype=numpy.float64).reshape(-1) for part in parts]
    )


# -- the paper's schedule: a rising line, then a decay as 1 / sqrt(step) -----------------------------


def _noam_part(observed: Sequence[Observed], right_part: Callable[[int, int], bool], wrong_part: Callable[
    [int, int], bool
]) -> bool:  # fmt: skip
    """Whether every call in ``right_part`` (step, warmup) is right and one in ``wrong_part`` is wrong."""
    steps = [(o, int(o.arguments["step"]), int(o.arguments["warmup"])) for o in observed]
    checked = [o for o, step, warmup in steps if right_part(step, warmup)]
    wrong = [o for o, step, warmup in steps if wrong_part(step, warmup) and not _same(*_rate(o))]
    return bool(checked) and all(_same(*_rate(o)) for o in checked) and bool(wrong)


def noam_decay(observed: list[Observed]) -> Symptom:
    """The rising line right where it rules (the first quarter of the warm-up), the rate wrong after the
    warm-up: the decay is what is wrong. Where the rate never leaves the line, the decay never falls
    below it (noam_no_decay); where it leaves it for a power of the step, that power and its factor."""
    if not _noam_part(observed, lambda step, warmup: 4 * step <= warmup, lambda step, warmup: step > warmup):
        return None
    cases, d_models = [], []  # each case's points off the line, the learner's decay: (log step, log of rate)
    for case in _cases(observed):
        points = []
        for o in case:
            step, d_model, warmup = (int(o.arguments[name]) for name in ("step", "d_model", "warmup"))
            yours, _ = _rate(o)
            if not _same(yours, d_model**-0.5 * step * warmup**-1.5):
                points.append((math.log(step), math.log(yours * d_model**0.5) if yours > 0 else math.nan))
        cases += [points] if points else []
        d_models += [int(case[0].arguments["d_model"])] if points else []
    if not cases:
        return "noam_no_decay", {}
    line = _line([point for points in cases for point in points])
    if line is not None and math.isfinite(line[0]):
        return "noam_decay_power", {"power": line[0], "times": math.exp(line[1])}
    power = _one_power(cases)
    if power is None:
        return "noam_decay", {}
    if _same(power, -0.5):  # the step's power right: each case's decay off by a factor, of d_model
        return _decay_front(cases, d_models)
    return "noam_decay_falls", {
        "power": power,
        "falls": "1 / step" if _same(power, -1.0) else f"1 / step^{-power:.4g}",
    }


def _decay_front(cases: list[list[tuple[float, float]]], d_models: list[int]) -> Symptom:
    """The decay falling as step^-0.5, each case's off by its own factor: that factor a power of d_model
    (its intercept over log d_model, one power for every d_model), said as the decay's factor in front."""
    powers = []
    for points, d_model in zip(cases, d_models):
        x, y = points[0]
        powers.append((y + 0.5 * x) / math.log(d_model) - 0.5 if d_model > 1 else math.nan)
    if len(set(d_models)) < 2 or not all(_same(power, powers[0]) for power in powers):
        return "noam_decay", {}
    lost = ", its minus lost: d_model^-0.5" if _same(powers[0], 0.5) else ""
    return "noam_decay_front", {"power": powers[0], "lost": lost}


def _one_power(cases: list[list[tuple[float, float]]]) -> float | None:
    """The one slope of every case's points (each case on a line of its own, its intercept its own), at
    least one case with three points to confirm its line; or None."""
    slopes = []
    for points in cases:
        if not all(math.isfinite(y) for _, y in points) or len({x for x, _ in points}) < 2:
            return None
        line = _line(points) if len(points) > 2 else _line([points[0], points[-1], points[-1]])
        if line is None:
            return None
        slopes.append((line[0], len(points) > 2))
    confirmed = any(three for _, three in slopes)
    return slopes[0][0] if confirmed and all(_same(slope, slopes[0][0]) for slope, _ in slopes) else None


def noam_front(observed: list[Observed]) -> Symptom:
    """Each case's rates one multiple of the textbook's, the multiple changing with d_model: the factor in
    front is another power of d_model than -0.5, read back as times * d_model^power (not 0: a factor that
    does not change with d_model is d_model not used, held at one value, which argument_unused reads)."""
    fronts = []
    for case in _cases(observed):
        ratios = [yours / right for yours, right in map(_rate, case) if right != 0]
        if not ratios or not all(_same(r, ratios[0]) for r in ratios) or ratios[0] <= 0:
            return None
        d_model = int(case[0].arguments["d_model"])
        fronts.append((math.log(d_model), math.log(ratios[0] * d_model**-0.5), ratios[0], d_model))
    if len({x for x, *_ in fronts}) < 2 or all(_same(ratio, fronts[0][2]) for *_, ratio, _ in fronts):
        return None  # one d_model, or one factor for all: schedule_factor says it
    (x0, y0, *_), (x1, y1, *_) = fronts[0], fronts[-1]
    power = (y1 - y0) / (x1 - x0)
    if not all(_same(y0 + power * (x - x0), y) for x, y, *_ in fronts) or abs(power) < AGREE:
        return None  # off one power; or d_model^0, one factor whatever d_model is: argument_unused's to say
    ratio, d_model = next((r, d) for *_, r, d in fronts if not _same(r, 1.0))
    return "noam_front", {
        "times": math.exp(y0 - power * x0),
        "power": power,
        "ratio": ratio,
        "d_model": d_model,
    }


def noam_one_curve(observed: list[Observed]) -> Symptom:
    """In every case the rate is one power of the step at every step, both sides of warmup: one curve
    (of another power than the decay's and the line's, which noam_line and noam_decay read) wins min(...)."""
    found = []
    for case in _cases(observed):
        d_model, warmup = int(case[0].arguments["d_model"]), int(case[0].arguments["warmup"])
        steps = [int(o.arguments["step"]) for o in case]
        rates = [_rate(o)[0] * d_model**0.5 for o in case]
        if min(steps) >= warmup or max(steps) <= warmup or min(rates) <= 0:
            return None
        line = _line([(math.log(step), math.log(rate)) for step, rate in zip(steps, rates)])
        if line is None:
            return None
        found.append({"power": line[0], "times": math.exp(line[1]), "warmup": warmup})
    return ("noam_one_curve", found[0]) if found else None


def noam_line(observed: list[Observed]) -> Symptom:
    """The decay right where it rules (four warm-ups on), the rate wrong during the warm-up; where every
    rate before step warmup is d_model^-0.5 * step * warmup^power, one power for every warmup, that power."""
    if not _noam_part(observed, lambda step, warmup: step >= 4 * warmup, lambda step, warmup: step <= warmup):
        return None
    powers = []
    for o in observed:
        step, d_model, warmup = (int(o.arguments[name]) for name in ("step", "d_model", "warmup"))
        yours, _ = _rate(o)
        if step < warmup and warmup > 1:
            powers.append(math.log(yours * d_model**0.5 / step) / math.log(warmup) if yours > 0 else math.nan)
    if len(powers) > 1 and all(_same(power, powers[0]) for power in powers) and not _same(powers[0], -1.5):
        return "noam_line_power", {"power": powers[0]}
    return "noam_line", {}


# -- warm-up and cosine ---------------------------------------------------------------------------


def _cases(observed: list[Observed]) -> list[list[Observed]]:
    """The calls grouped by their schedule's settings (every argument but the step)."""
    groups: dict[tuple, list[Observed]] = {}
    for o in observed:
        key = tuple(sorted((name, value) for name, value in o.arguments.items() if name != "step"))
        groups.setdefault(key, []).append(o)
    return list(groups.values())


def _line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """The line (slope, intercept) through every point, or None where they are not on one."""
    if len(points) < 3:
        return None
    (x0, y0), (x1, y1) = points[0], points[-1]
    slope = (y1 - y0) / (x1 - x0)
    intercept = y0 - slope * x0
    return (slope, intercept) if all(_same(slope * x + intercept, y) for x, y in points) else None


def warmup_line(observed: list[Observed]) -> Symptom:
    """The warm-up wrong and everything after it right, the warm-up a line: one that is 0 at a whole
    step runs between other steps (warmup_span: shifted, 0 at step 1, or stretched), one that reaches
    peak at step warmup but is 0 between two steps starts wrong (warmup_start)."""
    lines = []
    for case in _cases(observed):
        warmup, peak = int(case[0].arguments["warmup"]), float(case[0].arguments["peak"])
        during = [o for o in case if int(o.arguments["step"]) <= warmup]
        if not all(_same(*_rate(o)) for o in case if o not in during):
            return None
        if all(_same(*_rate(o)) for o in during):
            continue
        line = _line([(float(o.arguments["step"]), _rate(o)[0]) for o in during])
        if line is None or line[0] <= 0:
            return None
        zero, top = -line[1] / line[0], (peak - line[1]) / line[0]
        if abs(zero - round(zero)) < 1e-9:
            lines.append(("warmup_span", {"zero": round(zero), "top": top, "warmup": warmup}))
        elif _same(top, warmup):
            lines.append(("warmup_start", {"start": line[1]}))
        else:
            return None
    return lines[0] if lines else None


def _warmed_up(observed: list[Observed]) -> list[tuple[list[Observed], tuple[int, int, float, float]]] | None:
    """Each warm-up + cosine case with its (warmup, total, peak, min_lr), or None where a rate of a case's
    warm-up is wrong (the cosine's symptoms read the decay of a right warm-up)."""
    cases = []
    for case in _cases(observed):
        arguments = case[0].arguments
        warmup, total = int(arguments["warmup"]), int(arguments["total"])
        if not all(_same(*_rate(o)) for o in case if int(o.arguments["step"]) <= warmup):
            return None
        cases.append((case, (warmup, total, float(arguments["peak"]), float(arguments["min_lr"]))))
    return cases


def cosine_ends(observed: list[Observed]) -> Symptom:
    """The warm-up right, the decay a half cosine over the right steps between other rates than peak and
    min_lr: each rate after the warm-up on one line of 0.5 * (1 + cos(pi * progress)), read back at its
    two ends."""
    found = []
    cases = _warmed_up(observed)
    if cases is None:
        return None
    for case, (warmup, total, peak, low) in cases:
        after = [o for o in case if int(o.arguments["step"]) > warmup]
        if all(_same(*_rate(o)) for o in after):
            continue
        points = []
        for o in after:
            progress = min((int(o.arguments["step"]) - warmup) / (total - warmup), 1.0)
            points.append((0.5 * (1 + math.cos(math.pi * progress)), _rate(o)[0]))
        line = _line(points)
        if line is None:
            return None
        found.append({"start": line[0] + line[1], "end": line[1], "peak": peak, "min_lr": low})
    return ("cosine_ends", found[0]) if found else None


def cosine_span(observed: list[Observed]) -> Symptom:
    """The decay a half cosine from peak to min_lr whose progress runs over other steps than warmup to
    total: read back from each rate, the progress is a line of the step that is 0 and 1 elsewhere."""
    found: list[dict[str, Any]] = []
    cases = _warmed_up(observed)
    if cases is None:
        return None
    first = observed[0].arguments
    length = float(first["total"]) - float(first["warmup"])
    one_length = True  # every case's decay from its warmup over the first call's total - warmup
    for case, (warmup, total, peak, low) in cases:
        points = []
        for o in case:
            step, (yours, _) = int(o.arguments["step"]), _rate(o)
            share = (yours - low) / (peak - low) if peak != low else math.nan
            if warmup < step and 1e-9 < share < 1 - 1e-9:
                points.append((float(step), math.acos(2 * share - 1) / math.pi))
        line = _line(points)
        if line is None or line[0] <= 0:
            return None
        start, end = -line[1] / line[0], (1 - line[1]) / line[0]
        one_length = one_length and _same(start, warmup) and _same(end - start, length)
        if not (_same(start, warmup) and _same(end, total)):
            found.append({"start": start, "end": end, "warmup": warmup, "total": total, "kept": ""})
    if not found:
        return None
    if one_length:
        found[0]["kept"] = (
            f". Its length, {length:.6g}, is total - warmup of {FIRST_CALL}: that length kept for every call after "
            "it (a global filled once), or written in, gives it"
        )
    return "cosine_span", found[0]


def cosine_past_end(observed: list[Observed]) -> Symptom:
    """Every rate before total right, every wrong one at or after total and one value, not min_lr: the
    decay ends right, and the rate past it is another (0, as a return of its own after total gives)."""
    wrong = [o for o in observed if not _same(*_rate(o))]
    if not wrong or any(int(o.arguments["step"]) < int(o.arguments["total"]) for o in wrong):
        return None
    yours = _rate(wrong[0])[0]
    if not all(_same(_rate(o)[0], yours) for o in wrong):
        return None
    first = wrong[0].arguments
    at_total = any(int(o.arguments["step"]) == int(o.arguments["total"]) for o in wrong)
    return "cosine_past_end", {
        "where": "from total on" if at_total else "after total",
        "total": int(first["total"]),
        "yours": yours,
        "min_lr": float(first["min_lr"]),
    }


def cosine_turn(turned: Callable[[float], Callable], observed: list[Observed]) -> Symptom:
    """The decay's cosine turned by another constant near pi, cos(c * progress) (pi rounded, 3.14 or 22 / 7),
    everything else right: c read back from the rate whose share of the decay is nearest a half (where acos
    reads it best), then ``turned(c)`` (the textbook with it) must give the learner's results on every call."""
    read = []
    cases = _warmed_up(observed)
    if cases is None:
        return None
    for case, (warmup, total, peak, low) in cases:
        for o in case:
            step, (yours, _) = int(o.arguments["step"]), _rate(o)
            share = (yours - low) / (peak - low) if peak != low else math.nan
            if warmup < step < total and 0 < share < 1:
                progress = (step - warmup) / (total - warmup)
                read.append((abs(2 * share - 1), math.acos(2 * share - 1) / progress))
    if not read:
        return None
    turn = min(read)[1]
    if turn == math.pi or abs(turn / math.pi - 1) > 0.01:
        return None
    return ("cosine_turn", {"turn": turn}) if _reproduced(turned(turn), observed, (), dict) else None


# -- clipping ---------------------------------------------------------------------------------------


def _uniform_scale(o: Observed) -> tuple[float, float] | None:
    """A clipping call whose returned norm is right: (the one factor every entry of the learner's
    gradients is the handed-in one's, the norm) where it is one factor, else None."""
    grads = numpy.concatenate(
        [numpy.asarray(g, dtype=numpy.float64).reshape(-1) for g in o.arguments["grads"]]
    )
    (yours, norm_yours), (_, norm) = o.yours, o.right
    if yours.shape != grads.shape or not _same(norm_yours, norm):
        return None
    big = numpy.abs(grads) > 1e-3 * float(numpy.abs(grads).max(initial=0.0))
    if not big.any():
        return None
    scales = yours[big] / grads[big]
    return (float(scales[0]), float(norm[0])) if _same(scales, numpy.full_like(scales, scales[0])) else None


def _nothing_to_scale(o: Observed) -> bool:
    """A clipping call handed every gradient zero that gave them back zero, its norm right: no scale to read."""
    handed = [numpy.asarray(g) for g in o.arguments["grads"]]
    return not any(g.any() for g in handed) and not o.yours[0].any() and _same(o.yours[1], o.right[1])


def clip_epsilon(observed: list[Observed]) -> Symptom:
    """The norm right, the gradients scaled by max_norm / (norm + eps) where they are clipped: one small
    constant eps added to the norm on every call that clips; where the gradients under max_norm are scaled
    so too, they are rescaled even there (clip_always beside it)."""
    added, always = [], False
    for o in [o for o in observed if not _nothing_to_scale(o)]:
        max_norm, scaled = float(o.arguments["max_norm"]), _uniform_scale(o)
        if scaled is None:
            return None
        scale, norm = scaled
        if norm <= max_norm:
            if _same(o.yours[0], o.right[0]):
                continue
            always = True  # scaled where it should be left as it is: read its eps as on a call that clips
        if scale <= 0:
            return None
        added.append(max_norm / scale - norm)
    if not added or not all(abs(eps - added[0]) <= 1e-3 * abs(added[0]) for eps in added):
        return None
    eps = added[0]
    if not 0 < abs(eps) < 1e-2:
        return None
    return ("clip_epsilon", "clip_always") if always else "clip_epsilon", {"eps": eps}


def clip_other_norm(
    norm_of: Callable[[list, str], float], norms: dict[str, str], observed: list[Observed]
) -> Symptom:
    """The norm returned another norm of the gradients than the global one on every call: one of ``norms``
    (its kind, as ``norm_of`` computes it, and what it is, said), whatever the gradients returned are."""
    if not observed or all(_same(o.yours[1], o.right[1]) for o in observed):
        return None
    for kind, what in norms.items():
        if all(_same(o.yours[1][0], norm_of(o.arguments["grads"], kind)) for o in observed):
            return "clip_other_norm", {"what": what}
    return None


def clip_scale(
    norm_of: Callable[[list, str], float], norms: dict[str, str], observed: list[Observed]
) -> Symptom:
    """The norm returned right and the gradients under max_norm left as they are, those over it scaled by
    one other factor on every call that clips: 1, not scaled at all (clip_unscaled), or max_norm over
    another norm of ``norms`` (clip_scale_norm, the norm's kind as ``norm_of`` computes it)."""
    clipped = []
    for o in [o for o in observed if not _nothing_to_scale(o)]:
        scaled = _uniform_scale(o)
        if scaled is None:
            return None
        if scaled[1] > float(o.arguments["max_norm"]):
            clipped.append((o, scaled[0]))
        elif not _same(o.yours[0], o.right[0]):
            return None
    if not clipped or any(_same(o.yours[0], o.right[0]) for o, _ in clipped):
        return None
    if all(_same(scale, 1.0) for _, scale in clipped):
        return "clip_unscaled", {}
    for kind, what in norms.items():
        if all(
            _same(scale, float(o.arguments["max_norm"]) / norm_of(o.arguments["grads"], kind))
            for o, scale in clipped
        ):
            return "clip_scale_norm", {"what": what}
    return None


# -- AdamW's decay ----------------------------------------------------------------------------------


def decay_rate(observed: list[Observed]) -> Symptom:
    """The moments right, the parameter shrunk by another share of itself than lr * weight_decay, one
    share for every entry of a call: the decay's rate is what is wrong. Where that share is lr times one
    value on every call, whatever weight_decay each hands in, weight_decay is not used (argument_unused)."""
    found: dict[str, Any] | None = None
    used, shares = [], []
    for number, o in enumerate(observed, 1):
        (param_yours, m_yours, v_yours), (param_right, m_right, v_right) = o.yours, o.right
        param = numpy.asarray(o.arguments["param"], dtype=numpy.float64).reshape(-1)
        if param_yours.shape != param.shape or not (_same(m_yours, m_right) and _same(v_yours, v_right)):
            return None
        rate = float(o.arguments["lr"]) * float(o.arguments["weight_decay"])
        big = numpy.abs(param) > 1e-3 * float(numpy.abs(param).max(initial=0.0))
        shrunk = (param_right - param_yours)[big] / param[big] + rate  # param (1 - share) - Adam's step
        share = float(numpy.median(shrunk))  # one share, to the rounding a step's size leaves on it
        if not bool((numpy.abs(shrunk - share) <= 1e-6 * max(abs(share), rate)).all()):
            return None
        if found is None and not _same(share, rate):
            found = {"call": number, "yours": share, "right": rate, "times": share / rate}
        used.append(share / float(o.arguments["lr"]))
        shares.append(share)
    handed = sorted({float(o.arguments["weight_decay"]) for o in observed})
    if found and len(handed) > 1 and all(_same(each, used[0]) for each in used):
        held = {
            "name": "weight_decay",
            "value": used[0],
            "handed": _values(handed),
            "kept": _kept_from_first(observed, "weight_decay", used[0]),
        }
        return "argument_unused", held
    if found:
        first = float(observed[0].arguments["lr"]) * float(observed[0].arguments["weight_decay"])
        kept = all(_same(share, first) for share in shares)
        found["kept"] = (
            f"; yours is lr * weight_decay of {FIRST_CALL}, {first:.6g}, on every call: that share kept for every "
            "call after it (a global filled once), or written in, gives it"
            if kept
            else ""
        )
    return ("decay_rate", found) if found else None


def results_reordered(name: str, names: tuple[str, ...], observed: list[Observed]) -> Symptom:
    """Every call's results the textbook's in another order (``names``, the contract's, of the rung
    ``name``): it returns them so (returns_order, as the refusal of results that cannot be read in the
    contract's order says it)."""
    wrong = [o for o in observed if not all(_same(yours, right) for yours, right in zip(o.yours, o.right))]
    for order in itertools.permutations(range(len(names))):  # order[i]: where the learner put names[i]
        reordered = all(
            all(_same(o.yours[place], right) for place, right in zip(order, o.right)) for o in observed
        )
        if wrong and reordered and list(order) != sorted(order):
            held = dict(zip(order, names))
            yours = ", ".join(held[place] for place in range(len(names)))
            return "returns_order", {"name": name, "yours": yours, "right": ", ".join(names), "then": "right"}
    return None


SYMPTOM_KEYS = (  # every key of SENTENCES a symptom above gives
    "arguments_swapped",
    "argument_misplaced",
    "schedule_factor",
    "noam_decay",
    "noam_decay_power",
    "noam_no_decay",
    "noam_line",
    "noam_line_power",
    "noam_front",
    "noam_one_curve",
    "warmup_start",
    "warmup_span",
    "cosine_ends",
    "cosine_span",
    "clip_epsilon",
    "clip_other_norm",
    "clip_unscaled",
    "clip_scale_norm",
    "decay_rate",
    "handed_on_swapped",
    "handed_on_misplaced",
    "earlier_answer",
    "argument_unused",
    "cosine_past_end",
    "cosine_turn",
    "arguments_unused",
    "noam_decay_falls",
    "noam_decay_front",
    "returns_order",
)
