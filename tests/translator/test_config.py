"""One source of truth for a run's settings: the flags, --config files, the saved config.toml and
--resume's checks all come from the fields of the run's configuration (translator/config/run.py),
declared as numpy_transformer.settings declares every checked setting."""

import argparse
import ast
import inspect
import os
import re
import sys
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import numpy_transformer
from numpy_transformer import presets
from numpy_transformer.model import TransformerConfig, build_transformer
from numpy_transformer.settings import flag_of
from numpy_transformer.translator.cli import build_parser, main
from numpy_transformer.translator.config import (
    DATA_LR,
    DATA_WEIGHT_DECAY,
    FROM_LR,
    FROM_WARMUP,
    MODEL_SIZES,
    TASK_LR,
    WARMUP,
    ModelConfig,
    TrainConfig,
    read_config_file,
)
from numpy_transformer.translator.run.checkpoint import load_checkpoint
from numpy_transformer.translator.tokenizers import subword_vocab_size
from numpy_transformer.translator.training import Trainer
from numpy_transformer.workbook.exercises.curriculum import EXERCISES

RUN = ["--task", "copy", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16", "--steps", "3"]
QUIET = ["--no-progress", "--show", "0", "--eval-every", "3", "--eval-size", "4", "--batch-size", "8"]


def _train(*args):
    return main(["train", *args, *QUIET])


def _weights(run):
    arrays, meta = load_checkpoint(run)
    return {k: v for k, v in arrays.items() if k.startswith("param/")}, meta


@pytest.mark.parametrize(
    "abbreviated", [["--thread", "2"], ["--tie"], ["--acc", "4"], ["--batch-tok", "50"], ["--label", "0.3"]]
)
def test_an_abbreviated_flag_is_refused_never_guessed_nor_dropped(tmp_path, capsys, abbreviated):
    out = str(tmp_path / "run")
    assert _train(*RUN, "--out", out) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        _train("--resume", "--out", out, *abbreviated)
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert f"unrecognized arguments: {' '.join(abbreviated)}" in error


@pytest.mark.parametrize(
    "argv, command, extra",
    [
        (["plot", "curves", "runs/x"], "plot curves", "runs/x"),
        (["translate", "--bogus", "x"], "translate", "--bogus"),  # x is a sentence to translate
        (["learn", "check", "mine.py", "--zzz"], "learn check", "--zzz"),
    ],
)
def test_an_argument_no_option_takes_is_refused_by_the_command_it_was_given_to(capsys, argv, command, extra):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"numpy-transformer {command}: error: unrecognized arguments: {extra} (see numpy-transformer {command} --help)"
    )


def test_every_setting_has_one_flag_and_the_parser_knows_them_all():
    parser = build_parser()
    train = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "train")[1]
    flags = {option for action in train._actions for option in action.option_strings}
    for cls in (ModelConfig, TrainConfig):
        for item in fields(cls):
            assert flag_of(item) in flags, item.name
            assert item.metadata["help"], item.name


# the settings of TransformerConfig that a run's task decides, not its [model] table
TASK_DECIDED = {"src_vocab_size", "tgt_vocab_size", "src_seq_len", "tgt_seq_len", "shared_vocab"}


CHECKS = ("choices", "minimum", "maximum", "above", "below")


def test_model_config_agrees_with_transformer_config():
    """ModelConfig declares the settings of TransformerConfig a run may give (every one but those its
    task decides), each of the same type (a size the run chooses also None), default (a size: None)
    and checks; build_transformer takes TransformerConfig's fields without naming any."""
    architecture = {item.name: item for item in fields(TransformerConfig)}
    settings = {item.name: item for item in fields(ModelConfig)}
    assert set(architecture) == set(settings) | TASK_DECIDED and not set(settings) & TASK_DECIDED
    for name, item in settings.items():
        declared, chosen = architecture[name], name in MODEL_SIZES  # the run chooses a size not given
        assert item.type == (f"{declared.type} | None" if chosen else declared.type), name
        assert item.default == (None if chosen else declared.default), name
        for check in CHECKS:
            assert item.metadata[check] == declared.metadata[check], (name, check)
    assert set(inspect.signature(build_transformer).parameters) == {"args", "seed", "settings"}


def test_every_size_is_a_preset():
    """TransformerConfig's defaults are the paper's base model, a generated task's model is SMALL, and
    a corpus run's sizes are a row of CORPUS_SIZES."""
    defaults = {item.name: item.default for item in fields(TransformerConfig)}
    assert {name: defaults[name] for name in MODEL_SIZES} == presets.BASE.settings()
    assert ModelConfig().resolve() == ModelConfig(**presets.SMALL.settings())
    for minutes, pairs, size in presets.CORPUS_SIZES:
        chosen = ModelConfig().resolve(pairs, minutes or 1.0)
        assert {name: getattr(chosen, name) for name in ("d_model", "N", "h", "d_ff")} == {
            name: value for name, value in size.settings().items() if name != "dropout"
        }
    assert TrainConfig().label_smoothing == presets.LABEL_SMOOTHING


