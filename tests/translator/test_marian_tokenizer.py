"""Marian's tokenizer here gives the ids and text transformers' MarianTokenizer gives.

Tiny SentencePiece models are trained in the test (sentencepiece's trainer, into tmp_path), with
a vocab.json of their pieces; the text holds accents, placeholders, a language code and emoji
(which the models never saw: unknown pieces). Skipped, with the reason, only where transformers
cannot be imported.
"""

import json

import pytest

from numpy_transformer.translator.huggingface import MarianTokenizer, PretrainedError

sentencepiece = pytest.importorskip("sentencepiece", reason="sentencepiece trains the tiny models")
transformers = pytest.importorskip("transformers", reason="transformers' MarianTokenizer is the oracle")

CORPUS = {
    "source": [
        "Open the file %s and save it.",
        "The café serves crème brûlée.",
        "Delete {0} items from {1}?",
        "Naïve users rarely read the manual.",
        "Press Ctrl-C to stop the process.",
    ]
    * 20,
    "target": [
        "Ouvrez le fichier %s et enregistrez-le.",
        "Le café sert de la crème brûlée.",
        "Supprimer {0} éléments de {1} ?",
        "Les utilisateurs naïfs lisent rarement le manuel.",
        "Appuyez sur Ctrl-C pour arrêter le processus.",
    ]
    * 20,
}
TEXTS = [
    "Open the café file %s now.",
    "Delete {0} crème items 🙂 from {1}?",
    ">>fra<< Naïve users read the manual.",
    "Ünïcödé ñ — 東京 😀😀",
    "",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("marian-tokenizer")
    pieces = []
    for side in ("source", "target"):
        (directory / f"{side}.txt").write_text("\n".join(CORPUS[side]) + "\n", encoding="utf-8")
        sentencepiece.SentencePieceTrainer.train(
            input=str(directory / f"{side}.txt"),
            model_prefix=str(directory / side),
            vocab_size=50,
            character_coverage=1.0,
            minloglevel=2,
        )
        (directory / f"{side}.model").rename(directory / f"{side}.spm")
        processor = sentencepiece.SentencePieceProcessor(model_file=str(directory / f"{side}.spm"))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    vocab = {"</s>": 0, "<unk>": 1, ">>fra<<": 2}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def oracle(model_dir):
    return transformers.MarianTokenizer(
        source_spm=str(model_dir / "source.spm"),
        target_spm=str(model_dir / "target.spm"),
        vocab=str(model_dir / "vocab.json"),
    )


@pytest.mark.parametrize("text", TEXTS)
def test_ids_equal_marian_tokenizer(model_dir, oracle, text):
    ours = MarianTokenizer(model_dir)
    assert ours.encode_source(text) == oracle(text).input_ids
    assert ours.encode_target(text) == oracle(text_target=text).input_ids


@pytest.mark.parametrize("text", TEXTS)
def test_text_equal_marian_tokenizer(model_dir, oracle, text):
    ours = MarianTokenizer(model_dir)
    ids = oracle(text_target=text).input_ids
    assert ours.decode(ids) == oracle.decode(ids, skip_special_tokens=True)


@pytest.mark.parametrize("text", CORPUS["target"][:5])
def test_known_target_text_comes_back_exactly(model_dir, text):
    ours = MarianTokenizer(model_dir)
    assert ours.decode(ours.encode_target(text)) == text


def test_a_missing_file_is_named(model_dir, tmp_path):
    for name in ("source.spm", "target.spm"):
        (tmp_path / name).write_bytes((model_dir / name).read_bytes())
    with pytest.raises(PretrainedError, match=r"vocab.json: no such file"):
        MarianTokenizer(tmp_path)
