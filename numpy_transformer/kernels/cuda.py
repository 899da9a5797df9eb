"""Kernels for CuPy (a CUDA GPU): where the textbook's way costs a GPU determinism or launches.

A CuPy step is bound by the host launching kernels (about 25 us each; benchmarks/README.md), so
these kernels do the textbook's work in fewer launches, as kernels.cpu does it in fewer BLAS calls:

* Products fold every leading axis into the rows of one 2-D GEMM, the weight's transpose passed as a
  flag: CuPy runs a 3-D ``x @ W.T`` on its batched path (the weight copied, three pointer-array
  kernels and a batched GEMM: five launches for one).
* Row means and column sums are products with a cached vector (one GEMV, where ``mean`` is two).
* Attention makes Q, K and V (MLA's query and latent) with one product, lays the heads out with one
  copy, writes each head's gradients into one buffer and merges them with one copy more, so no
  product meets a ``split_heads`` view (each would be copied first).
* ``embedding_backward``: the textbook's ``add.at`` adds repeated ids with atomics on a GPU, in
  an order that changes from run to run, so two identical runs (or a run and its resumption)
  drift apart in the last bits. Here each id's rows are summed as a segment of the ids sorted
  (a stable sort), so the sums are the same at every run.
* ``AdamUpdate``: the model's parameters live in one flat buffer (module.FlatParameters), so
  Adam's update is a handful of whole-model operations instead of a dozen per parameter tensor.

All are plain array operations: they run on NumPy too, which is how tests/model/test_kernels.py
proves them equal to the textbook in float64 without a GPU. The fused CUDA kernels that go further
(one launch for a layer norm) live in kernels.cuda_fused, each off until a GPU run proves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .. import functional
from ..backend import Array, get_array_module
from ..functional import (
    MASKED_SCORE,
    AttentionCache,
    EmbeddingCache,
    LayerNormCache,
    LinearCache,
    MultiHeadCache,
    softmax_backward,
    softmax_forward,
)
from .attention_blocks import block_kernels
from .cpu import FusedAttentionCache, constant_vector, row_mean
from .cuda_fused import adam as fused_adam
from .cuda_fused import attention_dropout as fused_attention_dropout
from .cuda_fused import attention_softmax as fused_softmax
from .cuda_fused import bias_act as fused_bias_act
from .cuda_fused import bias_relu as fused_bias_relu
from .cuda_fused import cross_entropy as fused_cross_entropy
from .cuda_fused import dropout as fused_dropout
from .cuda_fused import dropout_add as fused_dropout_add
from .cuda_fused import dropout_add_norm as fused_dropout_add_norm
from .cuda_fused import embedding_backward as fused_embedding_backward
from .cuda_fused import enabled
from .cuda_fused import layer_norm as fused_layer_norm
from .cuda_fused import layer_norm_add as fused_layer_norm_add
from .cuda_fused import layer_norm_add_dropout as fused_layer_norm_add_dropout


def linear_forward(x: Array, weight: Array, bias: Array | None = None) -> tuple[Array, LinearCache]:
    """One 2-D GEMM over the folded rows (the transpose a flag), the bias added in place."""
    out = x.reshape(-1, x.shape[-1]) @ weight.T
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0]), LinearCache(x, weight, bias is not None)


def linear_backward(dout: Array, cache: LinearCache) -> tuple[Array, Array, Array | None]:
    """dx and dW as 2-D GEMMs over the folded rows, db as one GEMV with a column of ones."""
    return linear_backward_into(dout, cache, None, None)


def linear_backward_into(
    dout: Array, cache: LinearCache, dweight: Array | None, dbias: Array | None
) -> tuple[Array, Array, Array | None]:
    """linear_backward, dW and db written by their products into ``dweight`` and ``dbias`` where given
    (overwritten; C-contiguous, of dW's and db's shapes), else into new arrays; returns (dx, dW, db)."""
    xp = get_array_module()
    x, weight, has_bias = cache
    dout_rows = dout.reshape(-1, dout.shape[-1])
    dx = (dout_rows @ weight).reshape(x.shape)
    dweight = xp.matmul(dout_rows.T, x.reshape(-1, x.shape[-1]), out=dweight)
    return dx, dweight, _column_sum_into(dout_rows, dbias) if has_bias else None


def _column_sum_into(x: Array, out: Array | None) -> Array:
    """kernels.cpu.column_sum (one GEMV with a vector of ones) written into ``out`` where given."""
    xp = get_array_module()
    rows = x.reshape(-1, x.shape[-1])
    return xp.matmul(constant_vector(xp, rows.shape[0], 1.0, x.dtype), rows, out=out)


def backward_into(name: str) -> Any:
    """The backward of the layer ``name`` that writes its parameters' gradients into the arrays it is
    given (kernels.backward_into): ``"linear"`` (linear_backward_into), ``"layer_norm"``
    (layer_norm_backward_into) or ``"attention"`` (attention_backward_into)."""
    writers = {
        "linear": linear_backward_into,
        "layer_norm": layer_norm_backward_into,
        "attention": attention_backward_into,
    }
    if name not in writers:
        raise ValueError(f"no backward_into for {name!r}: expected one of {', '.join(writers)}")
    return writers[name]


def dropout_forward(x: Array, p: float, rng: Any, training: bool) -> tuple[Array, Any]:
    """The textbook's; with the fused kernel switched on, one launch whose mask (Philox, from a seed
    drawn from ``rng``) is never stored: the backward recomputes it."""
    if training and p != 0.0 and enabled("dropout"):
        return fused_dropout.forward(x, p, rng)
    return functional.dropout_forward(x, p, rng, training)


def dropout_backward(dout: Array, cache: Any) -> Array:
    """The textbook's, or the fused kernel's where the forward ran it."""
    if isinstance(cache, fused_dropout.PhiloxDropoutCache):
        return fused_dropout.backward(dout, cache)
    return functional.dropout_backward(dout, cache)


def fused_layer(name: str) -> Any:
    """A layer's steps fused across the textbook's functions, where switched on (else None: the layer
    runs the steps). ``"dropout_add"``: ``skip + dropout(x)`` in one launch, ``(x, skip, p, rng) ->
    (out, cache)`` for dropout_backward, on only with the fused dropout on, whose backward it shares.
    ``"dropout_add_norm"``: that sum and its layer norm in one launch, ``(x, skip, p, rng, gamma, beta,
    eps) -> (sum, normed, dropout's cache, the norm's cache)``, on only with the fused dropout on.
    ``"layer_norm_add_dropout"``: its backward's counterpart, the norm's dx plus the skip gradient and
    that through the dropout before it, ``(dout, norm cache, dskip or None, dropout's cache, dgamma,
    dbeta) -> (dx, dx dropped out, dgamma, dbeta)``, on only with the fused dropout on.
    ``"bias_relu"``: the module kernels.cuda_fused.bias_relu (``forward(h, bias)`` and
    ``backward(dout, cache, dbias=None)``), the bias and ReLU after a product without its bias;
    ``"bias_silu"``, ``"bias_gelu_tanh"``: the same for SiLU and GELU (kernels.cuda_fused.bias_act)."""
    if name == "dropout_add":
        return fused_dropout_add.forward if enabled("dropout") and enabled("dropout_add") else None
    if name == "dropout_add_norm":
        return fused_dropout_add_norm.forward if enabled("dropout") and enabled("dropout_add_norm") else None
    if name == "layer_norm_add_dropout":
        on = enabled("dropout") and enabled("layer_norm_add_dropout")
        return fused_layer_norm_add_dropout.backward_dropped if on else None
    if name == "bias_relu":
        return fused_bias_relu if enabled("bias_relu") else None
    activation = name.removeprefix("bias_")
    if name.startswith("bias_") and activation in fused_bias_act.BY_ACTIVATION:
        return fused_bias_act.BY_ACTIVATION[activation] if enabled("bias_act") else None
    raise ValueError(
        f"no fused layer named {name!r}: expected dropout_add, dropout_add_norm, layer_norm_add_dropout, "
        "bias_relu, bias_silu or bias_gelu_tanh"
    )


def layer_norm_forward(
    x: Array, gamma: Array, beta: Array, eps: float = 1e-5
) -> tuple[Array, LayerNormCache]:
    """The means as GEMVs, every other pass in place: nine launches where the textbook's are thirteen
    (one with the fused kernel switched on)."""
    if enabled("layer_norm"):
        return fused_layer_norm.forward(x, gamma, beta, eps)
    xhat = x - row_mean(x)
    rstd = (row_mean(xhat * xhat) + eps) ** -0.5
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layer_norm_backward(dout: Array, cache: LayerNormCache) -> tuple[Array, Array, Array]:
    """mean(g) and mean(g * xhat) as products with gamma / D, dy * xhat shared with dgamma (one launch
    with the fused kernel switched on)."""
    return layer_norm_backward_into(dout, cache, None, None)


def layer_norm_backward_into(
    dout: Array,
    cache: LayerNormCache,
    dgamma: Array | None,
    dbeta: Array | None,
    dskip: Array | None = None,
) -> tuple[Array, Array, Array]:
    """layer_norm_backward, dgamma and dbeta written into ``dgamma`` and ``dbeta`` where given
    (overwritten; C-contiguous, of gamma's shape), else into new arrays; returns (dx, dgamma, dbeta),
    dx plus ``dskip`` where given (a residual connection's skip gradient: in the backward's launch with
    the fused layer_norm_add on)."""
    if dskip is not None and enabled("layer_norm_add"):
        return fused_layer_norm_add.backward_added(dout, cache, dskip, dgamma, dbeta)
    dx, dgamma, dbeta = _layer_norm_backward_into(dout, cache, dgamma, dbeta)
    if dskip is not None:
        dx += dskip
    return dx, dgamma, dbeta


def _layer_norm_backward_into(
    dout: Array, cache: LayerNormCache, dgamma: Array | None, dbeta: Array | None
) -> tuple[Array, Array, Array]:
    if enabled("layer_norm"):
        return fused_layer_norm.backward(dout, cache, dgamma, dbeta)
    xhat, rstd, gamma = cache
    width = dout.shape[-1]
    dout_xhat = dout * xhat
    column = gamma.reshape(width, 1) * (1.0 / width)
    dx = dout * gamma
    dx -= (dout.reshape(-1, width) @ column).reshape(*dout.shape[:-1], 1)
    dx -= xhat * (dout_xhat.reshape(-1, width) @ column).reshape(*dout.shape[:-1], 1)
    dx *= rstd
    return dx, _column_sum_into(dout_xhat, dgamma), _column_sum_into(dout, dbeta)


def embedding_backward(dout: Array, cache: EmbeddingCache) -> Array:
    """dE[v] = sqrt(D) * (sum of dy over every position whose token is v), by sorted segments.

    The rows of dy are sorted by id (stable), prefix-summed in float64, and every position takes
    its id's segment total as the difference of the prefix sums at the segment's two ends; every
    position of an id then writes the same total into dE[v], so the order of the writes does not
    matter. No transfer to the host and no shape that depends on the data. dout: (B, T, D) -> (V, D)
    With the fused kernel switched on, a zeroed table and one launch, without a sort.
    """
    if enabled("embedding_backward"):
        return fused_embedding_backward.backward(dout, cache)
    xp = get_array_module()
    ids, table_shape, scale = cache
    flat_ids = ids.reshape(-1)
    order = xp.argsort(flat_ids, kind="stable")
    sorted_ids = flat_ids[order]
    rows = dout.reshape(-1, table_shape[1])[order].astype(xp.float64)
    prefix = xp.concatenate(
        [xp.zeros((1, table_shape[1])), xp.cumsum(rows, axis=0)]
    )  # prefix[i] = rows[:i].sum(0)
    first = xp.searchsorted(sorted_ids, sorted_ids, side="left")
    after_last = xp.searchsorted(sorted_ids, sorted_ids, side="right")
    totals = (prefix[after_last] - prefix[first]) * scale
    dtable = xp.zeros(table_shape, dtype=dout.dtype)
    dtable[sorted_ids] = totals.astype(dout.dtype)
    return dtable


def masked_cross_entropy(
    logits: Array, targets: Array, labelled: Array, label_smoothing: float, dloss: float
) -> tuple[Array, Array]:
    """The textbook's, the probabilities' exponentials shared by the loss and the gradient and the
    gradient written in place. Two launches with the fused kernel switched on."""
    if enabled("cross_entropy"):
        return fused_cross_entropy.forward_backward(logits, targets, labelled, label_smoothing, dloss)
    xp = get_array_module()
    n_classes = logits.shape[-1]
    rows = xp.arange(logits.shape[0])
    safe_targets = xp.where(labelled, targets, 0)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = xp.exp(shifted)
    total = exp.sum(axis=-1, keepdims=True)
    log_probs = shifted - xp.log(total)
    nll = -log_probs[rows, safe_targets]
    smooth = log_probs.sum(axis=-1) * (-1.0 / n_classes)
    weights = labelled.astype(logits.dtype)
    count = weights.sum()
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * smooth
    loss = (per_token * weights).sum() / count
    dlogits = exp / total
    dlogits -= label_smoothing / n_classes
    dlogits[rows, safe_targets] -= 1.0 - label_smoothing
    dlogits *= (weights * (dloss / count))[:, None]
    return loss, dlogits


class AdamUpdate:
    """Adam.step's update over the model's flat buffers, equal to the textbook loop in Adam.step.

    The moments are two flat buffers laid out as the parameters (``m``, ``v``: one view per
    parameter, for the optimiser's state); AdamW's decoupled decay is one product with a flat
    vector that holds 1 - lr * wd where a parameter decays and 1 elsewhere. The update takes the
    device's flag ``finite`` (Adam.step's): where it is false, nothing is written, with no host read.
    """

    needs_flat_buffers = True  # Adam of a list of parameters (no flat buffers) runs the textbook loop
    takes_finite = True  # guards its own update by Adam.step's ``finite`` flag, on the device

    def __init__(self, named_parameters: list[tuple[str, Any]], threads: int | None, flat: Any) -> None:
        xp = get_array_module()
        self.named_parameters, self.flat = named_parameters, flat
        self._m, self._v = xp.zeros_like(flat.data), xp.zeros_like(flat.data)
        self.m = [
            self._m[start:stop].reshape(p.shape)
            for (_, p), (start, stop) in zip(named_parameters, flat.ranges)
        ]
        self.v = [
            self._v[start:stop].reshape(p.shape)
            for (_, p), (start, stop) in zip(named_parameters, flat.ranges)
        ]
        self._decaying: tuple[tuple[bool, ...], Array] | None = (
            None  # (which parameters decay, their flat 0/1 vector), built at the first step
        )
        self._always = xp.ones((), dtype=xp.bool_)  # the flag of a step given none: every step is taken

    def _decay_vector(self, decays: Sequence[bool]) -> Array | None:
        """1 where a parameter decays, 0 elsewhere, over the flat buffer (built once per mask)."""
        decays = tuple(decays)
        if not any(decays):
            return None
        if self._decaying is None or self._decaying[0] != decays:
            xp = get_array_module()
            vector = xp.zeros_like(self.flat.data)
            for decay, (start, stop) in zip(decays, self.flat.ranges):
                if decay:
                    vector[start:stop] = 1
            self._decaying = (decays, vector)
        return self._decaying[1]

    def step(
        self,
        lr: float,
        betas: tuple[float, float],
        eps: float,
        t: int,
        weight_decay: float,
        decays: Sequence[bool],
        finite: Array | None = None,
    ) -> None:
        """One update of step ``t``; ``decays[i]``: whether parameter i takes the decoupled decay; where
        ``finite`` (a 0-d boolean array on the device) is false, the weights and moments stay as they were."""
        decay = self._decay_vector(decays) if weight_decay else None
        flag = self._always if finite is None else finite
        update = fused_adam.update if enabled("adam") else fused_adam.update_twin
        update(
            self.flat.data,
            self.flat.gradients(),
            self._m,
            self._v,
            decay,
            flag,
            lr,
            betas,
            eps,
            t,
            weight_decay,
        )


# ----------------------------------------------------------------------------------------------
# attention: contiguous heads for CuPy's batched products, which copy any operand that is not


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
    """The textbook's, the scale and the mask applied in place (with the softmax in one launch where
    the fused kernel is switched on, and the dropout in that launch too with attention_dropout on)."""
    xp = get_array_module()
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = q @ k.swapaxes(-1, -2)
    if training and dropout_p != 0.0 and enabled("attention_dropout"):
        probs, dropped, fused_cache = fused_attention_dropout.forward(scores, mask, scale, dropout_p, rng)
        dropout_cache: Any = fused_cache  # the cache's dropout field holds the fused dropouts' caches too
        return dropped @ v, AttentionCache(q, k, v, mask, probs, dropped, dropout_cache, scale)
    if enabled("attention_softmax"):
        probs = fused_softmax.forward(scores, mask, scale)
    else:
        scores *= scale
        if mask is not None:
            scores = xp.where(mask, scores, MASKED_SCORE)
        probs, _ = softmax_forward(scores)
    dropped, dropout_cache = dropout_forward(probs, dropout_p, rng, training)
    return dropped @ v, AttentionCache(q, k, v, mask, probs, dropped, dropout_cache, scale)


def attention_backward(dout: Array, cache: AttentionCache) -> tuple[Array, Array, Array]:
    """The textbook's, each gradient written by its product into a buffer of its own."""
    xp = get_array_module()
    dq, dk, dv = (xp.empty(a.shape, dtype=dout.dtype) for a in (cache.q, cache.k, cache.v))
    _attention_backward_into(dout, cache, dq, dk, dv)
    return dq, dk, dv


