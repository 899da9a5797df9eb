"""Hand-written optimisers, learning-rate schedules and gradient clipping.

Optimiser state (moments, step counter) lives here, never on the parameters.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from .backend import Array, get_array_module, to_numpy
from .kernels import adam_kernel
from .module import Module, Parameter


def _named(parameters: Module | Iterable[tuple[str, Parameter]]) -> list[tuple[str, Parameter]]:
    return list(parameters.named_parameters() if isinstance(parameters, Module) else parameters)


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


class TextbookAdamUpdate:
    """Adam's update as its formulas read, one parameter at a time (see Adam.step).

    The contract every backend's update kernel keeps (kernels.cpu.AdamUpdate,
    kernels.cuda.AdamUpdate): made once from the named parameters, it owns the moments ``m`` and
    ``v`` (one array per parameter) and ``step`` takes values only. An update that reads Adam.step's
    ``finite`` flag in its own step says so (``takes_finite = True``: kernels.cuda.AdamUpdate, in its
    launch); Adam guards any other.
    """

    def __init__(self, named_parameters: list[tuple[str, Parameter]], threads: int | None, flat: Any) -> None:
        xp = get_array_module()
        self.parameters = [parameter for _, parameter in named_parameters]
        self.m = [xp.zeros_like(p.data) for p in self.parameters]
        self.v = [xp.zeros_like(p.data) for p in self.parameters]

    def step(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        t: int,
        weight_decay: float,
        decays: Sequence[bool],
    ) -> None:
        xp = get_array_module()
        beta1, beta2 = betas
        for parameter, m, v, decay in zip(self.parameters, self.m, self.v, decays):
            g = parameter.grad
            if decay and weight_decay:
                parameter.data *= 1.0 - lr * weight_decay
            m[...] = beta1 * m + (1.0 - beta1) * g
            v[...] = beta2 * v + (1.0 - beta2) * g * g
            m_hat = m / (1.0 - beta1**t)
            v_hat = v / (1.0 - beta2**t)
            parameter.data -= lr * m_hat / (xp.sqrt(v_hat) + eps)


class Adam:
    """Adam with one global step counter t for the bias correction.

    Defaults are the paper's betas (0.9, 0.98) and eps 1e-9. Updates are done in place. The
    update is chosen once, when the optimiser is made: the backend's kernel with the fast kernels
    (on NumPy the packed, sliced update of kernels.cpu.AdamUpdate, shared among ``threads``
    threads: default one per core for large models, 1 for small ones), else the textbook's.
    """

    def __init__(
        self,
        parameters: Module | Iterable[tuple[str, Parameter]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        threads: int | None = None,
    ) -> None:
        _check_positive("lr", lr)
        _check_positive("eps", eps)
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.named_parameters = _named(parameters)
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.weight_decay = 0.0
        self.step_count = 0
        flat = parameters.flat if isinstance(parameters, Module) else None  # whole-model buffers, if any
        kernel = adam_kernel()
        if kernel is None or (flat is None and getattr(kernel, "needs_flat_buffers", False)):
            kernel = TextbookAdamUpdate
        self.update = kernel(self.named_parameters, threads, flat)
        self.m, self.v = self.update.m, self.update.v  # the moments, one array per parameter

    def zero_grad(self) -> None:
        for _, parameter in self.named_parameters:
            parameter.zero_grad()

    def decays(self, parameter: Parameter) -> bool:
        """Whether decoupled weight decay applies to ``parameter``: never in plain Adam (AdamW overrides this)."""
        return False

    def step(self, lr: float | None = None, finite: Array | None = None) -> None:
        """Apply one update with ``lr`` (or the optimiser's own), counting one more optimiser step t:

        p <- p - lr * wd * p   (AdamW, where decays(p))
        m <- b1 m + (1 - b1) g,   v <- b2 v + (1 - b2) g^2
        m_hat = m / (1 - b1^t),   v_hat = v / (1 - b2^t)
        p <- p - lr * m_hat / (sqrt(v_hat) + eps)

        ``finite`` (a 0-d boolean array: on a GPU whether the step's loss and gradient norm are finite,
        computed on the device) guards the update without reading the device: where it is false the
        weights and moments stay as they were, and the caller, having read it, takes the count back
        (take_back_step). The CUDA kernel set's update reads it in its own launch; any other update is
        guarded here, its weights and moments copied before and put back where the step is refused.
        """
        self.step_count += 1
        decays = [self.decays(parameter) for _, parameter in self.named_parameters]
        lr = self.lr if lr is None else lr
        settings = (lr, self.betas, self.eps, self.step_count, self.weight_decay, decays)
        if finite is None:
            self.update.step(*settings)
        elif getattr(self.update, "takes_finite", False):
            self.update.step(*settings, finite=finite)
        else:
            self._guarded_step(settings, finite)

    def _guarded_step(self, settings: tuple, finite: Array) -> None:
        """The update of a kernel that takes no flag, guarded by ``finite``: everything it writes is
        kept before it runs and put back where ``finite`` is false."""
        xp = get_array_module()
        written = [
            array for (_, p), m, v in zip(self.named_parameters, self.m, self.v) for array in (p.data, m, v)
        ]
        kept = [array.copy() for array in written]
        self.update.step(*settings)
        refused = xp.logical_not(finite)
        for array, before in zip(written, kept):
            xp.copyto(array, before, where=refused)

    def take_back_step(self) -> None:
        """Count the last step as not taken: its ``finite`` flag was false, so its update left the weights
        and moments as they were (Adam.step), and the next step's bias correction is the same t again."""
        self.step_count -= 1

    def state_dict(self) -> dict[str, Any]:
        """Host arrays of both moments per parameter name, plus the step and hyper-parameters."""
        state: dict[str, Any] = {
            "step": self.step_count,
            "lr": self.lr,
            "betas": list(self.betas),
            "eps": self.eps,
        }
        for (name, _), m, v in zip(self.named_parameters, self.m, self.v):
            state[f"m.{name}"] = to_numpy(m).copy()
            state[f"v.{name}"] = to_numpy(v).copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        expected = {f"{k}.{name}" for name, _ in self.named_parameters for k in ("m", "v")}
        missing = sorted(expected - set(state))
        if missing:
            raise ValueError(f"optimizer state is missing {len(missing)} moment arrays, e.g. {missing[:3]}")
        xp = get_array_module()
        for (name, parameter), m, v in zip(self.named_parameters, self.m, self.v):
            for target, key in ((m, f"m.{name}"), (v, f"v.{name}")):
                if tuple(state[key].shape) != parameter.shape:
                    raise ValueError(
                        f"optimizer state {key} has shape {tuple(state[key].shape)}, expected {parameter.shape}"
                    )
                target[...] = xp.asarray(state[key])
        self.step_count = int(state["step"])
        self.lr, self.betas, self.eps = float(state["lr"]), tuple(state["betas"]), float(state["eps"])


class AdamW(Adam):
    """Adam with decoupled weight decay, p <- p - lr * wd * p before the Adam update.

    By default only matrices decay: norms' gamma/beta and biases (1-D parameters) do not.
    """

    def __init__(
        self,
        parameters: Module | Iterable[tuple[str, Parameter]],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9,
        weight_decay: float = 0.01,
        decay_vectors: bool = False,
        threads: int | None = None,
    ) -> None:
        super().__init__(parameters, lr, betas, eps, threads)
        if not (isinstance(weight_decay, (int, float)) and 0 <= weight_decay < float("inf")):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
        self.weight_decay = float(weight_decay)
        self.decay_vectors = decay_vectors

    def decays(self, parameter: Parameter) -> bool:
        return bool(self.weight_decay) and (self.decay_vectors or parameter.data.ndim > 1)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "weight_decay": self.weight_decay}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.weight_decay = float(state.get("weight_decay", self.weight_decay))


