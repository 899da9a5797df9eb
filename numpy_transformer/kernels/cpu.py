"""CPU kernels: the textbook's functions tuned for NumPy on a few cores.

Each public function here has the name, signature and contract of the function of
:mod:`numpy_transformer.functional` it stands in for, and tests/model/test_kernels.py proves it equal
to that one in float64 on shapes on both sides of every threshold below. What they do
differently, and why (the measurements are in benchmarks/README.md):

* Products fold every leading axis into one (N, in) @ (in, out) call, and small ones go through
  ``ndarray.dot``, whose per-call cost is a fraction of the matmul ufunc's (decoding a token).
* Row sums and means are matrix-vector products with a cached column of constants: one BLAS
  call sums every row, where a ufunc reduction along a short axis pays a fixed cost per row.
* Element-wise chains write in place (``out=``, ``*=``) instead of allocating temporaries.
* Layer norm's backward takes mean(g) and mean(g * xhat) as products with gamma and shares
  dy * xhat with dgamma.
* Attention projections are fused: self-attention makes Q, K and V (or MLA's query and latent)
  with one product of x by the stacked weights, and its backward with one product back.
* The embedding gradient is one ``add.at`` over flattened entries (NumPy's fast 1-D path).
* Adam's update is packed, sliced to stay in cache, and shared among threads (AdamUpdate).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache, partial
from typing import Any, NamedTuple

from ..backend import Array, dropout_mask, get_array_module
from ..functional import (
    MASKED_SCORE,
    AttentionCache,
    CrossEntropyCache,
    DropoutCache,
    EmbeddingCache,
    LayerNormCache,
    LinearCache,
    MultiHeadCache,
    merge_heads,
    split_heads,
    valid_targets,
)
from ..machine import cpu_cores
from .attention_blocks import block_kernels

# ----------------------------------------------------------------------------------------------
# products and row sums

# Below SMALL_PRODUCT_MAX entries of x a product runs through ``ndarray.dot``, whose per-call cost
# is a third of the matmul ufunc's (decoding a token); above it, matmul, faster on large ones.
SMALL_PRODUCT_MAX = 4096
# Up to FEW_ROWS_PRODUCT rows (a 2-D input: decoding's steps, never a training batch) a linear layer
# multiplies with the weight on the left
FEW_ROWS_PRODUCT = 64
# Such a product by a weight of more than CHUNKED_PRODUCT_MIN rows (an output projection over a large
# vocabulary) runs PRODUCT_CHUNK of its rows at a time, each chunk's output small enough to stay in cache
PRODUCT_CHUNK = 1024
CHUNKED_PRODUCT_MIN = 4 * PRODUCT_CHUNK
# Up to FEW_ROWS rows a row sum is one ``dot`` of the N-D array as it is (NumPy runs a dot per row).
FEW_ROWS = 16


def matmul_rows(x: Array, matrix: Array) -> Array:
    """(..., k) @ (k, n) -> (..., n) as one 2-D product over all rows."""
    if x.ndim == 2:
        return x.dot(matrix) if x.size < SMALL_PRODUCT_MAX else x @ matrix
    return matmul_rows(x.reshape(-1, x.shape[-1]), matrix).reshape(x.shape[:-1] + matrix.shape[-1:])


@lru_cache(maxsize=64)
def constant_vector(xp: Any, length: int, value: float, dtype: Any) -> Array:
    """A shared (length,) array filled with value, made once per backend, length, value and dtype.

    Read only by convention: the reductions below multiply by it and never write to it.
    """
    return xp.full(length, value, dtype=dtype)


@lru_cache(maxsize=64)
def constant_column(xp: Any, length: int, value: float, dtype: Any) -> Array:
    """constant_vector as a (length, 1) column, the right-hand side of a row sum."""
    return constant_vector(xp, length, value, dtype)[:, None]


def row_sum(x: Array, weight: float = 1.0) -> Array:
    """weight * (sum over the last axis) as x @ (weight * ones), kept as (..., 1)."""
    column = constant_column(get_array_module(), x.shape[-1], weight, x.dtype)
    # ndarray.dot of an N-D x runs one dot per row: the cheapest call for a few rows (decoding)
    return x.dot(column) if x.size <= FEW_ROWS * x.shape[-1] else matmul_rows(x, column)


def row_mean(x: Array) -> Array:
    """Mean over the last axis, kept as (..., 1)."""
    return row_sum(x, 1.0 / x.shape[-1])


def column_sum(x: Array) -> Array:
    """Sum over every leading axis: (..., n) -> (n,), as ones @ x over the rows."""
    rows = x.reshape(-1, x.shape[-1])
    ones = constant_vector(get_array_module(), rows.shape[0], 1.0, x.dtype)
    return ones.dot(rows) if x.size < SMALL_PRODUCT_MAX else ones @ rows


def few_rows_product(x: Array, weight: Array) -> Array:
    """x @ W^T for a decoding step's few rows x (N, in) and a weight W (out, in): OpenBLAS streams the
    weight faster as the left operand, (W @ x^T)^T (x^T read transposed: no copy), handed back as a
    transposed view, and a weight of many rows chunk by chunk. benchmarks/README.md has the figures."""
    if weight.shape[0] <= CHUNKED_PRODUCT_MIN:
        return (weight @ x.T).T
    xp = get_array_module()
    out = xp.empty((weight.shape[0], x.shape[0]), dtype=xp.result_type(x, weight))
    for start in range(0, weight.shape[0], PRODUCT_CHUNK):
        xp.matmul(weight[start : start + PRODUCT_CHUNK], x.T, out=out[start : start + PRODUCT_CHUNK])
    return out.T


# ----------------------------------------------------------------------------------------------
# the textbook's functions


def linear_forward(x: Array, weight: Array, bias: Array | None = None) -> tuple[Array, LinearCache]:
    if x.ndim == 2 and x.shape[0] <= FEW_ROWS_PRODUCT and x.size >= SMALL_PRODUCT_MAX:
        out = few_rows_product(x, weight)  # a decoding step
    else:
        out = matmul_rows(x, weight.T)
    if bias is not None:
        out += bias
    return out, LinearCache(x, weight, bias is not None)


def linear_backward(dout: Array, cache: LinearCache) -> tuple[Array, Array, Array | None]:
    x, weight, has_bias = cache
    dout_rows = dout.reshape(-1, dout.shape[-1])
    dx = matmul_rows(dout, weight)
    dweight = dout_rows.T @ x.reshape(-1, x.shape[-1])
    dbias = column_sum(dout_rows) if has_bias else None
    return dx, dweight, dbias


def embedding_forward(ids: Array, table: Array) -> tuple[Array, EmbeddingCache]:
    scale = math.sqrt(table.shape[1])
    out = table[ids]
    out *= scale
    return out, EmbeddingCache(ids, table.shape, scale)


def embedding_backward(dout: Array, cache: EmbeddingCache) -> Array:
    """One ``add.at`` over flattened entries, one index per entry: its fast 1-D path, several times
    faster than the row-by-row loop of add.at over (N, D) rows. The additions happen in the same
    order, so the sums are identical to the textbook's."""
    xp = get_array_module()
    ids, table_shape, scale = cache
    width = table_shape[1]
    dtable = xp.zeros(table_shape, dtype=dout.dtype)
    entry_indices = (ids.reshape(-1, 1) * width + xp.arange(width)).reshape(-1)
    rows = dout.reshape(-1) * scale
    xp.add.at(dtable.reshape(-1), entry_indices, rows)
    return dtable


