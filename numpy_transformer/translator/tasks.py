"""Translation tasks: generated ones (``copy``, ``reverse``, ``numbers-en-fr``) and a corpus file's. The
batch for training step k is a pure function of (seed, k), so a resumed run sees exactly the
batches an uninterrupted one would."""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy

from ..machine import require
from .batches import Batch, host_rng, make_batch
from .corpora import MAX_LENGTH, read_tsv
from .tokenizers import (
    BPE_VOCAB_SIZE,
    BYTE_UNITS,
    TOKENIZERS,
    BPETokenizer,
    SentencePieceTokenizer,
    Tokenizer,
    make_tokenizer,
    subword_vocab_size,
    tokenizer_library,
)
from .vocabulary import SpecialIds, Vocab

HELD_OUT = 0.05  # of a corpus's pairs, its dev split and its test split each, unless a file is given


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

    def unknown_tokens(self, pairs: Sequence[tuple[str, str]]) -> tuple[int, int]:
        """(the tokens of ``pairs`` outside the vocabularies, which become <unk>; their tokens in all)."""
        unknown = total = 0
        for source, target in pairs:
            for vocab, tokens in (
                (self.src_vocab, self.tokenizer.tokenize_source(source)),
                (self.tgt_vocab, self.tokenizer.tokenize(target)),
            ):
                unknown += len(vocab.encode(tokens)[1])
                total += len(tokens)
        return unknown, total

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


SMALL_SHARE = 0.2  # of numbers-en-fr's training draws, below a power of ten drawn first (NumbersTask)


class NumbersTask(TranslationTask):
    """English number words -> French number words for numbers in [0, limit).

    Disjoint random dev and test sets of numbers are set aside; training samples the rest, so
    test numbers are never seen in training. Drawn uniformly, nine numbers in ten have six digits
    and one in ten thousand has one or two: a model never sees "seven" alone, and repeats "sept"
    to its length limit. So a ``small_share`` of the training draws first picks a power of ten (10,
    100, ... up to the limit, each as likely), then a number below it (0.0: uniform draws alone, as
    runs saved before this share was kept in their recipe).
    """

    name = "numbers-en-fr"

    def __init__(
        self,
        limit: int = 1_000_000,
        n_dev: int = 500,
        n_test: int = 1000,
        seed: int = 0,
        tokenizer: str = "word",
        small_share: float = SMALL_SHARE,
    ) -> None:
        require("the numbers-en-fr task", "num2words")
        if not 1000 <= limit <= 1_000_000:
            raise ValueError(f"limit must be in [1000, 1000000], got {limit!r}")
        if not 0.0 <= small_share <= 1.0:
            raise ValueError(f"small_share must be in [0, 1], got {small_share!r}")
        self.limit, self.small_share = limit, small_share
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
        digits = len(str(self.limit - 1))
        while len(pairs) < n:
            candidates = rng.integers(0, self.limit, 2 * n)
            if self.small_share:  # below 10**d (and the limit), d of 1 to the limit's digits, each as likely
                small = rng.random(2 * n) < self.small_share
                below = numpy.minimum(10 ** rng.integers(1, digits + 1, 2 * n), self.limit)
                candidates = numpy.where(small, rng.integers(0, below), candidates)
            pairs.extend(self._pair(int(c)) for c in candidates[self._is_train[candidates]])
        return pairs[:n]


class PairsTask(TranslationTask):
    """Pairs given in three lists: trained on ``train_pairs`` (drawn uniformly), ``dev`` and ``test``
    held out. The vocabularies are built from the training pairs."""

    name = "pairs"

    def __init__(
        self,
        train_pairs: list[tuple[str, str]],
        dev: list[tuple[str, str]],
        test: list[tuple[str, str]],
        tokenizer: str | Tokenizer,
        seed: int = 0,
        **vocabulary: Any,
    ) -> None:
        """``vocabulary``: TranslationTask's vocab_size, shared_vocab, serialized_tokenizer and
        vocabularies."""
        self.train_pairs = train_pairs
        super().__init__(tokenizer, dev, test, train_pairs, seed, **vocabulary)

    def sample_train(self, rng: Any, n: int) -> list[tuple[str, str]]:
        return [self.train_pairs[i] for i in rng.integers(0, len(self.train_pairs), n)]

    def length_pairs(self, seed: int) -> list[tuple[str, str]]:
        return self.train_pairs


