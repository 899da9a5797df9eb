"""The residual connection's add fused into the layer norm's backward: dx + dskip in its one launch.

In a pre-norm residual connection ``x + dropout(sublayer(norm(x)))`` the gradient of x is the norm's
dx plus the gradient along the skip path; the norm's backward kernel (layer_norm.py's, the same row
and column blocks) adds the latter as it writes dx, where they take two launches. Its cache is the
layer norm's, from either forward (the fused kernel's or the array operations').
"""

from __future__ import annotations

from ...backend import Array
from ...functional import LayerNormCache
from . import FusedKernel
from .layer_norm import TEMPLATES, backward_twin, launch_backward

SOURCE = (
    TEMPLATES
    + r"""
#define LAYER_NORM_ADD_ENTRIES(T)                                                                    \
    extern "C" __global__ void layer_norm_backward_added_##T(const T* dout, const T* xhat,           \
                                                             const T* rstd, const T* gamma,          \
                                                             const T* dskip, T* dx, T* dgamma,       \
                                                             T* dbeta, long long rows,               \
                                                             long long width) {                      \
        backward<T>(dout, xhat, rstd, gamma, dskip, dx, dgamma, dbeta, rows, width);                 \
    }

LAYER_NORM_ADD_ENTRIES(float)
LAYER_NORM_ADD_ENTRIES(double)
"""
)

KERNEL = FusedKernel("layer_norm_add", SOURCE)


def backward_added_twin(
    dout: Array, cache: LayerNormCache, dskip: Array, dgamma: Array | None = None, dbeta: Array | None = None
) -> tuple[Array, Array, Array]:
    """The kernel as array operations: layer_norm.py's twin, its dx plus dskip."""
    dx, dgamma, dbeta = backward_twin(dout, cache, dgamma, dbeta)
    return dx + dskip, dgamma, dbeta


def backward_added(
    dout: Array, cache: LayerNormCache, dskip: Array, dgamma: Array | None = None, dbeta: Array | None = None
) -> tuple[Array, Array, Array]:
    """layer_norm_backward's (dx + dskip, dgamma, dbeta) in one launch (its twin off a GPU); ``dskip`` of
    dout's shape; dgamma and dbeta written into the arrays given (overwritten), else into new ones."""
    if dskip.shape != dout.shape:
        raise ValueError(f"dskip of shape {tuple(dskip.shape)} must have dout's shape {tuple(dout.shape)}")
    return _backward_added(dout, cache, dskip, dgamma, dbeta)


@KERNEL.with_twin(backward_added_twin)
def _backward_added(
    dout: Array, cache: LayerNormCache, dskip: Array, dgamma: Array | None, dbeta: Array | None
) -> tuple[Array, Array, Array]:
    return launch_backward(KERNEL, "layer_norm_backward_added", dout, cache, dskip, dgamma, dbeta)