def dropout_forward(x: Array, p: float, rng: Any, training: bool) -> tuple[Array, DropoutCache | None]:
    if not training or p == 0.0:
        return x, None
    keep, keep_prob = dropout_mask(rng, x.shape, p)
    out = x * keep
    out /= keep_prob
    return out, DropoutCache(keep, keep_prob)


def dropout_backward(dout: Array, cache: DropoutCache | None) -> Array:
    if cache is None:
        return dout
    dx = dout * cache.keep
    dx /= cache.keep_prob
    return dx


def softmax_forward(x: Array) -> tuple[Array, Array]:
    xp = get_array_module()
    out = x - xp.maximum.reduce(x, axis=-1, keepdims=True)
    xp.exp(out, out=out)
    out /= row_sum(out)
    return out, out


def softmax_backward(dout: Array, cache: Array) -> Array:
    y = cache
    dx = dout - row_sum(dout * y)
    dx *= y
    return dx


def layer_norm_forward(
    x: Array, gamma: Array, beta: Array, eps: float = 1e-5
) -> tuple[Array, LayerNormCache]:
    xhat = x - row_mean(x)  # centred now, normalised in place below
    rstd = (row_mean(xhat * xhat) + eps) ** -0.5
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layer_norm_backward(dout: Array, cache: LayerNormCache) -> tuple[Array, Array, Array]:
    """mean(g) = (dy @ gamma) / D and mean(g * xhat) = ((dy * xhat) @ gamma) / D: matrix-vector
    products, and dy * xhat is shared with dgamma."""
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    dout_xhat = dout * xhat
    dgamma = column_sum(dout_xhat)
    dbeta = column_sum(dout)
    column = gamma.reshape(width, 1) * (1.0 / width)  # (D, 1): a row's product with it is its mean of g
    dx = dout * gamma
    dx -= matmul_rows(dout, column)
    dx -= xhat * matmul_rows(dout_xhat, column)
    dx *= rstd
    return dx, dgamma, dbeta


