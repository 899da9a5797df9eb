"""The residual add and the layer norm after it fused: ``norm(skip + dropout(x))`` and the sum, one launch.

In a pre-norm block one residual connection ends with ``skip + dropout(x)`` and the next begins with
the layer norm of that sum. Here one block a row writes the sum as dropout_add.py's kernel does (the
same Philox mask: seed stream, offset, threshold and entry numbering), then normalises it as
layer_norm.py's forward does (the same row kernel), where the two take a launch each. The caches are
dropout's (its backward is dropout's: the switch acts only with ``dropout`` on) and the layer norm's.
"""

from __future__ import annotations

from typing import Any

from ...backend import Array, get_array_module
from ...functional import LayerNormCache
from . import FusedKernel
from .dropout import PHILOX, PhiloxDropoutCache, mask_args, new_cache
from .dropout_add import added_twin
from .layer_norm import TEMPLATES, forward_twin

SOURCE = (
    PHILOX
    + TEMPLATES
    + r"""
// total = skip + x / keep_prob where kept, else skip; then the layer norm of total's row
template <typename T>
__device__ void added_norm(const T* x, const T* skip, T* total, const unsigned short* seed, unsigned int offset,
                           unsigned int threshold, double keep_prob, const T* gamma, const T* beta, T* out,
                           T* xhat, T* rstd, long long width, double eps) {
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < width; i += THREADS) {
        const long long at = row * width + i;
        total[at] = skip[at] + (kept(at, seed, offset, threshold) ? x[at] / (T)keep_prob : (T)0);
    }
    __syncthreads();
    forward<T>(total, gamma, beta, out, xhat, rstd, width, eps);
}

#define DROPOUT_ADD_NORM_ENTRIES(T)                                                                   \
    extern "C" __global__ void dropout_add_norm_##T(                                                   \
        const T* x, const T* skip, T* total, const unsigned short* seed, unsigned int offset,          \
        unsigned int threshold, double keep_prob, long long size, const T* gamma, const T* beta,       \
        T* out, T* xhat, T* rstd, long long width, double eps) {                                       \
        added_norm<T>(x, skip, total, seed, offset, threshold, keep_prob, gamma, beta, out, xhat, rstd, \
                      width, eps);                                                                     \
    }

DROPOUT_ADD_NORM_ENTRIES(float)
DROPOUT_ADD_NORM_ENTRIES(double)
"""
)

KERNEL = FusedKernel("dropout_add_norm", SOURCE)


def forward(
    x: Array, skip: Array, p: float, rng: Any, gamma: Array, beta: Array, eps: float = 1e-5
) -> tuple[Array, Array, PhiloxDropoutCache, LayerNormCache]:
    """(skip + dropout(x), its layer norm, dropout's cache, the norm's cache) in one launch (the twin
    off a GPU); training, p > 0, ``skip`` of x's shape."""
    if skip.shape != x.shape:
        raise ValueError(f"skip of shape {tuple(skip.shape)} must have x's shape {tuple(x.shape)}")
    cache = new_cache(p, rng)
    total, out, norm_cache = _added_norm(x, skip, cache, gamma, beta, eps)
    return total, out, cache, norm_cache


def added_norm_twin(
    x: Array, skip: Array, cache: PhiloxDropoutCache, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, LayerNormCache]:
    """The kernel as array operations: dropout_add.py's twin, then layer_norm.py's forward twin."""
    total = added_twin(x, skip, cache)
    out, norm_cache = forward_twin(total, gamma, beta, eps)
    return total, out, norm_cache


@KERNEL.with_twin(added_norm_twin)
def _added_norm(
    x: Array, skip: Array, cache: PhiloxDropoutCache, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, LayerNormCache]:
    xp = get_array_module()
    width = x.shape[-1]
    source = xp.ascontiguousarray(x).reshape(-1, width)
    addend = xp.ascontiguousarray(skip).reshape(-1, width)
    total, out, xhat = xp.empty_like(source), xp.empty_like(source), xp.empty_like(source)
    rstd = xp.empty((source.shape[0], 1), dtype=x.dtype)
    mask = mask_args(cache, source.size)
    args = (source, addend, total, *mask, gamma, beta, out, xhat, rstd, xp.int64(width), xp.float64(eps))
    KERNEL.launch("dropout_add_norm", x.dtype, source.shape[0], args)
    shape = x.shape
    norm_cache = LayerNormCache(xhat.reshape(shape), rstd.reshape(*shape[:-1], 1), gamma)
    return total.reshape(shape), out.reshape(shape), norm_cache