# sizes that are no preset of this package: a published Marian model's shapes, and the GPU check's
# model, as small as a comparison of every gradient across two backends wants
NOT_PRESETS = {"benchmarks/translate_bench.py", "benchmarks/gpu_check.py"}


def test_no_module_writes_a_size_of_its_own():
    """The package, its benchmarks and its examples take a model's sizes from presets.py: no other
    module writes d_model, N, h or d_ff as a number (a keyword argument or a dictionary's entry)."""
    root = Path(numpy_transformer.__file__).parent.parent
    written = []
    for folder in ("numpy_transformer", "benchmarks", "examples"):
        for source in sorted((root / folder).rglob("*.py")):
            where = source.relative_to(root).as_posix()
            if where == "numpy_transformer/presets.py" or where in NOT_PRESETS:
                continue
            for node in ast.walk(ast.parse(source.read_text())):
                entries = (
                    [(node.arg, node.value)]
                    if isinstance(node, ast.keyword)
                    else zip(node.keys, node.values)
                    if isinstance(node, ast.Dict)
                    else []
                )
                for key, value in entries:
                    name = key.value if isinstance(key, ast.Constant) else key
                    if name in MODEL_SIZES[:4] and isinstance(value, ast.Constant):
                        written.append(f"{where}:{value.lineno} {name}={value.value}")
    assert not written, written


def test_a_setting_of_the_architecture_is_checked_as_transformer_config_declares_it(tmp_path, capsys):
    for name, item in ((item.name, item) for item in fields(ModelConfig)):
        if item.metadata["choices"]:
            with pytest.raises(ValueError, match=f"{name} must be one of "):
                ModelConfig(**{name: "none of them"})
    with pytest.raises(ValueError, match="padding_idx must be an integer >= 0, got -1"):
        ModelConfig(padding_idx=-1)
    with pytest.raises(SystemExit) as stopped:  # argparse: before anything is read
        main(["train", "--attention", "gqa", "--out", str(tmp_path / "run")])
    assert stopped.value.code == 2 and "argument --attention: expected one of mha, mla, got gqa" in (
        capsys.readouterr().err
    )


# a run's config.toml and its checkpoint's model, as the version whose ModelConfig declared its fields
# itself wrote them (train --task copy with the sizes below, every option of the architecture changed)
EARLIER_CONFIG = """# The configuration this run resolved to: train --config FILE reads it back.

[model]
d_model = 16
N = 1
h = 2
d_ff = 16
dropout = 0.1
attention = "mha"
norm_first = false
tie_embeddings = true
dtype = "float64"
activation = "silu"
attention_bias = true
positions = "split"
final_norm = false
padding_idx = 0

[train]
task = "copy"
# data: not set
# from_run: not set
tokenizer = "char"
# vocab_size: not set
shared_vocab = false
bpe_dropout = 0.0
# max_length: not set
steps = 2
# time_budget: not set
batch_size = 8
# batch_tokens: not set
accumulate = 1
optimizer = "adam"
lr = 0.001
schedule = "cosine"
warmup = 200
factor = 1.0
min_lr = 0.0
weight_decay = 0.0
clip = 1.0
label_smoothing = 0.1
bucket_steps = 100
eval_every = 2
eval_size = 4
eval_examples = 2
log_every = 50
keep_checkpoints = 0
average_last = 5
patience = 0
plateau_cut = 1.0
plateau_patience = 2
lr_floor = 1e-05
seed = 0
threads = 0
"""
EARLIER_MODEL = {
    "src_vocab_size": 14,
    "tgt_vocab_size": 14,
    "src_seq_len": 28,
    "tgt_seq_len": 30,
    "d_model": 16,
    "N": 1,
    "h": 2,
    "dropout": 0.1,
    "d_ff": 16,
    "attention": "mha",
    "norm_first": False,
    "dtype": "float64",
    "tie_embeddings": True,
    "shared_vocab": False,
    "activation": "silu",
    "attention_bias": True,
    "positions": "split",
    "final_norm": False,
    "padding_idx": 0,
}


