"""Plausible wrong backward passes, each as a learner would write it, with the mistake `learn check`
should name (a key of numpy_transformer.workbook.SENTENCES, or None where no sentence is promised)."""

from __future__ import annotations

from typing import NamedTuple

HEADER = """
import math

from numpy_transformer.backend import get_array_module
from numpy_transformer.functional import merge_heads, split_heads
"""


BLOCK_HEADER = """
from numpy_transformer.functional import (
    LatentAttentionCache,
    cross_entropy_backward,
    dropout_backward,
    embedding_backward,
    layer_norm_backward,
    linear_backward,
    multi_head_attention_backward,
    multi_head_latent_attention_backward,
    multi_head_latent_self_attention_backward,
    multi_head_self_attention_backward,
    positional_encoding_backward,
    relu_backward,
    sinusoidal_table,
)
from numpy_transformer.workbook.blocks import (
    decoder_block_backward,
    decoder_stack_backward,
    embedding_with_positions_backward,
    encoder_block_backward,
    encoder_stack_backward,
    feed_forward_backward,
    projection_loss_backward,
)
"""  # a block's mistakes call the textbook's layer backwards (imported: graded as the textbook's)


EMBEDDING = (
    BLOCK_HEADER
    + """
def embedding_with_positions_backward(dout, cache):
    xp = get_array_module()
    embedding = cache.embedding
    dx = dropout_backward(dout, cache.dropout)
    ids = embedding.ids.reshape(-1)
    rows = dx.reshape(-1, embedding.table_shape[1]) * embedding.scale
    dtable = xp.zeros(embedding.table_shape)
    xp.add.at(dtable, ids, rows)
    return {"table": dtable}
"""
)  # the embedding with positions as a learner writes it out, the lookup's backward inline


PROJECTION_LOSS = (
    BLOCK_HEADER
    + """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache.loss
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    dlogits = ((probs - q) * valid[:, None] * dloss / n_valid).reshape(shape)
    x, weight, _ = cache.projection
    dx = dlogits @ weight
    dweight = dlogits.reshape(-1, shape[-1]).T @ x.reshape(-1, x.shape[-1])
    return dx, {"weight": dweight, "bias": dlogits.reshape(-1, shape[-1]).sum(axis=0)}
"""
)  # the projection with its loss as a learner writes it out, the loss's backward inline


class Mistake(NamedTuple):
    function: str
    expected: str | None  # the SENTENCES key the report must give, or None
    source: str


