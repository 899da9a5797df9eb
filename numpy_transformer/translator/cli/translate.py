"""``numpy-transformer translate`` and ``evaluate``: sentences from the arguments or standard input,
scored references, and a test set's metrics."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from ...machine import require
from .common import (
    CHECKPOINT_HELP,
    DEFAULT_OUT,
    add_backend,
    add_decode_options,
    asked_decoding,
    positive_int,
    say_checkpoint_read,
)

TRANSLATE_BATCH = 256  # sentences decoded together by translate


# why a line of standard input is left out (the others are translated)
NOT_TEXT, TOO_LONG = "not UTF-8 text", "longer than the model's positional table"


def too_long(model: Any, tokenizer: Any, where: str, text: str, target: bool = False) -> str | None:
    """Why ``text`` (a source, or a ``target`` translation to score, which gains <eos>) does not fit
    the model's positional table, or None; a cheap bound first, so that a 25 MB line is never
    tokenised."""
    from ..corpora import printable

    table, extra = (model.tgt_pos, 1) if target else (model.src_pos, 0)
    length = tokenizer.fewest_tokens(text, table.seq_len) + extra
    at_least = "at least " if length > table.seq_len else ""
    if not at_least:
        length = len((tokenizer.tokenize if target else tokenizer.tokenize_source)(text)) + extra
    if length <= table.seq_len:
        return None
    return (
        f"{where} ({printable(text[:40])!r}) has {at_least}{length:,} tokens, longer than the "
        f"positional table's seq_len={table.seq_len}"
    )


def run_translate(args: argparse.Namespace) -> int:
    from ..corpora import printable
    from ..decoding import check_model_limits, check_n_best
    from ..run.checkpoint import load_for_inference
    from ..tokenizers import encode_sentences
    from ..translating import score_ids, translate_ids, translate_n_best

    if args.n_best > 1 and (args.strategy not in (None, "beam") or args.score):
        used = "--score" if args.score else f"--strategy {args.strategy}"
        raise ValueError(f"--n-best {args.n_best} needs beam search, not {used}")
    check_n_best(args.n_best, args.beam_width, ("--n-best", "--beam-width"))  # before the model loads
    if args.sentences:
        empty = [number for number, sentence in enumerate(args.sentences, start=1) if not sentence.strip()]
        if empty:
            raise ValueError(f"sentence {empty[0]} of the arguments is empty: give text to translate")
    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(args.checkpoint)
    searched = args.strategy == "beam" or args.n_best > 1
    check_model_limits(model, args.max_len, args.beam_width if searched else None, flags=True)

    def fitting(batch: list[tuple[str, str]], references: list[str]) -> list[int]:
        """The indices of the batch's lines that fit; each that does not is named on standard error."""
        kept = []
        for index, (where, sentence) in enumerate(batch):
            why = too_long(model, tokenizer, where, sentence) or (
                too_long(model, tokenizer, f"{where}'s translation", references[index], target=True)
                if references
                else None
            )
            if why is None:
                kept.append(index)
            else:
                warnings.warn(f"not translated: {why}", stacklevel=2)
        return kept

    def text_of(ids: list[int]) -> str:
        return printable(tokenizer.detokenize(tgt_vocab.decode(ids)))

    size = args.batch_size
    if args.sentences:
        numbered = [(f"sentence {number}", text) for number, text in enumerate(args.sentences, start=1)]
        why = next(filter(None, (too_long(model, tokenizer, where, text) for where, text in numbered)), None)
        if why is not None:  # every argument before any work
            raise ValueError(why)
        batches: Iterable[tuple[list[tuple[str, str]], int]] = (
            (numbered[start : start + size], 0) for start in range(0, len(numbered), size)
        )
    else:
        batches = _standard_input_batches(size)
    decoding = asked_decoding(args, tokenizer)
    say_checkpoint_read(args.command, args.checkpoint)  # every refusal before the work is behind
    translated = skipped = 0
    why_skipped: dict[str, None] = {}  # the reasons lines were left out, in the order met
    for batch, unreadable in batches:  # batch by batch: memory stays bounded, each printed once done
        if unreadable:
            skipped += unreadable
            why_skipped[NOT_TEXT] = None
        references = []
        if args.score:  # each line: source, tab, the translation to score
            pairs = [(where, _source_and_reference(where, text)) for where, text in batch]
            batch = [(where, source) for where, (source, _) in pairs]
            references = [reference for _, (_, reference) in pairs]
        if not args.sentences or args.score:  # a line that does not fit is left out, the others go on
            kept = fitting(batch, references)
            skipped += len(batch) - len(kept)
            if len(kept) < len(batch):
                why_skipped[TOO_LONG] = None
            batch = [batch[index] for index in kept]
            references = [references[index] for index in kept] if references else []
            if not batch:
                continue
        sentences = [sentence for _, sentence in batch]
        src_ids = encode_sentences(sentences, tokenizer, src_vocab)
        if args.score:
            references_ids = encode_sentences(references, tokenizer, tgt_vocab, target=True)
            scores = score_ids(model, src_ids, references_ids, tgt_vocab.ids)
            for sentence, reference, score in zip(sentences, references, scores):
                print(f"{printable(sentence)}\t{printable(reference)}\t{score:.4f}")
        elif args.n_best > 1:
            n_best = translate_n_best(
                model, src_ids, args.n_best, args.max_len, tgt_vocab.ids, **decoding.settings
            )
            for sentence, best in zip(sentences, n_best):
                for ids, score in best:
                    print(f"{printable(sentence)}\t{text_of(ids)}\t{score:.4f}")
        else:
            outputs = translate_ids(
                model, src_ids, args.max_len, tgt_vocab.ids, strategy=decoding.search, **decoding.settings
            )
            for sentence, ids in zip(sentences, outputs):
                print(f"{printable(sentence)}\t{text_of(ids)}")
        sys.stdout.flush()
        translated += len(batch)
    if skipped:
        raise ValueError(
            f"{skipped} of {skipped + translated} lines of standard input were not translated (each named "
            f"above): {' or '.join(why_skipped)}"
        )
    if not translated:
        raise ValueError("no sentences given: pass them as arguments or one per line on standard input")
    return 0


