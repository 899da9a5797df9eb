"""A model's weights under transformers' names, both ways: this package's parameter names -> Marian's
and Pegasus's (marian_names: what loading reads, what export writes), the reordering of a model of
interleaved positions, and the rows an exported tokenizer's extra units add.

Both architectures compute sinusoidal positions as sines then cosines ('split'). A model of the
paper's interleaved positions ('interleaved', sin and cos alternating) exports exactly all the same:
the interleaved table is the split one with its columns reordered, and the model computes the same
function when every axis of size d_model on the residual stream is reordered alike
(residual_permutation, permuted_state: the embeddings' columns, every layer norm, the inputs of W_q,
W_k, W_v and W1, the outputs of W_o and W2, the projection's inputs). Loading reorders such an export
back (config.json's ``numpy_transformer.positions``).
"""

from __future__ import annotations

from pathlib import Path

import numpy

from ...backend import to_numpy
from ...functional import sinusoidal_table
from ...model import Transformer
from .directory import PretrainedError

EMBEDDINGS = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "lm_head.weight")

POSITIONS = {"encoder": "encoder.embed_positions.weight", "decoder": "decoder.embed_positions.weight"}


def marian_embedding_names(tied: bool, shared: bool, pegasus: bool = False) -> dict[str, tuple[str, ...]]:
    """The embedding matrices of a model of ``tie_embeddings`` ``tied`` and ``shared_vocab`` ``shared``
    -> the names Marian's tensor may have, the one export_pretrained writes first (each also under a
    "model." prefix, except ``lm_head``). Tied and shared: one matrix (``share_encoder_decoder_embeddings``
    and ``tie_word_embeddings``); tied alone: the source's, and the target's as the projection
    (``tie_word_embeddings`` alone; of ``pegasus``, both read from its one table ``shared``, which
    holds both vocabularies: joined_embeddings); untied: three."""
    if tied and shared:
        return {"src_embed.embedding.weight": EMBEDDINGS}
    if tied and pegasus:
        return {
            "src_embed.embedding.weight": ("shared.weight", "encoder.embed_tokens.weight"),
            "tgt_embed.embedding.weight": ("shared.weight", "decoder.embed_tokens.weight", "lm_head.weight"),
        }
    if tied:
        return {
            "src_embed.embedding.weight": ("encoder.embed_tokens.weight",),
            "tgt_embed.embedding.weight": ("decoder.embed_tokens.weight", "lm_head.weight"),
        }
    return {
        "src_embed.embedding.weight": ("encoder.embed_tokens.weight", "shared.weight"),
        "tgt_embed.embedding.weight": ("decoder.embed_tokens.weight", "shared.weight"),
        "projection_layer.proj.weight": ("lm_head.weight",),
    }


