"""Hand-written optimisers, learning-rate schedules and gradient clipping.

Optimiser state (moments, step counter) lives here, never on the parameters.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Iterable

from .backend import backend_name, get_array_module, to_numpy
from .module import Module, Parameter

Array = Any


def _named(parameters: Module | Iterable[tuple[str, Parameter]]) -> list[tuple[str, Parameter]]:
    return list(parameters.named_parameters() if isinstance(parameters, Module) else parameters)


SLICE = 1 << 16
"""Entries per slice of Adam's update on NumPy. One slice of p, g, m, v and the scratch (5 x 256 KiB
in float32) stays in cache through all twelve passes, so main memory sees each array once a step."""


PARALLEL_MIN = 1 << 19
"""Fewer entries than this are updated on the calling thread by default: below it, handing work to
the pool costs more than the second core gives back (251 k parameters: 1.2 ms alone, 1.9 ms on two)."""


def _deal_slices(sizes: list[int], slice_size: int | None, workers: int) -> list[list[tuple[int, int, int]]]:
    """Cut flat parameters of these sizes into (index, start, stop) slices of at most slice_size
    entries (whole parameters when None) and deal them to the workers in runs of about equal size."""
    slices = []
    for index, size in enumerate(sizes):
        step = slice_size or max(size, 1)
        slices += [(index, start, min(start + step, size)) for start in range(0, size, step)]
    total, done = max(sum(sizes), 1), 0
    shares: list[list[tuple[int, int, int]]] = [[] for _ in range(workers)]
    for index, start, stop in slices:
        shares[min(done * workers // total, workers - 1)].append((index, start, stop))
        done += stop - start
    return shares


def _check_positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive number, got {value!r}")


class Adam:
    """Adam with one global step counter t for the bias correction:

    m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2
    p <- p - lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)

    Defaults are the paper's betas (0.9, 0.98) and eps 1e-9. Updates are done in place.
    On NumPy, ``threads`` (default: one per core, or 1 below PARALLEL_MIN entries) share the update.
    """

    def __init__(
        self, parameters: Module | Iterable[tuple[str, Parameter]], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9, threads: int | None = None,
    ) -> None:
        _check_positive("lr", lr)
        _check_positive("eps", eps)
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
        self.named_parameters = _named(parameters)
        for name, parameter in self.named_parameters:  # updated through flat views, which must not be copies
            if not (parameter.data.flags.c_contiguous and parameter.grad.flags.c_contiguous):
                raise ValueError(f"parameter {name!r} must be C-contiguous (data and grad) to be optimised in place")
        self.lr, self.betas, self.eps = float(lr), (float(betas[0]), float(betas[1])), float(eps)
        self.step_count = 0
        xp = get_array_module()
        # threads, slices and packing only help NumPy, whose element-wise loops run on one core each,
        # cost a call each and go to memory for every pass over a large array
        on_numpy = backend_name() == "numpy"
        sizes = [p.data.size for _, p in self.named_parameters]
        # Parameters smaller than a slice are packed into one flat run: the update then costs twelve
        # calls for all of them together instead of twelve each (most of a small model's Adam time).
        dtypes = {p.data.dtype for _, p in self.named_parameters}
        self._packed = [i for i, size in enumerate(sizes) if size < SLICE] if on_numpy and len(dtypes) == 1 else []
        packed = set(self._packed)
        self._unpacked = [i for i in range(len(sizes)) if i not in packed]
        packed_size = sum(sizes[i] for i in self._packed)
        self.m: list[Array] = [None] * len(sizes)
        self.v: list[Array] = [None] * len(sizes)
        for i in self._unpacked:
            self.m[i], self.v[i] = (xp.zeros_like(self.named_parameters[i][1].data) for _ in "mv")
        if self._packed:
            dtype = dtypes.pop()
            self._packed_data, self._packed_grad = xp.empty(packed_size, dtype), xp.empty(packed_size, dtype)
            self._packed_moments = xp.zeros(packed_size, dtype), xp.zeros(packed_size, dtype)
            start = 0
            for i in self._packed:  # the packed moments are the optimiser's state: views keep them per name
                stop, shape = start + sizes[i], self.named_parameters[i][1].shape
                self.m[i], self.v[i] = (moments[start:stop].reshape(shape) for moments in self._packed_moments)
                start = stop
        run_sizes = [packed_size] * bool(self._packed) + [sizes[i] for i in self._unpacked]
        if threads is None:
            threads = (os.cpu_count() or 1) if sum(sizes) >= PARALLEL_MIN else 1
        self.threads = max(1, min(threads, 8)) if on_numpy else 1
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self._buffers: list[Array] = [None] * self.threads
        self._shares = _deal_slices(run_sizes, SLICE if on_numpy else None, self.threads)

    def zero_grad(self) -> None:
        for _, parameter in self.named_parameters:
            parameter.zero_grad()

    def _decay(self, name: str, parameter: Parameter, data: Array, lr: float) -> None:
        """Plain Adam has no decoupled decay; AdamW overrides this (``data`` is a flat slice of the parameter)."""

    def step(self, lr: float | None = None) -> None:
        """Apply one update with ``lr`` (or the optimiser's own), counting one more optimiser step."""
        lr = self.lr if lr is None else lr
        self.step_count += 1
        beta1, beta2 = self.betas
        root_correction2 = math.sqrt(1.0 - beta2**self.step_count)
        # lr * m_hat / (sqrt(v_hat) + eps) = k * m / (sqrt(v) + eps'), k = lr sqrt(1 - b2^t) / (1 - b1^t)
        scale = lr * root_correction2 / (1.0 - beta1**self.step_count)
        eps = self.eps * root_correction2
        xp = get_array_module()
        # runs of flat (data, grad, m, v), each with the named parameter its slices decay as, if any
        runs: list[tuple[tuple[str, Parameter] | None, tuple]] = []
        packed = [self.named_parameters[i] for i in self._packed]
        if packed:
            for name, parameter in packed:  # decay differs per parameter, so it goes before packing
                self._decay(name, parameter, parameter.data.reshape(-1), lr)
            xp.concatenate([p.data.reshape(-1) for _, p in packed], out=self._packed_data)
            xp.concatenate([p.grad.reshape(-1) for _, p in packed], out=self._packed_grad)
            runs.append((None, (self._packed_data, self._packed_grad, *self._packed_moments)))
        for i in self._unpacked:
            name, parameter = self.named_parameters[i]
            runs.append(((name, parameter), tuple(a.reshape(-1) for a in (parameter.data, parameter.grad, self.m[i], self.v[i]))))
        update = partial(self._update, runs=runs, scale=scale, eps=eps, lr=lr)
        if self._pool is None:
            update(self._shares[0], 0)
        else:  # NumPy's element-wise loops release the GIL: each thread streams its share of the slices
            list(self._pool.map(update, self._shares, range(self.threads)))
        start = 0
        for _, parameter in packed:
            stop = start + parameter.data.size
            parameter.data[...] = self._packed_data[start:stop].reshape(parameter.shape)
            start = stop

    def _update(self, share: list[tuple[int, int, int]], thread: int, *, runs: list[tuple], scale: float, eps: float,
                lr: float) -> None:
        xp = get_array_module()
        beta1, beta2 = self.betas
        for index, start, stop in share:
            named, arrays = runs[index]
            data, grad, m, v = (a[start:stop] for a in arrays)
            if named is not None:
                self._decay(*named, data, lr)
            scratch = self._scratch(data, thread)
            # every operation writes in place: no temporaries of the slice's size are created
            m *= beta1
            xp.multiply(grad, 1.0 - beta1, out=scratch)
            m += scratch
            v *= beta2
            xp.multiply(grad, grad, out=scratch)
            scratch *= 1.0 - beta2
            v += scratch
            xp.sqrt(v, out=scratch)
            scratch += eps
            xp.divide(m, scratch, out=scratch)
            scratch *= scale
            data -= scratch

    def _scratch(self, like: Array, thread: int) -> Array:
        """The first like.size entries of this thread's reused flat buffer."""
        size, buffer = like.size, self._buffers[thread]
        if buffer is None or buffer.size < size or buffer.dtype != like.dtype:
            buffer = self._buffers[thread] = get_array_module().empty(size, dtype=like.dtype)
        return buffer[:size]

    def state_dict(self) -> dict[str, Any]:
        """Host arrays of both moments per parameter name, plus the step and hyper-parameters."""
        state: dict[str, Any] = {"step": self.step_count, "lr": self.lr, "betas": list(self.betas), "eps": self.eps}
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
                    raise ValueError(f"optimizer state {key} has shape {tuple(state[key].shape)}, expected {parameter.shape}")
                target[...] = xp.asarray(state[key])
        self.step_count = int(state["step"])
        self.lr, self.betas, self.eps = float(state["lr"]), tuple(state["betas"]), float(state["eps"])


class AdamW(Adam):
    """Adam with decoupled weight decay, p <- p - lr * wd * p before the Adam update.

    By default only matrices decay: norms' gamma/beta and biases (1-D parameters) do not.
    """

    def __init__(
        self, parameters: Module | Iterable[tuple[str, Parameter]], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.98),
        eps: float = 1e-9, weight_decay: float = 0.01, decay_vectors: bool = False, threads: int | None = None,
    ) -> None:
        super().__init__(parameters, lr, betas, eps, threads)
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay!r}")
        self.weight_decay = float(weight_decay)
        self.decay_vectors = decay_vectors

    def _decay(self, name: str, parameter: Parameter, data: Array, lr: float) -> None:
        if self.weight_decay and (self.decay_vectors or parameter.data.ndim > 1):
            data *= 1.0 - lr * self.weight_decay

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


def global_grad_norm(parameters: Iterable[Parameter]) -> float:
    """sqrt(sum of every gradient entry squared)."""
    return math.sqrt(sum(float((p.grad * p.grad).sum()) for p in parameters))


def clip_grad_norm(parameters: Iterable[Parameter], max_norm: float) -> float:
    """Scale all gradients by max_norm / norm when their global norm exceeds max_norm.

    The direction is kept; returns the norm before clipping.
    """
    parameters = list(parameters)
    total = global_grad_norm(parameters)
    if math.isfinite(total) and total > max_norm:
        scale = max_norm / total
        for parameter in parameters:
            parameter.grad *= scale
    return total
