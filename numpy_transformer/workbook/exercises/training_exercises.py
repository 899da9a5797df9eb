"""The training rungs, after the backwards: the learning rate's schedules, clipping by the global norm,
the Adam and AdamW step. Each declared once, with its cases (several calls from a state the learner
did not make), the mistakes those cases recognise (from ``training_mistakes``: the textbook's function
with one known mistake, or two) and its hints. Their textbook is numpy_transformer.workbook.optimiser."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy

from ...backend import Array, get_array_module
from ...presets import BASE, TINY
from .exercise import normal
from .training_mistakes import (
    ADAM_ARGUMENTS,
    ADAM_HYPER,
    ADAM_MISTAKES,
    ADAM_PAIRS,
    ADAMW_MISTAKES,
    ADAMW_PAIRS,
    CLIP_MISTAKES,
    CLIP_PAIRS,
    COSINE_MISTAKES,
    COSINE_PAIRS,
    NOAM_MISTAKES,
    NOAM_PAIRS,
    OTHER_NORMS,
    adam,
    adamw,
    clip,
    cosine,
    global_norm,
    handed_to_adam,
    noam,
)
from .training_symptoms import (
    Observed,
    Symptom,
    argument_unused,
    clip_epsilon,
    clip_other_norm,
    clip_scale,
    cosine_ends,
    cosine_past_end,
    cosine_span,
    cosine_turn,
    decay_rate,
    earlier_answer,
    handed_on_mixed,
    mixed_arguments,
    noam_decay,
    noam_front,
    noam_line,
    noam_one_curve,
    results_reordered,
    schedule_factor,
    warmup_line,
)


@dataclass(frozen=True)
class TrainingCase:
    """Calls of a training rung: each the keyword arguments ``fixed`` with one entry of ``calls``, in
    order. An optimiser step's calls are successive steps, each from the state (param, m, v, t) the
    textbook's previous step returned: each is graded alone, from a state the learner did not make."""

    label: str
    fixed: dict[str, Any]
    calls: list[dict[str, Any]]


@dataclass(frozen=True)
class TrainingExercise:
    name: str  # the function the learner writes, the textbook's name (workbook.optimiser)
    arguments: tuple[str, ...]  # in the order the run calls it (positionally)
    returns: tuple[str, ...]  # what it returns, in order
    doc: str  # the contract
    builds_on: tuple[str, ...] = ()  # the rungs below it (learn status)
    cases: Callable[[numpy.random.Generator], list[TrainingCase]] = field(kw_only=True)
    mistakes: tuple[tuple[str, Callable], ...] = field(
        kw_only=True
    )  # (key of SENTENCES, the mistaken function)
    hints: tuple[str, ...] = field(kw_only=True)
    pairs: tuple[tuple[tuple[str, str], Callable], ...] = field(
        default=(), kw_only=True
    )  # two mistakes made together: their keys, the function with both
    symptoms: tuple[Callable[[list[Observed]], Symptom], ...] = field(
        default=(), kw_only=True
    )  # read from the numbers where no mistake reproduces them: the key of SENTENCES and its values

    @property
    def known(self) -> list[tuple[tuple[str, ...], Callable]]:
        """Every mistake it recognises by reproducing it, one alone first, then two together."""
        return [((key,), function) for key, function in self.mistakes] + list(self.pairs)

    @property
    def title(self) -> str:
        return self.name.replace("_", " ")

    @property
    def signature(self) -> str:
        return f"({', '.join(self.arguments)})"


# -- the cases ----------------------------------------------------------------------------------


def _cases_noam(rng: numpy.random.Generator) -> list[TrainingCase]:
    return [
        TrainingCase(
            f"d_model {TINY.d_model}, warmup 10, steps 2 to 40",
            {"d_model": TINY.d_model, "warmup": 10},
            [{"step": s} for s in (2, 3, 9, 10, 11, 25, 40)],
        ),
        TrainingCase(
            f"d_model {BASE.d_model}, warmup 4000, steps 1 to 100000",
            {"d_model": BASE.d_model, "warmup": 4000},
            [{"step": s} for s in (1, 2, 100, 3999, 4000, 4001, 100000)],
        ),
    ]


