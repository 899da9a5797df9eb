"""The grader of the training rungs (learn check): the learner's schedule, clipping or optimiser
step called on each case's calls, each from the textbook's state (a state they did not make), and
what it returns compared with the textbook's; where it differs, the known mistake whose own results
it reproduces on every call of the case is named."""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import sys
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import numpy

from ...backend import to_numpy
from ..exercises.curriculum import TRAINING_BY_NAME
from ..exercises.mistakes import sentence
from ..exercises.training_exercises import TrainingCase, TrainingExercise
from ..exercises.training_symptoms import Observed
from ..loading import (
    TIME_LIMIT,
    TimedOut,
    describe_error,
    learners_function,
    needs_line_watch,
    under_time_limit,
)
from ..optimiser import TEXTBOOK
from .verdicts import FunctionVerdict, GradientVerdict, Raised, ToDo, as_array

EXACT_UPDATE = 1e-12  # |yours - textbook's| over the largest entry (of the update, for a parameter)
CLOSE_UPDATE = 1e-8
LISTS = ("grads",)  # returned values the contract asks for as a list of new arrays
NUMBERS = ("lr", "norm")  # and as a float


def _arguments(case: TrainingCase, call: dict[str, Any], exercise: TrainingExercise) -> list[Any]:
    """The call's positional arguments, in the rung's order, each array a fresh copy."""
    values = {**case.fixed, **call}
    return [_copied(values[name]) for name in exercise.arguments]


def _copied(value: Any) -> Any:
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value.copy() if hasattr(value, "shape") and hasattr(value, "copy") else value


def _call(function: Callable, path: Path, exercise: TrainingExercise, arguments: list[Any]) -> Any:
    """The learner's function on ``arguments``: NotImplementedError is "to do", whatever else it raises
    is theirs (a Raised with their file and line); a write into what it was handed is a Raised naming it."""
    name = exercise.name
    try:
        inspect.signature(function).bind(*arguments)
    except TypeError as error:
        raise Raised(
            f"{name} cannot be called as the optimiser calls it, {name}{exercise.signature}: {error}"
        ) from None
    except ValueError:
        pass
    kept = [_copied(argument) for argument in arguments]
    items = [list(argument) if isinstance(argument, list) else None for argument in arguments]
    try:
        with warnings.catch_warnings(), numpy.errstate(all="ignore"):  # a NaN is graded as a value
            warnings.simplefilter("ignore", RuntimeWarning)
            returned = function(*arguments)
    except NotImplementedError as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == path]
        raise ToDo(frames[-1].name if frames else name) from None
    except (KeyboardInterrupt, TimedOut):
        raise
    except BaseException as error:  # all theirs
        raised = Raised(describe_error(error, path))
        raised.error = error
        raise raised from None
    # its arrays' contents kept, the list's items not the arrays it held: the list itself was changed
    written = [
        (argument_name, handed is not None and not _written(before, handed))
        for argument_name, before, after, handed in zip(exercise.arguments, kept, arguments, items)
        if _written(before, after)
    ]
    if written:
        into = [argument_name for argument_name, rebound in written if not rebound]
        what = _listed(into) if into else written[0][0]
        raised = Raised(f"{name} {'writes into' if into else 'changes'} {what}, which it was handed")
        raised.cause = "writes_input" if into else "writes_list"
        raised.names = {"name": name, "what": what}
        raise raised
    return returned


