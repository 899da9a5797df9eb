"""Tokenisers: text -> tokens -> text, by character, by word, by byte-level BPE (learned here, or
through the ``tokenizers`` library) and by a Marian model's SentencePiece models. As Hugging Face's
tokenizer.json, and back: huggingface.tokenizer_json."""

from __future__ import annotations

import importlib
import itertools
import json
import re
import sys
import threading
import warnings
from base64 import b64decode, b64encode
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import cached_property
from typing import Any, NoReturn

from ..machine import require
from ..moved import MOVED, refuse_moved_name
from .vocabulary import Vocab

GLUE = "##"  # marks a word-level token written without a space before it


NO_DROPOUT = itertools.repeat(1.0)  # draws that skip no merge (BPETokenizer.merge)


NOT_LEARNED = sys.maxsize  # the rank of a pair of units that is never merged


# a space where tokens are shown: SentencePiece's own mark, which Marian's pieces carry already
SPACE_MARK = "\u2581"


class Tokenizer:
    """Text -> tokens -> text. Source and target are split alike unless a tokenizer has a model of
    its own for each side (Marian's): ``tokenize_source`` splits a source, ``tokenize`` a target."""

    name = "tokenizer"
    subwords = False  # decoded by beam search unless told otherwise, as the paper evaluates subword models

    def tokenize(self, text: str) -> list[str]:
        raise NotImplementedError

    def detokenize(self, tokens: Sequence[str]) -> str:
        raise NotImplementedError

    def tokenize_source(self, text: str) -> list[str]:
        return self.tokenize(text)

    def shown(self, tokens: Sequence[str]) -> list[str]:
        """Each token as a reader is shown it (a picture's labels): the text it stands for, a space
        in it as SPACE_MARK. Control characters are left as they are (corpora.printable escapes them)."""
        return [token.replace(" ", SPACE_MARK) for token in tokens]

    def fewest_tokens(self, text: str, limit: int) -> int:
        """A lower bound of the tokens of ``text`` on either side, found without tokenizing it (a
        25 MB line costs the tokenizer a minute and gigabytes): its words (runs of non-space
        characters, each at least one token), counted up to ``limit`` + 1."""
        return sum(1 for _ in itertools.islice(_WORDS.finditer(text), limit + 1))


_WORDS = re.compile(r"\S+")


class CharTokenizer(Tokenizer):
    """One token per character; lossless."""

    name = "char"

    def tokenize(self, text: str) -> list[str]:
        return list(text)

    def fewest_tokens(self, text: str, limit: int) -> int:
        return len(text)

    def detokenize(self, tokens: Sequence[str]) -> str:
        return "".join(tokens)


class WordTokenizer(Tokenizer):
    """Words and punctuation marks are tokens; a token glued to the previous one (no space
    between them) carries the prefix ``##``, so "quarante-deux" -> quarante ##- ##deux and
    detokenising gives the text back exactly (up to runs of white space)."""

    name = "word"
    _pattern = re.compile(r"\w+|[^\w\s]")

    def tokenize(self, text: str) -> list[str]:
        tokens, end = [], None
        for match in self._pattern.finditer(text):
            glued = end is not None and match.start() == end
            tokens.append(GLUE + match.group() if glued else match.group())
            end = match.end()
        return tokens

    def detokenize(self, tokens: Sequence[str]) -> str:
        text = ""
        for token in tokens:
            if token.startswith(GLUE) and len(token) > len(GLUE):
                text += token[len(GLUE) :]
            else:
                text += (" " if text else "") + token
        return text


