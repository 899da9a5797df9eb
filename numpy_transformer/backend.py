"""The one place that owns the array backend.

Every layer asks :func:`get_array_module` for its array module (``xp``) instead of importing
NumPy, so the same code runs on NumPy (the default) and on CuPy. CuPy is imported only when
it is asked for, with ``set_backend("cupy")`` or the environment variable
``NUMPY_TRANSFORMER_BACKEND=cupy``.
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy

Array = Any
ENV_VAR = "NUMPY_TRANSFORMER_BACKEND"
MALLOC_ENV_VAR = "NUMPY_TRANSFORMER_MALLOC"
_BACKENDS = ("numpy", "cupy")

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
        if name_or_module not in _BACKENDS:
            raise ValueError(f"backend must be one of {_BACKENDS}, got {name_or_module!r}")
        _xp = numpy if name_or_module == "numpy" else _load_cupy()
    elif hasattr(name_or_module, "asarray") and hasattr(name_or_module, "matmul"):
        _xp = name_or_module
    else:
        raise TypeError(
            f"backend must be a name in {_BACKENDS} or an array module, got {type(name_or_module).__name__}"
        )
    for callback in _on_change:
        callback()
    return _xp


def get_array_module() -> Any:
    """The array module in use (NumPy unless the environment variable or set_backend chose otherwise)."""
    if _xp is None:
        set_backend(os.environ.get(ENV_VAR, "numpy"))
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


# what OpenBLAS calls its thread-count setters, by build: NumPy's wheels, 64-bit-index builds, plain builds
_OPENBLAS_THREAD_SETTERS = (
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("openblas_set_num_threads", "openblas_get_num_threads"),
)


@lru_cache(maxsize=1)
def _openblas_thread_control() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """OpenBLAS's (set, get) thread-count functions from the library NumPy loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and ".so" in line}
    except OSError:  # not Linux
        return None
    for path in sorted(paths):
        library = ctypes.CDLL(path)
        for set_name, get_name in _OPENBLAS_THREAD_SETTERS:
            if hasattr(library, set_name) and hasattr(library, get_name):
                setter, getter = getattr(library, set_name), getattr(library, get_name)
                setter.argtypes, setter.restype, getter.restype = [ctypes.c_int], None, ctypes.c_int
                return setter, getter
    return None


@contextmanager
def blas_threads(count: int) -> Iterator[bool]:
    """Run NumPy's OpenBLAS on ``count`` threads inside the block, then restore the previous count.

    Yields whether the count could be set (False where NumPy uses another BLAS, or off Linux).
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"count must be a positive integer, got {count!r}")
    control = _openblas_thread_control() if backend_name() == "numpy" else None
    if control is None:
        yield False
        return
    set_threads, get_threads = control
    previous = get_threads()
    set_threads(count)
    try:
        yield True
    finally:
        set_threads(previous)


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


def available_memory() -> int | None:
    """Bytes the backend can still allocate: the GPU's free memory on CuPy, else the host's
    available memory (Linux's MemAvailable, or all physical memory elsewhere); None if unknown."""
    if backend_name() == "cupy":
        return int(get_array_module().cuda.Device().mem_info[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def tune_allocator() -> bool:
    """Keep freed memory in the process for reuse (glibc only; opt out: NUMPY_TRANSFORMER_MALLOC=system).

    A training step allocates and frees the same large temporaries every time. glibc serves
    blocks above its mmap threshold (128 KiB at start) with fresh mappings that are faulted in
    page by page and returned on free, so each step pays those page faults again. Raising the
    threshold to 32 MiB and the trim threshold to 1 GiB lets the heap reuse the blocks. This
    changes the whole process's allocator, so only tune_cpu() (which the command line and the
    Trainer call) applies it. Returns whether the settings were applied.
    """
    if os.environ.get(MALLOC_ENV_VAR) == "system" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        return bool(libc.mallopt(m_mmap_threshold, 32 * 2**20)) and bool(
            libc.mallopt(m_trim_threshold, 2**30)
        )
    except (OSError, AttributeError):  # not glibc
        return False


OPENBLAS_TIMEOUT_VAR = "OPENBLAS_THREAD_TIMEOUT"
OPENBLAS_TIMEOUT = "24"
"""After each product OpenBLAS's idle threads spin for 2^28 cycles by default, taking a core from the
element-wise work and the threaded Adam update that follow; 2^24 cycles still bridge the gaps
between one step's products. OpenBLAS reads it once, when NumPy loads it, so it can only be set
for a new process."""


def tune_cpu() -> dict[str, bool]:
    """Opt in to the process-wide CPU settings the command line and the Trainer use.

    * the allocator keeps freed blocks for reuse (tune_allocator);
    * OpenBLAS's idle threads spin for 2^24 cycles instead of 2^28. That setting is read when
      NumPy starts, so here it is only reported: set ``OPENBLAS_THREAD_TIMEOUT=24`` before
      starting Python (the command line does so for itself: cli.restart_with_openblas_timeout).

    Importing numpy_transformer changes none of this. Returns what is in effect, by name.
    """
    return {
        "allocator": tune_allocator(),
        "openblas_thread_timeout": os.environ.get(OPENBLAS_TIMEOUT_VAR) is not None,
    }


def resolve_dtype(dtype: Any) -> Any:
    """Accept ``"float32"``, ``"float64"`` or the NumPy dtype objects; return the backend's dtype."""
    try:
        name = dtype if isinstance(dtype, str) else numpy.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be float32 or float64, got {dtype!r}") from None
    if name not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return getattr(get_array_module(), name)
