"""learn status: the ladder of exercises, done, ready or locked behind what."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import functional
from . import blocks
from .exercises.curriculum import BY_NAME, EXERCISES, LADDER, OPTIONAL, TRAINING_BY_NAME, textbook_function
from .grading import check
from .grading.verdicts import FunctionVerdict
from .loading import TIME_LIMIT


def prerequisites(name: str) -> tuple[str, ...]:
    """The exercises the textbook's ``name`` calls, directly or through a helper of the textbook's
    (multi_head_backward calls attention_backward), in ladder order: the rungs below it. The latent
    attentions (OPTIONAL) are below their own rungs only: a block calls them only on its latent
    cases, and there the textbook's stand in for a learner's still to do (grading.check_function).
    A training rung is below the rungs it names as built on (adamw_step on adam_step)."""
    if name in TRAINING_BY_NAME:
        return TRAINING_BY_NAME[name].builds_on
    found: set[str] = set()
    codes = [textbook_function(name).__code__]
    seen: set[Any] = set()
    while codes:
        code = codes.pop()
        seen.add(code)
        for called in code.co_names:
            if called in BY_NAME and called != name:
                if called not in OPTIONAL or name in OPTIONAL:
                    found.add(called)
                continue
            helper = getattr(functional, called, None) or getattr(blocks, called, None)
            inner = getattr(helper, "__code__", None)
            if inner is not None and inner not in seen:
                codes.append(inner)
    return tuple(e.backward for e in EXERCISES if e.backward in found)


@dataclass
class Rung:
    """One exercise on the ladder: ``done`` (passes learn check), ``ready`` (every rung below it
    done) or ``locked`` (behind ``behind``, the rungs below it not done yet); ``verdict`` as check gave it."""

    name: str
    state: str
    behind: tuple[str, ...]
    verdict: FunctionVerdict


def status(
    path: str | Path, say: Callable[[str], None] | None = None, time_limit: float | None = TIME_LIMIT
) -> list[Rung]:
    """``learn status``: every exercise of the learner's file graded (under ``time_limit`` each, ``say``
    getting a line when one runs so long that the wait wants saying), and placed on the ladder."""
    verdicts = {verdict.name: verdict for verdict in check(path, time_limit=time_limit, say=say)}
    done = {name for name, verdict in verdicts.items() if verdict.passed}
    rungs = []
    for name in LADDER:
        behind = tuple(below for below in prerequisites(name) if below not in done)
        state = "done" if name in done else "locked" if behind else "ready"
        rungs.append(Rung(name, state, behind, verdicts[name]))
    return rungs


def format_status(rungs: Sequence[Rung]) -> str:
    """The ladder, a line per exercise, and what to do next."""
    width = max(len(rung.name) for rung in rungs)
    said = {  # an error: it raised, ran past its time, or returned what cannot be graded
        "wrong": "wrong",
        "error": "an error, learn check says what",
        "textbook": "not in the file",
    }
    lines = []
    for number, rung in enumerate(rungs, 1):
        line = f"{number:>2}. {rung.name:<{width}}  {rung.state}"
        if rung.state == "locked":
            line += f" behind {', '.join(rung.behind)}"
        waits = [below for below in rung.behind if f"it calls your {below}, which" in rung.verdict.message]
        if waits:  # graded through their wrong rung below it: its own verdict waits on that one
            line += f" (yours: waits on {waits[0]}, which it calls)"
        elif rung.state != "done" and rung.verdict.status in ("wrong", "error", "textbook"):
            line += f" (yours: {said[rung.verdict.status]})"
        lines.append(line)
    counts = {state: sum(rung.state == state for rung in rungs) for state in ("done", "ready", "locked")}
    lines.append(", ".join(f"{count} {state}" for state, count in counts.items()))
    ready = [rung.name for rung in rungs if rung.state == "ready"]
    if ready:
        lines.append(f"next: {ready[0]}")
    else:
        lines.append(
            "every exercise done. The proof: numpy-transformer learn prove FILE (your encoder-decoder "
            "learns a real translator beside the textbook's); then on real text: numpy-transformer learn "
            "prove FILE --corpus data/messages-en-fr.tsv (program messages: python examples/debian_messages.py "
            "builds the file)"
        )
    return "\n".join(lines)
