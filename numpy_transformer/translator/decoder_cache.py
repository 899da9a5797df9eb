"""The decoder's key/value caches: one new token at a time costs O(T) instead of O(T^2).

* MHA keeps every earlier token's keys and values per layer: 2 * d_model numbers per token.
* MLA keeps only the latent c = x W_c^T: d_model / 4 numbers per token, decompressed to keys
  and values when attending.
* Absorbed MLA (``absorbed=True``) never decompresses: W_k_decompress is folded into the query
  side (q_h . (W_kd_h c) = (W_kd_h^T q_h) . c) and W_v_decompress into the output side
  (sum_h (P_h c) W_vd_h^T W_o_h^T), so attention runs directly over the cached latent.

Cross-attention keys and values (or the latent) are computed once per source batch.
:class:`UncachedDecoder` is the from-scratch design's way, with the same ``step`` and ``reorder``.
The searches that drive them are in :mod:`numpy_transformer.translator.decoding`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from ..backend import Array, backend_name, get_array_module
from ..functional import split_heads
from ..kernels import ops
from ..model import Transformer, causal_mask

# ----------------------------------------------------------------------------------------------
# the key/value cache


def product(x: Array, weight_in_out: Array, bias: Array | None = None) -> Array:
    """x @ W (+ b) for a weight kept as an (in, out) view: the linear layer, by the kernels in use."""
    return ops.linear_forward(x, weight_in_out.T, bias)[0]


class _SelfCache:
    """Growing per-layer storage (N, G, capacity, W) for the decoder's self-attention.

    G = H heads of width K for MHA's keys or values; G = 1 for MLA's latent, which every head shares.
    """

    def __init__(self, rows: int, groups: int, capacity: int, width: int, dtype: Any) -> None:
        self.store = get_array_module().zeros((rows, groups, capacity, width), dtype=dtype)
        self.length = 0

    def append(self, values: Array) -> Array:
        """Store (N, G, 1, W) at the next position; return everything stored so far (N, G, t, W)."""
        self.store[:, :, self.length : self.length + 1] = values
        self.length += 1
        return self.store[:, :, : self.length]

    @property
    def nbytes(self) -> int:
        rows, groups, _, width = self.store.shape
        return rows * groups * self.length * width * self.store.itemsize


class _Source(NamedTuple):
    """What a decoder's caches attend to: the encoder output (B, S, D) and its mask, each source
    decoded as ``beams`` consecutive rows."""

    encoder_output: Array
    src_mask: Array | None
    beams: int

    @property
    def rows(self) -> int:
        """The decoder's rows N = B * beams."""
        return self.encoder_output.shape[0] * self.beams


