"""Hostile but realistic input: each case is refused by name, or handled,
never a raw traceback or a silent wrong result."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.gradient_checking import gradcheck
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.corpora import read_tsv
from numpy_transformer.translator.decoding import greedy_decode
from numpy_transformer.translator.plots import read_log
from numpy_transformer.translator.run.directory import RunLock
from numpy_transformer.translator.tasks import make_task
from numpy_transformer.translator.training import Trainer, TrainingDiverged

TINY_MODEL = {"d_model": 16, "N": 1, "h": 2, "d_ff": 32}


def test_a_byte_order_mark_is_not_part_of_the_first_token(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_bytes("\ufeffhello\tbonjour\nworld\tmonde\n".encode("utf-8"))
    assert read_tsv(path) == [("hello", "bonjour"), ("world", "monde")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    trainer = Trainer.create(TrainConfig(task="copy", steps=2, batch_size=4), TINY_MODEL)
    trainer.train_step()
    return trainer.save(out)


@pytest.mark.parametrize(
    "sentences, message",
    [
        ([""], "sentence 1 of the arguments is empty"),
        (["abc", "  "], "sentence 2 of the arguments is empty"),
    ],
)
def test_empty_sentences_are_named_not_translated(checkpoint, capsys, sentences, message):
    assert main(["translate", "--checkpoint", str(checkpoint), *sentences]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_blank_lines_on_standard_input_are_not_sentences(checkpoint):
    out = subprocess.run(
        [sys.executable, "-m", "numpy_transformer", "translate", "--checkpoint", str(checkpoint)],
        input="\ufeffabc\n\n   \ncab\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert [line.split("\t")[0] for line in out.stdout.splitlines()] == ["abc", "cab"]


def test_a_torn_log_line_is_skipped_and_named(tmp_path):
    log = tmp_path / "log.jsonl"
    good = {"step": 1, "loss": 2.0, "lr": 0.1}
    log.write_text(
        json.dumps(good)
        + "\n"
        + '{"step": 2, "lo'
        + "\n"
        + "[1, 2]\n"
        + json.dumps({**good, "step": 3})
        + "\n"
    )
    with pytest.warns(UserWarning) as caught:
        records = read_log(log)
    assert [r["step"] for r in records] == [1, 3]
    assert [str(w.message).split(": not")[0] for w in caught] == [f"{log}:2", f"{log}:3"]


def test_gradcheck_names_a_bad_eps_and_a_loss_that_is_not_one_number():
    x = np.ones(3)
    for eps in (0.0, -1e-6, float("nan")):
        with pytest.raises(ValueError, match=f"eps must be a finite positive number, got {eps!r}"):
            gradcheck(lambda: float(x.sum()), {"x": x}, {"x": np.ones(3)}, eps=eps)
    with pytest.raises(TypeError, match=r"loss\(\) must return one number, got \(3,\)"):
        gradcheck(lambda: x * 2, {"x": x}, {"x": np.ones(3)})


@pytest.mark.parametrize("shape", [(0, 4), (2, 0)])
def test_decoding_an_empty_batch_or_empty_sources_is_named(shape):
    model = nt.build_transformer(10, 10, 8, 8, d_model=8, N=1, h=2, d_ff=16)
    with pytest.raises(
        ValueError,
        match=re.escape(f"src must hold at least one sequence of at least one token, got shape {shape}"),
    ):
        greedy_decode(model, np.zeros(shape, dtype=np.int64), None, 5, 1, 2)


def test_non_finite_weights_are_never_saved(tmp_path):
    trainer = Trainer.create(TrainConfig(task="copy", steps=2, batch_size=4), TINY_MODEL)
    trainer.model.projection_layer.proj.bias.data[0] = np.inf
    with pytest.raises(
        TrainingDiverged, match="the weights of projection_layer.proj.bias are NaN or infinite; not saved"
    ):
        trainer.save(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_new_run_removes_the_temporary_file_of_a_save_cut_off_by_a_kill(tmp_path):
    orphan = tmp_path / ".model.npz.abc123.tmp"
    orphan.write_bytes(b"half a checkpoint")
    with RunLock(tmp_path):
        assert not orphan.exists()


def test_checkpoints_get_the_mode_of_the_files_the_user_creates(tmp_path, checkpoint):
    other = tmp_path / "plain"
    other.write_text("x")
    assert oct(checkpoint.stat().st_mode & 0o777) == oct(other.stat().st_mode & 0o777)
    previous = os.umask(0o077)
    try:
        trainer = Trainer.create(TrainConfig(task="copy", steps=2, batch_size=4), TINY_MODEL)
        private = trainer.save(tmp_path / "private")
    finally:
        os.umask(previous)
    assert private.stat().st_mode & 0o777 == 0o600


def corpus(path, long_words=0):
    pairs = [(f"w{i} x{i % 7}", f"m{i} y{i % 5}") for i in range(60)]
    if long_words:
        pairs.append((" ".join(f"w{i}" for i in range(long_words)), "m1"))
    path.write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    return path


def test_the_positional_table_fits_the_longest_pair_of_the_whole_corpus(tmp_path):
    trainer = Trainer.create(
        TrainConfig(data=str(corpus(tmp_path / "c.tsv", long_words=120)), steps=2, batch_size=4), TINY_MODEL
    )
    longest = max(
        len(trainer.task.tokenizer.tokenize(s))
        for s, _ in trainer.task.train_pairs + trainer.task.dev + trainer.task.test
    )
    assert longest >= 120 and trainer.model.src_pos.seq_len >= longest + 2


def test_a_run_on_a_corpus_is_found_from_any_directory_and_a_changed_corpus_is_refused(
    tmp_path, monkeypatch, capsys
):
    data = corpus(tmp_path / "c.tsv")
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                "c.tsv",
                "--d-model",
                "16",
                "--layers",
                "1",
                "--heads",
                "2",
                "--d-ff",
                "32",
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--eval-every",
                "2",
                "--eval-size",
                "3",
                "--no-progress",
                "--show",
                "0",
                "--out",
                str(run),
            ]
        )
        == 0
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "c.tsv").write_text("other\tautre\n" * 10)  # a different file of the same name here
    monkeypatch.chdir(elsewhere)
    assert (
        main(["evaluate", "--checkpoint", str(run), "--json"]) == 0
    )  # the run's own corpus, by absolute path
    capsys.readouterr()
    data.write_text(data.read_text() + "new\tnouveau\n")
    assert main(["evaluate", "--checkpoint", str(run)]) == 2
    assert f"the run trained on {data}, but that file has changed since" in capsys.readouterr().err


RUN = [
    "--task",
    "copy",
    "--d-model",
    "16",
    "--layers",
    "1",
    "--heads",
    "2",
    "--d-ff",
    "32",
    "--batch-size",
    "4",
    "--eval-every",
    "3",
    "--eval-size",
    "3",
    "--log-every",
    "3",
    "--no-progress",
    "--show",
    "0",
]


def test_resume_keeps_the_saved_run_and_refuses_a_flag_that_differs(tmp_path, capsys):
    from numpy_transformer.translator.run.checkpoint import load_checkpoint

    out = str(tmp_path / "run")
    assert main(["train", *RUN, "--steps", "3", "--lr", "0.002", "--out", out]) == 0
    assert main(["train", "--resume", "--out", out, "--no-progress", "--show", "0"]) == 0  # its own length: 3
    assert load_checkpoint(out)[1]["step"] == 3 and load_checkpoint(out)[1]["train"]["steps"] == 3
    capsys.readouterr()
    assert main(["train", "--resume", "--out", out, "--lr", "0.01", "--steps", "6"]) == 2
    error = capsys.readouterr().err
    assert "--lr 0.01 differs from the saved run's 0.002" in error and "--overwrite" in error
    assert main(["train", "--resume", "--out", out, "--post-norm"]) == 2
    assert "--post-norm differs from the saved run, which has no --post-norm" in capsys.readouterr().err
    assert load_checkpoint(out)[1]["step"] == 3  # nothing ran
    assert (
        main(["train", "--resume", *RUN, "--lr", "0.002", "--steps", "6", "--threads", "1", "--out", out])
        == 0
    )
    meta = load_checkpoint(out)[1]
    assert meta["step"] == 6 and meta["train"]["threads"] == 1  # the same values are fine; --threads applied


def test_more_threads_than_cores_are_refused_before_any_work():
    with pytest.raises(ValueError, match=f"threads 999 exceeds this machine's {os.cpu_count()} cores"):
        Trainer.create(TrainConfig(task="copy", steps=2, batch_size=4, threads=999), TINY_MODEL)


def test_a_beam_wider_than_the_vocabulary_is_refused():
    from numpy_transformer.translator.decoding import beam_search

    model = nt.build_transformer(10, 6, 8, 8, d_model=8, N=1, h=2, d_ff=16)
    with pytest.raises(ValueError, match="beam_width 7 exceeds the target vocabulary of 6 tokens"):
        beam_search(model, np.ones((1, 3), dtype=np.int64), None, 5, 1, 2, beam_width=7)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda meta: meta.pop("step"), "field 'step' is missing or not a int"),
        (lambda meta: meta.update(model="big"), "field 'model' is missing or not a dict"),
        (lambda meta: meta["tgt_vocab"].pop(), "its tgt_vocab holds"),
    ],
)
def test_malformed_checkpoint_metadata_is_named(checkpoint, tmp_path, capsys, damage, message):
    from numpy_transformer.translator.run.checkpoint import load_checkpoint, save_checkpoint

    arrays, meta = load_checkpoint(checkpoint)
    damage(meta)
    broken = save_checkpoint(tmp_path / "model.npz", arrays, meta)
    assert main(["translate", "--checkpoint", str(broken), "abc"]) == 2
    error = capsys.readouterr().err
    assert str(broken) in error and message in error and "Traceback" not in error


def test_repeated_pairs_of_a_corpus_never_reach_the_test_split(tmp_path):
    from numpy_transformer.translator.tasks import FileTask

    path = tmp_path / "c.tsv"
    path.write_text("".join(f"s{i % 10}\tt{i % 10}\n" for i in range(200)))  # ten pairs, twenty times each
    task = FileTask(path)
    assert len(task.train_pairs) + len(task.dev) + len(task.test) == 10
    assert not set(task.test) & set(task.train_pairs)


def test_translate_in_batches_gives_what_one_batch_gives(checkpoint, capsys, monkeypatch):
    from numpy_transformer.translator.cli import translate as translate_command

    sentences = ["abc", "cab", "bbb", "a", "ccba"]
    assert main(["translate", "--checkpoint", str(checkpoint), *sentences]) == 0
    whole = capsys.readouterr().out
    monkeypatch.setattr(translate_command, "TRANSLATE_BATCH", 2)
    assert main(["translate", "--checkpoint", str(checkpoint), *sentences]) == 0
    assert capsys.readouterr().out == whole and len(whole.splitlines()) == 5


@pytest.mark.parametrize("attention", ["mha", "mla"])
@pytest.mark.parametrize(
    "sizes", [{"d_model": 16, "N": 1, "h": 2, "d_ff": 32}, {"d_model": 32, "N": 3, "h": 4, "d_ff": 24}]
)
def test_parameter_count_from_the_sizes_alone_is_the_built_models(attention, sizes):
    from numpy_transformer.model import parameter_count

    model = nt.build_transformer(11, 7, 9, 5, attention=attention, **sizes)
    assert parameter_count(model.config) == sum(p.data.size for p in model.parameters())


def test_a_step_that_cannot_fit_in_memory_is_refused_before_anything_is_built(monkeypatch, capsys):
    from numpy_transformer.translator.training import trainer as trainer_module

    built = []
    monkeypatch.setattr(trainer_module, "build_transformer", lambda *a, **k: built.append(1))
    with pytest.raises(
        ValueError, match=r"needs about [\d.]+ GiB .*batch_size 1000000000.* GiB is available"
    ):
        Trainer.create(TrainConfig(task="copy", steps=2, batch_size=10**9), TINY_MODEL)
    assert main(["train", "--task", "copy", "--d-model", "1000000", "--heads", "1", "--out", "unused"]) == 2
    assert "needs about" in capsys.readouterr().err and not built


def test_the_memory_estimate_lets_the_default_run_through():
    from numpy_transformer.translator.training import training_memory

    task = make_task("numbers-en-fr")
    src_len, tgt_len = task.max_lengths(task.dev + task.test + task.length_pairs(0))
    config = {
        "src_vocab_size": len(task.src_vocab),
        "tgt_vocab_size": len(task.tgt_vocab),
        "src_seq_len": src_len,
        "tgt_seq_len": tgt_len,
        "d_model": 128,
        "N": 2,
        "h": 4,
        "d_ff": 512,
    }
    assert training_memory(config, 64, src_len, tgt_len) < 2**28  # 256 MiB: far below any laptop's memory


def test_an_over_long_corpus_line_is_left_out_and_counted(tmp_path, capsys):
    path = tmp_path / "c.tsv"
    lines = [f"w{i} x\tv{i} y" for i in range(40)]
    lines.insert(20, "a " * 1_000_000 + "\tb")  # a stray 2 MB line
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "--data",
                str(path),
                "--steps",
                "1",
                "--d-model",
                "16",
                "--heads",
                "2",
                "--d-ff",
                "16",
                "--layers",
                "1",
                "--no-progress",
                "--show",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert (
        "1 of 41 pairs have more than 256 tokens on a side and are left out (--max-length)"
        in capsys.readouterr().err
    )
    with pytest.warns(UserWarning, match="1 of 41 pairs"):  # the task is rebuilt as it was trained
        trainer = Trainer.resume(out)
    assert trainer.model.config.src_seq_len < 64 and trainer.config.max_length == 256
    assert main(["train", "--resume", "--max-length", "300", "--out", str(out)]) == 2
    assert "--max-length 300 differs from the saved run's 256" in capsys.readouterr().err


@pytest.mark.parametrize(
    "call, argument",
    [
        (lambda model: nt.make_src_mask([[1, 2]], 0), "src"),
        (lambda model: nt.make_tgt_mask([[1, 2]], 0), "tgt"),
        (lambda model: model.backward([[[0.0] * 6]]), "dlogits"),
        (lambda model: model.forward([[1, 2]], np.ones((1, 2), dtype=np.int64), None, None), "src"),
    ],
)
def test_a_list_instead_of_an_array_is_named(call, argument):
    model = nt.build_transformer(10, 6, 8, 8, d_model=8, N=1, h=2, d_ff=16)
    with pytest.raises(TypeError, match=f"^{argument} must be an"):
        call(model)


def test_a_fine_tune_on_words_outside_the_vocabulary_warns_with_the_share(tmp_path, capsys):
    base = tmp_path / "base"
    assert main(["train", *RUN, "--task", "numbers-en-fr", "--steps", "2", "--out", str(base)]) == 0
    data = tmp_path / "other.tsv"
    data.write_text("".join(f"zebra{i} quokka\tzèbre{i} quokka\n" for i in range(20)))
    capsys.readouterr()
    assert (
        main(
            [
                "train",
                "--from",
                str(base),
                "--data",
                str(data),
                "--steps",
                "2",
                *RUN[RUN.index("--batch-size") :],
                "--out",
                str(tmp_path / "ft"),
            ]
        )
        == 0
    )
    error = capsys.readouterr().err
    assert "100.0% of its tokens" in error and "outside the vocabulary of --from" in error


def test_a_boolean_flag_that_differs_from_the_from_run_reads_as_typed(tmp_path, capsys):
    base = tmp_path / "base"
    assert main(["train", *RUN, "--task", "numbers-en-fr", "--steps", "2", "--out", str(base)]) == 0
    data = tmp_path / "other.tsv"
    data.write_text("".join(f"one {i}\tun {i}\n" for i in range(20)))
    capsys.readouterr()
    assert (
        main(
            ["train", "--from", str(base), "--data", str(data), "--post-norm", "--out", str(tmp_path / "ft")]
        )
        == 2
    )
    error = capsys.readouterr().err
    assert "--post-norm differs from the model of --from" in error and "which has no --post-norm" in error


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--beam-width", "5"], "--beam-width 5 applies to --strategy beam only, not to greedy decoding"),
        (
            ["--strategy", "greedy", "--temperature", "0.5"],
            "--temperature 0.5 applies to --strategy sample only, not to --strategy greedy",
        ),
        (
            ["--strategy", "beam", "--top-k", "3"],
            "--top-k 3 applies to --strategy sample only, not to --strategy beam",
        ),
        (
            ["--strategy", "sample", "--length-penalty", "1"],
            "--length-penalty 1.0 applies to --strategy beam only",
        ),
        (["--strategy", "beam", "--seed", "3"], "--seed 3 applies to --strategy sample only"),
    ],
)
def test_an_option_of_another_strategy_is_refused_naming_both(checkpoint, capsys, flags, message):
    assert main(["translate", "--checkpoint", str(checkpoint), *flags, "abc"]) == 2
    error = capsys.readouterr().err
    assert message in error and "Traceback" not in error


def test_the_options_of_the_strategy_used_are_taken(checkpoint, capsys):
    assert (
        main(["translate", "--checkpoint", str(checkpoint), "--strategy", "beam", "--beam-width", "2", "abc"])
        == 0
    )
    assert (
        main(["translate", "--checkpoint", str(checkpoint), "--strategy", "sample", "--seed", "2", "abc"])
        == 0
    )


def test_plot_into_a_missing_folder_is_refused_naming_it(checkpoint, tmp_path, capsys):
    out = tmp_path / "missing" / "a.png"
    code = main(["plot", "attention", "--checkpoint", str(checkpoint), "--out", str(out), "abc"])
    assert code == 2
    error = capsys.readouterr().err
    assert f"the folder {out.parent} does not exist" in error and "Errno" not in error


def _score(checkpoint, text):
    return subprocess.run(
        [sys.executable, "-m", "numpy_transformer", "translate", "--checkpoint", str(checkpoint), "--score"],
        input=text,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_score_names_an_empty_or_too_long_translation_by_its_line(checkpoint):
    result = _score(checkpoint, "abc\tcba\nabc\t\n")
    assert result.returncode == 2 and "standard input:2:" in result.stderr
    assert "the translation to score is missing or empty" in result.stderr
    result = _score(checkpoint, "abc\tcba\nabc\t" + "a" * 400 + "\n")
    assert result.returncode == 2 and "standard input:2's translation" in result.stderr
    assert "longer than the positional table" in result.stderr


@pytest.mark.parametrize(
    "argv, library, extra",
    [
        (["train", "--task", "copy", "--steps", "2", "--no-progress"], "sacrebleu", "train"),
        (["train", "--task", "copy", "--steps", "2"], "tqdm", "train"),
        (["train", "--task", "numbers-en-fr", "--steps", "2", "--no-progress"], "num2words", "train"),
        (["learn", "start", "--notebook"], "jupytext", "notebook"),
        (["plot", "gradients", "--layers", "1"], "matplotlib", "plot"),
    ],
)
def test_a_library_a_plain_install_lacks_is_named_with_its_extra_before_any_work(
    tmp_path, capsys, monkeypatch, argv, library, extra
):
    monkeypatch.setitem(
        sys.modules, library, None
    )  # its import fails, as after `pip install numpy_transformer`
    out = tmp_path / "out"
    where = [str(out)] if argv[0] == "learn" else ["--out", str(out / "x.png" if argv[0] == "plot" else out)]
    assert main([*argv, *where]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert f"needs {library}, which is not installed: pip install 'numpy_transformer[{extra}]'" in line
    assert not out.exists()  # refused before any work


@pytest.mark.parametrize("how", ["-m", "script"])
@pytest.mark.parametrize(
    "module",
    ["numpy_transformer.layers", "numpy_transformer.translator.decoder_cache"],
    ids=["with-the-package", "with-the-command"],
)
def test_ctrl_c_while_the_command_starts_is_one_line_and_exit_130(checkpoint, how, module):
    from numpy_transformer.machine import OPENBLAS_TIMEOUT, OPENBLAS_TIMEOUT_VAR

    harness = Path(__file__).parents[1] / "support" / "interrupted_while_starting.py"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(nt.__file__).resolve().parents[1]),
        OPENBLAS_TIMEOUT_VAR: OPENBLAS_TIMEOUT,
    }
    done = subprocess.run(
        [sys.executable, str(harness), how, module, "translate", "--checkpoint", str(checkpoint), "abc"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 130, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("numpy-transformer: interrupted") and done.stdout == ""


@pytest.mark.parametrize("side", ["source", "target"])
def test_evaluate_data_names_the_line_of_a_pair_too_long_for_the_model(checkpoint, tmp_path, capsys, side):
    long = " ".join(["abc"] * 400)
    pair = f"{long}\tabc" if side == "source" else f"abc\t{long}"
    data = tmp_path / "pairs.tsv"
    data.write_text("abc\tabc\n\nbca\tbca\n" + pair + "\ncab\tcab\n")
    assert main(["evaluate", "--checkpoint", str(checkpoint), "--data", str(data)]) == 2
    error = capsys.readouterr().err
    assert f"{data}:4: the {side} ('abc abc" in error and "longer than the positional table" in error
