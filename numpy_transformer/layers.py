"""The Transformer's modules, named as in the seed documents, each composing functional pairs.

A module's ``forward`` keeps its cache; its ``backward(dout)`` accumulates (``+=``) parameter
gradients and returns the gradient of its input(s).
"""

from __future__ import annotations

import math
from typing import Any, Callable

from . import functional as F
from .backend import get_array_module
from .module import Module, ModuleList, Parameter

Array = Any


def xavier_uniform_(parameter: Parameter, rng: Any) -> None:
    """Glorot/Xavier uniform in place: U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fan_in = shape[1]."""
    fan_out, fan_in = parameter.data.shape
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    parameter.data[...] = rng.uniform(-bound, bound, size=parameter.data.shape)


def check_attention_mask(mask: Array | None, expected: tuple[int, int, int, int], argument: str) -> None:
    """A mask must broadcast to (B, H, T, S) without growing it; raise a ValueError naming it otherwise."""
    if mask is None:
        return
    ok = len(mask.shape) == 4 and all(m in (1, e) for m, e in zip(mask.shape, expected))
    if not ok:
        raise ValueError(f"{argument} has shape {tuple(mask.shape)}, which does not broadcast to (B, H, T, S) = {expected}")


class Dropout(Module):
    """Inverted dropout with probability p, drawing masks from the shared generator."""

    def __init__(self, p: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p!r}")
        self.p = float(p)

    def forward(self, x: Array) -> Array:
        out, cache = F.dropout_forward(x, self.p, self.rng, self.training)
        self._save((cache,))
        return out

    def backward(self, dout: Array) -> Array:
        (cache,) = self._take()
        return F.dropout_backward(dout, cache)


class Linear(Module):
    """y = x W^T + b with ``weight`` (out_features, in_features) and optional ``bias`` (out_features,).

    ``storage``, a Parameter that is a view of a larger one, lets a block keep several projections
    in one buffer.
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, *, dtype: Any = "float32", rng: Any = None,
        storage: Parameter | None = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.weight = storage if storage else self._new_parameter((out_features, in_features))
        xavier_uniform_(self.weight, self.rng)
        if bias:
            self.bias = self._new_parameter((out_features,))
        else:
            self.bias = None

    def forward(self, x: Array) -> Array:
        out, cache = F.linear_forward(x, self.weight.data, self.bias.data if self.bias is not None else None)
        self._save(cache)
        return out

    def backward(self, dout: Array) -> Array:
        dx, dweight, dbias = F.linear_backward(dout, self._take())
        self.weight.accumulate(dweight)
        if self.bias is not None:
            self.bias.accumulate(dbias)
        return dx


class Embedding(Module):
    """A (vocab_size, d_model) lookup table ``weight``."""

    def __init__(self, vocab_size: int, d_model: int, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.weight = self._new_parameter((vocab_size, d_model))
        xavier_uniform_(self.weight, self.rng)


class InputEmbeddings(Module):
    """Token ids (B, T) -> embeddings (B, T, d_model), scaled by sqrt(d_model)."""

    def __init__(self, d_model: int, vocab_size: int, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.d_model = d_model
        self.vocab_size = vocab_size
        self.embedding = Embedding(vocab_size, d_model, dtype=dtype, rng=self.rng)

    def check_ids(self, ids: Array, argument: str = "ids") -> None:
        """Raise TypeError for non-integer ids and ValueError for ids outside [0, vocab_size)."""
        xp = get_array_module()
        if not hasattr(ids, "dtype") or not xp.issubdtype(ids.dtype, xp.integer):
            kind = getattr(ids, "dtype", type(ids).__name__)
            raise TypeError(f"{argument} must be an integer array of token ids, got {kind}")
        if ids.ndim != 2:
            raise ValueError(f"{argument} must have shape (B, T), got {tuple(ids.shape)}")
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= self.vocab_size):
            raise ValueError(
                f"{argument} holds ids in [{int(ids.min())}, {int(ids.max())}], outside the vocabulary [0, {self.vocab_size})"
            )

    def forward(self, ids: Array) -> Array:
        self.check_ids(ids)
        out, cache = F.embedding_forward(ids, self.embedding.weight.data)
        self._save(cache)
        return out

    def backward(self, dout: Array) -> None:
        """Accumulates the table's gradient; token ids have no gradient, so nothing is returned."""
        self.embedding.weight.accumulate(F.embedding_backward(dout, self._take()))


