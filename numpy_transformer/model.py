"""The encoder-decoder Transformer, ``build_transformer``, and the mask helpers."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from .backend import Array, backend_name, get_array_module, make_rng, require_array, resolve_dtype
from .functional import ACTIVATIONS, POSITION_LAYOUTS
from .kernels import ops
from .layers import (
    FeedForwardBlock,
    InputEmbeddings,
    MultiHeadAttentionBlock,
    MultiHeadLatentAttentionBlock,
    PositionalEncoding,
    ProjectionLayer,
    check_attention_mask,
    check_id_array,
    check_id_bounds,
    check_token_ids,
)
from .module import Module, ModuleList
from .presets import BASE
from .settings import Checked, setting
from .stacks import Decoder, DecoderBlock, Encoder, EncoderBlock

ATTENTION_KINDS = {"mha": MultiHeadAttentionBlock, "mla": MultiHeadLatentAttentionBlock}


def make_src_mask(src: Array, pad_id: int) -> Array:
    """Source padding mask (B, 1, 1, S): true where the key position is a real token."""
    require_array(src, "src")
    return (src != pad_id)[:, None, None, :]


def causal_mask(length: int) -> Array:
    """(1, 1, T, T) lower-triangular mask: position t may attend to positions <= t."""
    xp = get_array_module()
    return xp.tril(xp.ones((length, length), dtype=bool))[None, None]


def make_tgt_mask(tgt: Array, pad_id: int) -> Array:
    """Target mask (B, 1, T, T): a key is visible if it is not padding and not in the future."""
    require_array(tgt, "tgt")
    return make_src_mask(tgt, pad_id) & causal_mask(tgt.shape[1])


class Transformer(Module):
    """Embeddings, positional encodings, encoder, decoder and projection, as in the PyTorch
    from-scratch design it follows."""

    def __init__(
        self,
        encoder: Encoder,
        decoder: Decoder,
        src_embed: InputEmbeddings,
        tgt_embed: InputEmbeddings,
        src_pos: PositionalEncoding,
        tgt_pos: PositionalEncoding,
        projection_layer: ProjectionLayer,
        config: TransformerConfig,
    ) -> None:
        super().__init__(encoder.dtype, encoder.rng)
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.src_pos = src_pos
        self.tgt_pos = tgt_pos
        self.projection_layer = projection_layer
        self.config = config

    # -- the three stages: encode, decode, project ------------------------------------------------------

    def encode(self, src: Array, src_mask: Array | None, *, checked: bool = False) -> Array:
        """src (B, S) ids -> encoder output (B, S, d_model); ``checked``: check_inputs already ran."""
        if not checked:
            self.check_inputs(src, src_mask, None, None)
        return self.encoder.forward(self.src_pos.forward(self.src_embed.forward(src, checked=True)), src_mask)

    def decode(
        self,
        encoder_output: Array,
        src_mask: Array | None,
        tgt: Array,
        tgt_mask: Array | None,
        *,
        checked: bool = False,
    ) -> Array:
        """tgt (B, T) ids and encoder output (B, S, d_model) -> decoder output (B, T, d_model)."""
        if not checked:
            self.check_inputs(None, None, tgt, tgt_mask, encoder_output, src_mask)
        x = self.tgt_pos.forward(self.tgt_embed.forward(tgt, checked=True))
        return self.decoder.forward(x, encoder_output, src_mask, tgt_mask)

    def project(self, x: Array) -> Array:
        """(B, T, d_model) -> logits (B, T, tgt_vocab_size)."""
        return self.projection_layer.forward(x)

    def forward(self, src: Array, tgt: Array, src_mask: Array | None, tgt_mask: Array | None) -> Array:
        """Logits (B, T, tgt_vocab) for source ids (B, S) and shifted-right target ids (B, T)."""
        self.check_inputs(src, src_mask, tgt, tgt_mask)
        encoder_output = self.encode(src, src_mask, checked=True)
        return self.project(self.decode(encoder_output, src_mask, tgt, tgt_mask, checked=True))

    # -- backward -----------------------------------------------------------------------------

    def backward(self, dlogits: Array) -> None:
        """Accumulate every parameter's gradient from dL/dlogits (B, T, tgt_vocab), in reverse order."""
        require_array(dlogits, "dlogits")
        self.backward_decoded(self.projection_layer.backward(dlogits))

    def backward_decoded(self, ddecoded: Array) -> None:
        """The backward below the projection: from dL/d(decoder output) (B, T, d_model)."""
        dtgt, d_encoder_output = self.decoder.backward(ddecoded)
        self.tgt_embed.backward(self.tgt_pos.backward(dtgt))
        self.src_embed.backward(self.src_pos.backward(self.encoder.backward(d_encoder_output)))

    # -- validation ---------------------------------------------------------------------------

    def check_inputs(
        self,
        src: Array | None,
        src_mask: Array | None,
        tgt: Array | None,
        tgt_mask: Array | None,
        encoder_output: Array | None = None,
        decode_src_mask: Array | None = None,
        labels: Array | None = None,
        bounds: bool = True,
    ) -> None:
        """Validate ids, lengths and mask shapes before any work is done (the ids' bounds in one
        transfer; ``bounds=False``: not, the caller checked them on the host); ``labels``, the
        training targets, must have tgt's shape and be target ids."""
        heads = self.config.h
        check_token_ids(
            [
                (ids, vocab_size, name)
                for ids, vocab_size, name in (
                    (src, self.src_embed.vocab_size, "src"),
                    (tgt, self.tgt_embed.vocab_size, "tgt"),
                    (labels, self.config.tgt_vocab_size, "labels"),
                )
                if ids is not None
            ],
            bounds,
        )
        if labels is not None:
            if tgt is None:
                raise ValueError("labels were given without tgt, whose shape they must have")
            if labels.shape != tgt.shape:
                raise ValueError(
                    f"labels has shape {tuple(labels.shape)}, expected tgt's shape {tuple(tgt.shape)}"
                )
        if src is not None:
            self.src_pos.check_length(src.shape[1], "src")
            batch, length = src.shape
            check_attention_mask(src_mask, (batch, heads, length, length), "src_mask")
        if tgt is not None:
            self.tgt_pos.check_length(tgt.shape[1], "tgt")
            batch, length = tgt.shape
            check_attention_mask(tgt_mask, (batch, heads, length, length), "tgt_mask")
            encoder_length = src.shape[1] if src is not None else None
            if encoder_output is not None:
                encoder_length = encoder_output.shape[1]
                if encoder_output.shape[0] != batch:
                    raise ValueError(
                        f"encoder_output has batch {encoder_output.shape[0]}, but tgt has batch {batch}"
                    )
            if encoder_length is not None:
                mask = decode_src_mask if encoder_output is not None else src_mask
                check_attention_mask(mask, (batch, heads, length, encoder_length), "src_mask")