def marian_names(
    layers: int, tied: bool = True, shared: bool = True, final_norm: bool = False
) -> dict[str, tuple[str, ...]]:
    """numpy_transformer's parameter names -> the names Marian's tensor may have, transformers' own
    first (each also under a "model." prefix); the embeddings as marian_embedding_names gives them;
    with ``final_norm`` (Pegasus's), the final norms and the embeddings as Pegasus names them
    (``encoder.layer_norm``, ``shared``)."""

    def attention(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {
            f"{ours}.{mine}.{part}": (f"{theirs}.{marian}_proj.{part}",)
            for mine, marian in (("w_q", "q"), ("w_k", "k"), ("w_v", "v"), ("w_o", "out"))
            for part in ("weight", "bias")
        }

    def norm(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {f"{ours}.gamma": (f"{theirs}.weight",), f"{ours}.beta": (f"{theirs}.bias",)}

    def feed_forward(ours: str, theirs: str) -> dict[str, tuple[str, ...]]:
        return {
            f"{ours}.linear_{i}.{part}": (f"{theirs}.fc{i}.{part}",)
            for i in (1, 2)
            for part in ("weight", "bias")
        }

    names = {
        **marian_embedding_names(tied, shared, pegasus=final_norm),
        "projection_layer.proj.bias": ("final_logits_bias",),
    }
    if final_norm:
        names |= norm("encoder.norm", "encoder.layer_norm") | norm("decoder.norm", "decoder.layer_norm")
    for i in range(layers):
        side = f"encoder.layers.{i}"
        names |= attention(f"{side}.self_attention_block", f"{side}.self_attn")
        names |= norm(f"{side}.residual_connections.0.norm", f"{side}.self_attn_layer_norm")
        names |= feed_forward(f"{side}.feed_forward_block", side)
        names |= norm(f"{side}.residual_connections.1.norm", f"{side}.final_layer_norm")
        side = f"decoder.layers.{i}"
        names |= attention(f"{side}.self_attention_block", f"{side}.self_attn")
        names |= norm(f"{side}.residual_connections.0.norm", f"{side}.self_attn_layer_norm")
        names |= attention(f"{side}.cross_attention_block", f"{side}.encoder_attn")
        names |= norm(f"{side}.residual_connections.1.norm", f"{side}.encoder_attn_layer_norm")
        names |= feed_forward(f"{side}.feed_forward_block", side)
        names |= norm(f"{side}.residual_connections.2.norm", f"{side}.final_layer_norm")
    return names


def _state_dict(weights: dict[str, numpy.ndarray], layers: int, path: Path) -> dict[str, numpy.ndarray]:
    """numpy_transformer's parameter names -> Marian's tensors (marian_names)."""

    def get(names: tuple[str, ...]) -> numpy.ndarray:
        for name in names:
            for prefix in ("", "model."):
                if prefix + name in weights:
                    return weights[prefix + name]
        raise PretrainedError(f"{path}: holds no tensor {names[0]!r}")

    state = {ours: get(theirs) for ours, theirs in marian_names(layers).items()}
    state["projection_layer.proj.bias"] = state["projection_layer.proj.bias"].reshape(-1)
    return state


def residual_permutation(d_model: int) -> numpy.ndarray:
    """The order of the interleaved sinusoids' columns that gives the split ones: ``split =
    interleaved[:, order]`` (the sines, at the even columns, then the cosines, at the odd ones)."""
    return numpy.concatenate([numpy.arange(0, d_model, 2), numpy.arange(1, d_model, 2)])


RESIDUAL_INPUTS = ("w_q.weight", "w_k.weight", "w_v.weight", "w_kv_compress.weight", "linear_1.weight")

RESIDUAL_OUTPUTS = ("w_o.weight", "w_o.bias", "linear_2.weight", "linear_2.bias")

RESIDUAL_FREE = (  # parameters with no axis on the residual stream
    "w_q.bias",
    "w_k.bias",
    "w_v.bias",
    "w_k_decompress.weight",
    "w_v_decompress.weight",
    "linear_1.bias",
    "projection_layer.proj.bias",
)


def permuted_state(state: dict[str, numpy.ndarray], order: numpy.ndarray) -> dict[str, numpy.ndarray]:
    """``state`` (a model's parameters by name) with every axis of size d_model on the residual stream
    reordered by ``order``: the embeddings' and the projection's columns (a tied table is one matrix,
    reordered once), every layer norm's gamma and beta, the input columns of W_q, W_k, W_v (and of
    latent attention's compression) and W1, the output rows and biases of W_o and W2. The model of
    ``state`` so reordered computes what the model of ``state`` does on a residual stream reordered by
    ``order``: with positions reordered alike, the same logits."""
    permuted = {}
    for name, value in state.items():
        if name.endswith((".gamma", ".beta")) or name.endswith(RESIDUAL_OUTPUTS):
            value = value[order]
        elif name.endswith(("embedding.weight", "projection_layer.proj.weight", *RESIDUAL_INPUTS)):
            value = value[:, order]
        elif not name.endswith(RESIDUAL_FREE):
            raise ValueError(f"{name}: not a parameter whose residual-stream axis is known")
        permuted[name] = value
    return permuted


def exported_state(model: Transformer) -> dict[str, numpy.ndarray]:
    """``model``'s parameters by name, as transformers' split sinusoids need them: a model of
    interleaved positions reordered by residual_permutation (permuted_state), of split ones as it is."""
    state = {name: to_numpy(value) for name, value in model.state_dict().items()}
    if model.config.positions == "interleaved":
        state = permuted_state(state, residual_permutation(model.config.d_model))
    return state


def marian_tensors(
    model: Transformer, state: dict[str, numpy.ndarray] | None = None
) -> dict[str, numpy.ndarray]:
    """Every weight of ``model`` under transformers' name (marian_names), attention biases
    as zeros in a model without them, reordered for split positions where the model's are
    interleaved (exported_state; ``state``, where given, is it)."""
    config = model.config
    state = exported_state(model) if state is None else state
    tensors = {}
    for ours, theirs in marian_names(
        config.N, config.tie_embeddings, config.shared_vocab, config.final_norm
    ).items():
        if ours in state:
            value = state[ours]
        else:  # an attention bias of a model without them
            value = numpy.zeros(state[ours.replace(".bias", ".weight")].shape[0], config.dtype)
        name = theirs[0]
        if ours == "projection_layer.proj.bias":
            value = value.reshape(1, -1)
        tensors[name if name in ("lm_head.weight", "final_logits_bias") else f"model.{name}"] = value
    return tensors


def pegasus_tensors(
    model: Transformer, aliases: tuple[int, int], unk: tuple[int, int]
) -> dict[str, numpy.ndarray]:
    """Every weight of ``model`` under Pegasus's name: Marian's (marian_tensors, the final norms as
    ``model.encoder.layer_norm`` and ``model.decoder.layer_norm``), and the split sinusoids of our
    positions as ``embed_positions`` (Pegasus keeps its table among its weights; Marian does not). A
    model of one embedding (tied, shared) writes it as ``model.shared.weight`` with ``aliases`` rows
    of ``<unk>`` after it (aliased_tensors); any other as one table of both vocabularies
    (joined_embeddings)."""
    config = model.config
    state = exported_state(model)
    tensors = marian_tensors(model, state)
    positions = to_numpy(
        sinusoidal_table(max(config.src_seq_len, config.tgt_seq_len), config.d_model, config.dtype, "split")
    )
    for side in ("encoder", "decoder"):
        tensors[f"model.{side}.embed_positions.weight"] = positions
    if config.tie_embeddings and config.shared_vocab:
        return aliased_tensors(tensors, aliases, unk)
    return joined_embeddings(tensors, state, aliases, unk, config.tie_embeddings)


def joined_embeddings(
    tensors: dict[str, numpy.ndarray],
    state: dict[str, numpy.ndarray],
    aliases: tuple[int, int],
    unk: tuple[int, int],
    tied: bool,
) -> dict[str, numpy.ndarray]:
    """``tensors`` with the embeddings of a model of two (source, target) embeddings in Pegasus's one
    (``model.shared.weight``), the vocabularies as disjoint ranges of ids: the target's first (its
    ``<pad>``, end and start ids stay the decoder's), each with its ``aliases`` rows of ``<unk>``
    after it (aliased_tensors), then the source's, from the id config_json.pegasus_config records as
    ``source_offset``. The projection is ``lm_head`` (tied: the table itself, of which only the
    target's rows are its own), its rows after the target's vocabulary never predicted: their bias
    (``final_logits_bias``) is -inf, so their probability is exactly zero and the softmax over the
    target's rows is the model's (as for aliased_tensors' rows). Untied, transformers 5 reads each
    side's embedding and the projection from tensors of their own (``model.encoder.embed_tokens``,
    ``model.decoder.embed_tokens``, ``lm_head``; transformers 4 shares the first two with
    ``model.shared``): each written in full."""
    source = state["src_embed.embedding.weight"]
    target = state.get("tgt_embed.embedding.weight", source)

    def with_unk_rows(table: numpy.ndarray, unk_id: int, extra: int) -> numpy.ndarray:
        return numpy.concatenate([table, numpy.repeat(table[unk_id][None], extra, 0)])

    joined = numpy.concatenate(
        [with_unk_rows(target, unk[1], aliases[1]), with_unk_rows(source, unk[0], aliases[0])]
    )
    out = {name: value for name, value in tensors.items() if name not in EMBEDDING_ROWS}
    out["model.shared.weight"] = joined
    never = len(joined) - len(target)  # the rows of no target token: target aliases, the source's
    bias = state["projection_layer.proj.bias"]
    out["final_logits_bias"] = numpy.concatenate([bias, numpy.full(never, -numpy.inf, bias.dtype)])[None]
    if not tied:
        out["model.encoder.embed_tokens.weight"] = out["model.decoder.embed_tokens.weight"] = joined
        out["lm_head.weight"] = with_unk_rows(state["projection_layer.proj.weight"], unk[1], never)
    return out


SOURCE_ROWS = ("model.encoder.embed_tokens.weight",)  # the source's rows; the others are the target's

EMBEDDING_ROWS = (*SOURCE_ROWS, "model.shared.weight", "model.decoder.embed_tokens.weight", "lm_head.weight")


def aliased_tensors(
    tensors: dict[str, numpy.ndarray], aliases: tuple[int, int], unk: tuple[int, int]
) -> dict[str, numpy.ndarray]:
    """``tensors`` with ``aliases`` (source, target) more rows after each vocabulary's: the units of an
    exported tokenizer that the run's vocabulary lacks (huggingface_tokenizer), each a copy of the
    ``unk`` (source, target) row, as the run reads them; their logits' bias is -inf, so that they
    are never predicted and the softmax over the others is the run's. A shared matrix (``shared``)
    has one vocabulary: as many of either."""
    if not any(aliases):
        return tensors
    out = dict(tensors)
    for name, value in tensors.items():
        side = 0 if name in SOURCE_ROWS else 1
        if name in EMBEDDING_ROWS:
            out[name] = numpy.concatenate([value, numpy.repeat(value[unk[side]][None], aliases[side], 0)])
        elif name == "final_logits_bias":
            out[name] = numpy.concatenate([value, numpy.full((1, aliases[1]), -numpy.inf, value.dtype)], 1)
    return out
