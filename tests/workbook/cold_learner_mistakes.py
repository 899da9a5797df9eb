# ruff: noqa: E501  (the learner's code as they wrote it)
"""A learner's own block-level mistakes, made cold (the workbook's source closed), one at a time into
their correct workbook: each as the function(s) they changed, with the cause `learn check` should name:
a key of numpy_transformer.workbook.SENTENCES, or a phrase of the grader's own message where the cause
is told there (a write in place, a missing key), or None where no cause is promised.

Written first against the blocks before dropout, post-norm and latent attention; ported since to the
current blocks: their correct functions read the caches by name, take each dropout's backward, and
undo a post-norm block (cache.norm_first) and latent attention (a LatentAttentionCache) as well; each
mistake is the same change to the ported function, its post-norm residuals' on the post-norm path,
the others' on the pre-norm path they were written for. All 96 exist on the current blocks."""

from __future__ import annotations

from typing import NamedTuple

COLD_HEADER = """
from numpy_transformer.backend import get_array_module
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
)
from numpy_transformer.workbook.blocks import (
    decoder_block_backward,
    encoder_block_backward,
    feed_forward_backward,
)
"""  # the learner's other functions were right: the textbook's stand in for them


class ColdMistake(NamedTuple):
    id: str
    function: str
    expected: str | None  # a key of SENTENCES, a phrase of the grader's message, or None
    mistake: str  # the learner's one line
    source: str
    header: str = COLD_HEADER  # what the learner's file imports (the textbook's stand-ins)


# the learner's five block functions, ported to the current blocks and right: each mistake below is a
# change to one of them
COLD_CORRECT = """
def residual_backward(dout, cache):
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}

def feed_forward_backward(dout, cache):
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}

def encoder_block_backward(dout, cache):
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams

def decoder_block_backward(dout, cache):
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams

def encoder_decoder_backward(dloss, cache):
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
"""