class FileTask(PairsTask):
    """Pairs from a TSV file, split deterministically (seeded shuffle) into train/dev/test: each of
    dev and test holds out HELD_OUT of the pairs, unless a file of its own is given (``dev``,
    ``test``, read as the corpus is), whose pairs are then left out of training."""

    name = "file"

    def __init__(
        self,
        path: str | Path,
        tokenizer: str = "bpe",
        dev_fraction: float = HELD_OUT,
        test_fraction: float = HELD_OUT,
        seed: int = 0,
        max_length: int = MAX_LENGTH,
        dev: str | Path | None = None,
        test: str | Path | None = None,
        **vocabulary: Any,
    ) -> None:
        """``vocabulary``: TranslationTask's vocab_size, shared_vocab, serialized_tokenizer and
        vocabularies."""
        given = vocabulary.get("vocabularies")
        splitter: str | Tokenizer = tokenizer
        counter: Tokenizer | None
        if given is not None or tokenizer == SentencePieceTokenizer.name:
            # a model's own tokenizer and vocabularies (train --from): pairs count in its tokens, as its tables do
            splitter = counter = make_tokenizer(
                tokenizer, vocabulary.pop("serialized_tokenizer", None), given
            )
        else:  # bpe counts a pair's words: its subwords are learned afterwards, from the pairs kept
            kind = TOKENIZERS.get("word" if tokenizer == BPETokenizer.name else tokenizer)
            counter = kind() if kind else None
        tokenizer_library(tokenizer)  # where it is not installed, said before the corpus is read
        self.files = {name: file for name, file in (("dev", dev), ("test", test)) if file is not None}
        files = {"data": path, **self.files}
        read = {name: read_tsv(file, f"--{name}") for name, file in files.items()}
        pairs = list(dict.fromkeys(read["data"]))  # a repeated pair would land in training and test alike
        self.repeated = len(read["data"]) - len(
            pairs
        )  # said with the splits, else their counts would not add up
        repeated = (
            f" ({self.repeated} repeated pairs of its {len(read['data'])} removed: each pair is kept once)"
            if self.repeated
            else ""
        )
        pairs, own = _corpus_and_own_splits(pairs, read, files, counter, max_length)
        _warn_of_shared_pairs(own, self.files)
        held_out = [name for name in ("dev", "test") if name not in own]
        if len(pairs) < 1 + len(held_out):
            names = ["train", *held_out]
            into = f"{', '.join(names[:-1])} and {names[-1]}" if held_out else "train"
            raise ValueError(
                f"--data {path}: only {len(pairs)} pair{'' if len(pairs) == 1 else 's'}, too few to split into "
                f"{into} ({1 + len(held_out)} at least){repeated}"
            )
        order = host_rng(seed, 11).permutation(len(pairs))
        n_dev = 0 if "dev" in own else max(1, int(len(pairs) * dev_fraction))
        n_test = 0 if "test" in own else max(1, int(len(pairs) * test_fraction))
        self.fractions = {"dev": dev_fraction, "test": test_fraction}
        shuffled = [pairs[i] for i in order]
        super().__init__(
            shuffled[n_dev + n_test :],
            own.get("dev", shuffled[:n_dev]),
            own.get("test", shuffled[n_dev : n_dev + n_test]),
            splitter,
            seed,
            **vocabulary,
        )
        if tokenizer == BPETokenizer.name and given is None:
            # the words counted above bound the subwords from below only (an unspaced CJK line is
            # one word): each split is counted again in the subwords the model sees
            splits = {"training": self.train_pairs, "dev": self.dev, "test": self.test}
            kept = _short_pairs(splits, self.tokenizer, max_length, warn=False)
            dropped = sum(len(split) for split in splits.values()) - sum(
                len(split) for split in kept.values()
            )
            if dropped:
                warnings.warn(
                    f"--data {path}: {dropped} more pairs have more than {max_length} subword tokens on a "
                    "side and are left out (--max-length counts the tokens the model sees)",
                    stacklevel=2,
                )
            empty = [name for name, split in kept.items() if not split]
            if empty:
                raise ValueError(
                    f"--data {path}: no {' or '.join(empty)} pair has at most {max_length} subword tokens on "
                    "a side (--max-length): raise --max-length or give shorter pairs"
                )
            self.train_pairs, self.dev, self.test = kept["training"], kept["dev"], kept["test"]

    def splits(self) -> str:
        """One line: how many pairs each split holds, and how they were chosen."""
        sizes = {"dev": len(self.dev), "test": len(self.test)}
        parts = [f"{len(self.train_pairs):,} training pairs"]
        if self.repeated:
            parts[0] += f" ({self.repeated:,} pairs repeated in --data kept once)"
        parts += [f"{sizes[name]:,} {name} pairs from --{name} {file}" for name, file in self.files.items()]
        held = [
            f"{sizes[name]:,} {name} pairs ({self.fractions[name]:.0%})"
            for name in sizes
            if name not in self.files
        ]
        if held:
            parts.append(f"{' and '.join(held)} held out of --data by a shuffle of --seed {self.seed}")
        return "splits: " + "; ".join(parts)


