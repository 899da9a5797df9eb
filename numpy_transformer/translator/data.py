"""Tokenisers, vocabularies, translation tasks and batching.

Tasks are generated on the fly (``copy``, ``reverse``, ``numbers-en-fr``) or read from a
``source<TAB>target`` file. The batch for training step k is a pure function of (seed, k), so a
resumed run sees exactly the batches an uninterrupted one would. A vocabulary's special ids
(``SpecialIds``) are the package's own, or those of a pretrained Marian model's vocabulary.
"""

from __future__ import annotations

import itertools
import json
import re
import select
import sys
import threading
import warnings
from base64 import b64decode, b64encode
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy

from ..backend import get_array_module
from ..model import causal_mask, make_src_mask, make_tgt_mask

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)
PAD_ID, BOS_ID, EOS_ID, UNK_ID = range(4)
MAX_LENGTH = 256  # tokens on a side of a corpus pair; longer pairs (a stray 10 MB line) are left out
GLUE = "##"  # marks a word-level token written without a space before it
NO_DROPOUT = itertools.repeat(1.0)  # draws that skip no merge (BPETokenizer.merge)
NOT_LEARNED = sys.maxsize  # the rank of a pair of units that is never merged


@dataclass(frozen=True)
class SpecialIds:
    """The ids a vocabulary gives its special tokens: the padding, the decoder's start token, the end
    of a sentence and the unknown token. This package's vocabularies put <pad>, <bos>, <eos>, <unk>
    at 0-3; a Marian model's put </s> at 0, <unk> at 1, <pad> last, and start the decoder from <pad>."""

    pad: int = PAD_ID
    bos: int = BOS_ID
    eos: int = EOS_ID
    unk: int = UNK_ID


DEFAULT_IDS = SpecialIds()


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
        tokenizers = _import_tokenizers()
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
        tokenizers = _import_tokenizers()
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


def _import_tokenizers() -> Any:
    try:
        import tokenizers
    except ImportError as error:
        raise RuntimeError(
            "--tokenizer bpe needs Hugging Face tokenizers: pip install 'numpy_transformer[train]'"
        ) from error
    return tokenizers


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
        try:
            import sentencepiece
        except ImportError as error:
            raise RuntimeError(
                "Marian's tokenizer needs the sentencepiece library: pip install 'numpy_transformer[pretrained]'"
            ) from error
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


class Vocab:
    """Token <-> id, with <pad>=0, <bos>=1, <eos>=2, <unk>=3 first, or a saved list's own special
    ``ids`` (a pretrained model's)."""

    ids = DEFAULT_IDS

    def __init__(self, tokens: Iterable[str]) -> None:
        self.itos = list(SPECIALS) + sorted(set(tokens) - set(SPECIALS))
        self.stoi = {token: index for index, token in enumerate(self.itos)}

    @classmethod
    def from_list(cls, itos: Sequence[str], ids: SpecialIds = DEFAULT_IDS) -> Vocab:
        """The vocabulary of a saved list; its special tokens at ``ids`` (the defaults: 0-3, named as SPECIALS)."""
        if ids == DEFAULT_IDS and tuple(itos[:4]) != SPECIALS:
            raise ValueError(f"a vocabulary must start with {SPECIALS}, got {tuple(itos[:4])}")
        outside = {name: value for name, value in asdict(ids).items() if not 0 <= value < len(itos)}
        if outside:
            raise ValueError(f"special ids {outside} lie outside the vocabulary of {len(itos)} tokens")
        vocab = cls([])
        vocab.itos = list(itos)
        vocab.stoi = {token: index for index, token in enumerate(vocab.itos)}
        vocab.ids = ids
        return vocab

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: Sequence[str]) -> tuple[list[int], list[str]]:
        """Ids for the tokens, and the list of tokens that were unknown (mapped to <unk>)."""
        unknown = [t for t in tokens if t not in self.stoi]
        return [self.stoi.get(t, self.ids.unk) for t in tokens], unknown

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens up to the first <eos>, without <bos>/<pad>."""
        tokens = []
        for index in ids:
            index = int(index)
            if index == self.ids.eos:
                break
            if index not in (self.ids.pad, self.ids.bos):
                tokens.append(self.itos[index])
        return tokens


@dataclass
class Batch:
    """Padded to the longest sequence in the batch; masks built once here.

    src (B, S); tgt_in (B, T) = <bos> y1..y_{n}; tgt_out (B, T) = y1..y_n <eos>.
    """

    src: Any
    tgt_in: Any
    tgt_out: Any
    src_mask: Any
    tgt_mask: Any
    n_tokens: int  # target tokens (non-pad labels), counted on the host


def _token_chunks(pairs: list, tokens: list[int], parts: int) -> list[list]:
    """Cut ``pairs`` (len >= parts) into ``parts`` consecutive, non-empty chunks of about equal ``tokens``:
    chunk k ends where the running count crosses k / parts of the total."""
    running = numpy.cumsum(tokens)
    cuts = numpy.searchsorted(running, running[-1] * numpy.arange(1, parts) / parts) + 1
    bounds = [0]
    for k, cut in enumerate(cuts.tolist(), start=1):
        bounds.append(min(max(cut, bounds[-1] + 1), len(pairs) - (parts - k)))
    bounds.append(len(pairs))
    return [pairs[start:stop] for start, stop in itertools.pairwise(bounds)]


def _longer_first(lengths: tuple[int, int]) -> tuple[int, int]:
    """A pair's bucketing key: its longer side's tokens, then both sides' together."""
    return max(lengths), sum(lengths)


