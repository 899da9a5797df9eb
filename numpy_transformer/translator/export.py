"""A model of this package's as a Hugging Face directory that transformers loads: a Marian
(MarianMTModel) of post-norm blocks without final norms, or a Pegasus (PegasusForConditionalGeneration)
of pre-norm blocks with a final layer norm after each stack; with the run's tokenizer.

``export_pretrained(model, vocabularies, DIR, tokenizer)`` picks the architecture
(transformers_architecture) and writes ``config.json`` (the architecture's settings, and under
``numpy_transformer`` those of the model it has no key for: a model without attention biases, its
own padding index, shared vocabularies of untied embeddings, source and target lengths, the position
layout, the vocabularies' own sizes), ``model.safetensors`` (every weight under transformers' name,
pretrained.marian_names; Pegasus's are Marian's, and its final norms ``encoder.layer_norm`` and
``decoder.layer_norm``) and ``generation_config.json`` (OPUS-MT's: the decoder starts from the
vocabulary's start token, as the model was trained; ``<pad>`` is never emitted).

The tokenizer: Marian's SentencePiece (an imported OPUS-MT run's) goes with a Marian export as
Marian's ``source.spm``, ``target.spm`` and ``vocab.json``. Byte-level BPE and characters go with
either as ``tokenizer.json`` and ``tokenizer_config.json`` (tokenizers.huggingface_tokenizer): the
run's own subword model, or a word-level model over single characters, with the run's ids; the
padding, start and end tokens special, a special token's text in a sentence split as text, no end
token appended (the run's sources have none). transformers has one tokenizer a directory: of
separate source and target vocabularies the source's is at the top (``AutoTokenizer
.from_pretrained(DIR)`` encodes the sources), the target's in ``target/`` (it decodes the
translations). The tokenizers library's BPE needs every unit its merges make under an id of its
own, but a run's vocabulary holds only the units its corpus uses and reads any other as ``<unk>``:
those units get the ids after the vocabulary's, and the model a row for each, a copy of ``<unk>``'s
(aliased_tensors; their logits' bias -inf, never predicted), so that transformers computes on them
what the run computes on ``<unk>``. A word tokenizer's ``##`` glue has no counterpart there: refused
(export the model alone with ``tokenizer=None``, ``export --no-tokenizer``). In transformers::

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DIR)  # DIR + "/target" decodes, of two vocabularies
    model = AutoModelForSeq2SeqLM.from_pretrained(DIR)
    batch = tokenizer(["A sentence."], return_tensors="pt", padding=True)
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

``import`` (pretrained.import_run) reads either export back as the run it was: every setting, every
weight bit for bit, the tokenizer and the vocabularies.

Both architectures are multi-head attention of sinusoidal positions computed as sines then cosines
('split'). A model of the paper's interleaved positions ('interleaved', sin and cos alternating)
exports exactly all the same: the interleaved table is the split one with its columns reordered, and
the model computes the same function when every axis of size d_model on the residual stream is
reordered alike (residual_permutation, permuted_state: the embeddings' columns, every layer norm, the
inputs of W_q, W_k, W_v and W1, the outputs of W_o and W2, the projection's inputs). ``import``
reorders such an export back (config.json's ``numpy_transformer.positions``). Pegasus has one
embedding, the encoder's, the decoder's and the projection's (``shared``): it carries pre-norm models
of one vocabulary and tied embeddings (``train --shared-vocab --tie-embeddings``). Anything else
(latent attention, pre-norm blocks without final norms, final norms after post-norm blocks, a
pre-norm model of two vocabularies or untied embeddings) is refused, naming what, before anything is
written.

``export_ctranslate2(model, vocabularies, DIR)`` writes a CTranslate2 model directory instead
(``model.bin``, ``config.json`` and the vocabularies, float32), built with CTranslate2's own
specification classes: ``ctranslate2.Translator(DIR)`` translates tokens as this package does. The
decoder starts from the vocabulary's start token, as the model was trained; CTranslate2's converter
of transformers' Marian models starts it from a zero vector instead (Marian's ``<pad>`` row), which
only an imported OPUS-MT model's start token has. Pre-norm models, final norms after pre-norm
blocks and either position layout convert too; latent attention and final norms after post-norm
blocks are refused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

import numpy

from ..backend import to_numpy
from ..files import SaveError
from ..functional import sinusoidal_table
from ..model import Transformer
from .pretrained import (
    ACTIVATION_NAMES,
    CONFIG,
    SENTENCEPIECE_FILES,
    SETTINGS,
    TARGET_TOKENIZER,
    TOKENIZER_JSON,
    VOCAB,
    WEIGHTS,
    marian_names,
)
from .tokenizers import SentencePieceTokenizer, Tokenizer, huggingface_tokenizer
from .vocabulary import Vocab

GENERATION = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TARGET_FILES = tuple(f"{TARGET_TOKENIZER}/{name}" for name in (TOKENIZER_JSON, TOKENIZER_CONFIG))
WRITTEN = (  # what an export holds
    CONFIG,
    WEIGHTS,
    GENERATION,
    *SENTENCEPIECE_FILES,
    VOCAB,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    *TARGET_FILES,
)
CTRANSLATE2_WRITTEN = (
    "config.json",
    "model.bin",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
)  # what a CTranslate2 export holds (one shared vocabulary, or the source's and the target's)
# every file either kind of export writes: an export with --overwrite removes the other kind's too, so
# that the directory holds one model (transformers cannot load a Marian directory beside model.bin)
EXPORTS_WRITTEN = tuple(dict.fromkeys((*WRITTEN, *CTRANSLATE2_WRITTEN)))
MARIAN_ACTIVATIONS = {ours: theirs for theirs, ours in reversed(ACTIVATION_NAMES.items())}  # swish for silu


class ExportError(ValueError):
    """A model, vocabulary or directory export_pretrained cannot write: the message names it."""


ARCHITECTURES = {  # what export_pretrained writes: transformers' class, and the models it carries
    "marian": ("MarianMTModel", "post-norm blocks, no final norms"),
    "pegasus": ("PegasusForConditionalGeneration", "pre-norm blocks, a final layer norm after each stack"),
}


def transformers_architecture(model: Transformer) -> tuple[str | None, list[str]]:
    """The architecture of ARCHITECTURES that carries ``model``'s blocks ('marian' for post-norm
    blocks without final norms, 'pegasus' for pre-norm blocks with them, None for neither), and what
    of ``model`` that architecture lacks (empty: it represents the model)."""
    config = model.config
    reasons = []
    if config.attention != "mha":
        reasons.append(
            f"attention {config.attention!r} (latent attention): transformers' Marian and Pegasus are "
            "multi-head ('mha')"
        )
    architecture: str | None = None
    if not config.norm_first and not config.final_norm:
        architecture = "marian"
    elif config.norm_first and config.final_norm:
        architecture = "pegasus"
        if not config.shared_vocab:
            reasons.append(
                "separate source and target vocabularies: Pegasus has one embedding for both (model.shared; "
                "train --data with --shared-vocab --tie-embeddings)"
            )
        if not config.tie_embeddings:
            reasons.append(
                "untied embeddings: Pegasus's one embedding is also its projection (train --tie-embeddings, "
                "with --shared-vocab)"
            )
    elif config.norm_first:
        reasons.append(
            "pre-norm blocks without final layer norms (--no-final-norm): Pegasus's pre-norm stacks end in "
            "a layer norm (train without --no-final-norm), Marian's blocks are post-norm (--post-norm)"
        )
    else:
        reasons.append(
            "final layer norms after post-norm blocks: Marian has none after its last block (train "
            "--no-final-norm), and Pegasus's blocks are pre-norm (train without --post-norm)"
        )
    if config.activation not in MARIAN_ACTIVATIONS:
        reasons.append(f"activation {config.activation!r}: transformers' are {', '.join(MARIAN_ACTIVATIONS)}")
    return architecture, reasons


def unrepresentable(model: Transformer) -> list[str]:
    """What of ``model``'s architecture the transformers architecture of its blocks lacks (empty: Marian
    or Pegasus represents it; see transformers_architecture)."""
    return transformers_architecture(model)[1]


def refusal(model: Transformer) -> str | None:
    """Why export_pretrained cannot write ``model`` (None: it can), naming what and the flags."""
    architecture, reasons = transformers_architecture(model)
    if not reasons:
        return None
    if architecture is None:
        carrier = "neither of transformers' " + " nor ".join(
            f"{name.capitalize()} ({blocks})" for name, (_, blocks) in ARCHITECTURES.items()
        )
    else:
        carrier = f"{architecture.capitalize()} (transformers' {ARCHITECTURES[architecture][0]})"
    verb = "can" if architecture is None else "cannot"  # neither ... nor ... can
    return f"{carrier} {verb} represent this model's {'; '.join(reasons)}"


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


def bart_family_config(model: Transformer, vocab: Vocab) -> dict[str, Any]:
    """config.json's keys that Marian and Pegasus share (both are BART's family): the sizes, the
    activation, embeddings scaled by sqrt(d_model), the special ids of ``vocab`` (the decoder starts
    from its start token), and under ``numpy_transformer`` the settings transformers has no key for
    (the position layout, the vocabularies' own sizes: the rows after them are aliased_tensors')."""
    config, ids = model.config, vocab.ids
    return {
        "d_model": config.d_model,
        "encoder_layers": config.N,
        "decoder_layers": config.N,
        "encoder_attention_heads": config.h,
        "decoder_attention_heads": config.h,
        "encoder_ffn_dim": config.d_ff,
        "decoder_ffn_dim": config.d_ff,
        "max_position_embeddings": max(config.src_seq_len, config.tgt_seq_len),
        "activation_function": MARIAN_ACTIVATIONS[config.activation],
        "dropout": config.dropout,
        "attention_dropout": 0.0,
        "activation_dropout": 0.0,
        "scale_embedding": True,
        "pad_token_id": ids.pad,
        "eos_token_id": ids.eos,
        "bos_token_id": ids.bos,
        "decoder_start_token_id": ids.bos,
        "forced_eos_token_id": ids.eos,
        "is_encoder_decoder": True,
        "dtype": config.dtype,
        SETTINGS: {
            "attention_bias": config.attention_bias,
            "shared_vocab": config.shared_vocab,
            "padding_idx": config.padding_idx,
            "src_seq_len": config.src_seq_len,
            "tgt_seq_len": config.tgt_seq_len,
            "positions": config.positions,
            "src_vocab_size": config.src_vocab_size,
            "tgt_vocab_size": config.tgt_vocab_size,
        },
    }


def marian_config(model: Transformer, vocab: Vocab, aliases: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """config.json for ``model``, whose target vocabulary's special ids are ``vocab``'s, of
    ``aliases`` more rows after each vocabulary's (aliased_tensors)."""
    config = model.config
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": config.src_vocab_size + aliases[0],
        "decoder_vocab_size": config.tgt_vocab_size + aliases[1],
        "normalize_before": False,
        # one matrix: Marian's shared embedding
        "share_encoder_decoder_embeddings": config.tie_embeddings and config.shared_vocab,
        "tie_word_embeddings": config.tie_embeddings,
        **bart_family_config(model, vocab),
    }


