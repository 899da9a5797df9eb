"""The time budget (``--time-budget``): a run's number of steps planned to fit its minutes, from the
measured time of its steps and evaluations."""

from __future__ import annotations

import time

from ..config import EVALUATION_SHARE, EVALUATIONS

PLAN_AFTER = 20  # steps timed before a time-budgeted run plans its length
PAUSE = 10.0  # a step over this many times the median of the steps timed with it was a pause, not the pace


class TimeBudget:
    """Plans a run's number of steps to fit ``minutes`` of wall-clock time in all.

    The clock counts what was ``spent`` before training (reading the corpus, learning its
    subwords; an earlier session of the run) and everything since ``start``: steps, evaluations,
    saves. ``plan`` is asked again and again as the run goes: it takes the mean time of the steps
    since it was last asked (bar pauses) and of the evaluations so far, and returns the step at which the run
    should end so that the steps left, their evaluations and the ``final_evaluations`` (the last
    one, and the average's when the run averages its checkpoints) fill the time left.
    """

    def __init__(self, minutes: float, spent: float = 0.0, final_evaluations: int = 1) -> None:
        self.seconds, self.spent_before, self.final_evaluations = 60.0 * minutes, spent, final_evaluations
        self.started = time.perf_counter()
        self.step_seconds: list[float] = []  # the steps' own times since the last plan
        self.evaluation_seconds: list[float] = []  # every evaluation's (with its checkpoint saves)
        self.per_step = 0.0  # the pace the last plan assumed
        self.evaluations = EVALUATIONS  # the evaluations the last plan that chose the interval made room for
        self.plans = 0

    def start(self) -> None:
        self.spent_before, self.started = self.spent(), time.perf_counter()

    def spent(self) -> float:
        return self.spent_before + time.perf_counter() - self.started

    def plan(self, step: int, eval_every: int | None) -> int:
        """The last step: where steps of the measured time, one evaluation every ``eval_every`` of
        them and the final ones use up the time left (``step`` itself when it has run out).
        ``eval_every`` None: the interval is planned from the steps this plan returns
        (config.planned_eval_every), ``evaluations`` among them: EVALUATIONS, or as many as fit in
        EVALUATION_SHARE of the time left."""
        self.plans += 1
        if self.step_seconds:
            # their mean, bar pauses: bucketed batches of every length take turns, and their median
            # (the middle length's time) would promise more steps than the time holds
            typical = sorted(self.step_seconds)[len(self.step_seconds) // 2]
            paced = [seconds for seconds in self.step_seconds if seconds <= PAUSE * typical]
            self.per_step = sum(paced) / len(paced)
            self.step_seconds = []
        per_evaluation = sum(self.evaluation_seconds) / max(len(self.evaluation_seconds), 1)
        left = self.seconds - self.spent() - self.final_evaluations * per_evaluation  # they come in any case
        if eval_every is None:  # the planned evaluations take their time first, the steps the rest
            affordable = int(EVALUATION_SHARE * left / per_evaluation) if per_evaluation else EVALUATIONS
            self.evaluations = max(0, min(EVALUATIONS, affordable))
            left -= self.evaluations * per_evaluation
        a_step = self.per_step + (per_evaluation / eval_every if eval_every else 0.0)
        steps_left = left / max(a_step, 1e-9)
        return step + max(int(steps_left), 0)
