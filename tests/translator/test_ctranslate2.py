"""A run served by CTranslate2: ``export --ctranslate2`` (export_ctranslate2) writes a CTranslate2
model that gives our log-probabilities (float32, relative 1e-5) on random models of every
architecture it takes, and our greedy and beam-search translations token for token on a trained
run, and our log-probabilities on an imported OPUS-MT model whose start token (``<pad>``) is no
longer a zero row; CTranslate2's own converter of transformers' Marian models gives our greedy
translations of an imported OPUS-MT model (a zero start row) from its ``export``. What CTranslate2
cannot represent is refused before anything is written, and without ctranslate2 the command names
it and its extra. The tests that translate are skipped, with the reason, where ctranslate2 (or, for
the converter's, transformers) cannot be imported. The guide's recipe, which translates text with
CTranslate2 and the ``tokenizers`` library alone (its helpers are here), is checked on the default
``train --data`` run in test_export_default_run, beside transformers'.

CTranslate2's search as ours: ``translate_batch(beam_size=W, length_penalty=a, max_decoding_length=L,
min_decoding_length=0, return_end_token=True)`` is ``beam_search(beam_width=W, length_penalty=a,
style="transformers", early_stopping=True)`` with ``max_len=L`` (greedy with W = 1): a hypothesis'
length counts its ``</s>`` (return_end_token), an empty translation is allowed (CTranslate2's
minimum is otherwise one token), and the search ends once W hypotheses have ended. No token is
suppressed: CTranslate2 would renormalise over the rest, where our searches never emit ``<bos>``
and ``<pad>`` but keep the log-softmax over the whole vocabulary.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from marian_files import PAIRS, write_model
from test_export import COMBINATIONS, random_model

from numpy_transformer.translator.cli import main
from numpy_transformer.translator.corpora import printable
from numpy_transformer.translator.decoding import beam_search, greedy_decode
from numpy_transformer.translator.huggingface import ExportError, export_ctranslate2
from numpy_transformer.translator.huggingface.directory import CTRANSLATE2_WRITTEN
from numpy_transformer.translator.run.checkpoint import (
    load_for_inference,
)
from numpy_transformer.translator.run.importing import import_run

ctranslate2 = None  # imported by the fixture of the tests that need it


@pytest.fixture
def ct2():
    """ctranslate2, or the test skipped with the reason."""
    global ctranslate2
    ctranslate2 = pytest.importorskip(
        "ctranslate2", reason="CTranslate2 serves the exported models (pip install ctranslate2)"
    )


def translator(directory, compute_type="float32"):
    return ctranslate2.Translator(str(directory), device="cpu", compute_type=compute_type, intra_threads=1)


def our_log_probs(model, src, tgt, ids):
    """log P(token | source, the tokens before) of each target token and the closing <eos>: (B, T + 1)."""
    rows, length = tgt.shape
    decoder_in = np.concatenate([np.full((rows, 1), ids.bos), tgt], axis=1)
    causal = np.tril(np.ones((length + 1, length + 1), bool))[None, None]
    logits = np.asarray(model.project(model.decode(model.encode(src, None), None, decoder_in, causal)))
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    labels = np.concatenate([tgt, np.full((rows, 1), ids.eos)], axis=1)
    return np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]


def their_log_probs(directory, src, tgt, vocabularies):
    source, target = vocabularies
    results = translator(directory).score_batch(
        [[source.itos[i] for i in row] for row in src.tolist()],
        [[target.itos[i] for i in row] for row in tgt.tolist()],
    )
    for result, row in zip(results, tgt.tolist()):
        assert result.tokens == [target.itos[i] for i in row] + [target.itos[target.ids.eos]]
    return np.array([result.log_probs for result in results])


def assert_same_log_probs(model, vocabularies, directory, seed=0):
    rng = np.random.default_rng(seed)
    (source, target), ids = vocabularies, vocabularies[1].ids
    special = {ids.pad, ids.bos, ids.eos, ids.unk}
    src = rng.choice([i for i in range(len(source)) if i not in special], (6, 7))
    tgt = rng.choice([i for i in range(len(target)) if i not in special], (6, 5))
    ours = our_log_probs(model, src, tgt, ids)
    theirs = their_log_probs(directory, src, tgt, vocabularies)
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5 * np.abs(theirs).max())


@pytest.mark.parametrize("tied, shared, activation, bias", COMBINATIONS)
def test_ctranslate2_gives_our_log_probabilities(ct2, tmp_path, tied, shared, activation, bias):
    model, vocabularies = random_model(tied, shared, activation, bias)
    written = export_ctranslate2(model, vocabularies, tmp_path / "ct2")
    vocabulary_files = (
        ["shared_vocabulary.json"] if shared else ["source_vocabulary.json", "target_vocabulary.json"]
    )
    assert sorted(path.name for path in written) == sorted(["config.json", "model.bin", *vocabulary_files])
    assert_same_log_probs(model, vocabularies, tmp_path / "ct2")


@pytest.mark.parametrize(
    "options",
    [
        {"norm_first": True, "final_norm": True, "positions": "interleaved"},  # this package's default
        {"norm_first": True, "final_norm": False},
        {"activation": "gelu_tanh", "positions": "interleaved"},
        {"dtype": "float64"},  # written as float32
    ],
)
def test_other_architectures_than_marians_convert(ct2, tmp_path, options):
    model, vocabularies = random_model(True, True, options.pop("activation", "relu"), True, **options)
    export_ctranslate2(model, vocabularies, tmp_path / "ct2")
    assert_same_log_probs(model, vocabularies, tmp_path / "ct2")


@pytest.mark.parametrize(
    "options, named",
    [
        ({"attention": "mla", "attention_bias": False}, "attention 'mla'"),
        ({"norm_first": False, "final_norm": True}, "final layer norms after post-norm blocks"),
    ],
)
def test_what_ctranslate2_lacks_is_refused_before_anything_is_written(tmp_path, options, named):
    bias = options.pop("attention_bias", True)
    model, vocabularies = random_model(True, True, "relu", bias, **options)
    with pytest.raises(ExportError, match=named):
        export_ctranslate2(model, vocabularies, tmp_path / "ct2")
    assert not (tmp_path / "ct2").exists()


def test_a_used_directory_is_refused_and_overwrite_replaces_only_an_exports_files(ct2, tmp_path):
    model, vocabularies = random_model(False, False, "relu", True)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_ctranslate2(model, vocabularies, tmp_path / "used")
    assert [path.name for path in (tmp_path / "used").iterdir()] == ["notes.txt"]
    (tmp_path / "used" / "shared_vocabulary.json").write_text("[]")  # an earlier export's, not this one's
    export_ctranslate2(model, vocabularies, tmp_path / "used", overwrite=True)
    names = {path.name for path in (tmp_path / "used").iterdir()}
    assert names == {
        "notes.txt",
        "config.json",
        "model.bin",
        "source_vocabulary.json",
        "target_vocabulary.json",
    }
    assert names - {"notes.txt"} <= set(CTRANSLATE2_WRITTEN)
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"
    assert [path.name for path in tmp_path.iterdir()] == ["used"]  # no staging directory left beside it
    assert_same_log_probs(model, vocabularies, tmp_path / "used")


def up_to_end(ids, pad, eos):
    ids = [i for i in ids if i != pad]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def their_translations(directory, src, vocabularies, beams, max_len):
    """CTranslate2's translations of ``src`` (ids, padded), as ids up to </s>, with our search's settings."""
    source, target = vocabularies
    pad = target.ids.pad
    results = translator(directory).translate_batch(
        [[source.itos[i] for i in row if i != pad] for row in src.tolist()],
        beam_size=beams,
        length_penalty=1.0,
        max_decoding_length=max_len,
        min_decoding_length=0,
        return_end_token=True,
    )
    return [[target.stoi[token] for token in result.hypotheses[0]] for result in results]


def our_translations(model, src, ids, beams, max_len):
    mask = (src != ids.pad)[:, None, None, :]
    if beams == 1:
        out = greedy_decode(model, src, mask, max_len, ids.bos, ids.eos, pad_id=ids.pad)
    else:
        out = beam_search(
            model,
            src,
            mask,
            max_len,
            ids.bos,
            ids.eos,
            beam_width=beams,
            pad_id=ids.pad,
            style="transformers",
            early_stopping=True,
        )
    return [up_to_end(row, ids.pad, ids.eos) for row in np.asarray(out).tolist()]


def test_a_trained_run_exports_to_our_translations(ct2, tmp_path):
    run, out = tmp_path / "run", tmp_path / "ct2"
    flags = "--d-model 16 --layers 2 --heads 2 --d-ff 32 --post-norm --no-final-norm --positions split"
    train = f"train --task copy --steps 150 --eval-every 1000 --no-progress --activation silu {flags}"
    assert main([*train.split(), "--out", str(run)]) == 0
    assert main(["export", str(run), "--to", str(out), "--ctranslate2"]) == 0
    model, _, source, target = load_for_inference(run)
    assert json.loads((out / "config.json").read_text())["decoder_start_token"] == "<bos>"
    assert_same_log_probs(model, (source, target), out)
    ids = target.ids
    rng = np.random.default_rng(1)
    src = rng.integers(4, len(source), (32, 6))
    src[:, -1], src[2, 3:], src[5, 4:] = ids.eos, ids.pad, ids.pad
    for beams in (1, 4):
        ours = our_translations(model, src, ids, beams, 12)
        assert sum(ids.eos in row for row in ours) >= 16, "too few translations end: the run learned little"
        theirs = their_translations(out, src, (source, target), beams, 12)
        assert theirs == ours, f"beams {beams}"


def test_an_imported_opus_mt_model_converts_from_its_own_start_token(ct2, tmp_path):
    """Marian's start token is <pad>, a zero row until a fine-tune moves it: the export starts the
    decoder from that row, whatever it holds; its tokenizer goes as Marian's source.spm and target.spm."""
    import_run(write_model(tmp_path / "opus"), tmp_path / "run")
    model, tokenizer, source, target = load_for_inference(tmp_path / "run")
    start = target.ids.bos
    assert start == target.ids.pad == len(target) - 1
    rng = np.random.default_rng(2)
    weight = model.tgt_embed.embedding.weight.data
    weight[start] = (
        rng.standard_normal(weight.shape[1]).astype(weight.dtype) * 0.5
    )  # as train --from moves it
    export_ctranslate2(model, (source, target), tmp_path / "ct2", tokenizer=tokenizer)
    assert json.loads((tmp_path / "ct2" / "config.json").read_text())["decoder_start_token"] == "<pad>"
    # its SentencePiece models, which sentencepiece reads as the run does
    for name, model_bytes in zip(("source.spm", "target.spm"), tokenizer.models.values()):
        assert (tmp_path / "ct2" / name).read_bytes() == model_bytes
    assert not (tmp_path / "ct2" / "tokenizer.json").exists()
    assert_same_log_probs(model, (source, target), tmp_path / "ct2")