def _listed(names: list[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _handed_back(returned: Any, exercise: TrainingExercise, arguments: list[Any]) -> str | None:
    """What ``returned`` gives back as it was handed: an argument (a list or an array) itself, or one
    array of a list (or a view of one), said as such: a new array is asked for."""
    values = list(returned) if isinstance(returned, (tuple, list)) else [returned]
    for name, argument in zip(exercise.arguments, arguments):
        if not isinstance(argument, list) and not hasattr(argument, "shape"):
            continue  # a number handed in may well come back as it is
        arrays = argument if isinstance(argument, list) else [argument]
        for value in values:
            if value is argument:
                return f"{name}, which it was handed"
            for part in value if isinstance(value, (tuple, list)) else [value]:
                for index, array in enumerate(arrays):
                    if part is array or getattr(part, "base", None) is array:
                        at = f"one of the arrays it was handed ({name}[{index}])"
                        return at if isinstance(argument, list) else f"{name}, which it was handed"
    return None


def _written(before: Any, after: Any) -> bool:
    if isinstance(before, list):
        if not isinstance(after, list) or len(after) != len(before):
            return True
        return any(_written(b, a) for b, a in zip(before, after))
    if not hasattr(before, "shape"):
        return False
    return not numpy.array_equal(to_numpy(before), to_numpy(after), equal_nan=True)


class _Value(NamedTuple):
    """One returned value as float64 entries, flat where it was a list of arrays (``shapes`` theirs);
    ``dtype`` the floating dtype it came in where that is narrower than float64 (float32, float16)."""

    array: numpy.ndarray
    shapes: tuple[tuple[int, ...], ...] | None = None
    dtype: str | None = None


def _narrow(*values: Any) -> str | None:
    """The name of the narrowest floating dtype among ``values`` where it is narrower than float64."""
    dtypes = [numpy.dtype(v.dtype) for v in values if hasattr(v, "dtype")]
    narrow = [d for d in dtypes if d.kind == "f" and d.itemsize < 8]
    return min(narrow, key=lambda d: d.itemsize).name if narrow else None


def _unreadable(name: str, value: Any) -> str | None:
    """Why ``value`` (or an array of it) holds no numbers the grader can read, said by its dtype or size."""
    for part in value if isinstance(value, (list, tuple)) else [value]:
        dtype = getattr(part, "dtype", None)
        if dtype is not None and numpy.dtype(dtype).kind not in "biuf":
            return f"returned {name} as an array of dtype {numpy.dtype(dtype)}, expected floats"
        if isinstance(part, int) and not isinstance(part, bool) and abs(part) > sys.float_info.max:
            return (
                f"returned {name} as an int of {len(str(abs(part)))} digits, too large for a float "
                f"(the largest is about {sys.float_info.max:.3g})"
            )
    return None


def _results(returned: Any, exercise: TrainingExercise) -> list[_Value] | str:
    """What the function returned, one _Value per name of ``exercise.returns``, or why it cannot be
    read so."""
    names = exercise.returns
    if len(names) > 1 and (not isinstance(returned, (tuple, list)) or len(returned) != len(names)):
        got = f"{len(returned)} values" if isinstance(returned, (tuple, list)) else type(returned).__name__
        return f"returned {got}, expected ({', '.join(names)})"
    values: list[_Value] = []
    for name, value in zip(names, [returned] if len(names) == 1 else returned):
        if name in LISTS and not isinstance(value, list):
            return f"returned {name} as {type(value).__name__}, expected a list of arrays"
        if name in NUMBERS and not _a_number(value):
            kind = f"a {value.ndim}-d array" if hasattr(value, "ndim") else type(value).__name__
            return f"returned {name} as {kind}, expected a float (float(...) turns a 0-d array into one)"
        unreadable = _unreadable(name, value)
        if unreadable is not None:
            return unreadable
        if isinstance(value, (list, tuple)):
            parts = [as_array(part) for part in value]
            arrays = [part for part in parts if part is not None]
            if len(arrays) != len(parts):
                return f"returned {name} as a list holding something else than arrays"
            flat = numpy.concatenate([a.reshape(-1) for a in arrays]) if arrays else numpy.zeros(0)
            values.append(_Value(flat, tuple(a.shape for a in arrays), _narrow(*value)))
            continue
        array = as_array(value)
        if array is None:
            return f"returned {name} as {type(value).__name__}, expected a number or an array"
        values.append(_Value(array, dtype=_narrow(value)))
    return values


def _a_number(value: Any) -> bool:
    return isinstance(value, (int, float, numpy.floating, numpy.integer)) and not isinstance(value, bool)


RANK = {"exact": 0, "close": 1, "wrong": 2}


def _compare(
    yours: _Value, right: _Value, before: numpy.ndarray | None, scale_of: _Value | None = None
) -> tuple[str, float, float]:
    """Exact, close or wrong, the largest absolute error and that error relative to the scale:
    the largest entry of the textbook's change (``before`` the array handed in, for a parameter and
    a moment: its update is what is compared) or of its values."""
    if yours.shapes != right.shapes or yours.array.shape != right.array.shape:
        return "wrong", math.inf, math.inf
    if not numpy.array_equal(numpy.isfinite(yours.array), numpy.isfinite(right.array)):
        return "wrong", math.inf, math.inf
    finite = numpy.isfinite(right.array)  # a NaN where the textbook (or a mistake) has one is equal
    of = scale_of.array if scale_of is not None and scale_of.array.shape == right.array.shape else right.array
    change = (of - before if before is not None else of)[finite]
    scale = float(numpy.abs(change).max(initial=0.0)) or 1.0
    error = float(numpy.abs(yours.array[finite] - right.array[finite]).max(initial=0.0))
    floor = 1e-15 * float(numpy.abs(right.array[finite]).max(initial=0.0))  # the rounding of the value itself
    status = (
        "exact"
        if error <= EXACT_UPDATE * scale + floor
        else "close"
        if error <= CLOSE_UPDATE * scale + floor
        else "wrong"
    )
    return status, error, error / scale


def _rounded(yours: _Value, right: _Value) -> bool:
    """Whether ``yours`` came in a narrower float than the textbook's and differs from it only by
    that dtype's rounding."""
    if yours.dtype is None or right.dtype is not None or yours.array.shape != right.array.shape:
        return False
    finite = numpy.isfinite(right.array)
    if not numpy.array_equal(numpy.isfinite(yours.array), finite):
        return False
    error = numpy.abs(yours.array[finite] - right.array[finite])
    return bool((error <= 4 * numpy.finfo(yours.dtype).eps * numpy.abs(right.array[finite]) + 1e-300).all())


def _same(yours: list[_Value], other: list[_Value] | str, befores: list[Any], right: list[_Value]) -> bool:
    """Whether ``yours`` are a mistake's results ``other``, to the tolerance of the textbook's scale
    (``right``: a mistake's value near 0 where the textbook's is not is compared as the textbook's)."""
    if isinstance(other, str):
        return False
    return all(_compare(y, o, b, r)[0] != "wrong" for y, o, b, r in zip(yours, other, befores, right))


def _where(yours: _Value, right: _Value) -> str:
    """Where the entry farthest from the textbook's is (" at (1, 2) ", "[1] at (0,) " in a list), both values."""
    mine, theirs = yours.array, right.array
    if yours.shapes != right.shapes or mine.shape != theirs.shape:
        return f" shapes {yours.shapes or mine.shape}, expected {right.shapes or theirs.shape}"
    with numpy.errstate(all="ignore"):
        difference = numpy.where(
            numpy.isfinite(mine) & numpy.isfinite(theirs), numpy.abs(mine - theirs), numpy.inf
        )
        difference = numpy.where(numpy.isnan(mine) & numpy.isnan(theirs), 0.0, difference)
    index = numpy.unravel_index(int(difference.argmax()), mine.shape) if mine.ndim else ()
    at = f" at {tuple(int(i) for i in index)} " if mine.size > 1 else " "
    if yours.shapes is not None:  # a list of arrays, stacked flat: which array, and where in it
        flat, ends = int(index[0]), numpy.cumsum([math.prod(shape) for shape in yours.shapes])
        which = int(numpy.searchsorted(ends, flat, side="right"))
        inside = numpy.unravel_index(flat - (int(ends[which - 1]) if which else 0), yours.shapes[which])
        at = f"[{which}] at {tuple(int(i) for i in inside)} "
    a, b = mine[index], theirs[index]
    if f"{a:.6g}" == f"{b:.6g}":  # alike to six digits: enough of them to see it, and the difference
        return f"{at}yours {a:.12g}, expected {b:.12g} (a difference of {abs(a - b):.2g})"
    return f"{at}yours {a:.6g}, expected {b:.6g}"


def _befores(exercise: TrainingExercise, arguments: list[Any]) -> list[numpy.ndarray | None]:
    """For each returned value, the argument it updates, where it updates one (a parameter, a moment)."""
    given = dict(zip(exercise.arguments, arguments))
    return [
        numpy.asarray(to_numpy(given[name]), dtype=numpy.float64) if name in ("param", "m", "v") else None
        for name in exercise.returns
    ]


def _quiet(function: Callable, arguments: list[Any], exercise: TrainingExercise) -> list[_Value] | str:
    """A textbook or mistaken function's results, its NaN warnings silenced; a mistake that cannot be
    computed on these arguments (two of them dividing by 0 together) says so and reproduces nothing."""
    with warnings.catch_warnings(), numpy.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return _results(function(*arguments), exercise)
        except ArithmeticError as error:
            return f"cannot be computed here: {error}"


def _refused(cause: str, **names: Any) -> Raised:
    """The learner's function refused with the sentence of ``cause``, its ``names`` filled in."""
    refused = Raised(sentence(cause, **names))
    refused.cause, refused.names = cause, names
    return refused


def _reordered(
    returned: Any, exercise: TrainingExercise, befores: list[Any], right: list[_Value]
) -> dict[str, str] | None:
    """Where ``returned`` cannot be read in the contract's order but can in another: that order (``yours``,
    the names of ``exercise.returns`` as it holds them), preferring one in which this call's results are the
    textbook's; or None. Whether they are so on every call is for the grading in that order to say."""
    names = exercise.returns
    if len(names) < 2 or not isinstance(returned, (tuple, list)) or len(returned) != len(names):
        return None
    readable = []
    for order in itertools.permutations(range(len(names))):  # order[i]: where the learner put names[i]
        values = _results(tuple(returned[place] for place in order), exercise)
        if list(order) != sorted(order) and not isinstance(values, str):
            readable.append((not _same(values, right, befores, right), order))
    if not readable:
        return None
    _, order = min(readable)
    held = dict(zip(order, names))
    return {"yours": ", ".join(held[place] for place in range(len(names)))}


def _in_order(function: Callable, exercise: TrainingExercise, yours: str) -> Callable:
    """The learner's ``function`` with its results put in the contract's order (``yours``: the names of
    ``exercise.returns`` in the order it returns them), its signature kept."""
    places = [yours.split(", ").index(name) for name in exercise.returns]

    @functools.wraps(function)
    def ordered(*arguments: Any) -> Any:
        returned = function(*arguments)
        return tuple(returned[place] for place in places)

    return ordered


def _same_again(exercise: TrainingExercise, yours: list[_Value], again: Any) -> None:
    """Refuse a function whose second call on the same arguments (``again``) returned other results than
    its first (``yours``): it keeps state between calls."""
    twice = _results(again, exercise)
    differs = [
        name
        for index, name in enumerate(exercise.returns)
        if isinstance(twice, str)
        or twice[index].shapes != yours[index].shapes
        or not numpy.array_equal(twice[index].array, yours[index].array, equal_nan=True)
    ]
    if differs:
        counter = next(
            (f" ({name}, the number of this update)" for name in ("t", "step") if name in exercise.arguments),
            "",
        )
        raise _refused("keeps_state", name=exercise.name, what=differs[0], counter=counter)


def _same_later(exercise: TrainingExercise, function: Callable, path: Path, observed: list[Observed]) -> None:
    """Refuse a function whose answer to a case's first call, asked again once every case was graded, is
    another than the one it gave then (``observed``): state the calls between changed (a global, a flag),
    which a call made twice in a row does not show."""
    firsts: dict[str, Observed] = {}
    for call in observed:
        firsts.setdefault(call.case, call)
    for label, first in firsts.items():
        arguments = [_copied(first.arguments[name]) for name in exercise.arguments]
        again = _results(_call(function, path, exercise, arguments), exercise)  # what it raises is said so
        differs = [
            name
            for index, name in enumerate(exercise.returns)
            if isinstance(again, str)
            or not numpy.array_equal(again[index].array.reshape(-1), first.yours[index], equal_nan=True)
        ]
        if differs:
            raise _refused(
                "keeps_state_later", name=exercise.name, call=f"case {label}, call 1", what=differs[0]
            )


def _grade_case(
    exercise: TrainingExercise,
    function: Callable,
    case: TrainingCase,
    path: Path,
    handed: list[str],
    observed: list[Observed],
    candidates: set[int],
) -> tuple[list[GradientVerdict], set[int]]:
    """Every call of the case: each returned value's verdict, the worst over the calls, a wrong one
    with the first call it differs on; and the known mistakes of ``candidates`` (their indices in
    ``exercise.known``) whose results it has on every call (each left out from the first call it differs on).
    ``handed`` gathers the arguments a call gave back as they were handed in, ``observed`` every call
    (what a symptom reads). Each call is made twice: a function that keeps state between calls gives two
    answers, and is refused so; results it returns in another order are refused with that order."""
    verdicts = {name: GradientVerdict(name, "exact", case=case.label) for name in exercise.returns}
    reproduced = set(candidates)
    for number, call in enumerate(case.calls, 1):
        arguments = _arguments(case, call, exercise)
        right = _quiet(TEXTBOOK[exercise.name], _arguments(case, call, exercise), exercise)
        assert not isinstance(right, str), right
        try:
            returned = _call(function, path, exercise, arguments)
        except Raised as raised:
            _name_uncomputable(raised, exercise, reproduced, _arguments(case, call, exercise), right)
            raise
        again = _call(function, path, exercise, _arguments(case, call, exercise))  # the same call again
        yours, befores = _results(returned, exercise), _befores(exercise, arguments)
        if isinstance(yours, str):
            order = _reordered(returned, exercise, befores, right)
            if order is None:
                raise Raised(f"{exercise.name} {yours} (case {case.label}, call {number})")
            refused = Raised(f"{exercise.name} returns its results in another order, ({order['yours']})")
            refused.cause = "returns_order"  # what they are in that order is filled in by grading them so
            refused.names = {"name": exercise.name, "right": ", ".join(exercise.returns), **order}
            raise refused
        _same_again(exercise, yours, again)
        handed += [name for name in [_handed_back(returned, exercise, arguments)] if name]
        said = ", ".join(f"{key} {value}" for key, value in call.items() if isinstance(value, (int, float)))
        for name, mine, theirs, before in zip(exercise.returns, yours, right, befores):
            status, error, relative = _compare(mine, theirs, before)
            verdict = verdicts[name]
            if verdict.status == "close" and status == "close":
                verdict.max_abs_error = max(verdict.max_abs_error, error)
                verdict.relative_error = max(verdict.relative_error, relative)
            if RANK[status] > RANK[verdict.status]:
                verdict.status, verdict.max_abs_error, verdict.relative_error = status, error, relative
                if status == "wrong":
                    where = _where(mine, theirs)
                    verdict.detail = f"call {number}{f' ({said})' if said else ''}: {name}{where}"
                    if mine.dtype is not None and _rounded(mine, theirs):
                        digits = numpy.finfo(mine.dtype).precision
                        verdict.mistake = "rung_dtype"
                        verdict.values = {"name": name, "dtype": mine.dtype, "digits": digits}
        learners, textbooks = ([value.array.reshape(-1) for value in values] for values in (yours, right))
        observed.append(Observed({**case.fixed, **call}, learners, textbooks, case.label))
        reproduced = _still_reproduced(exercise, reproduced, case, call, (yours, befores, right))
    return list(verdicts.values()), reproduced


def _name_uncomputable(
    raised: Raised, exercise: TrainingExercise, indices: set[int], arguments: list[Any], right: list[_Value]
) -> None:
    """Where the learner's call raised an ArithmeticError (a division by 0) that the textbook does not, and a
    known mistake of ``indices`` (its results the learner's on every call before) cannot compute ``arguments``
    either (_uncomputed: it raises, or gives NumPy's inf or nan): ``raised`` names that mistake."""
    if not isinstance(raised.error, ArithmeticError):
        return
    for index in sorted(indices):
        theirs = _quiet(exercise.known[index][1], [_copied(a) for a in arguments], exercise)
        if _uncomputed(theirs, right, _befores(exercise, arguments)):
            raised.cause, raised.names = exercise.known[index][0][0], {}
            return


def _uncomputed(results: list[_Value] | str, right: list[_Value], befores: list[Any]) -> bool:
    """Whether ``results`` (a known mistake's, from _quiet, or the learner's) could not be computed where the
    textbook's ``right`` could, and are nothing else: an ArithmeticError raised (a division by 0 on Python's
    floats; a known mistake's results are always readable, so a str from _quiet is one), or a value inf or nan
    where the textbook's is finite (the same division on NumPy's floats), every finite one the textbook's."""
    if isinstance(results, str):
        return True
    if not any(
        mine.array.shape == theirs.array.shape
        and bool((~numpy.isfinite(mine.array) & numpy.isfinite(theirs.array)).any())
        for mine, theirs in zip(results, right)
    ):
        return False
    return all(
        mine.array.shape == theirs.array.shape
        and _compare(
            mine._replace(array=numpy.where(numpy.isfinite(mine.array), mine.array, theirs.array)),
            theirs,
            before,
        )[0]
        != "wrong"
        for mine, theirs, before in zip(results, right, befores)
    )


def _still_reproduced(
    exercise: TrainingExercise,
    indices: set[int],
    case: TrainingCase,
    call: dict[str, Any],
    graded: tuple[list[_Value], list[numpy.ndarray | None], list[_Value]],
) -> set[int]:
    """The known mistakes of ``indices`` whose results on this call are the learner's (``graded``: what
    it returned, the arguments it updates, the textbook's results), or that, as the learner's, cannot be
    computed here (_uncomputed: one raising where the other gives inf or nan is the same division by 0)."""
    yours, befores, right = graded
    yours_uncomputed = _uncomputed(yours, right, befores)
    kept = set()
    for index in indices:
        theirs = _quiet(exercise.known[index][1], _arguments(case, call, exercise), exercise)
        uncomputed = yours_uncomputed and _uncomputed(theirs, right, befores)
        if uncomputed or _same(yours, theirs, befores, right):
            kept.add(index)
    return kept


def _cause(
    exercise: TrainingExercise, candidates: set[int], observed: list[Observed]
) -> tuple[tuple[str, ...], dict[str, Any]]:
    """The keys of the mistakes whose results a wrong rung has on every call (one alone before two
    together), or else the first symptom its numbers show, with the values its sentence names."""
    if candidates:
        return exercise.known[min(candidates)][0], {}
    if all(all(_agree(y, r) for y, r in zip(o.yours, o.right)) for o in observed):
        return (), {}  # nothing wrong: no symptom to read
    with numpy.errstate(all="ignore"):
        for symptom in exercise.symptoms:
            found = symptom(observed)
            if found is not None:
                return (found[0],) if isinstance(found[0], str) else found[0], found[1]
    return (), {}


def _agree(yours: numpy.ndarray, right: numpy.ndarray) -> bool:
    return yours.shape == right.shape and bool(
        numpy.allclose(yours, right, rtol=1e-12, atol=0.0, equal_nan=True)
    )


def check_training_function(
    module: ModuleType,
    name: str,
    path: Path,
    seed: int = 0,
    time_limit: float | None = TIME_LIMIT,
    say: Callable[[str], None] | None = None,
) -> FunctionVerdict:
    """Grade the learner's training rung ``name`` on every drawn case of it: each value's verdict is
    the first case it is wrong on, or exact (close) on every call of every case. ``say`` gets a line
    when it runs so long that the wait wants saying (under_time_limit). Results returned in another order
    are refused so, and graded again in the contract's order to say what they are then."""
    exercise = TRAINING_BY_NAME[name]
    function = learners_function(module, name)
    if function is None:
        return FunctionVerdict(name, "textbook", message="not defined in the file: the textbook's is used")
    try:
        with under_time_limit(time_limit, needs_line_watch(module), say, f"your {name}"):
            try:
                return _graded(exercise, function, path, seed)
            except Raised as raised:
                if raised.cause == "returns_order":
                    ordered = _in_order(function, exercise, raised.names["yours"])
                    raised.names["then"] = _then(exercise, ordered, path, seed)
                if raised.cause in ("writes_input", "writes_list"):
                    return _written_and_graded(exercise, function, path, seed, raised)
                raise
    except ToDo as todo:
        waits = f" (waits on {todo.where}, still to do)" if todo.where and todo.where != name else ""
        return FunctionVerdict(name, "to do", message=f"raises NotImplementedError{waits}")
    except Raised as raised:
        message = raised.line if raised.cause is None else sentence(raised.cause, **raised.names)
        return FunctionVerdict(name, "error", message=message, cause=raised.cause)
    except TimedOut:
        return FunctionVerdict.out_of_time(name, time_limit)


def _written_and_graded(
    exercise: TrainingExercise, function: Callable, path: Path, seed: int, written: Raised
) -> FunctionVerdict:
    """The verdict of a rung that writes into what it was handed: the write refused by name, and its
    results graded as they are when it is handed copies, so that a slip beside the write is named too."""
    said = sentence(written.cause or "writes_input", **written.names)

    def on_copies(*arguments: Any) -> Any:
        return function(*[_copied(argument) for argument in arguments])

    try:
        graded = _graded(exercise, on_copies, path, seed)
    except (Raised, ToDo):  # on copies it raises, or returns what cannot be graded: the write is said alone
        return FunctionVerdict(exercise.name, "error", message=said, cause=written.cause)
    right = graded.status == "done"
    return FunctionVerdict(
        exercise.name,
        "error",
        [] if right else graded.gradients,
        message=f"{said}; handed copies, its results are {'right' if right else 'wrong too'}",
        cause=written.cause,
    )


def _then(exercise: TrainingExercise, ordered: Callable, path: Path, seed: int) -> str:
    """What ``ordered``'s results (the learner's, put in the contract's order) are, as the returns_order
    sentence ends: right only where every value is the textbook's on every call of every case; else still
    wrong, and why where the grading in that order names it."""
    try:
        in_order = _graded(exercise, ordered, path, seed)
    except Raised as raised:
        if raised.cause == "returns_order":  # read in yet another order: the order is not the only one
            return "still wrong (put in order, learn check says where)"
        said = raised.line if raised.cause is None else sentence(raised.cause, **raised.names)
        return f"still wrong: {said}"
    if in_order.status == "done":
        return "right"
    if in_order.status == "error":
        explained = [in_order.message]
    else:
        explained = [g.explanation() or "" for g in in_order.gradients if g.status == "wrong" and g.mistake]
    return (
        f"still wrong: {explained[0]}" if explained else "still wrong (put in order, learn check says where)"
    )


def _graded(exercise: TrainingExercise, function: Callable, path: Path, seed: int) -> FunctionVerdict:
    """``function`` graded as the rung ``exercise`` on every case drawn from ``seed`` (raises what its calls
    raise: ToDo, Raised)."""
    name = exercise.name
    merged: dict[str, GradientVerdict] = {}
    handed: list[str] = []
    candidates = set(range(len(exercise.known)))  # the mistakes it reproduces on every call so far
    observed: list[Observed] = []
    for case in exercise.cases(numpy.random.default_rng(seed)):
        try:
            verdicts, reproduced = _grade_case(exercise, function, case, path, handed, observed, candidates)
        except Raised:
            if any(v.status == "wrong" for v in merged.values()):
                break  # the first case it is wrong on says what is wrong
            raise
        candidates &= reproduced
        for verdict in verdicts:  # every case is graded: an exact value is exact on every call
            kept = merged.get(verdict.name)
            if kept is None or RANK[verdict.status] > RANK[kept.status]:
                merged[verdict.name] = verdict
    else:  # every case graded: its first calls asked again show state a later call changed
        _same_later(exercise, function, path, observed)
    gradients = [merged[value] for value in exercise.returns if value in merged]
    keys, values = _cause(exercise, candidates, observed)
    for gradient in gradients:  # named only where a mistake has its results on every call graded
        if gradient.mistake is None and keys and gradient.status == "wrong":
            gradient.mistake, gradient.also, gradient.values = keys[0], keys[1:], values
    status = "wrong" if any(g.status == "wrong" for g in gradients) else "done"
    if status == "done" and handed:  # right values, but the caller's own arrays: refused by name
        names = {"name": name, "what": handed[0]}
        return FunctionVerdict(
            name, "error", message=sentence("returns_input", **names), cause="returns_input"
        )
    return FunctionVerdict(name, status, gradients)
