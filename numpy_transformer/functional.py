"""The functional core: every Transformer layer as a forward/backward pair.

Read top to bottom like a textbook. Each ``*_forward(...)`` returns ``(out, cache)``; each
``*_backward(dout, cache)`` returns the gradients of the forward's differentiable arguments, in
the order the forward takes them. Shape letters: B batch, T query length, S key length,
D = d_model, H heads, K = D/H per-head width, F = d_ff, L = latent width, V vocabulary,
N = B*T rows. Nothing here owns state; the modules in :mod:`numpy_transformer.modules` hold
parameters and accumulate these gradients.

Every array operation goes through the backend's array module (``xp``), so the same code runs
on NumPy and CuPy.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Callable

from .backend import get_array_module, random_uint16, scatter_add

Array = Any
# A masked attention score is set to this large finite negative: exp() of it underflows to 0,
# yet a row whose every key is masked still gets a finite (uniform) softmax, never NaN.
MASKED_SCORE = -1e9


# ----------------------------------------------------------------------------------------------
# linear


def linear_forward(x: Array, weight: Array, bias: Array | None = None) -> tuple[Array, tuple]:
    """y = x W^T + b, with W stored (out_features, in_features) as in PyTorch.

    x: (..., in), weight: (out, in), bias: (out,) or None -> y: (..., out)
    The leading axes are folded into one, N rows: a single (N, in) @ (in, out) product instead of
    a loop of small ones (what matmul does with a 3-D x).
    """
    out = matmul_rows(x, weight.T)
    if bias is not None:
        out += bias
    return out, (x, weight, bias is not None)


def linear_backward(dout: Array, cache: tuple) -> tuple[Array, Array, Array | None]:
    """Gradients of y = x W^T + b.

    dx = dy W            (N, out) @ (out, in)  -> (..., in)
    dW = dy^T x          summed over every leading position: (out, N) @ (N, in) -> (out, in)
    db = sum_rows dy     -> (out,)   (None when the layer has no bias)
    """
    x, weight, has_bias = cache
    dout_2d = dout.reshape(-1, dout.shape[-1])
    dx = matmul_rows(dout, weight)
    dweight = dout_2d.T @ x.reshape(-1, x.shape[-1])
    dbias = column_sum(dout_2d) if has_bias else None
    return dx, dweight, dbias


# Below SMALL_PRODUCT_MAX entries of x a product runs through ``ndarray.dot``, whose per-call cost
# is a third of the matmul ufunc's (decoding a token); above it, matmul, 2-5% faster on large ones.
SMALL_PRODUCT_MAX = 4096
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
    """weight * (sum over the last axis), kept as (..., 1).

    It is x @ (weight * ones): a matrix-vector product sums every row in one BLAS call, where the
    ufunc's reduce along a short contiguous axis pays a fixed cost per row (4-8x slower for
    attention's 32- and 64-wide rows) and, on a few rows, 3x the call overhead of ``dot``.
    x: (..., n) -> (..., 1)
    """
    column = constant_column(get_array_module(), x.shape[-1], weight, x.dtype)
    # ndarray.dot of an N-D x runs one dot per row: the cheapest call for a few rows (decoding)
    return x.dot(column) if x.size <= FEW_ROWS * x.shape[-1] else matmul_rows(x, column)


def column_sum(x: Array) -> Array:
    """Sum over every leading axis: (..., n) -> (n,), as ones @ x over the rows when there are many."""
    rows = x.reshape(-1, x.shape[-1])
    ones = constant_vector(get_array_module(), rows.shape[0], 1.0, x.dtype)
    return ones.dot(rows) if x.size < SMALL_PRODUCT_MAX else ones @ rows


# ----------------------------------------------------------------------------------------------
# token embedding and positional encoding


def embedding_forward(ids: Array, table: Array) -> tuple[Array, tuple]:
    """y = E[ids] * sqrt(D): look up each token's row and scale it, as the seeds do.

    ids: (B, T) integers in [0, V), table: (V, D) -> y: (B, T, D)
    """
    scale = math.sqrt(table.shape[1])
    out = table[ids]
    out *= scale
    return out, (ids, table.shape, scale)


def embedding_backward(dout: Array, cache: tuple) -> Array:
    """dE[v] = sqrt(D) * sum of dy over every position whose token is v.

    A scatter-add of the (N, D) rows of dy into a (V, D) zero table: the one-hot matrix of the
    math is never built. dout: (B, T, D) -> dE: (V, D)
    """
    ids, table_shape, scale = cache
    xp = get_array_module()
    dtable = xp.zeros(table_shape, dtype=dout.dtype)
    scatter_add(dtable, ids.reshape(-1), dout.reshape(-1, table_shape[1]) * scale)
    return dtable


def sinusoidal_table(max_len: int, d_model: int, dtype: Any) -> Array:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same): shape (max_len, D)."""
    xp = get_array_module()
    position = xp.arange(max_len, dtype=xp.float64)[:, None]
    div_term = xp.exp(xp.arange(0, d_model, 2, dtype=xp.float64) * (-math.log(10000.0) / d_model))
    table = xp.zeros((max_len, d_model), dtype=xp.float64)
    table[:, 0::2] = xp.sin(position * div_term)
    table[:, 1::2] = xp.cos(position * div_term)[:, : d_model // 2]
    return table.astype(dtype)


def positional_encoding_forward(x: Array, table: Array, start: int = 0) -> tuple[Array, None]:
    """y = x + PE[start : start + T]. x: (B, T, D), table: (max_len, D) -> y: (B, T, D)."""
    return x + table[start : start + x.shape[1]], None


def positional_encoding_backward(dout: Array, cache: None) -> Array:
    """The table is a constant, so dx = dy: (B, T, D) -> (B, T, D)."""
    return dout


# ----------------------------------------------------------------------------------------------
# element-wise layers


DROPOUT_LEVELS = 65536  # masks are drawn as 16-bit integers: 1.7x faster than float draws


def dropout_forward(x: Array, p: float, rng: Any, training: bool) -> tuple[Array, Array | None]:
    """Inverted dropout: y = x * m / (1 - q), m ~ Bernoulli(1 - q), kept as a boolean mask.

    q is p rounded to a multiple of 2^-16 (0.1 -> 0.100006) because the mask compares random
    16-bit integers with q * 65536; scaling by 1 / (1 - q) keeps E[y] = x exactly.
    In evaluation, or with p = 0, y = x and the cache is None. x: any shape -> y: same shape.
    """
    if not training or p == 0.0:
        return x, None
    threshold = round(p * DROPOUT_LEVELS)
    keep = random_uint16(rng, x.shape) >= threshold
    out = x * keep
    out *= DROPOUT_LEVELS / (DROPOUT_LEVELS - threshold)
    return out, (keep, threshold)


def dropout_backward(dout: Array, cache: tuple | None) -> Array:
    """dx = dy * m / (1 - q), the same mask and scale as the forward (identity when no mask)."""
    if cache is None:
        return dout
    keep, threshold = cache
    dx = dout * keep
    dx *= DROPOUT_LEVELS / (DROPOUT_LEVELS - threshold)
    return dx


def relu_forward(x: Array) -> tuple[Array, Array]:
    """y = max(x, 0); the cache is the boolean mask x > 0. x: any shape -> y: same shape."""
    positive = x > 0
    return x * positive, positive


def relu_backward(dout: Array, cache: Array) -> Array:
    """dx = dy where x > 0, else 0."""
    return dout * cache


def softmax_forward(x: Array) -> tuple[Array, Array]:
    """y = exp(x - max x) / sum exp(x - max x) along the last axis; the cache is y itself."""
    xp = get_array_module()
    out = x - xp.maximum.reduce(x, axis=-1, keepdims=True)
    xp.exp(out, out=out)
    out /= row_sum(out)
    return out, out


def softmax_backward(dout: Array, cache: Array) -> Array:
    """dx = y * (dy - sum(dy * y)) along the last axis: the Jacobian diag(y) - y y^T applied to dy.

    The trick: that product is two element-wise passes and a row sum; the (n, n) Jacobian of each
    row is never built. dout, y: (..., n) -> dx: (..., n)
    """
    y = cache
    dx = dout - row_sum(dout * y)
    dx *= y
    return dx


# ----------------------------------------------------------------------------------------------
# layer normalisation


def row_mean(x: Array) -> Array:
    """Mean over the last axis, kept as (..., 1)."""
    return row_sum(x, 1.0 / x.shape[-1])


def layer_norm_forward(x: Array, gamma: Array, beta: Array, eps: float = 1e-5) -> tuple[Array, tuple]:
    """y = gamma * (x - mu) / sqrt(var + eps) + beta over the last axis (biased variance).

    x: (..., D), gamma, beta: (D,) -> y: (..., D)
    """
    xhat = x - row_mean(x)  # centred now, normalised in place below
    rstd = (row_mean(xhat * xhat) + eps) ** -0.5
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, (xhat, rstd, gamma)


def layer_norm_backward(dout: Array, cache: tuple) -> tuple[Array, Array, Array]:
    """Gradients of layer normalisation, with xhat = (x - mu) * rstd and g = dy * gamma:

    dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))    (..., D)
    dgamma = sum over rows of dy * xhat                      (D,)
    dbeta  = sum over rows of dy                             (D,)
    The two means are the gradient flowing back through mu and through var. Both are products
    with gamma, mean(g) = (dy @ gamma) / D and mean(g * xhat) = ((dy * xhat) @ gamma) / D, so they
    run as matrix-vector products, and dy * xhat is shared with dgamma.
    """
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


# ----------------------------------------------------------------------------------------------
# attention


def scaled_dot_product_attention_forward(
    q: Array, k: Array, v: Array, mask: Array | None, dropout_p: float = 0.0, rng: Any = None, training: bool = False,
    scale: float | None = None,
) -> tuple[Array, tuple]:
    """y = dropout(softmax(q k^T * scale, masked)) v, scale = 1 / sqrt(K) unless given.

    q: (B, H, T, K), k, v: (B, H, S, K), mask: broadcastable to (B, H, T, S), true where a query
    may attend -> y: (B, H, T, K). Masked scores become MASKED_SCORE (finite), not -inf.
    """
    xp = get_array_module()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.swapaxes(-1, -2)
    scores *= scale
    if mask is not None:
        scores = xp.where(mask, scores, MASKED_SCORE)
    probs, _ = softmax_forward(scores)
    dropped, dropout_cache = dropout_forward(probs, dropout_p, rng, training)
    return dropped @ v, (q, k, v, mask, probs, dropped, dropout_cache, scale)


def scaled_dot_product_attention_backward(dout: Array, cache: tuple) -> tuple[Array, Array, Array]:
    """Gradients of attention, P = softmax(scores), Pd = dropout(P):

    dv      = Pd^T dy                         (B, H, S, K)
    dPd     = dy v^T                          (B, H, T, S)
    dscores = softmax_backward(dropout_backward(dPd)), zero where masked
    dq      = dscores k / sqrt(K)             (B, H, T, K)
    dk      = dscores^T q / sqrt(K)           (B, H, S, K)
    Every head is one batched matrix product. The probabilities P are kept from the forward,
    so no exp is recomputed. A masked score was a constant, so its gradient is exactly zero.
    """
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dropout_backward(dout @ v.swapaxes(-1, -2), dropout_cache)
    dscores = softmax_backward(dprobs, probs)
    if mask is not None:
        dscores *= mask  # in place: 4x cheaper than where(), and dscores is finite
    dscores *= scale
    return dscores @ k, dscores.swapaxes(-1, -2) @ q, dv


def split_heads_forward(x: Array, n_heads: int) -> tuple[Array, int]:
    """(B, T, D) -> (B, H, T, K): view the last axis as H heads of width K = D / H."""
    batch, length, width = x.shape
    return x.reshape(batch, length, n_heads, width // n_heads).transpose(0, 2, 1, 3), n_heads


def split_heads_backward(dout: Array, cache: int) -> Array:
    """The inverse rearrangement: (B, H, T, K) -> (B, T, D)."""
    return merge_heads_forward(dout)[0]


def merge_heads_forward(x: Array) -> tuple[Array, int]:
    """(B, H, T, K) -> (B, T, D): concatenate the heads again."""
    batch, n_heads, length, head_width = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, length, n_heads * head_width), n_heads


def merge_heads_backward(dout: Array, cache: int) -> Array:
    """The inverse rearrangement: (B, T, D) -> (B, H, T, K)."""
    return split_heads_forward(dout, cache)[0]


def attention_heads_forward(
    q: Array, k: Array, v: Array, mask: Array | None, n_heads: int, dropout_p: float = 0.0, rng: Any = None,
    training: bool = False,
) -> tuple[Array, tuple]:
    """Split into heads, attend, merge: q (B, T, D), k, v (B, S, D) -> y (B, T, D)."""
    heads = [split_heads_forward(t, n_heads)[0] for t in (q, k, v)]
    out, attention_cache = scaled_dot_product_attention_forward(*heads, mask, dropout_p, rng, training)
    return merge_heads_forward(out)[0], (attention_cache, n_heads)


def attention_heads_backward(dout: Array, cache: tuple) -> tuple[Array, Array, Array]:
    """dq (B, T, D), dk, dv (B, S, D): split dy into heads, attention backward, merge each."""
    attention_cache, n_heads = cache
    grads = scaled_dot_product_attention_backward(split_heads_forward(dout, n_heads)[0], attention_cache)
    return tuple(merge_heads_forward(g)[0] for g in grads)


def in_projection_forward(x_q: Array, x_kv: Array, weight: Array, query_width: int) -> tuple[tuple[Array, Array], tuple]:
    """Queries from x_q with rows [:query_width] of weight, key/value features from x_kv with the rest.

    x_q: (B, T, D), x_kv: (B, S, D), weight: (query_width + W, D) -> q: (B, T, query_width),
    kv: (B, S, W). In self-attention (x_kv is x_q) both come from one matrix product.
    """
    if x_kv is x_q:
        both = matmul_rows(x_q, weight.T)
        return (both[..., :query_width], both[..., query_width:]), (x_q, x_kv, weight, query_width)
    q = matmul_rows(x_q, weight[:query_width].T)
    kv = matmul_rows(x_kv, weight[query_width:].T)
    return (q, kv), (x_q, x_kv, weight, query_width)


def in_projection_backward(dq: Array, dkv: Array, cache: tuple) -> tuple[Array, Array | None, Array]:
    """Gradients of the joint input projection.

    Self-attention: dY = [dq | dkv] (B, T, query_width + W); dx = dY W; dW = dY^T x; the whole
    input gradient is returned as dx_q and dx_kv is None.
    Cross-attention: dx_q = dq W_q, dx_kv = dkv W_kv, dW = [dq^T x_q ; dkv^T x_kv].
    """
    xp = get_array_module()
    x_q, x_kv, weight, query_width = cache
    if x_kv is x_q:
        dboth = xp.concatenate([dq, dkv], axis=-1)
        dx, dweight, _ = linear_backward(dboth, (x_q, weight, False))
        return dx, None, dweight
    dx_q, dweight_q, _ = linear_backward(dq, (x_q, weight[:query_width], False))
    dx_kv, dweight_kv, _ = linear_backward(dkv, (x_kv, weight[query_width:], False))
    return dx_q, dx_kv, xp.concatenate([dweight_q, dweight_kv], axis=0)


def multi_head_attention_forward(
    x_q: Array, x_kv: Array, w_qkv: Array, w_o: Array, mask: Array | None, n_heads: int, dropout_p: float = 0.0,
    rng: Any = None, training: bool = False,
) -> tuple[Array, tuple]:
    """MultiHead(x_q, x_kv) = Concat(head_1..head_H) W_o, head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i).

    x_q: (B, T, D), x_kv: (B, S, D) (the same object for self-attention), w_qkv: (3D, D) =
    [W_q; W_k; W_v], w_o: (D, D) -> y: (B, T, D)
    """
    width = w_o.shape[0]
    (q, kv), projection_cache = in_projection_forward(x_q, x_kv, w_qkv, width)
    heads, heads_cache = attention_heads_forward(q, kv[..., :width], kv[..., width:], mask, n_heads, dropout_p, rng, training)
    out, output_cache = linear_forward(heads, w_o)
    return out, (projection_cache, heads_cache, output_cache)


def multi_head_attention_backward(dout: Array, cache: tuple) -> tuple[Array, Array | None, Array, Array]:
    """Returns dx_q (B, T, D), dx_kv (B, S, D) or None in self-attention, dw_qkv (3D, D), dw_o (D, D).

    Runs the forward in reverse: output projection, heads, input projection, with
    dkv = [dk | dv] so one product serves keys and values.
    """
    xp = get_array_module()
    projection_cache, heads_cache, output_cache = cache
    dheads, dw_o, _ = linear_backward(dout, output_cache)
    dq, dk, dv = attention_heads_backward(dheads, heads_cache)
    dx_q, dx_kv, dw_qkv = in_projection_backward(dq, xp.concatenate([dk, dv], axis=-1), projection_cache)
    return dx_q, dx_kv, dw_qkv, dw_o


def multi_head_latent_attention_forward(
    x_q: Array, x_kv: Array, w_q_compress: Array, w_kv_decompress: Array, w_o: Array, mask: Array | None,
    n_heads: int, dropout_p: float = 0.0, rng: Any = None, training: bool = False,
) -> tuple[Array, tuple]:
    """Multi-Head Latent Attention: keys and values decompressed from one small latent.

    c = x_kv W_c^T (B, S, L), k = c W_kd^T, v = c W_vd^T (B, S, D), q = x_q W_q^T (B, T, D).
    w_q_compress: (D + L, D) = [W_q; W_c], w_kv_decompress: (2D, L) = [W_kd; W_vd],
    w_o: (D, D) -> y: (B, T, D). Only c needs to be kept per key position (L = D / 4).
    """
    width = w_o.shape[0]
    (q, latent), projection_cache = in_projection_forward(x_q, x_kv, w_q_compress, width)
    kv, decompress_cache = linear_forward(latent, w_kv_decompress)
    heads, heads_cache = attention_heads_forward(q, kv[..., :width], kv[..., width:], mask, n_heads, dropout_p, rng, training)
    out, output_cache = linear_forward(heads, w_o)
    return out, (projection_cache, decompress_cache, heads_cache, output_cache)


def multi_head_latent_attention_backward(dout: Array, cache: tuple) -> tuple[Array, Array | None, Array, Array, Array]:
    """Returns dx_q, dx_kv (None in self-attention), dw_q_compress (D + L, D), dw_kv_decompress (2D, L), dw_o.

    The latent feeds both keys and values, so its gradient is the sum of the two branches:
    dc = dk W_kd + dv W_vd = [dk | dv] [W_kd; W_vd]  (B, S, L), one product.
    """
    xp = get_array_module()
    projection_cache, decompress_cache, heads_cache, output_cache = cache
    dheads, dw_o, _ = linear_backward(dout, output_cache)
    dq, dk, dv = attention_heads_backward(dheads, heads_cache)
    dlatent, dw_kv_decompress, _ = linear_backward(xp.concatenate([dk, dv], axis=-1), decompress_cache)
    dx_q, dx_kv, dw_q_compress = in_projection_backward(dq, dlatent, projection_cache)
    return dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o


# ----------------------------------------------------------------------------------------------
# feed-forward and residual


def feed_forward_forward(
    x: Array, w1: Array, b1: Array, w2: Array, b2: Array, dropout_p: float = 0.0, rng: Any = None,
    training: bool = False,
) -> tuple[Array, tuple]:
    """FFN(x) = dropout(relu(x W1^T + b1)) W2^T + b2.

    x: (B, T, D), w1: (F, D), b1: (F,), w2: (D, F), b2: (D,) -> y: (B, T, D)
    """
    hidden, cache_1 = linear_forward(x, w1, b1)
    hidden, relu_cache = relu_forward(hidden)
    hidden, dropout_cache = dropout_forward(hidden, dropout_p, rng, training)
    out, cache_2 = linear_forward(hidden, w2, b2)
    return out, (cache_1, relu_cache, dropout_cache, cache_2)


def feed_forward_backward(dout: Array, cache: tuple) -> tuple[Array, Array, Array, Array, Array]:
    """Returns dx (B, T, D), dw1 (F, D), db1 (F,), dw2 (D, F), db2 (D,): the chain in reverse."""
    cache_1, relu_cache, dropout_cache, cache_2 = cache
    dhidden, dw2, db2 = linear_backward(dout, cache_2)
    dhidden = relu_backward(dropout_backward(dhidden, dropout_cache), relu_cache)
    dx, dw1, db1 = linear_backward(dhidden, cache_1)
    return dx, dw1, db1, dw2, db2


def residual_forward(
    x: Array, sublayer_forward: Callable[[Array], Array], gamma: Array, beta: Array, dropout_p: float = 0.0,
    rng: Any = None, training: bool = False, norm_first: bool = True, eps: float = 1e-5,
) -> tuple[Array, tuple]:
    """Pre-norm (the seeds): y = x + dropout(sublayer(norm(x))).
    Post-norm (the paper): y = norm(x + dropout(sublayer(x))).

    x: (B, T, D) -> y: (B, T, D). sublayer_forward maps (B, T, D) -> (B, T, D) and keeps its own
    cache; the matching backward is passed to residual_backward.
    """
    if norm_first:
        normed, norm_cache = layer_norm_forward(x, gamma, beta, eps)
        branch, dropout_cache = dropout_forward(sublayer_forward(normed), dropout_p, rng, training)
        return x + branch, (norm_cache, dropout_cache, True)
    branch, dropout_cache = dropout_forward(sublayer_forward(x), dropout_p, rng, training)
    out, norm_cache = layer_norm_forward(x + branch, gamma, beta, eps)
    return out, (norm_cache, dropout_cache, False)


def residual_backward(
    dout: Array, cache: tuple, sublayer_backward: Callable[[Array], Array]
) -> tuple[Array, Array, Array]:
    """Returns dx (B, T, D), dgamma, dbeta (D,). The skip path carries dy to dx unchanged:

    pre-norm:  dx = dy + norm_backward(sublayer_backward(dropout_backward(dy)))
    post-norm: ds = norm_backward(dy); dx = ds + sublayer_backward(dropout_backward(ds))
    """
    norm_cache, dropout_cache, norm_first = cache
    if norm_first:
        dnormed = sublayer_backward(dropout_backward(dout, dropout_cache))
        dx, dgamma, dbeta = layer_norm_backward(dnormed, norm_cache)
        dx += dout
        return dx, dgamma, dbeta
    dsum, dgamma, dbeta = layer_norm_backward(dout, norm_cache)
    dx = sublayer_backward(dropout_backward(dsum, dropout_cache))
    dx += dsum
    return dx, dgamma, dbeta


# ----------------------------------------------------------------------------------------------
# loss


def cross_entropy_forward(
    logits: Array, targets: Array, pad_id: int | None = None, label_smoothing: float = 0.0
) -> tuple[float, tuple]:
    """Mean label-smoothed cross-entropy over the non-pad tokens, as PyTorch's
    ``CrossEntropyLoss(ignore_index=pad_id, label_smoothing=eps)`` defines it:

    target q = (1 - eps) one_hot(y) + eps / V,  loss_n = -sum_v q_v log softmax(z_n)_v.
    logits: (..., V), targets: (...) integers -> a Python float.
    """
    xp = get_array_module()
    n_classes = logits.shape[-1]
    logits_2d = logits.reshape(-1, n_classes)
    targets_1d = targets.reshape(-1)
    valid = targets_1d != pad_id if pad_id is not None else xp.ones(targets_1d.shape, dtype=bool)
    n_valid = int(valid.sum())
    if n_valid == 0:
        raise ValueError("targets: every token equals pad_id, so there is nothing to average the loss over")
    # log softmax(z)_v = z_v - m - log sum exp(z - m): only the target's entry and the row mean of
    # log-probabilities are needed, so the (N, V) log-probability matrix is never formed
    shifted = logits_2d - logits_2d.max(axis=-1, keepdims=True)
    probs = xp.exp(shifted)
    total = row_sum(probs)
    log_norm = xp.log(total)[:, 0]
    probs /= total
    safe_targets = xp.where(valid, targets_1d, 0)
    nll = log_norm - xp.take_along_axis(shifted, safe_targets[:, None], axis=-1)[:, 0]
    smooth = log_norm - row_mean(shifted)[:, 0]
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    loss = float((per_token * valid).sum()) / n_valid
    return loss, (probs, safe_targets, valid, n_valid, label_smoothing, logits.shape)


def cross_entropy_backward(dloss: float, cache: tuple) -> Array:
    """dz = dloss * (softmax(z) - q) / n_valid on non-pad rows, 0 on pad rows.

    Softmax and cross-entropy are fused: the Jacobian of the softmax is never formed.
    -> dlogits with the shape of the logits (..., V).
    """
    xp = get_array_module()
    probs, safe_targets, valid, n_valid, label_smoothing, shape = cache
    dlogits = probs - label_smoothing / shape[-1]
    rows = xp.arange(dlogits.shape[0])
    dlogits[rows, safe_targets] -= 1.0 - label_smoothing
    dlogits *= (valid * (dloss / n_valid)).astype(dlogits.dtype)[:, None]
    return dlogits.reshape(shape)
