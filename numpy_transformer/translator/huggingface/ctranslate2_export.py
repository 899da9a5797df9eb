"""A model of this package's as a CTranslate2 model directory (``export --ctranslate2``).

``export_ctranslate2(model, vocabularies, DIR, tokenizer=...)`` writes ``model.bin``, ``config.json``
and the vocabularies, float32, built with CTranslate2's own specification classes:
``ctranslate2.Translator(DIR)`` translates tokens as this package does. With the run's tokenizer
(ctranslate2_tokenizer_files), CTranslate2 and the ``tokenizers`` library alone translate text
(``sentencepiece`` for Marian's; of two vocabularies ``DIR/target/tokenizer.json`` decodes the
translations):

    source = tokenizers.Tokenizer.from_file(f"{DIR}/tokenizer.json")
    source.encode_special_tokens = True  # "<eos>" in a sentence is text, as the run reads it
    results = ctranslate2.Translator(DIR).translate_batch([source.encode("A sentence.").tokens])

The decoder starts from the vocabulary's start token, as the model was trained; CTranslate2's
converter of transformers' Marian models starts it from a zero vector instead (Marian's ``<pad>``
row), which only an imported OPUS-MT model's start token has. Pre-norm
models, final norms after pre-norm blocks and either position layout convert too; latent attention
and final norms after post-norm blocks are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy

from ...backend import to_numpy
from ...model import Transformer
from ..tokenizers import SentencePieceTokenizer, Tokenizer
from ..vocabulary import Vocab
from .directory import (
    EXPORTS_WRITTEN,
    SENTENCEPIECE_FILES,
    ExportError,
    check_destination,
    write_export,
    write_files,
)
from .export import check_vocabulary_sizes
from .tokenizer_files import tokenizer_files

CTRANSLATE2_ACTIVATIONS = {"relu": "RELU", "silu": "SWISH", "gelu_tanh": "GELUTanh"}  # common_spec.Activation


def ctranslate2_unrepresentable(model: Transformer) -> list[str]:
    """What of ``model``'s architecture CTranslate2's Transformer lacks (empty: it represents it)."""
    config = model.config
    reasons = []
    if config.attention != "mha":
        reasons.append(
            f"attention {config.attention!r} (latent attention): CTranslate2's is multi-head ('mha')"
        )
    if config.final_norm and not config.norm_first:
        reasons.append(
            "final layer norms after post-norm blocks: CTranslate2 has them only after pre-norm blocks "
            "(train --no-final-norm, or without --post-norm)"
        )
    if config.activation not in CTRANSLATE2_ACTIVATIONS:
        reasons.append(
            f"activation {config.activation!r}: CTranslate2's are {', '.join(CTRANSLATE2_ACTIVATIONS)}"
        )
    return reasons


def ctranslate2_spec(model: Transformer, vocabularies: tuple[Vocab, Vocab]) -> Any:
    """``model`` as a ``ctranslate2.specs.TransformerSpec`` of float32 weights (no attention biases:
    zeros), its vocabularies' tokens and special tokens registered; the decoder starts from the
    target vocabulary's start token. Check ctranslate2_unrepresentable first."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    state = {name: to_numpy(value).astype(numpy.float32) for name, value in model.state_dict().items()}
    spec = transformer_spec.TransformerSpec.from_config(
        (config.N, config.N),
        config.h,
        pre_norm=config.norm_first,
        no_final_norm=not config.final_norm,
        activation=getattr(common_spec.Activation, CTRANSLATE2_ACTIVATIONS[config.activation]),
    )

    def linear(layer: Any, *names: str) -> None:
        """``layer`` the projections ``names`` stacked (one fused matrix, as CTranslate2 keeps q, k, v)."""
        layer.weight = numpy.concatenate([state[f"{name}.weight"] for name in names])
        layer.bias = numpy.concatenate(
            [
                state.get(f"{name}.bias", numpy.zeros(state[f"{name}.weight"].shape[0], numpy.float32))
                for name in names
            ]
        )

    def norm(layer: Any, name: str) -> None:
        layer.gamma, layer.beta = state[f"{name}.gamma"], state[f"{name}.beta"]

    def attention(block: Any, name: str, cross: bool) -> None:
        q, k, v, o = (f"{name}.{part}" for part in ("w_q", "w_k", "w_v", "w_o"))
        if cross:  # the query from the decoder, the keys and values from the encoder's output
            linear(block.linear[0], q)
            linear(block.linear[1], k, v)
        else:
            linear(block.linear[0], q, k, v)
        linear(block.linear[-1], o)

    def feed_forward(block: Any, name: str) -> None:
        linear(block.linear_0, f"{name}.linear_1")
        linear(block.linear_1, f"{name}.linear_2")

    source_embedding = state["src_embed.embedding.weight"]
    target_embedding = state.get("tgt_embed.embedding.weight", source_embedding)
    for side, coder, embedding, positions in (
        ("encoder", spec.encoder, source_embedding, model.src_pos.pe),
        ("decoder", spec.decoder, target_embedding, model.tgt_pos.pe),
    ):
        table = coder.embeddings[0] if side == "encoder" else coder.embeddings
        table.weight = embedding
        coder.scale_embeddings = True  # by sqrt(d_model), as InputEmbeddings
        coder.position_encodings.encodings = to_numpy(positions).astype(numpy.float32)
        if config.final_norm:
            norm(coder.layer_norm, f"{side}.norm")
        for i, layer in enumerate(coder.layer):
            name = f"{side}.layers.{i}"
            attention(layer.self_attention, f"{name}.self_attention_block", cross=False)
            norm(layer.self_attention.layer_norm, f"{name}.residual_connections.0.norm")
            if side == "decoder":
                attention(layer.attention, f"{name}.cross_attention_block", cross=True)
                norm(layer.attention.layer_norm, f"{name}.residual_connections.1.norm")
            feed_forward(layer.ffn, f"{name}.feed_forward_block")
            norm(layer.ffn.layer_norm, f"{name}.residual_connections.{2 if side == 'decoder' else 1}.norm")
    spec.decoder.projection.weight = state.get("projection_layer.proj.weight", target_embedding)
    spec.decoder.projection.bias = state["projection_layer.proj.bias"]
    source, target = vocabularies
    spec.register_source_vocabulary(list(source.itos))
    spec.register_target_vocabulary(list(target.itos))
    ids = target.ids
    spec.config.bos_token = target.itos[ids.bos]
    spec.config.eos_token = target.itos[ids.eos]
    spec.config.unk_token = target.itos[ids.unk]
    spec.config.decoder_start_token = target.itos[ids.bos]
    spec.config.add_source_bos = spec.config.add_source_eos = False  # a source is given as it is encoded
    spec.config.layer_norm_epsilon = 1e-5  # LayerNormalization's
    # the position table's length, for translate_batch(max_decoding_length=...): CTranslate2 stops with an
    # error past it, and reads no key it does not know (an additional setting, as its converters add them)
    spec.config.add_attribute("max_decoding_length", config.tgt_seq_len)
    return spec


