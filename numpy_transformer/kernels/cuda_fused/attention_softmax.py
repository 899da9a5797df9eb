"""Attention's scaled, masked softmax fused: one launch forward, one backward.

Forward, one block per row of the scores S (B, H, T, S_len): s = S * scale, MASKED_SCORE where the mask
is false, then exp(s - max s) / sum; the mask is read through its strides, so a (B, 1, T, S_len) or
(B, 1, 1, S_len) mask is never broadcast in memory. Backward: dS = y * (dy - sum(dy * y)) * scale, 0 where
masked. Where the array operations take seven launches forward (scale, mask, and softmax's five) and five
backward.
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from ...functional import MASKED_SCORE
from . import FusedKernel
from .dropout import PHILOX

# the row kernels, which attention_dropout.py's entries share: with a seed (not null) the forward also
# writes the probabilities dropped out, and the backward reads dy through the same mask
TEMPLATES = r"""
// Whether row `row` (of heads * queries rows per batch entry) may see key `key`: the mask through its
// strides in elements (0 along an axis it broadcasts).
__device__ bool visible(const bool* mask, long long row, long long key, long long heads, long long queries,
                        long long stride_b, long long stride_h, long long stride_t) {
    const long long t = row % queries, h = (row / queries) % heads, b = row / (queries * heads);
    return mask[b * stride_b + h * stride_h + t * stride_t + key];
}

// The Philox dropout mask of dropout.py's kernel: entry i of dout through it, or dout[i] with no seed.
template <typename T>
__device__ T dropped_out(const T* dout, long long i, const unsigned short* seed, unsigned int offset,
                         unsigned int threshold, double keep_prob) {
    if (seed == nullptr) return dout[i];
    return kept(i, seed, offset, threshold) ? dout[i] / (T)keep_prob : (T)0;
}

template <typename T>
__device__ void forward(const T* scores, const bool* mask, T* probs, T* dropped, const unsigned short* seed,
                        unsigned int offset, unsigned int threshold, double keep_prob, long long keys,
                        long long heads, long long queries, long long stride_b, long long stride_h,
                        long long stride_t, double scale, double masked) {
    __shared__ T shared[THREADS];
    const long long row = blockIdx.x;
    const T* s = scores + row * keys;
    T* y = probs + row * keys;
    T largest = (T)__longlong_as_double(0xfff0000000000000ULL);  // -infinity
    for (long long j = threadIdx.x; j < keys; j += THREADS) {
        const bool seen = visible(mask, row, j, heads, queries, stride_b, stride_h, stride_t);
        const T value = seen ? s[j] * (T)scale : (T)masked;
        y[j] = value;
        largest = value > largest ? value : largest;
    }
    largest = block_reduce(largest, shared, true);
    T sum = 0;
    for (long long j = threadIdx.x; j < keys; j += THREADS) {
        const T e = exp(y[j] - largest);
        y[j] = e;
        sum += e;
    }
    sum = block_reduce(sum, shared, false);
    for (long long j = threadIdx.x; j < keys; j += THREADS) {
        y[j] = y[j] / sum;
        if (seed != nullptr) dropped[row * keys + j] = dropped_out(probs, row * keys + j, seed, offset,
                                                                   threshold, keep_prob);
    }
}

template <typename T>
__device__ void backward(const T* dout, const T* probs, const bool* mask, const unsigned short* seed,
                         unsigned int offset, unsigned int threshold, double keep_prob, T* dscores,
                         long long keys, long long heads, long long queries, long long stride_b,
                         long long stride_h, long long stride_t, double scale) {
    __shared__ T shared[THREADS];
    const long long row = blockIdx.x;
    const T* y = probs + row * keys;
    T dot = 0;
    for (long long j = threadIdx.x; j < keys; j += THREADS)
        dot += dropped_out(dout, row * keys + j, seed, offset, threshold, keep_prob) * y[j];
    dot = block_reduce(dot, shared, false);
    for (long long j = threadIdx.x; j < keys; j += THREADS) {
        const T dy = dropped_out(dout, row * keys + j, seed, offset, threshold, keep_prob);
        dscores[row * keys + j] = visible(mask, row, j, heads, queries, stride_b, stride_h, stride_t)
                                      ? y[j] * (dy - dot) * (T)scale : (T)0;
    }
}
"""

SOURCE = (
    PHILOX
    + TEMPLATES
    + r"""
