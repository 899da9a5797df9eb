"""The Transformer's layers, named as in the PyTorch "Transformer from scratch" design this model follows:
the embeddings and positions, layer norm, the feed-forward and attention blocks, the projection
(stacks.py composes them into the encoder and decoder).

Each module owns its parameters and composes the functions of ``ops`` (the textbook's pairs of
functional.py, or their tuned kernels): ``forward`` keeps the cache its backward needs, and
``backward(dout)`` accumulates (``+=``) its parameters' gradients and returns the gradient of
each array its forward took, in order (see :class:`numpy_transformer.module.Module`). An attention
block's backward is its forward read in reverse, one line per step.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple, NoReturn

from .backend import Array, get_array_module, to_numpy
from .functional import ACTIVATIONS, POSITION_LAYOUTS
from .kernels import backward_into, fused_layer, ops
from .module import Module, Parameter
from .moved import MOVED, refuse_moved_name


def xavier_uniform_(parameter: Parameter, rng: Any) -> None:
    """Glorot/Xavier uniform in place: U(-a, a), a = sqrt(6 / (fan_in + fan_out)), fan_in = shape[1]."""
    fan_out, fan_in = parameter.data.shape
    bound = math.sqrt(6.0 / (fan_in + fan_out))
    # NumPy's generator draws float64 in row-major order, so drawing a few rows at a time gives the
    # same values while bounding the float64 temporary (a 58,101 x 512 embedding's was 238 MB, twice
    # its float32 table); other generators (CuPy's) draw it whole
    numpy_generator = type(rng).__module__.startswith("numpy.random")
    step = max(1, INIT_CHUNK // fan_in) if numpy_generator else fan_out
    for start in range(0, fan_out, step):
        rows = parameter.data[start : start + step]
        rows[...] = rng.uniform(-bound, bound, size=rows.shape)


INIT_CHUNK = 1 << 20  # entries a Xavier draw makes at once (8 MiB of float64)


def check_attention_mask(mask: Array | None, expected: tuple[int, int, int, int], argument: str) -> None:
    """A mask must broadcast to (B, H, T, S) without growing it; raise a ValueError naming it otherwise."""
    if mask is None:
        return
    dtype = getattr(mask, "dtype", None)
    if dtype is None or dtype.kind != "b":
        raise TypeError(
            f"{argument} must be a boolean array, true where a query may attend (make_src_mask, make_tgt_mask), "
            f"got {dtype if dtype is not None else type(mask).__name__}; an additive float mask is not accepted"
        )
    ok = len(mask.shape) == 4 and all(m in (1, e) for m, e in zip(mask.shape, expected))
    if not ok:
        raise ValueError(
            f"{argument} has shape {tuple(mask.shape)}, which does not broadcast to (B, H, T, S) = {expected}"
        )


class Dropout(Module):
    """Inverted dropout with probability p, drawing masks from the shared generator."""

    def __init__(self, p: float, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {p!r}")
        self.p = float(p)
        self._ahead: tuple[Array, Array] | None = None  # (dout, its backward), made by a fused norm backward

    def forward(self, x: Array) -> Array:
        out, cache = ops.dropout_forward(x, self.p, self.rng, self.training)
        self._save((cache,))
        return out

    def backward(self, dout: Array) -> Array:
        """dx; where a layer norm's fused backward made dout, the dx it made in the same launch
        (LayerNormalization.backward_added with this dropout as ``preceding``)."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] is dout:
            return ahead[1]
        (cache,) = self._take()
        return ops.dropout_backward(dout, cache)

    def forward_added(self, x: Array, skip: Array) -> Array:
        """``skip + forward(x)``, in one launch where the backend has the two fused
        (kernels.fused_layer); ``backward`` is x's gradient, the skip's being dout itself."""
        kernel = fused_layer("dropout_add") if self.training and self.p else None
        if kernel is None:
            return skip + self.forward(x)
        out, cache = kernel(x, skip, self.p, self.rng)
        self._save((cache,))
        return out


