"""A model directory's tokenizer files, both ways: Marian's SentencePiece tokenizer (``source.spm``,
``target.spm``, ``vocab.json``) and an export's ``tokenizer.json`` read as this package's tokenizer
and vocabularies, and a run's tokenizer written as either.

Marian's SentencePiece (an imported OPUS-MT run's) goes with a Marian export as Marian's files.
Byte-level BPE and characters go with either architecture as ``tokenizer.json`` and
``tokenizer_config.json`` (tokenizer_json.huggingface_tokenizer): the run's own subword model, or a
word-level model over single characters, with the run's ids; the padding, start and end tokens
special, a special token's text in a sentence split as text, no end token appended (the run's
sources have none). transformers has one tokenizer a directory: of separate source and target
vocabularies the source's is at the top (``AutoTokenizer.from_pretrained(DIR)`` encodes the
sources), the target's in ``target/`` (it decodes the translations); of a Pegasus export of both
vocabularies in its one table, the source's gives the ids after the target's (shifted_ids). The tokenizers library's BPE
needs every unit its merges make under an id of its own, but a run's vocabulary holds only the
units its corpus uses and reads any other as ``<unk>``: those units get the ids after the
vocabulary's, and the model a row for each, a copy of ``<unk>``'s (weights.aliased_tensors; their
logits' bias -inf, never predicted). A word tokenizer's ``##`` glue has no counterpart there:
refused (export the model alone with ``tokenizer=None``, ``export --no-tokenizer``).

An export records in config.json the fingerprint of each tokenizer file it writes
(tokenizer_fingerprints), and import refuses a file that does not match its own (check_fingerprint):
a copy of the source's tokenizer.json over the target's, as many tokens, would read the target's
ids as the source's tokens.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...model import Transformer
from ..tokenizers import SentencePieceTokenizer, Tokenizer
from ..vocabulary import SpecialIds, Vocab
from .config_json import SETTINGS, TOKENIZER_SHA256, embedding_rows, marian_special_ids, vocab_sizes
from .directory import (
    CONFIG,
    MAX_VOCAB,
    SENTENCEPIECE_FILES,
    TARGET_FILES,
    TARGET_TOKENIZER,
    TARGET_VOCAB,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    VOCAB,
    WEIGHTS,
    ExportError,
    PretrainedError,
    read_bounded,
)
from .tokenizer_json import from_huggingface, huggingface_tokenizer


class MarianTokenizer:
    """Marian's subwords: ``source.spm`` splits the source, ``target.spm`` the target (SentencePiece
    models, through the ``sentencepiece`` library: data.SentencePieceTokenizer), and ``vocab.json``
    maps each piece to the model's id (a piece it lacks is ``<unk>``), as transformers'
    MarianTokenizer does. A leading language code (``>>fra<<``) is one token. No punctuation
    normalisation is applied (transformers applies Moses' only where sacremoses is installed).
    """

    def __init__(self, directory: str | Path) -> None:
        directory = Path(directory)
        for name in (*SENTENCEPIECE_FILES, VOCAB):
            if not (directory / name).is_file():
                what = "not a regular file" if (directory / name).exists() else "no such file"
                raise PretrainedError(f"{directory / name}: {what} (a Marian model directory holds it)")
        paths = [directory / name for name in SENTENCEPIECE_FILES]
        try:
            source, target = (path.read_bytes() for path in paths)
            self.splitter = SentencePieceTokenizer(source, target, (str(paths[0]), str(paths[1])))
        except (ValueError, RuntimeError) as error:  # names the file; or the library is missing
            raise PretrainedError(str(error)) from None
        itos = read_vocabulary(directory)
        self.vocab: dict[str, int] = {piece: index for index, piece in enumerate(itos)}
        self.pieces = dict(enumerate(itos))
        self.eos_id: int = self.vocab["</s>"]
        self.unk_id: int = self.vocab["<unk>"]
        self.pad_id: int = self.vocab["<pad>"]
        # Marian's decoder starts from <pad> (config.json's decoder_start_token_id: read_tokenizer checks it)
        ids = SpecialIds(pad=self.pad_id, bos=self.pad_id, eos=self.eos_id, unk=self.unk_id)
        self.vocabulary = Vocab.from_list(itos, ids)

    def encode_source(self, text: str) -> list[int]:
        """The source sentence's ids, ``</s>`` last."""
        return self.vocabulary.encode(self.splitter.tokenize_source(text))[0]

    def encode_target(self, text: str) -> list[int]:
        """The target sentence's ids (what fine-tuning predicts), ``</s>`` last."""
        return [*self.vocabulary.encode(self.splitter.tokenize(text))[0], self.eos_id]

    def decode(self, ids: list[int]) -> str:
        """The target text of ``ids``, without ``</s>``, ``<pad>`` and ``<unk>`` (transformers'
        ``decode(ids, skip_special_tokens=True)``)."""
        return self.splitter.detokenize([self.pieces[i] for i in ids if i in self.pieces])


def read_vocabulary(directory: str | Path) -> list[str]:
    """``vocab.json``'s pieces in the order of their ids, which must be 0 .. N - 1, each once, with
    the special pieces ``</s>``, ``<unk>`` and ``<pad>`` among them."""
    path = Path(directory) / VOCAB
    try:
        vocab = json.loads(read_bounded(path, MAX_VOCAB).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise PretrainedError(f"{path}: not valid JSON ({error})") from error
    if not isinstance(vocab, dict) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()
    ):
        raise PretrainedError(f"{path}: expected an object of piece -> integer id")
    for special in SentencePieceTokenizer.SPECIAL_PIECES:
        if special not in vocab:
            raise PretrainedError(f"{path}: has no {special!r} entry")
    itos = {index: piece for piece, index in vocab.items()}
    missing = next((index for index in range(len(vocab)) if index not in itos), None)
    if missing is not None:
        raise PretrainedError(
            f"{path}: its ids are not 0 .. {len(vocab) - 1}, each once (no piece has id {missing})"
        )
    return [itos[index] for index in range(len(vocab))]


def read_tokenizer(directory: str | Path, config: dict[str, Any]) -> tuple[SentencePieceTokenizer, Vocab]:
    """The model's tokenizer and its vocabulary (``vocab.json``) with the special ids, checked against
    ``config.json``: the padding and end of sentence it names are vocab.json's <pad> and </s>, and
    vocab.json has a piece for every row of the embedding (``vocab_size``)."""
    path = Path(directory) / CONFIG
    if len(set(vocab_sizes(config))) > 1:
        raise PretrainedError(
            f"{path}: vocab_size {config['vocab_size']} and decoder_vocab_size {config['decoder_vocab_size']} "
            f"differ: a tokenizer of separate vocabularies is not supported yet, only one {VOCAB}"
        )
    if (Path(directory) / TARGET_VOCAB).exists():  # Marian's separate_vocabs: its targets' ids differ
        raise PretrainedError(
            f"{Path(directory) / TARGET_VOCAB}: a tokenizer of separate source and target vocabularies is "
            f"not supported yet, only one {VOCAB}"
        )
    tokenizer = MarianTokenizer(directory)
    ids = marian_special_ids(config)
    for key, name, piece in (("pad_token_id", "pad_id", "<pad>"), ("eos_token_id", "eos_id", "</s>")):
        if ids[name] != tokenizer.vocab[piece]:
            raise PretrainedError(
                f"{path}: {key} is {ids[name]}, but {VOCAB} gives {piece} the id {tokenizer.vocab[piece]}"
            )
    size = len(tokenizer.pieces)
    if config.get("vocab_size") != size:
        raise PretrainedError(
            f"{path}: vocab_size is {config.get('vocab_size')!r}, but {VOCAB} holds {size} pieces"
        )
    if not 0 <= ids["bos_id"] < size:
        raise PretrainedError(
            f"{path}: decoder_start_token_id {ids['bos_id']} is not an id of the {size} pieces"
        )
    for name in (*SENTENCEPIECE_FILES, VOCAB):
        check_fingerprint(Path(directory), name, config)
    special = SpecialIds(pad=ids["pad_id"], bos=ids["bos_id"], eos=ids["eos_id"], unk=tokenizer.unk_id)
    return tokenizer.splitter, Vocab.from_list(tokenizer.vocabulary.itos, special)


def read_exported_tokenizer(directory: Path, config: dict[str, Any]) -> tuple[Tokenizer, tuple[Vocab, Vocab]]:
    """The tokenizer and the source and target vocabularies of an export's ``tokenizer.json`` (a byte-level
    BPE or character run's; of separate vocabularies, config.json's ``shared_vocab`` false, the target's
    in ``target/``, which must be there), with config.json's special ids: the ids each vocabulary's rows
    give. Each tokenizer.json is checked against config.json: as many tokens as the weights' rows
    (``vocab_size``, ``decoder_vocab_size``), and after the vocabulary's own size only the units of its
    subwords that the vocabulary lacks (tokenizer_files' aliases; a character tokenizer has none)."""
    settings = config.get(SETTINGS, {})
    rows = embedding_rows(config)
    own = (settings.get("src_vocab_size", len(rows[0])), settings.get("tgt_vocab_size", len(rows[1])))
    config_path = directory / CONFIG
    shared = settings.get(
        "shared_vocab",
        config["model_type"] == "pegasus" or config.get("share_encoder_decoder_embeddings", True),
    )
    target_folder = directory / TARGET_TOKENIZER
    if (not shared or rows[0].start) and not target_folder.is_dir():
        why = (
            f"separate source and target vocabularies ({SETTINGS}.shared_vocab false)"
            if not shared
            else f"the source's ids after the target's ({SETTINGS}.source_offset {rows[0].start})"
        )
        raise PretrainedError(
            f"{target_folder}: no such folder, but {config_path} gives {why}: an export of them holds the "
            f"target's {TOKENIZER_JSON} there (copy the whole export)"
        )
    found: list[tuple[Tokenizer, Vocab]] = []
    for side, folder, size, rows_key, side_rows, size_key in (
        ("source", directory, own[0], "vocab_size", rows[0], "src_vocab_size"),
        ("target", target_folder if target_folder.is_dir() else directory, own[1], "decoder_vocab_size", rows[1],
         "tgt_vocab_size"),
    ):  # fmt: skip
        path = folder / TOKENIZER_JSON
        try:
            data = read_bounded(path, MAX_VOCAB)
            content = json.loads(data.decode("utf-8"))
            check_first_id(content, side, side_rows, path, config_path, config)
            content = shifted_ids(content, -side_rows.start)
            tokenizer, itos = from_huggingface(content, size)
            if "<unk>" not in itos:
                raise ValueError("its vocabulary has no '<unk>'")
            pad, eos = config["pad_token_id"], config["eos_token_id"]
            ids = SpecialIds(pad, config.get("decoder_start_token_id", pad), eos, itos.index("<unk>"))
            found.append((tokenizer, Vocab.from_list(itos, ids)))
        except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as error:
            if isinstance(error, PretrainedError):
                raise
            raise PretrainedError(f"{path}: not an exported tokenizer ({error})") from None
        held = len(content["model"]["vocab"])
        if held != len(side_rows):
            given = f"{rows_key} {len(side_rows)}"
            if rows[0].start:  # one table of both vocabularies
                given = f"{SETTINGS}.source_offset {rows[0].start} of vocab_size {config['vocab_size']}: {side_rows}"
            raise PretrainedError(
                f"{path}: holds {held} tokens, but {config_path} gives {given} (the rows of the {side} "
                f"embedding in {WEIGHTS}): not this model's tokenizer"
            )
        extra = [token for token, _ in sorted(content["model"]["vocab"].items(), key=lambda item: item[1])][
            size:
        ]
        if extra != lacking_units(tokenizer, itos):
            raise PretrainedError(
                f"{config_path}: {SETTINGS}.{size_key} is {size}, but {path} holds {held} tokens, of which "
                f"those after the first {size} are not the subword units a vocabulary of {size} lacks: "
                "config.json and the tokenizer are not of one export"
            )
        check_fingerprint(directory, path.relative_to(directory).as_posix(), config, data)
    (tokenizer, source), (other, target) = found
    if shared and source.itos != target.itos:
        raise PretrainedError(
            f"{config_path}: {SETTINGS}.shared_vocab is true (one vocabulary for the source and the target), but "
            f"{directory / TOKENIZER_JSON} and {target_folder / TOKENIZER_JSON} hold two different vocabularies "
            f"(an export of them records shared_vocab false)"
        )
    if type(tokenizer) is not type(other) or getattr(tokenizer, "serialized", None) != getattr(
        other, "serialized", None
    ):
        raise PretrainedError(
            f"{target_folder / TOKENIZER_JSON}: splits text otherwise than {TOKENIZER_JSON}"
        )
    return tokenizer, (source, target)


def check_first_id(
    content: Any, side: str, rows: range, path: Path, config_path: Path, config: dict[str, Any]
) -> None:
    """The ``side`` tokenizer's ``content`` (a tokenizer.json's, at ``path``) gives its first id where
    config.json's rows of that side (``rows``, config_json.embedding_rows) start: of a Pegasus export
    of two vocabularies, the target's at 0 and the source's at ``numpy_transformer.source_offset``;
    else refused naming the key (or what config.json lacks of it: ids after the target's with no
    source_offset), and the other side's tokenizer where it is that one. Content that is not a
    tokenizer's is left to from_huggingface to name."""
    settings = config.get(SETTINGS, {})
    offset = settings.get("source_offset")
    model = content.get("model") if isinstance(content, dict) else None
    vocab = model.get("vocab") if isinstance(model, dict) else None
    if (offset is None and config["model_type"] != "pegasus") or not isinstance(vocab, dict) or not vocab:
        return
    ids = list(vocab.values())
    if not all(isinstance(index, int) for index in ids) or min(ids) == rows.start:
        return
    first = min(ids)
    if offset is None:  # a Pegasus export's source ids, after the target's: config.json lost their record
        lacking = f"{SETTINGS}.source_offset" if SETTINGS in config else f"{SETTINGS} object"
        raise PretrainedError(
            f"{config_path}: has no {lacking}, but {path}'s ids start at {first}: a Pegasus export of two "
            f"vocabularies records there the first source id of its one embedding ({SETTINGS}.source_offset) "
            "and each vocabulary's own size; put the export's own config.json back"
        )
    other = "target" if side == "source" else "source"
    swapped = (
        f": it is the {other}'s tokenizer (an export holds the source's {TOKENIZER_JSON} at the top, the "
        f"target's in {TARGET_TOKENIZER}/)"
        if (first == 0) == (side == "source")
        else ""
    )
    raise PretrainedError(
        f"{path}: its ids start at {first}, but {config_path}'s {SETTINGS}.source_offset {offset} gives the "
        f"{side}'s ids from {rows.start}{swapped}"
    )


FINGERPRINTED = (TOKENIZER_JSON, VOCAB, *SENTENCEPIECE_FILES)  # the tokenizer files an export records


def tokenizer_fingerprint(name: str, data: bytes) -> str:
    """The sha256 an export records of its tokenizer file ``name`` (a path in the export) of the
    bytes ``data``: of a tokenizer.json's or vocab.json's vocabulary, its tokens in the order of their
    ids (which token each id is, whatever the file's layout: transformers' save_pretrained writes
    the same vocabulary laid out otherwise); of a SentencePiece model, its bytes."""
    if name.endswith(".json"):
        content = json.loads(data.decode("utf-8"))
        vocab = content["model"]["vocab"] if Path(name).name == TOKENIZER_JSON else content
        data = json.dumps(sorted(vocab, key=vocab.__getitem__), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def tokenizer_fingerprints(files: Mapping[str, str | bytes]) -> dict[str, str]:
    """Each tokenizer file of ``files`` (an export's: path in it -> content) and its fingerprint."""
    return {
        name: tokenizer_fingerprint(name, data.encode("utf-8") if isinstance(data, str) else data)
        for name, data in files.items()
        if Path(name).name in FINGERPRINTED
    }


def check_fingerprint(directory: Path, name: str, config: dict[str, Any], data: bytes | None = None) -> None:
    """The tokenizer file ``name`` of the model directory ``directory`` (its bytes ``data``, or read
    here) is the one its export wrote: PretrainedError where ``config`` (config.json) records the
    fingerprints of the export's tokenizer files and this file's is not among them. An export
    without the record (an earlier one, or another's) is read as it is."""
    recorded = config.get(SETTINGS, {}).get(TOKENIZER_SHA256)
    if recorded is None:
        return
    if data is None:
        data = read_bounded(directory / name, MAX_VOCAB)
    where = f"{directory / CONFIG}'s {SETTINGS}.{TOKENIZER_SHA256}"
    if name not in recorded:
        raise PretrainedError(
            f"{directory / name}: not a tokenizer file of this export: {where} records only "
            f"{', '.join(recorded) or 'none'}"
        )
    if tokenizer_fingerprint(name, data) != recorded[name]:
        raise PretrainedError(
            f"{directory / name}: not the tokenizer this model was exported with (its fingerprint is not the "
            f"one {where} records for it: it would read the ids as other tokens); put the export's own {name} back"
        )


def lacking_units(tokenizer: Tokenizer, itos: list[str]) -> list[str]:
    """The units of ``tokenizer``'s subwords (a byte-level BPE's, in its own order) that the
    vocabulary ``itos`` lacks: those an export numbers after the vocabulary's (huggingface_tokenizer);
    a character tokenizer has none."""
    serialized = getattr(tokenizer, "serialized", None)
    if serialized is None:
        return []
    units = json.loads(serialized)["model"]["vocab"]
    known = set(itos)
    return [unit for unit in sorted(units, key=units.get) if unit not in known]


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
    model: Transformer, vocabularies: tuple[Vocab, Vocab], tokenizer: Tokenizer, joined: bool = False
) -> tuple[dict[str, str], tuple[int, int]]:
    """The files of ``tokenizer`` (a byte-level BPE or character run's) with ``vocabularies``' ids:
    ``tokenizer.json`` and ``tokenizer_config.json`` of the source's, and of separate vocabularies the
    target's in ``target/``; and how many units each vocabulary lacks (aliased_tensors). ``joined``
    (a Pegasus export of both vocabularies in one table, weights.joined_embeddings): the target's in
    ``target/``, and the source's ids after the target's rows (shifted_ids). ExportError for a
    tokenizer of none (word)."""
    source, target = vocabularies
    separate = (
        joined or source.itos != target.itos or not model.config.shared_vocab
    )  # import requires target/
    files: dict[str, str] = {}
    try:
        files[TOKENIZER_JSON], source_aliases = huggingface_tokenizer(tokenizer, source)
        target_aliases = source_aliases
        if separate:
            files[TARGET_FILES[0]], target_aliases = huggingface_tokenizer(tokenizer, target)
            files[TARGET_FILES[1]] = tokenizer_config(target, model.config.tgt_seq_len)
    except ValueError as error:
        raise ExportError(str(error)) from None
    if joined:
        offset = len(target) + len(target_aliases)  # the target's rows come first
        files[TOKENIZER_JSON] = json.dumps(
            shifted_ids(json.loads(files[TOKENIZER_JSON]), offset), ensure_ascii=False
        )
    files[TOKENIZER_CONFIG] = tokenizer_config(source, model.config.src_seq_len)
    return files, (len(source_aliases), len(target_aliases))


def shifted_ids(content: Any, by: int) -> Any:
    """The tokenizer.json ``content`` with every id (its model's units', its special tokens') ``by``
    more: the source's of a Pegasus export of two vocabularies, whose ids follow the target's in
    the one table (``by`` its first source id); an import shifts them back (``-by``). Content that
    is not a tokenizer's is returned as it is (from_huggingface names what it lacks)."""
    model = content.get("model") if isinstance(content, dict) else None
    if not by or not isinstance(model, dict) or not isinstance(model.get("vocab"), dict):
        return content
    vocab = {unit: index + by if isinstance(index, int) else index for unit, index in model["vocab"].items()}
    added = [
        {**token, "id": token["id"] + by}
        if isinstance(token, dict) and isinstance(token.get("id"), int)
        else token
        for token in content.get("added_tokens") or []
    ]
    return {**content, "model": {**model, "vocab": vocab}, "added_tokens": added}


def marian_tokenizer_files(
    tokenizer: SentencePieceTokenizer, vocab: Vocab, length: int
) -> dict[str, str | bytes]:
    """Marian's tokenizer files of ``tokenizer`` (an imported OPUS-MT run's) and its one vocabulary
    ``vocab``: ``source.spm``, ``target.spm``, ``vocab.json`` and ``tokenizer_config.json``
    (transformers' MarianTokenizer, of sentences up to ``length`` tokens)."""
    files: dict[str, str | bytes] = {}
    files[SENTENCEPIECE_FILES[0]], files[SENTENCEPIECE_FILES[1]] = tokenizer.models.values()
    files[VOCAB] = json.dumps({piece: index for index, piece in enumerate(vocab.itos)}, ensure_ascii=False)
    files[TOKENIZER_CONFIG] = json.dumps(
        {
            "tokenizer_class": "MarianTokenizer",
            "source_lang": None,
            "target_lang": None,
            "separate_vocabs": False,
            "model_max_length": length,
            **{
                key: vocab.itos[index]
                for key, index in (
                    ("eos_token", vocab.ids.eos),
                    ("unk_token", vocab.ids.unk),
                    ("pad_token", vocab.ids.pad),
                )
            },
        },
        ensure_ascii=False,
        indent=2,
    )
    return files
