"""The grader (learn check): each of the learner's functions graded on its exercise's drawn cases.

A case in four stages: call the learner's code (_call_learners_code), compare with the textbook
(_compare_with_textbook), grade each gradient (_grade_gradients), localise a wrong block's mistake
(_localise)."""

from __future__ import annotations

import inspect
import traceback
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy

from ... import functional
from ...backend import get_array_module, to_numpy
from ...gradient_checking import gradcheck
from ...gradient_checking.contract import backward_writes
from ...gradient_checking.upstream import random_upstream
from .. import blocks
from ..exercises.curriculum import (
    BY_NAME,
    LADDER,
    OPTIONAL,
    TRAINING_BY_NAME,
    textbook_function,
    unknown_exercise,
)
from ..exercises.exercise import Case, Exercise
from ..loading import (
    TIME_LIMIT,
    TimedOut,
    describe_error,
    learners_function,
    load_learner,
    needs_line_watch,
    replaced_textbook,
    their_arrays,
    under_time_limit,
)
from .causes import block_mistake, dtype_drift, explain_raised, partial_sum
from .diagnosis import RESIDUAL_BLOCKS, diagnose, returned_gradients
from .recording import RecordedCall, explain_writes, recording_calls, textbook_calls
from .steps import check_training_function
from .verdicts import EXACT, FunctionVerdict, GradientVerdict, Localised, Raised, ToDo, as_array, close_enough

# each function's signature, read once: the central differences call a forward thousands of times
_SIGNATURES: weakref.WeakKeyDictionary[Callable, inspect.Signature] = weakref.WeakKeyDictionary()


def _signature(function: Callable) -> inspect.Signature:
    """inspect.signature(function), kept while the function lives (a callable that cannot be
    referred to weakly, a builtin's, is read each time)."""
    try:
        return _SIGNATURES[function]
    except (KeyError, TypeError):
        signature = inspect.signature(function)
    with suppress(TypeError):
        _SIGNATURES[function] = signature
    return signature


def _signature_problem(function: Callable, args: tuple, kwargs: dict[str, Any]) -> str | None:
    """Why ``function`` cannot be called as the model calls it, or None."""
    try:
        _signature(function).bind(*args, **kwargs)
    except TypeError as error:
        return str(error)
    except ValueError:  # no signature to read (a builtin): let the call say
        return None
    return None


