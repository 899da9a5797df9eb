"""What a check says of one function and of one gradient, and what counts as equal."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy

from ...backend import to_numpy
from ..exercises.mistakes import sentence

EXACT = 1e-12  # |yours - textbook's| over the largest gradient: equal to rounding


class ToDo(Exception):
    def __init__(self, where: str) -> None:
        super().__init__(where)
        self.where = where  # the function of the learner's file that raised NotImplementedError


class Raised(Exception):
    def __init__(self, line: str) -> None:
        super().__init__(line)
        self.line = line
        self.cause: str | None = None  # the key of SENTENCES the line ends with, when a cause is named
        self.names: dict[str, Any] = {}  # the arrays the learner's failing line could see, by name
        self.error: BaseException | None = None  # what the learner's code raised, where it raised


@dataclass
class GradientVerdict:
    """How one returned gradient fared over every case: ``exact``, ``close`` or ``wrong``."""

    name: str
    status: str
    max_abs_error: float = 0.0
    relative_error: float = 0.0
    case: str = ""
    detail: str = ""  # wrong: where and both values
    mistake: str | None = None  # wrong: the key of SENTENCES it looks like
    factor: float | None = None
    values: dict[str, Any] = field(default_factory=dict)  # the numbers its sentence names
    also: tuple[str, ...] = ()  # more keys of SENTENCES: a second mistake made beside the first

    def explanation(self) -> str | None:
        if self.mistake is None:
            return None
        said = [sentence(key, factor=self.factor or 0.0, **self.values) for key in (self.mistake, *self.also)]
        return "; and ".join(said)


@dataclass
class FunctionVerdict:
    """One exercise: ``done``, ``wrong``, ``error`` (their code raised), ``to do``, or ``textbook``
    (not defined in the file: the textbook's is used)."""

    name: str
    status: str
    gradients: list[GradientVerdict] = field(default_factory=list)
    message: str = ""
    cause: str | None = None  # an error: the key of SENTENCES its message names, if any
    localised: Localised | None = None  # a wrong block: where its gradients first differ, and why
    timed_out: bool = False  # an error: it ran past its time limit (a function calling it is not run)

    @property
    def passed(self) -> bool:
        return self.status == "done"

    @classmethod
    def out_of_time(cls, name: str, seconds: float | None) -> FunctionVerdict:
        """The verdict of ``name`` stopped at its time limit of ``seconds``."""
        return cls(
            name,
            "error",
            message=f"did not return within {seconds or 0:g} seconds (every case together): a loop that never ends?",
            timed_out=True,
        )


def close_enough(yours: Any, right: Any) -> bool:
    """Within the tolerance of central differences of the textbook's gradient (gradcheck's rtol)."""
    scale = max(1.0, float(numpy.abs(right).max(initial=0.0)))
    return bool(numpy.allclose(yours, right, rtol=1e-3, atol=1e-5 * scale))


def equal_to_rounding(a: Any, b: Any) -> bool:
    scale = max(1.0, float(numpy.abs(b).max(initial=0.0)))
    return a.shape == b.shape and bool(numpy.allclose(a, b, rtol=1e-7, atol=1e-9 * scale))


def as_array(value: Any) -> numpy.ndarray | None:
    if value is None:
        return None
    try:
        raw = numpy.asarray(to_numpy(value))
        if raw.dtype == object or numpy.iscomplexobj(raw) or raw.dtype.kind not in "biuf":
            return None
        return raw.astype(numpy.float64)
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass
class Localised:
    """Where a block's gradients first differ from the textbook's: the piece whose incoming gradient
    is wrong while every gradient before it (in the backward's order) is right, and why."""

    where: str  # the piece's place in the cache: its incoming gradient is textbook()["d" + where]
    mistake: str | None = None  # a key of SENTENCES
    values: dict[str, Any] = field(default_factory=dict)
    kind: str = "reaching"  # "returned": every piece was handed the right gradient, ``where`` is a
    # gradient the block returns; "cache": a piece's backward was handed another piece's cache

    def explanation(self) -> str:
        said = f": {sentence(self.mistake, **self.values)}" if self.mistake else ""
        if self.kind == "cache":
            return sentence(self.mistake or "wrong_cache", **self.values)
        if self.kind == "returned":
            return f"every piece it calls is handed the textbook's gradient; the {self.where} it returns differs{said}"
        head = f"the first gradient that differs from the textbook's is the one reaching {self.where} "
        return head + f"(textbook(cache, dout)['d{self.where}']; every one before it is right){said}"