def generation_config(model: Transformer, vocab: Vocab) -> dict[str, Any]:
    """OPUS-MT's generation_config.json: four beams, ``<pad>`` never emitted, as long as the model's
    target positions allow; but ``<pad>`` set aside after the log-softmax over every token, without
    renormalising (``renormalize_logits`` false), as this package's beam search does, so that
    ``generate()``'s defaults translate as ``translate`` does."""
    ids = vocab.ids
    return {
        "bad_words_ids": [[ids.pad]],
        "bos_token_id": ids.bos,
        "decoder_start_token_id": ids.bos,
        "eos_token_id": ids.eos,
        "forced_eos_token_id": ids.eos,
        "max_length": model.config.tgt_seq_len,
        "num_beams": 4,
        "pad_token_id": ids.pad,
        "renormalize_logits": False,
    }


def marian_tensors(
    model: Transformer, state: dict[str, numpy.ndarray] | None = None
) -> dict[str, numpy.ndarray]:
    """Every weight of ``model`` under transformers' name (pretrained.marian_names), attention biases
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


def pegasus_config(model: Transformer, vocab: Vocab, aliases: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """config.json of ``model`` as a Pegasus model (pre-norm blocks, final norms, one vocabulary and
    one embedding), whose vocabulary's special ids are ``vocab``'s: the decoder starts from its start
    token, as Marian's export does; of ``aliases`` more rows after the vocabulary's (aliased_tensors)."""
    return {
        "architectures": ["PegasusForConditionalGeneration"],
        "model_type": "pegasus",
        "vocab_size": model.config.tgt_vocab_size + aliases[1],
        "tie_word_embeddings": True,
        **bart_family_config(model, vocab),
    }


def pegasus_tensors(model: Transformer) -> dict[str, numpy.ndarray]:
    """Every weight of ``model`` (tied, shared: one embedding) under Pegasus's name: Marian's
    (marian_tensors, the embedding as ``model.shared.weight``, the final norms as
    ``model.encoder.layer_norm`` and ``model.decoder.layer_norm``), and the split sinusoids of our
    positions as ``embed_positions`` (Pegasus keeps its table among its weights; Marian does not)."""
    config = model.config
    tensors = marian_tensors(model)
    positions = to_numpy(
        sinusoidal_table(max(config.src_seq_len, config.tgt_seq_len), config.d_model, config.dtype, "split")
    )
    for side in ("encoder", "decoder"):
        tensors[f"model.{side}.embed_positions.weight"] = positions
    return tensors


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


def check_destination(
    directory: str | Path, overwrite: bool, written: tuple[str, ...] = EXPORTS_WRITTEN
) -> Path:
    """``directory`` as the export's: absent, an empty directory, or (``overwrite``) one to replace
    the files of an export (``written``: either kind's, EXPORTS_WRITTEN) in."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ExportError(f"--to {directory}: not a directory (expected a directory to write the model into)")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ExportError(
            f"--to {directory}: not empty; give an empty or new directory, or --overwrite to replace "
            f"the files an export writes ({', '.join(written)})"
        )
    if not path.parent.is_dir():
        raise ExportError(f"--to {directory}: its parent {path.parent} is not a directory")
    return path


