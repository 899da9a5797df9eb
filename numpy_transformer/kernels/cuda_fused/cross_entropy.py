"""The label-smoothed cross-entropy fused, forward and backward together, its loss kept on the device.

Launch one, one block per row of the (N, V) logits: the row's maximum, its sum of exponentials and of
shifted logits, then the gradient dloss * (softmax - q) / count on a labelled row (0 elsewhere) and the
row's weighted loss; each block counts the labelled rows itself (N flags), so no launch precedes it.
Launch two, one block: the rows' losses summed in order and divided by the count, a 0-d array (NaN
where no row is labelled). Two launches where the array operations take about twenty, and nothing is
read on the host.
"""

from __future__ import annotations

from ...backend import Array, get_array_module
from . import FusedKernel, on_a_gpu

SOURCE = r"""
template <typename T>
__device__ T labelled_count(const bool* labelled, long long rows, T* shared) {
    T part = 0;
    for (long long i = threadIdx.x; i < rows; i += THREADS) part += labelled[i] ? (T)1 : (T)0;
    return block_reduce(part, shared, false);
}

template <typename T>
__device__ void rows_kernel(const T* logits, const long long* targets, const bool* labelled, T* dlogits,
                            T* row_loss, long long rows, long long classes, double smoothing, double dloss) {
    __shared__ T shared[THREADS];
    const long long row = blockIdx.x;
    const T count = labelled_count(labelled, rows, shared);
    const T* z = logits + row * classes;
    T largest = (T)__longlong_as_double(0xfff0000000000000ULL);  // -infinity
    for (long long j = threadIdx.x; j < classes; j += THREADS) largest = z[j] > largest ? z[j] : largest;
    largest = block_reduce(largest, shared, true);
    T exps = 0, shifted = 0;
    for (long long j = threadIdx.x; j < classes; j += THREADS) {
        exps += exp(z[j] - largest);
        shifted += z[j] - largest;
    }
    const T total = block_reduce(exps, shared, false);
    const T log_total = log(total);
    const T shifted_sum = block_reduce(shifted, shared, false);
    const bool is_labelled = labelled[row];
    const long long target = is_labelled ? targets[row] : 0;
    const T scale = is_labelled ? (T)dloss / count : (T)0;
    const T spread = (T)smoothing / (T)classes;
    for (long long j = threadIdx.x; j < classes; j += THREADS) {
        const T q = spread + (j == target ? (T)(1.0 - smoothing) : (T)0);
        dlogits[row * classes + j] = (exp(z[j] - largest) / total - q) * scale;
    }
    if (threadIdx.x == 0) {
        const T nll = -(z[target] - largest - log_total);
        const T smooth = -(shifted_sum - (T)classes * log_total) / (T)classes;
        row_loss[row] = is_labelled ? (T)(1.0 - smoothing) * nll + (T)smoothing * smooth : (T)0;
    }
}

template <typename T>
__device__ void mean_kernel(const T* row_loss, const bool* labelled, T* loss, long long rows) {
    __shared__ T shared[THREADS];
    const T count = labelled_count(labelled, rows, shared);
    T part = 0;
    for (long long i = threadIdx.x; i < rows; i += THREADS) part += row_loss[i];
    const T total = block_reduce(part, shared, false);
    if (threadIdx.x == 0) loss[0] = total / count;
}

#define CROSS_ENTROPY_ENTRIES(T)                                                                         \
    extern "C" __global__ void cross_entropy_rows_##T(const T* logits, const long long* targets,          \
                                                      const bool* labelled, T* dlogits, T* row_loss,      \
                                                      long long rows, long long classes, double smoothing, \
                                                      double dloss) {                                      \
        rows_kernel<T>(logits, targets, labelled, dlogits, row_loss, rows, classes, smoothing, dloss);     \
    }                                                                                                      \
    extern "C" __global__ void cross_entropy_mean_##T(const T* row_loss, const bool* labelled, T* loss,   \
                                                      long long rows) {                                    \
        mean_kernel<T>(row_loss, labelled, loss, rows);                                                    \
    }

CROSS_ENTROPY_ENTRIES(float)
CROSS_ENTROPY_ENTRIES(double)
"""

KERNEL = FusedKernel("cross_entropy", SOURCE)


def forward_backward(
    logits: Array, targets: Array, labelled: Array, label_smoothing: float, dloss: float
) -> tuple[Array, Array]:
    """kernels.cuda.masked_cross_entropy in two launches (its twin off a GPU): (loss, dlogits)."""
    xp = get_array_module()
    if not on_a_gpu():
        with KERNEL.twin():
            dlogits, row_loss = rows_twin(logits, targets, labelled, label_smoothing, dloss)
        with KERNEL.twin():
            return mean_twin(row_loss, labelled), dlogits
    z = xp.ascontiguousarray(logits)
    rows, classes = z.shape
    ids = xp.ascontiguousarray(targets.astype(xp.int64, copy=False))
    mask = xp.ascontiguousarray(labelled)
    dlogits, row_loss = xp.empty_like(z), xp.empty(rows, dtype=z.dtype)
    loss = xp.empty((), dtype=z.dtype)
    args = (z, ids, mask, dlogits, row_loss, xp.int64(rows), xp.int64(classes))
    scalars = (xp.float64(label_smoothing), xp.float64(dloss))
    KERNEL.launch("cross_entropy_rows", z.dtype, rows, args + scalars)
    KERNEL.launch("cross_entropy_mean", z.dtype, 1, (row_loss, mask, loss, xp.int64(rows)))
    return loss, dlogits


def rows_twin(
    logits: Array, targets: Array, labelled: Array, label_smoothing: float, dloss: float
) -> tuple[Array, Array]:
    """The first launch as array operations: (dlogits, each row's weighted loss)."""
    xp = get_array_module()
    classes = logits.shape[-1]
    rows = xp.arange(logits.shape[0])
    count = labelled.sum(dtype=logits.dtype)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = xp.exp(shifted)
    total = exp.sum(axis=-1)
    log_total = xp.log(total)
    target = xp.where(labelled, targets, 0)
    nll = -(shifted[rows, target] - log_total)
    smooth = -(shifted.sum(axis=-1) - classes * log_total) / classes
    row_loss = xp.where(labelled, (1.0 - label_smoothing) * nll + label_smoothing * smooth, 0)
    dlogits = exp / total[:, None] - label_smoothing / classes
    dlogits[rows, target] -= 1.0 - label_smoothing
    dlogits *= (labelled.astype(logits.dtype) * (dloss / count))[:, None]
    return dlogits, row_loss


def mean_twin(row_loss: Array, labelled: Array) -> Array:
    """The second launch as array operations: the rows' losses summed over the count of labelled rows."""
    return row_loss.sum() / labelled.sum(dtype=row_loss.dtype)