COLD_MISTAKES = [
    ColdMistake(
        "R01",
        "residual_backward",
        "residual_dropped",
        "pre-norm: skip path forgotten (dx = branch only)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R02",
        "residual_backward",
        "branch_dropped",
        "pre-norm: branch forgotten (dx = dout only)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R03",
        "residual_backward",
        "norm_path",
        "pre-norm: layer norm backward left out of branch (dx = dout + dnormed)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dnormed
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R04",
        "residual_backward",
        "skipped",
        "pre-norm: layer norm fed dout instead of the linear's dx",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R05",
        "residual_backward",
        "norm_path",
        "post-norm: skip takes dout, not the norm's gradient (norm on branch only)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dout + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R06",
        "residual_backward",
        "residual_dropped",
        "post-norm: skip forgotten (dx = branch only)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R07",
        "residual_backward",
        "post_norm_order",
        "post-norm: linear undone before the norm (norm applied after the sum on the way back)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx, dgamma, dbeta = layer_norm_backward(dout + dx_branch, norm)
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R08",
        "residual_backward",
        "post_norm_order",
        "norm_first flag ignored: always pre-norm formula",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if True:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R09",
        "residual_backward",
        "averaged",
        "pre-norm: paths averaged instead of added",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = (dout + dx_norm) / 2
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R10",
        "residual_backward",
        "swapped",
        "gamma and beta gradients returned under each other's keys",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dbeta, "beta": dgamma, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R11",
        "residual_backward",
        "transposed",
        "weight gradient transposed (square D x D)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight.T, "bias": dbias}
''',
    ),
    ColdMistake(
        "R12",
        "residual_backward",
        "counted_twice",
        "pre-norm: branch counted twice",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + 2 * dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R13",
        "residual_backward",
        "post_norm_order",
        "post-norm: the two backwards swapped: linear fed dout, norm fed the linear's dx, skip takes dout",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dsum, dgamma, dbeta = layer_norm_backward(dx_branch, norm)
        dx = dsum + dout
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R14",
        "residual_backward",
        "rows_sum",
        "pre-norm: bias gradient summed over the first axis only",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm; dbias = dropout_backward(dout, dropped).sum(axis=0)
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R15",
        "residual_backward",
        "skipped",
        "post-norm: the branch's linear fed dout instead of the norm's gradient",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R16",
        "residual_backward",
        "linear_dx_transposed",
        "pre-norm: hand-written linear dx uses W^T instead of W (square)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer); dnormed = dropout_backward(dout, dropped) @ sublayer.weight.T
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer)
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "R17",
        "residual_backward",
        "transposed",
        "post-norm: hand-written dweight = x^T dout (transposed, square)",
        '''
def residual_backward(dout, cache):
    """Gradient of a residual connection around a linear sublayer f, its branch through dropout:
        pre-norm y = x + dropout(f(norm(x))) or post-norm y = norm(x + dropout(f(x))).

        dout: (..., D); cache: ResidualCache(norm, sublayer, dropout, norm_first), dropout the
        branch's DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): dparams a dict with params' keys gamma, beta (D,), weight
        (D, D), bias (D,).
    """
    norm, sublayer, dropped, norm_first = cache.norm, cache.sublayer, cache.dropout, cache.norm_first
    if norm_first:
        dnormed, dweight, dbias = linear_backward(dropout_backward(dout, dropped), sublayer)
        dx_norm, dgamma, dbeta = layer_norm_backward(dnormed, norm)
        dx = dout + dx_norm
    else:
        dsum, dgamma, dbeta = layer_norm_backward(dout, norm)
        dx_branch, dweight, dbias = linear_backward(dropout_backward(dsum, dropped), sublayer); dweight = sublayer.x.reshape(-1, sublayer.x.shape[-1]).T @ dropout_backward(dsum, dropped).reshape(-1, dsum.shape[-1])
        dx = dsum + dx_branch
    return dx, {"gamma": dgamma, "beta": dbeta, "weight": dweight, "bias": dbias}
''',
    ),
    ColdMistake(
        "F01",
        "feed_forward_backward",
        "relu_skipped",
        "relu backward left out",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = dropout_backward(dhidden, dropped)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F02",
        "feed_forward_backward",
        "relu_mask",
        "relu mask taken from the gradient instead of the forward input",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = dropout_backward(dhidden, dropped); dhidden = dhidden * (dhidden > 0)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F03",
        "feed_forward_backward",
        "piece_order",
        "layers undone in forward order (first linear first)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw1, db1 = linear_backward(dout, first)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw2, db2 = linear_backward(dhidden, second)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F04",
        "feed_forward_backward",
        "swapped",
        "b1 and b2 gradients returned under swapped keys",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db2, "w2": dw2, "b2": db1}
''',
    ),
    ColdMistake(
        "F05",
        "feed_forward_backward",
        "transposed",
        "w1 gradient transposed (non-square)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1.T, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F06",
        "feed_forward_backward",
        "relu_place",
        "relu backward at the wrong place (on dout, mask from the gradient)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(relu_backward(dout, dout > 0), second)
    dhidden = dropout_backward(dhidden, dropped)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F07",
        "feed_forward_backward",
        "stray_factor",
        "bias b2 gradient not summed over batch (kept per-position, mean instead of sum)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": dout.reshape(-1, dout.shape[-1]).mean(axis=0)}
''',
    ),
    ColdMistake(
        "F08",
        "feed_forward_backward",
        "changed its cache in place",
        "writes into the cache's relu mask (mutates cache)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation); activation[..., 0] = True
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "F09",
        "feed_forward_backward",
        "stray_factor",
        "w2 gradient divided by the batch size (averaged instead of summed)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2 / dout.shape[0], "b2": db2}
''',
    ),
    ColdMistake(
        "F10",
        "feed_forward_backward",
        "relu_inverted",
        "relu mask inverted (~mask)",
        '''
def feed_forward_backward(dout, cache):
    """Gradient of the feed-forward block y = dropout(relu(x W1^T + b1)) W2^T + b2.

        dout: (..., D); cache: FeedForwardCache(first, activation, dropout, second), dropout the
        hidden units' DropoutCache (None when p = 0).
        Returns (dx (..., D), dparams): a dict with the keys w1, b1, w2, b2.
    """
    first, activation, dropped, second = cache.first, cache.activation, cache.dropout, cache.second
    dhidden, dw2, db2 = linear_backward(dout, second)
    dhidden = relu_backward(dropout_backward(dhidden, dropped), ~activation)
    dx, dw1, db1 = linear_backward(dhidden, first)
    return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}
''',
    ),
    ColdMistake(
        "E01",
        "encoder_block_backward",
        "residual_dropped",
        "skip forgotten at the feed-forward residual",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E02",
        "encoder_block_backward",
        "residual_dropped",
        "skip forgotten at the attention residual",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E03",
        "encoder_block_backward",
        "norm_path",
        "norm_2's backward left out (branch gradient added directly)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dh
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E04",
        "encoder_block_backward",
        "cache_swapped",
        "norm_1 and norm_2 caches swapped",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_1)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_2)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E05",
        "encoder_block_backward",
        "branch_dropped",
        "attention branch fed dout instead of the gradient after the FF residual",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dout, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E06",
        "encoder_block_backward",
        "piece_order",
        "residuals undone in forward order (attention residual first)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh = dropout_backward(dout, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dmid = dout + dx1
        dh, ff = feed_forward_backward(dropout_backward(dmid, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dx = dmid + dx2
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E07",
        "encoder_block_backward",
        "paths",
        "self-attention treated as cross-attention: only dx_q kept (k,v paths dropped)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, _dkv, w_qkv, w_o, _, _ = multi_head_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E08",
        "encoder_block_backward",
        "changed dout in place",
        "dout mutated in place (dout += dx2)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout; dmid += dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E09",
        "encoder_block_backward",
        "swapped",
        "ln1 and ln2 gamma gradients under swapped keys",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln2_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln1_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E10",
        "encoder_block_backward",
        "transposed",
        "w_o gradient transposed",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o.T}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E11",
        "encoder_block_backward",
        "averaged",
        "paths averaged at the FF residual",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = (dout + dx2) / 2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E12",
        "encoder_block_backward",
        "skipped",
        "norm_2's backward fed dout instead of the FF branch gradient",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E13",
        "encoder_block_backward",
        "norm_path",
        "FF residual treated as post-norm (norm after the sum)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid = dsum + dh
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E14",
        "encoder_block_backward",
        "dparams lacks",
        "feed-forward's dparams never merged (keys w1..b2 missing)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    return dx, dparams
''',
    ),
    ColdMistake(
        "E15",
        "encoder_block_backward",
        "counted_twice",
        "dout counted twice at the attention residual (dx = dout + dmid + dx1)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dout + dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E16",
        "encoder_block_backward",
        "wrong_function",
        "wrong layer function: latent self-attention backward called on an MHA cache",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o = multi_head_latent_self_attention_backward(dh, attention)[:3]
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E17",
        "encoder_block_backward",
        "skipped",
        "norm_1's backward fed the gradient from above the attention (attention skipped in dx)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + layer_norm_backward(dmid, norm_1)[0]
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E18",
        "encoder_block_backward",
        "rows_sum",
        "ln2_beta hand-summed over axis 0 only",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": dh.sum(axis=0)}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E19",
        "encoder_block_backward",
        "dtype",
        "dx cast to float32 (dtype drift)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = (dmid + dx1).astype('float32')
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E20",
        "encoder_block_backward",
        "qkv_part",
        "w_qkv gradient of q rows only kept (k and v rows zeroed)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid + dx1
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv * (get_array_module().arange(w_qkv.shape[0]) < w_qkv.shape[1])[:, None], "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "E21",
        "encoder_block_backward",
        "branch_dropped",
        "attention residual's branch dropped from dx (dx = dmid)",
        '''
def encoder_block_backward(dout, cache):
    """Gradient of an encoder block: self-attention then feed-forward, each inside a residual
        connection with its own norm and its branch through dropout; pre-norm x = x +
        dropout(f(norm(x))) or post-norm x = norm(x + dropout(f(x))) (cache.norm_first says which).

        dout: (B, S, D); cache: EncoderBlockCache(norm_1, attention, dropout_1, norm_2, feed_forward,
        dropout_2, norm_first).
        Returns (dx (B, S, D), dparams): a dict with the keys ln1_gamma, ln1_beta, ln2_gamma, ln2_beta,
        w1, b1, w2, b2 and the attention's: w_qkv (3D, D) and w_o (D, D) where cache.attention is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, attention, norm_2, feed_forward = cache.norm_1, cache.attention, cache.norm_2, cache.feed_forward
    latent = isinstance(attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_2), feed_forward)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        dmid = dout + dx2
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = dmid
    else:
        dsum, ln2_gamma, ln2_beta = layer_norm_backward(dout, norm_2)
        dh, ff = feed_forward_backward(dropout_backward(dsum, cache.dropout_2), feed_forward)
        dmid, ln1_gamma, ln1_beta = layer_norm_backward(dsum + dh, norm_1)
        dh = dropout_backward(dmid, cache.dropout_1)
        if latent:
            dh, w_q_compress, w_kv_decompress, w_o = multi_head_latent_self_attention_backward(dh, attention)
        else:
            dh, w_qkv, w_o, _, _ = multi_head_self_attention_backward(dh, attention)
        dx = dmid + dh
    if latent:
        dattn = {"w_q_compress": w_q_compress, "w_kv_decompress": w_kv_decompress, "w_o": w_o}
    else:
        dattn = {"w_qkv": w_qkv, "w_o": w_o}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, **dattn,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta}
    dparams.update(ff)
    return dx, dparams
''',
    ),
    ColdMistake(
        "D01",
        "decoder_block_backward",
        "memory_dropped",
        "dmemory dropped (returned zeros)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, 0 * dmemory, dparams
''',
    ),
    ColdMistake(
        "D02",
        "decoder_block_backward",
        "shape",
        "dmemory returned as the cross-attention's dx_q (wrong output of MHA)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dmemory, dh, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D03",
        "decoder_block_backward",
        "different_tensors",
        "cross-attention treated as self-attention: dx_q + dx_kv sent into x",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh + dmemory, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D04",
        "decoder_block_backward",
        "swapped",
        "self_w_o and cross_w_o returned under swapped keys",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": cross_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": self_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D05",
        "decoder_block_backward",
        "cache_swapped",
        "norm_2 and norm_3 caches swapped",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_2)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_3)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D06",
        "decoder_block_backward",
        "residual_dropped",
        "skip forgotten at the cross-attention residual",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D07",
        "decoder_block_backward",
        "branch_dropped",
        "self-attention residual's skip built from dout instead of d2",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = dout + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D08",
        "decoder_block_backward",
        "cache_swapped",
        "self-attention backward handed the cross-attention's cache",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, cross_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D09",
        "decoder_block_backward",
        "piece_order",
        "residuals undone in forward order (self-attn, cross-attn, FF)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh = dropout_backward(dout, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        d1 = dout + dx1
        dh = dropout_backward(d1, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d2 = d1 + dx2
        dh, ff = feed_forward_backward(dropout_backward(d2, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        dx = d2 + dx3
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D10",
        "decoder_block_backward",
        "transposed",
        "cross_w_o transposed",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o.T,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D11",
        "decoder_block_backward",
        "stray_factor",
        "dmemory halved (thought K and V share it: averaged instead of summed)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory / 2, dparams
''',
    ),
    ColdMistake(
        "D12",
        "decoder_block_backward",
        "skipped",
        "norm_3's backward fed dout instead of the FF branch's gradient",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D13",
        "decoder_block_backward",
        "changed dout in place",
        "dout mutated in place at the FF residual (d2 = dout; d2 += dx3)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout; d2 += dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D14",
        "decoder_block_backward",
        "branch_dropped",
        "cross-attention fed dout instead of the gradient after the FF residual",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(dout, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D15",
        "decoder_block_backward",
        "dparams lacks",
        "ln3_beta key missing from dparams",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D16",
        "decoder_block_backward",
        "swapped",
        "self-attention's w_qkv returned as cross_w_qkv (cross's never)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": self_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D17",
        "decoder_block_backward",
        "wrong_cache",
        "norm_3's backward handed norm_1's cache (norm_1's used twice)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_1)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D18",
        "decoder_block_backward",
        "wrong_function",
        "wrong layer function: self-attention backward used on the cross-attention",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, cross_w_qkv, cross_w_o, _, _ = multi_head_self_attention_backward(dh, cross_attention); dmemory = dh
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "D19",
        "decoder_block_backward",
        "foreign_term",
        "dmemory gets an extra term added (the x-path gradient's mean over positions)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln2_gamma, "ln2_beta": ln2_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln3_gamma, "ln3_beta": ln3_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory + d2.mean(axis=1, keepdims=True), dparams
''',
    ),
    ColdMistake(
        "D20",
        "decoder_block_backward",
        "swapped",
        "ln2's gradients returned as ln3's and vice versa (all four keys)",
        '''
def decoder_block_backward(dout, cache):
    """Gradient of a decoder block: causal self-attention, cross-attention over the encoder's
        output memory, feed-forward, each inside a residual connection with its own norm and its
        branch through dropout, pre-norm or post-norm (cache.norm_first).

        dout: (B, T, D); cache: DecoderBlockCache(norm_1, self_attention, dropout_1, norm_2,
        cross_attention, dropout_2, norm_3, feed_forward, dropout_3, norm_first).
        Returns (dx (B, T, D), dmemory (B, S, D), dparams): a dict with the keys ln1_*, ln2_*, ln3_*
        (gamma, beta), w1, b1, w2, b2, and each attention's under self_ (cross_): w_qkv (3D, D) and w_o (D, D) where cache.self_attention (cache.cross_attention) is a
        MultiHeadAttentionCache; w_q_compress (D + L, D), w_kv_decompress (2D, L) and w_o (D, D)
        where it is a LatentAttentionCache (L = D / 4).
    """
    norm_1, self_attention, norm_2, cross_attention, norm_3, feed_forward = (
        cache.norm_1, cache.self_attention, cache.norm_2, cache.cross_attention, cache.norm_3, cache.feed_forward
    )
    latent = isinstance(self_attention, LatentAttentionCache)
    if cache.norm_first:
        dh, ff = feed_forward_backward(dropout_backward(dout, cache.dropout_3), feed_forward)
        dx3, ln3_gamma, ln3_beta = layer_norm_backward(dh, norm_3)
        d2 = dout + dx3
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        dx2, ln2_gamma, ln2_beta = layer_norm_backward(dh, norm_2)
        d1 = d2 + dx2
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx1, ln1_gamma, ln1_beta = layer_norm_backward(dh, norm_1)
        dx = d1 + dx1
    else:
        d3, ln3_gamma, ln3_beta = layer_norm_backward(dout, norm_3)
        dh, ff = feed_forward_backward(dropout_backward(d3, cache.dropout_3), feed_forward)
        d2, ln2_gamma, ln2_beta = layer_norm_backward(d3 + dh, norm_2)
        dh = dropout_backward(d2, cache.dropout_2)
        if latent:
            dh, dmemory, cross_w_q_compress, cross_w_kv_decompress, cross_w_o = multi_head_latent_attention_backward(dh, cross_attention)
        else:
            dh, dmemory, cross_w_qkv, cross_w_o, _, _ = multi_head_attention_backward(dh, cross_attention)
        d1, ln1_gamma, ln1_beta = layer_norm_backward(d2 + dh, norm_1)
        dh = dropout_backward(d1, cache.dropout_1)
        if latent:
            dh, self_w_q_compress, self_w_kv_decompress, self_w_o = multi_head_latent_self_attention_backward(dh, self_attention)
        else:
            dh, self_w_qkv, self_w_o, _, _ = multi_head_self_attention_backward(dh, self_attention)
        dx = d1 + dh
    if latent:
        dattn = {"self_w_q_compress": self_w_q_compress, "self_w_kv_decompress": self_w_kv_decompress,
                 "cross_w_q_compress": cross_w_q_compress, "cross_w_kv_decompress": cross_w_kv_decompress}
    else:
        dattn = {"self_w_qkv": self_w_qkv, "cross_w_qkv": cross_w_qkv}
    dparams = {"ln1_gamma": ln1_gamma, "ln1_beta": ln1_beta, "self_w_o": self_w_o,
               "ln2_gamma": ln3_gamma, "ln2_beta": ln3_beta, "cross_w_o": cross_w_o,
               "ln3_gamma": ln2_gamma, "ln3_beta": ln2_beta, **dattn}
    dparams.update(ff)
    return dx, dmemory, dparams
''',
    ),
    ColdMistake(
        "M01",
        "encoder_decoder_backward",
        "tied_not_added",
        "tied table: projection's gradient not added (embedding's only)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding)
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M02",
        "encoder_decoder_backward",
        "tied_not_added",
        "tied table: embedding's gradient not added (projection's only)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M03",
        "encoder_decoder_backward",
        "memory_one_layer",
        "dmemory overwritten in the loop (only decoder layer 0's kept)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M04",
        "encoder_decoder_backward",
        "memory_one_layer",
        "dmemory taken from the top decoder layer only",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dm if i == n_layers - 1 else dmemory
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M05",
        "encoder_decoder_backward",
        "layer_order",
        "decoder layers undone in forward order",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in range(n_layers):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M06",
        "encoder_decoder_backward",
        "layer_order",
        "encoder layers undone in forward order",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in range(n_layers):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M07",
        "encoder_decoder_backward",
        "label_smoothing",
        "own loss gradient: label smoothing forgotten",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    xp = get_array_module()
    lc = cache.output.loss
    oh = xp.zeros_like(lc.probs); oh[xp.arange(oh.shape[0]), lc.targets] = 1.0
    dlogits = ((lc.probs - oh) * lc.valid[:, None] * (dloss / lc.n_valid)).reshape(lc.shape)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M08",
        "encoder_decoder_backward",
        "padding_leak",
        "own loss gradient: padding counted (valid ignored, mean over all tokens)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    xp = get_array_module()
    lc = cache.output.loss
    n, v = lc.probs.shape
    q = xp.full_like(lc.probs, lc.label_smoothing / v); q[xp.arange(n), lc.targets] += 1.0 - lc.label_smoothing
    dlogits = ((lc.probs - q) * (dloss / n)).reshape(lc.shape)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M09",
        "encoder_decoder_backward",
        "token_count",
        "own loss gradient: sum instead of mean (no / n_valid)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    xp = get_array_module()
    lc = cache.output.loss
    n, v = lc.probs.shape
    q = xp.full_like(lc.probs, lc.label_smoothing / v); q[xp.arange(n), lc.targets] += 1.0 - lc.label_smoothing
    dlogits = ((lc.probs - q) * lc.valid[:, None] * dloss).reshape(lc.shape)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M10",
        "encoder_decoder_backward",
        "upstream",
        "dloss ignored (1.0 assumed)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(1.0, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M11",
        "encoder_decoder_backward",
        "skipped",
        "encoder's final norm skipped (dmemory straight into the encoder stack)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    _, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm); dx = dmemory
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M12",
        "encoder_decoder_backward",
        "skipped",
        "decoder's final norm skipped",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    _, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M13",
        "encoder_decoder_backward",
        "skipped",
        "target embedding fed the gradient from above the decoder stack",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dtop = dy
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dtop, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M14",
        "encoder_decoder_backward",
        "swapped",
        "encoder layers' gradients named with reversed index",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{n_layers - 1 - i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M15",
        "encoder_decoder_backward",
        "swapped",
        "enc_norm and dec_norm gammas swapped",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["enc_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["dec_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M16",
        "encoder_decoder_backward",
        "not_chained",
        "every encoder layer fed the gradient from the final norm (not chained)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dtop, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dtop, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M17",
        "encoder_decoder_backward",
        "stray_factor",
        "dmemory averaged over decoder layers",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory / n_layers, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M18",
        "encoder_decoder_backward",
        "subtracted",
        "projection's gradient subtracted from the tied table (sign)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) - dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M19",
        "encoder_decoder_backward",
        "skipped",
        "src embedding fed the gradient from the encoder's final norm (encoder stack's result dropped)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(layer_norm_backward(dmemory, cache.encoder.norm)[0], cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M20",
        "encoder_decoder_backward",
        "cache_swapped",
        "src and tgt embedding caches swapped",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.src_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.tgt_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M21",
        "encoder_decoder_backward",
        None,
        "projection's dweight computed with the decoder norm's xhat instead of its output (the projection input)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection); _xh = cache.decoder.norm.xhat; dproj = dlogits.reshape(-1, dlogits.shape[-1]).T @ _xh.reshape(-1, _xh.shape[-1])
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M22",
        "encoder_decoder_backward",
        "transposed",
        "projection's gradient transposed before adding to the tied table",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj.T
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M23",
        "encoder_decoder_backward",
        "counted_twice",
        "each decoder layer's dmemory counted twice",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + 2 * dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M24",
        "encoder_decoder_backward",
        "stray_factor",
        "cross-entropy backward handed dloss divided by the batch size again",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss / cache.src_embedding.embedding.ids.shape[0], cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M25",
        "encoder_decoder_backward",
        "padding_leak",
        "own loss gradient: padding counted but divided by n_valid",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    xp = get_array_module()
    lc = cache.output.loss
    n, v = lc.probs.shape
    q = xp.full_like(lc.probs, lc.label_smoothing / v); q[xp.arange(n), lc.targets] += 1.0 - lc.label_smoothing
    dlogits = ((lc.probs - q) * (dloss / lc.n_valid)).reshape(lc.shape)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M26",
        "encoder_decoder_backward",
        "changed its cache in place",
        "own loss gradient written in place into the cache's probs (p[t] -= 1)",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    xp = get_array_module()
    lc = cache.output.loss
    n, v = lc.probs.shape
    d = lc.probs
    d -= lc.label_smoothing / v
    d[xp.arange(n), lc.targets] -= 1.0 - lc.label_smoothing
    dlogits = (d * lc.valid[:, None] * (dloss / lc.n_valid)).reshape(lc.shape)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M27",
        "encoder_decoder_backward",
        "embedding_scale_twice",  # was "a constant the forward does not have": the constant is its own
        "target embedding's scale sqrt(D) applied again by hand",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy * cache.tgt_embedding.embedding.scale, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dx, cache.src_embedding.embedding)
    return dparams
''',
    ),
    ColdMistake(
        "M28",
        "encoder_decoder_backward",
        "skipped",
        "src embedding handed the decoder-side gradient (dy) instead of the encoder's dx",
        '''
def encoder_decoder_backward(dloss, cache):
    """Gradient of the whole Transformer's loss with respect to every parameter.

        dloss: a float; cache: EncoderDecoderCache(src_embedding, encoder, tgt_embedding, decoder,
        output): the embeddings' EmbeddingWithPositionsCache, the stacks' EncoderStackCache and
        DecoderStackCache, the ProjectionLossCache (its weight is tgt_table, its bias proj_bias).
        Returns dparams: a dict with every key of params (src_table, tgt_table, proj_bias, enc{i}_*,
        enc_norm_*, dec{i}_*, dec_norm_*).
    """
    dparams = {}
    n_layers = len(cache.decoder.layers)
    dlogits = cross_entropy_backward(dloss, cache.output.loss)
    dy, dproj, dparams["proj_bias"] = linear_backward(dlogits, cache.output.projection)
    dy, dparams["dec_norm_gamma"], dparams["dec_norm_beta"] = layer_norm_backward(dy, cache.decoder.norm)
    dmemory = 0.0
    for i in reversed(range(n_layers)):
        dy, dm, dp = decoder_block_backward(dy, cache.decoder.layers[i])
        dmemory = dmemory + dm
        for key, value in dp.items():
            dparams[f"dec{i}_{key}"] = value
    dy = positional_encoding_backward(dropout_backward(dy, cache.tgt_embedding.dropout), None)
    dparams["tgt_table"] = embedding_backward(dy, cache.tgt_embedding.embedding) + dproj
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dmemory, cache.encoder.norm)
    for i in reversed(range(n_layers)):
        dx, dp = encoder_block_backward(dx, cache.encoder.layers[i])
        for key, value in dp.items():
            dparams[f"enc{i}_{key}"] = value
    dx = positional_encoding_backward(dropout_backward(dx, cache.src_embedding.dropout), None)
    dparams["src_table"] = embedding_backward(dy, cache.src_embedding.embedding)
    return dparams
''',
    ),
]


# ------------------------------------------------------------------------------------------------
# A second learner, cold as well (never shown the package's source), on the rungs above the blocks:
# the embedding with positions, the two stacks, the projection with its loss and the whole model.
# They solved all 22 exercises, then made 51 mistakes of their own, one at a time into their solved
# workbook; each is the one function they changed (its docstring left out), numbered as they
# numbered it. Their other functions were right: the textbook's stand in for them here.

COLD_RUNG_HEADER = """
from numpy_transformer.backend import get_array_module
from numpy_transformer.functional import (
    cross_entropy_backward,
    dropout_backward,
    embedding_backward,
    layer_norm_backward,
    linear_backward,
    positional_encoding_backward,
)
from numpy_transformer.workbook.blocks import (
    decoder_block_backward,
    decoder_stack_backward,
    embedding_with_positions_backward,
    encoder_block_backward,
    encoder_stack_backward,
    projection_loss_backward,
)
"""

# their five functions of these rungs, right: each mistake below is a change to one of them
COLD_RUNG_CORRECT = """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    dx = positional_encoding_backward(dx, None)
    return {"table": embedding_backward(dx, embedding)}

def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams

def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams

def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}

