"""Fused CUDA kernels: one launch where the array operations are many, each with its NumPy twin.

One module per kernel (in the manner of llm.c's dev/cuda): its CUDA C source (``SOURCE``, after the
PRELUDE every kernel shares: its block size and the block reduction; compiled by CuPy's ``RawModule``
at first use, one ``extern "C"`` entry per dtype: ``NAME_float``, ``NAME_double``) and its twin, the
same algorithm written with array operations; ``FusedKernel.with_twin`` runs the one or the other.
The twin is what runs off a GPU: on NumPy (where tests/model/test_cuda_fused.py proves it equal to the
textbook in float64) and on the CuPy stand-in, which counts it as the one launch the kernel is
(tests/support/cupy_launches.py).

Each kernel is switched by name with the environment variable ``NUMPY_TRANSFORMER_FUSED``: ``all``,
``none``, or names joined by commas (``layer_norm,dropout``). Unset, only the kernels a GPU run has
proven equal to their twins are on (PROVEN_ON_GPU): none yet, so by default the CUDA kernel set runs
its plain array operations, and one kernel failing on a GPU never holds back the others.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ...backend import backend_name, get_array_module

ENV_VAR = "NUMPY_TRANSFORMER_FUSED"
KERNELS = (
    "layer_norm",
    "layer_norm_add",
    "layer_norm_add_dropout",
    "dropout",
    "dropout_add",
    "dropout_add_norm",
    "bias_relu",
    "bias_act",
    "attention_softmax",
    "attention_dropout",
    "embedding_backward",
    "cross_entropy",
    "adam",
)  # the fused kernels, by the name their switch takes
PROVEN_ON_GPU: tuple[str, ...] = ()  # on by default: each proven equal to its twin on a GPU
COMPILE_OPTIONS = ("--std=c++17",)
C_TYPES = {"float32": "float", "float64": "double"}  # the entry of a kernel for arrays of each dtype


def enabled(name: str) -> bool:
    """Whether the fused kernel ``name`` is switched on (NUMPY_TRANSFORMER_FUSED, else PROVEN_ON_GPU)."""
    return name in switched_on()


def switched_on() -> tuple[str, ...]:
    """The fused kernels switched on: NUMPY_TRANSFORMER_FUSED's, refused (ValueError) where it names
    an unknown kernel, naming the variable, its value and the choices."""
    value = os.environ.get(ENV_VAR)
    if value is None:
        return PROVEN_ON_GPU
    if value in ("all", "none"):
        return KERNELS if value == "all" else ()
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in KERNELS]
    if unknown or not names:
        raise ValueError(
            f"the environment variable {ENV_VAR} is {value!r}, expected all, none or fused kernel names "
            f"joined by commas, of {', '.join(KERNELS)}"
        )
    return names


def on_a_gpu() -> bool:
    """True on real CuPy; False on NumPy and on the stand-in (which offers ``one_kernel``)."""
    return backend_name() == "cupy" and not hasattr(get_array_module(), "one_kernel")


# every kernel's source starts with its block size (THREADS) and the block reduction the row kernels share
PRELUDE = r"""
#define THREADS {threads}

// The sum, or with `maximum` the largest, of every thread's value in a block of THREADS threads (a power
// of two), to every thread, in the same order at every run.
template <typename T>
__device__ T block_reduce(T value, T* shared, bool maximum) {{
    shared[threadIdx.x] = value;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {{
        if (threadIdx.x < stride) {{
            const T other = shared[threadIdx.x + stride];
            shared[threadIdx.x] = maximum ? (other > shared[threadIdx.x] ? other : shared[threadIdx.x])
                                          : shared[threadIdx.x] + other;
        }}
        __syncthreads();
    }}
    const T result = shared[0];
    __syncthreads();
    return result;
}}
"""


class FusedKernel:
    """A fused kernel's source and its launch: on a GPU the compiled entry for the arrays' dtype,
    elsewhere the twin, which the stand-in counts as one launch. ``body`` is the CUDA C after the
    PRELUDE (its blocks of ``threads`` threads); ``source`` the whole program."""

    def __init__(self, name: str, body: str, threads: int = 256) -> None:
        self.name, self.threads = name, threads
        self.source = PRELUDE.format(threads=threads) + body
        self._functions: dict[str, Any] = {}

    def blocks(self, size: int) -> int:
        """Enough blocks for one thread an entry of ``size`` (one at least)."""
        return max(1, -(-size // self.threads))

    def launch(self, entry: str, dtype: Any, grid: int, args: tuple) -> None:
        """Run ``entry`` (compiled at first use) on ``grid`` blocks; a GPU only."""
        function_name = f"{entry}_{C_TYPES[str(dtype)]}"
        function = self._functions.get(function_name)
        if function is None:
            module = get_array_module().RawModule(code=self.source, options=COMPILE_OPTIONS)
            function = self._functions[function_name] = module.get_function(function_name)
        function((grid,), (self.threads,), args)

    def twin(self) -> AbstractContextManager:
        """A context in which the twin runs: on the stand-in, counted as this kernel's one launch."""
        counted = getattr(get_array_module(), "one_kernel", None)
        return counted(self.name) if counted is not None else nullcontext()

    def with_twin(self, twin: Callable) -> Callable[[Callable], Callable]:
        """Decorates the function that launches the kernel once: on a GPU it runs, elsewhere ``twin``
        does with the same arguments (counted as the one launch on the stand-in)."""

        def decorate(on_gpu: Callable) -> Callable:
            @functools.wraps(on_gpu)
            def run(*args: Any, **kwargs: Any) -> Any:
                if on_a_gpu():
                    return on_gpu(*args, **kwargs)
                with self.twin():
                    return twin(*args, **kwargs)

            return run

        return decorate