def host_rng(*keys: int) -> numpy.random.Generator:
    """A host (NumPy) generator seeded by a tuple of keys: data sampling never touches the model's
    generator."""
    return numpy.random.default_rng(list(keys))


def host_pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> numpy.ndarray:
    """Right-pad integer sequences with <pad> to the longest: a (B, max length) int64 host array."""
    out = numpy.full((len(sequences), max(len(s) for s in sequences)), pad_id, dtype=numpy.int64)
    for row, sequence in enumerate(sequences):
        out[row, : len(sequence)] = sequence
    return out


def pad(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID) -> Any:
    """host_pad's array on the backend's device, in one copy."""
    return get_array_module().asarray(host_pad(sequences, pad_id))


def target_mask(tgt_in: Any, ids: SpecialIds = DEFAULT_IDS) -> Any:
    """The decoder's mask: padding and the future hidden (make_tgt_mask). A decoder that starts from
    <pad> (Marian's) would have its start token hidden so: there the causal mask alone, as
    transformers has it, which hides the padding too from every real position (padding only follows
    a target's tokens)."""
    if ids.bos == ids.pad:
        return causal_mask(tgt_in.shape[1])
    return make_tgt_mask(tgt_in, ids.pad)


def make_batch(
    src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]], ids: SpecialIds = DEFAULT_IDS
) -> Batch:
    """The padded batch; the three id arrays reach the device side by side in one copy."""
    host = [
        host_pad(src_ids, ids.pad),
        host_pad([[ids.bos, *t] for t in tgt_ids], ids.pad),
        host_pad([[*t, ids.eos] for t in tgt_ids], ids.pad),
    ]
    device = get_array_module().asarray(numpy.concatenate(host, axis=1))
    src_len, tgt_len = host[0].shape[1], host[1].shape[1]
    src, tgt_in, tgt_out = (
        device[:, :src_len],
        device[:, src_len : src_len + tgt_len],
        device[:, src_len + tgt_len :],
    )
    n_tokens = int((host[2] != ids.pad).sum())
    return Batch(src, tgt_in, tgt_out, make_src_mask(src, ids.pad), target_mask(tgt_in, ids), n_tokens)


# ----------------------------------------------------------------------------------------------
# tasks


