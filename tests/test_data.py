"""Tokenisers, vocabularies, batching, generated tasks and TSV files."""

import numpy as np
import pytest

from numpy_transformer.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    CharTokenizer,
    FileTask,
    NumbersTask,
    SymbolTask,
    Vocab,
    WordTokenizer,
    _NumberWords,
    encode_sentences,
    make_batch,
    number_words,
    read_tsv,
)


@pytest.mark.parametrize("text", ["trois cent quarante-deux", "Hello, world! It's 3.5", "l'homme  qui"])
def test_word_tokenizer_round_trips(text):
    tokenizer = WordTokenizer()
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == " ".join(text.split())


def test_word_tokenizer_marks_glued_tokens():
    assert WordTokenizer().tokenize("quarante-deux mille") == ["quarante", "##-", "##deux", "mille"]
    assert CharTokenizer().tokenize("ab c") == ["a", "b", " ", "c"]


def test_vocab_specials_and_unknowns():
    vocab = Vocab(["b", "a", "a"])
    assert vocab.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"] and vocab.itos[4:] == ["a", "b"]
    ids, unknown = vocab.encode(["a", "z", "b"])
    assert ids == [4, UNK_ID, 5] and unknown == ["z"]
    assert vocab.decode([BOS_ID, 4, 5, EOS_ID, 4]) == ["a", "b"]
    with pytest.warns(UserWarning, match="'z'"):
        encode_sentences(["a z"], WordTokenizer(), vocab)


def test_batch_pads_to_longest_and_shifts_target():
    batch = make_batch([[5, 6, 7], [8]], [[9], [10, 11]])
    assert batch.src.tolist() == [[5, 6, 7], [8, PAD_ID, PAD_ID]]
    assert batch.tgt_in.tolist() == [[BOS_ID, 9, PAD_ID], [BOS_ID, 10, 11]]
    assert batch.tgt_out.tolist() == [[9, EOS_ID, PAD_ID], [10, 11, EOS_ID]]
    assert batch.src_mask.shape == (2, 1, 1, 3) and batch.tgt_mask.shape == (2, 1, 3, 3)
    assert batch.tgt_mask[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert batch.n_tokens == 5


def test_composed_number_words_equal_num2words():
    english, french = _NumberWords("en"), _NumberWords("fr")
    numbers = [
        0,
        1,
        21,
        80,
        81,
        100,
        200,
        1000,
        1001,
        2000,
        21000,
        71000,
        80000,
        81000,
        100000,
        180200,
        200000,
        280000,
        999999,
        *list(np.random.default_rng(0).integers(0, 1_000_000, 400)),
    ]
    for n in map(int, numbers):
        assert english(n) == number_words(n, "en"), n
        assert french(n) == number_words(n, "fr"), n
    assert english(342) == "three hundred forty-two" and french(342) == "trois cent quarante-deux"


def test_numbers_task_test_set_is_unseen_and_batches_are_reproducible():
    task = NumbersTask(limit=20000, n_dev=50, n_test=100)
    test_words = {source for source, _ in task.test}
    for step in range(20):
        batch = task.train_batch(step, 32)
        sources = [task.tokenizer.detokenize(task.src_vocab.decode(row)) for row in batch.src.tolist()]
        assert not test_words & set(sources)
    a, b = (
        task.train_batch(7, 16, bucket_steps=5),
        NumbersTask(limit=20000, n_dev=50, n_test=100).train_batch(7, 16, bucket_steps=5),
    )
    np.testing.assert_array_equal(a.src, b.src)


def test_symbol_tasks():
    copy, reverse = SymbolTask("copy"), SymbolTask("reverse")
    assert all(s == t for s, t in copy.test) and all(s[::-1] == t for s, t in reverse.test)
    assert len(copy.src_vocab) == 14 and all(1 <= len(s) <= 10 for s, _ in copy.test)


def test_tsv_file_task(tmp_path):
    path = tmp_path / "pairs.tsv"
    lines = [f"hello {i}\tbonjour {i}\tCC-BY attribution" for i in range(40)]
    path.write_text("\n".join(lines) + "\n")
    task = FileTask(path)
    assert len(task.dev) == 2 and len(task.test) == 2 and len(task.train_pairs) == 36
    assert not set(task.test) & set(task.train_pairs)
    assert FileTask(path).test == task.test  # deterministic split


def test_tsv_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_tsv(tmp_path / "missing.tsv")
    bad = tmp_path / "bad.tsv"
    bad.write_text("a\tb\nno tab here\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: no tab"):
        read_tsv(bad)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    with pytest.raises(ValueError, match="holds no sentence pairs"):
        read_tsv(empty)
    binary = tmp_path / "binary.tsv"
    binary.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(ValueError, match="UTF-8"):
        read_tsv(binary)
