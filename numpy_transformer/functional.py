"""The textbook: every Transformer layer as a forward/backward pair, written as its formula reads.

Read top to bottom. Each ``*_forward(...)`` returns ``(out, cache)``; each
``*_backward(dout, cache)`` returns the gradients of the forward's differentiable arguments, in
the order the forward takes them. Nothing here owns state: the modules in
:mod:`numpy_transformer.layers` hold the parameters and accumulate these gradients.

Shape letters: B batch, T query length, S key length, D = d_model, H heads, K = D / H per-head
width, F = d_ff, L = D / 4 latent width, V vocabulary, N = B * T rows.

The code is plain array operations (``x @ W.T``, ``.sum(axis=-1, keepdims=True)``, ``.mean``,
``.max``) through the backend's array module ``xp``, so it runs on NumPy and CuPy alike. The tuned
versions that the model runs by default live in :mod:`numpy_transformer.kernels`, each tested
equal to its pair here; ``numpy_transformer.set_kernels("reference")`` runs the model on this file.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from .backend import Array, dropout_mask, get_array_module

# A masked attention score is set to this large finite negative: exp() of it underflows to 0,
# yet a row whose every key is masked still gets a finite (uniform) softmax, never NaN.
MASKED_SCORE = -1e9


# ----------------------------------------------------------------------------------------------
# linear


class LinearCache(NamedTuple):
    x: Array
    weight: Array
    has_bias: bool


def linear_forward(x: Array, weight: Array, bias: Array | None = None) -> tuple[Array, LinearCache]:
    """y = x W^T + b, with W stored (out_features, in_features) as in PyTorch.

    x: (..., in), weight: (out, in), bias: (out,) or None -> y: (..., out)
    """
    out = x @ weight.T
    if bias is not None:
        out = out + bias
    return out, LinearCache(x, weight, bias is not None)


def linear_backward(dout: Array, cache: LinearCache) -> tuple[Array, Array, Array | None]:
    """Gradients of y = x W^T + b, with dy and x viewed as N = (all leading positions) rows:

    dx = dy W           (..., out) @ (out, in)  -> (..., in)
    dW = dy^T x         (out, N) @ (N, in)      -> (out, in), summed over every position
    db = sum_rows dy    -> (out,)               (None when the layer has no bias)
    """
    x, weight, has_bias = cache
    dout_rows = dout.reshape(-1, dout.shape[-1])
    x_rows = x.reshape(-1, x.shape[-1])
    dx = dout @ weight
    dweight = dout_rows.T @ x_rows
    dbias = dout_rows.sum(axis=0) if has_bias else None
    return dx, dweight, dbias


# ----------------------------------------------------------------------------------------------
# token embedding and positional encoding


class EmbeddingCache(NamedTuple):
    ids: Array
    table_shape: tuple[int, int]
    scale: float


def embedding_forward(ids: Array, table: Array) -> tuple[Array, EmbeddingCache]:
    """y = E[ids] * sqrt(D): look up each token's row and scale it, as the from-scratch design does.

    ids: (B, T) integers in [0, V), table: (V, D) -> y: (B, T, D)
    """
    scale = math.sqrt(table.shape[1])
    return table[ids] * scale, EmbeddingCache(ids, table.shape, scale)


def embedding_backward(dout: Array, cache: EmbeddingCache) -> Array:
    """dE[v] = sqrt(D) * (sum of dy over every position whose token is v).

    The lookup is a product with a one-hot matrix; its gradient adds each row of dy into the row
    of E it came from (``add.at`` sums repeated ids). dout: (B, T, D) -> dE: (V, D)
    """
    xp = get_array_module()
    ids, table_shape, scale = cache
    dtable = xp.zeros(table_shape, dtype=dout.dtype)
    xp.add.at(dtable, ids.reshape(-1), dout.reshape(-1, table_shape[1]) * scale)
    return dtable


POSITION_LAYOUTS = ("interleaved", "split")


def sinusoidal_table(max_len: int, d_model: int, dtype: Any, layout: str = "interleaved") -> Array:
    """The fixed sinusoids, shape (max_len, D), with w_i = 1 / 10000^(2i/D), i = 0 .. D/2 - 1:

    layout "interleaved" (the paper): PE[pos, 2i] = sin(pos w_i), PE[pos, 2i+1] = cos(pos w_i).
    layout "split" (Marian, OPUS-MT): PE[pos, i] = sin(pos w_i) for i < ceil(D/2), the cosines
    after them, PE[pos, ceil(D/2) + i] = cos(pos w_i): the same numbers, the columns reordered.
    """
    if layout not in POSITION_LAYOUTS:
        raise ValueError(f"layout must be one of {POSITION_LAYOUTS}, got {layout!r}")
    xp = get_array_module()
    position = xp.arange(max_len, dtype=xp.float64)[:, None]
    div_term = xp.exp(xp.arange(0, d_model, 2, dtype=xp.float64) * (-math.log(10000.0) / d_model))
    table = xp.zeros((max_len, d_model), dtype=xp.float64)
    sines, cosines = xp.sin(position * div_term), xp.cos(position * div_term)[:, : d_model // 2]
    if layout == "interleaved":
        table[:, 0::2] = sines
        table[:, 1::2] = cosines
    else:
        half = sines.shape[1]
        table[:, :half] = sines
        table[:, half:] = cosines
    return table.astype(dtype)


def positional_encoding_forward(x: Array, table: Array, start: int = 0) -> tuple[Array, None]:
    """y = x + PE[start : start + T]. x: (B, T, D), table: (max_len, D) -> y: (B, T, D)."""
    return x + table[start : start + x.shape[1]], None


def positional_encoding_backward(dout: Array, cache: None) -> Array:
    """The table is a constant, so dx = dy: (B, T, D) -> (B, T, D)."""
    return dout


# ----------------------------------------------------------------------------------------------
# element-wise layers


class DropoutCache(NamedTuple):
    keep: Array  # boolean mask m
    keep_prob: float  # 1 - p


def dropout_forward(x: Array, p: float, rng: Any, training: bool) -> tuple[Array, DropoutCache | None]:
    """Inverted dropout: y = x * m / (1 - p), with m ~ Bernoulli(1 - p) drawn per entry.

    Dividing by 1 - p keeps E[y] = x, so evaluation needs no rescaling: there, or with p = 0,
    y = x and the cache is None. The mask comes from ``backend.dropout_mask``, which every
    implementation shares (it rounds p to a multiple of 2^-16 and returns the exact 1 - p it used).
    x: any shape -> y: same shape.
    """
    if not training or p == 0.0:
        return x, None
    keep, keep_prob = dropout_mask(rng, x.shape, p)
    return x * keep / keep_prob, DropoutCache(keep, keep_prob)


def dropout_backward(dout: Array, cache: DropoutCache | None) -> Array:
    """dx = dy * m / (1 - p): the same mask and scale as the forward (identity when no mask)."""
    if cache is None:
        return dout
    return dout * cache.keep / cache.keep_prob


def relu_forward(x: Array) -> tuple[Array, Array]:
    """y = max(x, 0); the cache is the boolean mask x > 0. x: any shape -> y: same shape."""
    positive = x > 0
    return x * positive, positive


def relu_backward(dout: Array, cache: Array) -> Array:
    """dx = dy where x > 0, else 0."""
    return dout * cache


class SiLUCache(NamedTuple):
    x: Array
    sigmoid: Array  # s = 1 / (1 + exp(-x))


def silu_forward(x: Array) -> tuple[Array, SiLUCache]:
    """SiLU, also called swish (Marian's "swish"): y = x * s, s = sigmoid(x) = 1 / (1 + exp(-x)).

    x: any shape -> y: same shape.
    """
    xp = get_array_module()
    sigmoid = 1.0 / (1.0 + xp.exp(-x))
    return x * sigmoid, SiLUCache(x, sigmoid)


def silu_backward(dout: Array, cache: SiLUCache) -> Array:
    """dx = dy * (s + x s (1 - s)): the product rule, with ds/dx = s (1 - s)."""
    x, sigmoid = cache
    return dout * (sigmoid + x * sigmoid * (1.0 - sigmoid))


GELU_TANH_C = math.sqrt(2.0 / math.pi)


class GELUCache(NamedTuple):
    x: Array
    tanh: Array  # t = tanh(u), u = c (x + 0.044715 x^3)


def gelu_tanh_forward(x: Array) -> tuple[Array, GELUCache]:
    """GELU in its tanh form (PyTorch's ``GELU(approximate="tanh")``, Hugging Face's "gelu_new"):

    y = x/2 * (1 + tanh(u)),  u = c (x + 0.044715 x^3),  c = sqrt(2 / pi).
    x: any shape -> y: same shape.
    """
    xp = get_array_module()
    tanh = xp.tanh(GELU_TANH_C * (x + 0.044715 * x**3))
    return 0.5 * x * (1.0 + tanh), GELUCache(x, tanh)


def gelu_tanh_backward(dout: Array, cache: GELUCache) -> Array:
    """dx = dy * (1/2 (1 + t) + x/2 (1 - t^2) c (1 + 3 * 0.044715 x^2)), t = tanh(u)."""
    x, tanh = cache
    du = GELU_TANH_C * (1.0 + 3 * 0.044715 * x**2)
    return dout * (0.5 * (1.0 + tanh) + 0.5 * x * (1.0 - tanh**2) * du)


ACTIVATIONS = ("relu", "silu", "gelu_tanh")  # the feed-forward block's choices: f"{name}_forward"/_backward


def softmax_forward(x: Array) -> tuple[Array, Array]:
    """y = exp(x - max x) / sum exp(x - max x) along the last axis; the cache is y itself.

    Subtracting the row's maximum changes nothing mathematically and keeps exp() from overflowing.
    x: (..., n) -> y: (..., n)
    """
    xp = get_array_module()
    exps = xp.exp(x - x.max(axis=-1, keepdims=True))
    out = exps / exps.sum(axis=-1, keepdims=True)
    return out, out


def softmax_backward(dout: Array, cache: Array) -> Array:
    """dx = y * (dy - sum(dy * y)) along the last axis: the Jacobian diag(y) - y y^T applied to dy.

    That product is two element-wise passes and a row sum; the (n, n) Jacobian of each row is
    never built. dout, y: (..., n) -> dx: (..., n)
    """
    y = cache
    return y * (dout - (dout * y).sum(axis=-1, keepdims=True))


# ----------------------------------------------------------------------------------------------
# layer normalisation


class LayerNormCache(NamedTuple):
    xhat: Array  # (x - mu) / sigma, (..., D)
    rstd: Array  # 1 / sigma, (..., 1)
    gamma: Array


def layer_norm_forward(
    x: Array, gamma: Array, beta: Array, eps: float = 1e-5
) -> tuple[Array, LayerNormCache]:
    """y = gamma * xhat + beta, xhat = (x - mu) / sqrt(var + eps), over the last axis.

    mu = mean(x), var = mean((x - mu)^2) (the biased variance, as PyTorch's LayerNorm).
    x: (..., D), gamma, beta: (D,) -> y: (..., D)
    """
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
    rstd = 1.0 / (var + eps) ** 0.5
    xhat = (x - mu) * rstd
    return gamma * xhat + beta, LayerNormCache(xhat, rstd, gamma)


def layer_norm_backward(dout: Array, cache: LayerNormCache) -> tuple[Array, Array, Array]:
    """Gradients of layer normalisation. With g = dy * gamma, the gradient reaching xhat:

    dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))    (..., D)
    dgamma = sum over rows of dy * xhat                      (D,)
    dbeta  = sum over rows of dy                             (D,)

    mean(g) is the gradient flowing back through mu, mean(g * xhat) the one through var.
    """
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    g = dout * gamma
    mean_g = g.mean(axis=-1, keepdims=True)
    mean_g_xhat = (g * xhat).mean(axis=-1, keepdims=True)
    dx = rstd * (g - mean_g - xhat * mean_g_xhat)
    dgamma = (dout * xhat).reshape(-1, width).sum(axis=0)
    dbeta = dout.reshape(-1, width).sum(axis=0)
    return dx, dgamma, dbeta


# ----------------------------------------------------------------------------------------------
# attention


class AttentionCache(NamedTuple):
    q: Array
    k: Array
    v: Array
    mask: Array | None
    probs: Array  # P, before dropout
    dropped: Array  # Pd = dropout(P)
    dropout: DropoutCache | None
    scale: float


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
    """Scaled dot-product attention: y = dropout(P) v, P = softmax(S), S = q k^T * scale.

    scale = 1 / sqrt(K) unless given. Where the mask is false (a query may not see that key)
    S is MASKED_SCORE, so P is 0 there.
    q: (B, H, T, K), k, v: (B, H, S, K), mask: broadcastable to (B, H, T, S) -> y: (B, H, T, K)
    """
    xp = get_array_module()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if mask is not None:
        scores = xp.where(mask, scores, MASKED_SCORE)
    probs, _ = softmax_forward(scores)
    dropped, dropout_cache = dropout_forward(probs, dropout_p, rng, training)
    return dropped @ v, AttentionCache(q, k, v, mask, probs, dropped, dropout_cache, scale)


def attention_backward(dout: Array, cache: AttentionCache) -> tuple[Array, Array, Array]:
    """Gradients of attention, the forward in reverse:

    dv  = Pd^T dy                      (B, H, S, K)
    dPd = dy v^T                       (B, H, T, S)
    dP  = dropout_backward(dPd)
    dS  = softmax_backward(dP), 0 where masked (a masked score is a constant)
    dq  = dS k * scale                 (B, H, T, K)
    dk  = dS^T q * scale               (B, H, S, K)
    """
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    ddropped = dout @ v.swapaxes(-1, -2)
    dprobs = dropout_backward(ddropped, dropout_cache)
    dscores = softmax_backward(dprobs, probs)
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    dq = (dscores @ k) * scale
    dk = (dscores.swapaxes(-1, -2) @ q) * scale
    return dq, dk, dv


def split_heads(x: Array, n_heads: int) -> Array:
    """(B, T, D) -> (B, H, T, K): view the last axis as H heads of width K = D / H."""
    batch, length, width = x.shape
    return x.reshape(batch, length, n_heads, width // n_heads).transpose(0, 2, 1, 3)


def merge_heads(x: Array) -> Array:
    """(B, H, T, K) -> (B, T, D): concatenate the heads again (the inverse of split_heads)."""
    batch, n_heads, length, head_width = x.shape
    return x.transpose(0, 2, 1, 3).reshape(batch, length, n_heads * head_width)


class MultiHeadCache(NamedTuple):
    attention: AttentionCache
    n_heads: int


def multi_head_forward(
    q: Array,
    k: Array,
    v: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
) -> tuple[Array, MultiHeadCache]:
    """Concat(head_1 .. head_H), head_i = attention(q_i, k_i, v_i): every head attends at once.

    q: (B, T, D), k, v: (B, S, D) -> (B, T, D). Splitting and merging only rearrange entries, so
    their gradients are the inverse rearrangements.
    """
    heads, attention_cache = attention_forward(
        split_heads(q, n_heads),
        split_heads(k, n_heads),
        split_heads(v, n_heads),
        mask,
        dropout_p,
        rng,
        training,
    )
    return merge_heads(heads), MultiHeadCache(attention_cache, n_heads)


def multi_head_backward(dout: Array, cache: MultiHeadCache) -> tuple[Array, Array, Array]:
    """dq (B, T, D), dk, dv (B, S, D): split dy into heads, attention backward, merge each."""
    dq, dk, dv = attention_backward(split_heads(dout, cache.n_heads), cache.attention)
    return merge_heads(dq), merge_heads(dk), merge_heads(dv)


class MultiHeadAttentionCache(NamedTuple):
    q: LinearCache
    k: LinearCache
    v: LinearCache
    heads: MultiHeadCache
    output: LinearCache


def multi_head_attention_forward(
    x_q: Array,
    x_kv: Array,
    w_qkv: Array,
    w_o: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
    b_qkv: Array | None = None,
    b_o: Array | None = None,
) -> tuple[Array, MultiHeadAttentionCache]:
    """Cross-attention: queries from x_q, keys and values from x_kv (the decoder over the encoder output).

    Q = x_q W_q^T + b_q, K = x_kv W_k^T + b_k, V = x_kv W_v^T + b_v, y = MultiHead(Q, K, V) W_o^T + b_o,
    the biases only when given (the from-scratch design's projections have none; Marian's have them).
    x_q: (B, T, D), x_kv: (B, S, D), w_qkv: (3D, D) = [W_q; W_k; W_v] stacked, w_o: (D, D),
    b_qkv: (3D,) = [b_q; b_k; b_v] or None, b_o: (D,) or None -> y: (B, T, D)
    """
    width = w_o.shape[0]
    w_q, w_k, w_v = w_qkv[:width], w_qkv[width : 2 * width], w_qkv[2 * width :]
    b_q, b_k, b_v = (
        (None, None, None) if b_qkv is None else (b_qkv[:width], b_qkv[width : 2 * width], b_qkv[2 * width :])
    )
    q, q_cache = linear_forward(x_q, w_q, b_q)
    k, k_cache = linear_forward(x_kv, w_k, b_k)
    v, v_cache = linear_forward(x_kv, w_v, b_v)
    heads, heads_cache = multi_head_forward(q, k, v, mask, n_heads, dropout_p, rng, training)
    out, output_cache = linear_forward(heads, w_o, b_o)
    return out, MultiHeadAttentionCache(q_cache, k_cache, v_cache, heads_cache, output_cache)


def multi_head_attention_backward(
    dout: Array, cache: MultiHeadAttentionCache
) -> tuple[Array, Array, Array, Array, Array | None, Array | None]:
    """Returns dx_q (B, T, D), dx_kv (B, S, D), dw_qkv (3D, D), dw_o (D, D), db_qkv (3D,), db_o (D,).

    x_kv feeds both K and V, so its gradient is the sum of the two: dx_kv = dK W_k + dV W_v.
    A bias's gradient is its projection's output gradient summed over every position:
    db_qkv = [sum dQ; sum dK; sum dV], db_o = sum dy (both None when the forward had no biases).
    """
    xp = get_array_module()
    dheads, dw_o, db_o = linear_backward(dout, cache.output)
    dq, dk, dv = multi_head_backward(dheads, cache.heads)
    dx_q, dw_q, db_q = linear_backward(dq, cache.q)
    dx_k, dw_k, db_k = linear_backward(dk, cache.k)
    dx_v, dw_v, db_v = linear_backward(dv, cache.v)
    db_qkv = None if db_q is None else xp.concatenate([db_q, db_k, db_v])
    return dx_q, dx_k + dx_v, xp.concatenate([dw_q, dw_k, dw_v]), dw_o, db_qkv, db_o


def multi_head_self_attention_forward(
    x: Array,
    w_qkv: Array,
    w_o: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
    b_qkv: Array | None = None,
    b_o: Array | None = None,
) -> tuple[Array, MultiHeadAttentionCache]:
    """Self-attention: cross-attention of x with itself (Q, K and V all from x). x: (B, T, D) -> (B, T, D)."""
    return multi_head_attention_forward(x, x, w_qkv, w_o, mask, n_heads, dropout_p, rng, training, b_qkv, b_o)


def multi_head_self_attention_backward(
    dout: Array, cache: MultiHeadAttentionCache
) -> tuple[Array, Array, Array, Array | None, Array | None]:
    """Returns dx (B, T, D), dw_qkv, dw_o, db_qkv, db_o. x fed the queries and the keys and values:
    dx adds both paths."""
    dx_q, dx_kv, dw_qkv, dw_o, db_qkv, db_o = multi_head_attention_backward(dout, cache)
    return dx_q + dx_kv, dw_qkv, dw_o, db_qkv, db_o


class LatentAttentionCache(NamedTuple):
    q: LinearCache
    latent: LinearCache
    k: LinearCache
    v: LinearCache
    heads: MultiHeadCache
    output: LinearCache


def multi_head_latent_attention_forward(
    x_q: Array,
    x_kv: Array,
    w_q_compress: Array,
    w_kv_decompress: Array,
    w_o: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
) -> tuple[Array, LatentAttentionCache]:
    """Multi-Head Latent Attention across x_q and x_kv: keys and values decompressed from one small latent.

    Q = x_q W_q^T (B, T, D), C = x_kv W_c^T (B, S, L), K = C W_kd^T, V = C W_vd^T (B, S, D),
    y = MultiHead(Q, K, V) W_o^T. Only C needs to be kept per key position (L = D / 4).
    w_q_compress: (D + L, D) = [W_q; W_c], w_kv_decompress: (2D, L) = [W_kd; W_vd], w_o: (D, D)
    -> y: (B, T, D)
    """
    width = w_o.shape[0]
    w_q, w_c = w_q_compress[:width], w_q_compress[width:]
    w_kd, w_vd = w_kv_decompress[:width], w_kv_decompress[width:]
    q, q_cache = linear_forward(x_q, w_q)
    latent, latent_cache = linear_forward(x_kv, w_c)
    k, k_cache = linear_forward(latent, w_kd)
    v, v_cache = linear_forward(latent, w_vd)
    heads, heads_cache = multi_head_forward(q, k, v, mask, n_heads, dropout_p, rng, training)
    out, output_cache = linear_forward(heads, w_o)
    return out, LatentAttentionCache(q_cache, latent_cache, k_cache, v_cache, heads_cache, output_cache)


def multi_head_latent_attention_backward(
    dout: Array, cache: LatentAttentionCache
) -> tuple[Array, Array, Array, Array, Array]:
    """Returns dx_q, dx_kv, dw_q_compress (D + L, D), dw_kv_decompress (2D, L), dw_o (D, D).

    The latent feeds both keys and values, so its gradient is the sum of the two branches:
    dC = dK W_kd + dV W_vd.
    """
    xp = get_array_module()
    dheads, dw_o, _ = linear_backward(dout, cache.output)
    dq, dk, dv = multi_head_backward(dheads, cache.heads)
    dlatent_k, dw_kd, _ = linear_backward(dk, cache.k)
    dlatent_v, dw_vd, _ = linear_backward(dv, cache.v)
    dx_kv, dw_c, _ = linear_backward(dlatent_k + dlatent_v, cache.latent)
    dx_q, dw_q, _ = linear_backward(dq, cache.q)
    return dx_q, dx_kv, xp.concatenate([dw_q, dw_c]), xp.concatenate([dw_kd, dw_vd]), dw_o


def multi_head_latent_self_attention_forward(
    x: Array,
    w_q_compress: Array,
    w_kv_decompress: Array,
    w_o: Array,
    mask: Array | None,
    n_heads: int,
    dropout_p: float = 0.0,
    rng: Any = None,
    training: bool = False,
) -> tuple[Array, LatentAttentionCache]:
    """Latent self-attention: the queries and the latent both from x. x: (B, T, D) -> (B, T, D)."""
    return multi_head_latent_attention_forward(
        x, x, w_q_compress, w_kv_decompress, w_o, mask, n_heads, dropout_p, rng, training
    )


def multi_head_latent_self_attention_backward(
    dout: Array, cache: LatentAttentionCache
) -> tuple[Array, Array, Array, Array]:
    """Returns dx (the query and latent paths added), dw_q_compress, dw_kv_decompress, dw_o."""
    dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o = multi_head_latent_attention_backward(dout, cache)
    return dx_q + dx_kv, dw_q_compress, dw_kv_decompress, dw_o


# ----------------------------------------------------------------------------------------------
# The feed-forward block (linear -> relu -> dropout -> linear) and the residual connection
# (x + dropout(sublayer(norm(x))), or the paper's norm(x + dropout(sublayer(x)))) are compositions
# of the pairs above; FeedForwardBlock and ResidualConnection in layers.py chain them.


# ----------------------------------------------------------------------------------------------
# loss


class CrossEntropyCache(NamedTuple):
    probs: Array  # softmax(z), (N, V)
    targets: Array  # (N,), pad positions replaced by 0
    valid: Array  # (N,) true where the target is not padding
    n_valid: int
    label_smoothing: float
    shape: tuple[int, ...]  # of the logits


def valid_targets(targets: Array, pad_id: int | None) -> tuple[Array, Array, int]:
    """Flattened targets with pad positions set to 0, the (N,) mask of real ones, and their count.

    Raises a ValueError when every target is padding: there is nothing to average the loss over.
    """
    xp = get_array_module()
    targets = targets.reshape(-1)
    if pad_id is None:  # all of them: counted without a look at the device's values
        valid, n_valid = xp.ones(targets.shape, dtype=bool), targets.size
    else:
        valid = targets != pad_id
        n_valid = int(valid.sum())
    if n_valid == 0:
        why = "there are none" if pad_id is None else "every token equals pad_id"
        raise ValueError(f"targets: {why}, so there is nothing to average the loss over")
    return xp.where(valid, targets, 0), valid, n_valid


def cross_entropy_forward(
    logits: Array, targets: Array, pad_id: int | None = None, label_smoothing: float = 0.0
) -> tuple[float, CrossEntropyCache]:
    """Mean label-smoothed cross-entropy over the non-pad tokens, as PyTorch's
    ``CrossEntropyLoss(ignore_index=pad_id, label_smoothing=eps)`` defines it:

    q = (1 - eps) one_hot(y) + eps / V,   loss_n = -sum_v q_v log softmax(z_n)_v
          = (1 - eps) * (-log p_n[y_n]) + eps * (-mean_v log p_n[v])
    logits: (..., V), targets: (...) integers -> a Python float.
    """
    xp = get_array_module()
    targets, valid, n_valid = valid_targets(targets, pad_id)
    log_probs, per_token = _smoothed_losses(logits.reshape(-1, logits.shape[-1]), targets, label_smoothing)
    loss = float((per_token * valid).sum()) / n_valid
    return loss, CrossEntropyCache(xp.exp(log_probs), targets, valid, n_valid, label_smoothing, logits.shape)


def _smoothed_losses(z: Array, targets: Array, label_smoothing: float) -> tuple[Array, Array]:
    """log softmax(z) (N, V) and each row's label-smoothed loss (N,) against its target."""
    xp = get_array_module()
    shifted = z - z.max(axis=-1, keepdims=True)
    log_probs = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))
    nll = -log_probs[xp.arange(z.shape[0]), targets]
    smooth = -log_probs.mean(axis=-1)
    return log_probs, (1.0 - label_smoothing) * nll + label_smoothing * smooth