class TranslationTask:
    """Pairs of texts with a tokenizer and vocabularies built from the training split.

    Subclasses provide ``sample_train(rng, n)``; dev and test are fixed lists of pairs.
    """

    name = "task"

    def __init__(
        self,
        tokenizer: str | Tokenizer,
        dev: list[tuple[str, str]],
        test: list[tuple[str, str]],
        vocab_texts: Sequence[tuple[str, str]],
        seed: int = 0,
        vocab_size: int | None = None,
        shared_vocab: bool = False,
        serialized_tokenizer: Any = None,
        vocabularies: tuple[Vocab, Vocab] | None = None,
    ) -> None:
        """``tokenizer`` "bpe" learns one subword model of ``vocab_size`` units (None: chosen from
        the number of pairs, subword_vocab_size) from both sides of ``vocab_texts`` (or takes
        ``serialized_tokenizer``, a saved one); ``shared_vocab`` gives source and target one vocabulary.
        ``vocabularies`` (source, target), saved ones, are taken as they are instead of being built
        from ``vocab_texts``. "marian" is a pretrained model's (``serialized_tokenizer`` and
        ``vocabularies`` its own); a Tokenizer object is taken as it is (a run's own, train --from:
        ``vocab_size`` is then the units its subwords were learned as, if any)."""
        # the subword units asked for (a bpe task's; its vocabularies hold those the text uses)
        self.vocab_size: int | None = None
        self.tokenizer: Tokenizer
        if isinstance(tokenizer, Tokenizer):
            self.tokenizer = tokenizer
            self.vocab_size = vocab_size if isinstance(tokenizer, BPETokenizer) else None
        else:
            if tokenizer == BPETokenizer.name:
                self.vocab_size = vocab_size or subword_vocab_size(len(vocab_texts))
            self.tokenizer = make_tokenizer(
                tokenizer, serialized_tokenizer, vocabularies, vocab_texts, self.vocab_size or BPE_VOCAB_SIZE
            )
        self.dev, self.test, self.seed, self.shared_vocab = dev, test, seed, shared_vocab
        self._bucket: tuple[tuple, list] | None = None
        self._mean_target_tokens: float | None = None
        self._token_lengths: dict[tuple[str, str], tuple[int, int]] = {}
        if vocabularies is not None:
            self.src_vocab, self.tgt_vocab = vocabularies
            return
        src_tokens: set[str] = set()
        tgt_tokens: set[str] = set()
        if isinstance(self.tokenizer, BPETokenizer):  # every byte, whatever the corpus: nothing is <unk>
            src_tokens.update(BYTE_UNITS)
            tgt_tokens.update(BYTE_UNITS)
        for source, target in vocab_texts:
            src_tokens.update(self.tokenizer.tokenize(source))
            tgt_tokens.update(self.tokenizer.tokenize(target))
        if shared_vocab:
            self.src_vocab = self.tgt_vocab = Vocab(src_tokens | tgt_tokens)
        else:
            self.src_vocab, self.tgt_vocab = Vocab(src_tokens), Vocab(tgt_tokens)

    def length_pairs(self, seed: int) -> list[tuple[str, str]]:
        """Training pairs whose longest sizes the positional tables: a sample of 2,000 for generated
        tasks (their lengths are bounded), every pair for a corpus (one long pair must fit too)."""
        return self.sample_train(host_rng(seed, 3), 2000)

    def sample_train(self, rng: Any, n: int) -> list[tuple[str, str]]:
        raise NotImplementedError

    @property
    def ids(self) -> SpecialIds:
        """The special ids of the target vocabulary, which the source's padding shares."""
        return self.tgt_vocab.ids

    def encode_pairs(self, pairs: Sequence[tuple[str, str]]) -> tuple[list[list[int]], list[list[int]]]:
        src = [self.src_vocab.encode(self.tokenizer.tokenize_source(s))[0] for s, _ in pairs]
        tgt = [self.tgt_vocab.encode(self.tokenizer.tokenize(t))[0] for _, t in pairs]
        return src, tgt

    def batch(self, pairs: Sequence[tuple[str, str]]) -> Batch:
        return make_batch(*self.encode_pairs(pairs), self.ids)

    def train_batch(
        self,
        step: int,
        batch_size: int,
        bucket_steps: int = 0,
        batch_tokens: int | None = None,
        dropout: SubwordDropout | None = None,
    ) -> Batch:
        """The batch for optimiser step ``step``: a pure function of (seed, step).

        With ``bucket_steps`` > 1, that many steps' examples are drawn together, sorted by
        length and cut into batches of similar length (less padding), in a shuffled order:
        ``batch_size`` pairs each, or, with ``batch_tokens``, about that many target tokens each
        (as the paper batches: many short pairs or few long ones). ``dropout`` segments the
        batch's sentences anew (BPE-dropout), seeded by (seed, step) too.
        """
        if bucket_steps <= 1 and batch_tokens is None:
            return self._encode_train(self.sample_train(host_rng(self.seed, step), batch_size), step, dropout)
        bucket_steps = max(bucket_steps, 1)
        group, position = divmod(step, bucket_steps)
        if self._bucket is None or self._bucket[0] != (group, batch_size, batch_tokens):
            rng = host_rng(self.seed, group, 1)
            pool = bucket_steps * (batch_size if batch_tokens is None else self.pairs_per_batch(batch_tokens))
            # by the longer side's tokens first: a batch is as long as its longest source and target
            pairs = sorted(self.sample_train(rng, pool), key=lambda p: _longer_first(self.token_lengths(p)))
            if batch_tokens is None:
                chunks = [pairs[i : i + batch_size] for i in range(0, len(pairs), batch_size)]
            else:
                tokens = [self.token_lengths(pair)[1] + 1 for pair in pairs]
                chunks = _token_chunks(pairs, tokens, bucket_steps)
            self._bucket = (
                (group, batch_size, batch_tokens),
                [chunks[i] for i in rng.permutation(len(chunks))],
            )
        return self._encode_train(self._bucket[1][position], step, dropout)

    def token_lengths(self, pair: tuple[str, str]) -> tuple[int, int]:
        """The (source, target) lengths in tokens of a pair (the target without <bos>/<eos>), remembered:
        training pairs come back every pass, and max_lengths has measured every one of a corpus."""
        lengths = self._token_lengths.get(pair)
        if lengths is None:
            source, target = pair
            lengths = len(self.tokenizer.tokenize_source(source)), len(self.tokenizer.tokenize(target))
            self._token_lengths[pair] = lengths
        return lengths

    def _encode_train(
        self, pairs: Sequence[tuple[str, str]], step: int, dropout: SubwordDropout | None
    ) -> Batch:
        if dropout is None:
            return self.batch(pairs)
        return make_batch(*dropout.encode_pairs(pairs, host_rng(self.seed, step, 4)), self.ids)

    def pairs_per_batch(self, batch_tokens: int) -> int:
        """About how many pairs hold ``batch_tokens`` target tokens, from the mean length of a fixed
        sample."""
        if self._mean_target_tokens is None:
            sample = self.sample_train(host_rng(self.seed, 5), 500)
            self._mean_target_tokens = sum(self.token_lengths(pair)[1] + 1 for pair in sample) / len(sample)
        return max(1, round(batch_tokens / self._mean_target_tokens))

    def max_lengths(self, pairs: Iterable[tuple[str, str]]) -> tuple[int, int]:
        """Longest source and target (with <bos>/<eos>) in tokens."""
        src_len = tgt_len = 1
        for pair in pairs:
            source, target = self.token_lengths(pair)
            src_len, tgt_len = max(src_len, source), max(tgt_len, target + 1)
        return src_len, tgt_len


