"""The textbook of the workbook's training rungs, and the optimiser a workbook run trains with.

The rungs are functions of values, as the learner writes them: the learning rate of the paper's
warm-up schedule and of warm-up + cosine, gradients clipped by their global norm, and one Adam or
AdamW step of one parameter. Each is computed here by the package's own optimiser code
(:mod:`numpy_transformer.optim`), so that the two can never drift apart.

``optimiser_functions`` is the one place that chooses whose functions a run's optimiser calls: the
learner's wherever their file defines them, else these. ``learn train`` and ``learn prove`` (and any
other milestone of the workbook) train with it: blocks.py's encoder-decoder with
``training_optimiser`` (Adam or AdamW, clipping and a schedule), the package's model with
``adam_update`` (its Adam update; its clipping and schedule are the package's).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy

from ..backend import Array, get_array_module
from ..module import Parameter
from ..optim import NoamSchedule, TextbookAdamUpdate, WarmupCosineSchedule, clip_grad_norm


def noam_learning_rate(step: int, d_model: int, warmup: int) -> float:
    """The paper's rate at optimiser step ``step`` (1 for the first update): d_model^-0.5 *
    min(step^-0.5, step * warmup^-1.5)."""
    return NoamSchedule(d_model, warmup)(step)


def warmup_cosine_learning_rate(step: int, peak: float, warmup: int, total: int, min_lr: float) -> float:
    """The rate at optimiser step ``step`` (1 for the first update): linear warm-up to ``peak`` over
    ``warmup`` steps, then cosine decay to ``min_lr`` at step ``total``, ``min_lr`` after it."""
    return WarmupCosineSchedule(peak, warmup, total, min_lr)(step)


def clip_by_global_norm(grads: Sequence[Array], max_norm: float) -> tuple[list[Array], float]:
    """The gradients scaled by max_norm / norm where their global norm (of every entry of every one)
    exceeds ``max_norm``, new arrays; and that norm, before clipping."""
    xp = get_array_module()
    parameters = [Parameter(xp.zeros_like(grad), xp.array(grad, copy=True)) for grad in grads]
    norm = clip_grad_norm(parameters, max_norm)
    return [parameter.grad for parameter in parameters], norm


def _textbook_update(
    param: Array, grad: Array, m: Array, v: Array, t: int, lr: float, betas: tuple[float, float], eps: float,
    weight_decay: float,
) -> tuple[Array, Array, Array]:  # fmt: skip
    """optim.TextbookAdamUpdate's step on copies of the arrays: the new (param, m, v)."""
    xp = get_array_module()
    parameter = Parameter(xp.array(param, copy=True), xp.array(grad, copy=True))
    update = TextbookAdamUpdate([("param", parameter)], None, None)
    update.m[0][...] = m
    update.v[0][...] = v
    update.step(lr, betas, eps, t, weight_decay, [True])
    return parameter.data, update.m[0], update.v[0]


def adam_step(
    param: Array, grad: Array, m: Array, v: Array, t: int, lr: float, beta1: float, beta2: float, eps: float
) -> tuple[Array, Array, Array]:
    """One Adam update of one parameter, t the number of this update (1 for the first): the new
    (param, m, v), new arrays."""
    return _textbook_update(param, grad, m, v, t, lr, (beta1, beta2), eps, 0.0)


def adamw_step(
    param: Array, grad: Array, m: Array, v: Array, t: int, lr: float, beta1: float, beta2: float, eps: float,
    weight_decay: float,
) -> tuple[Array, Array, Array]:  # fmt: skip
    """One AdamW update: the decoupled decay param * (1 - lr * weight_decay), then Adam's update."""
    return _textbook_update(param, grad, m, v, t, lr, (beta1, beta2), eps, weight_decay)


TEXTBOOK: dict[str, Callable] = {
    function.__name__: function
    for function in (
        noam_learning_rate,
        warmup_cosine_learning_rate,
        clip_by_global_norm,
        adam_step,
        adamw_step,
    )
}  # the training rungs' textbook functions, in the ladder's order