def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
"""

COLD_RUNG_MISTAKES = [
    ColdMistake(
        "N01",
        "embedding_with_positions_backward",
        "dropout_skipped",
        "left dropout_backward out",
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    return {"table": embedding_backward(dout, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N02",
        "embedding_with_positions_backward",
        "dropout_scale",
        "inline dropout dout*keep, no /keep_prob",
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dout if dropped is None else dout * dropped.keep
    return {"table": embedding_backward(dx, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N03",
        "embedding_with_positions_backward",
        "embedding_scale_twice",
        "multiplied by sqrt(D) myself AND called embedding_backward (scale twice)",
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    return {"table": embedding_backward(dx * embedding.scale, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N04",
        "embedding_with_positions_backward",
        "embedding_scale",
        'divided by sqrt(D) "to undo the scale" before embedding_backward',
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    return {"table": embedding_backward(dx / embedding.scale, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N05",
        "embedding_with_positions_backward",
        "repeated_ids",
        "own scatter dtable[ids] += ... (repeated ids)",
        """
def embedding_with_positions_backward(dout, cache):
    xp = get_array_module()
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    dtable = xp.zeros(embedding.table_shape, dtype=dx.dtype)
    dtable[embedding.ids] += dx * embedding.scale
    return {"table": dtable}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N06",
        "embedding_with_positions_backward",
        "must return dparams as a dict",
        'returned the bare array, not {"table": ...}',
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    return embedding_backward(dx, embedding)
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N07",
        "embedding_with_positions_backward",
        "embedding_scale",
        "own add.at scatter without the sqrt(D) scale",
        """
def embedding_with_positions_backward(dout, cache):
    xp = get_array_module()
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    dtable = xp.zeros(embedding.table_shape, dtype=dx.dtype)
    xp.add.at(dtable, embedding.ids, dx)
    return {"table": dtable}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N38",
        "embedding_with_positions_backward",
        "dropout_none",
        "inline dropout without the cache is None (p=0) check",
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dout * dropped.keep / dropped.keep_prob
    return {"table": embedding_backward(dx, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N47",
        "embedding_with_positions_backward",
        "changed dout in place",
        "dout *= keep; dout /= keep_prob in place",
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    if dropped is not None:
        dout *= dropped.keep
        dout /= dropped.keep_prob
    return {"table": embedding_backward(dout, embedding)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N48",
        "embedding_with_positions_backward",
        "has keys params has not",
        'also returned a "positions" gradient',
        """
