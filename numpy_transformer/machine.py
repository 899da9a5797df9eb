"""Process tuning for the CPU: OpenBLAS's threads, the allocator, the machine's cores and memory;
and the optional libraries installed here (``require``).

Nothing here runs on import: the command line and the Trainer opt in (``tune_cpu``); a library
user's process is left as it was.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache

from .backend import backend_name, get_array_module

MALLOC_ENV_VAR = "NUMPY_TRANSFORMER_MALLOC"


def cpu_cores() -> int:
    """The cores this process may run on (its affinity where the system tells it), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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


def restart_with_openblas_timeout() -> None:
    """Start this command once more with OPENBLAS_THREAD_TIMEOUT set, unless it is set already.

    OpenBLAS reads its idle threads' spin time only when NumPy loads it, which has happened by the
    time a command's main() runs. Linux only, where NumPy's wheels bring OpenBLAS.
    """
    if OPENBLAS_TIMEOUT_VAR in os.environ or not sys.platform.startswith("linux") or not sys.executable:
        return
    os.environ[OPENBLAS_TIMEOUT_VAR] = OPENBLAS_TIMEOUT
    os.execv(sys.executable, [sys.executable, "-m", "numpy_transformer", *sys.argv[1:]])


OPTIONAL_LIBRARIES = {  # the optional libraries the commands use, and the extra that installs each
    "sacrebleu": "train",
    "tqdm": "train",
    "tokenizers": "train",
    "num2words": "train",
    "matplotlib": "plot",
    "sentencepiece": "pretrained",
    "safetensors": "pretrained",
    "jupytext": "notebook",
    "ctranslate2": "ctranslate2",
}


class MissingLibrary(RuntimeError):
    """An optional library the work needs is not installed: the message names it, what needs it
    and the extra of numpy_transformer that installs it."""


def require(purpose: str, *libraries: str) -> None:
    """Raise MissingLibrary, before any work, where one of ``libraries`` (OPTIONAL_LIBRARIES' names)
    cannot be imported: "``purpose`` needs sacrebleu, which is not installed: pip install
    'numpy_transformer[train]'"."""
    missing = []
    for name in libraries:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        extras = ",".join(dict.fromkeys(OPTIONAL_LIBRARIES[name] for name in missing))
        which = "which is" if len(missing) == 1 else "which are"
        raise MissingLibrary(
            f"{purpose} needs {' and '.join(missing)}, {which} not installed: "
            f"pip install 'numpy_transformer[{extras}]'"
        )