def _attention_backward_into(dout: Array, cache: AttentionCache, dq: Array, dk: Array, dv: Array) -> None:
    """attention_backward's gradients written into dq, dk and dv (C-contiguous: each product's output)."""
    xp = get_array_module()
    q, k, v, mask, probs, dropped, dropout_cache, scale = cache
    xp.matmul(dropped.swapaxes(-1, -2), dout, out=dv)
    if isinstance(dropout_cache, fused_attention_dropout.AttentionDropoutCache):
        dscores = fused_attention_dropout.backward(
            dout @ v.swapaxes(-1, -2), probs, mask, scale, dropout_cache
        )
    else:
        dscores = _softmax_backward(
            dropout_backward(dout @ v.swapaxes(-1, -2), dropout_cache), probs, mask, scale
        )
    xp.matmul(dscores, k, out=dq)
    xp.matmul(dscores.swapaxes(-1, -2), q, out=dk)


def _softmax_backward(dprobs: Array, probs: Array, mask: Array | None, scale: float) -> Array:
    """dS of the scaled, masked softmax from the gradient of its probabilities."""
    if enabled("attention_softmax"):
        dscores = fused_softmax.backward(dprobs, probs, mask, scale)
    else:
        dscores = softmax_backward(dprobs, probs)
        if mask is not None:
            dscores *= mask  # in place: cheaper than where(), and dscores is finite
        dscores *= scale
    return dscores