def test_ctranslate2s_own_converter_serves_an_imported_opus_mt_export(ct2, tmp_path):
    """The Marian export of an imported OPUS-MT model, through ct2-transformers-converter's code:
    its decoder starts from a zero vector, which is this model's start token (<pad>, a zero row);
    it drops <pad> from the vocabulary, which greedy search never emits. (A run of this package's
    own starts from a trained <bos>: export --ctranslate2 serves it.)"""
    pytest.importorskip("torch", reason="ct2-transformers-converter loads the export with PyTorch")
    pytest.importorskip(
        "transformers", reason="ct2-transformers-converter loads the export with transformers"
    )
    from ctranslate2.converters import TransformersConverter

    import_run(write_model(tmp_path / "opus"), tmp_path / "run")
    assert main(["export", str(tmp_path / "run"), "--to", str(tmp_path / "hf")]) == 0
    TransformersConverter(str(tmp_path / "hf")).convert(str(tmp_path / "ct2"), quantization="float32")
    model, tokenizer, source, target = load_for_inference(tmp_path / "run")
    ids = target.ids
    assert not np.asarray(model.tgt_embed.embedding.weight.data)[ids.bos].any()  # the start: a zero row
    encoded = [[source.stoi[token] for token in tokenizer.tokenize_source(line)] for line, _ in PAIRS]
    src = np.full((len(encoded), max(map(len, encoded))), ids.pad)
    for row, line in zip(src, encoded):
        row[: len(line)] = line
    ours = our_translations(model, src, ids, 1, 12)
    assert their_translations(tmp_path / "ct2", src, (source, target), 1, 12) == ours