def _call(function: Callable, path: Path, *args: Any, **kwargs: Any) -> Any:
    """Run the learner's function; NotImplementedError is "to do", anything else it raises or
    exits with is theirs (a NaN or overflow warning of NumPy included: it names their line)."""
    name = getattr(function, "__name__", "the function")
    problem = _signature_problem(function, args, kwargs)
    if problem is not None:
        given = ", ".join([*("dout" if i == 0 else "cache" for i in range(len(args))), *kwargs])
        raise Raised(f"{name} cannot be called as the model calls it, {name}({given}): {problem}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            return function(*args, **kwargs)
    except NotImplementedError as error:
        frames = [f for f in traceback.extract_tb(error.__traceback__) if Path(f.filename).resolve() == path]
        raise ToDo(frames[-1].name if frames else name) from None
    except (KeyboardInterrupt, TimedOut):
        raise
    except BaseException as error:  # SystemExit, GeneratorExit, a BaseException of theirs: all theirs
        raised = Raised(describe_error(error, path))
        raised.names = their_arrays(error, path)
        raise raised from None


def _forward_call(forward: Callable, case: Case, inputs: dict[str, Any], path: Path) -> tuple[Any, Any]:
    from ...backend import make_rng

    extra = {"rng": make_rng(case.seed)} if case.seed is not None else {}
    result = _call(forward, path, **inputs, **extra)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise Raised(
            f"{getattr(forward, '__name__', 'the forward')} must return (out, cache), got {type(result).__name__}"
        )
    return result


def _copy(inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _copy(value)
        if isinstance(value, dict)
        else value.copy()
        if hasattr(value, "copy") and hasattr(value, "shape")
        else value
        for name, value in inputs.items()
    }


def _check_output(out: Any, case: Case, name: str) -> None:
    """The learner's forward returned a number (a loss) or a floating array as its output."""
    if case.dloss is not None:
        try:
            float(out)
        except (TypeError, ValueError):
            raise Raised(f"{name} must return the loss as a number, got {type(out).__name__}") from None
        return
    dtype = getattr(out, "dtype", None)
    if dtype is None or not numpy.issubdtype(numpy.dtype(str(dtype)), numpy.floating):
        raise Raised(f"{name} must return a floating array as its output, got {type(out).__name__}")


def _flatten_params(name: str, grads: tuple[Any, ...], keys: list[str]) -> tuple[Any, ...]:
    """A block's gradients with its dparams dict spread out in the order of ``keys``."""
    dparams = grads[-1]
    if not isinstance(dparams, dict):
        raise Raised(
            f"{name} must return dparams as a dict with the keys of params, got {type(dparams).__name__}"
        )
    missing = [key for key in keys if key not in dparams]
    extra = [str(key) for key in dparams if key not in keys]
    if missing or extra:
        said = (f"lacks {', '.join(missing)}" if missing else "") + (
            f"{'; ' if missing else ''}has keys params has not: {', '.join(extra)}" if extra else ""
        )
        raise Raised(f"{name}'s dparams {said}")
    return (*grads[:-1], *[dparams[key] for key in keys])


def _variable(inputs: dict[str, Any], name: str) -> Any:
    """inputs[name], or inputs["params"][key] for the name "params.key"."""
    if name.startswith("params."):
        return inputs["params"][name.removeprefix("params.")]
    return inputs[name]


def _compare_forward(
    name: str, out: Any, cache: Any, textbook_out: Any, textbook_cache: Any, case: Case
) -> None:
    """A forward of the learner's own must compute the textbook's output, and keep a cache the
    model around it can read (the textbook's kind: the layers read its fields)."""
    if case.dloss is not None:
        yours, right = numpy.asarray(float(out)), numpy.asarray(float(textbook_out))
    else:
        yours, right = to_numpy(out), to_numpy(textbook_out)
    if yours.shape != right.shape:
        raise Raised(
            f"your {name} differs from the textbook's on case {case.label}: output shape {yours.shape}, "
            f"expected {right.shape}"
        )
    if not numpy.allclose(yours, right, rtol=1e-6, atol=1e-9, equal_nan=True):
        difference = numpy.abs(yours.astype(numpy.float64) - right)
        index = tuple(int(i) for i in numpy.unravel_index(int(numpy.nanargmax(difference)), difference.shape))
        raise Raised(
            f"your {name} differs from the textbook's on case {case.label}: at {index} yours "
            f"{float(yours[index]):.6g}, the textbook's {float(right[index]):.6g} (largest difference "
            f"{float(numpy.nanmax(difference)):.3g})"
        )
    fields = getattr(textbook_cache, "_fields", None)
    if fields is not None and getattr(cache, "_fields", None) != fields:
        raise Raised(
            f"your {name} keeps a cache of type {type(cache).__name__}, the textbook's is a "
            f"{type(textbook_cache).__name__}({', '.join(fields)}): the model around it reads that cache's "
            "fields, so return one (import it from numpy_transformer.functional)"
        )
    if (
        textbook_cache is not None
        and hasattr(textbook_cache, "shape")
        and getattr(cache, "shape", None) != textbook_cache.shape
    ):
        raise Raised(
            f"your {name} keeps a cache of type {type(cache).__name__}, the textbook's is an array of shape "
            f"{tuple(textbook_cache.shape)}: keep its layout"
        )


@dataclass
class _Theirs:
    """What the learner's code did on one case: their forward (the textbook's where they wrote none)
    with its inputs, output and cache, the upstream gradient it was handed back, the gradients their
    backward returned and the calls it made."""

    forward: Callable
    inputs: dict[str, Any]
    out: Any
    cache: Any
    upstream: Any
    grads: tuple[Any, ...]  # by the exercise's names, a block's dparams a dict
    calls: list[RecordedCall]


@dataclass
class _Textbook:
    """The textbook on the same case, and the learner's gradients lined up with its own, name by name
    (a block's dparams spread key by key)."""

    cache: Any
    calls: list[RecordedCall]
    names: tuple[str, ...]
    grads: tuple[Any, ...]
    expected: tuple[Any, ...]


def _call_learners_code(exercise: Exercise, module: ModuleType, case: Case, path: Path, seed: int) -> _Theirs:
    """Their forward and backward on the case, the backward's calls recorded; what their code raises,
    or writes into what it was handed, is a Raised saying so (ToDo where it is still to do)."""
    backward = learners_function(module, exercise.backward) or textbook_function(exercise.backward)
    forward = learners_function(module, exercise.forward) or textbook_function(exercise.forward)
    inputs = _copy(case.inputs)
    out, cache = _forward_call(forward, case, inputs, path)
    _check_output(out, case, getattr(forward, "__name__", exercise.forward))
    upstream: Any = case.dloss if case.dloss is not None else random_upstream(out.shape, seed)
    given = upstream.copy() if hasattr(upstream, "copy") else upstream
    calls: list[RecordedCall] = []
    flat = {f"params.{k}": v for k, v in inputs.get("params", {}).items()} | inputs
    spaces = [vars(module)] + [vars(blocks)] * exercise.params
    try:
        with recording_calls(spaces, calls):
            returned, writes = backward_writes(lambda d, c: _call(backward, path, d, c), given, cache, flat)
    except Raised as raised:  # its file and line kept, with the cause where the calls it made show it
        raise explain_raised(raised, exercise.backward, upstream, cache, calls) from None
    written = explain_writes(exercise.backward, writes, calls)
    if written is not None:
        raise Raised(written)
    grads = returned_gradients(exercise.backward, returned, exercise.grads)
    return _Theirs(forward, inputs, out, cache, upstream, tuple(grads), calls)


def _compare_with_textbook(exercise: Exercise, case: Case, path: Path, theirs: _Theirs) -> _Textbook:
    """The textbook's forward and backward on the same case: their forward, where they wrote one, must
    compute the textbook's output and cache (a Raised says how it differs); their gradients lined up
    with the textbook's."""
    textbook_forward = textbook_function(exercise.forward)
    textbook_out, textbook_cache = _forward_call(textbook_forward, case, _copy(case.inputs), path)
    if theirs.forward is not textbook_forward:
        name = getattr(theirs.forward, "__name__", exercise.forward)
        _compare_forward(name, theirs.out, theirs.cache, textbook_out, textbook_cache, case)
    names, grads = exercise.grads, theirs.grads
    expected, right_calls = textbook_calls(exercise.backward, theirs.upstream, textbook_cache)
    expected = expected if isinstance(expected, tuple) else (expected,)
    if exercise.params:  # a block: dparams, a dict, graded key by key
        keys = list(case.inputs["params"])
        grads = _flatten_params(exercise.backward, grads, keys)
        expected = (*expected[:-1], *[expected[-1][key] for key in keys])
        names = (*names[:-1], *[f"dparams[{key}]" for key in keys])
    return _Textbook(textbook_cache, right_calls, tuple(names), tuple(grads), tuple(expected))


def _grade_gradients(
    exercise: Exercise, case: Case, path: Path, theirs: _Theirs, textbook: _Textbook
) -> dict[str, GradientVerdict]:
    """Each gradient's verdict, by label: one that cannot be compared entry by entry is wrong as it
    stands (_screen); the others are checked by central differences of their forward and against the
    textbook's gradient (_grade_by_differences)."""
    verdicts: dict[str, GradientVerdict] = {}
    checked: dict[str, numpy.ndarray] = {}
    for label, variable, grad, right in zip(textbook.names, case.grads, textbook.grads, textbook.expected):
        if variable == "" and grad is None:  # the layer has no bias, and none was returned
            continue
        screened = _screen(label, variable, grad, right, case, bool(exercise.params))
        if isinstance(screened, GradientVerdict):
            verdicts[label] = screened
        else:
            checked[variable] = screened
    if checked:
        verdicts |= _grade_by_differences(case, path, theirs, textbook, checked)
    return verdicts


def _screen(
    label: str, variable: str, grad: Any, right: Any, case: Case, block: bool
) -> GradientVerdict | numpy.ndarray:
    """The verdict of a gradient that cannot be compared entry by entry (a value where the layer has
    none, a complex number, no array, another dtype, another shape), or for one that can, its array."""
    if variable == "":
        return GradientVerdict(
            label, "wrong", case=case.label, detail="expected None (the layer has no bias), got a value"
        )
    right = to_numpy(right)
    yours = as_array(grad)
    if isinstance(grad, complex) or (hasattr(grad, "dtype") and numpy.dtype(str(grad.dtype)).kind == "c"):
        detail = f"returned a complex {type(grad).__name__}: the gradient of a real function is real"
        return GradientVerdict(label, "wrong", case=case.label, detail=detail)
    if yours is None:
        detail = f"returned {type(grad).__name__}, expected an array of shape {tuple(right.shape)}"
        return GradientVerdict(label, "wrong", case=case.label, detail=detail)
    if (drift := dtype_drift(grad, right)) is not None:
        return GradientVerdict(label, "wrong", case=case.label, detail=drift, mistake="dtype")
    if yours.shape != right.shape:
        mistake, _ = diagnose(yours, right, case, variable, [])
        mistake = mistake or (partial_sum(yours, right) if block else None)
        detail = f"shape {tuple(yours.shape)}, expected {tuple(right.shape)}"
        return GradientVerdict(label, "wrong", case=case.label, mistake=mistake, detail=detail)
    return yours


def _grade_by_differences(
    case: Case, path: Path, theirs: _Theirs, textbook: _Textbook, checked: dict[str, numpy.ndarray]
) -> dict[str, GradientVerdict]:
    """The ``checked`` gradients (by variable) against float64 central differences of their forward
    and against the textbook's: exact, close, or wrong where it differs from either, with the
    mistake it looks like and the entry that shows it."""

    def loss() -> float:
        value, _ = _forward_call(theirs.forward, case, theirs.inputs, path)
        upstream = theirs.upstream
        return (
            float(value) * upstream
            if case.dloss is not None
            else float((to_numpy(value) * to_numpy(upstream)).sum())
        )

    xp = get_array_module()
    result = gradcheck(
        loss,
        {v: _variable(theirs.inputs, v) for v in checked},
        {v: xp.asarray(g) for v, g in checked.items()},
        max_entries=case.max_entries,
        raise_on_failure=False,
    )
    expected = textbook.expected
    scale = max([1.0] + [float(numpy.abs(to_numpy(r)).max(initial=0.0)) for r in expected if r is not None])
    candidates = case.candidates(textbook.cache, theirs.upstream) if case.candidates else {}
    verdicts: dict[str, GradientVerdict] = {}
    for report in result.reports:
        variable = report.name
        label = textbook.names[case.grads.index(variable)]
        yours = checked[variable]
        right = to_numpy(expected[case.grads.index(variable)])
        differs = not close_enough(yours, right)  # entries the differences did not sample included
        if not report.passed or differs:
            near = [(to_numpy(c), key) for c, key in candidates.get(variable, [])]
            mistake, factor = diagnose(yours, right, case, variable, near)
            detail = _wrong_entry(yours, right, report)
            verdicts[label] = GradientVerdict(
                label,
                "wrong",
                report.max_abs_error,
                report.relative_error,
                case.label,
                detail,
                mistake,
                factor,
            )
        else:
            exact = float(numpy.abs(yours - right).max(initial=0.0)) <= EXACT * scale
            verdicts[label] = GradientVerdict(
                label, "exact" if exact else "close", report.max_abs_error, report.relative_error, case.label
            )
    return verdicts


def _wrong_entry(yours: numpy.ndarray, right: numpy.ndarray, report: Any) -> str:
    """Where a wrong gradient shows it: a NaN or inf of theirs where the textbook's is a number; else,
    where no central difference was taken, the entry farthest from the textbook's; else the worst
    entry of the differences."""
    broken = ~numpy.isfinite(yours) & numpy.isfinite(right)
    if broken.any():
        worst = numpy.unravel_index(int(broken.argmax()), right.shape)
        return f"at {tuple(int(i) for i in worst)} yours is {yours[worst]}, expected {right[worst]:.6g}"
    if report.passed:  # wrong where no central difference was taken: against the textbook's
        worst = numpy.unravel_index(int(numpy.abs(yours - right).argmax()), right.shape)
        return f"at {tuple(int(i) for i in worst)} yours {yours[worst]:.6g}, expected {right[worst]:.6g}"
    index = report.worst_index
    return f"at {index if index else '()'} yours {report.analytic:.6g}, expected {report.numeric:.6g}"


def _localise(
    exercise: Exercise, case: Case, theirs: _Theirs, textbook: _Textbook, verdicts: dict[str, GradientVerdict]
) -> Localised | None:
    """For a wrong block: where in it the mistake lives, read from the calls it made beside the
    textbook's (a branch dropped takes the place of the skip it looked like); None otherwise."""
    if not exercise.params or not any(v.status == "wrong" for v in verdicts.values()):
        return None
    join = isinstance(textbook.cache, RESIDUAL_BLOCKS)
    localised = block_mistake(
        theirs.calls, theirs.cache, textbook.calls, textbook.cache, case.dloss, textbook.names, textbook.grads,
        textbook.expected, verdicts, join,
    )  # fmt: skip
    if localised is not None and localised.mistake == "branch_dropped":  # not the skip, as it looked
        for verdict in verdicts.values():
            verdict.mistake = None if verdict.mistake == "residual_dropped" else verdict.mistake
    return localised


def _run_case(
    exercise: Exercise, module: ModuleType, case: Case, path: Path, seed: int
) -> tuple[list[GradientVerdict], Localised | None]:
    """One case of one exercise, in four stages: call the learner's code, compare with the textbook,
    grade each gradient, localise a wrong block's mistake. Returns each returned gradient's verdict
    (raises ToDo or Raised) and, for a wrong block, where its mistake is."""
    theirs = _call_learners_code(exercise, module, case, path, seed)
    textbook = _compare_with_textbook(exercise, case, path, theirs)
    verdicts = _grade_gradients(exercise, case, path, theirs, textbook)
    localised = _localise(exercise, case, theirs, textbook, verdicts)
    return [verdicts[label] for label in textbook.names if label in verdicts], localised


@contextmanager
def _textbook_standing_in(module: ModuleType, names: Sequence[str]) -> Iterator[None]:
    """The textbook's functions ``names`` in the learner's module while it runs; theirs put back after."""
    space = vars(module)
    saved = {name: space[name] for name in names if name in space}
    try:
        for name in names:
            space[name] = textbook_function(name)
        yield
    finally:
        for name in names:
            if name in saved:
                space[name] = saved[name]
            else:
                space.pop(name, None)


def _run_case_standing_in(
    exercise: Exercise, module: ModuleType, case: Case, path: Path, seed: int, standing_in: list[str]
) -> tuple[list[GradientVerdict], Localised | None]:
    """_run_case; where it waits on an optional exercise of theirs still to do (a latent attention,
    which a block calls on its latent cases only), again with the textbook's in its place, its name
    added to ``standing_in``."""
    while True:
        try:
            with _textbook_standing_in(module, standing_in):
                return _run_case(exercise, module, case, path, seed)
        except ToDo as todo:
            if exercise.backward in OPTIONAL or todo.where not in OPTIONAL or todo.where in standing_in:
                raise
            standing_in.append(todo.where)


def check_function(
    module: ModuleType,
    name: str,
    path: Path,
    seed: int = 0,
    time_limit: float | None = TIME_LIMIT,
    say: Callable[[str], None] | None = None,
) -> FunctionVerdict:
    """Grade the learner's ``name`` (a rung of LADDER) on every drawn case of it; ``say`` gets a line
    when it runs so long that the wait wants saying (under_time_limit)."""
    if name in TRAINING_BY_NAME:
        return check_training_function(module, name, path, seed, time_limit, say)
    exercise = BY_NAME[name]
    if learners_function(module, name) is None:
        defined = None if module is functional else getattr(module, name, None)
        if defined is not None and not callable(defined):  # relu_backward = 5: theirs, not the textbook's
            return FunctionVerdict(
                name,
                "error",
                message=f"{name} in {path.name} is {type(defined).__name__} {defined!r:.60}, not a function: "
                f"define it with def {name}(...)",
            )
        return FunctionVerdict(name, "textbook", message="not defined in the file: the textbook's is used")
    merged: dict[str, GradientVerdict] = {}
    localised: Localised | None = None
    standing_in: list[str] = []
    rng = numpy.random.default_rng(seed)
    try:
        with under_time_limit(time_limit, needs_line_watch(module), say, f"your {name}"):
            cases = list(enumerate(BY_NAME[name].cases(rng)))
            for number, case in cases:
                graded, where = _run_case_standing_in(
                    exercise, module, case, path, seed + number, standing_in
                )
                localised = localised or where
                for verdict in graded:
                    kept = merged.get(verdict.name)
                    rank = {"exact": 0, "close": 1, "wrong": 2}
                    if kept is None or rank[verdict.status] > rank[kept.status]:
                        merged[verdict.name] = verdict
                    elif kept.status == verdict.status == "close":
                        kept.max_abs_error = max(kept.max_abs_error, verdict.max_abs_error)
                        kept.relative_error = max(kept.relative_error, verdict.relative_error)
    except ToDo as todo:
        waits = f" (waits on {todo.where}, still to do)" if todo.where and todo.where != name else ""
        return FunctionVerdict(name, "to do", message=f"raises NotImplementedError{waits}")
    except Raised as raised:
        return FunctionVerdict(name, "error", message=raised.line, cause=raised.cause)
    except TimedOut:
        return FunctionVerdict.out_of_time(name, time_limit)
    gradients = list(merged.values())
    status = "wrong" if any(g.status == "wrong" for g in gradients) else "done"
    stood = (
        f"your {' and '.join(standing_in)} still to do: the textbook's stood in on the latent-attention cases"
        if standing_in
        else ""
    )
    over = replaced_textbook(module, name)
    assigned = (
        f"{path.name} assigns it over the textbook's {over}: graded as yours; the textbook is left as it was "
        "(learn train runs yours without that)"
        if over
        else ""
    )
    message = "; ".join(part for part in (stood, assigned) if part)
    return FunctionVerdict(name, status, gradients, message=message, localised=localised)


def check(
    path: str | Path,
    names: Sequence[str] | None = None,
    seed: int = 0,
    module: ModuleType | None = None,
    time_limit: float | None = TIME_LIMIT,
    say: Callable[[str], None] | None = None,
) -> list[FunctionVerdict]:
    """Grade the learner's file: the exercises ``names`` (every exercise when None), in ladder order.
    ``say`` gets a line when a function runs so long that the wait wants saying; a function that calls
    one of theirs that ran out of time is not run (it would wait as long again).

    Raises ValueError for a name that is no exercise, FileNotFoundError, or LearnerCodeError when
    the file cannot be imported.
    """
    for name in names or ():
        if name not in LADDER:
            raise ValueError(unknown_exercise(name))
    module = module if module is not None else load_learner(path)
    file = Path(module.__file__ or path).resolve()
    wanted = [rung for rung in LADDER if names is None or not names or rung in names]
    graded: dict[str, FunctionVerdict] = {}
    not_run: set[str] = set()  # those that call one of theirs that ran out of time: it says so already
    for name in wanted:
        waiting = _waits_on_time_out(module, name, graded, time_limit)
        if waiting is not None:
            not_run.add(name)
        graded[name] = waiting or check_function(module, name, file, seed, time_limit, say)
    verdicts = [graded[name] for name in wanted]
    for verdict in verdicts:  # a wrong function that calls a wrong one of theirs: say which to fix first
        if verdict.status not in ("wrong", "error") or verdict.name in not_run:
            continue
        for callee in _callees(module, verdict.name):  # graded here even when not asked for
            if callee not in graded and verdict.timed_out:  # its time is spent: not waited for twice
                continue
            if callee not in graded:
                graded[callee] = check_function(module, callee, file, seed, time_limit, say)
            if graded[callee].status in ("wrong", "error"):
                pointer = f"it calls your {callee}, which is wrong: fix that first"
                if pointer not in verdict.message:
                    verdict.message = f"{verdict.message}; {pointer}" if verdict.message else pointer
                break
    return verdicts


def _waits_on_time_out(
    module: ModuleType, name: str, graded: dict[str, FunctionVerdict], time_limit: float | None
) -> FunctionVerdict | None:
    """The verdict of ``name``, not run, where it calls a function of theirs already graded that ran
    out of time (adamw_step calling a hanging adam_step); None where it is to be run."""
    if not any(verdict.timed_out for verdict in graded.values()):
        return None
    hanging = next((c for c in _callees(module, name) if c in graded and graded[c].timed_out), None)
    if hanging is None:
        return None
    return FunctionVerdict(
        name,
        "error",
        message=f"it calls your {hanging}, which did not return within {time_limit or 0:g} seconds: "
        "fix that first (not run: it would wait as long again)",
    )


def _callees(module: ModuleType, name: str) -> list[str]:
    """The exercises of the learner's file that their ``name`` calls, directly or through any
    function of their file (their helpers, their other exercises), in ladder order: the first is
    the one to fix first."""
    own = vars(module)
    code = getattr(learners_function(module, name), "__code__", None)
    codes = [code] if code is not None else []
    seen: set[Any] = set()
    found: set[str] = set()
    while codes:
        code = codes.pop()
        if code in seen:
            continue
        seen.add(code)
        codes += [const for const in code.co_consts if isinstance(const, type(code))]  # nested functions
        for word in code.co_names:
            value = own.get(word)
            if word in LADDER and word != name and learners_function(module, word) is not None:
                found.add(word)
            if inspect.isfunction(value) and value.__globals__ is own:
                codes.append(value.__code__)
    return [rung for rung in LADDER if rung in found]


MAX_WRONG_SHOWN = 6  # a whole model has dozens of parameters: one mistake, not one wall of ✖ lines


MARKS = {"done": "✔", "wrong": "✖", "error": "✖", "to do": "·", "textbook": "-"}


def format_verdicts(verdicts: Sequence[FunctionVerdict], details: bool = True) -> str:
    """The report: a line per function, and under it (``details``, or when wrong) one per gradient."""
    width = max((len(v.name) for v in verdicts), default=0)
    lines = []
    for verdict in verdicts:
        status = (
            "from the textbook (not defined in the file)" if verdict.status == "textbook" else verdict.status
        )
        head = f"{MARKS[verdict.status]} {verdict.name:<{width}}  {status}"
        if verdict.status in ("to do", "error") and verdict.message:
            head += f": {verdict.message}"
        lines.append(head)
        # a wrong one it calls, or one the textbook's stood in for
        if verdict.status in ("wrong", "done") and verdict.message:
            lines.append(f"    {verdict.message}")
        if verdict.localised is not None:
            lines.append(f"    {verdict.localised.explanation()}")
        # an error with values graded beside it (a rung that writes into what it was handed, on copies)
        if verdict.status == "wrong" or (details and verdict.status == "done") or verdict.gradients:
            pad = max(len(g.name) for g in verdict.gradients)
            said: set[str] = set()  # a mistake explained once per function (a block has many gradients)
            wrong = [g for g in verdict.gradients if g.status == "wrong"]
            hidden = wrong[MAX_WRONG_SHOWN:]
            for grad in verdict.gradients:
                if grad in hidden:
                    continue
                if grad.status == "exact":
                    lines.append(f"    {grad.name:<{pad}}  ✔ exact")
                elif grad.status == "close":
                    lines.append(
                        f"    {grad.name:<{pad}}  ≈ close (largest abs error {grad.max_abs_error:.1e}, "
                        f"rel {grad.relative_error:.1e})"
                    )
                else:
                    lines.append(f"    {grad.name:<{pad}}  ✖ wrong, case {grad.case}: {grad.detail}")
                    explanation = grad.explanation()
                    if explanation and explanation in said:
                        lines.append(f"    {'':<{pad}}    (the same mistake as above)")
                    elif explanation:
                        said.add(explanation)
                        lines.append(f"    {'':<{pad}}    {explanation}")
            if hidden:
                lines.append(
                    f"    ... and {len(hidden)} more gradients wrong: {', '.join(g.name for g in hidden)}"
                )
    counts = {
        status: sum(v.status == status for v in verdicts) for status in ("done", "wrong", "error", "to do")
    }
    summary = ", ".join(f"{count} {status}" for status, count in counts.items() if count)
    lines.append(summary or "nothing of yours to check: every function is the textbook's")
    return "\n".join(lines)


def run_check(
    path: str | Path, names: Sequence[str] | None = None, say: Callable[[str], None] | None = None
) -> tuple[str, int]:
    """``learn check``: the report and the exit status (0 when every function checked passes); ``say``
    gets a line when a function runs so long that the wait wants saying."""
    verdicts = check(path, names, say=say)
    checked = [v for v in verdicts if names or v.status != "textbook"]
    return format_verdicts(verdicts, details=bool(names)), 0 if checked and all(
        v.passed for v in checked
    ) else 1