class PositionalEncoding(Module):
    """Adds the fixed sinusoidal table (seq_len, d_model) to x (B, T, d_model), then dropout."""

    def __init__(self, d_model: int, seq_len: int, dropout: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.d_model = d_model
        self.seq_len = seq_len
        self.pe = F.sinusoidal_table(seq_len, d_model, self.dtype)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def check_length(self, length: int, argument: str) -> None:
        if length > self.seq_len:
            raise ValueError(
                f"{argument} has length {length}, longer than the positional table's seq_len={self.seq_len}"
            )

    def forward(self, x: Array, start: int = 0) -> Array:
        self.check_length(start + x.shape[1], "x")
        out, _ = F.positional_encoding_forward(x, self.pe, start)
        return self.dropout.forward(out)

    def backward(self, dout: Array) -> Array:
        return F.positional_encoding_backward(self.dropout.backward(dout), None)


class LayerNormalization(Module):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis (biased variance)."""

    def __init__(self, features: int, eps: float = 1e-5, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.eps = eps
        self.gamma = self._new_parameter((features,), fill=1.0)
        self.beta = self._new_parameter((features,))

    def forward(self, x: Array) -> Array:
        out, cache = F.layer_norm_forward(x, self.gamma.data, self.beta.data, self.eps)
        self._save(cache)
        return out

    def backward(self, dout: Array) -> Array:
        dx, dgamma, dbeta = F.layer_norm_backward(dout, self._take())
        self.gamma.accumulate(dgamma)
        self.beta.accumulate(dbeta)
        return dx


class FeedForwardBlock(Module):
    """linear_2(dropout(relu(linear_1(x)))): d_model -> d_ff -> d_model."""

    def __init__(self, d_model: int, d_ff: int, dropout: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.linear_1 = Linear(d_model, d_ff, dtype=dtype, rng=self.rng)
        self.linear_2 = Linear(d_ff, d_model, dtype=dtype, rng=self.rng)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def forward(self, x: Array) -> Array:
        l1, l2 = self.linear_1, self.linear_2
        out, cache = F.feed_forward_forward(
            x, l1.weight.data, l1.bias.data, l2.weight.data, l2.bias.data, self.dropout.p, self.rng, self.training
        )
        self._save(cache)
        return out

    def backward(self, dout: Array) -> Array:
        dx, dw1, db1, dw2, db2 = F.feed_forward_backward(dout, self._take())
        self.linear_1.weight.accumulate(dw1)
        self.linear_1.bias.accumulate(db1)
        self.linear_2.weight.accumulate(dw2)
        self.linear_2.bias.accumulate(db2)
        return dx


class _AttentionBase(Module):
    """Shared set-up of the two attention blocks: head count, the fused input projection buffer."""

    def __init__(self, d_model: int, h: int, dropout: float, dtype: Any, rng: Any) -> None:
        super().__init__(dtype, rng)
        if h < 1 or d_model % h != 0:
            raise ValueError(f"d_model must be divisible by h, got d_model={d_model}, h={h}")
        self.d_model = d_model
        self.h = h
        self.d_k = d_model // h
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def _linears(self, buffer_rows: list[tuple[str, int]], in_features: int) -> Parameter:
        """Create bias-free Linears named in ``buffer_rows`` as row blocks of one (rows, in) buffer."""
        total = sum(rows for _, rows in buffer_rows)
        buffer = self._new_parameter((total, in_features))
        start = 0
        for name, rows in buffer_rows:
            rows_of = slice(start, start + rows)
            view = Parameter(buffer.data[rows_of], buffer.grad[rows_of], owner=buffer)
            setattr(self, name, Linear(in_features, rows, bias=False, dtype=self.dtype, rng=self.rng, storage=view))
            start += rows
        return buffer

    @property
    def attention_probs(self) -> Array:
        """The attention weights (B, H, T, S) of the last forward (before dropout), for pictures."""
        if self._cache is None:
            raise ValueError(f"{type(self).__name__}.attention_probs needs a forward first")
        heads_cache = self._cache[-2]  # (..., heads, output projection) in both attention kinds
        attention_cache, _ = heads_cache
        return attention_cache[4]

    def _check(self, x_q: Array, x_kv: Array, mask: Array | None) -> None:
        for argument, x in (("x_q", x_q), ("x_kv", x_kv)):
            if x.ndim != 3 or x.shape[-1] != self.d_model:
                raise ValueError(f"{argument} must have shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        check_attention_mask(mask, (x_q.shape[0], self.h, x_q.shape[1], x_kv.shape[1]), "mask")


class MultiHeadAttentionBlock(_AttentionBase):
    """Multi-head attention with bias-free projections ``w_q``, ``w_k``, ``w_v``, ``w_o``.

    ``forward(x_q, x_kv, mask)``: the seeds' (q, k, v) always have k = v, so one key/value
    source is taken; pass the same array twice for self-attention (then W_q, W_k and W_v are
    applied in a single product, since they are stored as one (3D, D) matrix).
    """

    def __init__(self, d_model: int, h: int, dropout: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(d_model, h, dropout, dtype, rng)
        rows = [("w_q", d_model), ("w_k", d_model), ("w_v", d_model)]
        self._w_qkv = self._linears(rows, d_model)
        self.w_o = Linear(d_model, d_model, bias=False, dtype=dtype, rng=self.rng)

    def forward(self, x_q: Array, x_kv: Array, mask: Array | None = None) -> Array:
        self._check(x_q, x_kv, mask)
        out, cache = F.multi_head_attention_forward(
            x_q, x_kv, self._w_qkv.data, self.w_o.weight.data, mask, self.h, self.dropout.p, self.rng, self.training
        )
        self._save(cache)
        return out

    def backward(self, dout: Array) -> tuple[Array, Array | None]:
        """Returns (dx_q, dx_kv); dx_kv is None after self-attention, where dx_q holds the whole gradient."""
        dx_q, dx_kv, dw_qkv, dw_o = F.multi_head_attention_backward(dout, self._take())
        self._w_qkv.accumulate(dw_qkv)
        self.w_o.weight.accumulate(dw_o)
        return dx_q, dx_kv


class MultiHeadLatentAttentionBlock(_AttentionBase):
    """Multi-Head Latent Attention: keys and values decompressed from a latent of d_model/4.

    Parameters ``w_q``, ``w_kv_compress`` (latent, d_model), ``w_k_decompress``,
    ``w_v_decompress`` (d_model, latent) and ``w_o``, all bias-free.
    """

    def __init__(self, d_model: int, h: int, dropout: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        if d_model % 4 != 0:
            raise ValueError(f"d_model must be divisible by 4 for Multi-Head Latent Attention, got d_model={d_model}")
        super().__init__(d_model, h, dropout, dtype, rng)
        self.latent_dim = d_model // 4
        self._w_q_compress = self._linears([("w_q", d_model), ("w_kv_compress", self.latent_dim)], d_model)
        decompress = [("w_k_decompress", d_model), ("w_v_decompress", d_model)]
        self._w_kv_decompress = self._linears(decompress, self.latent_dim)
        self.w_o = Linear(d_model, d_model, bias=False, dtype=dtype, rng=self.rng)

    def forward(self, x_q: Array, x_kv: Array, mask: Array | None = None) -> Array:
        self._check(x_q, x_kv, mask)
        out, cache = F.multi_head_latent_attention_forward(
            x_q, x_kv, self._w_q_compress.data, self._w_kv_decompress.data, self.w_o.weight.data, mask, self.h,
            self.dropout.p, self.rng, self.training,
        )
        self._save(cache)
        return out

    def backward(self, dout: Array) -> tuple[Array, Array | None]:
        """Returns (dx_q, dx_kv); dx_kv is None after self-attention, where dx_q holds the whole gradient."""
        dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o = F.multi_head_latent_attention_backward(dout, self._take())
        self._w_q_compress.accumulate(dw_q_compress)
        self._w_kv_decompress.accumulate(dw_kv_decompress)
        self.w_o.weight.accumulate(dw_o)
        return dx_q, dx_kv


class ResidualConnection(Module):
    """Pre-norm ``x + dropout(sublayer(norm(x)))`` (seeds) or post-norm ``norm(x + dropout(sublayer(x)))`` (paper)."""

    def __init__(
        self, features: int, dropout: float, norm_first: bool = True, *, dtype: Any = "float32", rng: Any = None
    ) -> None:
        super().__init__(dtype, rng)
        self.norm_first = norm_first
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def forward(self, x: Array, sublayer: Callable[[Array], Array]) -> Array:
        norm = self.norm
        out, cache = F.residual_forward(
            x, sublayer, norm.gamma.data, norm.beta.data, self.dropout.p, self.rng, self.training, self.norm_first, norm.eps
        )
        self._save(cache)
        return out

    def backward(self, dout: Array, sublayer_backward: Callable[[Array], Array]) -> Array:
        dx, dgamma, dbeta = F.residual_backward(dout, self._take(), sublayer_backward)
        self.norm.gamma.accumulate(dgamma)
        self.norm.beta.accumulate(dbeta)
        return dx


def _self_attention_backward(block: Module) -> Callable[[Array], Array]:
    return lambda dout: block.backward(dout)[0]


class EncoderBlock(Module):
    """Self-attention then feed-forward, each inside a residual connection."""

    def __init__(
        self, features: int, self_attention_block: Module, feed_forward_block: FeedForwardBlock, dropout: float,
        norm_first: bool = True, *, dtype: Any = "float32", rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.self_attention_block = self_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = _residuals(2, features, dropout, norm_first, self)

    def forward(self, x: Array, src_mask: Array | None) -> Array:
        attention, residual = self.self_attention_block, self.residual_connections
        x = residual[0].forward(x, lambda y: attention.forward(y, y, src_mask))
        return residual[1].forward(x, self.feed_forward_block.forward)

    def backward(self, dout: Array) -> Array:
        residual = self.residual_connections
        dout = residual[1].backward(dout, self.feed_forward_block.backward)
        return residual[0].backward(dout, _self_attention_backward(self.self_attention_block))


class DecoderBlock(Module):
    """Masked self-attention, cross-attention over the encoder output, feed-forward; each residual."""

    def __init__(
        self, features: int, self_attention_block: Module, cross_attention_block: Module,
        feed_forward_block: FeedForwardBlock, dropout: float, norm_first: bool = True, *, dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.self_attention_block = self_attention_block
        self.cross_attention_block = cross_attention_block
        self.feed_forward_block = feed_forward_block
        self.residual_connections = _residuals(3, features, dropout, norm_first, self)

    def forward(self, x: Array, encoder_output: Array, src_mask: Array | None, tgt_mask: Array | None) -> Array:
        self_attention, cross_attention = self.self_attention_block, self.cross_attention_block
        residual = self.residual_connections
        x = residual[0].forward(x, lambda y: self_attention.forward(y, y, tgt_mask))
        x = residual[1].forward(x, lambda y: cross_attention.forward(y, encoder_output, src_mask))
        return residual[2].forward(x, self.feed_forward_block.forward)

    def backward(self, dout: Array) -> tuple[Array, Array]:
        """Returns (dx, d_encoder_output)."""
        residual = self.residual_connections
        dout = residual[2].backward(dout, self.feed_forward_block.backward)
        d_memory = []

        def cross_backward(d: Array) -> Array:
            dx, dmem = self.cross_attention_block.backward(d)
            d_memory.append(dmem)
            return dx

        dout = residual[1].backward(dout, cross_backward)
        dout = residual[0].backward(dout, _self_attention_backward(self.self_attention_block))
        return dout, d_memory[0]


def _residuals(count: int, features: int, dropout: float, norm_first: bool, owner: Module) -> Module:
    return ModuleList(
        [ResidualConnection(features, dropout, norm_first, dtype=owner.dtype, rng=owner.rng) for _ in range(count)]
    )


class Encoder(Module):
    """N encoder blocks, then a final layer normalisation."""

    def __init__(self, features: int, layers: Module, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.layers = layers
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng)

    def forward(self, x: Array, mask: Array | None) -> Array:
        for layer in self.layers:
            x = layer.forward(x, mask)
        return self.norm.forward(x)

    def backward(self, dout: Array) -> Array:
        dout = self.norm.backward(dout)
        for layer in reversed(list(self.layers)):
            dout = layer.backward(dout)
        return dout


class Decoder(Module):
    """N decoder blocks, then a final layer normalisation."""

    def __init__(self, features: int, layers: Module, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.layers = layers
        self.norm = LayerNormalization(features, dtype=dtype, rng=self.rng)

    def forward(self, x: Array, encoder_output: Array, src_mask: Array | None, tgt_mask: Array | None) -> Array:
        for layer in self.layers:
            x = layer.forward(x, encoder_output, src_mask, tgt_mask)
        return self.norm.forward(x)

    def backward(self, dout: Array) -> tuple[Array, Array]:
        """Returns (dx, d_encoder_output): every layer's cross-attention adds to the latter."""
        dout = self.norm.backward(dout)
        d_memory = None
        for layer in reversed(list(self.layers)):
            dout, d_layer_memory = layer.backward(dout)
            d_memory = d_layer_memory if d_memory is None else d_memory + d_layer_memory
        return dout, d_memory


class ProjectionLayer(Module):
    """(B, T, d_model) -> logits (B, T, vocab_size) through ``proj`` (with bias)."""

    def __init__(self, d_model: int, vocab_size: int, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.proj = Linear(d_model, vocab_size, dtype=dtype, rng=self.rng)

    def forward(self, x: Array) -> Array:
        return self.proj.forward(x)

    def backward(self, dout: Array) -> Array:
        return self.proj.backward(dout)