def attention_forward(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | None,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
    scale: float | None = None,
) -> tuple[Array, AttentionCache]:
    xp = get_array_module()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.swapaxes(-1, -2)
    scores *= scale
    if mask is not None:
        scores = xp.where(mask, scores, MASKED_SCORE)
    probs, _ = softmax_forward(scores)
    dropped, dropout_cache = dropout_forward(probs, dropout_p, rng, training)
    return dropped @ v, AttentionCache(q, k, v, mask, probs, dropped, dropout_cache, scale)


def attention_backward(dout: Array, cache: AttentionCache) -> tuple[Array, Array, Array]:
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dropout_backward(dout @ v.swapaxes(-1, -2), dropout_cache)
    dscores = softmax_backward(dprobs, probs)
    if mask is not None:
        dscores *= mask  # in place: cheaper than where(), and dscores is finite
    dscores *= scale
    return dscores @ k, dscores.swapaxes(-1, -2) @ q, dv


# ----------------------------------------------------------------------------------------------
# attention blocks with fused projections


class FusedAttentionCache(NamedTuple):
    inputs: LinearCache  # x_q by the rows of w_in it multiplies (all of them in self-attention)
    kv_inputs: LinearCache | None  # x_kv by the rest of w_in; None in self-attention
    decompress: LinearCache | None  # MLA's latent by w_kv_decompress; None for MHA
    heads: MultiHeadCache
    output: LinearCache


def _fused_forward(
    x_q: Array,
    x_kv: Array | None,
    w_in: Array,
    w_decompress: Array | None,
    w_o: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float,
    rng: Any,
    training: bool,
    b_in: Array | None = None,
    b_o: Array | None = None,
) -> tuple[Array, FusedAttentionCache]:
    """The four attention blocks in one: w_in's first D rows make Q from x_q, its other rows make
    [K | V] (MHA) or the latent (MLA, then decompressed by w_decompress) from x_kv. With
    x_kv None (self-attention) a single product of x_q by all of w_in makes both. b_in and b_o,
    when given, are the biases of w_in's rows and of w_o."""
    width = w_o.shape[0]
    if x_kv is None:
        both, inputs_cache = linear_forward(x_q, w_in, b_in)
        q, kv_source, kv_inputs_cache = both[..., :width], both[..., width:], None
    else:
        q, inputs_cache = linear_forward(x_q, w_in[:width], None if b_in is None else b_in[:width])
        kv_source, kv_inputs_cache = linear_forward(
            x_kv, w_in[width:], None if b_in is None else b_in[width:]
        )
    kv, decompress_cache = (
        (kv_source, None) if w_decompress is None else linear_forward(kv_source, w_decompress)
    )
    heads, attention_cache = attention_forward(
        split_heads(q, n_heads),
        split_heads(kv[..., :width], n_heads),
        split_heads(kv[..., width:], n_heads),
        mask,
        dropout_p,
        rng,
        training,
    )
    out, output_cache = linear_forward(merge_heads(heads), w_o, b_o)
    heads_cache = MultiHeadCache(attention_cache, n_heads)
    return out, FusedAttentionCache(
        inputs_cache, kv_inputs_cache, decompress_cache, heads_cache, output_cache
    )


def _fused_backward(
    dout: Array, cache: FusedAttentionCache
) -> tuple[Array, Array | None, Array, Array | None, Array, Array | None, Array | None]:
    """dx_q, dx_kv (None in self-attention), dw_in, dw_decompress (None for MHA), dw_o, db_in and
    db_o (None without biases)."""
    xp = get_array_module()
    n_heads = cache.heads.n_heads
    dheads, dw_o, db_o = linear_backward(dout, cache.output)
    dq, dk, dv = attention_backward(split_heads(dheads, n_heads), cache.heads.attention)
    dq = merge_heads(dq)
    dkv = xp.concatenate([merge_heads(dk), merge_heads(dv)], axis=-1)  # one product serves keys and values
    dw_decompress = None
    if cache.decompress is not None:
        dkv, dw_decompress, _ = linear_backward(dkv, cache.decompress)
    if cache.kv_inputs is None:
        dx, dw_in, db_in = linear_backward(xp.concatenate([dq, dkv], axis=-1), cache.inputs)
        return dx, None, dw_in, dw_decompress, dw_o, db_in, db_o
    dx_q, dw_q, db_q = linear_backward(dq, cache.inputs)
    dx_kv, dw_kv, db_kv = linear_backward(dkv, cache.kv_inputs)
    db_in = None if db_q is None else xp.concatenate([db_q, db_kv])
    return dx_q, dx_kv, xp.concatenate([dw_q, dw_kv]), dw_decompress, dw_o, db_in, db_o


