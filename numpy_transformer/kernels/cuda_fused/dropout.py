"""Dropout fused, its mask drawn from a counter-based generator and never stored.

Entry i keeps its value where the top 16 bits of word i % 4 of Philox4x32-10(counter = (i // 4 as two
32-bit words, the call's offset, 0), key = the seed) are at least round(p * 2^16): the same rule and the
same rounding of p as backend.dropout_mask, from another generator. The seed is four 16-bit draws of
the layer's generator, left on the device (no synchronisation), drawn once per generator (the Trainer
makes one a step): the first fused dropout under a generator draws it, and every call after it takes
the next offset, so that one draw serves the whole step and no two calls share a mask. The backward
recomputes the mask from the seed and the offset. One launch forward and one backward, where the array
operations take four and two, and the mask's bytes are never written.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from ...backend import DROPOUT_LEVELS, Array, get_array_module, random_uint16
from . import FusedKernel

PHILOX_M = (0xD2511F53, 0xCD9E8D57)  # Philox4x32's multipliers (Salmon et al., 2011)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)  # its Weyl sequence's increments of the key
ROUNDS = 10
WORD = 0xFFFFFFFF

# the mask's device functions, which dropout_add.py's source shares
PHILOX = r"""
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy as 1, 2, 3", 2011).
__device__ unsigned int philox_word(unsigned long long counter, unsigned int offset, unsigned int key0,
                                    unsigned int key1, int word) {
    unsigned int c0 = (unsigned int)counter, c1 = (unsigned int)(counter >> 32), c2 = offset, c3 = 0;
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            key0 += 0x9E3779B9u;
            key1 += 0xBB67AE85u;
        }
        const unsigned long long product0 = (unsigned long long)0xD2511F53u * c0;
        const unsigned long long product1 = (unsigned long long)0xCD9E8D57u * c2;
        const unsigned int next0 = (unsigned int)(product1 >> 32) ^ c1 ^ key0;
        const unsigned int next2 = (unsigned int)(product0 >> 32) ^ c3 ^ key1;
        c1 = (unsigned int)product1;
        c3 = (unsigned int)product0;
        c0 = next0;
        c2 = next2;
    }
    return word == 0 ? c0 : word == 1 ? c1 : word == 2 ? c2 : c3;
}

// Whether entry i is kept: the top 16 bits of its Philox word against the threshold round(p * 2^16).
__device__ bool kept(long long i, const unsigned short* seed, unsigned int offset, unsigned int threshold) {
    const unsigned int key0 = seed[0] | ((unsigned int)seed[1] << 16);
    const unsigned int key1 = seed[2] | ((unsigned int)seed[3] << 16);
    return (philox_word((unsigned long long)(i / 4), offset, key0, key1, (int)(i % 4)) >> 16) >= threshold;
}
"""

SOURCE = (
    PHILOX
    + r"""
// y = x / keep_prob where kept, else 0 (the forward; the backward, with dy for x, is the same map).
template <typename T>
__device__ void apply(const T* x, T* y, const unsigned short* seed, unsigned int offset, unsigned int threshold,
                      double keep_prob, long long size) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < size) y[i] = kept(i, seed, offset, threshold) ? x[i] / (T)keep_prob : (T)0;
}

#define DROPOUT_ENTRIES(T)                                                                            \
    extern "C" __global__ void dropout_apply_##T(const T* x, T* y, const unsigned short* seed,       \
                                                 unsigned int offset, unsigned int threshold,         \
                                                 double keep_prob, long long size) {                  \
        apply<T>(x, y, seed, offset, threshold, keep_prob, size);                                     \
    }

