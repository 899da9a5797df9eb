"""Tokenisers, vocabularies, batching, generated tasks and TSV files."""

import re
import warnings

import numpy as np
import pytest

from numpy_transformer.translator.batches import make_batch
from numpy_transformer.translator.corpora import read_tsv, text_lines
from numpy_transformer.translator.tasks import FileTask, NumbersTask, SymbolTask, _NumberWords, number_words
from numpy_transformer.translator.tokenizers import CharTokenizer, WordTokenizer, encode_sentences
from numpy_transformer.translator.vocabulary import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Vocab


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
        *np.random.default_rng(0).integers(0, 1_000_000, 400),
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


def test_numbers_are_drawn_with_a_share_of_few_digits_and_a_run_saved_before_draws_as_it_did():
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.run.checkpoint import task_from_recipe, task_recipe
    from numpy_transformer.translator.tasks import SMALL_SHARE

    task, n = NumbersTask(limit=20000, n_dev=50, n_test=100), 20000
    words = {task._pair(number)[0]: number for number in range(task.limit)}
    drawn = [words[source] for source, _ in task.sample_train(np.random.default_rng(3), n)]
    digits = np.bincount([len(str(number)) for number in drawn], minlength=6)[1:] / n
    # uniform draws alone give a number of one or two digits once in 200 (of 20,000 here); a share of
    # the draws picks 10**d first, d of 1 to 5, each as likely, then a number below it (and the limit)
    below_100 = np.mean([min(1.0, 100 / min(10**d, task.limit)) for d in range(1, 6)])
    expected_share = SMALL_SHARE * below_100 + (1 - SMALL_SHARE) * 100 / task.limit
    assert abs(digits[:2].sum() - expected_share) < 0.01 and digits[:2].sum() > 10 * 100 / task.limit
    held_out = {words[source] for source, _ in task.dev + task.test}
    assert not held_out & set(drawn)
    # a share of 0 draws what every numbers task drew before the share: uniform numbers alone
    uniform = NumbersTask(limit=20000, n_dev=50, n_test=100, small_share=0.0)
    rng, expected = np.random.default_rng(3), []
    while len(expected) < n:
        candidates = rng.integers(0, uniform.limit, 2 * n)
        expected.extend(int(c) for c in candidates[uniform._is_train[candidates]])
    assert [words[source] for source, _ in uniform.sample_train(np.random.default_rng(3), n)] == expected[:n]
    # a run's recipe keeps its share; one saved before the share was kept draws uniformly
    recipe = task_recipe(NumbersTask(), TrainConfig(task="numbers-en-fr"))
    assert recipe["small_share"] == SMALL_SHARE and task_from_recipe(recipe).small_share == SMALL_SHARE
    del recipe["small_share"]
    assert task_from_recipe(recipe).small_share == 0.0


def test_symbol_tasks():
    copy, reverse = SymbolTask("copy"), SymbolTask("reverse")
    assert all(s == t for s, t in copy.test) and all(s[::-1] == t for s, t in reverse.test)
    assert len(copy.src_vocab) == 14 and all(1 <= len(s) <= 10 for s, _ in copy.test)


def test_tsv_file_task(tmp_path):
    path = tmp_path / "pairs.tsv"
    lines = [f"hello {i}\tbonjour {i}" for i in range(40)]
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


@pytest.mark.parametrize(
    "content, message",
    [
        (
            "a\tb\ncafé au lait\tcoffee\n".encode("latin-1"),
            "bad.tsv:2: not UTF-8 text: the line's byte 4, 0xe9",
        ),
        ("a\tb\nc\td\n".encode("utf-16-le"), "bad.tsv:1: not UTF-8 text: the line holds a NUL byte"),
        ("a\tb\n".encode("utf-16"), "bad.tsv:1: not UTF-8 text: it starts with a UTF-16 byte-order mark"),
        (b"a\tb\nc\td\n\x00\x01\x02\x89PNG\n", "bad.tsv:3: not UTF-8 text"),
    ],
)
def test_a_corpus_that_is_not_utf8_is_named_with_its_line(tmp_path, content, message):
    bad = tmp_path / "bad.tsv"
    bad.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(f"{bad.parent}/{message}")):
        read_tsv(bad)


def test_line_numbers_are_the_files_whatever_line_separators_the_text_holds(tmp_path):
    path = tmp_path / "odd.tsv"
    path.write_bytes("a\tb\r\nc\u2028d\x0ce\x85\tf\rg\nx\x1cy\tz\nno tab here\n".encode())
    with pytest.raises(ValueError, match=re.escape(f"{path}:4: no tab in the line")):
        read_tsv(path)
    path.write_bytes("a\tb\r\nc\u2028d\x0ce\x85\tf\rg\nx\x1cy\tz\n".encode())
    assert read_tsv(path) == [("a", "b"), ("c\u2028d\x0ce", "f\rg"), ("x\x1cy", "z")]


def test_text_lines_decodes_each_line_and_numbers_it():
    lines = [b"\xef\xbb\xbfone\r\n", "deux\u2028trois\n".encode(), b"four"]
    assert list(text_lines(lines, "standard input")) == [(1, "one"), (2, "deux\u2028trois"), (3, "four")]
    assert list(text_lines([b"\xef\xbb\xbfx\n"], "in", start=5)) == [(5, "\ufeffx")]  # only line 1 has a mark
    with pytest.raises(ValueError, match=re.escape("standard input:7: not UTF-8 text")):
        list(text_lines([b"ok\n", b"caf\xe9\n"], "standard input", start=6))