def _cases_cosine(rng: numpy.random.Generator) -> list[TrainingCase]:
    return [
        TrainingCase(
            "peak 0.003, warmup 10, total 50, min_lr 0.0003, steps 2 to 70",
            {"peak": 3e-3, "warmup": 10, "total": 50, "min_lr": 3e-4},
            [{"step": s} for s in (2, 5, 9, 10, 11, 20, 30, 49, 50, 60, 70)],
        ),
        TrainingCase(
            "peak 1, warmup 4, total 8, min_lr 0, steps 1 to 12",
            {"peak": 1.0, "warmup": 4, "total": 8, "min_lr": 0.0},
            [{"step": s} for s in range(1, 13)],
        ),
        TrainingCase(  # a warm-up below min_lr at its first steps: a floor put on it too shows there
            "peak 0.001, warmup 20, total 60, min_lr 0.0002, steps 1 to 80",
            {"peak": 1e-3, "warmup": 20, "total": 60, "min_lr": 2e-4},
            [{"step": s} for s in (1, 3, 4, 5, 19, 20, 21, 40, 59, 60, 80)],
        ),
    ]


def _cases_clip(rng: numpy.random.Generator) -> list[TrainingCase]:
    def grads(*shapes_and_scales: tuple[tuple[int, ...], float]) -> list[Array]:
        return [scale * normal(rng, *shape) for shape, scale in shapes_and_scales]

    def of_norms(*shapes_and_norms: tuple[tuple[int, ...], float]) -> list[Array]:
        drawn = [normal(rng, *shape) for shape, _ in shapes_and_norms]
        return [g * (norm / math.sqrt(float((g * g).sum()))) for g, (_, norm) in zip(drawn, shapes_and_norms)]

    return [
        TrainingCase(
            "three tensors, each under max_norm, together over it",
            {"max_norm": 1.0},
            [{"grads": of_norms(((3, 4), 0.6), ((4,), 0.8), ((2, 3), 0.5))}],  # together 1.118
        ),
        TrainingCase(
            "two tensors, one far over max_norm",
            {"max_norm": 0.5},
            [{"grads": grads(((5, 2), 2.0), ((3,), 0.05))}, {"grads": grads(((5, 2), 0.5), ((3,), 0.5))}],
        ),
        TrainingCase(
            "under max_norm: nothing changes",
            {"max_norm": 100.0},
            [{"grads": grads(((2, 2), 1.0), ((3,), 1.0))}],
        ),
        TrainingCase(  # a norm's square compared with max_norm clips here, where the norm is under it
            "under max_norm, the norm's square over it: nothing changes",
            {"max_norm": 2.0},
            [{"grads": of_norms(((3, 2), 1.2), ((4,), 0.9))}],  # together 1.5, its square 2.25
        ),
        TrainingCase(  # legal: a scale max_norm / norm computed whatever the norm divides by 0 here
            "every gradient zero, norm 0: nothing changes",
            {"max_norm": 1.0},
            [{"grads": grads(((3, 2), 0.0), ((4,), 0.0))}],
        ),
    ]


def _adam_state(rng: numpy.random.Generator, shape: tuple[int, ...], scale: float, t: int) -> dict[str, Any]:
    """A state the learner did not make: moments of a few updates already, drawn."""
    xp = get_array_module()
    if t == 1:
        return {"param": normal(rng, *shape), "m": xp.zeros(shape), "v": xp.zeros(shape), "t": 1}
    return {
        "param": normal(rng, *shape),
        "m": 0.3 * scale * normal(rng, *shape),
        "v": (scale * normal(rng, *shape)) ** 2 * 0.5 + 0.1 * scale**2,
        "t": t,
    }


