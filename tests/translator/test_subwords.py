"""Subword vocabularies (byte-level BPE from Hugging Face tokenizers), stored in checkpoints as JSON."""

import json
import os
import time
from dataclasses import replace

import pytest

from numpy_transformer.translator.batches import host_rng
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.corpora import read_tsv
from numpy_transformer.translator.evaluation import evaluate
from numpy_transformer.translator.run.checkpoint import (
    load_checkpoint,
    load_for_inference,
    restore_model_and_task,
    save_checkpoint,
)
from numpy_transformer.translator.tasks import FileTask, SubwordDropout, _uniforms
from numpy_transformer.translator.tokenizers import BPETokenizer
from numpy_transformer.translator.training import Trainer
from numpy_transformer.translator.vocabulary import UNK_ID

pytest.importorskip("tokenizers", reason="tokenizers is part of the [train] and [dev] extras")

TEXTS = [
    "Couleur de la sélection",
    "Impossible d'ouvrir le fichier %s : %d octets lus",
    "Bonjour %(name)s, {0} messages",
    "東京は日本の首都です",
    "Les émojis 🎉 et ✨ aussi",
    "  deux  espaces   et\ttabulation ",
    "naïve façade « citée »",
]


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(TEXTS * 3 + ["the quick brown fox jumps over the lazy dog"] * 5, vocab_size=300)


