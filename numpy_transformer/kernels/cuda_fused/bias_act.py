"""A linear layer's bias fused with the SiLU or GELU (tanh form) after it: one launch forward, one backward.

bias_relu.py's kernel for the smooth activations of the feed-forward block (Marian's swish, Hugging
Face's "gelu_new"): the GEMM is made without its bias and one launch adds the bias and applies f, writing
y = f(h + b) and h + b, the cache (f' needs the activation's input, which y does not give back). The
backward's first ``blocks(size)`` blocks write dh = dy * f'(h + b), one entry a thread; the blocks after
them one column each a thread, summing dy * f'(h + b) down the rows in order for db (no atomics). f and
f' are the textbook's: SiLU x s with s = 1 / (1 + exp(-x)), f' = s + x s (1 - s); GELU x/2 (1 + t) with
t = tanh(c (x + 0.044715 x^3)), f' = (1 + t)/2 + x/2 (1 - t^2) c (1 + 3 * 0.044715 x^2).
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from ...functional import GELU_TANH_C
from . import FusedKernel

SOURCE = r"""
// activation 0: SiLU; 1: GELU in its tanh form, c = sqrt(2 / pi)
template <typename T>
__device__ T activate(T x, int activation, double c) {
    if (activation == 0) return x * ((T)1 / ((T)1 + exp(-x)));
    const T t = tanh((T)c * (x + (T)0.044715 * x * x * x));
    return (T)0.5 * x * ((T)1 + t);
}

template <typename T>
__device__ T slope(T x, int activation, double c) {
    if (activation == 0) {
        const T s = (T)1 / ((T)1 + exp(-x));
        return s + x * s * ((T)1 - s);
    }
    const T t = tanh((T)c * (x + (T)0.044715 * x * x * x));
    return (T)0.5 * ((T)1 + t) + (T)0.5 * x * ((T)1 - t * t) * (T)c * ((T)1 + (T)3 * (T)0.044715 * x * x);
}

template <typename T>
__device__ void forward(const T* h, const T* bias, T* y, T* pre, long long size, long long width,
                        int activation, double c) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size) return;
    const T x = h[i] + bias[i % width];
    pre[i] = x;
    y[i] = activate(x, activation, c);
}

template <typename T>
__device__ void backward(const T* dout, const T* pre, T* dh, T* dbias, long long size, long long width,
                         long long entry_blocks, int activation, double c) {
    if (blockIdx.x < entry_blocks) {
        const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
        if (i < size) dh[i] = dout[i] * slope(pre[i], activation, c);
        return;
    }
    const long long column = (blockIdx.x - entry_blocks) * THREADS + threadIdx.x;
    if (column >= width) return;
    T sum = 0;
    for (long long i = column; i < size; i += width) sum += dout[i] * slope(pre[i], activation, c);
    dbias[column] = sum;
}

#define BIAS_ACT_ENTRIES(T)                                                                           \
    extern "C" __global__ void bias_act_forward_##T(const T* h, const T* bias, T* y, T* pre,          \
                                                    long long size, long long width, int activation,  \
                                                    double c) {                                       \
        forward<T>(h, bias, y, pre, size, width, activation, c);                                      \
    }                                                                                                 \
    extern "C" __global__ void bias_act_backward_##T(const T* dout, const T* pre, T* dh, T* dbias,     \
                                                     long long size, long long width,                 \
                                                     long long entry_blocks, int activation,          \
                                                     double c) {                                      \
        backward<T>(dout, pre, dh, dbias, size, width, entry_blocks, activation, c);                  \
    }

BIAS_ACT_ENTRIES(float)
BIAS_ACT_ENTRIES(double)
"""

KERNEL = FusedKernel("bias_act", SOURCE)
ACTIVATIONS = ("silu", "gelu_tanh")  # by the number the kernel takes


def _activated(x: Array, activation: str) -> tuple[Array, Array]:
    """(f(x), f'(x)) as array operations, the kernel's formulas."""
    xp = get_array_module()
    if activation == "silu":
        s = 1.0 / (1.0 + xp.exp(-x))
        return x * s, s + x * s * (1.0 - s)
    t = xp.tanh(GELU_TANH_C * (x + 0.044715 * x * x * x))
    return 0.5 * x * (1.0 + t), 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_TANH_C * (
        1.0 + 3 * 0.044715 * x * x
    )


def forward_twin(h: Array, bias: Array, activation: str) -> tuple[Array, Array]:
    """The forward as array operations: (y, the cache h + b)."""
    pre = h + bias
    return _activated(pre, activation)[0], pre


def backward_twin(
    dout: Array, pre: Array, activation: str, dbias: Array | None = None
) -> tuple[Array, Array]:
    """The backward as array operations: (dh, dbias), dbias written into the array given."""
    dh = dout * _activated(pre, activation)[1]
    return dh, get_array_module().sum(dh.reshape(-1, dh.shape[-1]), axis=0, out=dbias)


def _which(activation: str) -> tuple:
    """The kernel's arguments that choose the activation: its number and GELU's c."""
    xp = get_array_module()
    return xp.int32(ACTIVATIONS.index(activation)), xp.float64(GELU_TANH_C)


@KERNEL.with_twin(forward_twin)
def forward(h: Array, bias: Array, activation: str) -> tuple[Array, Array]:
    """f(h + bias) over h's last axis (bias (width,)), f the ``activation`` ("silu" or "gelu_tanh"), in
    one launch (the twin off a GPU): (y, cache)."""
    xp = get_array_module()
    source = xp.ascontiguousarray(h)
    out, pre = xp.empty_like(source), xp.empty_like(source)
    size, width = source.size, source.shape[-1]
    args = (
        source,
        xp.ascontiguousarray(bias),
        out,
        pre,
        xp.int64(size),
        xp.int64(width),
        *_which(activation),
    )
    KERNEL.launch("bias_act_forward", h.dtype, KERNEL.blocks(size), args)
    return out, pre


@KERNEL.with_twin(backward_twin)
def backward(dout: Array, pre: Array, activation: str, dbias: Array | None = None) -> tuple[Array, Array]:
    """dh and dbias of the forward from dy and its cache, in one launch (the twin off a GPU); dbias
    written into the array given (overwritten; C-contiguous, (width,)), else into a new one."""
    xp = get_array_module()
    dy = xp.ascontiguousarray(dout)
    dh = xp.empty_like(dy)
    size, width = dy.size, dy.shape[-1]
    dbias = xp.empty(width, dtype=dy.dtype) if dbias is None else dbias
    entry_blocks = KERNEL.blocks(size)
    args = (dy, pre, dh, dbias, xp.int64(size), xp.int64(width), xp.int64(entry_blocks), *_which(activation))
    KERNEL.launch("bias_act_backward", dout.dtype, entry_blocks + KERNEL.blocks(width), args)
    return dh, dbias


class BiasActivation:
    """The kernel for one activation, as the feed-forward block takes a fused bias and activation
    (``forward(h, bias)``, ``backward(dout, cache, dbias=None)``: bias_relu.py's)."""

    def __init__(self, activation: str) -> None:
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation = activation

    def forward(self, h: Array, bias: Array) -> tuple[Array, Array]:
        return forward(h, bias, self.activation)

    def backward(self, dout: Array, cache: Array, dbias: Array | None = None) -> tuple[Array, Array]:
        return backward(dout, cache, self.activation, dbias)


BY_ACTIVATION = {name: BiasActivation(name) for name in ACTIVATIONS}