class Linear(Module):
    """y = x W^T + b with ``weight`` (out_features, in_features) and optional ``bias`` (out_features,)."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.weight = self._new_parameter((out_features, in_features))
        xavier_uniform_(self.weight, self.rng)
        if bias:
            self.bias: Parameter | None = self._new_parameter((out_features,))
        else:
            self.bias = None

    def forward(self, x: Array) -> Array:
        out, cache = ops.linear_forward(
            x, self.weight.data, self.bias.data if self.bias is not None else None
        )
        self._save(cache)
        return out

    def backward(self, dout: Array) -> Array:
        return self._backward(dout, self._take(), (self.weight, self.bias))

    def _backward(self, dout: Array, cache: Any, parameters: tuple[Parameter, Parameter | None]) -> Array:
        """dx; the gradients of ``parameters`` (the weight, the bias where the product added it)
        accumulated, or written straight into them (kernels.backward_into)."""
        into = backward_into("linear")
        outputs = (None, None) if into is None else self._gradient_outputs(parameters)
        dx, *gradients = ops.linear_backward(dout, cache) if into is None else into(dout, cache, *outputs)
        self._accumulate_unwritten(parameters, tuple(gradients), outputs)
        return dx

    def forward_activated(self, x: Array, kernel: Any) -> Array:
        """The fused ``kernel``'s activation of forward(x) (kernels.fused_layer("bias_relu")): the
        product made without the bias, which the kernel adds in the activation's launch; a layer
        with a bias only. ``backward_activated`` is its backward."""
        assert self.bias is not None  # the kernel adds it
        out, cache = ops.linear_forward(x, self.weight.data, None)
        out, activation_cache = kernel.forward(out, self.bias.data)
        self._save((cache, kernel, activation_cache))
        return out

    def backward_activated(self, dout: Array) -> Array:
        """dx of forward_activated from the gradient of its activated output."""
        assert self.bias is not None
        cache, kernel, activation_cache = self._take()
        output = self._gradient_outputs((self.bias,))  # the kernel writes dbias into it where claimed
        dout, dbias = kernel.backward(dout, activation_cache, *output)
        self._accumulate_unwritten((self.bias,), (dbias,), output)
        return self._backward(dout, cache, (self.weight, None))


class Weight(Module):
    """One projection matrix ``weight`` (out_features, in_features), Xavier-initialised, and its
    ``bias`` (out_features,), zero-initialised, where the block has biases (Marian's do; the design
    notes' are bias-free, and then ``bias`` is None).

    The attention blocks' projections are multiplied inside the attention functions, so they are
    not layers with a forward of their own: each only holds its matrix, under the from-scratch design's
    name (their ``nn.Linear`` ``w_q`` keeps it as ``w_q.weight``, as do checkpoints and the
    PyTorch model). ``weight`` and ``bias`` may be views of a block's stacked buffers (see
    _AttentionBase._stacked).
    """

    def __init__(self, weight: Parameter, rng: Any, bias: Parameter | None = None) -> None:
        super().__init__(weight.data.dtype, rng)
        self.weight = weight
        xavier_uniform_(self.weight, self.rng)
        self.bias = bias


class Embedding(Module):
    """A (vocab_size, d_model) lookup table ``weight``."""

    def __init__(self, d_model: int, vocab_size: int, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.weight = self._new_parameter((vocab_size, d_model))
        xavier_uniform_(self.weight, self.rng)


def check_id_array(ids: Array, argument: str) -> None:
    """TypeError unless ``ids`` is an integer array, ValueError unless it is (B, T); nothing leaves the device."""
    xp = get_array_module()
    if not hasattr(ids, "dtype") or not xp.issubdtype(ids.dtype, xp.integer):
        kind = getattr(ids, "dtype", type(ids).__name__)
        raise TypeError(f"{argument} must be an integer array of token ids, got {kind}")
    if ids.ndim != 2:
        raise ValueError(f"{argument} must have shape (B, T), got {tuple(ids.shape)}")


def check_token_ids(arrays: list[tuple[Array, int, str]], bounds: bool = True) -> None:
    """For each (ids, vocab_size, argument): TypeError unless ids is a (B, T) integer array, ValueError
    for an id outside [0, vocab_size). The bounds of all of them come from the device in one transfer;
    ``bounds=False`` leaves them out (the caller checked them where it made the ids, on the host)."""
    for ids, _, argument in arrays:
        check_id_array(ids, argument)
    if not bounds:
        return
    present = [(ids, size, argument) for ids, size, argument in arrays if ids.size]
    if not present:
        return
    limits = get_array_module().stack([limit for ids, _, _ in present for limit in (ids.min(), ids.max())])
    check_id_bounds(present, to_numpy(limits).tolist())


def check_id_bounds(arrays: list[tuple[Array, int, str]], lows_and_highs: list[int]) -> None:
    """ValueError for the first (ids, vocab_size, argument) of ``arrays`` whose lowest and highest id
    (``lows_and_highs``: low, high for each array in turn, read already) leave [0, vocab_size)."""
    for (_, size, argument), low, high in zip(arrays, lows_and_highs[::2], lows_and_highs[1::2]):
        if low < 0 or high >= size:
            raise ValueError(f"{argument} holds ids in [{low}, {high}], outside the vocabulary [0, {size})")


class InputEmbeddings(Module):
    """Token ids (B, T) -> embeddings (B, T, d_model), scaled by sqrt(d_model).

    ``padding_idx``: the row of that id learns nothing from its lookups, as in PyTorch's
    ``nn.Embedding(padding_idx=...)`` (a tied projection still trains it).
    """

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        padding_idx: int | None = None,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        self.d_model = d_model
        self.vocab_size = vocab_size
        self.padding_idx = padding_idx
        self.embedding = Embedding(d_model, vocab_size, dtype=dtype, rng=self.rng)

    def check_ids(self, ids: Array, argument: str = "ids") -> None:
        """Raise TypeError for non-integer ids and ValueError for ids outside [0, vocab_size)."""
        check_token_ids([(ids, self.vocab_size, argument)])

    def forward(self, ids: Array, checked: bool = False) -> Array:
        """``checked``: the caller has validated ``ids`` already (the Transformer checks source and
        target together, in one transfer from the device)."""
        if not checked:
            self.check_ids(ids)
        out, cache = ops.embedding_forward(ids, self.embedding.weight.data)
        self._save(cache)
        return out

    def backward(self, dout: Array) -> None:
        """Accumulates the table's gradient; token ids have no gradient, so nothing is returned."""
        grad = ops.embedding_backward(dout, self._take())
        if self.padding_idx is not None:
            grad[self.padding_idx] = 0
        self.embedding.weight.accumulate(grad)