_ALL_PADDING = "labels: every token equals pad_id={pad_id!r}, so there is nothing to average the loss over"


def loss_and_backward(
    model: Transformer,
    src: Array,
    tgt: Array,
    src_mask: Array | None,
    tgt_mask: Array | None,
    labels: Array,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    weight: float = 1.0,
    *,
    on_device: bool = False,
) -> float | Array:
    """One batch's forward, loss and backward: the step of training.

    Encode and decode; project the decoder's output to logits; the label-smoothed cross-entropy of
    the logits against ``labels`` (``(B, T_tgt)`` ids, ``pad_id`` not counted); then the backward
    from ``dL/dL = weight``, so every parameter's ``.grad`` gains ``weight`` times its gradient of
    the mean loss (gradients accumulate until ``zero_grad()``). Returns the loss (a float,
    unweighted; with ``on_device``, a 0-d array). The Trainer calls it for a whole batch, and each
    thread of data parallelism for its rows with ``weight`` = its share of the batch's target tokens.

    Only the positions with a label are projected: a padded position's logits (a row of
    ``tgt_vocab`` numbers; at a real vocabulary the projection is the step's largest product) would
    be computed for the loss to ignore, and its gradient is zero. So the loss and every gradient are
    those of ``model.forward`` and ``model.backward`` over the whole (B, T) grid (to rounding),
    without the padding's share of the work. On a GPU (CuPy) every position is projected and the
    loss is the mean weighted by the labels' mask, since choosing the labelled positions would wait
    for the device in the middle of the step.

    ``on_device=True``, for a GPU step that reads its loss once, at its end: no host
    synchronisation at all. Every position is projected, the mean weighted by the labels' mask; the
    loss comes back as a 0-d array of the backend; and every check that would read the device is the
    caller's, made on the host where it made the batch (check_ids_on_host): every id of src and tgt
    in its vocabulary, every label other than ``pad_id`` in the target's, and at least one label
    (labels all ``pad_id`` give a NaN loss here). Dtypes, shapes and masks are checked as ever.
    """
    xp = get_array_module()
    check_loss_settings(pad_id, label_smoothing, weight)
    check_training_inputs(model, src, src_mask, tgt, tgt_mask, labels, pad_id, bounds=not on_device)
    masked = (model, src, tgt, src_mask, tgt_mask, labels, pad_id, label_smoothing, weight)
    if on_device:
        return _masked_loss_and_backward(*masked)
    labelled = labels != pad_id
    if backend_name() == "cupy":  # no positions chosen on the device; the loss read at the end
        if not bool(labelled.any()):
            raise ValueError(_ALL_PADDING.format(pad_id=pad_id))
        return float(_masked_loss_and_backward(*masked))
    positions = xp.flatnonzero(labelled)  # the labelled positions of the B*T, in order
    if positions.size == 0:
        raise ValueError(_ALL_PADDING.format(pad_id=pad_id))
    decoded = model.decode(model.encode(src, src_mask, checked=True), src_mask, tgt, tgt_mask, checked=True)
    rows = decoded.reshape(-1, decoded.shape[-1])  # (B*T, d_model)
    logits = model.project(rows[positions])  # (n, tgt_vocab): n labelled positions
    loss, cache = ops.cross_entropy_forward(logits, labels.reshape(-1)[positions], None, label_smoothing)
    drows = xp.zeros_like(rows)  # padding's rows stay zero
    drows[positions] = model.projection_layer.backward(ops.cross_entropy_backward(weight, cache))
    model.backward_decoded(drows.reshape(decoded.shape))
    return loss


