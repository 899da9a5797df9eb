"""Adam and AdamW over the model's flat buffers fused: one launch for the whole model's update.

One thread per entry of the flat buffers: AdamW's decoupled decay where the parameter decays, the two
moments, and the bias-corrected step, in the order kernels.cuda.AdamUpdate's array operations take
(fifteen to eighteen launches: three for AdamW's decay, three and four for the moments, five for the
step, three writes). The update is guarded by a flag on the device (``finite``, as PyTorch's fused Adam takes
``found_inf``): where the step's loss or gradient norm is not finite, every thread returns before
it writes, so the weights and the moments stay as they were, and no host read comes before the
update (the Trainer reads the two numbers once, at the step's end).
"""

from __future__ import annotations

import math

from ...backend import Array, get_array_module
from . import FusedKernel

SOURCE = r"""
template <typename T>
__device__ void update(T* data, const T* grad, T* m, T* v, const T* decay, int decays, const bool* finite,
                       long long size, double decay_rate, double beta1, double beta2, double step_size,
                       double eps) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= size || !*finite) return;  // a refused step (loss or gradient norm not finite) writes nothing
    const T g = grad[i];
    T value = data[i];
    if (decays) value *= (T)1 - (T)decay_rate * decay[i];
    const T first = m[i] * (T)beta1 + (T)(1.0 - beta1) * g;
    const T second = v[i] * (T)beta2 + (T)(1.0 - beta2) * (g * g);
    m[i] = first;
    v[i] = second;
    data[i] = value - (T)step_size * first / (sqrt(second) + (T)eps);
}

#define ADAM_ENTRIES(T)                                                                               \
    extern "C" __global__ void adam_update_##T(T* data, const T* grad, T* m, T* v, const T* decay,   \
                                               int decays, const bool* finite, long long size,        \
                                               double decay_rate, double beta1, double beta2,         \
                                               double step_size, double eps) {                        \
        update<T>(data, grad, m, v, decay, decays, finite, size, decay_rate, beta1, beta2, step_size, \
                  eps);                                                                               \
    }

ADAM_ENTRIES(float)
ADAM_ENTRIES(double)
"""

KERNEL = FusedKernel("adam", SOURCE)


def update_twin(
    data: Array,
    grad: Array,
    m: Array,
    v: Array,
    decay: Array | None,
    finite: Array,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    t: int,
    weight_decay: float,
) -> None:
    """The kernel as array operations, in place (what the CUDA kernel set runs with the kernel off): the
    new values made apart and written only where ``finite`` (a 0-d boolean array) holds, so a refused
    step leaves ``data``, ``m`` and ``v`` as they were, NaN or infinite gradients included (a product
    with a false flag would not: NaN times 0 is NaN)."""
    xp = get_array_module()
    beta1, beta2 = betas
    value = data if decay is None else data * (1.0 - (lr * weight_decay) * decay)
    first = m * beta1 + (1.0 - beta1) * grad
    second = v * beta2 + (1.0 - beta2) * (grad * grad)
    step_size, eps_hat = _corrected(lr, betas, eps, t)
    value = value - step_size * first / (xp.sqrt(second) + eps_hat)
    for target, new in ((m, first), (v, second), (data, value)):
        xp.copyto(target, new, where=finite)


def _corrected(lr: float, betas: tuple[float, float], eps: float, t: int) -> tuple[float, float]:
    """lr * m_hat / (sqrt(v_hat) + eps) = k * m / (sqrt(v) + eps'): (k, eps'), with
    k = lr sqrt(1 - b2^t) / (1 - b1^t) and eps' = eps sqrt(1 - b2^t)."""
    root_correction2 = math.sqrt(1.0 - betas[1] ** t)
    return lr * root_correction2 / (1.0 - betas[0] ** t), eps * root_correction2


@KERNEL.with_twin(update_twin)
def update(
    data: Array,
    grad: Array,
    m: Array,
    v: Array,
    decay: Array | None,
    finite: Array,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    t: int,
    weight_decay: float,
) -> None:
    """Step ``t`` of Adam (AdamW's decay where ``decay`` is 1) in place on the flat ``data``, ``m`` and
    ``v``, in one launch (the twin, counted as that launch, off a GPU); where ``finite`` (a 0-d boolean
    array on the device) is false, nothing is written."""
    xp = get_array_module()
    step_size, eps_hat = _corrected(lr, betas, eps, t)
    size = data.size
    args = (
        data,
        grad,
        m,
        v,
        data if decay is None else decay,  # not read without a decay
        xp.int32(decay is not None),
        finite,
        xp.int64(size),
        xp.float64(lr * weight_decay),
        xp.float64(betas[0]),
        xp.float64(betas[1]),
        xp.float64(step_size),
        xp.float64(eps_hat),
    )
    KERNEL.launch("adam_update", data.dtype, KERNEL.blocks(size), args)
