"""learn check: each of the learner's functions graded on its exercise's drawn cases.

The grader (``grader``) calls the learner's code, compares it with the textbook, grades each
gradient and localises a wrong one; what a verdict is (``verdicts``); which backwards a backward
calls (``recording``); from a wrong gradient to a named mistake (``diagnosis``), and the causes of
a wrong block read from its calls (``causes``)."""

from .grader import check, check_function, format_verdicts, run_check
from .verdicts import FunctionVerdict

__all__ = ["FunctionVerdict", "check", "check_function", "format_verdicts", "run_check"]