def _masked_loss_and_backward(
    model: Transformer,
    src: Array,
    tgt: Array,
    src_mask: Array | None,
    tgt_mask: Array | None,
    labels: Array,
    pad_id: int,
    label_smoothing: float,
    weight: float,
) -> Array:
    """The step over every position, the loss the mean of the labelled ones' (a 0-d array)."""
    decoded = model.decode(model.encode(src, src_mask, checked=True), src_mask, tgt, tgt_mask, checked=True)
    flat_labels = labels.reshape(-1)
    logits = model.project(decoded.reshape(-1, decoded.shape[-1]))  # (B*T, tgt_vocab)
    loss, dlogits = ops.masked_cross_entropy(
        logits, flat_labels, flat_labels != pad_id, label_smoothing, weight
    )
    model.backward_decoded(model.projection_layer.backward(dlogits).reshape(decoded.shape))
    return loss


def check_ids_on_host(model: Transformer, src: Array, tgt: Array, labels: Array, pad_id: int) -> None:
    """What loss_and_backward(on_device=True) leaves to the maker of a batch, checked on the host
    arrays it made the batch from (no device read): every id of ``src`` and ``tgt`` in its vocabulary,
    at least one label other than ``pad_id``, and every such label in the target vocabulary."""
    labelled = labels[labels != pad_id]
    if labelled.size == 0:
        raise ValueError(_ALL_PADDING.format(pad_id=pad_id))
    arrays = [
        (ids, size, name)
        for ids, size, name in (
            (src, model.src_embed.vocab_size, "src"),
            (tgt, model.tgt_embed.vocab_size, "tgt"),
            (labelled, model.config.tgt_vocab_size, "labels"),
        )
        if ids.size
    ]
    check_id_bounds(arrays, [limit for ids, _, _ in arrays for limit in (int(ids.min()), int(ids.max()))])


def check_loss_settings(pad_id: int, label_smoothing: float, weight: float) -> None:
    """Refuse, before any work, a ``pad_id`` that is not an integer (the string "0" would count every
    padded position), a ``label_smoothing`` outside [0, 1) and a ``weight`` that is not a finite number."""
    if isinstance(pad_id, bool) or not isinstance(pad_id, numbers.Integral):
        raise TypeError(f"pad_id must be an integer id, got {pad_id!r}")
    if not _finite_number(label_smoothing) or not 0 <= label_smoothing < 1:
        raise ValueError(f"label_smoothing must be a number in [0, 1), got {label_smoothing!r}")
    if not _finite_number(weight):
        raise ValueError(f"weight must be a finite number, got {weight!r}")