def embedding_with_positions_backward(dout, cache):
    embedding, dropped = cache
    dx = dropout_backward(dout, dropped)
    return {"table": embedding_backward(dx, embedding), "positions": dx.sum(axis=0)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N08",
        "encoder_stack_backward",
        "final_norm_skipped",
        "final norm's param grads computed but layers fed dout (norm skipped on the path)",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    _, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    dx = dout
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N09",
        "encoder_stack_backward",
        "layer_order",
        "layers undone in forward order (range(n))",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in range(len(layers)):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N10",
        "encoder_stack_backward",
        "final_norm_last",
        "final norm's backward done LAST (after the layers)",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx = dout
    dparams = {}
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    dx, dparams["enc_norm_gamma"], dparams["enc_norm_beta"] = layer_norm_backward(dx, norm)
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N11",
        "encoder_stack_backward",
        "not_chained",
        "every layer handed the post-norm gradient (not chained)",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dnorm, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dnorm, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N12",
        "encoder_stack_backward",
        "swapped",
        "enumerate(reversed(layers)) -> layer names swapped",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i, layer in enumerate(reversed(layers)):
        dx, p = encoder_block_backward(dx, layer)
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N13",
        "encoder_stack_backward",
        "counted_twice",
        "added an extra skip around each block (dx = dx + block_dx)",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in reversed(range(len(layers))):
        dh, p = encoder_block_backward(dx, layers[i])
        dx = dx + dh
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N14",
        "encoder_stack_backward",
        "dparams lacks",
        "dparams.update(p) without the enc{i}_ prefix",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dx, layers[i])
        dparams.update(p)
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N39",
        "encoder_stack_backward",
        "wrong_cache",
        'used layers[-1].norm_2 as "the final norm"',
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, layers[-1].norm_2)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in reversed(range(len(layers))):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N40",
        "encoder_stack_backward",
        "dparams lacks",
        "range(n-1, 0, -1) skips layer 0",
        """
def encoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"enc_norm_gamma": dgamma, "enc_norm_beta": dbeta}
    for i in range(len(layers) - 1, 0, -1):
        dx, p = encoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"enc{i}_{key}"] = value
    return dx, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N15",
        "decoder_stack_backward",
        "memory_one_layer",
        "dmemory overwritten each layer (keeps layer 0's)",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dx, dmemory, p = decoder_block_backward(dx, layers[i])
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N16",
        "decoder_stack_backward",
        "memory_one_layer",
        "dmemory kept from the top layer only",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        if dmemory is None:
            dmemory = dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N17",
        "decoder_stack_backward",
        "memory_averaged",
        "dmemory averaged over layers",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    dms = []
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dms.append(dm)
        dmemory = sum(dms) / len(dms)
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N18",
        "decoder_stack_backward",
        "final_norm_skipped",
        "final norm skipped on the path",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    _, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    dx = dout
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N19",
        "decoder_stack_backward",
        "layer_order",
        "layers in forward order",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in range(len(layers)):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N20",
        "decoder_stack_backward",
        "shape",
        "unpacked dm, dx, p = decoder_block_backward(...)",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dm, dx, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N21",
        "decoder_stack_backward",
        "not_chained",
        "not chained (each layer handed the post-norm gradient)",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    dtop = dx
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dtop, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N22",
        "decoder_stack_backward",
        "different_tensors",
        "added each layer's dmemory into dx",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        dx = dx + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N41",
        "decoder_stack_backward",
        "zeros_shape",
        "dmemory = xp.zeros_like(dx) then dmemory + dm (accumulator shaped like x)",
        """
