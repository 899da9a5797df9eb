"""Attention's dropout fused into its softmax: one launch forward, one backward, where they take two each.

The forward is attention_softmax.py's row kernel that, as it writes a row's probabilities, also writes
them dropped out through dropout.py's Philox mask (the same seed stream, offsets, threshold and entry
numbering: the same mask as the two kernels one after the other); the backward reads the gradient of
the dropped probabilities through that mask, recomputed, as it makes dS. The probabilities are kept
for the backward, the mask never.
"""

from __future__ import annotations

from typing import Any

from ...backend import Array, get_array_module
from ...functional import MASKED_SCORE
from . import FusedKernel
from .attention_softmax import TEMPLATES, backward_twin, check_mask, forward_twin, mask_strides
from .dropout import PHILOX, PhiloxDropoutCache, apply_twin, mask_args, new_cache

SOURCE = (
    PHILOX
    + TEMPLATES
    + r"""
#define ATTENTION_DROPOUT_ENTRIES(T)                                                                   \
    extern "C" __global__ void attention_dropout_forward_##T(                                           \
        const T* scores, const bool* mask, T* probs, T* dropped, const unsigned short* seed,            \
        unsigned int offset, unsigned int threshold, double keep_prob, long long size, long long keys,  \
        long long heads, long long queries, long long stride_b, long long stride_h, long long stride_t, \
        double scale, double masked) {                                                                  \
        forward<T>(scores, mask, probs, dropped, seed, offset, threshold, keep_prob, keys, heads,        \
                   queries, stride_b, stride_h, stride_t, scale, masked);                               \
    }                                                                                                   \
    extern "C" __global__ void attention_dropout_backward_##T(                                          \
        const T* dout, const T* probs, const bool* mask, const unsigned short* seed, unsigned int offset, \
        unsigned int threshold, double keep_prob, long long size, T* dscores, long long keys,           \
        long long heads, long long queries, long long stride_b, long long stride_h, long long stride_t, \
        double scale) {                                                                                 \
        backward<T>(dout, probs, mask, seed, offset, threshold, keep_prob, dscores, keys, heads, queries, \
                    stride_b, stride_h, stride_t, scale);                                               \
    }

ATTENTION_DROPOUT_ENTRIES(float)
ATTENTION_DROPOUT_ENTRIES(double)
"""
)

KERNEL = FusedKernel("attention_dropout", SOURCE, threads=128)


class AttentionDropoutCache(PhiloxDropoutCache):
    """The mask of a dropout fused into the softmax (dropout.py's), for the fused backward."""


def forward(
    scores: Array, mask: Array | None, scale: float, p: float, rng: Any
) -> tuple[Array, Array, AttentionDropoutCache]:
    """(probs, probs dropped out, the mask's cache): attention_softmax.forward and a fused dropout with
    probability ``p`` (> 0) under ``rng``, in one launch (the twin off a GPU)."""
    check_mask(mask, scores.shape)
    cache = AttentionDropoutCache(*new_cache(p, rng))
    probs, dropped = _forward(scores, mask, scale, cache)
    return probs, dropped, cache


def backward(
    dout: Array, probs: Array, mask: Array | None, scale: float, cache: AttentionDropoutCache
) -> Array:
    """dS from the gradient of the dropped probabilities: dropout's backward, then the softmax's, in one
    launch (the twin off a GPU)."""
    check_mask(mask, dout.shape)
    return _backward(dout, probs, mask, scale, cache)


def forward_dropped_twin(
    scores: Array, mask: Array | None, scale: float, cache: PhiloxDropoutCache
) -> tuple[Array, Array]:
    """The forward as array operations: the softmax's twin, then dropout's."""
    probs = forward_twin(scores, mask, scale)
    return probs, apply_twin(probs, cache)


def backward_dropped_twin(
    dout: Array, probs: Array, mask: Array | None, scale: float, cache: PhiloxDropoutCache
) -> Array:
    """The backward as array operations: dropout's twin, then the softmax's."""
    return backward_twin(apply_twin(dout, cache), probs, mask, scale)


@KERNEL.with_twin(forward_dropped_twin)
def _forward(
    scores: Array, mask: Array | None, scale: float, cache: PhiloxDropoutCache
) -> tuple[Array, Array]:
    xp = get_array_module()
    scores = xp.ascontiguousarray(scores)
    probs, dropped = xp.empty_like(scores), xp.empty_like(scores)
    bool_mask, strides = mask_strides(mask, scores.shape)
    batch, heads, queries, keys = scores.shape
    args = (
        scores,
        bool_mask,
        probs,
        dropped,
        *mask_args(cache, scores.size),
        *map(xp.int64, (keys, heads, queries, *strides)),
        xp.float64(scale),
        xp.float64(MASKED_SCORE),
    )
    KERNEL.launch("attention_dropout_forward", scores.dtype, batch * heads * queries, args)
    return probs, dropped


@KERNEL.with_twin(backward_dropped_twin)
def _backward(
    dout: Array, probs: Array, mask: Array | None, scale: float, cache: PhiloxDropoutCache
) -> Array:
    xp = get_array_module()
    dout = xp.ascontiguousarray(dout)
    dscores = xp.empty_like(dout)
    bool_mask, strides = mask_strides(mask, dout.shape)
    batch, heads, queries, keys = dout.shape
    args = (
        dout,
        probs,
        bool_mask,
        *mask_args(cache, dout.size),
        dscores,
        *map(xp.int64, (keys, heads, queries, *strides)),
        xp.float64(scale),
    )
    KERNEL.launch("attention_dropout_backward", dout.dtype, batch * heads * queries, args)
    return dscores