#define SOFTMAX_ENTRIES(T)                                                                             \
    extern "C" __global__ void attention_softmax_forward_##T(                                           \
        const T* scores, const bool* mask, T* probs, long long keys, long long heads, long long queries, \
        long long stride_b, long long stride_h, long long stride_t, double scale, double masked) {      \
        forward<T>(scores, mask, probs, nullptr, nullptr, 0, 0, 1.0, keys, heads, queries, stride_b,     \
                   stride_h, stride_t, scale, masked);                                                  \
    }                                                                                                   \
    extern "C" __global__ void attention_softmax_backward_##T(                                          \
        const T* dout, const T* probs, const bool* mask, T* dscores, long long keys, long long heads,    \
        long long queries, long long stride_b, long long stride_h, long long stride_t, double scale) {  \
        backward<T>(dout, probs, mask, nullptr, 0, 0, 1.0, dscores, keys, heads, queries, stride_b,      \
                    stride_h, stride_t, scale);                                                         \
    }

SOFTMAX_ENTRIES(float)
SOFTMAX_ENTRIES(double)
"""
)

KERNEL = FusedKernel("attention_softmax", SOURCE, threads=128)


def mask_strides(mask: Array | None, shape: tuple[int, ...]) -> tuple[Array, tuple[int, int, int]]:
    """The mask (all-visible where None) and its strides in elements along B, H and T (0 where it
    broadcasts); its last axis is the keys', contiguous."""
    xp = get_array_module()
    if mask is None:  # every key visible: one row of them, read at every row's offset 0
        return xp.ones((shape[3],), dtype=bool), (0, 0, 0)
    mask = xp.ascontiguousarray(mask.reshape((1,) * (4 - mask.ndim) + mask.shape))
    _, heads, queries, keys = mask.shape
    return mask, (
        0 if mask.shape[0] == 1 else heads * queries * keys,
        0 if heads == 1 else queries * keys,
        0 if queries == 1 else keys,
    )


def check_mask(mask: Array | None, shape: tuple[int, ...]) -> None:
    """The kernel reads a mask of the scores' keys along its last axis: ValueError for any other."""
    if mask is not None and (mask.ndim > 4 or mask.shape[-1] != shape[-1]):
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} must hold the scores' {shape[-1]} keys in its last axis"
        )


def forward(scores: Array, mask: Array | None, scale: float) -> Array:
    """softmax(where(mask, scores * scale, MASKED_SCORE)) over the keys, in one launch (the twin off a GPU).
    scores: (B, H, T, S), mask: broadcastable to it -> probs (B, H, T, S)"""
    check_mask(mask, scores.shape)
    return _forward(scores, mask, scale)


def backward(dout: Array, probs: Array, mask: Array | None, scale: float) -> Array:
    """dS = probs * (dy - sum(dy * probs)) * scale, 0 where masked, in one launch (the twin off a GPU)."""
    check_mask(mask, dout.shape)
    return _backward(dout, probs, mask, scale)


def forward_twin(scores: Array, mask: Array | None, scale: float) -> Array:
    """The kernel's forward as array operations."""
    xp = get_array_module()
    s = scores * scale
    if mask is not None:
        s = xp.where(mask, s, MASKED_SCORE)
    e = xp.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def backward_twin(dout: Array, probs: Array, mask: Array | None, scale: float) -> Array:
    """The kernel's backward as array operations."""
    xp = get_array_module()
    dscores = probs * (dout - (dout * probs).sum(axis=-1, keepdims=True)) * scale
    return dscores if mask is None else xp.where(mask, dscores, 0.0)


@KERNEL.with_twin(forward_twin)
def _forward(scores: Array, mask: Array | None, scale: float) -> Array:
    xp = get_array_module()
    scores = xp.ascontiguousarray(scores)
    probs = xp.empty_like(scores)
    bool_mask, (stride_b, stride_h, stride_t) = mask_strides(mask, scores.shape)
    batch, heads, queries, keys = scores.shape
    args = (
        scores,
        bool_mask,
        probs,
        *map(xp.int64, (keys, heads, queries, stride_b, stride_h, stride_t)),
        xp.float64(scale),
        xp.float64(MASKED_SCORE),
    )
    KERNEL.launch("attention_softmax_forward", scores.dtype, batch * heads * queries, args)
    return probs


@KERNEL.with_twin(backward_twin)
def _backward(dout: Array, probs: Array, mask: Array | None, scale: float) -> Array:
    xp = get_array_module()
    dout = xp.ascontiguousarray(dout)
    dscores = xp.empty_like(dout)
    bool_mask, (stride_b, stride_h, stride_t) = mask_strides(mask, dout.shape)
    batch, heads, queries, keys = dout.shape
    args = (
        dout,
        probs,
        bool_mask,
        dscores,
        *map(xp.int64, (keys, heads, queries, stride_b, stride_h, stride_t)),
        xp.float64(scale),
    )
    KERNEL.launch("attention_softmax_backward", dout.dtype, batch * heads * queries, args)
    return dscores