# the textbook's eight attention-block functions around the pair above (kernels.attention_blocks)
globals().update(block_kernels(_fused_forward, _fused_backward, __name__))


# ----------------------------------------------------------------------------------------------
# loss


def cross_entropy_forward(
    logits: Array, targets: Array, pad_id: int | None = None, label_smoothing: float = 0.0
) -> tuple[float, CrossEntropyCache]:
    """Only the target's log-probability and the row mean of log-probabilities are needed, so
    the (N, V) log-probability matrix is never formed; row sums and means are products."""
    xp = get_array_module()
    targets, valid, n_valid = valid_targets(targets, pad_id)
    logits_2d = logits.reshape(-1, logits.shape[-1])
    shifted = logits_2d - xp.maximum.reduce(logits_2d, axis=-1, keepdims=True)
    probs = xp.exp(shifted)
    total = row_sum(probs)
    log_norm = xp.log(total)[:, 0]
    probs /= total
    nll = log_norm - xp.take_along_axis(shifted, targets[:, None], axis=-1)[:, 0]
    smooth = log_norm - row_mean(shifted)[:, 0]
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    loss = float((per_token * valid).sum()) / n_valid
    return loss, CrossEntropyCache(probs, targets, valid, n_valid, label_smoothing, logits.shape)


def cross_entropy_backward(dloss: float, cache: CrossEntropyCache) -> Array:
    xp = get_array_module()
    probs, targets, valid, n_valid, label_smoothing, shape = cache
    dlogits = probs - label_smoothing / shape[-1]
    dlogits[xp.arange(dlogits.shape[0]), targets] -= 1.0 - label_smoothing
    dlogits *= (valid * (dloss / n_valid)).astype(dlogits.dtype)[:, None]
    return dlogits.reshape(shape)


# ----------------------------------------------------------------------------------------------
# Adam


SLICE = 1 << 16
"""Entries per slice of the update. One slice of p, g, m, v and the scratch (5 x 256 KiB in float32)
stays in cache through all twelve passes, so main memory sees each array once a step."""


PARALLEL_MIN = 1 << 19
"""Fewer entries than this are updated on the calling thread by default: below it, handing work to
the pool costs more than the second core gives back."""


