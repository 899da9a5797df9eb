"""Layer normalisation fused: the forward in one launch, the backward (dx, dgamma, dbeta) in one more.

Forward: one block per row; the block sums the row for its mean, then the squares of the centred row
for its variance (the two-pass variance, as the textbook), and writes y, xhat and rstd.
Backward: the first ``rows`` blocks take one row each (dx from the two row means of g = dy * gamma);
the blocks after them one column each per thread, summing dy * xhat and dy down the rows in order,
so dgamma and dbeta come out the same at every run (no atomics).
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from ...functional import LayerNormCache
from . import FusedKernel

# the row kernels, which layer_norm_add.py's entries share
TEMPLATES = r"""
template <typename T>
__device__ void forward(const T* x, const T* gamma, const T* beta, T* out, T* xhat, T* rstd,
                        long long width, double eps) {
    __shared__ T shared[THREADS];
    const long long row = blockIdx.x;
    const T* x_row = x + row * width;
    T sum = 0;
    for (long long i = threadIdx.x; i < width; i += THREADS) sum += x_row[i];
    const T mean = block_reduce(sum, shared, false) / (T)width;
    T squares = 0;
    for (long long i = threadIdx.x; i < width; i += THREADS) {
        const T centred = x_row[i] - mean;
        squares += centred * centred;
    }
    const T r = (T)1 / sqrt(block_reduce(squares, shared, false) / (T)width + (T)eps);
    for (long long i = threadIdx.x; i < width; i += THREADS) {
        const T h = (x_row[i] - mean) * r;
        xhat[row * width + i] = h;
        out[row * width + i] = gamma[i] * h + beta[i];
    }
    if (threadIdx.x == 0) rstd[row] = r;
}

// dx, plus dskip where it is not null (the gradient along a residual connection's skip path)
template <typename T>
__device__ void backward(const T* dout, const T* xhat, const T* rstd, const T* gamma, const T* dskip, T* dx,
                         T* dgamma, T* dbeta, long long rows, long long width) {
    __shared__ T shared[THREADS];
    if (blockIdx.x < rows) {
        const long long row = blockIdx.x;
        const T* dy = dout + row * width;
        const T* h = xhat + row * width;
        T sum_g = 0, sum_gh = 0;
        for (long long i = threadIdx.x; i < width; i += THREADS) {
            const T g = dy[i] * gamma[i];
            sum_g += g;
            sum_gh += g * h[i];
        }
        const T mean_g = block_reduce(sum_g, shared, false) / (T)width;
        const T mean_gh = block_reduce(sum_gh, shared, false) / (T)width;
        for (long long i = threadIdx.x; i < width; i += THREADS)
            dx[row * width + i] = rstd[row] * (dy[i] * gamma[i] - mean_g - h[i] * mean_gh)
                                  + (dskip != nullptr ? dskip[row * width + i] : (T)0);
    } else {
        const long long column = (blockIdx.x - rows) * THREADS + threadIdx.x;
        if (column >= width) return;
        T sum_dh = 0, sum_d = 0;
        for (long long row = 0; row < rows; ++row) {
            sum_dh += dout[row * width + column] * xhat[row * width + column];
            sum_d += dout[row * width + column];
        }
        dgamma[column] = sum_dh;
        dbeta[column] = sum_d;
    }
}
"""

SOURCE = (
    TEMPLATES
    + r"""
#define LAYER_NORM_ENTRIES(T)                                                                        \
    extern "C" __global__ void layer_norm_forward_##T(const T* x, const T* gamma, const T* beta,     \
                                                      T* out, T* xhat, T* rstd, long long width,      \
                                                      double eps) {                                   \
        forward<T>(x, gamma, beta, out, xhat, rstd, width, eps);                                      \
    }                                                                                                 \
    extern "C" __global__ void layer_norm_backward_##T(const T* dout, const T* xhat, const T* rstd,  \
                                                       const T* gamma, T* dx, T* dgamma, T* dbeta,    \
                                                       long long rows, long long width) {             \
        backward<T>(dout, xhat, rstd, gamma, nullptr, dx, dgamma, dbeta, rows, width);                \
    }