def _finite_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def check_training_inputs(
    model: Transformer,
    src: Array,
    src_mask: Array | None,
    tgt: Array,
    tgt_mask: Array | None,
    labels: Array,
    pad_id: int,
    bounds: bool = True,
) -> None:
    """``model.check_inputs`` for a training step: also ``labels``, an integer array of tgt's shape
    whose ids other than ``pad_id`` lie in the target vocabulary (``pad_id`` itself may lie outside
    it, as PyTorch's ``ignore_index`` of -100 does); ``bounds=False``: the ids' range left to the
    caller, who checked it on the host."""
    require_array(tgt, "tgt")
    check_id_array(labels, "labels")  # an integer (B, T) array, before it is compared with pad_id
    if labels.size == 0:
        raise ValueError(f"labels must hold at least one token, got shape {tuple(labels.shape)}")
    if not bounds:
        model.check_inputs(src, src_mask, tgt, tgt_mask, labels=labels, bounds=False)
        return
    unpadded = get_array_module().where(labels == pad_id, 0, labels)
    model.check_inputs(src, src_mask, tgt, tgt_mask, labels=unpadded)


def check_attention_shape(d_model: int | None, h: int | None, attention: str, attention_bias: bool) -> None:
    """TransformerConfig's refusals of the attention's shape: a width ``d_model`` the ``h`` heads do not
    divide, latent attention of a width not divisible by 4, attention biases on latent attention. A
    run's settings (ModelConfig) meet them before its corpus is read; a size it has not chosen yet
    (None) is checked once chosen."""
    if d_model is not None and h is not None and d_model % h != 0:
        raise ValueError(f"d_model must be divisible by h, got d_model={d_model}, h={h}")
    if attention_bias and attention != "mha":
        raise ValueError(f"attention_bias=True needs attention='mha', got attention={attention!r}")
    if attention == "mla" and d_model is not None and d_model % 4 != 0:
        raise ValueError(f"d_model must be divisible by 4 for attention='mla', got d_model={d_model}")


def parameter_count(config: TransformerConfig | Mapping[str, Any]) -> int:
    """The number of weights build_transformer(**config) creates, counted from the sizes alone."""
    config = TransformerConfig.of(config)
    d, d_ff, n = config.d_model, config.d_ff, config.N
    src_vocab, tgt_vocab = config.src_vocab_size, config.tgt_vocab_size
    if config.attention == "mla":  # [W_q; W_c] (D + L, D), [W_kd; W_vd] (2D, L), W_o, L = D / 4
        latent = d // 4
        attention = (d + latent) * d + 2 * d * latent + d * d
    else:  # W_q, W_k, W_v, W_o, and their biases where they have them
        attention = 4 * d * d + (4 * d if config.attention_bias else 0)
    feed_forward = 2 * d * d_ff + d_ff + d
    norm = 2 * d
    final_norm = norm if config.final_norm else 0
    encoder = n * (attention + feed_forward + 2 * norm) + final_norm
    decoder = n * (2 * attention + feed_forward + 3 * norm) + final_norm
    if not config.tie_embeddings:  # source and target embeddings, the projection
        tables = (src_vocab + 2 * tgt_vocab) * d
    elif config.shared_vocab:  # one matrix for all three
        tables = tgt_vocab * d
    else:  # the source embedding, and one matrix for the target embedding and the projection
        tables = (src_vocab + tgt_vocab) * d
    return tables + encoder + decoder + tgt_vocab


DTYPES = ("float32", "float64")  # the weights' and activations' floating-point types