class _LayerCache:
    """One decoder layer during cached decoding: what it keeps between steps, and its step.

    A step feeds one token per row, so it works on (N, D) rows and (N, H, 1, K) heads: a head
    split is a free reshape, never a transpose. The weights a step reads are fetched once, as
    (in, out) views (``.T`` of the stored (out, in) arrays), and one product makes everything a
    sublayer's input feeds: MHA's query, key and value, or MLA's query and latent. Subclasses
    give the two attention sublayers; ``self_caches`` are the growing per-token stores and
    ``cross`` the arrays made once from the encoder output, one row per source: with ``beams``
    rows a source (beam search), an item's beams attend over it together.
    """

    self_caches: list[_SelfCache]
    cross: list[Array]

    def __init__(self, layer: Any, n_heads: int, source: _Source) -> None:
        self.n_heads, self.src_mask, self.beams = n_heads, source.src_mask, source.beams
        ffn = layer.feed_forward_block
        self.ffn_weights = (
            ffn.linear_1.weight.data,
            ffn.linear_1.bias.data,
            ffn.linear_2.weight.data,
            ffn.linear_2.bias.data,
        )
        self.activation = getattr(ops, f"{ffn.activation}_forward")
        # unbound: bound methods kept here would make every cache a reference cycle, which only the
        # cyclic collector frees (a beam search's caches outlived their call, raising the peak)
        sublayers = (type(self).self_attention, type(self).cross_attention, type(self).feed_forward)
        self.residuals = [
            (
                sublayer,
                residual.norm.gamma.data,
                residual.norm.beta.data,
                residual.norm_first,
                residual.norm.eps,
            )
            for residual, sublayer in zip(layer.residual_connections, sublayers)
        ]

    def step(self, x: Array) -> Array:
        """The layer's three residual sublayers on the new position: (N, D) -> (N, D)."""
        for sublayer, gamma, beta, norm_first, eps in self.residuals:
            if norm_first:  # x + sublayer(norm(x)); no dropout in decoding
                x = x + sublayer(self, ops.layer_norm_forward(x, gamma, beta, eps)[0])
            else:  # norm(x + sublayer(x))
                x = ops.layer_norm_forward(x + sublayer(self, x), gamma, beta, eps)[0]
        return x

    def step_weights(self) -> list[Array]:
        """Every weight matrix a step multiplies by, as an (in, out) view."""
        return [self.ffn_weights[0].T, self.ffn_weights[2].T]

    def self_attention(self, y: Array) -> Array:
        raise NotImplementedError

    def cross_attention(self, y: Array) -> Array:
        raise NotImplementedError

    def feed_forward(self, y: Array) -> Array:
        w1, b1, w2, b2 = self.ffn_weights
        hidden, _ = self.activation(ops.linear_forward(y, w1, b1)[0])
        return ops.linear_forward(hidden, w2, b2)[0]

    def attend(
        self,
        q: Array,
        keys: Array,
        values: Array,
        mask: Array | None,
        w_out: Array,
        scale: float | None = None,
        b_out: Array | None = None,
        cross: bool = False,
    ) -> Array:
        """Heads q (N, H, 1, W) over keys, values (N, G, t, W), then the output product w_out (H*W, D)
        (and its bias b_out (D,), if any) -> (N, D). ``cross``: keys and values (N / beams, G, S, W)
        of the sources, each attended by its ``beams`` rows as that many query positions."""
        rows = q.shape[0]
        grouped = cross and self.beams > 1
        if grouped:  # (N, H, 1, W) -> (N / beams, H, beams, W): one product a head and source, not one a row
            q = q.reshape(-1, self.beams, q.shape[1], q.shape[-1]).swapaxes(1, 2)
        context, _ = ops.attention_forward(q, keys, values, mask, scale=scale)
        if grouped:
            context = context.swapaxes(1, 2)
        return product(context.reshape(rows, -1), w_out, b_out)

    def reorder(self, rows: Array, same_source: bool = False, moved: Array | None = None) -> None:
        if self.beams > 1 and not same_source:
            raise ValueError("a cache of beams, one source each, reorders them within their source only")
        for cache in self.self_caches:
            if moved is None:
                cache.store = cache.store[rows]
            else:  # in place, only the rows that change (the right side is gathered first)
                cache.store[moved] = cache.store[rows[moved]]
        if same_source:  # every row keeps a row of its own source: equal cross arrays, nothing to move
            return
        self.cross = [part[rows] for part in self.cross]
        if self.src_mask is not None:
            self.src_mask = self.src_mask[rows]