@dataclass(frozen=True)
class OptimiserSettings:
    """How a workbook run updates its weights: Adam (AdamW where ``weight_decay``: matrices decay,
    vectors not, as optim.AdamW), each step's rate from ``schedule`` ("constant": ``lr``; "cosine":
    warm-up to ``lr`` then cosine to ``min_lr`` at ``total``; "noam": the paper's, times ``factor``),
    the gradients first clipped to a global norm of ``clip`` (0: not clipped)."""

    lr: float
    betas: tuple[float, float] = (0.9, 0.98)
    eps: float = 1e-9
    weight_decay: float = 0.0
    clip: float = 0.0
    schedule: str = "constant"
    warmup: int = 0
    total: int = 0
    min_lr: float = 0.0
    d_model: int = 0
    factor: float = 1.0

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine", "noam"):
            raise ValueError(f"schedule must be constant, cosine or noam, got {self.schedule!r}")
        if self.schedule == "noam" and (self.d_model < 1 or self.warmup < 1):
            raise ValueError(
                f"the noam schedule needs d_model and warmup of 1 or more, got {self.d_model} and {self.warmup}"
            )


def optimiser_functions(functions: Mapping[str, Callable]) -> dict[str, Callable]:
    """The training rungs' functions a run of the workbook updates its weights with: the learner's
    where ``functions`` (theirs, by textbook name, as training.learner_functions gives them) has one,
    else the textbook's. The one place that choice is made: every optimiser of the workbook
    (training_optimiser, adam_update) calls it."""
    return {name: functions.get(name, textbook) for name, textbook in TEXTBOOK.items()}


def _adam_update(
    functions: Mapping[str, Callable], param: Array, grad: Array, m: Array, v: Array, t: int, lr: float,
    betas: tuple[float, float], eps: float, weight_decay: float,
) -> list[Any]:  # fmt: skip
    """The new (param, m, v) of one parameter: ``functions``' adamw_step where ``weight_decay``, else
    its adam_step; a RuntimeError where what it returns is not three arrays of the parameter's shape."""
    beta1, beta2 = betas
    name = _rung(weight_decay)
    decayed = (weight_decay,) if weight_decay else ()
    returned = functions[name](param, grad, m, v, t, lr, beta1, beta2, eps, *decayed)
    return _returned_list(returned, 3, name, param.shape)


def _rung(weight_decay: float) -> str:
    """The training rung an update of this weight decay calls: adamw_step where it decays, else adam_step."""
    return "adamw_step" if weight_decay else "adam_step"


def first_update(functions: Mapping[str, Callable]) -> None:
    """Each of ``functions``' adam_step and adamw_step (the learner's) called once on a small float32
    parameter of shape (2, 3), as a run's first update calls it: a RuntimeError where what one returns is
    not three arrays of the parameter's shape. A run calls it before it makes anything."""
    xp = get_array_module()
    param = xp.linspace(-1.0, 1.0, 6, dtype=xp.float32).reshape(2, 3)
    for name in functions:
        _adam_update(
            {**TEXTBOOK, **functions}, param.copy(), param[::-1].copy(), xp.zeros_like(param),
            xp.zeros_like(param), 1, 1e-3, (0.9, 0.98), 1e-9, 0.01 if name == "adamw_step" else 0.0,
        )  # fmt: skip


class TrainingOptimiser:
    """The optimiser of blocks.py's encoder-decoder in a workbook run, made of the training rungs'
    functions (``functions``, by name): it keeps the moments and the step count, and ``step`` gives
    the new parameters."""

    def __init__(self, functions: Mapping[str, Callable], settings: OptimiserSettings) -> None:
        self.functions = dict(functions)
        self.settings = settings
        self.m: dict[str, Array] = {}
        self.v: dict[str, Array] = {}
        self.t = 0  # the updates done

    def learning_rate(self, step: int) -> float:
        """The rate of optimiser step ``step`` (1 for the first update)."""
        s = self.settings
        if s.schedule == "constant":
            return s.lr
        if s.schedule == "noam":
            return s.factor * float(self.functions["noam_learning_rate"](step, s.d_model, s.warmup))
        return float(self.functions["warmup_cosine_learning_rate"](step, s.lr, s.warmup, s.total, s.min_lr))

    def step(self, params: Mapping[str, Array], grads: Mapping[str, Array]) -> dict[str, Array]:
        """One update of every parameter with its gradient (both by name): the new parameters. AdamW's
        decay, where the settings have one, on the matrices alone (as optim.AdamW)."""
        s = self.settings
        names = list(params)
        gradients = [grads[name] for name in names]
        if s.clip > 0:
            clipped, _ = _returned_list(
                self.functions["clip_by_global_norm"](gradients, s.clip), 2, "clip_by_global_norm"
            )
            gradients = _returned_list(clipped, len(names), "clip_by_global_norm")
        self.t += 1
        lr = self.learning_rate(self.t)
        xp = get_array_module()
        updated: dict[str, Array] = {}
        for name, grad in zip(names, gradients):
            param = params[name]
            m = self.m.setdefault(name, xp.zeros_like(param))
            v = self.v.setdefault(name, xp.zeros_like(param))
            decay = s.weight_decay if param.ndim > 1 else 0.0
            updated[name], self.m[name], self.v[name] = _adam_update(
                self.functions, param, grad, m, v, self.t, lr, s.betas, s.eps, decay
            )
        return updated


