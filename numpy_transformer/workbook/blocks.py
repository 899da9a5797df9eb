"""The Transformer's blocks as functional forward/backward pairs over plain parameter dicts.

The same computations as :mod:`numpy_transformer.layers` (pre-norm by default, ReLU, no dropout),
written with the textbook's functions of :mod:`numpy_transformer.functional` alone, so that the
workbook of :mod:`numpy_transformer.workbook` can ask for each block's backward as one function:
``forward(x, params, ...) -> (out, cache)`` and ``backward(dout, cache) -> (dx, ..., dparams)``,
``dparams`` a dict with the keys of ``params``. Each backward is its forward read in reverse.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import Array, get_array_module
from ..functional import (
    CrossEntropyCache,
    EmbeddingCache,
    LayerNormCache,
    LinearCache,
    MultiHeadAttentionCache,
    cross_entropy_backward,
    cross_entropy_forward,
    embedding_backward,
    embedding_forward,
    layer_norm_backward,
    layer_norm_forward,
    linear_backward,
    linear_forward,
    multi_head_attention_backward,
    multi_head_attention_forward,
    multi_head_self_attention_backward,
    multi_head_self_attention_forward,
    positional_encoding_backward,
    positional_encoding_forward,
    relu_backward,
    relu_forward,
    sinusoidal_table,
)

Params = dict[str, Array]


# ------------------------------------------------------------------------------------------------
# the residual connection, around a linear sublayer


class ResidualCache(NamedTuple):
    norm: LayerNormCache
    sublayer: LinearCache
    norm_first: bool


def residual_forward(x: Array, params: Params, norm_first: bool = True) -> tuple[Array, ResidualCache]:
    """A residual connection around a linear sublayer f(h) = h W^T + b, with a layer norm:

    pre-norm (norm_first):  y = x + f(norm(x))       post-norm:  y = norm(x + f(x))
    x: (..., D); params: gamma, beta (D,), weight (D, D), bias (D,) -> y: (..., D)
    """
    if norm_first:
        normed, norm_cache = layer_norm_forward(x, params["gamma"], params["beta"])
        branch, sublayer_cache = linear_forward(normed, params["weight"], params["bias"])
        return x + branch, ResidualCache(norm_cache, sublayer_cache, True)
    branch, sublayer_cache = linear_forward(x, params["weight"], params["bias"])
    out, norm_cache = layer_norm_forward(x + branch, params["gamma"], params["beta"])
    return out, ResidualCache(norm_cache, sublayer_cache, False)


def residual_backward(dout: Array, cache: ResidualCache) -> tuple[Array, Params]:
    """x reaches y along two paths, the skip and the branch: their gradients add.

    pre-norm:   dx = dout + norm_backward(f_backward(dout))
    post-norm:  ds = norm_backward(dout), dx = ds + f_backward(ds)
    """
    norm_cache, sublayer_cache, norm_first = cache
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dout, sublayer_cache)
        dbranch, dgamma, dbeta = layer_norm_backward(dnormed, norm_cache)
        dx = dout + dbranch
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm_cache)
        dbranch, dweight, dbias = linear_backward(dsum, sublayer_cache)
        dx = dsum + dbranch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}


# ------------------------------------------------------------------------------------------------
# the feed-forward block


class FeedForwardCache(NamedTuple):
    first: LinearCache
    activation: Array
    second: LinearCache


def feed_forward_forward(x: Array, params: Params) -> tuple[Array, FeedForwardCache]:
    """y = relu(x W1^T + b1) W2^T + b2: D -> d_ff -> D.

    x: (..., D); params: w1 (d_ff, D), b1 (d_ff,), w2 (D, d_ff), b2 (D,) -> y: (..., D)
    """
    hidden, first = linear_forward(x, params["w1"], params["b1"])
    hidden, activation = relu_forward(hidden)
    out, second = linear_forward(hidden, params["w2"], params["b2"])
    return out, FeedForwardCache(first, activation, second)


def feed_forward_backward(dout: Array, cache: FeedForwardCache) -> tuple[Array, Params]:
    """The forward in reverse: linear 2, relu, linear 1."""
    dhidden, dw2, db2 = linear_backward(dout, cache.second)
    dhidden = relu_backward(dhidden, cache.activation)
    dx, dw1, db1 = linear_backward(dhidden, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}


def _feed_forward_params(params: Params) -> Params:
    return {key: params[key] for key in ("w1", "b1", "w2", "b2")}


# ------------------------------------------------------------------------------------------------
# the encoder block and the decoder block (pre-norm)


class EncoderBlockCache(NamedTuple):
    norm_1: LayerNormCache
    attention: MultiHeadAttentionCache
    norm_2: LayerNormCache
    feed_forward: FeedForwardCache


def encoder_block_forward(
    x: Array, params: Params, mask: Array | None, n_heads: int
) -> tuple[Array, EncoderBlockCache]:
    """x = x + SelfAttention(norm_1(x)); y = x + FeedForward(norm_2(x)).

    x: (B, S, D); mask (B, 1, 1, S) or None; params: ln1_gamma, ln1_beta, ln2_gamma, ln2_beta (D,),
    w_qkv (3D, D), w_o (D, D), w1, b1, w2, b2 (feed_forward_forward's) -> y: (B, S, D)
    """
    h, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h, attention = multi_head_self_attention_forward(h, params["w_qkv"], params["w_o"], mask, n_heads)
    x = x + h
    h, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    h, feed_forward = feed_forward_forward(h, _feed_forward_params(params))
    return x + h, EncoderBlockCache(norm_1, attention, norm_2, feed_forward)


def encoder_block_backward(dout: Array, cache: EncoderBlockCache) -> tuple[Array, Params]:
    """The forward in reverse; at each residual the skip's gradient and the branch's add."""
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dout + dh
    dh, grads["w_qkv"], grads["w_o"], _, _ = multi_head_self_attention_backward(dx, cache.attention)
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, grads


class DecoderBlockCache(NamedTuple):
    norm_1: LayerNormCache
    self_attention: MultiHeadAttentionCache
    norm_2: LayerNormCache
    cross_attention: MultiHeadAttentionCache
    norm_3: LayerNormCache
    feed_forward: FeedForwardCache


def decoder_block_forward(
    x: Array,
    memory: Array,
    params: Params,
    src_mask: Array | None,
    tgt_mask: Array | None,
    n_heads: int,
) -> tuple[Array, DecoderBlockCache]:
    """x = x + SelfAttention(norm_1(x)) under the causal tgt_mask;
    x = x + CrossAttention(norm_2(x), memory) (queries from x, keys and values from the encoder's
    output ``memory``); y = x + FeedForward(norm_3(x)).

    x: (B, T, D), memory: (B, S, D); params: ln1_*, ln2_*, ln3_* (gamma, beta (D,)), self_w_qkv,
    cross_w_qkv (3D, D), self_w_o, cross_w_o (D, D), w1, b1, w2, b2 -> y: (B, T, D)
    """
    h, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h, self_attention = multi_head_self_attention_forward(
        h, params["self_w_qkv"], params["self_w_o"], tgt_mask, n_heads
    )
    x = x + h
    h, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    h, cross_attention = multi_head_attention_forward(
        h, memory, params["cross_w_qkv"], params["cross_w_o"], src_mask, n_heads
    )
    x = x + h
    h, norm_3 = layer_norm_forward(x, params["ln3_gamma"], params["ln3_beta"])
    h, feed_forward = feed_forward_forward(h, _feed_forward_params(params))
    return x + h, DecoderBlockCache(norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward)


def decoder_block_backward(dout: Array, cache: DecoderBlockCache) -> tuple[Array, Array, Params]:
    """Returns (dx, dmemory, dparams): the forward in reverse; the memory's gradient comes from
    the cross-attention's keys and values."""
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    dh, grads["ln3_gamma"], grads["ln3_beta"] = layer_norm_backward(dh, cache.norm_3)
    dx = dout + dh
    dh, dmemory, grads["cross_w_qkv"], grads["cross_w_o"], _, _ = multi_head_attention_backward(
        dx, cache.cross_attention
    )
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dx + dh
    dh, grads["self_w_qkv"], grads["self_w_o"], _, _ = multi_head_self_attention_backward(
        dx, cache.self_attention
    )
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, dmemory, grads


# ------------------------------------------------------------------------------------------------
# the whole encoder-decoder, its loss included


class EncoderDecoderCache(NamedTuple):
    src_embedding: EmbeddingCache
    tgt_embedding: EmbeddingCache
    encoder: list[EncoderBlockCache]
    encoder_norm: LayerNormCache
    decoder: list[DecoderBlockCache]
    decoder_norm: LayerNormCache
    projection: LinearCache
    loss: CrossEntropyCache
    n_layers: int


def _layer(params: Params, prefix: str) -> Params:
    return {key[len(prefix) :]: value for key, value in params.items() if key.startswith(prefix)}


def encoder_decoder_forward(
    src: Array,
    tgt_in: Array,
    tgt_out: Array,
    params: Params,
    n_layers: int,
    n_heads: int,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
) -> tuple[float, EncoderDecoderCache]:
    """The mean label-smoothed cross-entropy of the whole Transformer on one batch.

    src: (B, S), tgt_in, tgt_out: (B, T) token ids (pad_id is padding). params: src_table (Vs, D),
    tgt_table (Vt, D) (tied: the output projection is tgt_table too), enc{i}_* (encoder_block's
    keys) and dec{i}_* (decoder_block's) for i < n_layers, enc_norm_gamma/beta, dec_norm_gamma/beta.

    memory = norm(Encoder(embed(src) * sqrt(D) + PE)), h = norm(Decoder(embed(tgt_in) * sqrt(D) + PE,
    memory)), logits = h tgt_table^T, loss = cross_entropy(logits, tgt_out).
    """
    xp = get_array_module()
    width = params["src_table"].shape[1]
    table = xp.asarray(sinusoidal_table(max(src.shape[1], tgt_in.shape[1]), width, params["src_table"].dtype))
    src_mask = (src != pad_id)[:, None, None, :]
    length = tgt_in.shape[1]
    tgt_mask = (tgt_in != pad_id)[:, None, None, :] & xp.tril(xp.ones((length, length), dtype=bool))[
        None, None
    ]
    x, src_embedding = embedding_forward(src, params["src_table"])
    x, _ = positional_encoding_forward(x, table)
    encoder: list[EncoderBlockCache] = []
    for i in range(n_layers):
        x, encoder_block = encoder_block_forward(x, _layer(params, f"enc{i}_"), src_mask, n_heads)
        encoder.append(encoder_block)
    memory, encoder_norm = layer_norm_forward(x, params["enc_norm_gamma"], params["enc_norm_beta"])
    y, tgt_embedding = embedding_forward(tgt_in, params["tgt_table"])
    y, _ = positional_encoding_forward(y, table)
    decoder: list[DecoderBlockCache] = []
    for i in range(n_layers):
        y, decoder_block = decoder_block_forward(
            y, memory, _layer(params, f"dec{i}_"), src_mask, tgt_mask, n_heads
        )
        decoder.append(decoder_block)
    y, decoder_norm = layer_norm_forward(y, params["dec_norm_gamma"], params["dec_norm_beta"])
    logits, projection = linear_forward(y, params["tgt_table"])
    loss, loss_cache = cross_entropy_forward(logits, tgt_out, pad_id, label_smoothing)
    return loss, EncoderDecoderCache(
        src_embedding,
        tgt_embedding,
        encoder,
        encoder_norm,
        decoder,
        decoder_norm,
        projection,
        loss_cache,
        n_layers,
    )


def encoder_decoder_backward(dloss: float, cache: EncoderDecoderCache) -> Params:
    """Every parameter's gradient: the forward in reverse. The memory collects a gradient from
    every decoder layer's cross-attention (they add); the tied tgt_table gets the projection's and
    the target embedding's gradients (they add)."""
    grads: dict[str, Any] = {}
    dlogits = cross_entropy_backward(dloss, cache.loss)
    dy, dprojection, _ = linear_backward(dlogits, cache.projection)
    dy, grads["dec_norm_gamma"], grads["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder_norm)
    dmemory = 0.0
    for i in reversed(range(cache.n_layers)):
        dy, dmemory_i, block = decoder_block_backward(dy, cache.decoder[i])
        dmemory = dmemory + dmemory_i
        grads.update({f"dec{i}_{key}": value for key, value in block.items()})
    dy = positional_encoding_backward(dy, None)
    grads["tgt_table"] = dprojection + embedding_backward(dy, cache.tgt_embedding)
    dx, grads["enc_norm_gamma"], grads["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder_norm)
    for i in reversed(range(cache.n_layers)):
        dx, block = encoder_block_backward(dx, cache.encoder[i])
        grads.update({f"enc{i}_{key}": value for key, value in block.items()})
    dx = positional_encoding_backward(dx, None)
    grads["src_table"] = embedding_backward(dx, cache.src_embedding)
    return grads


def init_params(
    rng: Any, src_vocab: int, tgt_vocab: int, width: int, d_ff: int, n_layers: int, scale: float = 0.5
) -> Params:
    """Random float64 parameters for encoder_decoder_forward (normal entries times ``scale``)."""
    xp = get_array_module()

    def normal(*shape: int) -> Array:
        return xp.asarray(scale * rng.standard_normal(shape))

    def norm(prefix: str) -> Params:
        return {f"{prefix}gamma": 1 + normal(width), f"{prefix}beta": normal(width)}

    def feed_forward(prefix: str) -> Params:
        return {
            f"{prefix}w1": normal(d_ff, width),
            f"{prefix}b1": normal(d_ff),
            f"{prefix}w2": normal(width, d_ff),
            f"{prefix}b2": normal(width),
        }

    params: Params = {"src_table": normal(src_vocab, width), "tgt_table": normal(tgt_vocab, width)}
    for i in range(n_layers):
        e = f"enc{i}_"
        params |= {**norm(f"{e}ln1_"), f"{e}w_qkv": normal(3 * width, width), f"{e}w_o": normal(width, width)}
        params |= {**norm(f"{e}ln2_"), **feed_forward(e)}
    for i in range(n_layers):
        d = f"dec{i}_"
        params |= {
            **norm(f"{d}ln1_"),
            f"{d}self_w_qkv": normal(3 * width, width),
            f"{d}self_w_o": normal(width, width),
        }
        params |= {**norm(f"{d}ln2_"), f"{d}cross_w_qkv": normal(3 * width, width)}
        params |= {f"{d}cross_w_o": normal(width, width), **norm(f"{d}ln3_"), **feed_forward(d)}
    return params | norm("enc_norm_") | norm("dec_norm_")