MISTAKES = [
    Mistake(
        "linear_backward",
        "rows_sum",
        """
def linear_backward(dout, cache):
    x, weight, has_bias = cache
    dx = dout @ weight
    dweight = dout[..., :, None] * x[..., None, :]
    dbias = dout.reshape(-1, dout.shape[-1]).sum(axis=0) if has_bias else None
    return dx, dweight, dbias
""",
    ),
    Mistake(
        "linear_backward",
        "rows_sum",
        """
def linear_backward(dout, cache):
    x, weight, has_bias = cache
    rows, xr = dout.reshape(-1, dout.shape[-1]), x.reshape(-1, x.shape[-1])
    return dout @ weight, rows.T @ xr, (dout if has_bias else None)
""",
    ),
    Mistake(
        "linear_backward",
        "transposed",
        """
def linear_backward(dout, cache):
    x, weight, has_bias = cache
    rows, xr = dout.reshape(-1, dout.shape[-1]), x.reshape(-1, x.shape[-1])
    return dout @ weight, xr.T @ rows, (rows.sum(axis=0) if has_bias else None)
""",
    ),
    Mistake(
        "linear_backward",
        "sign",
        """
def linear_backward(dout, cache):
    x, weight, has_bias = cache
    rows, xr = dout.reshape(-1, dout.shape[-1]), x.reshape(-1, x.shape[-1])
    return -(dout @ weight), rows.T @ xr, (rows.sum(axis=0) if has_bias else None)
""",
    ),
    Mistake(
        "relu_backward",
        "relu_unmasked",
        """
def relu_backward(dout, cache):
    return dout
""",
    ),
    Mistake(
        "relu_backward",
        "sign",
        """
def relu_backward(dout, cache):
    return -dout * cache
""",
    ),
    Mistake(
        "dropout_backward",
        "dropout_scale",
        """
def dropout_backward(dout, cache):
    if cache is None:
        return dout
    return dout * cache.keep
""",
    ),
    Mistake(
        "dropout_backward",
        "dropout_mask",
        """
def dropout_backward(dout, cache):
    if cache is None:
        return dout
    return dout / cache.keep_prob
""",
    ),
    Mistake(
        "dropout_backward",
        "dropout_multiplied",
        """
def dropout_backward(dout, cache):
    if cache is None:
        return dout
    return dout * cache.keep * cache.keep_prob
""",
    ),
    Mistake(
        "softmax_backward",
        "softmax_row_sum",
        """
def softmax_backward(dout, cache):
    return cache * dout
""",
    ),
    Mistake(
        "softmax_backward",
        "softmax_axis",
        """
def softmax_backward(dout, cache):
    y = cache
    return y * (dout - (dout * y).sum(axis=0, keepdims=True))
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_mean",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    width = dout.shape[-1]
    return dx, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_var",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True))
    width = dout.shape[-1]
    return dx, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_both",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    return rstd * dout * gamma, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "rows_sum",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dout * xhat, dout.sum(axis=0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_rstd",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True)
    width = dout.shape[-1]
    return dx, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "embedding_backward",
        "repeated_ids",
        """
def embedding_backward(dout, cache):
    xp = get_array_module()
    ids, table_shape, scale = cache
    dtable = xp.zeros(table_shape)
    dtable[ids.reshape(-1)] = dout.reshape(-1, table_shape[1]) * scale
    return dtable
""",
    ),
    Mistake(
        "embedding_backward",
        "repeated_ids",
        """
def embedding_backward(dout, cache):
    xp = get_array_module()
    ids, table_shape, scale = cache
    dtable = xp.zeros(table_shape)
    dtable[ids.reshape(-1)] += dout.reshape(-1, table_shape[1]) * scale
    return dtable
""",
    ),
    Mistake(
        "embedding_backward",
        "embedding_scale",
        """
def embedding_backward(dout, cache):
    xp = get_array_module()
    ids, table_shape, scale = cache
    dtable = xp.zeros(table_shape)
    xp.add.at(dtable, ids.reshape(-1), dout.reshape(-1, table_shape[1]))
    return dtable
""",
    ),
    Mistake(
        "positional_encoding_backward",
        "positional_zero",
        """
def positional_encoding_backward(dout, cache):
    return 0 * dout
""",
    ),
    Mistake(
        "attention_backward",
        "scale_forgotten",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k, dscores.swapaxes(-1, -2) @ q, dv
""",
    ),
    Mistake(
        "attention_backward",
        "scale_twice",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True)) * scale
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "mask_leak",
        """
def attention_backward(dout, cache):
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "softmax_row_sum",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * dprobs
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "dropout_scale",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "dropout_dv",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = probs.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "token_count",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return ((probs - q) * valid[:, None] * dloss).reshape(shape)
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "token_count_pad",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return ((probs - q) * valid[:, None] * dloss / len(targets)).reshape(shape)
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "padding_leak",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return ((probs - q) * dloss / n_valid).reshape(shape)
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "label_smoothing",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.zeros_like(probs)
    q[xp.arange(len(targets)), targets] = 1.0
    return ((probs - q) * valid[:, None] * dloss / n_valid).reshape(shape)
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "sign",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return ((q - probs) * valid[:, None] * dloss / n_valid).reshape(shape)
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "upstream",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return ((probs - q) * valid[:, None] / n_valid).reshape(shape)
""",
    ),
    Mistake(
        "multi_head_attention_backward",
        "paths",
        """
from numpy_transformer.functional import attention_backward, linear_backward

def multi_head_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, db_o = linear_backward(dout, cache.output)
    h = cache.heads.n_heads
    dq, dk, dv = attention_backward(split_heads(dheads, h), cache.heads.attention)
    dx_q, dw_q, db_q = linear_backward(merge_heads(dq), cache.q)
    dx_k, dw_k, db_k = linear_backward(merge_heads(dk), cache.k)
    dx_v, dw_v, db_v = linear_backward(merge_heads(dv), cache.v)
    db_qkv = None if db_q is None else xp.concatenate([db_q, db_k, db_v])
    return dx_q, dx_k, xp.concatenate([dw_q, dw_k, dw_v]), dw_o, db_qkv, db_o
""",
    ),
    Mistake(
        "multi_head_attention_backward",
        "stack_order",
        """
from numpy_transformer.functional import attention_backward, linear_backward

def multi_head_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, db_o = linear_backward(dout, cache.output)
    h = cache.heads.n_heads
    dq, dk, dv = attention_backward(split_heads(dheads, h), cache.heads.attention)
    dx_q, dw_q, db_q = linear_backward(merge_heads(dq), cache.q)
    dx_k, dw_k, db_k = linear_backward(merge_heads(dk), cache.k)
    dx_v, dw_v, db_v = linear_backward(merge_heads(dv), cache.v)
    db_qkv = None if db_q is None else xp.concatenate([db_q, db_k, db_v])
    return dx_q, dx_k + dx_v, xp.concatenate([dw_k, dw_q, dw_v]), dw_o, db_qkv, db_o
""",
    ),
    Mistake(
        "multi_head_self_attention_backward",
        "paths",
        """
from numpy_transformer.functional import multi_head_attention_backward

def multi_head_self_attention_backward(dout, cache):
    dx_q, dx_kv, dw_qkv, dw_o, db_qkv, db_o = multi_head_attention_backward(dout, cache)
    return dx_q, dw_qkv, dw_o, db_qkv, db_o
""",
    ),
    Mistake(
        "multi_head_latent_attention_backward",
        "paths",
        """
from numpy_transformer.functional import linear_backward, multi_head_backward

def multi_head_latent_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, _ = linear_backward(dout, cache.output)
    dq, dk, dv = multi_head_backward(dheads, cache.heads)
    dlatent_k, dw_kd, _ = linear_backward(dk, cache.k)
    dlatent_v, dw_vd, _ = linear_backward(dv, cache.v)
    dx_kv, dw_c, _ = linear_backward(dlatent_k, cache.latent)
    dx_q, dw_q, _ = linear_backward(dq, cache.q)
    return dx_q, dx_kv, xp.concatenate([dw_q, dw_c]), xp.concatenate([dw_kd, dw_vd]), dw_o
""",
    ),
    Mistake(
        "multi_head_latent_self_attention_backward",
        "paths",
        """
from numpy_transformer.functional import multi_head_latent_attention_backward

def multi_head_latent_self_attention_backward(dout, cache):
    dx_q, dx_kv, dw_qc, dw_kvd, dw_o = multi_head_latent_attention_backward(dout, cache)
    return dx_kv, dw_qc, dw_kvd, dw_o
""",
    ),
    # a learner's slips at the layer level: the relu's mask, softmax's and layer norm's terms, the
    # attention's mask and scale, the loss's softmax, the positions, the heads, the stacked weights
    Mistake(
        "relu_backward",
        "relu_mask",
        """
def relu_backward(dout, cache):
    return dout * (dout > 0)
""",
    ),
    Mistake(
        "relu_backward",
        "relu_inverted",
        """
def relu_backward(dout, cache):
    xp = get_array_module()
    return xp.where(cache, 0.0, dout)
""",
    ),
    Mistake(
        "positional_encoding_backward",
        "positional_added",
        """
from numpy_transformer.functional import sinusoidal_table

def positional_encoding_backward(dout, cache):
    table = sinusoidal_table(16, dout.shape[-1], dout.dtype)
    return dout + table[: dout.shape[1]]
""",
    ),
    Mistake(
        "softmax_backward",
        "softmax_diagonal",
        """
def softmax_backward(dout, cache):
    y = cache
    return y * (1 - y) * dout
""",
    ),
    Mistake(
        "softmax_backward",
        "softmax_unweighted",
        """
def softmax_backward(dout, cache):
    y = cache
    return y * (dout - dout.sum(axis=-1, keepdims=True))
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_gamma",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    dx = rstd * (dout - dout.mean(axis=-1, keepdims=True) - xhat * (dout * xhat).mean(axis=-1, keepdims=True))
    width = dout.shape[-1]
    return dx, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_sum",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = rstd * (g - g.sum(axis=-1, keepdims=True) - xhat * (g * xhat).sum(axis=-1, keepdims=True))
    width = dout.shape[-1]
    return dx, (dout * xhat).reshape(-1, width).sum(0), dout.reshape(-1, width).sum(0)
""",
    ),
    Mistake(
        "layer_norm_backward",
        "ln_dgamma",
        """
def layer_norm_backward(dout, cache):
    xhat, rstd, gamma = cache
    g = dout * gamma
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    rows = dout.reshape(-1, dout.shape[-1])
    return dx, rows.sum(0), rows.sum(0)
""",
    ),
    Mistake(
        "embedding_backward",
        "repeated_ids",
        """
def embedding_backward(dout, cache):
    xp = get_array_module()
    ids, table_shape, scale = cache
    dtable = xp.zeros(table_shape)
    for b in range(ids.shape[0]):  # one sentence at a time: a repeat inside a sentence is overwritten
        dtable[ids[b]] += dout[b] * scale
    return dtable
""",
    ),
    Mistake(
        "attention_backward",
        "mask_inverted",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, 0.0, dscores)  # mask True read as "masked out"
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "softmax_axis",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-2, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q * scale, dv
""",
    ),
    Mistake(
        "attention_backward",
        "scale_forgotten",
        """
