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
    layer_norm_backward,
    linear_backward,
    relu_backward,
    embedding_backward,
    cross_entropy_backward,
    multi_head_attention_backward,
    multi_head_self_attention_backward,
    positional_encoding_backward,
    sinusoidal_table,
)
from numpy_transformer.workbook.blocks import (
    decoder_block_backward,
    encoder_block_backward,
    feed_forward_backward,
)
"""  # a block's mistakes call the textbook's layer backwards (imported: graded as the textbook's)


WHOLE = """
def encoder_decoder_backward(dloss, cache):
    grads = {}
    dlogits = cross_entropy_backward(dloss, cache.loss)
    dy, dprojection, _ = linear_backward(dlogits, cache.projection)
    dy, grads["dec_norm_gamma"], grads["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder_norm)
    dmemory = 0.0
    for i in reversed(range(cache.n_layers)):
        dy, dmemory_i, block = decoder_block_backward(dy, cache.decoder[i])
        dmemory = dmemory + dmemory_i
        grads.update({f"dec{i}_{key}": value for key, value in block.items()})
    grads["tgt_table"] = dprojection + embedding_backward(dy, cache.tgt_embedding)
    dx, grads["enc_norm_gamma"], grads["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder_norm)
    for i in reversed(range(cache.n_layers)):
        dx, block = encoder_block_backward(dx, cache.encoder[i])
        grads.update({f"enc{i}_{key}": value for key, value in block.items()})
    grads["src_table"] = embedding_backward(dx, cache.src_embedding)
    return grads
"""


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
        None,
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
        "factor",
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
        None,
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
        None,
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
        "zero",
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
        None,
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
    Mistake(
        "residual_backward",
        "residual_dropped",
        BLOCK_HEADER
        + """
def residual_backward(dout, cache):
    norm, sublayer, norm_first = cache
    if norm_first:
        dn, dw, db = linear_backward(dout, sublayer)
        dx, dg, dbeta = layer_norm_backward(dn, norm)  # the skip's dout never added
    else:
        ds, dg, dbeta = layer_norm_backward(dout, norm)
        dx, dw, db = linear_backward(ds, sublayer)
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
    norm, sublayer, norm_first = cache
    if norm_first:
        dn, dw, db = linear_backward(dout, sublayer)
        dx, dg, dbeta = layer_norm_backward(dn, norm)
        dx = dout + dx
    else:  # the norm's backward on the branch only, as if it were pre-norm
        ds, dg, dbeta = layer_norm_backward(dout, norm)
        dx, dw, db = linear_backward(ds, sublayer)
        dx = dout + dx
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
    dh = relu_backward(dh, cache.activation)
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
    dh, dw2, db2 = linear_backward(dout, cache.second)  # the relu forgotten
    dx, dw1, db1 = linear_backward(dh, cache.first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
""",
    ),
    Mistake(
        "encoder_block_backward",
        "residual_dropped",
        BLOCK_HEADER
        + """
def encoder_block_backward(dout, cache):
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dh  # the feed-forward residual's skip dropped
    dh, grads["w_qkv"], grads["w_o"], _, _ = multi_head_self_attention_backward(dx, cache.attention)
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, grads
""",
    ),
    Mistake(
        "encoder_block_backward",
        "norm_path",
        BLOCK_HEADER
        + """
def encoder_block_backward(dout, cache):
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dout + dh
    dh, grads["w_qkv"], grads["w_o"], _, _ = multi_head_self_attention_backward(dx, cache.attention)
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dx + dh, cache.norm_1)
    return dh, grads  # norm_1's backward on the sum: the skip's gradient passes through the norm
""",
    ),
    Mistake(
        "decoder_block_backward",
        "residual_dropped",
        BLOCK_HEADER
        + """
def decoder_block_backward(dout, cache):
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    dh, grads["ln3_gamma"], grads["ln3_beta"] = layer_norm_backward(dh, cache.norm_3)
    dx = dout + dh
    dh, dmemory, grads["cross_w_qkv"], grads["cross_w_o"], _, _ = multi_head_attention_backward(
        dx, cache.cross_attention
    )
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dh  # the cross-attention residual's skip dropped
    dh, grads["self_w_qkv"], grads["self_w_o"], _, _ = multi_head_self_attention_backward(dx, cache.self_attention)
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, dmemory, grads
""",
    ),
    Mistake(
        "decoder_block_backward",
        "norm_path",
        BLOCK_HEADER
        + """
def decoder_block_backward(dout, cache):
    dh, grads = feed_forward_backward(dout, cache.feed_forward)
    _, grads["ln3_gamma"], grads["ln3_beta"] = layer_norm_backward(dh, cache.norm_3)
    dx = dout + dh  # norm_3's backward left out of the feed-forward branch
    dh, dmemory, grads["cross_w_qkv"], grads["cross_w_o"], _, _ = multi_head_attention_backward(
        dx, cache.cross_attention
    )
    dh, grads["ln2_gamma"], grads["ln2_beta"] = layer_norm_backward(dh, cache.norm_2)
    dx = dx + dh
    dh, grads["self_w_qkv"], grads["self_w_o"], _, _ = multi_head_self_attention_backward(dx, cache.self_attention)
    dh, grads["ln1_gamma"], grads["ln1_beta"] = layer_norm_backward(dh, cache.norm_1)
    return dx + dh, dmemory, grads
""",
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
    Mistake(
        "encoder_decoder_backward",
        "memory_one_layer",
        BLOCK_HEADER
        + WHOLE.replace("dmemory = dmemory + dmemory_i", "dmemory = dmemory_i  # the last one seen wins"),
    ),
    Mistake(
        "encoder_decoder_backward",
        "tied_not_added",
        BLOCK_HEADER
        + WHOLE.replace("dprojection + embedding_backward(dy, cache.tgt_embedding)", "dprojection"),
    ),
    Mistake(
        "encoder_decoder_backward",
        "tied_not_added",
        BLOCK_HEADER
        + WHOLE.replace(
            "dprojection + embedding_backward(dy, cache.tgt_embedding)",
            "embedding_backward(dy, cache.tgt_embedding)",
        ),
    ),
]


def textbook_with(function: str, expected: str | None, *replacements: tuple[str, str]) -> Mistake:
    """The textbook's block ``function`` as a learner would copy it, with one mistake written in."""
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
ENCODER_ATTENTION = "multi_head_self_attention_backward(dx, cache.attention)"
DECODER_SELF = "multi_head_self_attention_backward(\n        dx, cache.self_attention\n    )"
DECODER_CROSS = "multi_head_attention_backward(\n        dx, cache.cross_attention\n    )"

BLOCK_MISTAKES = [  # a learner's own block-level mistakes, written into the textbook's blocks
    textbook_with("residual_backward", "residual_dropped", (PRE_SKIP, "dx = dbranch")),
    textbook_with("residual_backward", "residual_dropped", (PRE_SKIP, "dx = dout")),
    textbook_with("residual_backward", "norm_path", (PRE_SKIP, "dx = dout + dnormed")),
    textbook_with(
        "residual_backward",
        "norm_path",
        (PRE_SKIP, "dx = layer_norm_backward(dout + dnormed, norm_cache)[0]"),
    ),
    textbook_with("residual_backward", "residual_dropped", (POST_SUM, "dx = dsum")),
    textbook_with(
        "residual_backward", "norm_path", (POST_SUM, "dx = dout + linear_backward(dout, sublayer_cache)[0]")
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
    # the encoder block: two residuals
    textbook_with("encoder_block_backward", "residual_dropped", ("dx = dout + dh", "dx = dout")),
    textbook_with(
        "encoder_block_backward",
        "residual_dropped",
        (ENCODER_ATTENTION, ENCODER_ATTENTION.replace("(dx,", "(dout,")),
    ),
    textbook_with(
        "encoder_block_backward", "residual_dropped", ("return dx + dh, grads", "return dh, grads")
    ),
    textbook_with(
        "encoder_block_backward", "residual_dropped", ("return dx + dh, grads", "return dx, grads")
    ),
    textbook_with("encoder_block_backward", "norm_path", _norm_left_out(2)),
    textbook_with("encoder_block_backward", "norm_path", _norm_left_out(1)),
    textbook_with(
        "encoder_block_backward",
        "norm_path",
        (
            _norm(2) + "\n    dx = dout + dh",
            _norm_left_out(2)[1] + "\n    dx = layer_norm_backward(dout + dh, cache.norm_2)[0]",
        ),
    ),
    textbook_with("encoder_block_backward", "counted_twice", ("dx = dout + dh", "dx = dout + dh + dh")),
    textbook_with(
        "encoder_block_backward", "averaged", ("return dx + dh, grads", "return (dx + dh) / 2, grads")
    ),
    textbook_with("encoder_block_backward", "counted_twice", (_norm(1), _norm(1, "dh * 2"))),
    # the decoder block: three residuals and the memory
    textbook_with("decoder_block_backward", "residual_dropped", ("dx = dout + dh", "dx = dh")),
    textbook_with("decoder_block_backward", "residual_dropped", ("dx = dout + dh", "dx = dout")),
    textbook_with("decoder_block_backward", "residual_dropped", ("dx = dx + dh", "dx = dx")),
    textbook_with(
        "decoder_block_backward",
        "residual_dropped",
        ("return dx + dh, dmemory, grads", "return dh, dmemory, grads"),
    ),
    textbook_with(
        "decoder_block_backward",
        "residual_dropped",
        ("return dx + dh, dmemory, grads", "return dx, dmemory, grads"),
    ),
    textbook_with(
        "decoder_block_backward", "residual_dropped", (DECODER_CROSS, DECODER_CROSS.replace("dx,", "dout,"))
    ),
    textbook_with(
        "decoder_block_backward", "residual_dropped", (DECODER_SELF, DECODER_SELF.replace("dx,", "dout,"))
    ),
    textbook_with("decoder_block_backward", "norm_path", _norm_left_out(2)),
    textbook_with("decoder_block_backward", "norm_path", _norm_left_out(1)),
    textbook_with(
        "decoder_block_backward",
        "norm_path",
        (
            _norm(3) + "\n    dx = dout + dh",
            _norm_left_out(3)[1] + "\n    dx = layer_norm_backward(dout + dh, cache.norm_3)[0]",
        ),
    ),
    textbook_with(
        "decoder_block_backward",
        "norm_path",
        (
            _norm(2) + "\n    dx = dx + dh",
            _norm_left_out(2)[1] + "\n    dx = layer_norm_backward(dx + dh, cache.norm_2)[0]",
        ),
    ),
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
        (_norm(2), _norm(2).replace('"ln2_', '"ln1_')),
        (_norm(1), _norm(1).replace('"ln1_', '"ln2_')),
    ),
    # a piece handed another's cache, or another piece's gradient
    textbook_with(
        "encoder_block_backward", "wrong_cache", (_norm(2), _norm(2).replace("norm_2)", "norm_1)"))
    ),
    textbook_with(
        "decoder_block_backward", "wrong_cache", (_norm(3), _norm(3).replace("norm_3)", "norm_2)"))
    ),
    textbook_with("encoder_block_backward", "skipped", (_norm(2), _norm(2, "dout"))),
    textbook_with("decoder_block_backward", "skipped", (_norm(1), _norm(1, "dx"))),
    # a gradient added twice
    textbook_with(
        "decoder_block_backward",
        "counted_twice",
        ("return dx + dh, dmemory, grads", "return dx + dh, dmemory + dmemory, grads"),
    ),
    textbook_with(
        "encoder_block_backward", "counted_twice", ("return dx + dh, grads", "return dx + dh + dout, grads")
    ),
]

WHOLE_LOSS = "dlogits = cross_entropy_backward(dloss, cache.loss)"
INLINE_LOSS = """xp = get_array_module()
    probs, targets, valid, n_valid, eps, shape = cache.loss
    q = xp.full_like(probs, eps / shape[-1])
    q[xp.arange(len(targets)), targets] += 1.0 - eps
    dlogits = ((probs - q) * valid[:, None] * dloss / n_valid).reshape(shape)"""

WHOLE_MISTAKES = [  # the whole model's: the loss, the embeddings, the stacks, the norms
    textbook_with(
        "encoder_decoder_backward",
        "label_smoothing",
        (WHOLE_LOSS, INLINE_LOSS.replace("eps / shape[-1]", "0.0").replace("1.0 - eps", "1.0")),
    ),
    textbook_with(
        "encoder_decoder_backward", "token_count", (WHOLE_LOSS, INLINE_LOSS.replace(" / n_valid)", ")"))
    ),
    textbook_with(
        "encoder_decoder_backward",
        "token_count_pad",
        (WHOLE_LOSS, INLINE_LOSS.replace(" / n_valid)", " / len(targets))")),
    ),
    textbook_with(
        "encoder_decoder_backward", "padding_leak", (WHOLE_LOSS, INLINE_LOSS.replace(" * valid[:, None]", ""))
    ),
    textbook_with(
        "encoder_decoder_backward", "upstream", (WHOLE_LOSS, WHOLE_LOSS.replace("(dloss,", "(1.0,"))
    ),
    textbook_with(
        "encoder_decoder_backward",
        "positional_added",
        (
            "dy = positional_encoding_backward(dy, None)",
            "dy = dy + sinusoidal_table(dy.shape[1], dy.shape[2], dy.dtype)",
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "layer_order",
        (
            "for i in reversed(range(cache.n_layers)):\n        dy,",
            "for i in range(cache.n_layers):\n        dy,",
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "layer_order",
        (
            "for i in reversed(range(cache.n_layers)):\n        dx,",
            "for i in range(cache.n_layers):\n        dx,",
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "skipped",
        ("dmemory = 0.0", "dmemory, dtop = 0.0, dy"),
        ("embedding_backward(dy, cache.tgt_embedding)", "embedding_backward(dtop, cache.tgt_embedding)"),
    ),
    textbook_with(
        "encoder_decoder_backward", "skipped", ('dy, grads["dec_norm_gamma"]', '_, grads["dec_norm_gamma"]')
    ),
    textbook_with(
        "encoder_decoder_backward",
        "skipped",
        ('dx, grads["enc_norm_gamma"]', '_, grads["enc_norm_gamma"]'),
        (
            "layer_norm_backward(dmemory, cache.encoder_norm)",
            "layer_norm_backward(dmemory, cache.encoder_norm)\n    dx = dmemory",
        ),
    ),
    textbook_with(
        "encoder_decoder_backward",
        "memory_one_layer",
        ("dmemory = dmemory + dmemory_i", "dmemory = dmemory_i"),
    ),
]

MISTAKES += BLOCK_MISTAKES + WHOLE_MISTAKES


def solved_workbook(solved: tuple[str, ...] | None = None) -> str:
    """A fresh workbook with every stub (those of ``solved`` only, when given) replaced by the
    textbook's own backward (its source): the file of a learner who got everything right, for the
    tests that it passes every exercise."""
    import inspect
    import re

    from numpy_transformer import workbook

    text = workbook.writing.workbook_text()
    for exercise in workbook.EXERCISES:
        if solved is not None and exercise.backward not in solved:
            continue
        source = inspect.getsource(workbook.curriculum.textbook_function(exercise.backward))
        stub = re.compile(rf"def {exercise.backward}\(.*?\n    raise NotImplementedError\n", re.S)
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