class _MHALayerCache(_LayerCache):
    """Keeps every earlier token's keys and values per head; the source's keys and values once."""

    def __init__(self, layer: Any, n_heads: int, source: _Source, capacity: int) -> None:
        super().__init__(layer, n_heads, source)
        block, cross = layer.self_attention_block, layer.cross_attention_block
        encoder_output, rows = source.encoder_output, source.rows
        d = encoder_output.shape[-1]
        self.w_qkv, self.w_o = block.stacked_qkv.T, block.w_o.weight.data.T  # (D, 3D), (D, D)
        self.cross_w_q, self.cross_w_o = cross.stacked_qkv[:d].T, cross.w_o.weight.data.T
        # the biases (3D,) and (D,) of Marian's projections, or None
        self.b_qkv, self.b_o = block.stacked_qkv_bias, _bias(block.w_o)
        cross_b_qkv = cross.stacked_qkv_bias
        self.cross_b_q, self.cross_b_o = None if cross_b_qkv is None else cross_b_qkv[:d], _bias(cross.w_o)
        self.self_caches = [
            _SelfCache(rows, n_heads, capacity, d // n_heads, encoder_output.dtype) for _ in "kv"
        ]
        keys_values = product(
            encoder_output, cross.stacked_qkv[d:].T, None if cross_b_qkv is None else cross_b_qkv[d:]
        )
        self.cross = [
            split_heads(part, n_heads).copy() for part in (keys_values[..., :d], keys_values[..., d:])
        ]

    def step_weights(self) -> list[Array]:
        return [self.w_qkv, self.w_o, self.cross_w_q, self.cross_w_o, *super().step_weights()]

    def self_attention(self, y: Array) -> Array:
        """The new position (N, D) attends over itself and every cached one -> (N, D)."""
        qkv = product(y, self.w_qkv, self.b_qkv)
        q, k, v = qkv.reshape(y.shape[0], 3, self.n_heads, 1, -1).swapaxes(0, 1)
        keys, values = self.self_caches
        return self.attend(q, keys.append(k), values.append(v), None, self.w_o, b_out=self.b_o)

    def cross_attention(self, y: Array) -> Array:
        """The new position (N, D) attends over the encoder output -> (N, D)."""
        q = product(y, self.cross_w_q, self.cross_b_q).reshape(y.shape[0], self.n_heads, 1, -1)
        keys, values = self.cross
        return self.attend(q, keys, values, self.src_mask, self.cross_w_o, b_out=self.cross_b_o, cross=True)


def _bias(weight: Any) -> Array | None:
    """A projection's bias array, or None where it has none."""
    return None if weight.bias is None else weight.bias.data


class _MLALayerCache(_LayerCache):
    """Keeps one latent of width L = D / 4 per token, decompressed to keys and values when attending."""

    def __init__(self, layer: Any, n_heads: int, source: _Source, capacity: int) -> None:
        super().__init__(layer, n_heads, source)
        block, cross = layer.self_attention_block, layer.cross_attention_block
        encoder_output, rows = source.encoder_output, source.rows
        d = encoder_output.shape[-1]
        self.d_model, self.latent_dim = d, block.latent_dim
        self.w_q_latent, self.w_o = block.stacked_q_compress.T, block.w_o.weight.data.T  # (D, D + L), (D, D)
        self.w_decompress = block.stacked_kv_decompress.T  # (L, 2D)
        self.cross_w_q, self.cross_w_o = cross.stacked_q_compress[:d].T, cross.w_o.weight.data.T
        self.cross_w_decompress = cross.stacked_kv_decompress.T
        self.self_caches = [_SelfCache(rows, 1, capacity, self.latent_dim, encoder_output.dtype)]
        # the sources' latents (B, 1, S, L), one a source
        self.cross = [product(encoder_output, cross.stacked_q_compress[d:].T)[:, None]]

    def step_weights(self) -> list[Array]:
        return [
            self.w_q_latent,
            self.w_o,
            self.w_decompress,
            self.cross_w_q,
            self.cross_w_o,
            self.cross_w_decompress,
            *super().step_weights(),
        ]

    def self_attention(self, y: Array) -> Array:
        d = self.d_model
        q_latent = product(y, self.w_q_latent)  # (N, D + L): the query and the new latent
        latents = self.self_caches[0].append(q_latent[:, None, None, d:])
        q = q_latent[:, :d].reshape(y.shape[0], self.n_heads, 1, -1)
        keys, values = self._decompress(latents, self.w_decompress)
        return self.attend(q, keys, values, None, self.w_o)

    def cross_attention(self, y: Array) -> Array:
        q = product(y, self.cross_w_q).reshape(y.shape[0], self.n_heads, 1, -1)
        keys, values = self._decompress(self.cross[0], self.cross_w_decompress)
        return self.attend(q, keys, values, self.src_mask, self.cross_w_o, cross=True)

    def _decompress(self, latents: Array, w_decompress: Array) -> tuple[Array, Array]:
        """Latents (N, 1, t, L) -> keys and values (N, H, t, K)."""
        keys_values = product(latents[:, 0], w_decompress)
        d = self.d_model
        return split_heads(keys_values[..., :d], self.n_heads), split_heads(
            keys_values[..., d:], self.n_heads
        )


class _AbsorbedMLALayerCache(_MLALayerCache):
    """MLA attending directly over the cached latent, the decompressions folded into the projections.

    Per attention block: W_in stacks the rows W_kd_h^T W_q_h of every head (H*L, D), so one product
    gives every head's absorbed query q_h W_q_h^T W_kd_h (the self-attention's W_in also appends
    W_compress (L, D): the new latent in the same product); W_ov (H*L, D) stacks W_vd_h^T W_o_h^T,
    so the heads' latent contexts map straight to the output.
    """

    def __init__(self, layer: Any, n_heads: int, source: _Source, capacity: int) -> None:
        super().__init__(layer, n_heads, source, capacity)
        self.scale = 1 / math.sqrt(self.d_model // n_heads)  # the heads' width K, not the latent's
        self.w_in, self.w_ov = self._absorb(layer.self_attention_block, with_latent=True)
        self.cross_w_in, self.cross_w_ov = self._absorb(layer.cross_attention_block, with_latent=False)

    def _absorb(self, block: Any, with_latent: bool) -> tuple[Array, Array]:
        """(W_in^T (D, H*L [+ L]), W_ov (H*L, D)): both (in, out), the first a view of the (out, in) W_in."""
        xp = get_array_module()
        h, d, latent_dim = self.n_heads, self.d_model, self.latent_dim
        w_q = block.stacked_q_compress[:d].reshape(h, d // h, d)
        w_kd = block.stacked_kv_decompress[:d].reshape(h, d // h, latent_dim)
        w_vd = block.stacked_kv_decompress[d:].reshape(h, d // h, latent_dim)
        w_o = block.w_o.weight.data.reshape(d, h, d // h).transpose(1, 2, 0)
        w_in = (w_kd.transpose(0, 2, 1) @ w_q).reshape(h * latent_dim, d)
        if with_latent:
            w_in = xp.concatenate([w_in, block.stacked_q_compress[d:]])
        w_ov = (w_vd.transpose(0, 2, 1) @ w_o).reshape(h * latent_dim, d)
        return w_in.T, w_ov

    def step_weights(self) -> list[Array]:
        return [self.w_in, self.w_ov, self.cross_w_in, self.cross_w_ov, *_LayerCache.step_weights(self)]

    def self_attention(self, y: Array) -> Array:
        width = self.n_heads * self.latent_dim
        q_latent = product(y, self.w_in)  # (N, H*L + L): every head's absorbed query, then the new latent
        latents = self.self_caches[0].append(q_latent[:, None, None, width:])
        return self._attend_absorbed(q_latent[:, :width], latents, None, self.w_ov)

    def cross_attention(self, y: Array) -> Array:
        return self._attend_absorbed(
            product(y, self.cross_w_in), self.cross[0], self.src_mask, self.cross_w_ov, cross=True
        )

    def _attend_absorbed(
        self, q_latent: Array, latents: Array, mask: Array | None, w_ov: Array, cross: bool = False
    ) -> Array:
        """Absorbed queries (N, H*L) over latents (N, 1, t, L), then W_ov -> (N, D)."""
        q = q_latent.reshape(q_latent.shape[0], self.n_heads, 1, -1)
        return self.attend(q, latents, latents, mask, w_ov, scale=self.scale, cross=cross)


# in_out_copy transposes this many rows of a weight at a time: each block's strided reads stay in cache
TRANSPOSE_BLOCK = 64


def in_out_copy(weight: Array) -> Array:
    """A C-ordered (in, out) copy of a weight W (out, in). On NumPy block by block, several times
    faster than one copy of W^T for an output projection over a large vocabulary."""
    xp = get_array_module()
    if backend_name() != "numpy":
        return xp.ascontiguousarray(weight.T)
    copy = xp.empty(weight.shape[::-1], dtype=weight.dtype)
    for start in range(0, weight.shape[0], TRANSPOSE_BLOCK):
        copy[:, start : start + TRANSPOSE_BLOCK] = weight[start : start + TRANSPOSE_BLOCK].T
    return copy


class DecoderCache:
    """Everything the decoder keeps between steps, for one batch of N rows: one cache per layer.

    ``mode`` is "mha" (keys and values), "mla" (the latent) or "mla-absorbed" (the latent, with
    the decompressions folded into the query and output projections). With ``beams`` > 1 each source
    of ``encoder_output`` (B, S, D) has that many consecutive rows (beam search's N = B * beams), which
    reorder only among themselves; its cross-attention arrays are made and kept once.
    """

    def __init__(
        self,
        model: Transformer,
        encoder_output: Array,
        src_mask: Array | None,
        capacity: int,
        absorbed: bool,
        row_major_logits: bool = False,
        beams: int = 1,
    ) -> None:
        config = model.config
        self.mode = "mha" if config.attention == "mha" else ("mla-absorbed" if absorbed else "mla")
        layer_cache = {"mha": _MHALayerCache, "mla": _MLALayerCache, "mla-absorbed": _AbsorbedMLALayerCache}[
            self.mode
        ]
        source = _Source(encoder_output, src_mask, beams)
        self.layers = [layer_cache(layer, config.h, source, capacity) for layer in model.decoder.layers]
        self.position = 0
        self.embedding, self.positions = model.tgt_embed.embedding.weight.data, model.tgt_pos.pe
        final, proj = model.decoder.norm, model.projection_layer.proj
        self.final_norm = None if final is None else (final.gamma.data, final.beta.data, final.eps)
        assert proj.bias is not None  # the projection always has its bias
        self.projection = (proj.weight.data, proj.bias.data)
        # row-major logits from a (D, V) copy of W: x W^T is slower at every row count measured, by
        # more than the copy costs over about ten steps (benchmarks/README.md)
        self.projection_in_out = in_out_copy(proj.weight.data) if row_major_logits else None

    @property
    def self_attention_nbytes(self) -> int:
        """Bytes held for earlier target tokens: layers x N x tokens x stored width x itemsize."""
        return sum(cache.nbytes for layer in self.layers for cache in layer.self_caches)

    @property
    def cross_attention_nbytes(self) -> int:
        return sum(int(part.nbytes) for layer in self.layers for part in layer.cross)

    @property
    def nbytes(self) -> int:
        return self.self_attention_nbytes + self.cross_attention_nbytes

    def step_weights(self) -> list[Array]:
        """Every weight matrix a step multiplies by, as an (in, out) view: the layers' and the projection's."""
        return [weight for layer in self.layers for weight in layer.step_weights()] + [self.projection[0].T]

    @property
    def step_weight_nbytes(self) -> int:
        """Bytes of weights one step reads; at batch 1 streaming them bounds the step's time."""
        return sum(int(weight.nbytes) for weight in self.step_weights())

    def reorder(self, rows: Array, same_source: bool = False) -> None:
        """Keep rows ``rows`` (N,) of every stored array: beam search calls this when it prunes beams.

        ``same_source``: each row is replaced by a row made from the same source (beam search's
        beams of one item, whose encoder outputs are copies), so the cross-attention arrays and the
        source mask, equal across those rows, stay where they are instead of being copied every step.
        On NumPy, when the rows keep their number, only the rows that change are copied (a beam that
        continues in its own row stays): finding them reads the rows on the host, which a GPU would wait for.
        """
        xp = get_array_module()
        same_count = rows.shape[0] == self.layers[0].self_caches[0].store.shape[0]
        in_place = backend_name() == "numpy" and same_count
        moved = xp.flatnonzero(rows != xp.arange(rows.shape[0])) if in_place else None
        for layer in self.layers:
            layer.reorder(rows, same_source, moved)

    def step(self, tokens: Array) -> Array:
        """Feed one token per row (N,) at the next position; return the next-token logits (N, V)."""
        x, _ = ops.embedding_forward(tokens, self.embedding)  # (N, D)
        x += self.positions[self.position]
        for layer in self.layers:
            x = layer.step(x)
        self.position += 1
        if self.final_norm is not None:
            x, _ = ops.layer_norm_forward(x, *self.final_norm)
        if self.projection_in_out is not None:  # row by row, as beam search reads a row's candidates
            logits = x @ self.projection_in_out
            logits += self.projection[1]
            return logits
        # a few rows: faster as W x^T (the kernels' choice), handed back as a (V, N) array's view
        return ops.linear_forward(x, *self.projection)[0]


class UncachedDecoder:
    """The from-scratch design's way: keep the prefix and run it all through the decoder at every step."""

    def __init__(self, model: Transformer, encoder_output: Array, src_mask: Array | None) -> None:
        xp = get_array_module()
        self.model, self.encoder_output, self.src_mask = model, encoder_output, src_mask
        self.prefix = xp.zeros((encoder_output.shape[0], 0), dtype=xp.int64)

    def step(self, tokens: Array) -> Array:
        xp = get_array_module()
        self.prefix = xp.concatenate([self.prefix, tokens[:, None].astype(xp.int64)], axis=1)
        decoded = self.model.decode(
            self.encoder_output, self.src_mask, self.prefix, causal_mask(self.prefix.shape[1])
        )
        return self.model.project(decoded[:, -1:])[:, 0]

    def reorder(self, rows: Array, same_source: bool = False) -> None:
        self.prefix = self.prefix[rows]
        if same_source:  # as DecoderCache.reorder: the rows' encoder outputs are equal
            return
        self.encoder_output = self.encoder_output[rows]
        if self.src_mask is not None:
            self.src_mask = self.src_mask[rows]
