"""Hugging Face's tokenizer.json: a run's tokenizer as transformers' AutoTokenizer loads it (export),
and back (import): byte-level BPE as the ``tokenizers`` library's BPE model with the run's ids, the
character tokenizer as a word-level model over single characters."""

from __future__ import annotations

import importlib
import json
from typing import Any

from ...machine import require
from ..tokenizers import BPETokenizer, CharTokenizer, Tokenizer, tokenizer_library
from ..vocabulary import Vocab

CHAR_PATTERN = r"[\s\S]"  # one piece per character (code point), as CharTokenizer splits: newlines too


class TokenizerExportError(ValueError):
    """A tokenizer that has no exact tokenizer.json: the message names it and why."""


def huggingface_tokenizer(tokenizer: Tokenizer, vocab: Vocab) -> tuple[str, list[str]]:
    """``tokenizer`` with ``vocab``'s ids as the ``tokenizers`` library's JSON (a tokenizer.json that
    transformers' AutoTokenizer loads), and the units of its subwords that ``vocab`` lacks.

    Byte-level BPE: the run's own subword model (pre-tokenizer, merges, decoder) with ``vocab``'s ids.
    The library's BPE needs every unit a merge makes in its vocabulary, each under an id of its own
    (it merges ids), but a run's vocabulary holds only the units its corpus's text uses, and reads
    any other as ``<unk>``: those units are given the ids after ``vocab``'s, in the library's order
    (returned, for the model's rows of ``<unk>``: huggingface.weights.aliased_tensors). Char: a
    word-level model of ``vocab`` (a character it lacks is ``<unk>``) over single characters, decoded
    by joining them.
    ``<pad>``, the start token and the end token are special (``decode(..., skip_special_tokens=True)``
    leaves them out, as translate does); ``<unk>`` is not (translate writes it). Word tokens have no
    exact counterpart (their ``##`` glue depends on the text around them): refused, needing no library."""
    if not isinstance(tokenizer, (BPETokenizer, CharTokenizer)):
        raise TokenizerExportError(
            f"tokenizer: the run's {tokenizer.name} tokenizer has no exact tokenizer.json (the tokenizers "
            "library's models cannot glue a token to the one before it as the word tokenizer's '##' does): "
            "export with --no-tokenizer to write the model alone, and give it the run's token ids"
        )
    require(f"the {tokenizer.name} tokenizer's tokenizer.json", "tokenizers")  # it writes both kinds
    library = importlib.import_module("tokenizers")
    ids = vocab.ids
    special = [
        {
            "id": index,
            "content": vocab.itos[index],
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for index in sorted({ids.pad, ids.bos, ids.eos})
    ]
    stoi = {token: index for index, token in enumerate(vocab.itos)}
    if isinstance(tokenizer, BPETokenizer):
        content = json.loads(tokenizer.serialized)
        units = sorted(content["model"]["vocab"].items(), key=lambda item: item[1])
        aliases = [unit for unit, _ in units if unit not in stoi]
        content["model"]["vocab"] = {**stoi, **{unit: len(stoi) + j for j, unit in enumerate(aliases)}}
        content["added_tokens"] = special
        if library_bpe(content) != library.Tokenizer.from_str(tokenizer.serialized).to_str():
            raise TokenizerExportError(
                "tokenizer: its subword units are not numbered as the tokenizers library's trainer numbers "
                "them (the alphabet by code point, then each merge's unit in order), so an import could not "
                "give the run's subword model back: export with --no-tokenizer"
            )
        return json.dumps(content, ensure_ascii=False), aliases
    built = library.Tokenizer(library.models.WordLevel(stoi, unk_token=vocab.itos[ids.unk]))  # char
    built.pre_tokenizer = library.pre_tokenizers.Split(library.Regex(CHAR_PATTERN), "isolated")
    built.decoder = library.decoders.Fuse()
    content = json.loads(built.to_str())
    content["added_tokens"] = special
    return json.dumps(content, ensure_ascii=False), []


def library_bpe(content: dict[str, Any]) -> str:
    """The tokenizers library's own JSON of the BPE model in a tokenizer.json ``content`` (an exported
    one: the run's ids, its special tokens): the units numbered as the library's trainer numbers them,
    the 256 bytes' characters by code point, then each merge's unit in the merges' order; nothing
    else changed. A run keeps its subwords as this text (BPETokenizer.serialized)."""
    library = tokenizer_library(BPETokenizer.name)
    merges = [
        merge if isinstance(merge, list) else merge.split(" ", 1) for merge in content["model"]["merges"]
    ]
    made = [left + right for left, right in merges]
    alphabet = sorted(unit for unit in content["model"]["vocab"] if len(unit) == 1)
    vocab: dict[str, int] = {}
    for unit in [*alphabet, *made]:
        vocab.setdefault(unit, len(vocab))
    own = {**content, "added_tokens": [], "model": {**content["model"], "vocab": vocab}}
    return str(library.Tokenizer.from_str(json.dumps(own)).to_str())


def from_huggingface(content: dict[str, Any], size: int) -> tuple[Tokenizer, list[str]]:
    """The run's tokenizer of an exported tokenizer.json ``content`` (huggingface_tokenizer's) and
    its vocabulary's tokens: the first ``size`` ids' (the units after them are those the run's
    vocabulary lacked). ValueError names what is not an export's."""
    model = content.get("model") if isinstance(content, dict) else None
    kind = model.get("type") if isinstance(model, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if kind not in ("BPE", "WordLevel") or not isinstance(vocab, dict):
        raise ValueError(
            f"its model is {kind!r}, expected the 'BPE' or 'WordLevel' model of an exported byte-level BPE "
            "or character tokenizer"
        )
    itos = {index: token for token, index in vocab.items() if isinstance(index, int)}
    if sorted(itos) != list(range(len(vocab))):
        raise ValueError(f"its vocabulary's ids are not 0 .. {len(vocab) - 1}, each once")
    if len(vocab) < size:
        raise ValueError(
            f"its vocabulary holds {len(vocab)} tokens, fewer than the model's vocabulary of {size}"
        )
    tokens = [itos[index] for index in range(size)]
    if kind == "WordLevel":
        pattern = (content.get("pre_tokenizer") or {}).get("pattern", {}).get("Regex")
        if pattern != CHAR_PATTERN:
            raise ValueError(
                f"its word-level model splits by {pattern!r}, not by character ({CHAR_PATTERN!r})"
            )
        return CharTokenizer(), tokens
    pre = content.get("pre_tokenizer") or {}
    if pre.get("type") != "ByteLevel":
        raise ValueError(f"its pre-tokenizer is {pre.get('type')!r}, expected byte-level BPE's 'ByteLevel'")
    try:
        return BPETokenizer(library_bpe(content)), tokens
    except Exception as error:  # the library raises a bare Exception for a model it cannot read
        raise ValueError(f"not a subword model the tokenizers library can read ({error})") from None
