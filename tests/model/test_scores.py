"""numpy_transformer.scores: sacrebleu's BLEU and chrF, set up once for evaluate and the proof."""

import pytest

from numpy_transformer.scores import translation_scores

pytest.importorskip("sacrebleu")  # the train extra's: the model's own install runs without it


def test_a_translation_equal_to_its_reference_scores_100_and_a_wrong_one_less():
    references = ["le chat est assis sur le tapis", "impossible d'ouvrir le fichier"]
    same = translation_scores(references, references)
    assert same.bleu == pytest.approx(100.0) and same.chrf == 100.0  # BLEU: a product of exponentials
    wrong = translation_scores(["le chien est assis sur le lit", "fichier introuvable"], references)
    assert 0.0 < wrong.bleu < 100.0 and 0.0 < wrong.chrf < 100.0
    assert "tok:13a" in wrong.bleu_signature and wrong.chrf_signature.startswith("nrefs:1")


def test_characters_are_counted_where_a_text_has_no_spaces():
    scores = translation_scores(["abcd"], ["abce"], characters=True)
    assert "tok:char" in scores.bleu_signature and 0.0 < scores.bleu < 100.0
    assert translation_scores(["abcd"], ["abce"]).bleu == 0.0  # one word, and a wrong one


def test_hypotheses_and_references_must_pair_up():
    with pytest.raises(ValueError, match="got 2 hypotheses and 1 references"):
        translation_scores(["a", "b"], ["a"])