def _heads(x: Array, n_heads: int, parts: int) -> Array:
    """(B, T, parts * D) -> (parts, B, H, T, K), C-contiguous: the heads of each part in one copy."""
    batch, length, width = x.shape
    head_width = width // (parts * n_heads)
    split = x.reshape(batch, length, parts, n_heads, head_width).transpose(2, 0, 3, 1, 4)
    return get_array_module().ascontiguousarray(split)


def _merged(heads: Array) -> Array:
    """(parts, B, H, T, K) -> (B, T, parts * D): the inverse of _heads, one copy."""
    parts, batch, n_heads, length, head_width = heads.shape
    return heads.transpose(1, 3, 0, 2, 4).reshape(batch, length, parts * n_heads * head_width)


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
    """kernels.cpu's four attention blocks in one, for CuPy: w_in's first D rows make Q from x_q, its
    other rows [K | V] (MHA) or the latent (MLA, then decompressed by w_decompress) from x_kv, or, with
    x_kv None (self-attention), one product of x_q by all of w_in makes both; the heads are laid out
    contiguous by one copy for Q, K and V together where one product made them."""
    width = w_o.shape[0]
    if x_kv is None:
        both, inputs_cache = linear_forward(x_q, w_in, b_in)
        kv_inputs_cache = None
        if w_decompress is None:
            q, k, v = _heads(both, n_heads, 3)
        else:
            q = _heads(both[..., :width], n_heads, 1)[0]
        kv_source = both[..., width:]
    else:
        query, inputs_cache = linear_forward(x_q, w_in[:width], None if b_in is None else b_in[:width])
        q = _heads(query, n_heads, 1)[0]
        kv_source, kv_inputs_cache = linear_forward(
            x_kv, w_in[width:], None if b_in is None else b_in[width:]
        )
    decompress_cache = None
    if w_decompress is not None:
        kv_source, decompress_cache = linear_forward(kv_source, w_decompress)
    if x_kv is not None or w_decompress is not None:
        k, v = _heads(kv_source, n_heads, 2)
    heads, attention_cache = attention_forward(q, k, v, mask, dropout_p, rng, training)
    out, output_cache = linear_forward(_merged(heads[None]), w_o, b_o)
    heads_cache = MultiHeadCache(attention_cache, n_heads)
    return out, FusedAttentionCache(
        inputs_cache, kv_inputs_cache, decompress_cache, heads_cache, output_cache
    )