def _adam_cases(rng: numpy.random.Generator, weight_decays: tuple[float, ...] | None) -> list[TrainingCase]:
    """Adam's three cases, or AdamW's with each case's weight_decay (one for each, not all one: a value
    held whatever is handed in shows so)."""
    cases = []
    for index, (label, shape, scale, t, hyper) in enumerate((
        ("param (3, 4), eps 0.001 (small gradients)", (3, 4), 1e-2, 3,
         {"lr": 0.01, "beta1": 0.9, "beta2": 0.98, "eps": 1e-3}),
        ("param (2, 5), the first updates from zero moments", (2, 5), 1.0, 1,
         {"lr": 0.001, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}),
        ("param (6,), betas 0.8 and 0.95", (6,), 0.5, 10,
         {"lr": 0.05, "beta1": 0.8, "beta2": 0.95, "eps": 1e-9}),
    )):  # fmt: skip
        weight_decay = None if weight_decays is None else weight_decays[index]
        decay = {} if weight_decay is None else {"weight_decay": weight_decay}
        state = _adam_state(rng, shape, scale, t)
        calls = []
        for _ in range(4):  # successive steps, each from the state the textbook's previous one returned
            calls.append({**state, "grad": scale * normal(rng, *shape)})
            given = [calls[-1][name] for name in ADAM_ARGUMENTS] + [hyper[name] for name in ADAM_HYPER]
            param, m, v = adam(*given, weight_decay=weight_decay or 0.0)
            state = {"param": param, "m": m, "v": v, "t": state["t"] + 1}
        cases.append(
            TrainingCase(f"{label}, 4 successive steps (t {t} to {t + 3})", {**hyper, **decay}, calls)
        )
    return cases