def _warn_of_shared_pairs(own: dict[str, list[tuple[str, str]]], files: dict[str, str | Path]) -> None:
    """A warning where the user's own dev and test files share pairs: the test scores would count
    pairs the run chose its best checkpoint by (the splits held out of --data never share one)."""
    if len(own) < 2:
        return
    dev = set(own["dev"])
    shared = sum(pair in dev for pair in own["test"])
    if shared:
        warnings.warn(
            f"--test {files['test']}: {shared} of its {len(own['test'])} pairs are also in --dev {files['dev']}: "
            "its scores are not independent of the dev pairs the best checkpoint was chosen by",
            stacklevel=3,
        )


def _corpus_and_own_splits(
    pairs: list[tuple[str, str]],
    read: dict[str, list[tuple[str, str]]],
    files: dict[str, str | Path],
    counter: Tokenizer | None,
    max_length: int,
) -> tuple[list[tuple[str, str]], dict[str, list[tuple[str, str]]]]:
    """The corpus's ``pairs`` and the user's own dev and test splits (``read`` from ``files`` by name:
    data, dev, test), each with the pairs of at most ``max_length`` tokens of ``counter`` a side; a
    dev or test file with none is refused. The corpus's pairs that are also in an own split are left
    out, said in a warning: a pair trained on would score as if translated."""
    where = {name: f"--{name} {file}" for name, file in files.items()}
    short = _short_pairs(
        {
            where["data"]: pairs,
            **{where[name]: list(dict.fromkeys(split)) for name, split in read.items() if name != "data"},
        },
        counter,
        max_length,
    )
    kept, own = short.pop(where["data"]), {name: short[where[name]] for name in files if name != "data"}
    for name, split in own.items():
        if not split:
            raise ValueError(
                f"{where[name]}: no pair has at most {max_length} tokens on a side (--max-length): raise "
                "--max-length or give shorter pairs"
            )
    for name, split in own.items():
        held = set(split)
        left = [pair for pair in kept if pair not in held]
        if kept and not left:  # --dev the corpus itself: a warning, then "only 0 pairs", would hide why
            raise ValueError(
                f"--{name} {files[name]}: holds every one of the {len(kept)} pairs of --data {files['data']}, "
                f"which are left out of training: none is left to train on (give --{name} pairs of its own, "
                f"or leave --{name} out to hold {name} pairs out of --data)"
            )
        if len(left) < len(kept):
            warnings.warn(
                f"--data {files['data']}: {len(kept) - len(left)} of its pairs are also in --{name} {files[name]} "
                "and are left out of training",
                stacklevel=3,
            )
        kept = left
    return kept, own


def _short_pairs(
    splits: dict[str, list[tuple[str, str]]], tokenizer: Tokenizer | None, max_length: int, warn: bool = True
) -> dict[str, list[tuple[str, str]]]:
    """Each split's pairs with at most ``max_length`` tokens on each side; the others are left out,
    said in a warning that starts with the split's name (the option and its file: "--data corpus.tsv")."""
    if tokenizer is None:  # TranslationTask names the unknown tokenizer
        return splits
    kept = {}
    for where, pairs in splits.items():
        kept[where] = [
            (source, target)
            for source, target in pairs
            if max(len(tokenizer.tokenize_source(source)), len(tokenizer.tokenize(target))) <= max_length
        ]
        if warn and len(kept[where]) < len(pairs):
            warnings.warn(
                f"{where}: {len(pairs) - len(kept[where])} of {len(pairs)} pairs have more than {max_length} "
                f"tokens on a side and are left out (--max-length)",
                stacklevel=4,
            )
    return kept


def make_task(
    task: str | None = None,
    data: str | None = None,
    seed: int = 0,
    tokenizer: str | None = None,
    max_length: int = MAX_LENGTH,
    dev: str | None = None,
    test: str | None = None,
    small_share: float = SMALL_SHARE,
    **vocabulary: Any,
) -> TranslationTask:
    """Build the task named on the command line (``--task`` or ``--data``, with its own ``dev`` and
    ``test`` files if given); ``small_share``: numbers-en-fr's (NumbersTask); ``vocabulary``:
    TranslationTask's vocab_size, shared_vocab and serialized_tokenizer (for a corpus)."""
    if data is not None:
        return FileTask(
            data,
            tokenizer or BPETokenizer.name,
            seed=seed,
            max_length=max_length,
            dev=dev,
            test=test,
            **vocabulary,
        )
    if task in ("copy", "reverse"):
        return SymbolTask(task, seed=seed)
    if task == "numbers-en-fr":
        return NumbersTask(seed=seed, tokenizer=tokenizer or "word", small_share=small_share)
    raise ValueError(
        f"--task must be one of copy, reverse, numbers-en-fr (or give --data FILE.tsv), got {task!r}"
    )