def decoder_stack_backward(dout, cache):
    xp = get_array_module()
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = xp.zeros_like(dx)
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N42",
        "decoder_stack_backward",
        "shape",
        "ran the decoder's final norm backward on dmemory too",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    dmemory = None
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if dmemory is None else dmemory + dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    dmemory, _, _ = layer_norm_backward(dmemory, norm)
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N51",
        "decoder_stack_backward",
        "memory_some_layers",
        "dmemory = dm + prev_dm (sums only two adjacent layers; right for <=2 layers)",
        """
def decoder_stack_backward(dout, cache):
    layers, norm = cache
    dx, dgamma, dbeta = layer_norm_backward(dout, norm)
    dparams = {"dec_norm_gamma": dgamma, "dec_norm_beta": dbeta}
    prev = None
    for i in reversed(range(len(layers))):
        dx, dm, p = decoder_block_backward(dx, layers[i])
        dmemory = dm if prev is None else dm + prev
        prev = dm
        for key, value in p.items():
            dparams[f"dec{i}_{key}"] = value
    return dx, dmemory, dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N23",
        "projection_loss_backward",
        "upstream",
        "cross_entropy_backward(1.0, ...) (dloss ignored)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(1.0, loss)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N24",
        "projection_loss_backward",
        "ce_plain",
        "own dlogits = probs - onehot (no smoothing, padding, mean)",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    onehot = xp.zeros_like(probs)
    onehot[xp.arange(probs.shape[0]), loss.targets] = 1.0
    dlogits = (probs - onehot).reshape(loss.shape) * dloss
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N25",
        "projection_loss_backward",
        "token_count_pad",
        "own dlogits divided by N (all rows), padding masked",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    n, v = probs.shape
    q = xp.full_like(probs, loss.label_smoothing / v)
    q[xp.arange(n), loss.targets] += 1.0 - loss.label_smoothing
    dlogits = ((probs - q) * loss.valid[:, None] / n * dloss).reshape(loss.shape)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N26",
        "projection_loss_backward",
        "padding_leak",
        "own dlogits / n_valid, padding rows not masked",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    n, v = probs.shape
    q = xp.full_like(probs, loss.label_smoothing / v)
    q[xp.arange(n), loss.targets] += 1.0 - loss.label_smoothing
    dlogits = ((probs - q) / loss.n_valid * dloss).reshape(loss.shape)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N27",
        "projection_loss_backward",
        "label_smoothing",
        "own dlogits without label smoothing",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    n, v = probs.shape
    q = xp.zeros_like(probs)
    q[xp.arange(n), loss.targets] = 1.0
    dlogits = ((probs - q) * loss.valid[:, None] / loss.n_valid * dloss).reshape(loss.shape)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N28",
        "projection_loss_backward",
        "upstream_twice",
        "multiplied dx, dW, db by dloss again (dloss applied twice)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx * dloss, {"weight": dw * dloss, "bias": db * dloss}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N29",
        "projection_loss_backward",
        "token_count_twice",
        "divided cross_entropy_backward's result by n_valid again (mean twice)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss) / loss.n_valid
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N30",
        "projection_loss_backward",
        "rows_sum",
        "own dbias = dlogits.sum(axis=0) on (B,T,V)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw.T @ dw @ dw.T if False else dw, "bias": dlogits.sum(axis=0)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N43",
        "projection_loss_backward",
        "reshaped",
        "own linear: returned dx flattened (N, D)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss)
    v = dlogits.shape[-1]
    d2 = dlogits.reshape(-1, v)
    x2 = projection.x.reshape(-1, projection.x.shape[-1])
    dx = d2 @ projection.weight
    return dx, {"weight": d2.T @ x2, "bias": d2.sum(axis=0)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N44",
        "projection_loss_backward",
        "transposed",
        "own dW = x^T dlogits (transposed)",
        """
