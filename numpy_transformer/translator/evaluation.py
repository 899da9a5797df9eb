"""Scoring a model on pairs: loss, token accuracy, exact match, BLEU and chrF (the translations by
greedy decoding or any search)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..backend import Array, to_numpy
from ..kernels import ops
from ..machine import require
from ..model import Transformer
from ..scores import translation_scores
from .decoding import greedy_decode
from .tasks import TranslationTask
from .vocabulary import PAD_ID


def masked_token_accuracy(logits: Any, targets: Any, pad_id: int = PAD_ID) -> tuple[int, int]:
    """(correct, counted) argmax predictions over non-pad targets."""
    valid = targets != pad_id
    return int(((logits.argmax(axis=-1) == targets) & valid).sum()), int(valid.sum())


def evaluate(
    model: Transformer,
    task: TranslationTask,
    pairs: Sequence[tuple[str, str]],
    label_smoothing: float = 0.0,
    batch_size: int = 100,
    examples: int = 0,
    *,
    strategy: Callable[..., Array] = greedy_decode,
    **decode_options: Any,
) -> dict[str, Any]:
    """Teacher-forced loss and token accuracy; exact match, BLEU and chrF of the translations, with
    sacrebleu's signatures of the two scores (what a reader needs to compare them with others').

    The translations are greedy unless ``strategy`` and ``decode_options`` say otherwise, as
    translating.translate_ids takes them (``strategy=beam_search, beam_width=4, length_penalty=1.0``...).
    ``examples`` > 0 adds the first ones as (source, reference, translation) under "examples".
    """
    if isinstance(pairs, (str, bytes)) or not all(
        isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(side, str) for side in pair)
        for pair in pairs
    ):
        shown = repr(pairs) if len(repr(pairs)) <= 60 else repr(pairs)[:57] + "..."
        raise TypeError(f"pairs must be a list of (source, target) strings, got {shown}")
    if not pairs:
        raise ValueError("pairs is empty: there is nothing to evaluate, expected (source, target) pairs")
    require("evaluate's BLEU and chrF", "sacrebleu")  # said before the translating, not after
    special = task.ids
    loss_sum, correct, counted, hypotheses = 0.0, 0, 0, []
    # batches of sources of about one length: short ones are not padded to, or decoded as long as, long ones
    by_length = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    with model.evaluating():
        for start in range(0, len(pairs), batch_size):
            batch = task.batch([pairs[i] for i in by_length[start : start + batch_size]])
            logits = model.forward(batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask)
            loss, _ = ops.cross_entropy_forward(logits, batch.tgt_out, special.pad, label_smoothing)
            right, seen = masked_token_accuracy(logits, batch.tgt_out, special.pad)
            loss_sum, correct, counted = loss_sum + loss * seen, correct + right, counted + seen
            max_len = min(model.tgt_pos.seq_len, int(batch.tgt_out.shape[1]) * 2 + 4)
            translated = strategy(
                model,
                batch.src,
                batch.src_mask,
                max_len,
                special.bos,
                special.eos,
                pad_id=special.pad,
                **decode_options,
            )
            for ids in to_numpy(translated):
                hypotheses.append(task.tokenizer.detokenize(task.tgt_vocab.decode(ids)))
    hypotheses = [hypothesis for _, hypothesis in sorted(zip(by_length, hypotheses))]  # the pairs' order
    references = [target for _, target in pairs]
    scores = translation_scores(hypotheses, references, characters=task.tokenizer.name == "char")
    metrics: dict[str, Any] = {
        "loss": loss_sum / max(counted, 1),
        "token_accuracy": correct / max(counted, 1),
        "exact_match": sum(h == r for h, r in zip(hypotheses, references)) / max(len(pairs), 1),
        "bleu": scores.bleu,
        "chrf": scores.chrf,
        "n": len(pairs),
        "bleu_signature": scores.bleu_signature,
        "chrf_signature": scores.chrf_signature,
    }
    if examples:
        metrics["examples"] = [
            {"source": source, "reference": reference, "translation": translation}
            for (source, reference), translation in zip(pairs[:examples], hypotheses)
        ]
    return metrics


def format_metrics(title: str, metrics: dict[str, Any], label_smoothing: float = 0.0) -> str:
    """One line of ``metrics``; a loss of ``label_smoothing`` above 0 says so (such a loss stays well
    above 0 even where every token is right, and evaluate's, without it, reads lower)."""
    smoothed = f" (label smoothing {label_smoothing:g})" if label_smoothing else ""
    return (
        f"{title}: loss {metrics['loss']:.4f}{smoothed}  token acc {metrics['token_accuracy']:.4f}  "
        f"exact {metrics['exact_match']:.4f}  BLEU {metrics['bleu']:.2f}  chrF {metrics['chrf']:.2f}  "
        f"(n={metrics['n']})"
    )