def _returned_list(returned: Any, count: int, whose: str, shape: tuple[int, ...] | None = None) -> list[Any]:
    """What a training function returned, as a list of ``count`` values (arrays of ``shape`` where
    given); a RuntimeError saying what it returned otherwise."""
    if not isinstance(returned, (tuple, list)) or len(returned) != count:
        got = f"{len(returned)} values" if isinstance(returned, (tuple, list)) else type(returned).__name__
        raise RuntimeError(f"your {whose} returned {got}, expected {count}")
    for value in returned:
        if shape is not None and tuple(getattr(value, "shape", ())) != tuple(shape):
            raise RuntimeError(
                f"your {whose} returned an array of shape {getattr(value, 'shape', None)}, expected {tuple(shape)}"
            )
    return list(returned)


def training_optimiser(functions: Mapping[str, Callable], settings: OptimiserSettings) -> TrainingOptimiser:
    """The optimiser of blocks.py's encoder-decoder in a workbook run (learn train, learn prove), on
    optimiser_functions' choice: the learner's training rungs where ``functions`` has them, else the
    textbook's."""
    return TrainingOptimiser(optimiser_functions(functions), settings)


class LearnerAdamUpdate(TextbookAdamUpdate):
    """The Adam update of the package's model in a workbook run (the "learner" kernel set's, see
    kernels.using_kernels): optim.TextbookAdamUpdate's contract and moments, each step calling
    optimiser_functions' adam_step (adamw_step where a parameter decays) on every parameter and
    writing what it returns into the parameter and the moments."""

    def __init__(
        self, functions: Mapping[str, Callable], named_parameters: list[tuple[str, Parameter]], threads: int | None,
        flat: Any,
    ) -> None:  # fmt: skip
        super().__init__(named_parameters, threads, flat)
        self.functions = optimiser_functions(functions)

    def step(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        t: int,
        weight_decay: float,
        decays: Sequence[bool],
    ) -> None:
        for parameter, m, v, decay in zip(self.parameters, self.m, self.v, decays):
            rate = weight_decay if decay else 0.0
            new, new_m, new_v = _adam_update(
                self.functions, parameter.data, parameter.grad, m, v, t, lr, betas, eps, rate
            )
            for target, value in ((parameter.data, new), (m, new_m), (v, new_v)):
                _write_back(target, value, _rung(rate))


def _write_back(target: Array, value: Array, whose: str) -> None:
    """``value`` (what the learner's ``whose`` returned) written into ``target``, the package's array of its
    own dtype. Values beyond that dtype's range become infinite there, said as theirs: under NumPy 1's
    casting rules ``float32 * 1e300`` is a float64 their code computed without overflowing."""
    if getattr(value, "dtype", None) == target.dtype:
        target[...] = value
        return
    xp = get_array_module()
    with numpy.errstate(over="ignore", invalid="ignore"):  # a cast's overflow, said below as theirs
        target[...] = value
    if not bool(xp.isfinite(target).all()) and bool(xp.isfinite(xp.asarray(value)).all()):
        warnings.warn(
            f"your {whose}: returned values beyond {xp.dtype(target.dtype).name}'s range "
            f"(largest magnitude {float(xp.abs(xp.asarray(value)).max()):.3g}), kept as infinite",
            UserWarning,
            stacklevel=2,
        )


def adam_update(functions: Mapping[str, Callable]) -> Callable[..., LearnerAdamUpdate]:
    """The Adam update class of the package's model on the learner's functions (optimiser_functions'
    choice), as kernels.using_kernels takes it (adam_update)."""
    return partial(LearnerAdamUpdate, dict(functions))