def projection_loss_backward(dloss, cache):
    projection, loss = cache
    dlogits = cross_entropy_backward(dloss, loss)
    v = dlogits.shape[-1]
    d2 = dlogits.reshape(-1, v)
    x2 = projection.x.reshape(-1, projection.x.shape[-1])
    dx = dlogits @ projection.weight
    return dx, {"weight": x2.T @ d2, "bias": d2.sum(axis=0)}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N46",
        "projection_loss_backward",
        "changed its cache in place",
        "CS231n-style probs[...] -= 1 on cache.loss.probs",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    n, v = probs.shape
    eps = loss.label_smoothing
    probs -= eps / v
    probs[xp.arange(n), loss.targets] -= 1.0 - eps
    dlogits = (probs * loss.valid[:, None] * (dloss / loss.n_valid)).reshape(loss.shape)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N50",
        "projection_loss_backward",
        "smoothing_convention",
        "smoothing as eps/(V-1) off-target, 1-eps on target",
        """
def projection_loss_backward(dloss, cache):
    xp = get_array_module()
    projection, loss = cache
    probs = loss.probs
    n, v = probs.shape
    eps = loss.label_smoothing
    q = xp.full_like(probs, eps / (v - 1))
    q[xp.arange(n), loss.targets] = 1.0 - eps
    dlogits = ((probs - q) * loss.valid[:, None] * (dloss / loss.n_valid)).reshape(loss.shape)
    dx, dw, db = linear_backward(dlogits, projection)
    return dx, {"weight": dw, "bias": db}
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N31",
        "encoder_decoder_backward",
        "tied_not_added",
        "tgt_table = embedding grad only",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N32",
        "encoder_decoder_backward",
        "tied_not_added",
        "tgt_table = projection grad only",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N33",
        "encoder_decoder_backward",
        "memory_swapped",
        "encoder fed the decoder's dx instead of dmemory",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dy, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N34",
        "encoder_decoder_backward",
        "skipped",
        "source embedding fed dmemory (encoder skipped)",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dmemory, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N35",
        "encoder_decoder_backward",
        "skipped",
        "target embedding fed the gradient from above the decoder stack",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dtop = dy
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dtop, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N36",
        "encoder_decoder_backward",
        "tables_swapped",
        "src_table/tgt_table grads swapped",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = ptgt["table"]
    dparams["tgt_table"] = psrc["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N37",
        "encoder_decoder_backward",
        "tied_averaged",
        "tied table's two gradients averaged",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = (ptgt["table"] + pout["weight"]) / 2
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N45",
        "encoder_decoder_backward",
        "memory_plus_input",
        "encoder fed dmemory + decoder's dx",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(dloss, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory + dy, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
    ColdMistake(
        "N49",
        "encoder_decoder_backward",
        "upstream",
        "projection_loss_backward(1.0, ...) (dloss ignored)",
        """
def encoder_decoder_backward(dloss, cache):
    src_embedding, encoder, tgt_embedding, decoder, output = cache
    dy, pout = projection_loss_backward(1.0, output)
    dy, dmemory, pdec = decoder_stack_backward(dy, decoder)
    ptgt = embedding_with_positions_backward(dy, tgt_embedding)
    dx, penc = encoder_stack_backward(dmemory, encoder)
    psrc = embedding_with_positions_backward(dx, src_embedding)
    dparams = {}
    dparams.update(penc)
    dparams.update(pdec)
    dparams["src_table"] = psrc["table"]
    dparams["tgt_table"] = ptgt["table"] + pout["weight"]
    dparams["proj_bias"] = pout["bias"]
    return dparams
""",
        COLD_RUNG_HEADER,
    ),
]