TRAINING_EXERCISES: tuple[TrainingExercise, ...] = (
    TrainingExercise(
        "noam_learning_rate",
        ("step", "d_model", "warmup"),
        ("lr",),
        """The learning rate of the paper's schedule at optimiser step `step`.

            step: the number of this update, 1 for the first; d_model: the model's width; warmup: the steps
            of the warm-up. Returns lr, a float: d_model^-0.5 * min(step^-0.5, step * warmup^-1.5).""",
        cases=_cases_noam,
        mistakes=NOAM_MISTAKES,
        pairs=NOAM_PAIRS,
        symptoms=(
            earlier_answer,
            partial(mixed_arguments, noam),
            schedule_factor,
            noam_front,
            noam_decay,
            noam_line,
            noam_one_curve,
            partial(argument_unused, noam, beside=NOAM_MISTAKES),
        ),
        hints=(
            "Two curves, the smaller wins: a line rising with step, and a decay as 1/sqrt(step); they meet "
            "at step = warmup. step is 1 at the first update: use it as it is given.",
            "lr = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5).",
        ),
    ),
    TrainingExercise(
        "warmup_cosine_learning_rate",
        ("step", "peak", "warmup", "total", "min_lr"),
        ("lr",),
        """The learning rate at optimiser step `step` of a linear warm-up then a cosine decay.

            step: the number of this update, 1 for the first; peak: the rate the warm-up reaches at step
            warmup; total: the step the decay ends at, min_lr the rate there and after it.
            Returns lr, a float: peak * step / warmup up to step warmup; after it, with progress =
            min((step - warmup) / (total - warmup), 1), min_lr + 0.5 * (peak - min_lr) * (1 + cos(pi *
            progress)).""",
        cases=_cases_cosine,
        mistakes=COSINE_MISTAKES,
        pairs=COSINE_PAIRS,
        symptoms=(
            earlier_answer,
            partial(mixed_arguments, cosine),
            schedule_factor,
            warmup_line,
            cosine_span,
            cosine_ends,
            cosine_past_end,
            partial(cosine_turn, lambda turn: partial(cosine, turn=turn)),
            partial(argument_unused, cosine, beside=COSINE_MISTAKES),
        ),
        hints=(
            "Up to step warmup the rate climbs in a line from peak / warmup to peak; after it, the decay's "
            "progress runs from 0 (at warmup) to 1 (at total) and stays 1 after total.",
            "progress = min((step - warmup) / (total - warmup), 1); lr = min_lr + 0.5 * (peak - min_lr) * "
            "(1 + cos(pi * progress)); during the warm-up lr = peak * step / warmup.",
        ),
    ),
    TrainingExercise(
        "clip_by_global_norm",
        ("grads", "max_norm"),
        ("grads", "norm"),
        """Clip a list of gradients by their global norm.

            grads: a list of arrays, the gradients of every parameter; max_norm: a positive float.
            Returns (clipped, norm): clipped a list of new arrays, each grads[i] times max_norm / norm
            where norm exceeds max_norm (else unchanged); norm, a float, the global norm before clipping:
            the square root of the sum of every entry squared, of every array.""",
        cases=_cases_clip,
        mistakes=CLIP_MISTAKES,
        pairs=CLIP_PAIRS,
        symptoms=(
            earlier_answer,
            clip_epsilon,
            partial(clip_other_norm, global_norm, OTHER_NORMS),
            partial(clip_scale, global_norm, OTHER_NORMS),
            partial(argument_unused, clip, beside=CLIP_MISTAKES),
        ),
        hints=(
            "One norm for all of them together, as if every gradient were one long vector: one scale for "
            "every array, so the update keeps its direction.",
            "norm = sqrt(sum over the arrays of (g * g).sum()); where norm > max_norm multiply every array "
            "by max_norm / norm; return the norm from before.",
        ),
    ),
    TrainingExercise(
        "adam_step",
        ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps"),
        ("param", "m", "v"),
        """One Adam update of one parameter.

            param, grad, m, v: arrays of one shape, the parameter, its gradient and the two moments before
            this update; t: the number of this update, 1 for the first; lr, beta1, beta2, eps: floats.
            m = beta1 * m + (1 - beta1) * grad; v = beta2 * v + (1 - beta2) * grad^2; m_hat = m / (1 -
            beta1^t), v_hat = v / (1 - beta2^t); param - lr * m_hat / (sqrt(v_hat) + eps), eps added to
            the square root, inside the denominator.
            Returns (param, m, v) after the update, the new m and v (not their hats), new arrays (those
            handed in are left as they are).""",
        cases=lambda rng: _adam_cases(rng, None),
        mistakes=ADAM_MISTAKES,
        pairs=ADAM_PAIRS,
        symptoms=(
            earlier_answer,
            partial(results_reordered, "adam_step", ("param", "m", "v")),
            partial(mixed_arguments, adam),
            partial(argument_unused, adam, beside=ADAM_MISTAKES),
        ),
        hints=(
            "Two running averages, of the gradient and of its square; both start at zero, so early on they "
            "are too small: each is divided by 1 - beta^t, with its own beta, t counting this update.",
            "m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2; m_hat = m / (1 - beta1^t), v_hat = "
            "v / (1 - beta2^t); param - lr * m_hat / (sqrt(v_hat) + eps). Return m and v, not their hats.",
        ),
    ),
    TrainingExercise(
        "adamw_step",
        ("param", "grad", "m", "v", "t", "lr", "beta1", "beta2", "eps", "weight_decay"),
        ("param", "m", "v"),
        """One AdamW update: Adam with decoupled weight decay.

            As adam_step, and weight_decay a float. The decay is decoupled from the gradient: first the
            parameter shrinks, param * (1 - lr * weight_decay) (scaled by lr), then Adam's update is
            applied to it with the gradient as it is (the moments never see the decay).
            Returns (param, m, v) after the update, new arrays.""",
        builds_on=("adam_step",),
        cases=lambda rng: _adam_cases(rng, (0.1, 0.05, 0.2)),
        mistakes=ADAMW_MISTAKES,
        pairs=ADAMW_PAIRS,
        symptoms=(
            earlier_answer,
            partial(results_reordered, "adamw_step", ("param", "m", "v")),
            partial(mixed_arguments, adamw),
            decay_rate,
            partial(handed_on_mixed, "adam_step", ADAM_ARGUMENTS + ADAM_HYPER, handed_to_adam, adam),
            partial(argument_unused, adamw, beside=ADAMW_MISTAKES),
        ),
        hints=(
            "Decoupled: the decay shrinks the parameter itself, at the rate lr; it never enters the "
            "gradient, so the moments never see it.",
            "param * (1 - lr * weight_decay) first, then your adam_step on that parameter with the gradient "
            "as it is.",
        ),
    ),
)
