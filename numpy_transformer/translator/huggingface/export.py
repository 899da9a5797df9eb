"""A model of this package's as a Hugging Face directory that transformers loads: a Marian
(MarianMTModel) of post-norm blocks without final norms, or a Pegasus (PegasusForConditionalGeneration)
of pre-norm blocks with a final layer norm after each stack; with the run's tokenizer.

``export_pretrained(model, vocabularies, DIR, tokenizer)`` picks the architecture
(transformers_architecture) and writes ``config.json`` (config_json.marian_config or pegasus_config:
the architecture's settings, and under ``numpy_transformer`` those of the model it has no key for),
``model.safetensors`` (every weight under transformers' name, weights.marian_tensors; Pegasus's are
Marian's, and its final norms ``encoder.layer_norm`` and ``decoder.layer_norm``),
``generation_config.json`` (OPUS-MT's: the decoder starts from the vocabulary's start token, as the
model was trained; ``<pad>`` is never emitted) and the tokenizer's files (tokenizer_files). In
transformers::

    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(DIR)  # DIR + "/target" decodes, of two vocabularies
    model = AutoModelForSeq2SeqLM.from_pretrained(DIR)
    batch = tokenizer(["A sentence."], return_tensors="pt", padding=True)
    print(tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True))

``import`` (run.importing.import_run) reads either export back as the run it was: every setting, every
weight bit for bit, the tokenizer and the vocabularies.

Both architectures are multi-head attention of sinusoidal positions computed as sines then cosines;
a model of interleaved positions is written reordered (weights.permuted_state). Pegasus has one
embedding table (``shared``) for the encoder and the decoder: a pre-norm model of one vocabulary and
tied embeddings (``train --shared-vocab --tie-embeddings``) is that table; any other pre-norm model
(``train --data``'s default: two vocabularies, untied embeddings) holds both vocabularies in it as
disjoint ranges of ids, the target's first (its special ids unchanged), the source's after it
(config.json's ``numpy_transformer.source_offset``; the source's tokenizer.json gives those ids),
with a projection of its own (``tie_word_embeddings`` false) whose rows of no target token have a
bias of -inf: never generated (weights.joined_embeddings). Anything else (latent attention,
pre-norm blocks without final norms, final norms after post-norm blocks) is refused, naming what,
before anything is written.
"""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

import numpy

from ...machine import require
from ...model import Transformer
from ..tokenizers import SentencePieceTokenizer, Tokenizer
from ..vocabulary import Vocab
from .config_json import (
    MARIAN_ACTIVATIONS,
    SETTINGS,
    TOKENIZER_SHA256,
    generation_config,
    marian_config,
    pegasus_config,
)
from .directory import (
    CONFIG,
    EXPORTS_WRITTEN,
    GENERATION,
    WEIGHTS,
    ExportError,
    check_destination,
    write_export,
    write_files,
)
from .tokenizer_files import marian_tokenizer_files, tokenizer_files, tokenizer_fingerprints
from .weights import aliased_tensors, marian_tensors, pegasus_tensors

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


def check_vocabulary_sizes(model: Transformer, vocabularies: tuple[Vocab, Vocab]) -> None:
    """ExportError where the source or the target vocabulary has not as many tokens as ``model``'s."""
    for side, vocab, size in zip(
        ("source", "target"), vocabularies, (model.config.src_vocab_size, model.config.tgt_vocab_size)
    ):
        if len(vocab) != size:
            raise ExportError(
                f"vocabularies: the {side} vocabulary has {len(vocab)} tokens, the model {size}"
            )


def safetensors_failure(error: Exception, path: Path) -> OSError:
    """safetensors' error writing ``path`` as the operating system's error it reports ("I/O error: No
    space left on device (os error 28)"), naming the file; of no such error, the library's text."""
    found = re.search(r"\(os error (\d+)\)", str(error))
    if found is None:
        return OSError(errno.EIO, str(error), str(path))
    number = int(found.group(1))
    return OSError(number, os.strerror(number), str(path))


def export_pretrained(
    model: Transformer,
    vocabularies: tuple[Vocab, Vocab],
    directory: str | Path,
    tokenizer: Tokenizer | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Write ``model`` (its source and target ``vocabularies`` give the sizes and special ids) into
    ``directory`` as a Hugging Face model: Marian's (MarianMTModel) of post-norm blocks without final
    norms, Pegasus's (PegasusForConditionalGeneration) of pre-norm blocks with final norms (of two
    vocabularies or untied embeddings: both in its one table, weights.joined_embeddings); with
    ``tokenizer`` (None: the model alone). Marian's SentencePiece
    tokenizer of one vocabulary goes with a Marian export as Marian's files; a byte-level BPE or
    character tokenizer as ``tokenizer.json`` (tokenizer_files; of separate vocabularies, the target's
    in ``target/``), the model given a row of ``<unk>`` for each unit of it the vocabulary lacks
    (aliased_tensors). A model of interleaved positions is written reordered for transformers' split
    ones (exported_state): its export computes the same logits, and ``import`` reorders it back.
    Returns the files written.

    Everything is checked first (the architecture, the vocabularies, the tokenizer, the directory: a
    non-empty one is refused unless ``overwrite``); the export is written whole beside it, then
    swapped in (write_export)."""
    require("export_pretrained (a Hugging Face model's weights)", "safetensors")
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    why = refusal(model)
    if why:
        raise ExportError(why)
    pegasus = transformers_architecture(model)[0] == "pegasus"
    joined = pegasus and not (model.config.tie_embeddings and model.config.shared_vocab)  # two in one table
    check_vocabulary_sizes(model, vocabularies)
    source, target = vocabularies
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
        written, aliases = tokenizer_files(model, vocabularies, tokenizer, joined)
        files.update(written)
    path = check_destination(directory, overwrite)
    if isinstance(tokenizer, SentencePieceTokenizer):
        files.update(marian_tokenizer_files(tokenizer, target, model.config.src_seq_len))
    settings = pegasus_config(model, target, aliases) if pegasus else marian_config(model, target, aliases)
    fingerprints = tokenizer_fingerprints(files)
    if fingerprints:  # import tells the export's own tokenizer files from others by them
        settings[SETTINGS][TOKENIZER_SHA256] = fingerprints
    files[CONFIG] = json.dumps(settings, indent=2) + "\n"
    files[GENERATION] = json.dumps(generation_config(model, target), indent=2) + "\n"

    def write(staging: Path) -> None:
        unk = (source.ids.unk, target.ids.unk)
        tensors = (
            pegasus_tensors(model, aliases, unk)
            if pegasus
            else aliased_tensors(marian_tensors(model), aliases, unk)
        )
        try:
            save_file(  # safetensors writes each array's buffer as it lies: C order
                {name: numpy.ascontiguousarray(value) for name, value in tensors.items()},
                str(staging / WEIGHTS),
                metadata={"format": "pt"},
            )
        except SafetensorError as error:  # the library's own type, of a full disk's failure too
            raise safetensors_failure(error, staging / WEIGHTS) from error
        write_files(staging, files)

    return write_export(path, write, EXPORTS_WRITTEN)