class SubwordDropout:
    """BPE-dropout of training sentences (BPETokenizer.merge): each step's batch comes in other
    segmentations of its sentences, the same text in other subwords, as regularisation. Only
    training batches are segmented so; dev, test, translate and the saved tokenizer keep the
    deterministic segmentation.

    A word whose dropped-out segmentation holds a unit its side's vocabulary lacks (the
    vocabularies hold the units of the deterministic segmentation of the training split), and a
    sentence that would come out longer than ``max_lengths`` (source, target: what the model's
    position tables hold), keep their deterministic segmentation.
    """

    def __init__(self, task: TranslationTask, probability: float, max_lengths: tuple[int, int]) -> None:
        if not isinstance(task.tokenizer, BPETokenizer):
            raise ValueError(f"BPE-dropout needs subwords (tokenizer bpe), not {task.tokenizer.name}")
        if not 0.0 < probability < 1.0:
            raise ValueError(f"the BPE-dropout probability must be in (0, 1), got {probability!r}")
        self.tokenizer, self.probability, self.max_lengths = task.tokenizer, probability, max_lengths
        self.vocabularies = (task.src_vocab, task.tgt_vocab)

    def encode_pairs(
        self, pairs: Sequence[tuple[str, str]], rng: numpy.random.Generator
    ) -> tuple[list[list[int]], list[list[int]]]:
        """The ids of the pairs' sources and targets, segmented with dropout drawn from ``rng``."""
        draws = _uniforms(rng)
        src = [self._encode(source, 0, draws) for source, _ in pairs]
        tgt = [self._encode(target, 1, draws) for _, target in pairs]
        return src, tgt

    def _encode(self, text: str, side: int, draws: Iterator[float]) -> list[int]:
        known, tokens, dropped = self.vocabularies[side].stoi, [], []
        for pieces in self.tokenizer.word_pieces(text):
            tokens += pieces
            split = self.tokenizer.drop_out(pieces, self.probability, draws)
            dropped += split if all(piece in known for piece in split) else pieces
        chosen = dropped if len(dropped) <= self.max_lengths[side] else tokens
        return [known.get(token, self.vocabularies[side].ids.unk) for token in chosen]


