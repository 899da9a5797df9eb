"""BLEU and chrF of translations against their references: sacrebleu's, set up in this one place
for the toolkit's evaluation and the workbook's proof, so that the two report the same scores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class TranslationScores:
    """Corpus-level BLEU and chrF (0 to 100), with sacrebleu's signature of each: what a reader
    needs to compare them with scores reported elsewhere."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str


def translation_scores(
    hypotheses: Sequence[str], references: Sequence[str], characters: bool = False
) -> TranslationScores:
    """sacrebleu's corpus BLEU (its 13a tokenizer, or characters where ``characters``: a text
    without spaces has no words to count) and chrF of ``hypotheses``, one reference each.
    Needs sacrebleu (the train extra)."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must pair up one to one, got {len(hypotheses)} hypotheses "
            f"and {len(references)} references"
        )
    from sacrebleu.metrics import BLEU, CHRF

    bleu, chrf = BLEU(tokenize="char" if characters else "13a"), CHRF()
    return TranslationScores(
        bleu.corpus_score(list(hypotheses), [list(references)]).score,
        chrf.corpus_score(list(hypotheses), [list(references)]).score,
        str(bleu.get_signature()),
        str(chrf.get_signature()),
    )
