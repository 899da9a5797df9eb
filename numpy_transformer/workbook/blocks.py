"""The Transformer's blocks as functional forward/backward pairs over plain parameter dicts.

The same computations as :mod:`numpy_transformer.layers` and :mod:`numpy_transformer.model`, with
their architecture's choices: pre-norm (``norm_first``, the default) or the paper's post-norm,
multi-head attention or Multi-Head Latent Attention (chosen by the parameters a block is given:
``w_qkv`` or ``w_q_compress``; bias-free, as the model's default), ReLU, a final layer norm after
each stack, a tied target embedding and output projection (with the projection's bias), and
inverted dropout at the model's places: after the embeddings with positions, on the attention
probabilities, on the feed-forward's hidden units and on each residual branch. Each forward takes
the dropout probability and a generator as :func:`numpy_transformer.functional.dropout_forward`
does, and draws its masks in the model's order, so one generator in the state of the model's gives
the model's masks (``tests/workbook/test_learn_blocks.py`` proves the whole encoder-decoder equal to
``Transformer.forward``/``backward``, every gradient, dropout on).

Written with the textbook's functions of :mod:`numpy_transformer.functional` alone, so that the
workbook of :mod:`numpy_transformer.workbook` can ask for each block's backward as one function:
``forward(x, params, ...) -> (out, cache)`` and ``backward(dout, cache) -> (dx, ..., dparams)``,
``dparams`` a dict with the keys of ``params``. Each backward is its forward read in reverse.
Shapes: B batch, S source length, T target length, D width, H heads, F = d_ff, L = D / 4, V vocabulary.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backend import Array, get_array_module
from ..functional import (
    CrossEntropyCache,
    DropoutCache,
    EmbeddingCache,
    LatentAttentionCache,
    LayerNormCache,
    LinearCache,
    MultiHeadAttentionCache,
    cross_entropy_backward,
    cross_entropy_forward,
    dropout_backward,
    dropout_forward,
    embedding_backward,
    embedding_forward,
    layer_norm_backward,
    layer_norm_forward,
    linear_backward,
    linear_forward,
    multi_head_attention_backward,
    multi_head_attention_forward,
    multi_head_latent_attention_backward,
    multi_head_latent_attention_forward,
    multi_head_latent_self_attention_backward,
    multi_head_latent_self_attention_forward,
    multi_head_self_attention_backward,
    multi_head_self_attention_forward,
    positional_encoding_backward,
    positional_encoding_forward,
    relu_backward,
    relu_forward,
    sinusoidal_table,
)

Params = dict[str, Array]
AttentionSublayerCache = MultiHeadAttentionCache | LatentAttentionCache  # a block's attention, either kind


# ------------------------------------------------------------------------------------------------
# the token embedding with positions


class EmbeddingWithPositionsCache(NamedTuple):
    embedding: EmbeddingCache
    dropout: DropoutCache | None


def embedding_with_positions_forward(
    ids: Array, params: Params, dropout: float = 0.0, rng: Any = None
) -> tuple[Array, EmbeddingWithPositionsCache]:
    """y = dropout(E[ids] * sqrt(D) + PE[:T]): the token's row, scaled, plus its position's sinusoid.

    ids: (B, T) integers in [0, V); params: table E (V, D); dropout p, its generator rng -> y: (B, T, D)
    """
    table = params["table"]
    x, embedding = embedding_forward(ids, table)
    positions = get_array_module().asarray(sinusoidal_table(ids.shape[1], table.shape[1], table.dtype))
    x, _ = positional_encoding_forward(x, positions)
    x, dropped = dropout_forward(x, dropout, rng, True)
    return x, EmbeddingWithPositionsCache(embedding, dropped)


def embedding_with_positions_backward(dout: Array, cache: EmbeddingWithPositionsCache) -> Params:
    """The forward in reverse: the dropout's mask, the positions (a constant), the lookup; -> {"table"}."""
    dx = dropout_backward(dout, cache.dropout)
    dx = positional_encoding_backward(dx, None)
    return {"table": embedding_backward(dx, cache.embedding)}


# ------------------------------------------------------------------------------------------------
# the residual connection, around a linear sublayer


class ResidualCache(NamedTuple):
    norm: LayerNormCache
    sublayer: LinearCache
    dropout: DropoutCache | None
    norm_first: bool