class PositionalEncoding(Module):
    """Adds the fixed sinusoidal table (seq_len, d_model) to x (B, T, d_model), then dropout; the
    table's ``layout`` is the paper's "interleaved" sines and cosines or Marian's "split" halves."""

    def __init__(
        self,
        d_model: int,
        seq_len: int,
        dropout: float,
        layout: str = "interleaved",
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        if layout not in POSITION_LAYOUTS:
            raise ValueError(f"layout must be one of {POSITION_LAYOUTS}, got {layout!r}")
        self.d_model = d_model
        self.seq_len = seq_len
        self.layout = layout
        self.pe = ops.sinusoidal_table(seq_len, d_model, self.dtype, layout)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def check_length(self, length: int, argument: str) -> None:
        if length > self.seq_len:
            raise ValueError(
                f"{argument} has length {length}, longer than the positional table's seq_len={self.seq_len}"
            )

    def forward(self, x: Array, start: int = 0) -> Array:
        self.check_length(start + x.shape[1], "x")
        out, _ = ops.positional_encoding_forward(x, self.pe, start)
        return self.dropout.forward(out)

    def backward(self, dout: Array) -> Array:
        return ops.positional_encoding_backward(self.dropout.backward(dout), None)


class LayerNormalization(Module):
    """gamma * (x - mean) / sqrt(var + eps) + beta over the last axis (biased variance)."""

    def __init__(self, features: int, eps: float = 1e-5, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.eps = eps
        self.gamma = self._new_parameter((features,), fill=1.0)
        self.beta = self._new_parameter((features,))
        self._ahead: tuple[Array, Array] | None = None  # (x, its norm), made by forward_added

    def forward(self, x: Array) -> Array:
        """The norm of x; where forward_added made x, the norm it made in the same launch."""
        ahead, self._ahead = self._ahead, None
        if ahead is not None and ahead[0] is x:
            return ahead[1]
        out, cache = ops.layer_norm_forward(x, self.gamma.data, self.beta.data, self.eps)
        self._save(cache)
        return out

    def forward_added(self, y: Array, skip: Array, dropout: Dropout, kernel: Any) -> Array:
        """``skip + dropout(y)``, the sum this norm takes next, by the fused ``kernel``
        (kernels.fused_layer("dropout_add_norm")) with its norm in one launch: forward of the sum then
        returns that norm. ``dropout`` keeps its mask's cache for its backward, this norm its own."""
        total, out, dropout_cache, cache = kernel(
            y, skip, dropout.p, dropout.rng, self.gamma.data, self.beta.data, self.eps
        )
        dropout._save((dropout_cache,))
        self._save(cache)
        self._ahead = total, out
        return total

    def backward(self, dout: Array, preceding: Dropout | None = None) -> Array:
        """dx; ``preceding`` as in backward_added."""
        return self.backward_added(dout, None, preceding)

    def backward_added(self, dout: Array, dskip: Array | None, preceding: Dropout | None = None) -> Array:
        """dx, plus ``dskip`` where given (a residual connection's skip gradient: in the backward's launch
        where the backend fuses the two); the parameters' gradients accumulated, or written straight
        into them (kernels.backward_into). ``preceding``: the dropout whose backward takes dx next (a
        pre-norm connection's exit before this norm), where the backend fuses the two
        (kernels.fused_layer("layer_norm_add_dropout")) made in the same launch: its backward of dx then
        returns it."""
        parameters = (self.gamma, self.beta)
        fuse = preceding is not None and preceding.training and preceding.p
        kernel = fused_layer("layer_norm_add_dropout") if fuse else None
        into = backward_into("layer_norm")
        cache = self._take()
        if kernel is not None:
            assert preceding is not None
            outputs = self._gradient_outputs(parameters)
            (dropout_cache,) = preceding._take()
            dx, dropped, *gradients = kernel(dout, cache, dskip, dropout_cache, *outputs)
            preceding._ahead = dx, dropped
        elif into is None:
            outputs = (None, None)
            dx, *gradients = ops.layer_norm_backward(dout, cache)
            dx = dx if dskip is None else dx + dskip
        else:
            outputs = self._gradient_outputs(parameters)
            dx, *gradients = into(dout, cache, *outputs, dskip)
        self._accumulate_unwritten(parameters, tuple(gradients), outputs)
        return dx


_ACTIVATED = object()  # a forward whose activation linear_1 ran fused with its bias: its backward too


class FeedForwardBlock(Module):
    """linear_2(dropout(f(linear_1(x)))): d_model -> d_ff -> d_model, f the ``activation``: "relu"
    (the paper), "silu" (Marian's swish) or "gelu_tanh"."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        dropout: float,
        activation: str = "relu",
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(dtype, rng)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.activation = activation
        self.linear_1 = Linear(d_model, d_ff, dtype=dtype, rng=self.rng)
        self.linear_2 = Linear(d_ff, d_model, dtype=dtype, rng=self.rng)
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def forward(self, x: Array) -> Array:
        kernel = fused_layer(f"bias_{self.activation}")
        if kernel is None:
            hidden = self.linear_1.forward(x)
            hidden, activation_cache = getattr(ops, f"{self.activation}_forward")(hidden)
        else:  # the bias and the activation in one launch; linear_1 keeps what its backward needs
            hidden, activation_cache = self.linear_1.forward_activated(x, kernel), _ACTIVATED
        self._save(activation_cache)
        hidden = self.dropout.forward(hidden)
        return self.linear_2.forward(hidden)

    def backward(self, dout: Array) -> Array:
        dhidden = self.linear_2.backward(dout)
        dhidden = self.dropout.backward(dhidden)
        activation_cache = self._take()
        if activation_cache is _ACTIVATED:
            return self.linear_1.backward_activated(dhidden)
        dhidden = getattr(ops, f"{self.activation}_backward")(dhidden, activation_cache)
        return self.linear_1.backward(dhidden)


class _AttentionBase(Module):
    """Shared set-up of the two attention blocks: head count, the stacked projection buffers.

    ``forward(x_q, x_kv=None, mask=None)``: self-attention over x_q when x_kv is None (queries,
    keys and values all from x_q), else cross-attention (queries from x_q, keys and values from
    x_kv). ``backward`` returns dx after self-attention and (dx_q, dx_kv) after cross-attention.
    """

    def __init__(self, d_model: int, h: int, dropout: float, dtype: Any, rng: Any) -> None:
        super().__init__(dtype, rng)
        if h < 1 or d_model % h != 0:
            raise ValueError(f"d_model must be divisible by h, got d_model={d_model}, h={h}")
        self.d_model = d_model
        self.h = h
        self.d_k = d_model // h
        self.dropout = Dropout(dropout, dtype=dtype, rng=self.rng)

    def _stacked(
        self, buffer_rows: list[tuple[str, int]], in_features: int, bias: bool = False
    ) -> tuple[Parameter, Parameter | None]:
        """One (rows, in) buffer whose row blocks are the Weights named in ``buffer_rows``, in order,
        and with ``bias`` one (rows,) buffer of their biases (else None).

        The attention functions take the stacked matrix ([W_q; W_k; W_v], ...), so a kernel can
        multiply by all of it at once; each Weight is a view of its rows, under its own name.
        """
        total = sum(rows for _, rows in buffer_rows)
        buffer = self._new_parameter((total, in_features))
        bias_buffer = self._new_parameter((total,)) if bias else None
        start = 0
        for name, rows in buffer_rows:
            rows_of = slice(start, start + rows)
            view = Parameter(buffer.data[rows_of], owner=buffer, index=rows_of)  # its grad: made on use
            bias_view = (
                None
                if bias_buffer is None
                else Parameter(bias_buffer.data[rows_of], owner=bias_buffer, index=rows_of)
            )
            setattr(self, name, Weight(view, self.rng, bias_view))
            start += rows
        return buffer, bias_buffer

    @property
    def attention_probs(self) -> Array:
        """The attention weights (B, H, T, S) of the last forward (before dropout), for pictures."""
        if self._cache is None:
            raise ValueError(f"{type(self).__name__}.attention_probs needs a forward first")
        return self._cache.cache.heads.attention.probs

    def _backward_into(
        self, dout: Array, cache: Any, is_self_attention: bool, parameters: tuple[Parameter | None, ...]
    ) -> Array | tuple[Array, Array]:
        """backward by kernels.backward_into("attention"), which writes the gradients of ``parameters``
        (w_in, w_decompress, w_o, b_in, b_o; None where the block has none) straight into them while they
        read as zero; the others are accumulated."""
        outputs = self._gradient_outputs(parameters)
        dx_q, dx_kv, *gradients = backward_into("attention")(dout, cache, outputs)
        self._accumulate_unwritten(parameters, tuple(gradients), outputs)
        return dx_q if is_self_attention else (dx_q, dx_kv)

    def _check(self, x_q: Array, x_kv: Array | None, mask: Array | None) -> None:
        for argument, x in (("x_q", x_q), ("x_kv", x_q if x_kv is None else x_kv)):
            if x.ndim != 3 or x.shape[-1] != self.d_model:
                raise ValueError(f"{argument} must have shape (B, T, {self.d_model}), got {tuple(x.shape)}")
        keys = x_q if x_kv is None else x_kv
        check_attention_mask(mask, (x_q.shape[0], self.h, x_q.shape[1], keys.shape[1]), "mask")


class _AttentionCache(NamedTuple):
    is_self_attention: bool
    cache: Any  # the forward's cache, for the matching backward


class MultiHeadAttentionBlock(_AttentionBase):
    """Multi-head attention with projections ``w_q``, ``w_k``, ``w_v`` and ``w_o``, bias-free as in
    the from-scratch design, or with biases (``bias=True``: ``w_q.bias``..., as Marian has them).

    W_q, W_k and W_v are stored stacked as one (3D, D) matrix, ``[W_q; W_k; W_v]`` (their biases as
    one (3D,) vector), so that self-attention can make Q, K and V with one product (the design
    notes' (q, k, v) always have k = v).
    """

    def __init__(
        self,
        d_model: int,
        h: int,
        dropout: float,
        bias: bool = False,
        *,
        dtype: Any = "float32",
        rng: Any = None,
    ) -> None:
        super().__init__(d_model, h, dropout, dtype, rng)
        rows = [("w_q", d_model), ("w_k", d_model), ("w_v", d_model)]
        self._w_qkv, self._b_qkv = self._stacked(rows, d_model, bias)
        self.w_o = Weight(
            self._new_parameter((d_model, d_model)),
            self.rng,
            self._new_parameter((d_model,)) if bias else None,
        )

    @property
    def stacked_qkv_bias(self) -> Array | None:
        """[b_q; b_k; b_v], (3D,), or None for bias-free projections."""
        return None if self._b_qkv is None else self._b_qkv.data

    @property
    def stacked_qkv(self) -> Array:
        """[W_q; W_k; W_v], (3D, D): the matrix the attention functions take (rows D: W_q, then W_k, W_v)."""
        return self._w_qkv.data

    def forward(self, x_q: Array, x_kv: Array | None = None, mask: Array | None = None) -> Array:
        self._check(x_q, x_kv, mask)
        weights = (
            self._w_qkv.data,
            self.w_o.weight.data,
            mask,
            self.h,
            self.dropout.p,
            self.rng,
            self.training,
            self.stacked_qkv_bias,
            None if self.w_o.bias is None else self.w_o.bias.data,
        )
        if x_kv is None:
            out, cache = ops.multi_head_self_attention_forward(x_q, *weights)
        else:
            out, cache = ops.multi_head_attention_forward(x_q, x_kv, *weights)
        self._save(_AttentionCache(x_kv is None, cache))
        return out

    def backward(self, dout: Array) -> Array | tuple[Array, Array]:
        """dx after self-attention; (dx_q, dx_kv) after cross-attention."""
        is_self_attention, cache = self._take()
        parameters = (self._w_qkv, None, self.w_o.weight, self._b_qkv, self.w_o.bias)
        if backward_into("attention") is not None:
            return self._backward_into(dout, cache, is_self_attention, parameters)
        if is_self_attention:
            dx, dw_qkv, dw_o, db_qkv, db_o = ops.multi_head_self_attention_backward(dout, cache)
        else:
            dx_q, dx_kv, dw_qkv, dw_o, db_qkv, db_o = ops.multi_head_attention_backward(dout, cache)
        self._accumulate_unwritten(parameters, (dw_qkv, None, dw_o, db_qkv, db_o), (None,) * 5)
        return dx if is_self_attention else (dx_q, dx_kv)


class MultiHeadLatentAttentionBlock(_AttentionBase):
    """Multi-Head Latent Attention: keys and values decompressed from a latent of L = d_model / 4.

    Parameters ``w_q``, ``w_kv_compress`` (L, d_model), ``w_k_decompress``, ``w_v_decompress``
    (d_model, L) and ``w_o``, all bias-free; stored stacked as [W_q; W_c] (D + L, D) and
    [W_kd; W_vd] (2D, L).
    """

    def __init__(
        self, d_model: int, h: int, dropout: float, *, dtype: Any = "float32", rng: Any = None
    ) -> None:
        if d_model % 4 != 0:
            raise ValueError(
                f"d_model must be divisible by 4 for Multi-Head Latent Attention, got d_model={d_model}"
            )
        super().__init__(d_model, h, dropout, dtype, rng)
        self.latent_dim = d_model // 4
        self._w_q_compress, _ = self._stacked([("w_q", d_model), ("w_kv_compress", self.latent_dim)], d_model)
        decompress = [("w_k_decompress", d_model), ("w_v_decompress", d_model)]
        self._w_kv_decompress, _ = self._stacked(decompress, self.latent_dim)
        self.w_o = Weight(self._new_parameter((d_model, d_model)), self.rng)

    @property
    def stacked_q_compress(self) -> Array:
        """[W_q; W_kv_compress], (D + L, D): queries and the key/value latent from one product."""
        return self._w_q_compress.data

    @property
    def stacked_kv_decompress(self) -> Array:
        """[W_k_decompress; W_v_decompress], (2D, L): keys and values from the latent."""
        return self._w_kv_decompress.data

    def forward(self, x_q: Array, x_kv: Array | None = None, mask: Array | None = None) -> Array:
        self._check(x_q, x_kv, mask)
        weights = (
            self._w_q_compress.data,
            self._w_kv_decompress.data,
            self.w_o.weight.data,
            mask,
            self.h,
            self.dropout.p,
            self.rng,
            self.training,
        )
        if x_kv is None:
            out, cache = ops.multi_head_latent_self_attention_forward(x_q, *weights)
        else:
            out, cache = ops.multi_head_latent_attention_forward(x_q, x_kv, *weights)
        self._save(_AttentionCache(x_kv is None, cache))
        return out

    def backward(self, dout: Array) -> Array | tuple[Array, Array]:
        """dx after self-attention; (dx_q, dx_kv) after cross-attention."""
        is_self_attention, cache = self._take()
        parameters = (self._w_q_compress, self._w_kv_decompress, self.w_o.weight, None, None)
        if backward_into("attention") is not None:
            return self._backward_into(dout, cache, is_self_attention, parameters)
        if is_self_attention:
            dx, dw_q_compress, dw_kv_decompress, dw_o = ops.multi_head_latent_self_attention_backward(
                dout, cache
            )
        else:
            dx_q, dx_kv, dw_q_compress, dw_kv_decompress, dw_o = ops.multi_head_latent_attention_backward(
                dout, cache
            )
        gradients = (dw_q_compress, dw_kv_decompress, dw_o, None, None)
        self._accumulate_unwritten(parameters, gradients, (None,) * 5)
        return dx if is_self_attention else (dx_q, dx_kv)


AttentionBlock = MultiHeadAttentionBlock | MultiHeadLatentAttentionBlock


class ProjectionLayer(Module):
    """(B, T, d_model) -> logits (B, T, vocab_size) through ``proj`` (with bias)."""

    def __init__(self, d_model: int, vocab_size: int, *, dtype: Any = "float32", rng: Any = None) -> None:
        super().__init__(dtype, rng)
        self.proj = Linear(d_model, vocab_size, dtype=dtype, rng=self.rng)

    def forward(self, x: Array) -> Array:
        return self.proj.forward(x)

    def backward(self, dout: Array) -> Array:
        return self.proj.backward(dout)


def __getattr__(name: str) -> NoReturn:
    """A name that moved out of this module (the blocks and stacks, to stacks.py) answers with its new place."""
    if f"{__name__}.{name}" in MOVED:
        refuse_moved_name(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
