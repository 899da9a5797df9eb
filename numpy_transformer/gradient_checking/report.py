"""What a gradient check says: :class:`GradcheckResult`, the one result type (a
:class:`TensorReport` for each checked array, with the :class:`KinkReport` of each
non-differentiable entry found), and :class:`GradcheckError`, the one error type, raised by
:func:`~numpy_transformer.gradient_checking.gradcheck` and the two ``assert_*`` helpers. It is an
``AssertionError``, so pytest shows it as a failed assertion."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class GradcheckError(AssertionError):
    """A gradient disagreed with its finite-difference estimate, or a backward broke its contract;
    the message says which fault, which argument and where."""


def percent(fraction: float) -> str:
    """``fraction`` as a percentage with three significant digits: 0.001 is "0.1%", never "0%"."""
    return f"{100 * fraction:.3g}%"


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
    numeric: float  # NaN where no difference could be taken (an input that is not finite)
    max_abs_error: float
    relative_error: float  # max |a - n| / the largest |a| or |n| of the whole check (see gradcheck)
    passed: bool
    mode: str = "exhaustive"
    kinks: list[KinkReport] = field(default_factory=list)
    worst: list[tuple[tuple[int, ...], float, float]] = field(default_factory=list)  # (index, a, n)
    note: str = ""
    error_map: Any = None  # exhaustive mode: |analytic - numeric| over the tensor's shape, for the picture
    ties: list[str] = field(default_factory=list)  # tied entries moved together, and the verdict
    fixed_relative: float | None = None  # fast mode, an error spread widely: the projection's relative error
    many_kinks: bool = False  # fast mode: too many kinks to tell apart from wrong entries

    def lines(self) -> list[str]:
        """The report as the lines of a failure message: the verdict, then its details."""
        how = (
            f"{self.checked} entries"
            if self.mode == "exhaustive"
            else f"{self.checked} entries by projection"
        )
        lines = [
            f"{self.name}: {'ok' if self.passed else 'FAILED'} rel {self.relative_error:.2e} "
            f"abs {self.max_abs_error:.2e} at {self.worst_index} (analytic {self.analytic:.10g}, "
            f"numeric {self.numeric:.10g}, {how})"
        ]
        if self.note:
            lines.append(f"  {self.note}")
        lines.extend(f"  {kink}" for kink in self.kinks[:8])
        lines.extend(f"  {tie}" for tie in self.ties[:8])
        if len(self.kinks) > 8:
            lines.append(f"  ... and {len(self.kinks) - 8} more non-differentiable entries")
        if not self.passed and self.worst:
            lines.append("  worst entries:   index            analytic             numeric           |error|")
            lines.extend(
                f"  {index!s:>22} {a:>19.10g} {n:>19.10g} {abs(a - n):>17.3e}" for index, a, n in self.worst
            )
        return lines


def failed_tensor(
    name: str, size: int, index: tuple[int, ...], analytic: float, numeric: float, note: str
) -> TensorReport:
    """The report of a tensor that failed before any comparison: ``note`` says why."""
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


@dataclass
class GradcheckResult:
    """Every checked array's :class:`TensorReport`; ``str()`` is the failure message's body."""

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

    def raise_if_failed(self) -> None:
        """Raise :class:`GradcheckError` with this result as its message unless every array passed."""
        if not self.passed:
            raise GradcheckError("gradient check failed:\n" + str(self))

    def __str__(self) -> str:
        lines = [line for report in self.reports for line in report.lines()]
        if self.picture:
            lines.append(f"picture of the error: {self.picture}")
        return "\n".join(lines)