def residual_forward(
    x: Array, params: Params, norm_first: bool = True, dropout: float = 0.0, rng: Any = None
) -> tuple[Array, ResidualCache]:
    """A residual connection around a linear sublayer f(h) = h W^T + b, with a layer norm, the
    branch through dropout:

    pre-norm (norm_first):  y = x + dropout(f(norm(x)))       post-norm:  y = norm(x + dropout(f(x)))
    x: (..., D); params: gamma, beta (D,), weight (D, D), bias (D,) -> y: (..., D)
    """
    if norm_first:
        normed, norm_cache = layer_norm_forward(x, params["gamma"], params["beta"])
        branch, sublayer_cache = linear_forward(normed, params["weight"], params["bias"])
        branch, dropped = dropout_forward(branch, dropout, rng, True)
        return x + branch, ResidualCache(norm_cache, sublayer_cache, dropped, True)
    branch, sublayer_cache = linear_forward(x, params["weight"], params["bias"])
    branch, dropped = dropout_forward(branch, dropout, rng, True)
    out, norm_cache = layer_norm_forward(x + branch, params["gamma"], params["beta"])
    return out, ResidualCache(norm_cache, sublayer_cache, dropped, False)


def residual_backward(dout: Array, cache: ResidualCache) -> tuple[Array, Params]:
    """x reaches y along two paths, the skip and the branch: their gradients add.

    pre-norm:   dx = dout + norm_backward(f_backward(dropout_backward(dout)))
    post-norm:  ds = norm_backward(dout), dx = ds + f_backward(dropout_backward(ds))
    """
    norm_cache, sublayer_cache, dropped, norm_first = cache
    if norm_first:
        dbranch = dropout_backward(dout, dropped)
        dnormed, dweight, dbias = linear_backward(dbranch, sublayer_cache)
        dbranch, dgamma, dbeta = layer_norm_backward(dnormed, norm_cache)
        dx = dout + dbranch
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm_cache)
        dbranch = dropout_backward(dsum, dropped)
        dbranch, dweight, dbias = linear_backward(dbranch, sublayer_cache)
        dx = dsum + dbranch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}


# ------------------------------------------------------------------------------------------------
# the feed-forward block


class FeedForwardCache(NamedTuple):
    first: LinearCache
    activation: Array
    dropout: DropoutCache | None
    second: LinearCache


def feed_forward_forward(
    x: Array, params: Params, dropout: float = 0.0, rng: Any = None
) -> tuple[Array, FeedForwardCache]:
    """y = dropout(relu(x W1^T + b1)) W2^T + b2: D -> d_ff -> D, the hidden units through dropout.

    x: (..., D); params: w1 (d_ff, D), b1 (d_ff,), w2 (D, d_ff), b2 (D,) -> y: (..., D)
    """
    hidden, first = linear_forward(x, params["w1"], params["b1"])
    hidden, activation = relu_forward(hidden)
    hidden, dropped = dropout_forward(hidden, dropout, rng, True)
    out, second = linear_forward(hidden, params["w2"], params["b2"])
    return out, FeedForwardCache(first, activation, dropped, second)


def feed_forward_backward(dout: Array, cache: FeedForwardCache) -> tuple[Array, Params]:
    """The forward in reverse: linear 2, the dropout's mask, relu, linear 1."""
    dhidden, dw2, db2 = linear_backward(dout, cache.second)
    dhidden = dropout_backward(dhidden, cache.dropout)
    dhidden = relu_backward(dhidden, cache.activation)
    dx, dw1, db1 = linear_backward(dhidden, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}


def _feed_forward_params(params: Params) -> Params:
    return {key: params[key] for key in ("w1", "b1", "w2", "b2")}


# ------------------------------------------------------------------------------------------------
# the attention sublayers: multi-head (w_qkv, w_o) or latent (w_q_compress, w_kv_decompress, w_o)