@pytest.mark.parametrize("text", [*TEXTS, "never seen: Ωμέγα ß ĳ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "%s%%d {}{{}} %(x)r", ""])
def test_detokenising_gives_the_text_back_exactly(bpe, text):
    assert bpe.detokenize(bpe.tokenize(text)) == text


def test_the_learned_model_travels_as_the_librarys_json(bpe):
    again = BPETokenizer(bpe.serialized)
    assert again.tokenize("Couleur de la sélection") == bpe.tokenize("Couleur de la sélection")
    assert bpe.serialized.lstrip().startswith("{") and '"BPE"' in bpe.serialized
    assert len(bpe.tokenize("Couleur de la sélection")) < len(
        "Couleur de la sélection"
    )  # merges were learned


@pytest.mark.parametrize("vocab_size", [255, 1_000_001, 2**64])
def test_a_vocab_size_the_library_cannot_take_is_refused_before_it_is_called(vocab_size):
    with pytest.raises(
        ValueError, match=rf"vocab_size must be an integer in \[256, 1000000\], got {vocab_size}"
    ):
        BPETokenizer.train(TEXTS, vocab_size)
    with pytest.raises(TypeError, match="vocab_size must be an integer"):
        BPETokenizer.train(TEXTS, 300.0)


def _corpus(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text(
        "".join(f"open file {i} %s\touvrir le fichier {i} %s\n" for i in range(60)), encoding="utf-8"
    )
    return path


def test_a_corpus_trains_on_subwords_and_the_checkpoint_needs_nothing_else(tmp_path, capsys):
    path, out = _corpus(tmp_path), tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(path),
                "--d-model",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--d-ff",
                "16",
                "--steps",
                "2",
                "--vocab-size",
                "300",
                "--shared-vocab",
                "--no-progress",
                "--show",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    trainer = Trainer.resume(out)
    assert trainer.task.tokenizer.name == "bpe" and trainer.task.src_vocab is trainer.task.tgt_vocab
    path.unlink()  # translate needs only the checkpoint
    _model, tokenizer, src_vocab, tgt_vocab = load_for_inference(out)
    assert tokenizer.detokenize(tokenizer.tokenize("ouvrir le fichier 7 %s")) == "ouvrir le fichier 7 %s"
    assert src_vocab.itos == tgt_vocab.itos
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(out), "open file 3 %s"]) == 0
    assert capsys.readouterr().out.startswith("open file 3 %s\t")


TINY_RUN = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16", "--steps", "2"]
QUIET = ["--vocab-size", "300", "--no-progress", "--show", "0"]


def test_evaluate_on_a_file_needs_the_checkpoint_only_not_the_training_corpus(tmp_path, capsys):
    path, out = _corpus(tmp_path), tmp_path / "run"
    assert main(["train", "--data", str(path), *TINY_RUN, *QUIET, "--out", str(out)]) == 0
    other = tmp_path / "other.tsv"
    other.write_text("open file 7 %s\touvrir le fichier 7 %s\nopen file 70 %s\touvrir le fichier 70 %s\n")
    model, task = restore_model_and_task(out, *load_checkpoint(out))  # the task rebuilt from the corpus
    expected = evaluate(model, task, read_tsv(other))
    capsys.readouterr()
    for change in ("changed", "removed"):
        if change == "changed":
            path.write_text("autre\tother\n" * 5)
        else:
            path.unlink()
        argv = ["evaluate", "--checkpoint", str(out), "--data", str(other), "--json", "--strategy", "greedy"]
        assert main(argv) == 0, change
        scores = json.loads(capsys.readouterr().out)
        assert scores.pop("decoding") == "greedy (no repeat ngram 0)"
        assert scores == expected  # the same scores, to the last bit


def test_a_saved_subword_model_the_library_cannot_read_is_named(tmp_path, capsys):
    path, out = _corpus(tmp_path), tmp_path / "run"
    assert main(["train", "--data", str(path), *TINY_RUN, *QUIET, "--out", str(out)]) == 0
    arrays, meta = load_checkpoint(out)
    meta["task"]["tokenizer_json"] = "{not json"
    broken = save_checkpoint(tmp_path / "broken.npz", arrays, meta)
    capsys.readouterr()
    assert main(["translate", "--checkpoint", str(broken), "open file"]) == 2
    assert main(["evaluate", "--checkpoint", str(broken), "--data", str(path)]) == 2
    errors = capsys.readouterr().err.splitlines()
    assert len(errors) == 2 and all(
        f"checkpoint {broken}: its tokenizer or vocabularies are unusable (not a subword model" in e
        for e in errors
    )


def test_a_saved_tokenizer_is_used_as_saved(tmp_path):
    path = _corpus(tmp_path)
    task = FileTask(path, vocab_size=280)
    again = FileTask(path, vocab_size=999, serialized_tokenizer=task.tokenizer.serialized)
    assert (
        again.tokenizer.serialized == task.tokenizer.serialized
        and again.src_vocab.itos == task.src_vocab.itos
    )


def _write_mo(path, messages):
    """A GNU .mo catalog (little-endian, revision 0) holding ``messages`` {English: French}."""
    import struct

    keys = sorted(messages)
    ids, strs = b"", b""
    offsets = []
    for key in keys:
        k, v = key.encode(), messages[key].encode()
        offsets.append((len(ids), len(k), len(strs), len(v)))
        ids, strs = ids + k + b"\0", strs + v + b"\0"
    start = 7 * 4 + 16 * len(keys)
    table_ids = b"".join(struct.pack("<2I", n, start + o) for o, n, _, _ in offsets)
    table_strs = b"".join(struct.pack("<2I", n, start + len(ids) + o) for _, _, o, n in offsets)
    header = struct.pack("<7I", 0x950412DE, 0, len(keys), 7 * 4, 7 * 4 + 8 * len(keys), 0, 0)
    path.write_bytes(header + table_ids + table_strs + ids + strs)


def test_the_corpus_script_keeps_real_one_line_translations(tmp_path):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "examples" / "debian_messages.py"
    spec = importlib.util.spec_from_file_location("debian_messages", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    catalog = tmp_path / "demo.mo"
    _write_mo(
        catalog,
        {
            "": "Content-Type: text/plain; charset=UTF-8\n",
            "Open %s": "Ouvrir %s",
            "Two\nlines": "Deux\nlignes",
            "OK": "OK",
            "Save the file": "Enregistrer le fichier",
        },
    )
    pairs = script.catalog_pairs(catalog)
    assert ("Open %s", "Ouvrir %s") in pairs and ("Save the file", "Enregistrer le fichier") in pairs
    kept = [pair for pair in pairs if script.keep(*pair)]
    assert kept == [("Open %s", "Ouvrir %s"), ("Save the file", "Enregistrer le fichier")]
    assert script.catalog_pairs(tmp_path / "missing.mo") == []


LEARNING_INTERRUPTED = """
import os, signal, sys, time
from numpy_transformer.translator import tokenizers as data
from numpy_transformer.translator.cli import main

learn = data.BPETokenizer.train.__func__


def train(cls, texts, vocab_size):
    def slowly():  # a large corpus: the library is still learning when Ctrl-C (or SIGTERM) comes
        os.kill(os.getpid(), getattr(signal, os.environ["INTERRUPTING_SIGNAL"]))
        for text in texts:
            time.sleep(1)
            yield text

    return learn(cls, slowly(), vocab_size)


data.BPETokenizer.train = classmethod(train)
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize(
    ("saved", "interrupting", "code", "said"),
    [
        (False, "SIGINT", 130, "interrupted"),
        (True, "SIGINT", 130, "interrupted"),
        (False, "SIGTERM", 143, "SIGTERM"),  # its default action left --out made, holding a stale lock
        (True, "SIGTERM", 143, "SIGTERM"),
    ],
)
def test_ctrl_c_while_the_subwords_are_learned_ends_in_one_line_and_writes_nothing(
    tmp_path, saved, interrupting, code, said
):
    import subprocess
    import sys

    path, out = _corpus(tmp_path), tmp_path / "run"
    if saved:  # --overwrite replaces a run only once the new one is ready
        out.mkdir()
        (out / "model.npz").write_bytes(b"the user's saved run")
        (out / "log.jsonl").write_text('{"step": 1}\n')
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-c", LEARNING_INTERRUPTED, "train", "--data", str(path), "--steps", "2"]
        + ["--no-progress", "--out", str(out)]
        + (["--overwrite"] if saved else []),
        capture_output=True,
        text=True,
        timeout=100,  # learning slowly would take more than 120 s: the interruption must not wait for it
        env={**os.environ, "INTERRUPTING_SIGNAL": interrupting},
    )
    assert result.returncode == code, result.stderr
    assert time.monotonic() - start < 60
    assert result.stderr.strip().splitlines() == [
        f"{said} before training started (reading the corpus, learning its subwords): "
        + (f"the run saved in {out} is unchanged" if saved else "nothing was written")
    ]
    if saved:  # the lock gone as well
        assert sorted(p.name for p in out.iterdir()) == ["log.jsonl", "model.npz"]
        assert (out / "model.npz").read_bytes() == b"the user's saved run"
    else:
        assert not out.exists()


# -- BPE-dropout ------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [*TEXTS, "aaaaaaa bbbb", "the quick brown fox", "never seen: Ωμέγα 𝔘𝔫𝔦", ""])
def test_merging_without_dropout_is_the_librarys_segmentation(bpe, text):
    words = bpe.word_pieces(text)
    assert [piece for pieces in words for piece in bpe.merge("".join(pieces))] == bpe.tokenize(text)
    assert [piece for pieces in words for piece in pieces] == bpe.tokenize(text)


@pytest.mark.parametrize("dropout", [0.1, 0.5])
def test_dropping_out_from_the_deterministic_pieces_is_merging_with_the_same_draws(bpe, dropout):
    """drop_out's shortcut (when no merge of the deterministic ones is skipped) changes nothing."""
    for text in TEXTS:
        for pieces in bpe.word_pieces(text):
            for seed in range(20):
                fast, slow = _uniforms(host_rng(seed)), _uniforms(host_rng(seed))
                assert bpe.drop_out(pieces, dropout, fast) == bpe.merge("".join(pieces), dropout, slow)


SENTENCES = [
    "the selected file cannot be opened",
    "could not read the configuration",
    "remove the selected messages",
    "connection to the server failed",
    "the password is incorrect",
    "save the changes before closing",
]


@pytest.fixture(scope="module")
def messages(tmp_path_factory):
    path = tmp_path_factory.mktemp("dropout") / "messages.tsv"
    spelled = ["-".join(text) for text in SENTENCES]  # each letter a unit: dropped-out pieces are known
    lines = [f"{text} ({i})\t{text.upper()} [{i}]\n" for i in range(40) for text in SENTENCES + spelled]
    path.write_text("".join(lines), encoding="utf-8")
    return path


def _trainer(corpus, **settings):
    config = TrainConfig(data=str(corpus), vocab_size=400, steps=4, batch_size=8, **settings)
    return Trainer.create(config, {"d_model": 16, "N": 1, "h": 2, "d_ff": 16})


def _texts(task, batch):
    """The batch's sources and targets, detokenised."""
    decode = task.tokenizer.detokenize
    return [decode(task.src_vocab.decode(row)) for row in batch.src.tolist()], [
        decode(task.tgt_vocab.decode(row)) for row in batch.tgt_out.tolist()
    ]


def test_bpe_dropout_segments_each_training_batch_anew_into_the_same_text(messages):
    trainer = _trainer(messages, bpe_dropout=0.3)
    task, dropout = trainer.task, trainer.stepper.subword_dropout
    segmentations: dict[str, set] = {}
    changed = 0
    for step in range(30):
        plain, dropped = task.train_batch(step, 8, 20), task.train_batch(step, 8, 20, None, dropout)
        assert _texts(task, dropped) == _texts(task, plain)  # the same pairs, in other subwords
        assert (dropped.src != UNK_ID).all() and (dropped.tgt_out != UNK_ID).all()
        changed += plain.src.shape != dropped.src.shape or (plain.src != dropped.src).any()
        for text, row in zip(_texts(task, dropped)[0], dropped.src.tolist()):
            segmentations.setdefault(text, set()).add(tuple(row))
        again = task.train_batch(step, 8, 20, None, dropout)  # a pure function of (seed, step)
        assert (
            again.src.tolist() == dropped.src.tolist() and again.tgt_out.tolist() == dropped.tgt_out.tolist()
        )
    assert changed == 30 and max(map(len, segmentations.values())) >= 3
    other_seed = _trainer(messages, bpe_dropout=0.3, seed=1)
    assert other_seed.task.train_batch(0, 8, 20, None, other_seed.stepper.subword_dropout).src.tolist() != (
        task.train_batch(0, 8, 20, None, dropout).src.tolist()
    )
    # the training split's longest sentence fits the position tables whatever the dropout
    pair = [(SENTENCES[0], "x")]
    assert SubwordDropout(task, 0.99, (5, 5)).encode_pairs(pair, host_rng(0)) == task.encode_pairs(pair)


def test_bpe_dropout_off_is_todays_run_and_on_it_replays_on_resume(messages, tmp_path):
    assert _trainer(messages).stepper.subword_dropout is None  # off: the batches are those of task.batch
    straight = _trainer(messages, bpe_dropout=0.2)
    straight.fit(tmp_path / "straight", progress=False)
    first = _trainer(messages, bpe_dropout=0.2)
    first.config = replace(first.config, steps=2)
    first.fit(tmp_path / "resumed", progress=False)
    resumed = Trainer.resume(tmp_path / "resumed", steps=4)
    resumed.fit(tmp_path / "resumed", progress=False)
    a, b = load_checkpoint(tmp_path / "straight")[0], load_checkpoint(tmp_path / "resumed")[0]
    assert all((a[name] == b[name]).all() for name in a)


def test_bpe_dropout_leaves_evaluation_translation_and_the_saved_tokenizer_alone(messages, tmp_path):
    plain, dropped = _trainer(messages), _trainer(messages, bpe_dropout=0.5)
    assert dropped.task.src_vocab.itos == plain.task.src_vocab.itos  # the same vocabularies
    dev = plain.task.dev
    assert dropped.task.batch(dev).src.tolist() == plain.task.batch(dev).src.tolist()
    dropped.model.load_state_dict(plain.model.state_dict())
    assert dropped.evaluate(dev) == plain.evaluate(dev)
    saved = dropped.save(tmp_path / "run")
    recipe = load_checkpoint(saved)[1]["task"]
    assert recipe["tokenizer_json"] == plain.task.tokenizer.serialized
    assert json.loads(recipe["tokenizer_json"])["model"]["dropout"] is None
    _model, tokenizer, _, _ = load_for_inference(saved)
    assert tokenizer.tokenize(SENTENCES[0]) == plain.task.tokenizer.tokenize(SENTENCES[0])


def test_bpe_dropout_applies_to_subwords_only(messages, tmp_path, capsys):
    assert main(["train", "--task", "copy", "--bpe-dropout", "0.1", "--out", str(tmp_path / "a")]) == 2
    assert "--bpe-dropout applies to --data corpora only, not to the task copy" in capsys.readouterr().err
    argv = ["train", "--data", str(messages), "--tokenizer", "word", "--bpe-dropout", "0.1"]
    assert main([*argv, "--out", str(tmp_path / "b")]) == 2
    assert "only, not to --tokenizer word" in capsys.readouterr().err
    copy = ["train", "--task", "copy", "--steps", "1", "--d-model", "8", "--layers", "1", "--heads", "1"]
    assert main([*copy, "--d-ff", "8", "--no-progress", "--out", str(tmp_path / "copy")]) == 0
    argv = ["train", "--from", str(tmp_path / "copy"), "--data", str(messages), "--bpe-dropout", "0.1"]
    assert main([*argv, "--out", str(tmp_path / "d")]) == 2  # a fine-tune's tokenizer is its run's
    error = capsys.readouterr().err
    assert "--bpe-dropout 0.1 applies to learned BPE subwords only: the run of --from" in error
    assert "is tokenized by its char tokenizer" in error
    with pytest.raises(SystemExit):
        main(["train", "--data", str(messages), "--bpe-dropout", "1", "--out", str(tmp_path / "c")])
    assert "argument --bpe-dropout: expected a number in [0, 1), got 1.0" in capsys.readouterr().err


def test_a_dropped_out_piece_the_vocabulary_lacks_leaves_its_word_whole(tmp_path):
    corpus = tmp_path / "words.tsv"  # words only: their pieces are not in the vocabularies
    corpus.write_text(
        "".join(f"{text} ({i})\t{text.upper()} [{i}]\n" for i in range(40) for text in SENTENCES)
    )
    trainer = _trainer(corpus, bpe_dropout=0.9)
    task = trainer.task
    assert (
        "Ġse" not in task.src_vocab.stoi and "Ġse" in json.loads(task.tokenizer.serialized)["model"]["vocab"]
    )
    for step in range(10):
        plain, dropped = (
            task.train_batch(step, 8),
            task.train_batch(step, 8, dropout=trainer.stepper.subword_dropout),
        )
        assert (dropped.src != UNK_ID).all() and (dropped.tgt_out != UNK_ID).all()
        assert _texts(task, dropped) == _texts(task, plain)


def _pairs_file(tmp_path, pairs):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs), encoding="utf-8")
    return path