def _deal_slices(sizes: list[int], slice_size: int, workers: int) -> list[list[tuple[int, int, int]]]:
    """Cut flat runs of these sizes into (run, start, stop) slices of at most slice_size entries and
    deal them to the workers in shares of about equal size."""
    slices = [
        (index, start, min(start + slice_size, size))
        for index, size in enumerate(sizes)
        for start in range(0, size, slice_size)
    ]
    total, done = max(sum(sizes), 1), 0
    shares: list[list[tuple[int, int, int]]] = [[] for _ in range(workers)]
    for index, start, stop in slices:
        shares[min(done * workers // total, workers - 1)].append((index, start, stop))
        done += stop - start
    return shares


class AdamUpdate:
    """Adam.step's update for NumPy, equal to the textbook loop in Adam.step:

    * parameters smaller than a slice are packed into one flat run, so the update costs twelve
      calls for all of them together instead of twelve each; their moments live packed;
    * every run is cut into slices that stay in cache through the twelve in-place passes;
    * the slices are shared among ``threads`` threads (NumPy's loops release the GIL).

    It owns the moments' storage (``m``, ``v``: one array per parameter, views where packed),
    which the optimiser keeps as its state.
    """

    def __init__(
        self, named_parameters: list[tuple[str, Any]], threads: int | None, flat: Any = None
    ) -> None:
        xp = get_array_module()
        for name, parameter in named_parameters:  # updated through flat views, which must not be copies
            if not (parameter.data.flags.c_contiguous and parameter.grad.flags.c_contiguous):
                raise ValueError(
                    f"parameter {name!r} must be C-contiguous (data and grad) to be optimised in place"
                )
        self.named_parameters = named_parameters
        sizes = [p.data.size for _, p in named_parameters]
        dtypes = {p.data.dtype for _, p in named_parameters}
        self._packed = [i for i, size in enumerate(sizes) if size < SLICE] if len(dtypes) == 1 else []
        packed = set(self._packed)
        self._unpacked = [i for i in range(len(sizes)) if i not in packed]
        packed_size = sum(sizes[i] for i in self._packed)
        self.m: list[Array] = [None] * len(sizes)
        self.v: list[Array] = [None] * len(sizes)
        for i in self._unpacked:
            self.m[i], self.v[i] = (xp.zeros_like(named_parameters[i][1].data) for _ in "mv")
        if self._packed:
            dtype = dtypes.pop()
            self._packed_data, self._packed_grad = xp.empty(packed_size, dtype), xp.empty(packed_size, dtype)
            self._packed_moments = xp.zeros(packed_size, dtype), xp.zeros(packed_size, dtype)
            start = 0
            for i in self._packed:
                stop, shape = start + sizes[i], named_parameters[i][1].shape
                self.m[i], self.v[i] = (
                    moments[start:stop].reshape(shape) for moments in self._packed_moments
                )
                start = stop
        run_sizes = [packed_size] * bool(self._packed) + [sizes[i] for i in self._unpacked]
        if threads is None:
            threads = cpu_cores() if sum(sizes) >= PARALLEL_MIN else 1
        self.threads = max(1, min(threads, 8))
        self._pool = ThreadPoolExecutor(self.threads) if self.threads > 1 else None
        self._buffers: list[Array] = [None] * self.threads
        self._shares = _deal_slices(run_sizes, SLICE, self.threads)

    def step(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        t: int,
        weight_decay: float,
        decays: Sequence[bool],
    ) -> None:
        """One update of step ``t``; ``decays[i]``: whether parameter i takes the decoupled decay."""
        xp = get_array_module()
        beta1, beta2 = betas
        root_correction2 = math.sqrt(1.0 - beta2**t)
        # lr * m_hat / (sqrt(v_hat) + eps) = k * m / (sqrt(v) + eps'), k = lr sqrt(1 - b2^t) / (1 - b1^t)
        scale = lr * root_correction2 / (1.0 - beta1**t)
        eps = eps * root_correction2
        keep = 1.0 - lr * weight_decay  # p <- p * keep where a parameter decays
        runs: list[tuple[float | None, tuple]] = []  # flat (data, grad, m, v) and their decay factor
        packed = [self.named_parameters[i][1] for i in self._packed]
        if packed:
            for i in self._packed:  # decay differs per parameter, so it goes before packing
                if weight_decay and decays[i]:
                    self.named_parameters[i][1].data *= keep
            xp.concatenate([p.data.reshape(-1) for p in packed], out=self._packed_data)
            xp.concatenate([p.grad.reshape(-1) for p in packed], out=self._packed_grad)
            runs.append((None, (self._packed_data, self._packed_grad, *self._packed_moments)))
        for i in self._unpacked:
            parameter = self.named_parameters[i][1]
            arrays = (parameter.data, parameter.grad, self.m[i], self.v[i])
            runs.append((keep if weight_decay and decays[i] else None, tuple(a.reshape(-1) for a in arrays)))
        update = partial(self._update, betas=betas, runs=runs, scale=scale, eps=eps)
        if self._pool is None:
            update(self._shares[0], 0)
        else:
            list(self._pool.map(update, self._shares, range(self.threads)))
        start = 0
        for parameter in packed:
            stop = start + parameter.data.size
            parameter.data[...] = self._packed_data[start:stop].reshape(parameter.shape)
            start = stop

    def _update(
        self,
        share: list[tuple[int, int, int]],
        thread: int,
        *,
        betas: tuple[float, float],
        runs: list[tuple],
        scale: float,
        eps: float,
    ) -> None:
        xp = get_array_module()
        beta1, beta2 = betas
        for index, start, stop in share:
            keep, arrays = runs[index]
            data, grad, m, v = (a[start:stop] for a in arrays)
            if keep is not None:
                data *= keep
            scratch = self._scratch(data, thread)
            # every operation writes in place: no temporaries of the slice's size are created
            m *= beta1
            xp.multiply(grad, 1.0 - beta1, out=scratch)
            m += scratch
            v *= beta2
            xp.multiply(grad, grad, out=scratch)
            scratch *= 1.0 - beta2
            v += scratch
            xp.sqrt(v, out=scratch)
            scratch += eps
            xp.divide(m, scratch, out=scratch)
            scratch *= scale
            data -= scratch

    def _scratch(self, like: Array, thread: int) -> Array:
        """The first like.size entries of this thread's reused flat buffer."""
        size, buffer = like.size, self._buffers[thread]
        if buffer is None or buffer.size < size or buffer.dtype != like.dtype:
            buffer = self._buffers[thread] = get_array_module().empty(size, dtype=like.dtype)
        return buffer[:size]