def self_attention_forward(
    x: Array, params: Params, mask: Array | None, n_heads: int, dropout: float, rng: Any, prefix: str = ""
) -> tuple[Array, AttentionSublayerCache]:
    """A block's self-attention over x (B, T, D), its probabilities through dropout: multi-head
    attention where params hold ``prefix + "w_qkv"`` (3D, D) and ``prefix + "w_o"`` (D, D), latent
    attention where they hold ``prefix + "w_q_compress"`` (D + L, D), ``prefix + "w_kv_decompress"``
    (2D, L) and ``prefix + "w_o"``. -> (B, T, D) and the attention's cache (MultiHeadAttentionCache
    or LatentAttentionCache)."""
    w_o = params[prefix + "w_o"]
    if prefix + "w_qkv" in params:
        return multi_head_self_attention_forward(
            x, params[prefix + "w_qkv"], w_o, mask, n_heads, dropout, rng, True
        )
    compress, decompress = params[prefix + "w_q_compress"], params[prefix + "w_kv_decompress"]
    return multi_head_latent_self_attention_forward(
        x, compress, decompress, w_o, mask, n_heads, dropout, rng, True
    )


def cross_attention_forward(
    x: Array,
    memory: Array,
    params: Params,
    mask: Array | None,
    n_heads: int,
    dropout: float,
    rng: Any,
    prefix: str = "",
) -> tuple[Array, AttentionSublayerCache]:
    """Cross-attention: queries from x (B, T, D), keys and values from memory (B, S, D); the
    parameters as self_attention_forward's. -> (B, T, D) and the attention's cache."""
    w_o = params[prefix + "w_o"]
    if prefix + "w_qkv" in params:
        return multi_head_attention_forward(
            x, memory, params[prefix + "w_qkv"], w_o, mask, n_heads, dropout, rng, True
        )
    compress, decompress = params[prefix + "w_q_compress"], params[prefix + "w_kv_decompress"]
    return multi_head_latent_attention_forward(
        x, memory, compress, decompress, w_o, mask, n_heads, dropout, rng, True
    )


# ------------------------------------------------------------------------------------------------
# the encoder block and the decoder block


class EncoderBlockCache(NamedTuple):
    norm_1: LayerNormCache
    attention: MultiHeadAttentionCache | LatentAttentionCache
    dropout_1: DropoutCache | None
    norm_2: LayerNormCache
    feed_forward: FeedForwardCache
    dropout_2: DropoutCache | None
    norm_first: bool


def encoder_block_forward(
    x: Array,
    params: Params,
    mask: Array | None,
    n_heads: int,
    norm_first: bool = True,
    dropout: float = 0.0,
    rng: Any = None,
) -> tuple[Array, EncoderBlockCache]:
    """Self-attention, then feed-forward, each inside a residual connection with its own norm:

    pre-norm:   x = x + dropout(SelfAttention(norm_1(x)));   y = x + dropout(FeedForward(norm_2(x)))
    post-norm:  x = norm_1(x + dropout(SelfAttention(x)));   y = norm_2(x + dropout(FeedForward(x)))

    x: (B, S, D); mask (B, 1, 1, S) or None; params: ln1_gamma, ln1_beta, ln2_gamma, ln2_beta (D,),
    the attention's (self_attention_forward's: w_qkv (3D, D) or w_q_compress (D + L, D) and
    w_kv_decompress (2D, L); w_o (D, D)), w1, b1, w2, b2 (feed_forward_forward's); dropout p and
    its generator rng -> y: (B, S, D)
    """
    h = x
    if norm_first:
        h, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h, attention = self_attention_forward(h, params, mask, n_heads, dropout, rng)
    h, dropout_1 = dropout_forward(h, dropout, rng, True)
    x = x + h
    if not norm_first:
        x, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h = x
    if norm_first:
        h, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    h, feed_forward = feed_forward_forward(h, _feed_forward_params(params), dropout, rng)
    h, dropout_2 = dropout_forward(h, dropout, rng, True)
    x = x + h
    if not norm_first:
        x, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    return x, EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward, dropout_2, norm_first)


def encoder_block_backward(dout: Array, cache: EncoderBlockCache) -> tuple[Array, Params]:
    """The forward in reverse, the feed-forward residual first; at each residual the skip's
    gradient and the branch's add. Post-norm: the norm's backward comes first (it is after the
    sum); pre-norm: last, on the branch only."""
    grads: Params = {}
    dx = dout
    if not cache.norm_first:
        dx, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dx, cache.norm_2)
    dh = dropout_backward(dx, cache.dropout_2)
    dh, feed_forward = feed_forward_backward(dh, cache.feed_forward)
    grads.update(feed_forward)
    if cache.norm_first:
        dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dx + dh
    if not cache.norm_first:
        dx, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dx, cache.norm_1)
    dh = dropout_backward(dx, cache.dropout_1)
    if isinstance(cache.attention, LatentAttentionCache):
        dh, grads["w_q_compress"], grads["w_kv_decompress"], grads["w_o"] = (
            multi_head_latent_self_attention_backward(dh, cache.attention)
        )
    else:
        dh, grads["w_qkv"], grads["w_o"], _, _ = multi_head_self_attention_backward(dh, cache.attention)
    if cache.norm_first:
        dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, grads