def attention_backward(dout, cache):
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout
    dprobs = dout @ v.swapaxes(-1, -2)
    if dropout_cache is not None:
        dprobs = dprobs * dropout_cache.keep / dropout_cache.keep_prob
    dscores = probs * (dprobs - (dprobs * probs).sum(axis=-1, keepdims=True))
    if mask is not None:
        dscores = xp.where(mask, dscores, 0.0)
    return dscores @ k * scale, dscores.swapaxes(-1, -2) @ q, dv  # the scale on dq only
""",
    ),
    Mistake(
        "cross_entropy_backward",
        "ce_probs",
        """
def cross_entropy_backward(dloss, cache):
    xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    return (-q / probs * valid[:, None] * dloss / n_valid).reshape(shape)  # d(-sum q log p)/dp
""",
    ),
    Mistake(
        "multi_head_attention_backward",
        "heads_reshape",
        """
from numpy_transformer.functional import attention_backward, linear_backward

def split(x, h):
    b, t, d = x.shape
    return x.reshape(b, h, t, d // h)

def merge(x):
    b, h, t, k = x.shape
    return x.reshape(b, t, h * k)

def multi_head_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, db_o = linear_backward(dout, cache.output)
    dq, dk, dv = attention_backward(split(dheads, cache.heads.n_heads), cache.heads.attention)
    dx_q, dw_q, db_q = linear_backward(merge(dq), cache.q)
    dx_k, dw_k, db_k = linear_backward(merge(dk), cache.k)
    dx_v, dw_v, db_v = linear_backward(merge(dv), cache.v)
    db_qkv = None if db_q is None else xp.concatenate([db_q, db_k, db_v])
    return dx_q, dx_k + dx_v, xp.concatenate([dw_q, dw_k, dw_v]), dw_o, db_qkv, db_o
""",
    ),
    Mistake(
        "multi_head_latent_attention_backward",
        "stack_order",
        """
from numpy_transformer.functional import linear_backward, multi_head_backward

def multi_head_latent_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, _ = linear_backward(dout, cache.output)
    dq, dk, dv = multi_head_backward(dheads, cache.heads)
    dlatent_k, dw_kd, _ = linear_backward(dk, cache.k)
    dlatent_v, dw_vd, _ = linear_backward(dv, cache.v)
    dx_kv, dw_c, _ = linear_backward(dlatent_k + dlatent_v, cache.latent)
    dx_q, dw_q, _ = linear_backward(dq, cache.q)
    return dx_q, dx_kv, xp.concatenate([dw_c, dw_q]), xp.concatenate([dw_kd, dw_vd]), dw_o
""",
    ),
    Mistake(
        "multi_head_latent_attention_backward",
        "paths",
        """
from numpy_transformer.functional import linear_backward, multi_head_backward

def multi_head_latent_attention_backward(dout, cache):
    xp = get_array_module()
    dheads, dw_o, _ = linear_backward(dout, cache.output)
    dq, dk, dv = multi_head_backward(dheads, cache.heads)
    dlatent_k, dw_kd, _ = linear_backward(dk, cache.k)
    dlatent_v, dw_vd, _ = linear_backward(dv, cache.v)
    dx_kv_k, dw_c, _ = linear_backward(dlatent_k, cache.latent)  # W_c's gradient from the keys' path
    dx_kv_v, _, _ = linear_backward(dlatent_v, cache.latent)
    dx_q, dw_q, _ = linear_backward(dq, cache.q)
    return dx_q, dx_kv_k + dx_kv_v, xp.concatenate([dw_q, dw_c]), xp.concatenate([dw_kd, dw_vd]), dw_o
""",
    ),
    Mistake(
        "residual_backward",
        "residual_dropped",
        BLOCK_HEADER
        + """
def residual_backward(dout, cache):
    norm, sublayer, dropped, norm_first = cache
    if norm_first:
        dn, dw, db = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx, dg, dbeta = layer_norm_backward(dn, norm)  # the skip's dout never added
    else:
        ds, dg, dbeta = layer_norm_backward(dout, norm)
        dx, dw, db = linear_backward(dropout_backward(ds, dropped), sublayer)
        dx = dx + ds
    return dx, {"gamma": dg, "beta": dbeta, "weight": dw, "bias": db}
""",
    ),
    Mistake(
        "residual_backward",
        "norm_path",
        BLOCK_HEADER
        + """
def residual_backward(dout, cache):
    norm, sublayer, dropped, norm_first = cache
    if norm_first:
        dn, dw, db = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx, dg, dbeta = layer_norm_backward(dn, norm)
        dx = dout + dx
    else:  # the norm's backward on the branch only, as if it were pre-norm
        ds, dg, dbeta = layer_norm_backward(dout, norm)
        dx, dw, db = linear_backward(dropout_backward(ds, dropped), sublayer)
        dx = dout + dx
    return dx, {"gamma": dg, "beta": dbeta, "weight": dw, "bias": db}
""",
    ),
    Mistake(
        "residual_backward",
        "dropout_skipped",
        BLOCK_HEADER
        + """
def residual_backward(dout, cache):
    norm, sublayer, dropped, norm_first = cache  # the branch's dropout forgotten on the way back
    if norm_first:
        dn, dw, db = linear_backward(dout, sublayer)
        dx, dg, dbeta = layer_norm_backward(dn, norm)
        dx = dout + dx
    else:
        ds, dg, dbeta = layer_norm_backward(dout, norm)
        dx, dw, db = linear_backward(ds, sublayer)
        dx = ds + dx
    return dx, {"gamma": dg, "beta": dbeta, "weight": dw, "bias": db}
""",
    ),
    Mistake(
        "feed_forward_backward",
        "transposed",
        BLOCK_HEADER
        + """
def feed_forward_backward(dout, cache):
    dh, dw2, db2 = linear_backward(dout, cache.second)
    dh = relu_backward(dropout_backward(dh, cache.dropout), cache.activation)
    dx, dw1, db1 = linear_backward(dh, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2.T.copy() if dw2.shape[0] == dw2.shape[1] else dw2.T, "b2": db2}
""",
    ),
    Mistake(
        "feed_forward_backward",
        "relu_skipped",
        BLOCK_HEADER
        + """
def feed_forward_backward(dout, cache):
    dh, dw2, db2 = linear_backward(dout, cache.second)
    dh = dropout_backward(dh, cache.dropout)  # the relu forgotten
    dx, dw1, db1 = linear_backward(dh, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
""",
    ),
    Mistake(
        "feed_forward_backward",
        "dropout_skipped",
        BLOCK_HEADER
        + """
def feed_forward_backward(dout, cache):
    dh, dw2, db2 = linear_backward(dout, cache.second)
    dh = relu_backward(dh, cache.activation)  # the hidden units' dropout forgotten
    dx, dw1, db1 = linear_backward(dh, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
""",
    ),
    Mistake(
        "feed_forward_backward",
        "dropout_scale",
        BLOCK_HEADER
        + """
def feed_forward_backward(dout, cache):
    dh, dw2, db2 = linear_backward(dout, cache.second)
    if cache.dropout is not None:
        dh = dh * cache.dropout.keep  # the mask without its 1 / (1 - p)
    dh = relu_backward(dh, cache.activation)
    dx, dw1, db1 = linear_backward(dh, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
""",
    ),
    # the embedding with positions, written by hand
    Mistake(
        "embedding_with_positions_backward",
        "embedding_scale",
        EMBEDDING.replace(" * embedding.scale", ""),
    ),
    Mistake(
        "embedding_with_positions_backward",
        "dropout_skipped",
        EMBEDDING.replace("dx = dropout_backward(dout, cache.dropout)", "dx = dout"),
    ),
    Mistake(
        "embedding_with_positions_backward",
        "dropout_scale",
        EMBEDDING.replace(
            "dx = dropout_backward(dout, cache.dropout)",
            "dx = dout if cache.dropout is None else dout * cache.dropout.keep",
        ),
    ),
    Mistake(
        "embedding_with_positions_backward",
        "positional_added",
        EMBEDDING.replace(
            "dx = dropout_backward(dout, cache.dropout)",
            "dx = dropout_backward(dout, cache.dropout) + sinusoidal_table(dout.shape[1], dout.shape[2], dout.dtype)",
        ),
    ),
    Mistake(
        "embedding_with_positions_backward",
        "repeated_ids",
        EMBEDDING.replace("xp.add.at(dtable, ids, rows)", "dtable[ids] = rows"),
    ),
    # the projection with its loss, written by hand
    Mistake(
        "projection_loss_backward",
        "label_smoothing",
        PROJECTION_LOSS.replace("eps / shape[-1]", "0.0").replace("1.0 - eps", "1.0"),
    ),
    Mistake("projection_loss_backward", "token_count", PROJECTION_LOSS.replace(" / n_valid", "")),
    Mistake(
        "projection_loss_backward", "token_count_pad", PROJECTION_LOSS.replace("/ n_valid", "/ len(targets)")
    ),
    Mistake("projection_loss_backward", "padding_leak", PROJECTION_LOSS.replace(" * valid[:, None]", "")),
    Mistake("projection_loss_backward", "upstream", PROJECTION_LOSS.replace(" * dloss", "")),
    Mistake(
        "projection_loss_backward",
        "rows_sum",
        PROJECTION_LOSS.replace("dlogits.reshape(-1, shape[-1]).sum(axis=0)", "dlogits.sum(axis=0)"),
    ),
    Mistake(
        "decoder_block_backward",
        "memory_dropped",
        BLOCK_HEADER
        + """
def decoder_block_backward(dout, cache):
    dx, dmemory, grads = decoder_block_backward_textbook(dout, cache)
    return dx, 0 * dmemory, grads  # the memory's gradient dropped


from numpy_transformer.workbook.blocks import decoder_block_backward as decoder_block_backward_textbook
""",
    ),
]


def textbook_with(function: str, expected: str | None, *replacements: tuple[str, str]) -> Mistake:
    """The textbook's block ``function`` as a learner would copy it, with one mistake written in
    (each replacement made wherever its text occurs: in a pre-norm and a post-norm branch alike)."""
    import inspect
    import re

    from numpy_transformer.workbook import blocks

    source = inspect.getsource(getattr(blocks, function))
    source = re.sub(r"def (\w+)\((\w+).*?\) -> .*?:\n", r"def \1(\2, cache):\n", source, count=1, flags=re.S)
    for old, new in replacements:
        assert old in source, (function, old)
        source = source.replace(old, new)
    return Mistake(function, expected, BLOCK_HEADER + source)


def _norm(number: int, gradient: str = "dh") -> str:
    grads = f'grads["ln{number}_gamma"], grads["ln{number}_beta"]'
    return f"dh, {grads} = layer_norm_backward({gradient}, cache.norm_{number})"


def _norm_left_out(number: int) -> tuple[str, str]:
    return _norm(number), _norm(number).replace("dh, grads", "_, grads", 1)


PRE_SKIP = "dx = dout + dbranch"
POST_SUM = "dx = dsum + dbranch"
PRE_ORDER = ("if not cache.norm_first:", "if False:"), ("if cache.norm_first:", "if True:")  # post as pre
POST_ORDER = ("if not cache.norm_first:", "if True:"), ("if cache.norm_first:", "if False:")  # pre as post
LATENT_SELF = 'dh, grads["w_q_compress"], grads["w_kv_decompress"], grads["w_o"] = (\n'
LATENT_SELF += "            multi_head_latent_self_attention_backward(dh, cache.attention)"
DECODER_LATENT_CROSS = (
    'dh, dmemory, grads["cross_w_q_compress"], grads["cross_w_kv_decompress"], grads["cross_w_o"]'
)
DECODER_MHA_CROSS = "multi_head_attention_backward(\n            dh, cache.cross_attention\n        )"

BLOCK_MISTAKES = [  # a learner's own block-level mistakes, written into the textbook's blocks
    textbook_with("residual_backward", "residual_dropped", (PRE_SKIP, "dx = dbranch")),
    textbook_with("residual_backward", "branch_dropped", (PRE_SKIP, "dx = dout")),
    textbook_with("residual_backward", "norm_path", (PRE_SKIP, "dx = dout + dnormed")),
    textbook_with(
        "residual_backward",
        "norm_path",
        (PRE_SKIP, "dx = layer_norm_backward(dout + dnormed, norm_cache)[0]"),
    ),
    textbook_with("residual_backward", "branch_dropped", (POST_SUM, "dx = dsum")),
    textbook_with(
        "residual_backward", "norm_path", (POST_SUM, "dx = dout + linear_backward(dout, sublayer_cache)[0]")
    ),
    textbook_with(
        "residual_backward", "norm_path", ("if norm_first:", "if True:")
    ),  # post-norm in pre-norm order
    textbook_with(
        "residual_backward", "norm_path", ("if norm_first:", "if False:")
    ),  # pre-norm in post-norm order
    textbook_with(
        "residual_backward",
        "dropout_skipped",
        ("dbranch = dropout_backward(dout, dropped)", "dbranch = dout"),
    ),
    textbook_with(
        "residual_backward",
        "dropout_scale",
        (
            "dbranch = dropout_backward(dsum, dropped)",
            "dbranch = dsum if dropped is None else dsum * dropped.keep",
        ),
    ),
    textbook_with(
        "feed_forward_backward",
        "relu_mask",
        ("dhidden = relu_backward(dhidden, cache.activation)", "dhidden = dhidden * (dhidden > 0)"),
    ),
    textbook_with(
        "feed_forward_backward",
        "swapped",
        ('{"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}', '{"w1": dw1, "b1": db2, "w2": dw2, "b2": db1}'),
    ),
    textbook_with(
        "feed_forward_backward",
        "stray_factor",
        (
            "dhidden = relu_backward(dhidden, cache.activation)",
            "dhidden = relu_backward(dhidden, cache.activation) * 0.5",
        ),
    ),
    textbook_with(
        "feed_forward_backward",
        "dropout_skipped",
        ("    dhidden = dropout_backward(dhidden, cache.dropout)\n", ""),
    ),
    # the encoder block: two residuals, pre- or post-norm, either attention
    textbook_with("encoder_block_backward", "residual_dropped", ("dx = dx + dh", "dx = dh")),
    textbook_with("encoder_block_backward", "branch_dropped", ("dx = dx + dh", "dx = dx")),
    textbook_with(
        "encoder_block_backward", "residual_dropped", ("return dx + dh, grads", "return dh, grads")
    ),
    textbook_with("encoder_block_backward", "branch_dropped", ("return dx + dh, grads", "return dx, grads")),
    textbook_with("encoder_block_backward", "norm_path", _norm_left_out(2)),
    textbook_with("encoder_block_backward", "norm_path", _norm_left_out(1)),
    textbook_with("encoder_block_backward", "norm_path", *PRE_ORDER),
    textbook_with("encoder_block_backward", "norm_path", *POST_ORDER),
    textbook_with(
        "encoder_block_backward",
        "norm_path",
        (
            'dx, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dx, cache.norm_2)',
            '_, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dx, cache.norm_2)',
        ),
    ),
    textbook_with("encoder_block_backward", "counted_twice", ("dx = dx + dh", "dx = dx + dh + dh")),
    textbook_with(
        "encoder_block_backward", "averaged", ("return dx + dh, grads", "return (dx + dh) / 2, grads")
    ),
    textbook_with("encoder_block_backward", "counted_twice", (_norm(1), _norm(1, "dh * 2"))),
    textbook_with(
        "encoder_block_backward", "dropout_skipped", ("dh = dropout_backward(dx, cache.dropout_2)", "dh = dx")
    ),
    textbook_with(
        "encoder_block_backward", "dropout_skipped", ("dh = dropout_backward(dx, cache.dropout_1)", "dh = dx")
    ),
    textbook_with(
        "encoder_block_backward",
        "swapped",
        (
            'grads["w_q_compress"], grads["w_kv_decompress"]',
            'grads["w_kv_decompress"], grads["w_q_compress"]',
        ),
    ),
    textbook_with(
        "encoder_block_backward",
        "paths",
        (LATENT_SELF, LATENT_SELF.replace("dh, grads", "dh, _, grads").replace("latent_self", "latent")),
    ),  # the latent self-attention's x given its queries' gradient only
    # the decoder block: three residuals and the memory
    textbook_with("decoder_block_backward", "residual_dropped", ("dx = dx + dh", "dx = dh")),
    textbook_with(
        "decoder_block_backward",
        "residual_dropped",
        ("return dx + dh, dmemory, grads", "return dh, dmemory, grads"),
    ),
    textbook_with(
        "decoder_block_backward",
        "branch_dropped",
        ("return dx + dh, dmemory, grads", "return dx, dmemory, grads"),
    ),
    textbook_with("decoder_block_backward", "norm_path", _norm_left_out(2)),
    textbook_with("decoder_block_backward", "norm_path", _norm_left_out(3)),
    textbook_with("decoder_block_backward", "norm_path", *PRE_ORDER),
    textbook_with("decoder_block_backward", "norm_path", *POST_ORDER),
    textbook_with(
        "decoder_block_backward",
        "stray_factor",
        ("return dx + dh, dmemory, grads", "return dx + dh, dmemory * 0.5, grads"),
    ),
    textbook_with(
        "decoder_block_backward",
        "swapped",
        ('grads["cross_w_qkv"], grads["cross_w_o"]', 'grads["self_w_qkv"], grads["self_w_o"]'),
        (
            'grads["self_w_qkv"], grads["self_w_o"], _, _ = multi_head_self',
            'grads["cross_w_qkv"], grads["cross_w_o"], _, _ = multi_head_self',
        ),
    ),
    textbook_with(
        "decoder_block_backward",
        "swapped",
        (DECODER_LATENT_CROSS, DECODER_LATENT_CROSS.replace("cross_w_q_compress", "self_w_q_compress")),
        (
            'grads["self_w_q_compress"], grads["self_w_kv_decompress"]',
            'grads["cross_w_q_compress"], grads["self_w_kv_decompress"]',
        ),
    ),  # the latent attentions' compressions under each other's keys
    textbook_with(
        "decoder_block_backward", "dropout_skipped", ("dh = dropout_backward(dx, cache.dropout_2)", "dh = dx")
    ),
    textbook_with(
        "decoder_block_backward", "dropout_skipped", ("dh = dropout_backward(dx, cache.dropout_3)", "dh = dx")
    ),
    textbook_with(
        "decoder_block_backward",
        "counted_twice",
        ("return dx + dh, dmemory, grads", "return dx + dh, dmemory + dmemory, grads"),
    ),
    # returned under the wrong key, or with the wrong layout
    textbook_with(
        "feed_forward_backward",
        "swapped",
        ('{"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}', '{"w1": dw2, "b1": db1, "w2": dw1, "b2": db2}'),
    ),
    textbook_with("feed_forward_backward", "rows_sum", ('"b2": db2}', '"b2": dout.sum(axis=0)}')),
    textbook_with(
        "residual_backward", "swapped", ('{"gamma": dgamma, "beta": dbeta', '{"gamma": dbeta, "beta": dgamma')
    ),
    textbook_with("residual_backward", "transposed", ('"weight": dweight,', '"weight": dweight.T,')),
    textbook_with(
        "encoder_block_backward",
        "swapped",
        ('grads["ln2_', 'grads["lnX_'),
        ('grads["ln1_', 'grads["ln2_'),
        ('grads["lnX_', 'grads["ln1_'),
    ),
    # a piece handed another's cache, or another piece's gradient
    textbook_with("encoder_block_backward", "wrong_cache", ("cache.norm_2)", "cache.norm_1)")),
    textbook_with("decoder_block_backward", "wrong_cache", ("cache.norm_3)", "cache.norm_2)")),
    textbook_with("encoder_block_backward", "skipped", (_norm(2), _norm(2, "dout"))),
    textbook_with("decoder_block_backward", "skipped", (_norm(1), _norm(1, "dx"))),
    textbook_with(
        "encoder_block_backward", "counted_twice", ("return dx + dh, grads", "return dx + dh + dout, grads")
    ),
    # the stacks: N blocks and a final norm
    textbook_with(
        "encoder_stack_backward",
        "final_norm_skipped",
        ('dx, grads["enc_norm_gamma"]', '_, grads["enc_norm_gamma"]'),
        ("cache.norm)\n", "cache.norm)\n    dx = dout\n"),
    ),
    textbook_with(
        "encoder_stack_backward",
        "layer_order",
        ("reversed(range(len(cache.layers)))", "range(len(cache.layers))"),
    ),
    textbook_with(
        "encoder_stack_backward",
        "not_chained",
        ("dx, layer = encoder_block_backward(dx,", "dx_i, layer = encoder_block_backward(dx,"),
        ("    return dx, grads", "    return dx_i, grads"),
    ),  # every layer handed the final norm's gradient
    textbook_with(
        "encoder_stack_backward", "swapped", ('f"enc{i}_{key}"', 'f"enc{len(cache.layers) - 1 - i}_{key}"')
    ),
    textbook_with(
        "decoder_stack_backward", "memory_one_layer", ("dmemory = dmemory + dmemory_i", "dmemory = dmemory_i")
    ),
    textbook_with(
        "decoder_stack_backward",
        "memory_one_layer",
        ("dmemory = dmemory + dmemory_i", "dmemory = dmemory_i if i == len(cache.layers) - 1 else dmemory"),
    ),
    textbook_with(
        "decoder_stack_backward",
        "final_norm_skipped",
        ('dx, grads["dec_norm_gamma"]', '_, grads["dec_norm_gamma"]'),
        ("cache.norm)\n", "cache.norm)\n    dx = dout\n"),
    ),
    textbook_with(
        "decoder_stack_backward",
        "layer_order",
        ("reversed(range(len(cache.layers)))", "range(len(cache.layers))"),
    ),
    textbook_with(
        "decoder_stack_backward",
        "memory_averaged",  # was "a constant the forward does not have": 1 / the layers, its own constant
        ("return dx, dmemory, grads", "return dx, dmemory / len(cache.layers), grads"),
    ),
]

WHOLE_MISTAKES = [  # the whole model's: the tied table, the memory, the loss's upstream gradient
    textbook_with(
        "encoder_decoder_backward",
        "tied_not_added",
        (
            'grads["tgt_table"] = output["weight"] + tgt_embedding["table"]',
            'grads["tgt_table"] = output["weight"]',
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "tied_not_added",
        (
            'grads["tgt_table"] = output["weight"] + tgt_embedding["table"]',
            'grads["tgt_table"] = tgt_embedding["table"]',
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "upstream",
        ("projection_loss_backward(dloss, cache.output)", "projection_loss_backward(1.0, cache.output)"),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "memory_swapped",
        ("encoder_stack_backward(dmemory, cache.encoder)", "encoder_stack_backward(dy, cache.encoder)"),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "positional_added",
        (
            "embedding_with_positions_backward(dy, cache.tgt_embedding)",
            "embedding_with_positions_backward(dy + sinusoidal_table(dy.shape[1], dy.shape[2], dy.dtype), "
            "cache.tgt_embedding)",
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "skipped",
        (
            "embedding_with_positions_backward(dx, cache.src_embedding)",
            "embedding_with_positions_backward(dmemory, cache.src_embedding)",
        ),
    ),  # the encoder stack left out of the source embedding's path
]

MISTAKES += BLOCK_MISTAKES + WHOLE_MISTAKES


def solved_workbook(solved: tuple[str, ...] | None = None) -> str:
    """A fresh workbook with every stub (those of ``solved`` only, when given) replaced by the
    textbook's own backward (its source), each training rung by a learner's right one: the file of a
    learner who got everything right, for the tests that it passes every exercise."""
    import inspect
    import re

    from learn_training_rungs import CORRECT

    from numpy_transformer import workbook

    text = workbook.writing.workbook_text()
    for name in workbook.LADDER:
        if solved is not None and name not in solved:
            continue
        if (
            name in CORRECT
        ):  # a training rung: as a learner writes it (the textbook's calls optim.py's classes)
            source = CORRECT[name].lstrip("\n")
        else:
            source = inspect.getsource(workbook.exercises.textbook_function(name))
        stub = re.compile(rf"def {name}\(.*?\n    raise NotImplementedError\n", re.S)
        text = stub.sub(lambda _, source=source: source, text, count=1)
    return text + (
        "\n\nfrom numpy_transformer.functional import multi_head_backward  # noqa: E402 (the textbook's helper)\n"
    )


# a learner's blocks that call the aids and the package's own blocks (learn check passes them; they train)
BLOCKS_ON_THE_TEXTBOOK = """from numpy_transformer.workbook import blocks
from numpy_transformer.workbook import textbook


def feed_forward_backward(dout, cache):
    found = textbook(cache, dout)
    return found["dx"], {name: found["d" + name] for name in ("w1", "b1", "w2", "b2")}


def encoder_block_backward(dout, cache):
    return blocks.encoder_block_backward(dout, cache)
"""