def test_export_ctranslate2_names_the_library_a_plain_install_lacks_before_any_work(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # its import fails, as after a plain install
    out = tmp_path / "ct2"
    assert main(["export", str(tmp_path / "run"), "--to", str(out), "--ctranslate2"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "needs ctranslate2, which is not installed: pip install 'numpy_transformer[ctranslate2]'" in line
    assert not out.exists()


GUIDE = Path(__file__).resolve().parents[2] / "docs" / "translating.md"
WORDS = {  # a small phrasebook: each source sentence's words to the target's
    "open": "ouvrir",
    "save": "enregistrer",
    "close": "fermer",
    "print": "imprimer",
    "delete": "supprimer",
    "the": "le",
    "file": "fichier",
    "folder": "dossier",
    "window": "fenêtre",
    "message": "message",
    "now": "maintenant",
    "again": "encore",
    "later": "plus tard",
}


def phrasebook(path):
    """A TSV of every verb, noun and adverb (or none) and of a few other orders: 160 pairs a tiny
    run learns in 300 steps to translate apart."""
    verbs, nouns, adverbs = list(WORDS)[:5], list(WORDS)[6:10], ["", *list(WORDS)[10:]]
    pairs = {}
    for verb in verbs:
        for noun in nouns:
            for adverb in adverbs:
                words = [verb, "the", noun, adverb] if adverb else [verb, "the", noun]
                pairs[" ".join(words).capitalize()] = " ".join(WORDS[word] for word in words).capitalize()
                pairs[f"{noun}: {verb}"] = f"{WORDS[noun]} : {WORDS[verb]}"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs.items()), encoding="utf-8")


def guide_recipe():
    """The translating guide's recipe that translates text with CTranslate2 and the exported
    tokenizer (its Python block that imports tokenizers)."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    [recipe] = [
        block for block in blocks if "import tokenizers" in block and "ctranslate2.Translator" in block
    ]
    return recipe


def run_without_this_package(code, cwd):
    """``code`` run by a Python that cannot import numpy_transformer (isolated: no PYTHONPATH, no
    working directory on the path, and the package's import refused); its standard output."""
    guard = (
        "import sys\nsys.modules['numpy_transformer'] = None  # an import of it raises ImportError\n"
        "try:\n    import numpy_transformer\nexcept ImportError:\n    pass\n"
        "else:\n    raise SystemExit('numpy_transformer is importable')\n"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-I", "-c", guard + code],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def the_guides_translations(tmp_path, lines, beams):
    """The guide's recipe run on ``lines`` (with ``beams``), as it is otherwise, without this package:
    each translation's tokens (CTranslate2's hypothesis, </s> included) and its text."""
    recipe = guide_recipe()
    assert "numpy_transformer" not in recipe
    given = 'lines = ["Open the file", "Could not save the file %s"]\n'
    assert given in recipe and "beam_size=4," in recipe
    recipe = recipe.replace(given, f"lines = {lines!r}\n").replace("beam_size=4,", f"beam_size={beams},")
    report = "\nprint(json.dumps([[r.hypotheses[0] for r in results], translations]))\n"
    *_, last = run_without_this_package(recipe + report, tmp_path).splitlines()
    return json.loads(last)


def translate_command(capsys, run, lines, *flags):
    """``numpy-transformer translate``'s translations of ``lines`` with ``flags``, as it prints them."""
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(run), *flags, *lines]) == 0
    rows = [row.split("\t") for row in capsys.readouterr().out.split("\n")[:-1]]
    assert [source for source, _ in rows] == [printable(line) for line in lines]
    return [text for _, text in rows]


def test_a_word_runs_ctranslate2_export_is_refused_naming_no_tokenizer_which_writes_the_model_alone(
    ct2, tmp_path, capsys
):
    data, run, out = tmp_path / "pairs.tsv", tmp_path / "run", tmp_path / "ct2"
    data.write_text("".join(f"one two {i}\tthree four {i}\n" for i in range(40)))
    train = "train --tokenizer word --steps 1 --d-model 16 --layers 1 --heads 2 --d-ff 32 --no-progress"
    assert main([*train.split(), "--data", str(data), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["export", str(run), "--to", str(out), "--ctranslate2"]) == 2
    refused = capsys.readouterr()
    assert len(refused.err.strip().splitlines()) == 1 and "--no-tokenizer" in refused.err, refused.err
    assert "word tokenizer" in refused.err and not refused.out and not out.exists()
    assert main(["export", str(run), "--to", str(out), "--ctranslate2", "--no-tokenizer"]) == 0
    assert sorted(path.name for path in out.iterdir()) == [
        "config.json",
        "model.bin",
        "source_vocabulary.json",
        "target_vocabulary.json",
    ]
    assert "the run's word tokenizer splitting the sources" in capsys.readouterr().out