class DecoderBlockCache(NamedTuple):
    norm_1: LayerNormCache
    self_attention: MultiHeadAttentionCache | LatentAttentionCache
    dropout_1: DropoutCache | None
    norm_2: LayerNormCache
    cross_attention: MultiHeadAttentionCache | LatentAttentionCache
    dropout_2: DropoutCache | None
    norm_3: LayerNormCache
    feed_forward: FeedForwardCache
    dropout_3: DropoutCache | None
    norm_first: bool


def decoder_block_forward(
    x: Array,
    memory: Array,
    params: Params,
    src_mask: Array | None,
    tgt_mask: Array | None,
    n_heads: int,
    norm_first: bool = True,
    dropout: float = 0.0,
    rng: Any = None,
) -> tuple[Array, DecoderBlockCache]:
    """Causal self-attention under tgt_mask, cross-attention (queries from x, keys and values from
    the encoder's output ``memory``, under src_mask), feed-forward; each inside a residual connection
    with its own norm, pre-norm x = x + dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))).

    x: (B, T, D), memory: (B, S, D); params: ln1_*, ln2_*, ln3_* (gamma, beta (D,)), the
    self-attention's under self_ and the cross-attention's under cross_ (self_w_qkv (3D, D) or
    self_w_q_compress (D + L, D) and self_w_kv_decompress (2D, L); self_w_o (D, D); the same for
    cross_), w1, b1, w2, b2; dropout p and its generator rng -> y: (B, T, D)
    """
    h = x
    if norm_first:
        h, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h, self_attention = self_attention_forward(h, params, tgt_mask, n_heads, dropout, rng, "self_")
    h, dropout_1 = dropout_forward(h, dropout, rng, True)
    x = x + h
    if not norm_first:
        x, norm_1 = layer_norm_forward(x, params["ln1_gamma"], params["ln1_beta"])
    h = x
    if norm_first:
        h, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    h, cross_attention = cross_attention_forward(h, memory, params, src_mask, n_heads, dropout, rng, "cross_")
    h, dropout_2 = dropout_forward(h, dropout, rng, True)
    x = x + h
    if not norm_first:
        x, norm_2 = layer_norm_forward(x, params["ln2_gamma"], params["ln2_beta"])
    h = x
    if norm_first:
        h, norm_3 = layer_norm_forward(x, params["ln3_gamma"], params["ln3_beta"])
    h, feed_forward = feed_forward_forward(h, _feed_forward_params(params), dropout, rng)
    h, dropout_3 = dropout_forward(h, dropout, rng, True)
    x = x + h
    if not norm_first:
        x, norm_3 = layer_norm_forward(x, params["ln3_gamma"], params["ln3_beta"])
    cache = DecoderBlockCache(
        norm_1,
        self_attention,
        dropout_1,
        norm_2,
        cross_attention,
        dropout_2,
        norm_3,
        feed_forward,
        dropout_3,
        norm_first,
    )
    return x, cache