DROPOUT_ENTRIES(float)
DROPOUT_ENTRIES(double)
"""
)

KERNEL = FusedKernel("dropout", SOURCE)


class PhiloxDropoutCache(NamedTuple):
    seed: Array  # (4,) uint16 on the device: the key the mask is recomputed from
    offset: int  # the call's place under its seed: the counter's third word
    threshold: int  # round(p * 2^16)
    keep_prob: float


def forward(x: Array, p: float, rng: Any) -> tuple[Array, PhiloxDropoutCache]:
    """Inverted dropout of x (training, p > 0) in one launch (the twin off a GPU), after the seed's draw
    where this is the first call under ``rng``."""
    cache = new_cache(p, rng)
    return _apply(x, cache), cache


def new_cache(p: float, rng: Any) -> PhiloxDropoutCache:
    """The mask of a call with probability ``p`` under ``rng``: its seed, offset, threshold and 1 - p."""
    threshold = round(p * DROPOUT_LEVELS)
    return PhiloxDropoutCache(*SEEDS.next(rng), threshold, (DROPOUT_LEVELS - threshold) / DROPOUT_LEVELS)


class SeedStream:
    """One seed per generator and an offset per call: the generator the last seed was drawn from is
    held (so that its identity is never another's), with the seed and the calls made under it."""

    def __init__(self) -> None:
        self._rng: Any = None
        self._seed: Array | None = None
        self._calls = 0

    def next(self, rng: Any) -> tuple[Array, int]:
        """The seed of ``rng`` (drawn now at its first call: four 16-bit draws) and this call's offset."""
        if rng is not self._rng or self._seed is None:
            self._rng, self._seed, self._calls = rng, random_uint16(rng, (4,)), 0
        self._calls += 1
        return self._seed, self._calls - 1


SEEDS = SeedStream()  # the fused dropout's: a generator's seed is drawn once, at its first call


def backward(dout: Array, cache: PhiloxDropoutCache) -> Array:
    """dx = dy * m / keep_prob with the forward's mask m, recomputed from its seed."""
    return _apply(dout, cache)


def apply_twin(x: Array, cache: PhiloxDropoutCache) -> Array:
    """The kernel as array operations: x / keep_prob where the Philox mask keeps, else 0."""
    xp = get_array_module()
    return xp.where(
        keep_mask(cache.seed, x.shape, cache.threshold, cache.offset), x / cache.keep_prob, 0
    ).astype(x.dtype, copy=False)


def keep_mask(seed: Array, shape: tuple[int, ...], threshold: int, offset: int = 0) -> Array:
    """The kernel's mask: entry i kept where the top 16 bits of its Philox word (the counter's third
    word ``offset``) are >= threshold."""
    xp = get_array_module()
    size = math.prod(shape)
    u64 = xp.uint64  # every operand unsigned: NumPy 1's promotion of uint64 with a Python int is float64
    counters = xp.arange(-(-size // 4), dtype=u64)
    s = seed.astype(u64)
    zeros = xp.zeros_like(counters)
    words = xp.stack(
        philox4x32(
            counters & u64(WORD),
            counters >> u64(32),
            xp.full_like(counters, offset),
            zeros,
            s[0] | (s[1] << u64(16)),
            s[2] | (s[3] << u64(16)),
        )
    )
    return ((words.T.reshape(-1)[:size] >> u64(16)) >= threshold).reshape(shape)


def philox4x32(c0: Array, c1: Array, c2: Array, c3: Array, key0: Any, key1: Any) -> list[Array]:
    """Philox4x32-10 of the counters (c0, c1, c2, c3) under the key (key0, key1), each word a 32-bit
    value held in a uint64 array (so that a product of two is exact): the four words of the output."""
    u64 = get_array_module().uint64  # every operand unsigned, as in keep_mask
    word, half, multipliers, increments = (
        u64(WORD),
        u64(32),
        [u64(m) for m in PHILOX_M],
        [u64(w) for w in PHILOX_W],
    )
    c, key = [c0, c1, c2, c3], [key0, key1]
    for round_ in range(ROUNDS):
        if round_ > 0:
            key = [(key[0] + increments[0]) & word, (key[1] + increments[1]) & word]
        product0, product1 = c[0] * multipliers[0], c[2] * multipliers[1]
        c = [
            (product1 >> half) ^ c[1] ^ key[0],
            product1 & word,
            (product0 >> half) ^ c[3] ^ key[1],
            product0 & word,
        ]
    return c


@KERNEL.with_twin(apply_twin)
def _apply(x: Array, cache: PhiloxDropoutCache) -> Array:
    xp = get_array_module()
    source = xp.ascontiguousarray(x)
    out = xp.empty_like(source)
    KERNEL.launch(
        "dropout_apply", x.dtype, KERNEL.blocks(source.size), (source, out, *mask_args(cache, source.size))
    )
    return out


def mask_args(cache: PhiloxDropoutCache, size: int) -> tuple:
    """The kernel arguments that give the mask of ``size`` entries: seed, offset, threshold, 1 - p, size."""
    xp = get_array_module()
    return (
        cache.seed,
        xp.uint32(cache.offset),
        xp.uint32(cache.threshold),
        xp.float64(cache.keep_prob),
        xp.int64(size),
    )