def _uniforms(rng: numpy.random.Generator, block: int = 4096) -> Iterator[float]:
    """Uniform numbers in [0, 1) from ``rng``, drawn a block at a time: a call per number would cost
    more than the merge it decides."""
    while True:
        yield from rng.random(block).tolist()


class SymbolTask(TranslationTask):
    """``copy`` or ``reverse`` random strings of ``n_symbols`` digits-like symbols, lengths in
    [1, max_len]."""

    def __init__(
        self,
        name: str,
        n_symbols: int = 10,
        min_len: int = 1,
        max_len: int = 10,
        seed: int = 0,
        n_eval: int = 500,
    ) -> None:
        if name not in ("copy", "reverse"):
            raise ValueError(f"symbol task must be 'copy' or 'reverse', got {name!r}")
        self.name = name
        self.symbols = [chr(ord("a") + i) for i in range(n_symbols)]
        self.min_len, self.max_len = min_len, max_len
        dev = self.sample_train(host_rng(seed, 10**9), n_eval)
        test = self.sample_train(host_rng(seed, 10**9 + 1), n_eval)
        super().__init__("char", dev, test, [("".join(self.symbols), "".join(self.symbols))], seed)

    def sample_train(self, rng: Any, n: int) -> list[tuple[str, str]]:
        pairs = []
        for _ in range(n):
            length = int(rng.integers(self.min_len, self.max_len + 1))
            text = "".join(self.symbols[i] for i in rng.integers(0, len(self.symbols), length))
            pairs.append((text, text if self.name == "copy" else text[::-1]))
        return pairs


def number_words(number: int, lang: str) -> str:
    """English or French words for a number as num2words writes them, English without "and"
    and commas ("three hundred forty-two")."""
    from num2words import num2words

    words = num2words(number, lang=lang)
    if lang == "en":
        words = words.replace(",", "").replace(" and ", " ")
    return words


class _NumberWords:
    """number_words for 0 <= n < 1,000,000, composed from cached words of n // 1000 and n % 1000.

    num2words is slow per call, more than a training step can spare; the composition follows
    its rules (French "mille" is invariable and drops the plural s of "cents"/"vingts" before it)
    and a test checks it against num2words itself.
    """

    def __init__(self, lang: str) -> None:
        self.lang = lang
        self.below_thousand = [number_words(n, lang) for n in range(1000)]

    def __call__(self, number: int) -> str:
        thousands, rest = divmod(number, 1000)
        if not thousands:
            return self.below_thousand[rest]
        if self.lang == "en":
            head = f"{self.below_thousand[thousands]} thousand"
        elif thousands == 1:
            head = "mille"
        else:
            head = self.below_thousand[thousands]
            head = head[:-1] + " mille" if head.endswith(("cents", "vingts")) else head + " mille"
        return head if not rest else f"{head} {self.below_thousand[rest]}"


