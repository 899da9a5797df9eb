"""The embedding table's gradient fused, without a sort: a zeroed table and one launch, the same at every run.

dE[v] = scale * (sum of dy over every position whose id is v). One block a position: the block finds
whether its position is the first of its id (no earlier position holds it); only such a block writes,
its threads one column each, summing dy down every position of the id in position order, in float64,
into dE[v]. No atomics and no sort, so the sums are the same at every run (as kernels.cuda's sorted
segments make them, in two launches where those take about twenty). Rows of ids never seen stay zero.
The work grows with positions x positions a column, which a GPU run has not yet weighed.
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from ...functional import EmbeddingCache
from . import FusedKernel

SOURCE = r"""
template <typename T>
__device__ void embedding_backward(const long long* ids, const T* dout, T* dtable, long long positions,
                                   long long width, double scale) {
    __shared__ int earlier;
    const long long i = blockIdx.x;
    const long long id = ids[i];
    if (threadIdx.x == 0) earlier = 0;
    __syncthreads();
    for (long long j = threadIdx.x; j < i; j += THREADS)
        if (ids[j] == id) earlier = 1;
    __syncthreads();
    if (earlier) return;  // a block of an earlier position of this id writes its row
    for (long long d = threadIdx.x; d < width; d += THREADS) {
        double sum = 0;
        for (long long j = i; j < positions; ++j)
            if (ids[j] == id) sum += (double)dout[j * width + d];
        dtable[id * width + d] = (T)(sum * scale);
    }
}

#define EMBEDDING_BACKWARD_ENTRIES(T)                                                                 \
    extern "C" __global__ void embedding_backward_##T(const long long* ids, const T* dout, T* dtable,  \
                                                      long long positions, long long width,           \
                                                      double scale) {                                 \
        embedding_backward<T>(ids, dout, dtable, positions, width, scale);                            \
    }

EMBEDDING_BACKWARD_ENTRIES(float)
EMBEDDING_BACKWARD_ENTRIES(double)
"""

KERNEL = FusedKernel("embedding_backward", SOURCE)


def backward(dout: Array, cache: EmbeddingCache) -> Array:
    """embedding_backward in a memset and one launch (the twin off a GPU): dout (B, T, D) -> dE (V, D)."""
    xp = get_array_module()
    dtable = xp.zeros(cache.table_shape, dtype=dout.dtype)
    _write_rows(dout, cache, dtable)
    return dtable


def write_rows_twin(dout: Array, cache: EmbeddingCache, dtable: Array) -> None:
    """The kernel as array operations: each position's first-of-its-id flag and its id's sum over the
    positions from it on (a product with the positions' same-id matrix, in float64), written at the
    first positions' ids into ``dtable`` (zeros); the other positions write into a spare row, so no
    shape depends on the data (a boolean mask would wait for the device)."""
    xp = get_array_module()
    ids, table_shape, scale = cache
    flat = ids.reshape(-1)
    same = flat[:, None] == flat[None, :]
    order = xp.arange(flat.size)
    first = ~(same & (order[None, :] < order[:, None])).any(axis=1)
    later = (same & (order[None, :] >= order[:, None])).astype(xp.float64)
    sums = later @ dout.reshape(-1, table_shape[1]).astype(xp.float64)
    with_spare = xp.zeros((table_shape[0] + 1, table_shape[1]), dtype=dout.dtype)
    with_spare[xp.where(first, flat, table_shape[0])] = (sums * scale).astype(dout.dtype)
    dtable[...] = with_spare[: table_shape[0]]


@KERNEL.with_twin(write_rows_twin)
def _write_rows(dout: Array, cache: EmbeddingCache, dtable: Array) -> None:
    xp = get_array_module()
    ids, table_shape, scale = cache
    flat = xp.ascontiguousarray(ids.reshape(-1)).astype(xp.int64, copy=False)
    rows = xp.ascontiguousarray(dout).reshape(-1, table_shape[1])
    args = (flat, rows, dtable, xp.int64(flat.size), xp.int64(table_shape[1]), xp.float64(scale))
    KERNEL.launch("embedding_backward", dout.dtype, flat.size, args)