LAYER_NORM_ENTRIES(float)
LAYER_NORM_ENTRIES(double)
"""
)

KERNEL = FusedKernel("layer_norm", SOURCE)


def forward_twin(x: Array, gamma: Array, beta: Array, eps: float = 1e-5) -> tuple[Array, LayerNormCache]:
    """The kernel's forward as array operations: row sums over the width, the two-pass variance."""
    xp = get_array_module()
    width = x.shape[-1]
    centred = x - x.sum(axis=-1, keepdims=True) / width
    rstd = 1.0 / xp.sqrt((centred * centred).sum(axis=-1, keepdims=True) / width + eps)
    xhat = centred * rstd
    return gamma * xhat + beta, LayerNormCache(xhat, rstd, gamma)


def backward_twin(
    dout: Array, cache: LayerNormCache, dgamma: Array | None = None, dbeta: Array | None = None
) -> tuple[Array, Array, Array]:
    """The kernel's backward as array operations: dx from the row means of g and g * xhat, dgamma and
    dbeta as sums down the rows (written into ``dgamma`` and ``dbeta`` where given)."""
    xp = get_array_module()
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    g = dout * gamma
    mean_g = g.sum(axis=-1, keepdims=True) / width
    mean_gh = (g * xhat).sum(axis=-1, keepdims=True) / width
    rows = dout.reshape(-1, width)
    return (
        rstd * (g - mean_g - xhat * mean_gh),
        xp.sum(rows * xhat.reshape(-1, width), axis=0, out=dgamma),
        xp.sum(rows, axis=0, out=dbeta),
    )


@KERNEL.with_twin(forward_twin)
def forward(x: Array, gamma: Array, beta: Array, eps: float = 1e-5) -> tuple[Array, LayerNormCache]:
    """layer_norm_forward in one launch (its twin off a GPU)."""
    xp = get_array_module()
    width = x.shape[-1]
    rows = xp.ascontiguousarray(x).reshape(-1, width)
    out, xhat = xp.empty_like(rows), xp.empty_like(rows)
    rstd = xp.empty((rows.shape[0], 1), dtype=x.dtype)
    args = (rows, gamma, beta, out, xhat, rstd, xp.int64(width), xp.float64(eps))
    KERNEL.launch("layer_norm_forward", x.dtype, rows.shape[0], args)
    return out.reshape(x.shape), LayerNormCache(xhat.reshape(x.shape), rstd.reshape(*x.shape[:-1], 1), gamma)


@KERNEL.with_twin(backward_twin)
def backward(
    dout: Array, cache: LayerNormCache, dgamma: Array | None = None, dbeta: Array | None = None
) -> tuple[Array, Array, Array]:
    """layer_norm_backward in one launch (its twin off a GPU); dgamma and dbeta written into the arrays
    given (overwritten; C-contiguous, of gamma's shape), else into new ones."""
    return launch_backward(KERNEL, "layer_norm_backward", dout, cache, None, dgamma, dbeta)


def launch_backward(
    kernel: FusedKernel,
    entry: str,
    dout: Array,
    cache: LayerNormCache,
    dskip: Array | None,
    dgamma: Array | None,
    dbeta: Array | None,
    more: tuple = (),
) -> tuple[Array, Array, Array]:
    """The backward row kernel's ``entry`` of ``kernel`` (a GPU only): dx (plus ``dskip`` where the entry
    takes it), dgamma and dbeta (into the arrays given, else new ones); ``more``: the entry's arguments
    after these."""
    xp = get_array_module()
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    dy = xp.ascontiguousarray(dout).reshape(-1, width)
    rows = dy.shape[0]
    dx = xp.empty_like(dy)
    dgamma = xp.empty_like(gamma) if dgamma is None else dgamma
    dbeta = xp.empty_like(gamma) if dbeta is None else dbeta
    skip = () if dskip is None else (xp.ascontiguousarray(dskip).reshape(-1, width),)
    args = (dy, xhat, rstd, gamma, *skip, dx, dgamma, dbeta, xp.int64(rows), xp.int64(width), *more)
    kernel.launch(entry, dout.dtype, rows + kernel.blocks(width), args)
    return dx.reshape(dout.shape), dgamma, dbeta