class NumbersTask(TranslationTask):
    """English number words -> French number words for numbers in [0, limit).

    Disjoint random dev and test sets of numbers are set aside; training samples the rest, so
    test numbers are never seen in training.
    """

    name = "numbers-en-fr"

    def __init__(
        self,
        limit: int = 1_000_000,
        n_dev: int = 500,
        n_test: int = 1000,
        seed: int = 0,
        tokenizer: str = "word",
    ) -> None:
        try:
            import num2words  # noqa: F401
        except ImportError as error:
            raise RuntimeError(
                "the numbers-en-fr task needs num2words: pip install 'numpy_transformer[train]'"
            ) from error
        if not 1000 <= limit <= 1_000_000:
            raise ValueError(f"limit must be in [1000, 1000000], got {limit!r}")
        self.limit = limit
        order = host_rng(seed, 7).permutation(limit)
        held_out = order[: n_dev + n_test]
        self._is_train = numpy.ones(limit, dtype=bool)
        self._is_train[held_out] = False
        self._english, self._french = _NumberWords("en"), _NumberWords("fr")
        dev = [self._pair(int(n)) for n in held_out[:n_dev]]
        test = [self._pair(int(n)) for n in held_out[n_dev:]]
        vocab_numbers = [
            *order[n_dev + n_test : n_dev + n_test + 20000],
            *(n for n in range(1000) if self._is_train[n]),
        ]
        super().__init__(tokenizer, dev, test, [self._pair(int(n)) for n in vocab_numbers], seed)

    def _pair(self, number: int) -> tuple[str, str]:
        return self._english(number), self._french(number)

    def sample_train(self, rng: Any, n: int) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        while len(pairs) < n:
            candidates = rng.integers(0, self.limit, 2 * n)
            pairs.extend(self._pair(int(c)) for c in candidates[self._is_train[candidates]])
        return pairs[:n]


UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text: str) -> str:
    """``text`` with its control characters (tab, newline, carriage return, NUL, the terminal's ESC,
    line and paragraph separators) written as Python escapes (\\t, \\n, \\x1b, \\u2028): one
    line of output per sentence, and nothing a terminal would obey."""
    return _CONTROL.sub(lambda match: match.group().encode("unicode_escape").decode("ascii"), text)


def text_lines(lines: Iterable[bytes], name: str, start: int = 1) -> Iterator[tuple[int, str]]:
    """(line number, text) of each line of UTF-8 ``lines``, as a binary file yields them; ``name``
    (a file, "standard input") and the number name a line that is not UTF-8 text in a ValueError.

    Lines end at b"\\n" only, so the numbers are the file's own, whatever the text holds (U+2028,
    U+0085, \\x0c and a lone \\r are characters of the line, where str.splitlines would end it);
    a CRLF line loses its \\r and line 1 its byte-order mark (``start`` numbers the first line
    given: a stream read in parts). A NUL byte is valid UTF-8 but
    never text: it is refused as what it nearly always is, UTF-16 or a binary file.
    """
    for number, line in enumerate(lines, start=start):
        line = line[:-1] if line.endswith(b"\n") else line
        line = line[:-1] if line.endswith(b"\r") else line
        if number == 1:
            if line.startswith(UTF16_BOMS):
                raise ValueError(
                    f"{name}:1: not UTF-8 text: it starts with a UTF-16 byte-order mark (convert it: "
                    "iconv -f UTF-16 -t UTF-8)"
                )
            line = line.removeprefix(UTF8_BOM)
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(
                f"{name}:{number}: not UTF-8 text: the line's byte {error.start + 1}, "
                f"{line[error.start]:#04x}, is not UTF-8 (a Latin-1 or Windows-1252 file? convert it: "
                "iconv -f LATIN1 -t UTF-8)"
            ) from None
        if "\0" in text:
            raise ValueError(
                f"{name}:{number}: not UTF-8 text: the line holds a NUL byte (a UTF-16 or binary file? "
                "convert UTF-16 with iconv -f UTF-16 -t UTF-8)"
            )
        yield number, text


def line_batches(stream: Any, size: int, chunk: int = 1 << 16) -> Iterator[list[bytes]]:
    """The lines of a binary ``stream`` (standard input's raw file), in lists of at most ``size``.

    A list is handed on when it is full, or as soon as no more input is waiting (a user typing, a
    ``tail -f``): nothing waits for the end of the input, and what is held stays within one list
    and one ``chunk``. ``stream.read(chunk)`` must return what is available without waiting for
    all of it, as an unbuffered file does. The last line may lack its b"\\n".
    """
    try:
        descriptor: int | None = stream.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stream: everything is waiting already
        descriptor = None

    def waiting() -> bool:
        if descriptor is None:
            return True
        try:
            return bool(select.select([descriptor], [], [], 0)[0])
        except (OSError, ValueError):  # a descriptor select cannot watch: read on, as a file
            return True

    lines: list[bytes] = []
    rest = bytearray()  # the line being read, grown in place: a 100 MB line is not copied per chunk
    while True:
        if lines and not waiting():  # the input pauses: hand on what has come
            yield lines
            lines = []
        data = stream.read(chunk)
        if data is None:  # a non-blocking descriptor with nothing yet
            assert descriptor is not None  # only a file descriptor can be non-blocking
            select.select([descriptor], [], [])
            continue
        if not data:
            break
        end = data.rfind(b"\n")
        if end < 0:
            rest += data
            continue
        complete = (bytes(rest) + data[:end]).split(b"\n")
        rest = bytearray(data[end + 1 :])
        for line in complete:
            lines.append(line + b"\n")
            if len(lines) == size:
                yield lines
                lines = []
    if rest:
        lines.append(bytes(rest))
    if lines:
        yield lines