def _source_and_reference(where: str, text: str) -> tuple[str, str]:
    """A --score input line split at its tab into the source and the translation to score."""
    parts = [part.strip() for part in text.split("\t")]
    if len(parts) == 1 or (len(parts) == 2 and parts[0] and not parts[1]):
        raise ValueError(
            f"{where}: --score reads 'source<TAB>translation', but the translation to score is missing or "
            f"empty in {text[:60]!r}"
        )
    if len(parts) != 2 or not all(parts):
        raise ValueError(
            f"{where}: --score reads 'source<TAB>translation', got {len(parts)} tab-separated part(s) "
            f"in {text[:60]!r}"
        )
    return parts[0], parts[1]


def _standard_input_batches(size: int) -> Iterator[tuple[list[tuple[str, str]], int]]:
    """(where, sentence) of each line of standard input, in batches of at most ``size`` handed on as
    the lines come (line_batches): a pipe that stays open, a ``tail -f`` or a user typing gets each
    translation without waiting for the end of the input. Blank lines are not sentences. With each
    batch, how many of its lines were not UTF-8 text: each is named in a warning and left out, and
    the lines around it go on (a UTF-16 input, whose first line says so, is refused whole)."""
    from ..corpora import line_batches, refuse_utf16, text_line

    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # no standard input at all (closed)
        return
    stream = getattr(stream, "raw", stream)  # unbuffered: a read returns what has come
    number = 0
    for lines in line_batches(stream, size):
        batch, unreadable = [], 0
        for line in lines:
            number += 1
            if number == 1:
                refuse_utf16(line, "standard input")
            try:
                text = text_line(line, "standard input", number).strip()
            except ValueError as why:
                warnings.warn(f"not translated: {why}", stacklevel=2)
                unreadable += 1
                continue
            if text:
                batch.append((f"standard input:{number}", text))
        if batch or unreadable:
            yield batch, unreadable


def run_evaluate(args: argparse.Namespace) -> int:
    from ..corpora import read_numbered_tsv
    from ..evaluation import evaluate
    from ..run.checkpoint import load_checkpoint, model_from_checkpoint, restore_model_and_task, saved_task

    require("evaluate's scoring (BLEU and chrF)", "sacrebleu")
    arrays, meta = load_checkpoint(args.checkpoint)
    if args.data:  # the model's own tokenizer and vocabularies: the training corpus is not needed
        numbered = read_numbered_tsv(args.data)
        numbered = numbered[: args.limit] if args.limit else numbered
        model, task = model_from_checkpoint(args.checkpoint, arrays, meta), saved_task(args.checkpoint, meta)
        for number, source, target in numbered:  # before any work: a pair too long is named by its line
            why = too_long(model, task.tokenizer, "the source", source) or too_long(
                model, task.tokenizer, "the target", target, target=True
            )
            if why:
                raise ValueError(f"{args.data}:{number}: {why}; shorten or remove the line")
        pairs = [(source, target) for _, source, target in numbered]
    else:  # the test split of the task it was trained on, rebuilt
        model, task = restore_model_and_task(args.checkpoint, arrays, meta)
        pairs = task.test
    pairs = pairs[: args.limit] if args.limit else pairs
    decoding = asked_decoding(args, task.tokenizer)
    say_checkpoint_read(args.command, args.checkpoint)  # every refusal before the work is behind
    metrics = evaluate(model, task, pairs, strategy=decoding.search, **decoding.settings)
    metrics["decoding"] = decoding.describe()
    if args.json:
        print(json.dumps(metrics))
    else:
        print(
            "\n".join(
                f"{name:>15}: {value:.4f}" if isinstance(value, float) else f"{name:>15}: {value}"
                for name, value in metrics.items()
            )
        )
    return 0


def add_translate(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("translate", help="translate sentences with a trained model")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help=CHECKPOINT_HELP)
    p.add_argument(
        "sentences", nargs="*", help="sentences to translate (default: one per line from standard input)"
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=TRANSLATE_BATCH,
        help=f"sentences translated together (default: {TRANSLATE_BATCH}); standard input is translated "
        "as its lines come, at most this many at a time",
    )
    p.add_argument(
        "--n-best",
        type=positive_int,
        default=1,
        metavar="N",
        help="the N best translations of each sentence by beam search, best first, each with its score "
        "(log-probability / length ** length-penalty)",
    )
    p.add_argument(
        "--score",
        action="store_true",
        help="score given translations instead: each input is 'source<TAB>reference', and the output adds "
        "log P(reference | source) in nats",
    )
    add_decode_options(p)
    add_backend(p)


def add_evaluate(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("evaluate", help="loss, token accuracy, exact match, BLEU and chrF on a test set")
    p.add_argument("--checkpoint", default=DEFAULT_OUT, help=CHECKPOINT_HELP)
    p.add_argument(
        "--data", metavar="FILE.tsv", help="evaluate on this file instead of the task's test split"
    )
    p.add_argument("--limit", type=positive_int, default=None, help="evaluate on the first N pairs only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_decode_options(p)
    add_backend(p)