class BPETokenizer(Tokenizer):
    """Subword units: byte-level byte-pair encoding learned from the training texts by Hugging Face
    ``tokenizers`` (pip install tokenizers, part of the [train] extra).

    Byte-level: every text is its UTF-8 bytes, so no character is ever unknown (accents, CJK,
    emoji), and detokenising gives the text back exactly, spacing and punctuation included. The
    learned model is kept as the library's own JSON text (``serialized``), which checkpoints store.
    """

    name = "bpe"
    subwords = True

    def __init__(self, serialized: str) -> None:
        tokenizers = tokenizer_library(BPETokenizer.name)
        self.serialized = serialized
        try:
            self._tokenizer = tokenizers.Tokenizer.from_str(serialized)
        except Exception as error:  # the library raises a bare Exception for text it cannot read
            raise ValueError(f"not a subword model the tokenizers library can read ({error})") from None

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        """Learn merges from ``texts`` until the vocabulary (256 bytes and the merges) has
        ``vocab_size`` units, an integer in BPE_VOCAB_RANGE."""
        low, high = BPE_VOCAB_RANGE
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an integer in [{low}, {high}], got {vocab_size!r}")
        if not low <= vocab_size <= high:
            raise ValueError(f"vocab_size must be an integer in [{low}, {high}], got {vocab_size}")
        tokenizers = tokenizer_library(BPETokenizer.name)
        tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE())
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = tokenizers.decoders.ByteLevel()
        trainer = tokenizers.trainers.BpeTrainer(
            vocab_size=vocab_size,
            initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        _wait_interruptibly(lambda: tokenizer.train_from_iterator(texts, trainer))
        return cls(tokenizer.to_str())

    def tokenize(self, text: str) -> list[str]:
        return self._tokenizer.encode(text, add_special_tokens=False).tokens

    def fewest_tokens(self, text: str, limit: int) -> int:
        # a character is at least one byte-level character, and a unit at most the longest's
        return max(super().fewest_tokens(text, limit), -(-len(text) // self._longest_unit))

    @cached_property
    def _longest_unit(self) -> int:
        return max(map(len, self._tokenizer.get_vocab()), default=1)

    def detokenize(self, tokens: Sequence[str]) -> str:
        return self._tokenizer.decoder.decode(list(tokens))

    def shown(self, tokens: Sequence[str]) -> list[str]:
        """Each unit's bytes as text (its byte-level characters, Ġ for a space, Ã¶ for ö, decoded); a
        unit that holds part of a character shows its bytes as escapes (\\xc3); a special token
        (``<eos>``) is itself."""
        shown = []
        for token in tokens:
            if all(unit in _BYTE_OF_UNIT for unit in token):
                token = bytes(_BYTE_OF_UNIT[unit] for unit in token).decode("utf-8", "backslashreplace")
            shown.append(token)
        return super().shown(shown)

    def word_pieces(self, text: str) -> list[list[str]]:
        """``tokenize``'s subwords of the text, a list per word (as the model cuts the text before
        merging: words in byte-level characters, each the concatenation of its pieces)."""
        encoding = self._tokenizer.encode(text, add_special_tokens=False)
        return [
            [token for token, _ in word]
            for _, word in itertools.groupby(
                zip(encoding.tokens, encoding.word_ids), key=lambda pair: pair[1]
            )
        ]

    def drop_out(self, pieces: list[str], dropout: float, draws: Iterator[float]) -> list[str]:
        """The word of ``pieces`` (one of word_pieces') merged with BPE-dropout: ``merge``'s result
        from the same draws, found at once when no merge of the word's deterministic ones is
        skipped (most words, at a small ``dropout``). A draw per deterministic merge is taken first;
        those a word with a skipped merge leaves unused are not used again."""
        first = list(itertools.islice(draws, sum(map(len, pieces)) - len(pieces)))  # a draw per merge
        if min(first, default=1.0) >= dropout:
            return pieces
        return self.merge("".join(pieces), dropout, itertools.chain(first, draws))

    def merge(self, word: str, dropout: float = 0.0, draws: Iterator[float] = NO_DROPOUT) -> list[str]:
        """The subwords of a word (one of word_pieces', joined): the pair learned first is merged
        first, as the library merges (``tokenize`` is these for every word).

        With ``dropout``, BPE-dropout (Provilkov et al., 2020, Algorithm 1): at every merge each pair
        that could be merged is skipped with that probability, one of ``draws`` (uniform numbers in
        [0, 1)) each, and the first pair not skipped is merged; the word ends when all are skipped.
        The library's own dropout cannot be seeded, so a run could not be replayed or resumed.
        """
        ranks, symbols = self._merge_ranks, list(word)
        # the rank of each neighbouring pair (NOT_LEARNED: none), kept up to date merge after merge
        pair_ranks = [ranks.get(pair, NOT_LEARNED) for pair in itertools.pairwise(symbols)]
        while pair_ranks and (first := min(pair_ranks)) != NOT_LEARNED:
            if next(draws) >= dropout:
                index = pair_ranks.index(first)  # the leftmost of equal pairs, as the library merges
            else:  # the first was skipped: the others in their order, each skipped in turn
                order = sorted((rank, index) for index, rank in enumerate(pair_ranks) if rank != NOT_LEARNED)
                index = next((index for _, index in order[1:] if next(draws) >= dropout), -1)
                if index < 0:
                    break
            symbols[index : index + 2] = [symbols[index] + symbols[index + 1]]
            del pair_ranks[index]
            if index > 0:
                pair_ranks[index - 1] = ranks.get((symbols[index - 1], symbols[index]), NOT_LEARNED)
            if index < len(pair_ranks):
                pair_ranks[index] = ranks.get((symbols[index], symbols[index + 1]), NOT_LEARNED)
        return symbols

    @cached_property
    def _merge_ranks(self) -> dict[tuple[str, str], int]:
        """Each learned pair of units -> its rank, from the library's JSON (older versions write "a b")."""
        ranks: dict[tuple[str, str], int] = {}
        for rank, merge in enumerate(json.loads(self.serialized)["model"]["merges"]):
            left, right = merge if isinstance(merge, list) else merge.split(" ", 1)
            ranks.setdefault((left, right), rank)
        return ranks


# the 256 byte-level units (bytes 0-255 as GPT-2's printable characters): byte-level BPE's alphabet
BYTE_UNITS = tuple(
    chr(b)
    if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255
    else chr(256 + sum(1 for c in range(b) if not (33 <= c <= 126 or 161 <= c <= 172 or 174 <= c <= 255)))
    for b in range(256)
)


_BYTE_OF_UNIT = {unit: byte for byte, unit in enumerate(BYTE_UNITS)}


def _wait_interruptibly(work: Callable[[], object]) -> None:
    """Run ``work`` on a thread of its own and wait for it here.

    The library learns in Rust without giving Python a chance to see Ctrl-C (minutes on a large
    corpus, then a traceback); a wait for a thread is interrupted at once. An interrupted learning
    runs on, unseen, until it ends or the process exits (a daemon thread).
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as error:  # handed to the waiting thread, raised there
            failure.append(error)

    thread = threading.Thread(target=run, name="learn-subwords", daemon=True)
    thread.start()
    while thread.is_alive():  # in short waits: a signal handled on another thread is seen between them
        thread.join(0.2)
    if failure:
        raise failure[0]


TOKENIZER_LIBRARIES = {"bpe": "tokenizers", "marian": "sentencepiece"}  # the tokenizers of a library


def tokenizer_library(name: str) -> Any:
    """The library the tokenizer ``name`` works through (bpe: Hugging Face tokenizers, marian:
    sentencepiece), imported, or None for one of none (char, word); MissingLibrary, naming the
    extra that installs it, where it is not installed."""
    library = TOKENIZER_LIBRARIES.get(name)
    if library is None:
        return None
    require(f"the {name} tokenizer", library)
    return importlib.import_module(library)


class SentencePieceTokenizer(Tokenizer):
    """Marian's subwords (OPUS-MT models): a SentencePiece model for each side, ``source.spm`` and
    ``target.spm``, through the ``sentencepiece`` library, splitting text as transformers'
    MarianTokenizer does. A source ends with ``</s>``, as Marian's encoder reads it; a leading
    language code (``>>fra<<``) is one token. No punctuation normalisation is applied (transformers
    applies Moses' only where sacremoses is installed).

    The two models' bytes are kept (``serialized``, base64 text), so a checkpoint holds them.
    """

    name = "marian"
    subwords = True
    END = "</s>"
    SPECIAL_PIECES = (END, "<unk>", "<pad>")  # never text: left out when detokenizing

    def __init__(self, source: bytes, target: bytes, names: tuple[str, str] = ("source", "target")) -> None:
        """``names``: what a refusal calls the two models (their files, where they come from files)."""
        sentencepiece = tokenizer_library(self.name)
        self.models = {"source": source, "target": target}
        processors = []
        for name, model in zip(names, self.models.values()):
            try:
                processors.append(sentencepiece.SentencePieceProcessor(model_proto=model))
            except RuntimeError as error:  # the library's error for bytes that are no model
                raise ValueError(f"{name}: not a SentencePiece model ({error})") from None
        self.source, self.target = processors

    @property
    def serialized(self) -> dict[str, str]:
        return {side: b64encode(model).decode("ascii") for side, model in self.models.items()}

    @classmethod
    def from_serialized(cls, serialized: dict[str, str]) -> SentencePieceTokenizer:
        return cls(b64decode(serialized["source"]), b64decode(serialized["target"]))

    @staticmethod
    def _split(text: str, model: Any) -> list[str]:
        code: list[str] = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        return code + model.encode(text, out_type=str)

    def tokenize_source(self, text: str) -> list[str]:
        return [*self._split(text, self.source), self.END]

    def fewest_tokens(self, text: str, limit: int) -> int:
        # a piece covers at most the longest piece's characters (a space is one, ▁), of the text as
        # normalised (NFKC composes up to 3 characters into one: a Hangul syllable's jamo); a
        # language code is one token, however long
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            return 1 + self.fewest_tokens(text[end + 2 :], limit)
        return -(-len(text) // (3 * self._longest_piece))

    @cached_property
    def _longest_piece(self) -> int:
        return max(
            len(model.id_to_piece(index))
            for model in (self.source, self.target)
            for index in range(model.get_piece_size())
        )

    def tokenize(self, text: str) -> list[str]:
        return self._split(text, self.target)

    def detokenize(self, tokens: Sequence[str]) -> str:
        pieces = [token for token in tokens if token not in self.SPECIAL_PIECES]
        return str(self.target.decode_pieces(pieces)).replace("\u2581", " ").strip()


TOKENIZERS: dict[str, type[CharTokenizer] | type[WordTokenizer]] = {
    "char": CharTokenizer,
    "word": WordTokenizer,
}  # the tokenizers that learn nothing


TOKENIZER_NAMES = (*TOKENIZERS, BPETokenizer.name, SentencePieceTokenizer.name)


BPE_VOCAB_SIZE = 8000  # subword units a large corpus learns by default, source and target together


def subword_vocab_size(train_pairs: int) -> int:
    """The subword units a corpus of ``train_pairs`` pairs learns by default: small corpora do
    better with fewer, more frequent units (each seen often enough to be learned), and a smaller
    vocabulary makes every step cheaper (the output projection and softmax dominate a small
    model's step)."""
    if train_pairs < 5_000:
        return 1000
    if train_pairs < 20_000:
        return 2000
    return 4000 if train_pairs < 200_000 else BPE_VOCAB_SIZE


# The sizes BPETokenizer.train accepts: at least the 256 bytes (no merge), at most a million. Hugging Face's
# trainer allocates about 66 bytes per unit before it starts (10**9 asks for 66 GB and aborts the process,
# 2**64 overflows its integer), and the largest vocabularies in use hold about 256,000 units.
BPE_VOCAB_RANGE = (256, 1_000_000)


def make_tokenizer(
    name: str,
    serialized: Any = None,
    vocabularies: tuple[Vocab, Vocab] | None = None,
    vocab_texts: Sequence[tuple[str, str]] = (),
    vocab_size: int = BPE_VOCAB_SIZE,
) -> Tokenizer:
    """The tokenizer ``name``: bpe from its ``serialized`` subwords or learned from ``vocab_texts``;
    marian (a pretrained model's) from its serialized models, with its ``vocabularies`` (one built
    from a corpus would not be the model's); char and word as they are."""
    if name not in TOKENIZER_NAMES:
        raise ValueError(f"tokenizer must be one of {sorted(TOKENIZER_NAMES)}, got {name!r}")
    if name == BPETokenizer.name:
        if serialized is not None:
            return BPETokenizer(serialized)
        return BPETokenizer.train((text for pair in vocab_texts for text in pair), vocab_size)
    if name == SentencePieceTokenizer.name:
        if serialized is None or vocabularies is None:
            raise ValueError(
                "--tokenizer marian is a pretrained Marian model's own: import the model (numpy-transformer "
                "import DIR --out RUN), then fine-tune it with train --from RUN --data FILE.tsv"
            )
        return SentencePieceTokenizer.from_serialized(serialized)
    return TOKENIZERS[name]()


def encode_sentences(
    sentences: Sequence[str], tokenizer: Tokenizer, vocab: Vocab, target: bool = False
) -> list[list[int]]:
    """Ids for user sentences, sources (or ``target`` sentences, split as targets are); unknown
    tokens become <unk> with a warning naming them (as text: Tokenizer.shown)."""
    split = tokenizer.tokenize if target else tokenizer.tokenize_source
    encoded = []
    for sentence in sentences:
        ids, unknown = vocab.encode(split(sentence))
        if unknown:
            warnings.warn(
                f"{sentence!r}: tokens outside the vocabulary mapped to <unk>: "
                f"{sorted(set(tokenizer.shown(unknown)))}",  # as text: ▁öffnen, never ĠÃ¶ffnen
                stacklevel=2,
            )
        encoded.append(ids)
    return encoded


def __getattr__(name: str) -> NoReturn:
    """A name that moved out of this module (tokenizer.json's, to huggingface.tokenizer_json) answers with
    its new place."""
    if f"{__name__}.{name}" in MOVED:
        refuse_moved_name(__name__, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