@pytest.mark.parametrize(
    "content, message",
    [
        ("a\tb\nc\td\tCC-BY attribution\n", "x.tsv:2: 3 tab-separated columns, expected 2"),
        ("a\tb\t\n", "x.tsv:1: 3 tab-separated columns, expected 2"),
        ("a\tb\n\n\t\n", "x.tsv:3: empty source"),
        ("a\tb\nc\t  \n", "x.tsv:2: empty target"),
        (" \tb\n", "x.tsv:1: empty source"),
        ("", "x.tsv: the file is empty"),
        ("\n  \n\n", "x.tsv: the file holds only blank lines"),
    ],
)
def test_extra_columns_empty_sides_and_empty_files_are_refused_by_line(tmp_path, content, message):
    path = tmp_path / "x.tsv"
    path.write_text(content)
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path}/{message}")):
        read_tsv(path)


def _pairs(path, numbers, word="hello"):
    path.write_text("".join(f"{word} {i}\tbonjour {i}\n" for i in numbers))
    return path


def test_the_splits_are_said_with_how_they_were_chosen(tmp_path):
    task = FileTask(_pairs(tmp_path / "pairs.tsv", range(200)), "word", seed=3)
    assert (len(task.train_pairs), len(task.dev), len(task.test)) == (180, 10, 10)
    assert task.splits() == (
        "splits: 180 training pairs; 10 dev pairs (5%) and 10 test pairs (5%) held out of --data by a "
        "shuffle of --seed 3"
    )


def test_the_splits_say_how_many_repeated_pairs_were_kept_once(tmp_path):
    """So that the counts add up to the file's lines: 200 lines, 20 of them repeats."""
    path = _pairs(tmp_path / "pairs.tsv", [*range(180), *range(20)])
    task = FileTask(path, "word", seed=3)
    assert len(task.train_pairs) + len(task.dev) + len(task.test) == 180
    assert task.splits().startswith(
        "splits: 162 training pairs (20 pairs repeated in --data kept once); 9 dev"
    )


def test_a_dev_file_of_ones_own_replaces_the_held_out_dev_split(tmp_path):
    corpus = _pairs(tmp_path / "pairs.tsv", range(200))
    dev = _pairs(tmp_path / "dev.tsv", [*range(0, 30, 3), 1000])  # 10 pairs of the corpus, one new
    with pytest.warns(UserWarning, match=rf"--data {corpus}: 10 of its pairs are also in --dev {dev} and"):
        task = FileTask(corpus, "word", dev=dev)
    assert task.dev == [(f"hello {i}", f"bonjour {i}") for i in [*range(0, 30, 3), 1000]]
    assert not set(task.dev) & set(task.train_pairs) and not set(task.test) & set(task.train_pairs)
    assert len(task.test) == 9 and len(task.train_pairs) == 190 - 9  # the test split is still held out
    assert f"11 dev pairs from --dev {dev}; 9 test pairs (5%) held out of --data" in task.splits()


def test_dev_and_test_files_of_ones_own_leave_the_whole_corpus_to_training(tmp_path):
    corpus = _pairs(tmp_path / "pairs.tsv", range(50))
    dev, test = _pairs(tmp_path / "dev.tsv", range(3), "hi"), _pairs(tmp_path / "test.tsv", range(4), "hey")
    task = FileTask(corpus, "word", dev=dev, test=test)
    assert (len(task.train_pairs), len(task.dev), len(task.test)) == (50, 3, 4)
    assert (
        task.splits()
        == f"splits: 50 training pairs; 3 dev pairs from --dev {dev}; 4 test pairs from --test {test}"
    )


def test_dev_and_test_files_sharing_pairs_are_said_to(tmp_path):
    """The splits held out of --data never share a pair; files of one's own that do (one file given
    as both) are warned of, the count named: test scores would count pairs dev chose the best by."""
    corpus = _pairs(tmp_path / "pairs.tsv", range(50))
    dev, test = _pairs(tmp_path / "dev.tsv", range(100, 110)), _pairs(tmp_path / "test.tsv", range(105, 125))
    with pytest.warns(
        UserWarning, match=rf"--test {test}: 5 of its 20 pairs are also in --dev {dev}: its scores"
    ):
        task = FileTask(corpus, "word", dev=dev, test=test)
    assert len(set(task.dev) & set(task.test)) == 5
    with pytest.warns(UserWarning, match=rf"--test {dev}: 10 of its 10 pairs are also in --dev {dev}"):
        FileTask(corpus, "word", dev=dev, test=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        FileTask(corpus, "word", dev=dev, test=_pairs(tmp_path / "other.tsv", range(200, 210)))


def test_a_dev_or_test_file_is_refused_by_its_flag(tmp_path):
    corpus = _pairs(tmp_path / "pairs.tsv", range(50))
    with pytest.raises(ValueError, match=rf"--test {tmp_path / 'missing.tsv'}: no such file"):
        FileTask(corpus, "word", test=tmp_path / "missing.tsv")
    (tmp_path / "bad.tsv").write_text("a\tb\nno tab\n")
    with pytest.raises(ValueError, match="bad.tsv:2: no tab in the line"):
        FileTask(corpus, "word", dev=tmp_path / "bad.tsv")
    (tmp_path / "long.tsv").write_text("a b c d\te f\n")
    with (
        pytest.warns(UserWarning),
        pytest.raises(ValueError, match=r"long.tsv: no pair has at most 2 tokens"),
    ):
        FileTask(corpus, "word", max_length=2, dev=tmp_path / "long.tsv")
    every = _pairs(tmp_path / "every.tsv", range(50))  # --dev the corpus itself: said so, not "only 0 pairs"
    with pytest.raises(
        ValueError,
        match=rf"^--dev {every}: holds every one of the 50 pairs of --data {corpus}, which are left out of "
        "training: none is left to train on",
    ):
        FileTask(corpus, "word", dev=every)
