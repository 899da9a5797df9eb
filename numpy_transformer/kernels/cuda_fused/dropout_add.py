"""The residual add fused into dropout: ``skip + dropout(x)`` in one launch, where they take two.

A residual connection adds its sublayer's output, dropped out, to its input. Here one launch draws
the mask as dropout.py's kernel does (the same Philox words: the same seed stream, threshold and
offset) and adds: y[i] = skip[i] + (kept(i) ? x[i] / keep_prob : 0). The cache is dropout's, so the
backward is dropout's own (the skip's gradient passes through the add untouched, no launch): the
switch ``dropout_add`` acts only with ``dropout`` on.
"""

from __future__ import annotations

from typing import Any

from ...backend import Array, get_array_module
from . import FusedKernel
from .dropout import PHILOX, PhiloxDropoutCache, apply_twin, mask_args, new_cache

SOURCE = (
    PHILOX
    + r"""
// y = skip + x / keep_prob where kept, else skip.
template <typename T>
__device__ void apply_added(const T* x, const T* skip, T* y, const unsigned short* seed, unsigned int offset,
                            unsigned int threshold, double keep_prob, long long size) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) y[i] = skip[i] + (kept(i, seed, offset, threshold) ? x[i] / (T)keep_prob : (T)0);
}

#define DROPOUT_ADD_ENTRIES(T)                                                                        \
    extern "C" __global__ void dropout_add_##T(const T* x, const T* skip, T* y,                      \
                                               const unsigned short* seed, unsigned int offset,       \
                                               unsigned int threshold, double keep_prob,              \
                                               long long size) {                                      \
        apply_added<T>(x, skip, y, seed, offset, threshold, keep_prob, size);                         \
    }

DROPOUT_ADD_ENTRIES(float)
DROPOUT_ADD_ENTRIES(double)
"""
)

KERNEL = FusedKernel("dropout_add", SOURCE)


def forward(x: Array, skip: Array, p: float, rng: Any) -> tuple[Array, PhiloxDropoutCache]:
    """skip + dropout(x) (training, p > 0; ``skip`` of x's shape) in one launch (the twin off a GPU);
    the cache is dropout's, for dropout.backward."""
    if skip.shape != x.shape:
        raise ValueError(f"skip of shape {tuple(skip.shape)} must have x's shape {tuple(x.shape)}")
    cache = new_cache(p, rng)
    return _apply_added(x, skip, cache), cache


def added_twin(x: Array, skip: Array, cache: PhiloxDropoutCache) -> Array:
    """The kernel as array operations: the skip plus dropout's twin of x."""
    return skip + apply_twin(x, cache)


@KERNEL.with_twin(added_twin)
def _apply_added(x: Array, skip: Array, cache: PhiloxDropoutCache) -> Array:
    xp = get_array_module()
    source, addend = xp.ascontiguousarray(x), xp.ascontiguousarray(skip)
    out = xp.empty_like(source)
    args = (source, addend, out, *mask_args(cache, source.size))
    KERNEL.launch("dropout_add", x.dtype, KERNEL.blocks(source.size), args)
    return out
