"""Which backwards a backward calls: the calls recorded, and the textbook's own calls."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ... import functional
from ...gradient_checking.contract import backward_writes
from .. import blocks
from ..exercises.curriculum import EXERCISES, textbook_function


@dataclass
class RecordedCall:
    """One call of a backward made inside the graded one: what it was given and returned, and
    what it wrote into (``backward_writes``'s list)."""

    name: str
    dout: Any
    cache: Any
    result: Any
    writes: list[tuple[str, str]]
    theirs: bool  # defined in the learner's file (not a textbook function they imported)


_RECORDING: list[list[RecordedCall]] = []  # the lists being recorded into, the innermost last


@contextmanager
def recording_calls(spaces: Sequence[dict[str, Any]], calls: list[RecordedCall]) -> Iterator[None]:
    """Every exercise's backward that the module globals ``spaces`` hold, wrapped so that each call
    appends a RecordedCall to ``calls``; the globals restored on the way out. A recording opened
    inside (the textbook's run of the ``textbook`` aid, called from the learner's block) records
    alone: its calls are not the learner's."""
    textbook = (vars(functional), vars(blocks))
    patched: list[tuple[dict[str, Any], str, Any]] = []

    def wrap(name: str, function: Callable) -> Callable:
        theirs = getattr(function, "__globals__", None) not in textbook

        def recorded(dout: Any, cache: Any, *args: Any, **kwargs: Any) -> Any:
            if _RECORDING and _RECORDING[-1] is not calls:  # an inner recording's call passing through
                return function(dout, cache, *args, **kwargs)
            call = RecordedCall(name, dout.copy() if hasattr(dout, "copy") else dout, cache, None, [], theirs)
            calls.append(call)  # on the way in: a call comes before the calls it makes
            call.result, call.writes = backward_writes(
                lambda d, c: function(d, c, *args, **kwargs), dout, cache
            )
            return call.result

        recorded.__name__ = name
        return recorded

    try:
        for space in spaces:
            for exercise in EXERCISES:
                function = space.get(exercise.backward)
                if callable(function):
                    patched.append((space, exercise.backward, function))
                    space[exercise.backward] = wrap(exercise.backward, function)
        _RECORDING.append(calls)
        yield
    finally:
        if _RECORDING and _RECORDING[-1] is calls:
            _RECORDING.pop()
        for space, name, function in reversed(patched):
            space[name] = function


RESIDUALS = frozenset({"residual_backward", "encoder_block_backward", "decoder_block_backward"})  # paths meet


def explain_writes(name: str, writes: list[tuple[str, str]], calls: list[RecordedCall]) -> str | None:
    """Why a backward that wrote into dout, an input or its cache breaks the model around it, and
    which function of the learner's did it where one they call did; None when it wrote nothing."""
    if not writes:
        return None
    where, difference = writes[0]
    if where == "dout":
        residual = " (a residual hands the same dout to its skip and its branch)" if name in RESIDUALS else ""
        said = (
            f"{name} changed dout in place: dout is the caller's array, which it may still read or hand to "
            f"another backward too{residual}, so a backward must not write into it"
        )
    elif where.startswith("input "):
        said = (
            f"{name} changed the forward's {where.split(chr(39))[1]} in place (the cache holds it): a "
            "backward must leave what it received as it was"
        )
    else:
        said = (
            f"{name} changed its cache in place, at {where} ({difference}): the model reads those arrays "
            "again (the next case, the next step), so a backward computes into new arrays (y = y * d, not y *= d)"
        )
    culprit = next((c for c in calls if c.theirs and c.writes and c.name != name), None)
    if culprit is not None:
        said += f"; your {culprit.name}, which it calls, wrote into the {culprit.writes[0][0]} it was handed"
    return said


def cache_paths(cache: Any, path: str = "") -> dict[int, str]:
    """Where each cache inside ``cache`` sits, by identity: "norm_2", "decoder[1].cross_attention",
    "feed_forward.activation" (an array: the relu's mask)."""
    if isinstance(cache, tuple) and hasattr(cache, "_fields"):
        items = [(f"{path}.{key}" if path else key, value) for key, value in zip(cache._fields, cache)]
    elif isinstance(cache, list):
        items = [(f"{path}[{i}]", value) for i, value in enumerate(cache)]
    else:
        return {}
    found: dict[int, str] = {}
    for where, value in items:
        if isinstance(value, (tuple, list)):
            found.setdefault(id(value), where)
            for key, inner in cache_paths(value, where).items():
                found.setdefault(key, inner)
        elif hasattr(value, "shape"):
            found.setdefault(id(value), where)
    return found


def textbook_calls(name: str, dout: Any, cache: Any) -> tuple[Any, list[RecordedCall]]:
    """The textbook's backward ``name`` and every backward of blocks.py it called, in call order."""
    calls: list[RecordedCall] = []
    with recording_calls([vars(blocks)], calls):
        result = textbook_function(name)(dout, cache)
    return result, calls