@dataclass(frozen=True)
class TransformerConfig(Checked):
    """The model's shape and architecture: every setting of it, declared once.

    Each field is a setting (``numpy_transformer.settings``): its name, its type, its default (the
    paper's base model, ``presets.BASE``) and its checks (``minimum``, ``below``, ``choices``). Every
    value is checked when the configuration is made, before anything is allocated, and so are the
    settings that depend on each other; integers and flags are stored as plain ``int`` and ``bool``,
    the dtype as its name. :func:`build_transformer` builds the model it describes, taking it or its
    fields; the model keeps it (``model.config``) and every checkpoint holds it (``asdict``); the
    toolkit's ModelConfig declares the settings of it a run may give, held to agree by a test.
    """

    src_vocab_size: int = setting(minimum=1)
    tgt_vocab_size: int = setting(minimum=1)
    src_seq_len: int = setting(minimum=1)
    tgt_seq_len: int = setting(minimum=1)
    d_model: int = setting(BASE.d_model, minimum=1)
    N: int = setting(BASE.N, minimum=1)
    h: int = setting(BASE.h, minimum=1)
    dropout: float = setting(BASE.dropout, minimum=0.0, below=1.0)
    d_ff: int = setting(BASE.d_ff, minimum=1)
    attention: str = setting("mha", choices=tuple(ATTENTION_KINDS))
    norm_first: bool = setting(True)
    dtype: str = setting("float32", choices=DTYPES)
    tie_embeddings: bool = setting(False)
    shared_vocab: bool = setting(False)
    activation: str = setting("relu", choices=ACTIVATIONS)
    attention_bias: bool = setting(False)
    positions: str = setting("interleaved", choices=POSITION_LAYOUTS)
    final_norm: bool = setting(True)
    padding_idx: int | None = setting(None, minimum=0)  # below both vocabularies' sizes

    @classmethod
    def of(cls, config: TransformerConfig | Mapping[str, Any]) -> TransformerConfig:
        """``config`` itself, or the configuration a mapping of its fields describes (a checkpoint's
        ``"model"``, build_transformer's keyword arguments; a ``seed`` among them is not part of it)."""
        if isinstance(config, TransformerConfig):
            return config
        if not isinstance(config, Mapping):
            raise TypeError(
                f"config must be a TransformerConfig or a mapping of its fields, got {type(config).__name__}"
            )
        unknown = sorted(set(config) - {item.name for item in fields(cls)} - {"seed"})
        if unknown:
            raise TypeError(
                f"unknown model setting(s) {', '.join(unknown)}: expected {[f.name for f in fields(cls)]}"
            )
        return cls(**{name: value for name, value in config.items() if name != "seed"})

    def __post_init__(self) -> None:
        if not isinstance(self.dtype, str):  # a NumPy dtype too: stored as its name (the backend's check)
            object.__setattr__(self, "dtype", get_array_module().dtype(resolve_dtype(self.dtype)).name)
        super().__post_init__()
        src_vocab, tgt_vocab, d_model, h = self.src_vocab_size, self.tgt_vocab_size, self.d_model, self.h
        attention, padding_idx = self.attention, self.padding_idx
        if self.shared_vocab and src_vocab != tgt_vocab:
            raise ValueError(
                f"shared_vocab needs src_vocab_size == tgt_vocab_size, got {src_vocab} and {tgt_vocab}"
            )
        check_attention_shape(d_model, h, attention, self.attention_bias)
        if padding_idx is not None and padding_idx >= min(src_vocab, tgt_vocab):
            raise ValueError(
                f"padding_idx must be None or a token id of both vocabularies, in [0, "
                f"{min(src_vocab, tgt_vocab)}), got {padding_idx!r}"
            )