def read_tsv(path: str | Path) -> list[tuple[str, str]]:
    """Pairs from a UTF-8 ``source<TAB>target`` file, one pair a line; blank lines are skipped.

    A line is refused by file:line when it is not UTF-8 text, lacks the tab, has more than two
    columns (a third column is never dropped unseen: cut it first, ``cut -f 1,2``) or an empty side.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"--data {path} is a directory: give the TSV file of sentence pairs")
    if not path.is_file():
        raise ValueError(f"--data {path}: no such file")
    pairs = []
    try:
        with open(path, "rb") as file:
            for number, line in text_lines(file, str(path)):
                if not line.strip() and "\t" not in line:
                    continue
                columns = line.split("\t")
                if len(columns) < 2:
                    raise ValueError(
                        f"{path}:{number}: no tab in the line, expected 'source<TAB>target': {line[:60]!r}"
                    )
                if len(columns) > 2:
                    raise ValueError(
                        f"{path}:{number}: {len(columns)} tab-separated columns, expected 2 "
                        f"('source<TAB>target'; keep the first two with cut -f 1,2): {line[:60]!r}"
                    )
                source, target = columns[0].strip(), columns[1].strip()
                if not source or not target:
                    side = "source" if not source else "target"
                    raise ValueError(
                        f"{path}:{number}: empty {side}, expected 'source<TAB>target': {line[:60]!r}"
                    )
                pairs.append((source, target))
    except OSError as error:
        raise ValueError(f"--data {path}: cannot be read ({error.strerror or error})") from error
    if not pairs:
        what = "is empty" if path.stat().st_size == 0 else "holds only blank lines"
        raise ValueError(f"--data {path}: the file {what}, it holds no sentence pairs")
    return pairs


class FileTask(TranslationTask):
    """Pairs from a TSV file, split deterministically (seeded shuffle) into train/dev/test."""

    name = "file"

    def __init__(
        self,
        path: str | Path,
        tokenizer: str = "bpe",
        dev_fraction: float = 0.05,
        test_fraction: float = 0.05,
        seed: int = 0,
        max_length: int = MAX_LENGTH,
        **vocabulary: Any,
    ) -> None:
        """``vocabulary``: TranslationTask's vocab_size, shared_vocab, serialized_tokenizer and
        vocabularies."""
        read = read_tsv(path)
        pairs = list(dict.fromkeys(read))  # a repeated pair would land in training and test alike
        repeated = (
            f" ({len(read) - len(pairs)} repeated pairs of its {len(read)} removed: each pair is kept once)"
            if len(read) > len(pairs)
            else ""
        )
        splitter: str | Tokenizer = tokenizer
        given = vocabulary.get("vocabularies")
        if given is not None or tokenizer == SentencePieceTokenizer.name:
            # a model's own tokenizer and vocabularies (train --from): pairs count in its tokens, as its tables do
            splitter = make_tokenizer(tokenizer, vocabulary.pop("serialized_tokenizer", None), given)
            counter: Tokenizer | None = splitter
        else:  # bpe counts a pair's words: its subwords are learned afterwards, from the pairs kept
            kind = TOKENIZERS.get("word" if tokenizer == BPETokenizer.name else tokenizer)
            counter = kind() if kind else None
        pairs = _short_pairs(pairs, counter, max_length, path)
        if len(pairs) < 3:
            raise ValueError(
                f"--data {path}: {len(pairs)} pairs are too few to split into train, dev and test{repeated}"
            )
        order = host_rng(seed, 11).permutation(len(pairs))
        n_dev = max(1, int(len(pairs) * dev_fraction))
        n_test = max(1, int(len(pairs) * test_fraction))
        shuffled = [pairs[i] for i in order]
        self.train_pairs = shuffled[n_dev + n_test :]
        super().__init__(
            splitter,
            shuffled[:n_dev],
            shuffled[n_dev : n_dev + n_test],
            self.train_pairs,
            seed,
            **vocabulary,
        )
        if tokenizer == BPETokenizer.name and given is None:
            # the words counted above bound the subwords from below only (an unspaced CJK line is
            # one word): each split is counted again in the subwords the model sees
            split_names = ("training", "dev", "test")
            splits = [self.train_pairs, self.dev, self.test]
            kept = [_short_pairs(split, self.tokenizer, max_length, path, warn=False) for split in splits]
            dropped = sum(len(split) for split in splits) - sum(len(split) for split in kept)
            if dropped:
                warnings.warn(
                    f"--data {path}: {dropped} more pairs have more than {max_length} subword tokens on a "
                    "side and are left out (--max-length counts the tokens the model sees)",
                    stacklevel=2,
                )
            empty = [name for name, split in zip(split_names, kept) if not split]
            if empty:
                raise ValueError(
                    f"--data {path}: no {' or '.join(empty)} pair has at most {max_length} subword tokens on "
                    "a side (--max-length): raise --max-length or give shorter pairs"
                )
            self.train_pairs, self.dev, self.test = kept

    def sample_train(self, rng: Any, n: int) -> list[tuple[str, str]]:
        return [self.train_pairs[i] for i in rng.integers(0, len(self.train_pairs), n)]

    def length_pairs(self, seed: int) -> list[tuple[str, str]]:
        return self.train_pairs


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


def _short_pairs(
    pairs: list[tuple[str, str]],
    tokenizer: Tokenizer | None,
    max_length: int,
    path: str | Path,
    warn: bool = True,
) -> list[tuple[str, str]]:
    """The pairs with at most ``max_length`` tokens on each side; the others are left out, said in
    a warning."""
    if tokenizer is None:  # TranslationTask names the unknown tokenizer
        return pairs
    kept = [
        (source, target)
        for source, target in pairs
        if max(len(tokenizer.tokenize_source(source)), len(tokenizer.tokenize(target))) <= max_length
    ]
    if warn and len(kept) < len(pairs):
        warnings.warn(
            f"--data {path}: {len(pairs) - len(kept)} of {len(pairs)} pairs have more than {max_length} "
            f"tokens on a side and are left out (--max-length)",
            stacklevel=3,
        )
    return kept


def make_task(
    task: str | None = None,
    data: str | None = None,
    seed: int = 0,
    tokenizer: str | None = None,
    max_length: int = MAX_LENGTH,
    **vocabulary: Any,
) -> TranslationTask:
    """Build the task named on the command line (``--task`` or ``--data``); ``vocabulary``:
    TranslationTask's vocab_size, shared_vocab and serialized_tokenizer (for a corpus)."""
    if data is not None:
        return FileTask(data, tokenizer or BPETokenizer.name, seed=seed, max_length=max_length, **vocabulary)
    if task in ("copy", "reverse"):
        return SymbolTask(task, seed=seed)
    if task == "numbers-en-fr":
        return NumbersTask(seed=seed, tokenizer=tokenizer or "word")
    raise ValueError(
        f"--task must be one of copy, reverse, numbers-en-fr (or give --data FILE.tsv), got {task!r}"
    )


def encode_sentences(
    sentences: Sequence[str], tokenizer: Tokenizer, vocab: Vocab, target: bool = False
) -> list[list[int]]:
    """Ids for user sentences, sources (or ``target`` sentences, split as targets are); unknown
    tokens become <unk> with a warning naming them."""
    split = tokenizer.tokenize if target else tokenizer.tokenize_source
    encoded = []
    for sentence in sentences:
        ids, unknown = vocab.encode(split(sentence))
        if unknown:
            warnings.warn(
                f"{sentence!r}: tokens outside the vocabulary mapped to <unk>: {sorted(set(unknown))}",
                stacklevel=2,
            )
        encoded.append(ids)
    return encoded