def test_a_config_and_a_checkpoint_an_earlier_version_wrote_still_load_as_the_same_run(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text(EARLIER_CONFIG)
    model = ModelConfig.from_mapping(read_config_file(path)["model"])
    assert (
        model
        == ModelConfig.from_model(EARLIER_MODEL)
        == ModelConfig.from_model(TransformerConfig.of(EARLIER_MODEL))
    )
    assert (model.norm_first, model.final_norm, model.positions, model.padding_idx) == (
        False,
        False,
        "split",
        0,
    )
    assert (
        main(["train", "--config", str(path), "--no-progress", "--show", "0", "--out", str(tmp_path / "run")])
        == 0
    )
    # the run it wrote, again: with the settings added since (a dev and a test file of one's own), unset
    written = (tmp_path / "run" / "config.toml").read_text()
    assert "\n# dev: not set\n# test: not set\n" in written
    assert written.replace("# dev: not set\n# test: not set\n", "") == EARLIER_CONFIG
    assert load_checkpoint(tmp_path / "run")[1]["model"] == EARLIER_MODEL


def test_a_config_file_and_the_same_flags_give_the_same_run(tmp_path):
    by_flags, by_file = tmp_path / "flags", tmp_path / "file"
    assert _train(*RUN, "--lr", "0.002", "--post-norm", "--out", str(by_flags)) == 0
    config = tmp_path / "run.toml"
    config.write_text(
        '[model]\nd_model = 16\nN = 1\nh = 2\nd_ff = 16\nnorm_first = false\n\n[train]\ntask = "copy"\n'
        "steps = 3\nlr = 0.002\n"
    )
    assert _train("--config", str(config), "--out", str(by_file)) == 0
    (weights_a, meta_a), (weights_b, meta_b) = _weights(by_flags), _weights(by_file)
    assert meta_a["train"] == meta_b["train"] and meta_a["model"] == meta_b["model"]
    assert meta_a["model"]["norm_first"] is False and meta_a["train"]["lr"] == 0.002
    for name in weights_a:
        np.testing.assert_array_equal(weights_a[name], weights_b[name], err_msg=name)


def test_the_saved_config_reads_back_as_the_same_run_and_flags_beside_it_win(tmp_path):
    first, again, changed = tmp_path / "first", tmp_path / "again", tmp_path / "changed"
    assert _train(*RUN, "--out", str(first)) == 0
    saved = first / "config.toml"
    assert "[model]" in saved.read_text() and 'tokenizer = "char"' in saved.read_text()  # chosen, then saved
    assert _train("--config", str(saved), "--out", str(again)) == 0
    (weights_a, meta_a), (weights_b, meta_b) = _weights(first), _weights(again)
    assert meta_a["train"] == meta_b["train"]
    for name in weights_a:
        np.testing.assert_array_equal(weights_a[name], weights_b[name], err_msg=name)
    assert _train("--config", str(saved), "--seed", "7", "--out", str(changed)) == 0
    assert _weights(changed)[1]["train"]["seed"] == 7


@pytest.mark.parametrize(
    "document, named",
    [
        ("[train]\nbatch_sise = 8\n", "unknown setting 'batch_sise' in [train]"),
        ("[model]\nd_model = 'wide'\n", "[model] d_model must be a positive integer, got 'wide'"),
        ("[train]\nlr = -1.0\n", "[train] lr must be a positive finite number, got -1.0"),
        ("[train]\nshared_vocab = 1\n", "[train] shared_vocab must be true or false, got 1"),
        ("[optimiser]\nlr = 0.1\n", "unknown table [optimiser]"),
        ("[train\nlr = 0.1\n", "not valid TOML"),
        ("steps = 5\n", "steps = 5 is a setting outside any table; every setting belongs under [train]"),
        ("d_model = 8\n", "d_model = 8 is a setting outside any table; every setting belongs under [model]"),
        ("[[train]]\nsteps = 5\n", "[[train]] is an array of tables; write the table [train] once"),
        ("[train]\nseed = -5\n", "[train] seed must be an integer >= 0, got -5"),
    ],
)
def test_a_bad_config_file_is_refused_naming_the_file_and_the_key(tmp_path, capsys, document, named):
    path = tmp_path / "bad.toml"
    path.write_text(document)
    with pytest.raises((ValueError, TypeError), match=r"bad\.toml") as refused:
        read_config_file(path)
    assert named in str(refused.value)
    assert _train(*RUN, "--config", str(path), "--out", str(tmp_path / "run")) == 2
    error = capsys.readouterr().err
    assert named in error and not (tmp_path / "run").exists()


def test_resume_refuses_a_config_file_that_changes_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(*RUN, "--out", str(out)) == 0
    other = tmp_path / "other.toml"
    other.write_text("[train]\nwarmup = 7\n")
    capsys.readouterr()
    assert _train("--resume", "--out", str(out), "--config", str(other)) == 2
    assert "--warmup 7 differs from the saved run's 200" in capsys.readouterr().err
    assert _train("--resume", "--out", str(out), "--config", str(out / "config.toml"), "--steps", "4") == 0
    assert load_checkpoint(out)[1]["step"] == 4


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--task", "copy", "--vocab-size", "500"], "--vocab-size applies to --data corpora only"),
        (["--task", "copy", "--shared-vocab"], "--shared-vocab applies to --data corpora only"),
        (["--task", "copy", "--tokenizer", "word"], "the task copy is written in characters"),
        (["--tokenizer", "bpe"], "--tokenizer bpe learns from a corpus"),
        (["--task", "copy", "--dev", "dev.tsv"], "--dev applies to --data corpora only"),
        (["--test", "test.tsv"], "--test applies to --data corpora only, not to the task numbers-en-fr"),
    ],
)
def test_settings_that_cannot_apply_to_the_task_are_refused_not_dropped(tmp_path, capsys, flags, named):
    assert main(["train", *flags, "--out", str(tmp_path / "run")]) == 2
    assert named in capsys.readouterr().err


