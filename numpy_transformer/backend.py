"""The one place that owns the array backend.

Every layer asks :func:`get_array_module` for its array module (``xp``) instead of importing
NumPy, so the same code runs on NumPy (the default) and on CuPy. CuPy is imported only when
it is asked for, with ``set_backend("cupy")`` or the environment variable
``NUMPY_TRANSFORMER_BACKEND=cupy``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy

Array = Any
ENV_VAR = "NUMPY_TRANSFORMER_BACKEND"
BACKENDS = ("numpy", "cupy")

_xp: Any = None
_on_change: list[Callable[[], None]] = []


def on_backend_change(callback: Callable[[], None]) -> None:
    """Call ``callback()`` whenever set_backend selects a module (the kernels choose theirs again)."""
    _on_change.append(callback)


def _load_cupy() -> ModuleType:
    try:
        import cupy
    except ImportError as error:
        raise RuntimeError(
            "backend 'cupy' was requested but CuPy is not installed; install the wheel for your CUDA "
            "version: pip install 'numpy_transformer[gpu-cuda12]' (or [gpu-cuda13])"
        ) from error
    try:
        device_count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # CUDA driver missing or broken
        raise RuntimeError(f"backend 'cupy' was requested but no CUDA GPU is usable: {error}") from error
    if device_count < 1:
        raise RuntimeError("backend 'cupy' was requested but no CUDA GPU is visible")
    return cupy


def set_backend(name_or_module: str | Any) -> Any:
    """Select the array module every layer uses: ``"numpy"``, ``"cupy"``, or a module-like object.

    A module-like object (anything with NumPy's array API) is accepted so tests can run the whole
    model through a stand-in. Returns the selected module.
    """
    global _xp
    if isinstance(name_or_module, str):
        if name_or_module not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {name_or_module!r}")
        _xp = numpy if name_or_module == "numpy" else _load_cupy()
    elif hasattr(name_or_module, "asarray") and hasattr(name_or_module, "matmul"):
        _xp = name_or_module
    else:
        raise TypeError(
            f"backend must be a name in {BACKENDS} or an array module, got {type(name_or_module).__name__}"
        )
    for callback in _on_change:
        callback()
    return _xp


def environment_choice(variable: str, choices: tuple[str, ...], default: str) -> str:
    """The environment variable ``variable``'s value, ``default`` when it is unset; a value not in
    ``choices`` refused (ValueError) naming the variable, its value and the choices. The one check of
    NUMPY_TRANSFORMER_BACKEND and NUMPY_TRANSFORMER_KERNELS, for the model and the command line alike."""
    value = os.environ.get(variable)
    if value is None:
        return default
    if value not in choices:
        raise ValueError(
            f"the environment variable {variable} is {value!r}, expected one of {', '.join(choices)} "
            "(or leave it unset)"
        )
    return value


def get_array_module() -> Any:
    """The array module in use (NumPy unless the environment variable or set_backend chose otherwise)."""
    if _xp is None:  # a bad value named as the variable it came from, not as a set_backend argument
        set_backend(environment_choice(ENV_VAR, BACKENDS, "numpy"))
    return _xp


def backend_name() -> str:
    """``"numpy"``, ``"cupy"`` or the ``__name__`` of a stand-in module."""
    return getattr(get_array_module(), "__name__", type(get_array_module()).__name__)


def require_array(value: Any, argument: str) -> None:
    """TypeError naming ``argument`` unless ``value`` is an array of the backend (or NumPy's)."""
    xp = get_array_module()
    if not isinstance(value, (numpy.ndarray, getattr(xp, "ndarray", numpy.ndarray))):
        raise TypeError(
            f"{argument} must be an array ({getattr(xp, '__name__', 'numpy')}.ndarray), "
            f"got {type(value).__name__}"
        )


def to_numpy(array: Any) -> numpy.ndarray:
    """Copy an array of the current backend to host memory as a NumPy array."""
    if isinstance(array, numpy.ndarray):
        return array
    if hasattr(array, "get"):  # CuPy arrays
        return array.get()
    return numpy.asarray(array)


DROPOUT_LEVELS = 65536


def dropout_mask(rng: Any, shape: tuple[int, ...], p: float) -> tuple[Array, float]:
    """A boolean keep-mask m of ``shape``, P(m = 1) = 1 - p, and that keep probability exactly.

    Every dropout, textbook and kernels alike, draws its mask here, so all of them see the same
    masks from the same generator. The mask compares uniform 16-bit integers with p * 2^16 (the
    cheapest draws), so p is rounded to a multiple of 2^-16 (0.1 -> 0.100006); the returned keep
    probability is the rounded one, which keeps E[x * m / keep_prob] = x exactly.
    """
    threshold = round(p * DROPOUT_LEVELS)
    return random_uint16(rng, shape) >= threshold, (DROPOUT_LEVELS - threshold) / DROPOUT_LEVELS


def random_uint16(rng: Any, shape: tuple[int, ...]) -> Array:
    """Uniform random 16-bit integers of the given shape from the generator ``rng``."""
    xp = get_array_module()
    if backend_name() == "cupy":
        return rng.integers(0, 65536, size=shape, dtype=xp.uint16)
    # full-width 64-bit draws, each cut into four 16-bit integers: cheaper than rng.bytes
    count = math.prod(shape)
    words = rng.integers(0, 2**64, size=-(-count // 4), dtype=xp.uint64)
    return words.view(xp.uint16)[:count].reshape(shape)


def make_rng(seed: int | None) -> Any:
    """A seeded random generator of the current backend (owned by a model)."""
    return get_array_module().random.default_rng(seed)


def step_rng(seed: int, step: int, shard: int = 0) -> Any:
    """The dropout generator of one training step (of one shard or rank): a function of these integers
    alone, so a resumed run draws the masks an uninterrupted one would, with no generator state saved.
    The keys are mixed on the host (NumPy's SeedSequence) into the one integer a CuPy generator takes."""
    return make_rng(int(numpy.random.SeedSequence([seed, step, shard]).generate_state(1, numpy.uint64)[0]))


def resolve_dtype(dtype: Any) -> Any:
    """Accept ``"float32"``, ``"float64"`` or the NumPy dtype objects; return the backend's dtype."""
    if dtype is None:  # numpy.dtype(None) is float64: a missing setting must not choose one
        raise TypeError("dtype must be float32 or float64, got None")
    try:
        name = dtype if isinstance(dtype, str) else numpy.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return getattr(get_array_module(), name)