def test_every_byte_is_in_a_subword_vocabulary_whatever_the_corpus(tmp_path):
    pairs = [(f"abc {i}", f"cba {i}") for i in range(30)]
    task = FileTask(_pairs_file(tmp_path, pairs), "bpe", vocab_size=260)
    for vocab in (task.src_vocab, task.tgt_vocab):
        for text in ("Zoo ß 日本 7", "\ufeffbom", "emoji 😀\x00\x7f"):
            _, unknown = vocab.encode(task.tokenizer.tokenize(text))
            assert unknown == [], (text, unknown)


def test_max_length_counts_subword_tokens_not_words(tmp_path):
    unspaced = "".join(chr(0x4E00 + i * 7919 % 20000) for i in range(1500))  # one word of CJK
    pairs = [(f"abc {i}", f"cba {i}") for i in range(40)] + [(unspaced, "long")]
    with pytest.warns(UserWarning, match=r"1 more pairs have more than 50 subword tokens"):
        task = FileTask(_pairs_file(tmp_path, pairs), "bpe", max_length=50, vocab_size=300)
    kept = task.train_pairs + task.dev + task.test
    assert all(source != unspaced for source, _ in kept)
    assert max(task.max_lengths(kept)) <= 51


def test_too_few_pairs_after_removing_repeats_says_so(tmp_path):
    with pytest.raises(ValueError, match=r"only 1 pair, too few .*49 repeated pairs of its 50 removed"):
        FileTask(_pairs_file(tmp_path, [("same", "même")] * 50), "bpe")


def test_a_high_bpe_dropout_is_applied_on_a_small_corpus(tmp_path):
    words = ["open", "the", "file", "save", "delete", "items", "press", "key", "stop", "close", "window"]
    pairs = [
        (" ".join(words[(i + k) % 11] for k in range(4)) + f" {i}", f"t{i} " + words[i % 11])
        for i in range(300)
    ]
    path = _pairs_file(tmp_path, pairs)
    trainer = Trainer.create(
        TrainConfig(data=str(path), bpe_dropout=0.9, steps=1, batch_size=8),
        {"d_model": 16, "N": 1, "h": 2, "d_ff": 16},
    )
    task, dropout = trainer.task, SubwordDropout(trainer.task, 0.9, (10_000, 10_000))
    sample = task.train_pairs[:50]
    deterministic = task.encode_pairs(sample)[0]
    dropped = dropout.encode_pairs(sample, host_rng(0, 1))[0]
    changed = sum(a != b for a, b in zip(deterministic, dropped))
    assert changed >= 40, f"only {changed} of 50 sources segmented otherwise"
    unk = task.src_vocab.ids.unk
    assert all(unk not in ids for ids in dropped)