# ----------------------------------------------------------------------------------------------
# learning-rate schedules: callables of the optimiser step number (1 for the first update)


class NoamSchedule:
    """The paper's schedule: factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)."""

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0) -> None:
        _check_positive("warmup", warmup)
        self.d_model, self.warmup, self.factor = d_model, warmup, factor

    def __call__(self, step: int) -> float:
        step = max(step, 1)
        return self.factor * self.d_model**-0.5 * min(step**-0.5, step * self.warmup**-1.5)


class ConstantSchedule:
    def __init__(self, lr: float) -> None:
        _check_positive("lr", lr)
        self.lr = lr

    def __call__(self, step: int) -> float:
        return self.lr


class WarmupCosineSchedule:
    """Linear warm-up to ``lr`` over ``warmup`` steps, then cosine decay to ``min_lr`` at ``total``."""

    def __init__(self, lr: float, warmup: int, total: int, min_lr: float = 0.0) -> None:
        _check_positive("lr", lr)
        _check_positive("total", total)
        self.lr, self.warmup, self.total, self.min_lr = lr, warmup, total, min_lr

    def __call__(self, step: int) -> float:
        if step <= self.warmup:
            return self.lr * step / max(self.warmup, 1)
        progress = min((step - self.warmup) / max(self.total - self.warmup, 1), 1.0)
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))