def _fused_backward(
    dout: Array, cache: FusedAttentionCache
) -> tuple[Array, Array | None, Array, Array | None, Array, Array | None, Array | None]:
    """dx_q, dx_kv (None in self-attention), dw_in, dw_decompress (None for MHA), dw_o, db_in and
    db_o (None without biases)."""
    return attention_backward_into(dout, cache, NO_OUTPUTS)


NO_OUTPUTS = (None,) * 5  # attention_backward_into's outputs where every gradient is to be a new array


def attention_backward_into(
    dout: Array, cache: FusedAttentionCache, outputs: tuple[Array | None, ...]
) -> tuple[Array, Array | None, Array, Array | None, Array, Array | None, Array | None]:
    """_fused_backward, the weights' gradients written into ``outputs`` (dw_in, dw_decompress, dw_o,
    db_in, db_o: each overwritten where given, C-contiguous, of its parameter's shape; None: a new
    array). Q's, K's and V's gradients are written into one buffer where one product made them, and
    merged by one copy; cross-attention's dw_in is written by its two products into its two row blocks."""
    xp = get_array_module()
    out_in, out_decompress, out_o, out_b_in, out_b_o = outputs
    attention = cache.heads.attention
    dheads, dw_o, db_o = linear_backward_into(dout, cache.output, out_o, out_b_o)
    dheads = _heads(dheads, cache.heads.n_heads, 1)[0]
    one_product = cache.kv_inputs is None and cache.decompress is None  # MHA self-attention
    gradients = xp.empty((3, *attention.q.shape), dtype=dheads.dtype) if one_product else None
    dq_heads = (
        gradients[:1] if gradients is not None else xp.empty((1, *attention.q.shape), dtype=dheads.dtype)
    )
    dkv_heads = (
        gradients[1:] if gradients is not None else xp.empty((2, *attention.k.shape), dtype=dheads.dtype)
    )
    _attention_backward_into(dheads, attention, dq_heads[0], dkv_heads[0], dkv_heads[1])
    if gradients is not None:
        dx, dw_in, db_in = linear_backward_into(_merged(gradients), cache.inputs, out_in, out_b_in)
        return dx, None, dw_in, None, dw_o, db_in, db_o
    dq, dkv = _merged(dq_heads), _merged(dkv_heads)
    dw_decompress = None
    if cache.decompress is not None:
        dkv, dw_decompress, _ = linear_backward_into(dkv, cache.decompress, out_decompress, None)
    if cache.kv_inputs is None:  # MLA self-attention: the query's and the latent's rows of one product
        dx, dw_in, db_in = linear_backward_into(
            xp.concatenate([dq, dkv], axis=-1), cache.inputs, out_in, out_b_in
        )
        return dx, None, dw_in, dw_decompress, dw_o, db_in, db_o
    # cross-attention: the query's rows of w_in, then the keys' and values', each by its own product
    query_rows, kv_rows = cache.inputs.weight.shape[0], cache.kv_inputs.weight.shape[0]
    shape = (query_rows + kv_rows, cache.inputs.weight.shape[1])
    dw_in = xp.empty(shape, dtype=dq.dtype) if out_in is None else out_in
    db_in = out_b_in
    if cache.inputs.has_bias and db_in is None:
        db_in = xp.empty(shape[0], dtype=dq.dtype)
    halves = [slice(None, query_rows), slice(query_rows, None)]
    dx_q, dx_kv = (
        linear_backward_into(d, inputs, dw_in[rows], None if db_in is None else db_in[rows])[0]
        for d, inputs, rows in zip((dq, dkv), (cache.inputs, cache.kv_inputs), halves)
    )
    return dx_q, dx_kv, dw_in, dw_decompress, dw_o, db_in, db_o


# the textbook's eight attention-block functions around the pair above (kernels.attention_blocks)
globals().update(block_kernels(_fused_forward, _fused_backward, __name__))