def decoder_block_backward(dout: Array, cache: DecoderBlockCache) -> tuple[Array, Array, Params]:
    """Returns (dx, dmemory, dparams): the forward in reverse, the three residuals last first (the
    norm's backward first in post-norm, last on the branch in pre-norm); the memory's gradient is
    what the cross-attention's backward returns for its keys and values (dx_kv)."""
    grads: Params = {}
    dx = dout
    if not cache.norm_first:
        dx, grads["ln3_gamma"], grads["ln3_beta"] = layer_norm_backward(dx, cache.norm_3)
    dh = dropout_backward(dx, cache.dropout_3)
    dh, feed_forward = feed_forward_backward(dh, cache.feed_forward)
    grads.update(feed_forward)
    if cache.norm_first:
        dh, grads["ln3_gamma"], grads["ln3_beta"] = layer_norm_backward(dh, cache.norm_3)
    dx = dx + dh
    if not cache.norm_first:
        dx, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dx, cache.norm_2)
    dh = dropout_backward(dx, cache.dropout_2)
    if isinstance(cache.cross_attention, LatentAttentionCache):
        dh, dmemory, grads["cross_w_q_compress"], grads["cross_w_kv_decompress"], grads["cross_w_o"] = (
            multi_head_latent_attention_backward(dh, cache.cross_attention)
        )
    else:
        dh, dmemory, grads["cross_w_qkv"], grads["cross_w_o"], _, _ = multi_head_attention_backward(
            dh, cache.cross_attention
        )
    if cache.norm_first:
        dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dx + dh
    if not cache.norm_first:
        dx, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dx, cache.norm_1)
    dh = dropout_backward(dx, cache.dropout_1)
    if isinstance(cache.self_attention, LatentAttentionCache):
        dh, grads["self_w_q_compress"], grads["self_w_kv_decompress"], grads["self_w_o"] = (
            multi_head_latent_self_attention_backward(dh, cache.self_attention)
        )
    else:
        dh, grads["self_w_qkv"], grads["self_w_o"], _, _ = multi_head_self_attention_backward(
            dh, cache.self_attention
        )
    if cache.norm_first:
        dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, dmemory, grads


# ------------------------------------------------------------------------------------------------
# the stacks: N blocks, then a final layer norm


def _layer(params: Params, prefix: str) -> Params:
    return {key[len(prefix) :]: value for key, value in params.items() if key.startswith(prefix)}


class EncoderStackCache(NamedTuple):
    layers: list[EncoderBlockCache]
    norm: LayerNormCache


def encoder_stack_forward(
    x: Array,
    params: Params,
    mask: Array | None,
    n_layers: int,
    n_heads: int,
    norm_first: bool = True,
    dropout: float = 0.0,
    rng: Any = None,
) -> tuple[Array, EncoderStackCache]:
    """memory = norm(block_{N-1}(... block_0(x))): n_layers encoder blocks, then the final layer norm.

    x: (B, S, D); mask (B, 1, 1, S) or None; params: enc{i}_* for i < n_layers (layer i's keys of
    encoder_block_forward), enc_norm_gamma, enc_norm_beta (D,) -> memory: (B, S, D)
    """
    layers: list[EncoderBlockCache] = []
    for i in range(n_layers):
        x, layer = encoder_block_forward(
            x, _layer(params, f"enc{i}_"), mask, n_heads, norm_first, dropout, rng
        )
        layers.append(layer)
    memory, norm = layer_norm_forward(x, params["enc_norm_gamma"], params["enc_norm_beta"])
    return memory, EncoderStackCache(layers, norm)


def encoder_stack_backward(dout: Array, cache: EncoderStackCache) -> tuple[Array, Params]:
    """The forward in reverse: the final norm, then the blocks from the last to the first, each
    handed the gradient of the one above it; layer i's gradients named with its prefix enc{i}_."""
    grads: Params = {}
    dx, grads["enc_norm_gamma"], grads["enc_norm_beta"] = layer_norm_backward(dout, cache.norm)
    for i in reversed(range(len(cache.layers))):
        dx, layer = encoder_block_backward(dx, cache.layers[i])
        grads.update({f"enc{i}_{key}": value for key, value in layer.items()})
    return dx, grads


class DecoderStackCache(NamedTuple):
    layers: list[DecoderBlockCache]
    norm: LayerNormCache


def decoder_stack_forward(
    x: Array,
    memory: Array,
    params: Params,
    src_mask: Array | None,
    tgt_mask: Array | None,
    n_layers: int,
    n_heads: int,
    norm_first: bool = True,
    dropout: float = 0.0,
    rng: Any = None,
) -> tuple[Array, DecoderStackCache]:
    """y = norm(block_{N-1}(... block_0(x, memory) ..., memory)): n_layers decoder blocks, every one
    attending to the same memory, then the final layer norm.

    x: (B, T, D), memory: (B, S, D); params: dec{i}_* for i < n_layers (layer i's keys of
    decoder_block_forward), dec_norm_gamma, dec_norm_beta (D,) -> y: (B, T, D)
    """
    layers: list[DecoderBlockCache] = []
    for i in range(n_layers):
        x, layer = decoder_block_forward(
            x, memory, _layer(params, f"dec{i}_"), src_mask, tgt_mask, n_heads, norm_first, dropout, rng
        )
        layers.append(layer)
    y, norm = layer_norm_forward(x, params["dec_norm_gamma"], params["dec_norm_beta"])
    return y, DecoderStackCache(layers, norm)