def tokenizer_config(vocab: Vocab, length: int) -> str:
    """tokenizer_config.json of an exported tokenizer.json (huggingface_tokenizer) of ``vocab``: its
    padding, start and end tokens; a special token's text in a sentence is text, split as the run
    splits it (``split_special_tokens``); no clean-up of spaces around punctuation. ``<unk>`` is not
    declared: transformers would make it special, and leave it out of a decoded text, where
    translate writes it."""
    ids = vocab.ids
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": vocab.itos[ids.bos],
        "eos_token": vocab.itos[ids.eos],
        "pad_token": vocab.itos[ids.pad],
        "split_special_tokens": True,
        "clean_up_tokenization_spaces": False,
        "model_max_length": length,
    }
    return json.dumps(settings, ensure_ascii=False, indent=2) + "\n"


def tokenizer_files(
    model: Transformer, vocabularies: tuple[Vocab, Vocab], tokenizer: Tokenizer
) -> tuple[dict[str, str], tuple[int, int]]:
    """The files of ``tokenizer`` (a byte-level BPE or character run's) with ``vocabularies``' ids:
    ``tokenizer.json`` and ``tokenizer_config.json`` of the source's, and of separate vocabularies the
    target's in ``target/``; and how many units each vocabulary lacks (aliased_tensors). ExportError
    for a tokenizer of none (word)."""
    source, target = vocabularies
    files: dict[str, str] = {}
    try:
        files[TOKENIZER_JSON], source_aliases = huggingface_tokenizer(tokenizer, source)
        target_aliases = source_aliases
        if source.itos != target.itos:
            files[TARGET_FILES[0]], target_aliases = huggingface_tokenizer(tokenizer, target)
            files[TARGET_FILES[1]] = tokenizer_config(target, model.config.tgt_seq_len)
    except ValueError as error:
        raise ExportError(str(error)) from None
    files[TOKENIZER_CONFIG] = tokenizer_config(source, model.config.src_seq_len)
    return files, (len(source_aliases), len(target_aliases))