def test_settings_are_checked_whoever_makes_them():
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\), got 1\.0"):
        ModelConfig(dropout=1.0)
    with pytest.raises(ValueError, match="unknown setting 'layers'"):
        ModelConfig.from_mapping({"layers": 2})
    with pytest.raises(ValueError, match="not both"):
        TrainConfig(task="copy", data="x.tsv")


@pytest.mark.parametrize("value", ["100", "255", "1000001", "1000000000", "18446744073709551616"])
def test_a_vocab_size_outside_what_the_bpe_library_accepts_is_refused_at_the_flag(tmp_path, capsys, value):
    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"a{i}\tb{i}\n" for i in range(30)))
    with pytest.raises(SystemExit) as stopped:  # argparse: before the corpus is read
        main(["train", "--data", str(corpus), "--vocab-size", value, "--out", str(tmp_path / "run")])
    assert stopped.value.code == 2
    error = capsys.readouterr().err
    assert f"argument --vocab-size: expected an integer in [256, 1000000], got {value}" in error
    assert len(error.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


def test_the_vocab_size_range_holds_in_config_files_and_python(tmp_path):
    config = tmp_path / "big.toml"
    config.write_text("[train]\nvocab_size = 4294967296\n")
    with pytest.raises(
        ValueError, match=r"\[train\] vocab_size must be an integer in \[256, 1000000\], got 4294967296"
    ):
        read_config_file(config)
    with pytest.raises(ValueError, match=r"vocab_size must be an integer in \[256, 1000000\], got 255"):
        TrainConfig(data="x.tsv", vocab_size=255)
    assert TrainConfig(data="x.tsv", vocab_size=1_000_000).vocab_size == 1_000_000


def test_the_marian_options_are_settings_of_a_run(tmp_path, capsys):
    """activation, attention_bias, positions, final_norm and padding_idx: flags, config.toml, --resume."""
    out = tmp_path / "run"
    marian = ["--activation", "silu", "--attention-bias", "--positions", "split", "--no-final-norm"]
    assert _train(*RUN, *marian, "--padding-idx", "0", "--post-norm", "--out", str(out)) == 0
    model = load_checkpoint(out)[1]["model"]
    assert (model["activation"], model["attention_bias"], model["positions"]) == ("silu", True, "split")
    assert model["final_norm"] is False and model["padding_idx"] == 0
    saved = read_config_file(out / "config.toml")["model"]
    assert saved["activation"] == "silu" and saved["final_norm"] is False and saved["padding_idx"] == 0
    again = tmp_path / "again"
    assert _train("--config", str(out / "config.toml"), "--out", str(again)) == 0
    for name, value in _weights(out)[0].items():
        np.testing.assert_array_equal(value, _weights(again)[0][name], err_msg=name)
    capsys.readouterr()
    assert _train("--resume", "--out", str(out), "--activation", "relu") == 2
    assert "--activation 'relu' differs from the saved run's 'silu'" in capsys.readouterr().err
    assert _train("--resume", "--out", str(out), "--attention-bias", "--steps", "4") == 0


def test_the_default_model_is_the_one_built_without_the_marian_options():
    from numpy_transformer.model import build_transformer
    from numpy_transformer.translator.training import Trainer

    assert ModelConfig().final_norm is True and ModelConfig().padding_idx is None
    trainer = Trainer.create(TrainConfig(task="copy", steps=1), ModelConfig(d_model=16, N=1, h=2, d_ff=16))
    config = trainer.model.config
    sizes = ("src_vocab_size", "tgt_vocab_size", "src_seq_len", "tgt_seq_len", "d_model", "N", "h", "d_ff")
    fresh = build_transformer(
        **{key: getattr(config, key) for key in sizes}, seed=0
    ).state_dict()  # as before them
    built = trainer.model.state_dict()
    assert built.keys() == fresh.keys()
    for name, value in fresh.items():
        np.testing.assert_array_equal(built[name], value, err_msg=name)


# -- sizes chosen from the corpus and the budget


def test_a_corpus_run_chooses_what_it_was_not_given_and_keeps_what_it_was():
    big, small = ModelConfig().resolve(50_000, 15.0), ModelConfig().resolve(2_000, 15.0)
    assert (big.d_model, big.N, big.h, big.d_ff, big.dropout) == (128, 2, 4, 512, 0.0)
    assert small.dropout == 0.3  # a budget of many passes over few pairs: more to overfit
    assert ModelConfig().resolve(15_000, 15.0).dropout == 0.2
    assert ModelConfig(dropout=0.0, d_model=64).resolve(2_000, 15.0).dropout == 0.0
    assert ModelConfig(dropout=0.1).resolve(50_000, 15.0).dropout == 0.1
    assert ModelConfig().resolve(500_000, 120.0).d_model == 256  # hours on a large corpus pay for width
    assert ModelConfig().resolve() == ModelConfig(
        **presets.SMALL.settings()
    )  # a generated task's fixed model
    # a width given alone gets the most heads up to the chosen 4 that divide it; given heads are kept
    assert ModelConfig(d_model=30).resolve(50_000, 15.0).h == 3
    assert ModelConfig(d_model=30, h=5).resolve(50_000, 15.0).h == 5
    with pytest.raises(ValueError, match="d_model must be divisible by h, got d_model=30, h=4"):
        ModelConfig(d_model=30, h=4)  # refused as given, before a corpus is read to size the rest


@pytest.mark.parametrize(
    ("flags", "widths"), [([], "d_model 128 is"), (["--time-budget", "100"], "d_model 128 or 256 is")]
)
def test_heads_no_corpus_width_fits_are_refused_before_the_corpus_is_read(
    tmp_path, capsys, monkeypatch, flags, widths
):
    """--heads without --d-model on a corpus: the width is chosen once the corpus is read, but a head
    count that fits none of the widths the budget can choose is refused before it is (a large corpus
    takes minutes to read and learn subwords from), saying which width the run would get."""
    from numpy_transformer.translator import tasks

    corpus = tmp_path / "c.tsv"
    corpus.write_text("".join(f"a{i}\tb{i}\n" for i in range(30)))
    monkeypatch.setattr(tasks, "read_tsv", lambda *args: pytest.fail("the corpus was read"))
    assert main(["train", "--data", str(corpus), "--heads", "3", *flags, "--out", str(tmp_path / "run")]) == 2
    error = capsys.readouterr().err
    assert f"d_model must be divisible by h, got d_model=128, h=3: {widths} the width a " in error
    assert "give --d-model too" in error and not (tmp_path / "run").exists()
    ModelConfig(h=8).refuse_heads_for_corpus(15.0)  # 128 holds 8 heads: nothing to refuse
    ModelConfig(h=3, d_model=96).refuse_heads_for_corpus(15.0)  # a width given: checked as given


@pytest.mark.parametrize(("pairs", "units"), [(1_000, 1000), (10_000, 2000), (50_000, 4000), (300_000, 8000)])
def test_the_subword_vocabulary_grows_with_the_corpus(pairs, units):
    assert subword_vocab_size(pairs) == units


def test_the_choices_are_said_at_the_start_and_saved(tmp_path, capsys):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text(
        "".join(f"message {i} of {i % 7} files\tmessage {i} de {i % 7} fichiers\n" for i in range(300))
    )
    out = tmp_path / "run"
    assert _train("--data", str(corpus), "--steps", "2", "--d-ff", "64", "--out", str(out)) == 0
    said = capsys.readouterr().out
    assert "d_model 128, 2 layers, 4 heads, d_ff 64, dropout 0.3" in said
    assert "d_model, N, h, dropout, vocab_size chosen for 270 training pairs;" in said
    saved = read_config_file(out / "config.toml")
    assert saved["model"]["d_model"] == 128 and saved["model"]["dropout"] == 0.3
    assert saved["train"]["vocab_size"] == 1000 and saved["model"]["d_ff"] == 64
    assert (saved["train"]["optimizer"], saved["train"]["weight_decay"]) == ("adamw", DATA_WEIGHT_DECAY)


def test_a_fine_tune_has_a_learning_rate_and_warm_up_of_its_own(tmp_path):
    """train --from: a pretrained model is moved a little, from its first steps (FROM_LR,
    FROM_WARMUP), and never sized from the corpus (no vocab_size chosen); given values win."""
    tuned = TrainConfig(data="x.tsv", from_run=str(tmp_path)).resolve()
    assert (tuned.lr, tuned.warmup, tuned.vocab_size) == (FROM_LR, FROM_WARMUP, None)
    assert (TrainConfig(data="x.tsv").resolve().lr, TrainConfig(data="x.tsv").resolve().warmup) == (
        DATA_LR,
        WARMUP,
    )
    assert (TrainConfig(task="copy").resolve().lr, TrainConfig(task="copy").resolve().warmup) == (
        TASK_LR,
        WARMUP,
    )
    given = TrainConfig(data="x.tsv", from_run=str(tmp_path), lr=1e-4, warmup=30).resolve()
    assert (given.lr, given.warmup) == (1e-4, 30)


def test_a_new_model_on_a_corpus_trains_with_adamw_and_weight_decay(tmp_path):
    """--data: AdamW with DATA_WEIGHT_DECAY unless given; a fine-tune and a generated task: Adam, no
    decay; a decay given to Adam, chosen or by default, is refused with the flag and its value."""
    resolved = {
        "data": TrainConfig(data="x.tsv").resolve(),
        "from": TrainConfig(data="x.tsv", from_run=str(tmp_path)).resolve(),
        "task": TrainConfig(task="copy").resolve(),
        "data, adamw": TrainConfig(data="x.tsv", optimizer="adamw", weight_decay=0.0).resolve(),
        "from, adamw": TrainConfig(data="x.tsv", from_run=str(tmp_path), optimizer="adamw").resolve(),
        "task, adamw": TrainConfig(task="copy", optimizer="adamw", weight_decay=0.05).resolve(),
        "data, adam": TrainConfig(data="x.tsv", optimizer="adam").resolve(),
    }
    assert {name: (config.optimizer, config.weight_decay) for name, config in resolved.items()} == {
        "data": ("adamw", DATA_WEIGHT_DECAY),
        "from": ("adam", 0.0),
        "task": ("adam", 0.0),
        "data, adamw": ("adamw", 0.0),
        "from, adamw": ("adamw", 0.0),
        "task, adamw": ("adamw", 0.05),
        "data, adam": ("adam", 0.0),
    }
    with pytest.raises(
        ValueError, match=r"--weight-decay 0.1 applies to --optimizer adamw only, not to --optimizer adam$"
    ):
        TrainConfig(data="x.tsv", optimizer="adam", weight_decay=0.1).resolve()
    with pytest.raises(
        ValueError,
        match="--weight-decay 0.01 applies to --optimizer adamw only, not to Adam, this run's default",
    ):
        TrainConfig(task="copy", weight_decay=0.01).resolve()


def test_the_plateau_patience_is_checked_against_the_patience_a_corpus_run_gets(tmp_path):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("a b\tc d\n" * 5)
    with pytest.raises(ValueError, match="--plateau-patience 8 is not below --patience 8"):
        TrainConfig(data=str(corpus), plateau_cut=0.5, plateau_patience=8)


def test_a_fine_tune_given_by_a_relative_path_resumes_and_takes_a_default_model_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("pairs.tsv").write_text("".join(f"open file {i}\touvrir fichier {i}\n" for i in range(40)))
    small = ["--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16", "--vocab-size", "300"]
    assert _train("--data", "pairs.tsv", *small, "--steps", "2", "--out", "base") == 0
    assert _train("--data", "pairs.tsv", "--from", "base", "--steps", "2", "--out", "tuned") == 0
    assert _train("--data", "pairs.tsv", "--from", "base", "--steps", "4", "--out", "tuned", "--resume") == 0
    assert load_checkpoint(Path("tuned"))[1]["step"] == 4
    trainer = Trainer.create(TrainConfig(data="pairs.tsv", from_run="base", steps=1), ModelConfig())
    assert trainer.model.config.d_model == 16


def test_a_config_file_that_is_not_utf8_is_named_with_its_line(tmp_path, capsys):
    path = tmp_path / "latin1.toml"
    path.write_bytes("[train]\n# café\nsteps = 5\n".encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1\.toml:2: not UTF-8 text \(byte 0xe9\)"):
        read_config_file(path)


def test_an_endless_config_file_is_read_within_a_bound(tmp_path):
    with pytest.raises(ValueError, match=r"/dev/zero: larger than 1024 KiB"):
        read_config_file("/dev/zero")


def test_a_negative_seed_flag_is_refused_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as stopped:
        _train(*RUN, "--seed", "-5", "--out", str(tmp_path / "run"))
    assert stopped.value.code == 2
    assert "argument --seed: expected an integer >= 0, got -5" in capsys.readouterr().err


def test_the_saved_config_is_valid_toml_for_any_text(tmp_path):
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the package reads its TOML with tomli there (setup.cfg)
        import tomli as tomllib

    from numpy_transformer.translator.config import config_toml

    emoji = str(tmp_path / '😀 "quoted" back\\slash\ttab\x7f.tsv')
    undecodable = os.fsdecode(b"/tmp/caf\xe9.tsv")  # a path of Latin-1 bytes, surrogateescape'd
    train = TrainConfig(data=emoji)
    document = tomllib.loads(config_toml(ModelConfig(), train))
    assert document["train"]["data"] == emoji
    text = config_toml(ModelConfig(), TrainConfig(data=undecodable))
    document = tomllib.loads(text)  # valid TOML: the path TOML cannot hold is named in a comment
    assert "data" not in document["train"] and "caf\\xe9.tsv is not UTF-8 text" in text


def _corpus_file(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"w{i} x\tx w{i}\n" for i in range(40)))
    return path


def test_a_flag_beside_config_wins_over_the_file_settings_it_excludes(tmp_path, capsys):
    copy_run, numbers_run, budget_run = tmp_path / "copy", tmp_path / "numbers", tmp_path / "budget"
    assert _train(*RUN, "--out", str(copy_run)) == 0
    data = _corpus_file(tmp_path)
    # the copy run's file gives task = "copy": --data replaces it
    assert (
        _train("--config", str(copy_run / "config.toml"), "--data", str(data), "--out", str(tmp_path / "a"))
        == 0
    )
    assert _weights(tmp_path / "a")[1]["train"]["data"] == str(data)
    # a numbers run's file gives tokenizer = "word": --task copy takes it away with its task
    numbers = [*RUN[2:], "--task", "numbers-en-fr"]
    assert _train(*numbers, "--out", str(numbers_run)) == 0
    assert (
        _train("--config", str(numbers_run / "config.toml"), "--task", "copy", "--out", str(tmp_path / "b"))
        == 0
    )
    # a budget run's file gives time_budget: --steps replaces it
    sizes = RUN[2:-2]
    assert _train(*sizes, "--data", str(data), "--time-budget", "0.02", "--out", str(budget_run)) == 0
    assert "time_budget = " in (budget_run / "config.toml").read_text()
    assert (
        _train("--config", str(budget_run / "config.toml"), "--steps", "2", "--out", str(tmp_path / "c")) == 0
    )
    assert _weights(tmp_path / "c")[1]["train"]["steps"] == 2


def test_a_refusal_the_config_file_takes_part_in_names_the_file(tmp_path, capsys):
    path = tmp_path / "mine.toml"
    path.write_text('[train]\ntask = "copy"\n')
    assert _train(*RUN[2:], "--vocab-size", "300", "--config", str(path), "--out", str(tmp_path / "r")) == 2
    error = capsys.readouterr().err
    assert "--vocab-size applies to --data corpora only" in error and "--config " + str(path) in error


@pytest.mark.parametrize(
    "settings, refused",
    [
        ({"lr": 1e-3, "min_lr": 1.0}, "--min-lr 1 is above --lr 0.001: the cosine schedule would climb"),
        ({"min_lr": 0.01}, "--min-lr 0.01 is above --lr 0.001"),  # the task's default peak, chosen by resolve
        (
            {"plateau_cut": 0.5, "lr_floor": 1.0},
            "--lr-floor 1 is not below --lr 0.001: --plateau-cut 0.5 could never",
        ),
        ({"plateau_cut": 0.5, "lr": 1e-5}, "--lr-floor 1e-05 is not below --lr 1e-05"),  # the default floor
    ],
)
def test_rates_that_undo_the_schedule_are_refused(settings, refused):
    with pytest.raises(ValueError, match=refused.replace("(", r"\(")):
        TrainConfig(task="copy", **settings).resolve()


def test_rates_the_schedule_does_not_compare_are_kept():
    assert TrainConfig(task="copy", lr=1e-3, min_lr=1e-3).resolve().min_lr == 1e-3  # a flat cosine
    assert TrainConfig(task="copy", lr_floor=1.0).resolve().lr_floor == 1.0  # no --plateau-cut: no floor
    # noam's peak is d_model ** -0.5 * factor, not --lr
    assert TrainConfig(task="copy", schedule="noam", min_lr=1.0, plateau_cut=0.5, lr_floor=1.0).resolve()


def test_accumulated_micro_batches_count_in_the_pairs_drawn_at_once():
    with pytest.raises(
        ValueError, match="--accumulate 200000 with --batch-size 8 draws 1600000 pairs a step"
    ):
        TrainConfig(task="copy", batch_size=8, accumulate=200_000)
    assert TrainConfig(task="copy", batch_size=8, accumulate=125_000).accumulate == 125_000  # 1,000,000


@pytest.mark.parametrize("name, flag", [("data", "--data"), ("from_run", "--from")])
def test_an_empty_path_is_refused_not_read_as_the_working_directory(name, flag):
    with pytest.raises(ValueError, match=f"^{flag} is empty: expected a path"):
        TrainConfig(**{name: ""})


@pytest.mark.parametrize("tokenizer", ["marian", "char"])
def test_a_vocab_size_for_a_fine_tune_without_subwords_of_its_own_says_what_it_keeps(tokenizer):
    from numpy_transformer.translator.config import fine_tune_settings

    given = TrainConfig(data="pairs.tsv", from_run="imported", vocab_size=500)
    meta = {"model": {}, "task": {"tokenizer": tokenizer}, "src_vocab": ["a"] * 56, "tgt_vocab": ["b"] * 56}
    kind = "SentencePiece \\(Marian\\) " if tokenizer == "marian" else ""
    with pytest.raises(ValueError) as refused:
        fine_tune_settings(given, given.resolve(), None, meta)
    assert re.match(
        f"--vocab-size 500 cannot apply to a fine-tune of --from .*imported: it keeps that run's {tokenizer} "
        f"tokenizer and its {kind}vocabulary of 56 units$",
        str(refused.value),
    )


def test_a_name_that_moved_out_of_config_answers_with_its_new_place():
    import numpy_transformer.translator.config as config

    with pytest.raises(
        ImportError, match="translator.config.setting has moved: import numpy_transformer.settings"
    ):
        from numpy_transformer.translator.config import setting  # noqa: F401
    with pytest.raises(AttributeError, match="import numpy_transformer.presets.SMALL instead"):
        config.TASK_SIZES  # noqa: B018
    assert not hasattr(config, "no_such_setting")


def test_a_dev_file_of_ones_own_is_said_saved_and_read_again_by_resume_and_evaluate(tmp_path, capsys):
    corpus, dev = tmp_path / "pairs.tsv", tmp_path / "dev.tsv"
    corpus.write_text("".join(f"w{i} x{i % 7}\tv{i} y{i % 7}\n" for i in range(100)))
    dev.write_text("".join(f"w{i} x{i % 7}\tv{i} y{i % 7}\n" for i in range(1000, 1006)))
    out = tmp_path / "run"
    tiny = ["--tokenizer", "word", "--d-model", "16", "--layers", "1", "--heads", "2", "--d-ff", "16"]
    assert _train("--data", str(corpus), "--dev", str(dev), *tiny, "--steps", "2", "--out", str(out)) == 0
    said = capsys.readouterr().out
    assert (
        f"splits: 95 training pairs; 6 dev pairs from --dev {dev}; 5 test pairs (5%) held out of --data"
        in said
    )
    assert read_config_file(out / "config.toml")["train"]["dev"] == str(dev)
    assert _train("--resume", "--steps", "3", "--out", str(out)) == 0
    assert load_checkpoint(out)[1]["train"]["dev"] == str(dev)
    assert Trainer.resume(out).task.dev == [(f"w{i} x{i % 7}", f"v{i} y{i % 7}") for i in range(1000, 1006)]
    capsys.readouterr()
    assert _train("--resume", "--steps", "4", "--dev", str(corpus), "--out", str(out)) == 2
    assert f"--dev {str(corpus)!r} differs from the saved run's" in capsys.readouterr().err
    dev.write_text("w1 x1\tv1 y1\n")  # a dev file changed since is refused, not scored
    assert main(["evaluate", "--checkpoint", str(out)]) == 2
    assert (
        f"the run took its dev pairs from {dev}, but that file has changed since" in capsys.readouterr().err
    )


def test_the_help_says_how_the_splits_and_the_interval_of_evaluations_are_chosen(capsys):
    with pytest.raises(SystemExit) as exit_status:
        main(["train", "--help"])
    assert exit_status.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "its dev and test splits hold out 5 percent of its pairs each (drawn by --seed)" in said
    assert "--dev DEV dev pairs of your own" in said and "--test TEST test pairs of your own" in said
    assert "planned so that the run is evaluated 10 times at least: a tenth of --steps" in said


@pytest.mark.parametrize(
    "command, opening",
    [
        (["export"], "a run as a Hugging Face directory that transformers loads"),
        (["import"], "a pretrained Marian (OPUS-MT) translator"),
        (["plot", "curves"], "loss, dev BLEU and learning rate from a training log"),
        (["learn", "hint"], "the next hint for exercise NAME (one step further each time)"),
    ],
)
def test_each_commands_help_opens_with_what_it_does(command, opening, capsys):
    """A command's own --help says what the list of commands says of it (it gave the usage alone)."""
    with pytest.raises(SystemExit) as exit_status:
        main([*command, "--help"])
    assert exit_status.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    before_the_arguments = said.split("positional arguments:")[0].split("options:")[0]
    assert opening in before_the_arguments


def test_learn_hint_says_what_file_and_name_are(capsys):
    with pytest.raises(SystemExit):
        main(["learn", "hint", "--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "FILE the workbook's file: my_backprop.py" in said and "NAME an exercise's textbook name" in said


def _help_texts(parser: argparse.ArgumentParser) -> list[str]:
    """The --help of ``parser`` and of every command under it."""
    texts = [parser.format_help()]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                texts += _help_texts(command)
    return texts


def test_no_help_text_names_a_function_of_the_package():
    """A user reads how a default is chosen in words, not the name of the function that chooses it
    (the workbook's exercises are named by the backward the learner writes: those names are the learner's)."""
    package = Path(numpy_transformer.__file__).parent
    exercises = {exercise.backward for exercise in EXERCISES}
    functions = {
        node.name
        for source in package.rglob("*.py")
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    } - exercises
    for text in _help_texts(build_parser()):
        named = set(re.findall(r"(?<![-\w.])(\w*_\w*)", text)) & functions
        assert not named, f"a help text names {sorted(named)}:\n{text}"
