"""The layer norm's backward with the residual's skip gradient, and the dropout backward before it, fused.

In a pre-norm block the gradient of one connection's input, dx = norm's dx + the skip gradient
(layer_norm_add.py), is the gradient of the connection before it's output: its skip path's share, and
through its dropout its sublayer's. Here the norm's backward kernel (layer_norm.py's row and column
blocks) writes dx and, in its row blocks, dx through that dropout's Philox mask (recomputed from the
forward's seed and offset, as dropout.py's backward), where the two take a launch each. The dropout's
cache must be the fused dropout's: the switch acts only with ``dropout`` on. Without a skip gradient
(a stack's final norm after its last connection) the second entry writes the norm's dx alone.
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from ...functional import LayerNormCache
from . import FusedKernel
from .dropout import PHILOX, PhiloxDropoutCache, apply_twin, mask_args
from .layer_norm import TEMPLATES, backward_twin, launch_backward
from .layer_norm_add import backward_added_twin

SOURCE = (
    PHILOX
    + TEMPLATES
    + r"""
// backward's dx, plus dskip; and in the row blocks dx / keep_prob where the dropout's mask kept, else 0
template <typename T>
__device__ void backward_dropped(const T* dout, const T* xhat, const T* rstd, const T* gamma, const T* dskip,
                                 T* dx, T* dgamma, T* dbeta, long long rows, long long width, T* dropped,
                                 const unsigned short* seed, unsigned int offset, unsigned int threshold,
                                 double keep_prob) {
    backward<T>(dout, xhat, rstd, gamma, dskip, dx, dgamma, dbeta, rows, width);
    if (blockIdx.x >= rows) return;
    const long long row = blockIdx.x;
    for (long long i = threadIdx.x; i < width; i += THREADS) {  // the entries this thread wrote in dx
        const long long at = row * width + i;
        dropped[at] = kept(at, seed, offset, threshold) ? dx[at] / (T)keep_prob : (T)0;
    }
}

#define LAYER_NORM_ADD_DROPOUT_ENTRIES(T)                                                             \
    extern "C" __global__ void layer_norm_add_dropout_##T(                                             \
        const T* dout, const T* xhat, const T* rstd, const T* gamma, const T* dskip, T* dx, T* dgamma,  \
        T* dbeta, long long rows, long long width, T* dropped, const unsigned short* seed,             \
        unsigned int offset, unsigned int threshold, double keep_prob, long long size) {               \
        backward_dropped<T>(dout, xhat, rstd, gamma, dskip, dx, dgamma, dbeta, rows, width, dropped,   \
                            seed, offset, threshold, keep_prob);                                       \
    }

#define LAYER_NORM_DROPOUT_ENTRIES(T)                                                                 \
    extern "C" __global__ void layer_norm_dropout_##T(                                                 \
        const T* dout, const T* xhat, const T* rstd, const T* gamma, T* dx, T* dgamma, T* dbeta,       \
        long long rows, long long width, T* dropped, const unsigned short* seed, unsigned int offset,   \
        unsigned int threshold, double keep_prob, long long size) {                                     \
        backward_dropped<T>(dout, xhat, rstd, gamma, nullptr, dx, dgamma, dbeta, rows, width, dropped, \
                            seed, offset, threshold, keep_prob);                                        \
    }

LAYER_NORM_ADD_DROPOUT_ENTRIES(float)
LAYER_NORM_ADD_DROPOUT_ENTRIES(double)
LAYER_NORM_DROPOUT_ENTRIES(float)
LAYER_NORM_DROPOUT_ENTRIES(double)
"""
)

KERNEL = FusedKernel("layer_norm_add_dropout", SOURCE)


def backward_dropped_twin(
    dout: Array,
    cache: LayerNormCache,
    dskip: Array | None,
    dropout_cache: PhiloxDropoutCache,
    dgamma: Array | None = None,
    dbeta: Array | None = None,
) -> tuple[Array, Array, Array, Array]:
    """The kernel as array operations: layer_norm_add.py's twin (layer_norm.py's without ``dskip``),
    then dropout's twin of its dx."""
    if dskip is None:
        dx, dgamma, dbeta = backward_twin(dout, cache, dgamma, dbeta)
    else:
        dx, dgamma, dbeta = backward_added_twin(dout, cache, dskip, dgamma, dbeta)
    return dx, apply_twin(dx, dropout_cache), dgamma, dbeta


def backward_dropped(
    dout: Array,
    cache: LayerNormCache,
    dskip: Array | None,
    dropout_cache: PhiloxDropoutCache,
    dgamma: Array | None = None,
    dbeta: Array | None = None,
) -> tuple[Array, Array, Array, Array]:
    """(dx + dskip, that through the fused dropout's mask of ``dropout_cache``, dgamma, dbeta) in one
    launch (the twin off a GPU); ``dskip`` of dout's shape, or None for dx alone; dgamma and dbeta
    written into the arrays given (overwritten), else into new ones."""
    if dskip is not None and dskip.shape != dout.shape:
        raise ValueError(f"dskip of shape {tuple(dskip.shape)} must have dout's shape {tuple(dout.shape)}")
    return _backward_dropped(dout, cache, dskip, dropout_cache, dgamma, dbeta)


@KERNEL.with_twin(backward_dropped_twin)
def _backward_dropped(
    dout: Array,
    cache: LayerNormCache,
    dskip: Array | None,
    dropout_cache: PhiloxDropoutCache,
    dgamma: Array | None,
    dbeta: Array | None,
) -> tuple[Array, Array, Array, Array]:
    dropped = get_array_module().empty(dout.shape, dtype=dout.dtype)
    more = (dropped, *mask_args(dropout_cache, dout.size))
    entry = "layer_norm_dropout" if dskip is None else "layer_norm_add_dropout"
    dx, dgamma, dbeta = launch_backward(KERNEL, entry, dout, cache, dskip, dgamma, dbeta, more)
    return dx, dropped, dgamma, dbeta