def cross_entropy_backward(dloss: float, cache: CrossEntropyCache) -> Array:
    """dz_n = dloss * (softmax(z_n) - q_n) / n_valid on non-pad rows, 0 on pad rows.

    Softmax and cross-entropy are differentiated together: the softmax's Jacobian is never formed.
    -> dlogits with the shape of the logits (..., V).
    """
    xp = get_array_module()
    probs, targets, valid, n_valid, label_smoothing, shape = cache
    n_classes = shape[-1]
    one_hot = xp.zeros_like(probs)
    one_hot[xp.arange(probs.shape[0]), targets] = 1.0
    q = (1.0 - label_smoothing) * one_hot + label_smoothing / n_classes
    dlogits = (probs - q) * (valid[:, None] * (dloss / n_valid))
    return dlogits.astype(probs.dtype).reshape(shape)


def masked_cross_entropy(
    logits: Array, targets: Array, labelled: Array, label_smoothing: float, dloss: float
) -> tuple[Array, Array]:
    """cross_entropy_forward and cross_entropy_backward(dloss) of the ``labelled`` rows of the (N, V)
    logits, with nothing read on the host (a GPU step reads its loss once, at its end): every row is
    computed, the mean weighted by the (N,) mask. Returns the loss as a 0-d array (NaN where no row is
    labelled) and dlogits (N, V), zero on the rows not labelled. ``targets`` (N,) may hold anything
    where ``labelled`` is false."""
    xp = get_array_module()
    targets = xp.where(labelled, targets, 0)
    log_probs, per_token = _smoothed_losses(logits, targets, label_smoothing)
    weights = labelled.astype(logits.dtype)
    count = weights.sum()
    loss = (per_token * weights).sum() / count
    q = xp.zeros_like(log_probs)
    q[xp.arange(logits.shape[0]), targets] = 1.0 - label_smoothing
    q += label_smoothing / logits.shape[-1]
    dlogits = (xp.exp(log_probs) - q) * (weights * (dloss / count))[:, None]
    return loss, dlogits.astype(logits.dtype)