def _gradients(parameters: Module | Iterable[Parameter]) -> list[Array]:
    """The gradients to norm or clip: a model's one flat gradient where it has one, else one per parameter."""
    if isinstance(parameters, Module):
        return (
            [parameters.flat.gradients()]
            if parameters.flat is not None
            else [p.grad for p in parameters.parameters()]
        )
    return [p.grad for p in parameters]


def _norm(gradients: list[Array]) -> float:
    """sqrt(sum of every entry squared); the sums stay on the device until the one transfer of the result."""
    if not gradients:
        return 0.0
    return math.sqrt(float(_sum_of_squares(gradients)))


def _sum_of_squares(gradients: list[Array]) -> Array:
    """The sum of every entry squared, a 0-d array on the device."""
    squares = [(g * g).sum() for g in gradients]
    return get_array_module().stack(squares).sum() if len(squares) > 1 else squares[0]


def global_grad_norm(parameters: Module | Iterable[Parameter]) -> float:
    """sqrt(sum of every gradient entry squared), of a model's parameters or of the given ones."""
    return _norm(_gradients(parameters))


def clip_grad_norm(parameters: Module | Iterable[Parameter], max_norm: float) -> float:
    """Scale all gradients by max_norm / norm when their global norm exceeds max_norm.

    The direction is kept; returns the norm before clipping.
    """
    _check_positive("max_norm", max_norm)
    gradients = _gradients(parameters)
    total = _norm(gradients)
    if math.isfinite(total) and total > max_norm:
        scale = max_norm / total
        for gradient in gradients:
            gradient *= scale
    return total


def grad_norm_on_device(parameters: Module | Iterable[Parameter], max_norm: float | None = None) -> Array:
    """global_grad_norm, and with ``max_norm`` clip_grad_norm's scaling, with nothing read on the host
    (a GPU step reads its numbers once, at its end): the norm before clipping comes back as a 0-d
    float64 array, and where it is finite and exceeds ``max_norm`` the gradients are scaled on the
    device by max_norm / norm, rounded to their dtype as clip_grad_norm's scale is."""
    xp = get_array_module()
    if max_norm is not None:
        _check_positive("max_norm", max_norm)
    gradients = _gradients(parameters)
    if not gradients:
        return xp.zeros((), dtype=xp.float64)
    norm = xp.sqrt(_sum_of_squares(gradients).astype(xp.float64))
    if max_norm is not None:
        scale = xp.where(xp.isfinite(norm), max_norm / xp.maximum(norm, max_norm), 1.0)  # 1 below max_norm
        for gradient in gradients:
            gradient *= scale.astype(gradient.dtype)
    return norm