def ctranslate2_tokenizer_files(
    model: Transformer, vocabularies: tuple[Vocab, Vocab], tokenizer: Tokenizer
) -> dict[str, str | bytes]:
    """The files of ``tokenizer`` beside a CTranslate2 model of ``vocabularies``: a byte-level BPE or
    character run's as the Hugging Face export writes them (tokenizer_files: ``tokenizer.json`` and
    ``tokenizer_config.json``, of separate vocabularies the target's in ``target/``), which the
    ``tokenizers`` library loads; Marian's SentencePiece (an imported OPUS-MT run's, of one
    vocabulary) as its ``source.spm`` and ``target.spm``. CTranslate2 takes tokens, not ids: a unit
    of the subword model that the vocabulary lacks is ``<unk>`` there, as in the run, and needs no
    row. ExportError for a word tokenizer (no exact tokenizer.json)."""
    if isinstance(tokenizer, SentencePieceTokenizer):
        if vocabularies[0].itos != vocabularies[1].itos:
            raise ExportError(
                "tokenizer: Marian's tokenizer of separate source and target vocabularies is not supported"
            )
        return dict(zip(SENTENCEPIECE_FILES, tokenizer.models.values()))
    return dict(tokenizer_files(model, vocabularies, tokenizer)[0])


def export_ctranslate2(
    model: Transformer,
    vocabularies: tuple[Vocab, Vocab],
    directory: str | Path,
    overwrite: bool = False,
    tokenizer: Tokenizer | None = None,
) -> list[Path]:
    """Write ``model`` (its source and target ``vocabularies`` give the tokens and special tokens)
    into ``directory`` as a CTranslate2 model of float32 weights (ctranslate2_spec): ``model.bin``,
    ``config.json`` and the vocabularies' ``*_vocabulary.json``; with ``tokenizer`` (None: the model
    alone) its files (ctranslate2_tokenizer_files). ``ctranslate2.Translator(directory,
    compute_type="int8")`` quantizes it as it loads. Returns the files written.

    Checked first, as export_pretrained: the architecture (ctranslate2_unrepresentable), the
    vocabularies' sizes, the tokenizer, the directory (a non-empty one is refused unless
    ``overwrite``); the files are written whole beside it, then swapped in (write_export)."""
    reasons = ctranslate2_unrepresentable(model)
    if reasons:
        raise ExportError(f"CTranslate2 cannot represent this model's {'; '.join(reasons)}")
    check_vocabulary_sizes(model, vocabularies)
    files = {} if tokenizer is None else ctranslate2_tokenizer_files(model, vocabularies, tokenizer)
    path = check_destination(directory, overwrite)
    spec = ctranslate2_spec(model, vocabularies)
    spec.validate()
    spec.optimize(quantization="float32")

    def write(staging: Path) -> None:
        spec.save(str(staging))
        write_files(staging, files)

    return write_export(path, write, EXPORTS_WRITTEN)