def export_pretrained(
    model: Transformer,
    vocabularies: tuple[Vocab, Vocab],
    directory: str | Path,
    tokenizer: Tokenizer | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Write ``model`` (its source and target ``vocabularies`` give the sizes and special ids) into
    ``directory`` as a Hugging Face model: Marian's (MarianMTModel) of post-norm blocks without final
    norms, Pegasus's (PegasusForConditionalGeneration) of pre-norm blocks with final norms, one
    vocabulary and tied embeddings; with ``tokenizer`` (None: the model alone). Marian's SentencePiece
    tokenizer of one vocabulary goes with a Marian export as Marian's files; a byte-level BPE or
    character tokenizer as ``tokenizer.json`` (tokenizer_files; of separate vocabularies, the target's
    in ``target/``), the model given a row of ``<unk>`` for each unit of it the vocabulary lacks
    (aliased_tensors). A model of interleaved positions is written reordered for transformers' split
    ones (exported_state): its export computes the same logits, and ``import`` reorders it back.
    Returns the files written.

    Everything is checked first (the architecture, the vocabularies, the tokenizer, the directory: a
    non-empty one is refused unless ``overwrite``); the files are written into a temporary directory
    beside it, then moved in, each by a rename."""
    from safetensors.numpy import save_file

    why = refusal(model)
    if why:
        raise ExportError(why)
    pegasus = transformers_architecture(model)[0] == "pegasus"
    source, target = vocabularies
    for side, vocab, size in (
        ("source", source, model.config.src_vocab_size),
        ("target", target, model.config.tgt_vocab_size),
    ):
        if len(vocab) != size:
            raise ExportError(
                f"vocabularies: the {side} vocabulary has {len(vocab)} tokens, the model {size}"
            )
    spm = isinstance(tokenizer, SentencePieceTokenizer)
    if spm and pegasus:
        raise ExportError("tokenizer: Marian's SentencePiece tokenizer goes with a Marian export only")
    if spm and source.itos != target.itos:
        raise ExportError(
            "tokenizer: Marian's tokenizer of separate source and target vocabularies is not supported"
        )
    files: dict[str, str | bytes] = {}
    aliases = (0, 0)
    if tokenizer is not None and not spm:
        written, aliases = tokenizer_files(model, vocabularies, tokenizer)
        files.update(written)
    path = check_destination(directory, overwrite)
    settings = pegasus_config(model, target, aliases) if pegasus else marian_config(model, target, aliases)
    files[CONFIG] = json.dumps(settings, indent=2) + "\n"
    files[GENERATION] = json.dumps(generation_config(model, target), indent=2) + "\n"
    if spm and isinstance(tokenizer, SentencePieceTokenizer):
        files[SENTENCEPIECE_FILES[0]], files[SENTENCEPIECE_FILES[1]] = tokenizer.models.values()
        files[VOCAB] = json.dumps(
            {piece: index for index, piece in enumerate(target.itos)}, ensure_ascii=False
        )
        files[TOKENIZER_CONFIG] = json.dumps(
            {
                "tokenizer_class": "MarianTokenizer",
                "source_lang": None,
                "target_lang": None,
                "separate_vocabs": False,
                "model_max_length": model.config.src_seq_len,
                **{
                    key: target.itos[index]
                    for key, index in (
                        ("eos_token", target.ids.eos),
                        ("unk_token", target.ids.unk),
                        ("pad_token", target.ids.pad),
                    )
                },
            },
            ensure_ascii=False,
            indent=2,
        )

    def write(staging: Path) -> None:
        tensors = aliased_tensors(
            pegasus_tensors(model) if pegasus else marian_tensors(model),
            aliases,
            (source.ids.unk, target.ids.unk),
        )
        save_file(  # safetensors writes each array's buffer as it lies: C order
            {name: numpy.ascontiguousarray(value) for name, value in tensors.items()},
            str(staging / WEIGHTS),
            metadata={"format": "pt"},
        )
        for name, content in files.items():
            (staging / name).parent.mkdir(exist_ok=True)
            (staging / name).write_bytes(content.encode("utf-8") if isinstance(content, str) else content)

    return write_export(path, write, EXPORTS_WRITTEN)


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
    return spec


def export_ctranslate2(
    model: Transformer,
    vocabularies: tuple[Vocab, Vocab],
    directory: str | Path,
    overwrite: bool = False,
) -> list[Path]:
    """Write ``model`` (its source and target ``vocabularies`` give the tokens and special tokens)
    into ``directory`` as a CTranslate2 model of float32 weights (ctranslate2_spec): ``model.bin``,
    ``config.json`` and the vocabularies' ``*_vocabulary.json``. ``ctranslate2.Translator(directory,
    compute_type="int8")`` quantizes it as it loads. Returns the files written.

    Checked first, as export_pretrained: the architecture (ctranslate2_unrepresentable), the
    vocabularies' sizes, the directory (a non-empty one is refused unless ``overwrite``); the files
    are written into a temporary directory beside it, then moved in."""
    reasons = ctranslate2_unrepresentable(model)
    if reasons:
        raise ExportError(f"CTranslate2 cannot represent this model's {'; '.join(reasons)}")
    for side, vocab, size in zip(
        ("source", "target"), vocabularies, (model.config.src_vocab_size, model.config.tgt_vocab_size)
    ):
        if len(vocab) != size:
            raise ExportError(
                f"vocabularies: the {side} vocabulary has {len(vocab)} tokens, the model {size}"
            )
    path = check_destination(directory, overwrite)
    spec = ctranslate2_spec(model, vocabularies)
    spec.validate()
    spec.optimize(quantization="float32")
    return write_export(path, lambda staging: spec.save(str(staging)), EXPORTS_WRITTEN)


def write_export(path: Path, write: Callable[[Path], None], names: tuple[str, ...]) -> list[Path]:
    """``write`` fills a temporary directory beside ``path``; its files are then moved into ``path``
    (made if absent), each by a rename, and a file of ``names`` it lacks (an earlier export's, of
    either kind: EXPORTS_WRITTEN) is removed from ``path``. Returns the files moved in. A failure
    (OSError) raises a SaveError naming the file and saying what is left; a ``path`` this export
    made and moved nothing into is removed."""
    created = not path.exists()
    moved: list[Path] = []
    staging: Path | None = None
    try:
        path.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        write(staging)
        for name in names:
            if not (staging / name).exists():
                (path / name).unlink(missing_ok=True)
                if "/" in name:  # a folder of the export's that is left empty (target/)
                    with suppress(OSError):
                        (path / name).parent.rmdir()
        for file in sorted(file for file in staging.rglob("*") if file.is_file()):
            os.chmod(file, 0o644)
            placed = path / file.relative_to(staging)
            placed.parent.mkdir(exist_ok=True)
            os.replace(file, placed)
            moved.append(placed)
    except OSError as error:
        if created and not moved:
            with suppress(OSError):
                path.rmdir()
        if not moved:
            kept = "nothing of the export was written" + (
                " (the directory made for it is removed)" if created else ""
            )
        else:
            kept = (
                f"{', '.join(str(file.relative_to(path)) for file in moved)} were moved in, each whole, the "
                "rest not: export again"
            )
        raise SaveError.writing(Path(error.filename2 or path), error, kept) from error
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return moved