def decoder_stack_backward(dout: Array, cache: DecoderStackCache) -> tuple[Array, Array, Params]:
    """Returns (dx, dmemory, dparams): the final norm, then the blocks from the last to the first.
    The memory feeds every block's cross-attention: its gradient is the sum of every block's dmemory."""
    grads: Params = {}
    dx, grads["dec_norm_gamma"], grads["dec_norm_beta"] = layer_norm_backward(dout, cache.norm)
    dmemory: Any = 0.0
    for i in reversed(range(len(cache.layers))):
        dx, dmemory_i, layer = decoder_block_backward(dx, cache.layers[i])
        dmemory = dmemory + dmemory_i
        grads.update({f"dec{i}_{key}": value for key, value in layer.items()})
    return dx, dmemory, grads


# ------------------------------------------------------------------------------------------------
# the output projection with the label-smoothed loss


class ProjectionLossCache(NamedTuple):
    projection: LinearCache
    loss: CrossEntropyCache


def projection_loss_forward(
    x: Array, targets: Array, params: Params, pad_id: int | None = 0, label_smoothing: float = 0.0
) -> tuple[float, ProjectionLossCache]:
    """loss = cross_entropy(x W^T + b, targets): the logits' mean label-smoothed cross-entropy over
    the targets that are not pad_id (the target distribution (1 - eps) one_hot + eps / V).

    x: (B, T, D), targets: (B, T) ids; params: weight (V, D), bias (V,) -> a float
    """
    logits, projection = linear_forward(x, params["weight"], params["bias"])
    loss, loss_cache = cross_entropy_forward(logits, targets, pad_id, label_smoothing)
    return loss, ProjectionLossCache(projection, loss_cache)


def projection_loss_backward(dloss: float, cache: ProjectionLossCache) -> tuple[Array, Params]:
    """The loss's backward (dlogits), then the projection's: -> (dx (B, T, D), {"weight", "bias"})."""
    dlogits = cross_entropy_backward(dloss, cache.loss)
    dx, dweight, dbias = linear_backward(dlogits, cache.projection)
    return dx, {"weight": dweight, "bias": dbias}


# ------------------------------------------------------------------------------------------------
# the whole encoder-decoder, its loss included


class EncoderDecoderCache(NamedTuple):
    src_embedding: EmbeddingWithPositionsCache
    encoder: EncoderStackCache
    tgt_embedding: EmbeddingWithPositionsCache
    decoder: DecoderStackCache
    output: ProjectionLossCache


def _part(params: Params, prefix: str) -> Params:
    return {key: value for key, value in params.items() if key.startswith(prefix)}


def masks(src: Array, tgt_in: Array, pad_id: int) -> tuple[Array, Array]:
    """The model's masks: the source's padding (B, 1, 1, S), the target's padding and future (B, 1, T, T)."""
    xp = get_array_module()
    length = tgt_in.shape[1]
    causal = xp.tril(xp.ones((length, length), dtype=bool))[None, None]
    return (src != pad_id)[:, None, None, :], (tgt_in != pad_id)[:, None, None, :] & causal


def encoder_decoder_forward(
    src: Array,
    tgt_in: Array,
    tgt_out: Array,
    params: Params,
    n_layers: int,
    n_heads: int,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    norm_first: bool = True,
    dropout: float = 0.0,
    rng: Any = None,
) -> tuple[float, EncoderDecoderCache]:
    """The mean label-smoothed cross-entropy of the whole Transformer on one batch:

    memory = EncoderStack(embed(src)), h = DecoderStack(embed(tgt_in), memory),
    loss = cross_entropy(h tgt_table^T + proj_bias, tgt_out), embed(ids) = dropout(table[ids] * sqrt(D) + PE)

    src: (B, S), tgt_in, tgt_out: (B, T) token ids (pad_id is padding). params: src_table (Vs, D),
    tgt_table (Vt, D) (tied: the output projection's weight is tgt_table too), proj_bias (Vt,),
    enc{i}_*, enc_norm_* (encoder_stack_forward's) and dec{i}_*, dec_norm_* (decoder_stack_forward's);
    dropout p and its generator rng, drawn in the model's order -> a float
    """
    src_mask, tgt_mask = masks(src, tgt_in, pad_id)
    x, src_embedding = embedding_with_positions_forward(src, {"table": params["src_table"]}, dropout, rng)
    memory, encoder = encoder_stack_forward(
        x, _part(params, "enc"), src_mask, n_layers, n_heads, norm_first, dropout, rng
    )
    y, tgt_embedding = embedding_with_positions_forward(tgt_in, {"table": params["tgt_table"]}, dropout, rng)
    y, decoder = decoder_stack_forward(
        y, memory, _part(params, "dec"), src_mask, tgt_mask, n_layers, n_heads, norm_first, dropout, rng
    )
    projection = {"weight": params["tgt_table"], "bias": params["proj_bias"]}
    loss, output = projection_loss_forward(y, tgt_out, projection, pad_id, label_smoothing)
    return loss, EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder, output)