def build_transformer(*args: Any, seed: int | None = 0, **settings: Any) -> Transformer:
    """Build the model a TransformerConfig describes; every parameter with more than one dimension
    is Xavier-uniform, drawn by one generator seeded with ``seed`` that later draws every dropout mask.

    The arguments are the configuration's fields, by position or by name, with its defaults and
    checks: ``build_transformer(src_vocab_size, tgt_vocab_size, src_seq_len, tgt_seq_len,
    d_model=512, N=6, h=8, dropout=0.1, d_ff=2048, ...)``; or a TransformerConfig alone, whose fields
    the keyword ``settings`` replace.

    ``attention`` chooses "mha" (the paper) or "mla" (Multi-Head Latent Attention: keys and values
    through a d_model/4 latent) for every attention block; ``norm_first`` chooses pre-norm (the
    from-scratch design) or post-norm (the paper).

    ``tie_embeddings`` shares one (V, d_model) matrix between the target embedding and the
    pre-softmax projection, and with the source embedding too when ``shared_vocab`` says source
    and target use one vocabulary (the paper, section 3.4). The shared matrix's gradient is the
    sum of its uses' gradients, each accumulating into the one parameter.

    The options a pretrained Marian (OPUS-MT) model needs, each off by default: ``activation``
    "silu" (Marian's swish) or "gelu_tanh" in the feed-forward blocks instead of "relu";
    ``attention_bias`` biases on W_q, W_k, W_v and W_o (MHA only); ``positions`` "split" for the
    sinusoids as sines then cosines instead of the paper's "interleaved"; ``final_norm=False`` for
    no layer normalisation after the last encoder and decoder blocks (post-norm blocks end in one);
    ``padding_idx`` an id whose embedding lookups pass no gradient (PyTorch's ``padding_idx``, which
    transformers' Marian models give their ``<pad>``, also their decoder's start token).
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)):
        raise TypeError(f"seed must be an integer or None, got {seed!r}")
    if seed is not None and seed < 0:  # NumPy's generators take none below 0
        raise ValueError(f"seed must be a non-negative integer or None, got {seed!r}")
    if len(args) == 1 and isinstance(args[0], TransformerConfig):
        config = replace(args[0], **settings)
    elif any(isinstance(arg, TransformerConfig) for arg in args):  # else read as src_vocab_size and on
        raise TypeError(
            f"build_transformer takes a TransformerConfig alone, its fields replaced by keyword "
            f"(build_transformer(config, dropout=0.0)), got it among {len(args)} positional arguments"
        )
    else:
        config = TransformerConfig(*args, **settings)
    return build_from_config(config, seed)


def build_from_config(config: TransformerConfig, seed: int | None = 0) -> Transformer:
    """The model ``config`` describes, its weights drawn by a generator seeded with ``seed``."""
    src_vocab_size, tgt_vocab_size, src_seq_len, tgt_seq_len = (
        config.src_vocab_size,
        config.tgt_vocab_size,
        config.src_seq_len,
        config.tgt_seq_len,
    )
    d_model, N, h, dropout, d_ff = config.d_model, config.N, config.h, config.dropout, config.d_ff
    attention, norm_first, dtype, activation = (
        config.attention,
        config.norm_first,
        config.dtype,
        config.activation,
    )
    tie_embeddings, shared_vocab, attention_bias = (
        config.tie_embeddings,
        config.shared_vocab,
        config.attention_bias,
    )
    positions, final_norm, padding_idx = config.positions, config.final_norm, config.padding_idx
    rng = make_rng(seed)
    common = {"dtype": dtype, "rng": rng}

    def attention_block(d_model: int, h: int, dropout: float, **common: Any) -> Any:
        if attention == "mha":
            return MultiHeadAttentionBlock(d_model, h, dropout, bool(attention_bias), **common)
        return MultiHeadLatentAttentionBlock(d_model, h, dropout, **common)

    src_embed = InputEmbeddings(d_model, src_vocab_size, padding_idx, **common)
    tgt_embed = InputEmbeddings(d_model, tgt_vocab_size, padding_idx, **common)
    src_pos = PositionalEncoding(d_model, src_seq_len, dropout, positions, **common)
    tgt_pos = PositionalEncoding(d_model, tgt_seq_len, dropout, positions, **common)
    encoder_blocks = [
        EncoderBlock(
            d_model,
            attention_block(d_model, h, dropout, **common),
            FeedForwardBlock(d_model, d_ff, dropout, activation, **common),
            dropout,
            norm_first,
            **common,
        )
        for _ in range(N)
    ]
    decoder_blocks = [
        DecoderBlock(
            d_model,
            attention_block(d_model, h, dropout, **common),
            attention_block(d_model, h, dropout, **common),
            FeedForwardBlock(d_model, d_ff, dropout, activation, **common),
            dropout,
            norm_first,
            **common,
        )
        for _ in range(N)
    ]
    encoder = Encoder(d_model, ModuleList(encoder_blocks), bool(final_norm), **common)
    decoder = Decoder(d_model, ModuleList(decoder_blocks), bool(final_norm), **common)
    projection_layer = ProjectionLayer(d_model, tgt_vocab_size, **common)
    if tie_embeddings:
        tgt_embed.embedding.weight = projection_layer.proj.weight
        if shared_vocab:
            src_embed.embedding.weight = projection_layer.proj.weight
    model = Transformer(encoder, decoder, src_embed, tgt_embed, src_pos, tgt_pos, projection_layer, config)
    model.flatten_parameters()
    return model
