"""A linear layer's bias fused with the ReLU after it: one launch forward, one backward.

The feed-forward block's first layer is a product, a bias added and a ReLU: on CuPy three launches
after the GEMM (the add; the ReLU's compare and multiply), and in the backward the ReLU's multiply and
the bias gradient's column sum. Here the GEMM is made without its bias and one launch adds the bias
and applies the ReLU, y = max(h + b, 0) written as (h + b) * (h + b > 0), as the textbook; the cache
is y itself (y > 0 exactly where h + b > 0). The backward's first ``blocks(size)`` blocks write
dh = dy * (y > 0), one entry a thread; the blocks after them one column each a thread, summing
dy * (y > 0) down the rows in order for db (no atomics: the same sums at every run).
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from . import FusedKernel

SOURCE = r"""
template <typename T>
__device__ void forward(const T* h, const T* bias, T* y, long long size, long long width) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    const T pre = h[i] + bias[i % width];
    y[i] = pre > (T)0 ? pre : (T)0;
}

template <typename T>
__device__ void backward(const T* dout, const T* y, T* dh, T* dbias, long long size, long long width,
                         long long entry_blocks) {
    if (blockIdx.x < entry_blocks) {
        const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < size) dh[i] = y[i] > (T)0 ? dout[i] : (T)0;
        return;
    }
    const long long column = (blockIdx.x - entry_blocks) * THREADS + threadIdx.x;
    if (column >= width) return;
    T sum = 0;
    for (long long i = column; i < size; i += width) sum += y[i] > (T)0 ? dout[i] : (T)0;
    dbias[column] = sum;
}

#define BIAS_RELU_ENTRIES(T)                                                                          \
    extern "C" __global__ void bias_relu_forward_##T(const T* h, const T* bias, T* y, long long size,  \
                                                     long long width) {                               \
        forward<T>(h, bias, y, size, width);                                                          \
    }                                                                                                 \
    extern "C" __global__ void bias_relu_backward_##T(const T* dout, const T* y, T* dh, T* dbias,      \
                                                      long long size, long long width,                \
                                                      long long entry_blocks) {                       \
        backward<T>(dout, y, dh, dbias, size, width, entry_blocks);                                   \
    }

BIAS_RELU_ENTRIES(float)
BIAS_RELU_ENTRIES(double)
"""

KERNEL = FusedKernel("bias_relu", SOURCE)


def forward_twin(h: Array, bias: Array) -> tuple[Array, Array]:
    """The forward as array operations: (y, the cache y)."""
    pre = h + bias
    out = pre * (pre > 0)
    return out, out


def backward_twin(dout: Array, y: Array, dbias: Array | None = None) -> tuple[Array, Array]:
    """The backward as array operations: (dh, dbias), dbias written into the array given."""
    dh = dout * (y > 0)
    return dh, get_array_module().sum(dh.reshape(-1, dh.shape[-1]), axis=0, out=dbias)


@KERNEL.with_twin(forward_twin)
def forward(h: Array, bias: Array) -> tuple[Array, Array]:
    """relu(h + bias) over h's last axis (bias (width,)) in one launch (the twin off a GPU): (y, cache)."""
    xp = get_array_module()
    source = xp.ascontiguousarray(h)
    out = xp.empty_like(source)
    size, width = source.size, source.shape[-1]
    args = (source, xp.ascontiguousarray(bias), out, xp.int64(size), xp.int64(width))
    KERNEL.launch("bias_relu_forward", h.dtype, KERNEL.blocks(size), args)
    return out, out


@KERNEL.with_twin(backward_twin)
def backward(dout: Array, y: Array, dbias: Array | None = None) -> tuple[Array, Array]:
    """dh and dbias of the forward from dy and its cache y, in one launch (the twin off a GPU); dbias
    written into the array given (overwritten; C-contiguous, (width,)), else into a new one."""
    xp = get_array_module()
    dy = xp.ascontiguousarray(dout)
    dh = xp.empty_like(dy)
    size, width = dy.size, dy.shape[-1]
    dbias = xp.empty(width, dtype=dy.dtype) if dbias is None else dbias
    entry_blocks = KERNEL.blocks(size)
    args = (dy, y, dh, dbias, xp.int64(size), xp.int64(width), xp.int64(entry_blocks))
    KERNEL.launch("bias_relu_backward", dout.dtype, entry_blocks + KERNEL.blocks(width), args)
    return dh, dbias