def encoder_decoder_backward(dloss: float, cache: EncoderDecoderCache) -> Params:
    """Every parameter's gradient: the forward in reverse. The memory's gradient (every decoder
    layer's, added by the decoder stack) goes into the encoder stack; the tied tgt_table gets the
    projection's and the target embedding's gradients (they add)."""
    dy, output = projection_loss_backward(dloss, cache.output)
    dy, dmemory, grads = decoder_stack_backward(dy, cache.decoder)
    tgt_embedding = embedding_with_positions_backward(dy, cache.tgt_embedding)
    grads["tgt_table"] = output["weight"] + tgt_embedding["table"]
    grads["proj_bias"] = output["bias"]
    dx, encoder = encoder_stack_backward(dmemory, cache.encoder)
    grads.update(encoder)
    grads["src_table"] = embedding_with_positions_backward(dx, cache.src_embedding)["table"]
    return grads


def init_params(
    rng: Any,
    src_vocab: int,
    tgt_vocab: int,
    d_model: int,
    d_ff: int,
    N: int,
    scale: float = 0.5,
    attention: str = "mha",
) -> Params:
    """Random float64 parameters for encoder_decoder_forward (normal entries times ``scale``; a
    norm's gamma 1 + that; the projection's bias zero), its attentions multi-head ("mha") or latent ("mla")."""
    xp = get_array_module()

    def normal(*shape: int) -> Array:
        return xp.asarray(scale * rng.standard_normal(shape))

    params: Params = {"src_table": normal(src_vocab, d_model), "tgt_table": normal(tgt_vocab, d_model)}
    params["proj_bias"] = xp.zeros(tgt_vocab)  # the model's projection bias starts at zero too
    for i in range(N):
        params |= block_params(normal, d_model, d_ff, attention, decoder=False, prefix=f"enc{i}_")
    for i in range(N):
        params |= block_params(normal, d_model, d_ff, attention, decoder=True, prefix=f"dec{i}_")
    for prefix in ("enc_norm_", "dec_norm_"):
        params |= {f"{prefix}gamma": 1 + normal(d_model), f"{prefix}beta": normal(d_model)}
    return params


def block_params(
    normal: Any, d_model: int, d_ff: int, attention: str = "mha", decoder: bool = False, prefix: str = ""
) -> Params:
    """One block's parameters, ``normal(*shape)`` drawing each (a norm's gamma 1 + a draw), in the
    forward's order: the encoder block's keys (decoder False) or the decoder block's, each after ``prefix``."""
    d, latent = d_model, d_model // 4

    def norm(number: int) -> Params:
        return {f"ln{number}_gamma": 1 + normal(d), f"ln{number}_beta": normal(d)}

    def attend(name: str) -> Params:
        if attention == "mha":
            return {f"{name}w_qkv": normal(3 * d, d), f"{name}w_o": normal(d, d)}
        return {
            f"{name}w_q_compress": normal(d + latent, d),
            f"{name}w_kv_decompress": normal(2 * d, latent),
            f"{name}w_o": normal(d, d),
        }

    params = norm(1) | attend("self_" if decoder else "") | norm(2)
    if decoder:
        params |= attend("cross_") | norm(3)
    params |= {"w1": normal(d_ff, d), "b1": normal(d_ff), "w2": normal(d, d_ff), "b2": normal(d)}
    return {prefix + key: value for key, value in params.items()}
