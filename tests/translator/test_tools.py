"""The shape trace and the pictures."""

import io
import re
import sys

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer import layers
from numpy_transformer.trace import shape_trace
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.training import Trainer


def test_shape_trace_follows_the_seed_diagram():
    model = nt.build_transformer(2000, 1000, 8, 8, N=1)
    src = np.ones((10, 8), dtype=int)
    stream = io.StringIO()
    with shape_trace(model, file=stream) as trace:
        logits = model.forward(src, src, nt.make_src_mask(src, 0), nt.make_tgt_mask(src, 0))
        model.backward(np.ones_like(logits))
    text = stream.getvalue()
    assert trace.lines == text.splitlines()
    assert "src_embed.forward -> (10, 8, 512)" in text
    assert "split into 8 heads (10, 8, 8, 64) -> scores (10, 8, 8, 8) -> concat (10, 8, 512)" in text
    assert "decoder.layers.0.cross_attention_block.backward" in text
    assert "projection_layer.forward -> (10, 8, 1000)" in text
    # off again after the block: the classes carry their own methods
    assert layers.MultiHeadAttentionBlock.forward.__module__ == "numpy_transformer.layers"
    assert not hasattr(layers.MultiHeadAttentionBlock.forward, "__wrapped__")


def test_shape_trace_shows_the_latent_for_mla():
    model = nt.build_transformer(50, 50, 8, 8, d_model=32, N=1, h=4, d_ff=64, attention="mla")
    src = np.ones((2, 5), dtype=int)
    with shape_trace(model, file=None) as trace:
        model.forward(src, src, None, None)
    assert any("latent (2, 5, 8) -> keys, values" in line for line in trace.lines)


def is_png(path):
    data = path.read_bytes()
    return data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 2000


@pytest.fixture(scope="module")
def copy_run(tmp_path_factory):
    """A tiny run of the copy task, 40 steps."""
    out = tmp_path_factory.mktemp("run")
    trainer = Trainer.create(
        TrainConfig(task="copy", steps=40, eval_every=20, eval_size=10, log_every=10),
        {"d_model": 16, "N": 2, "h": 2, "d_ff": 32},
    )
    trainer.fit(out, progress=False)
    return out


@pytest.fixture(scope="module")
def trained_run(copy_run):
    pytest.importorskip(
        "matplotlib", reason="pictures need matplotlib: pip install 'numpy_transformer[plot]'"
    )
    return copy_run


def test_attention_maps_picture(trained_run, tmp_path):
    assert (
        main(
            [
                "plot",
                "attention",
                "--checkpoint",
                str(trained_run),
                "--out",
                str(tmp_path / "attn.png"),
                "abcde",
            ]
        )
        == 0
    )
    for suffix in ("encoder", "decoder", "cross"):
        assert is_png(tmp_path / f"attn-{suffix}.png")


def test_training_curves_picture(trained_run, tmp_path):
    assert main(["plot", "curves", "--run", str(trained_run), "--out", str(tmp_path / "curves.png")]) == 0
    assert is_png(tmp_path / "curves.png")


def test_gradient_flow_picture(trained_run, tmp_path):
    assert main(["plot", "gradients", "--out", str(tmp_path / "default.png"), "--layers", "3"]) == 0
    assert is_png(tmp_path / "default.png")
    assert (
        main(["plot", "gradients", "--checkpoint", str(trained_run), "--out", str(tmp_path / "run.png")]) == 0
    )
    assert is_png(tmp_path / "run.png")


def test_a_picture_into_a_directory_or_without_an_extension_is_where_it_says(trained_run, tmp_path, capsys):
    folder = tmp_path / "pictures"
    folder.mkdir()
    assert main(["plot", "curves", "--run", str(trained_run), "--out", str(folder)]) == 0
    assert is_png(folder / "curves.png") and not (tmp_path / "pictures.png").exists()
    assert main(["plot", "gradients", "--layers", "2", "--out", str(tmp_path / "flow")]) == 0
    assert is_png(tmp_path / "flow.png")
    assert capsys.readouterr().out.splitlines() == [
        f"wrote {folder / 'curves.png'}",
        f"wrote {tmp_path / 'flow.png'}",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["curves", "--out", "{tmp}/x.txt"],
            r"--out .*x.txt: .txt is not a picture format matplotlib writes",
        ),
        (["gradients", "--out", "{tmp}/model.npz"], r"--out .*model.npz: .npz is not a picture format"),
        (["gradients", "--layers", "1000000"], r"--layers 1000000: at most 48"),
        (
            ["gradients", "--checkpoint", "{run}", "--layers", "3"],
            r"--layers 3 cannot apply with --checkpoint",
        ),
        (["attention", "--checkpoint", "{run}", " "], r"sentence 1 of the arguments is empty"),
        (
            ["attention", "--checkpoint", "{run}", "a" * 500],
            r"sentence 1 of the arguments .* longer than the",
        ),
    ],
)
def test_plot_refuses_what_cannot_apply_in_one_line_before_any_work(
    trained_run, tmp_path, capsys, argv, message
):
    argv = [arg.replace("{tmp}", str(tmp_path)).replace("{run}", str(trained_run)) for arg in argv]
    assert main(["plot", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(message, err), err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_gradient_norms_cover_every_stage():
    from numpy_transformer.translator.plots import gradient_norms
    from numpy_transformer.translator.tasks import SymbolTask

    task = SymbolTask("copy")
    model = nt.build_transformer(
        len(task.src_vocab), len(task.tgt_vocab), 16, 16, d_model=16, N=2, h=2, d_ff=32
    )
    norms = gradient_norms(model, task.train_batch(0, 8))
    assert list(norms) == [
        "src_embed",
        "encoder.layers.0",
        "encoder.layers.1",
        "encoder.norm",
        "tgt_embed",
        "decoder.layers.0",
        "decoder.layers.1",
        "decoder.norm",
        "projection_layer",
    ]
    assert all(value > 0 for value in norms.values())


def test_plots_without_matplotlib_say_how_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main(["plot", "gradients", "--out", str(tmp_path / "g.png")]) == 2
    assert "pip install 'numpy_transformer[plot]'" in capsys.readouterr().err


def test_curves_from_a_missing_log(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    assert main(["plot", "curves", "--run", str(tmp_path / "none"), "--out", str(tmp_path / "c.png")]) == 2
    assert "no such training log" in capsys.readouterr().err


def test_curves_from_a_log_whose_record_lacks_a_field_say_which(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 1, "loss": 2.0, "lr": 0.001}\n{"step": 2, "loss": 1.5}\n')
    assert main(["plot", "curves", "--run", str(tmp_path), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert "a training record without a number for lr" in err and "train writes step, loss, lr in each" in err
    assert "Traceback" not in err and not (tmp_path / "c.png").exists()


def test_subwords_are_shown_as_their_text_a_space_as_a_mark():
    pytest.importorskip("tokenizers")
    from numpy_transformer.translator.tokenizers import (
        SPACE_MARK,
        BPETokenizer,
        CharTokenizer,
        encode_sentences,
    )
    from numpy_transformer.translator.vocabulary import Vocab

    tokenizer = BPETokenizer.train(["Datei öffnen", "die Datei öffnen", "Could not save"] * 20, 300)
    tokens = tokenizer.tokenize("die Datei öffnen\x1b")
    assert "Ġ" in "".join(tokens) and "Ã¶" in "".join(tokens)  # the units are byte-level characters
    shown = tokenizer.shown(tokens)
    assert "".join(shown) == f"die{SPACE_MARK}Datei{SPACE_MARK}öffnen\x1b"  # ESC is printable's to escape
    assert not any("Ġ" in token or "Ã" in token for token in shown)
    assert tokenizer.shown(["<bos>", "<eos>"]) == ["<bos>", "<eos>"]
    assert tokenizer.shown(["Ã"]) == ["\\xc3"]  # half of ö: its byte, escaped
    assert CharTokenizer().shown(list("a b")) == ["a", SPACE_MARK, "b"]
    with pytest.warns(UserWarning, match=f"mapped to <unk>: \\['{SPACE_MARK}öffnen'\\]"):
        encode_sentences(["Datei öffnen"], tokenizer, Vocab(tokenizer.tokenize("Datei")))


def test_the_attention_picture_is_of_the_translation_the_search_finds(trained_run):
    from numpy_transformer.translator.decoding import beam_search
    from numpy_transformer.translator.plots import attention_maps
    from numpy_transformer.translator.run.checkpoint import load_for_inference
    from numpy_transformer.translator.translating import Decoding, translate_ids

    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(trained_run)
    src_ids, _ = src_vocab.encode(tokenizer.tokenize_source("abcde"))
    for decoding in (Decoding(), Decoding(beam_search, {"beam_width": 3, "length_penalty": 0.5})):
        (translated,) = translate_ids(
            model, [src_ids], None, tgt_vocab.ids, strategy=decoding.search, **decoding.settings
        )
        target, maps = attention_maps(model, src_ids, ids=tgt_vocab.ids, decoding=decoding)
        assert target == [tgt_vocab.ids.bos, *translated[: translated.index(tgt_vocab.ids.eos) + 1]]
        assert [layer.shape[1:] for layer in maps["cross-attention"]] == [(len(target), len(src_ids))] * 2


def test_plot_attention_decodes_as_translate_does_and_every_argument_has_help(trained_run, tmp_path, capsys):
    import argparse

    from numpy_transformer.translator.cli import build_parser

    plot = next(
        action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
    ).choices["plot"]
    pictures = next(action for action in plot._actions if isinstance(action, argparse._SubParsersAction))
    for name, parser in pictures.choices.items():
        unexplained = [a.dest for a in parser._actions if a.dest != "help" and not a.help]
        assert unexplained == [], f"plot {name}: {unexplained} without help"
    argv = ["--checkpoint", str(trained_run), "abcde"]
    assert (
        main(["plot", "attention", *argv, "--strategy", "beam", "--beam-width", "3", "--out", str(tmp_path)])
        == 0
    )
    assert main(["plot", "attention", *argv, "--temperature", "2", "--out", str(tmp_path)]) == 2
    assert "--temperature 2.0 applies to --strategy sample only" in capsys.readouterr().err


def test_a_run_directory_given_as_checkpoint_says_which_file_was_read(trained_run, capsys):
    assert main(["translate", "--checkpoint", str(trained_run), "abc"]) == 0
    said = capsys.readouterr().err.splitlines()
    assert said == [
        f"numpy-transformer translate: note: read {trained_run / 'model.npz'}, the run's last checkpoint; "
        f"{trained_run / 'best.npz'} is the best on dev"
    ]
    assert main(["translate", "--checkpoint", str(trained_run / "best.npz"), "abc"]) == 0
    assert capsys.readouterr().err == ""  # the file named is the file read


@pytest.mark.parametrize("style", ["default", "transformers"])
def test_translate_asks_beam_search_for_each_early_stopping(copy_run, capsys, style):
    """--early-stopping true, false (and never, of --beam-style transformers) is beam_search's
    early_stopping; without it, the style's own default (True; False, generate()'s)."""
    from numpy_transformer.translator.decoding import beam_search
    from numpy_transformer.translator.run.checkpoint import load_for_inference
    from numpy_transformer.translator.tokenizers import encode_sentences
    from numpy_transformer.translator.translating import translate_ids

    model, tokenizer, src_vocab, tgt_vocab = load_for_inference(copy_run)
    lines = ["abcde", "edcba", "aabbccdd", "b", "cacbcbc", "dddd"]
    src_ids = encode_sentences(lines, tokenizer, src_vocab)
    flags = ["--checkpoint", str(copy_run), "--strategy", "beam", "--beam-style", style, "--max-len", "9"]
    stops = {None: style == "default", "true": True, "false": False}
    if style == "transformers":
        stops["never"] = "never"
    for word, early_stopping in stops.items():
        chosen = [] if word is None else ["--early-stopping", word]
        assert main(["translate", *flags, *chosen, *lines]) == 0
        printed = [row.split("\t")[1] for row in capsys.readouterr().out.splitlines()]
        options = {"beam_width": 4, "style": style, "early_stopping": early_stopping}
        ours = translate_ids(model, src_ids, 9, tgt_vocab.ids, strategy=beam_search, **options)
        assert printed == [tokenizer.detokenize(tgt_vocab.decode(row)) for row in ours], word


@pytest.mark.parametrize(
    "flags, refusal",
    [
        (["--early-stopping", "never"], "--early-stopping never applies to --beam-style transformers only"),
        (
            ["--strategy", "greedy", "--early-stopping", "true"],
            "--early-stopping true applies to --strategy beam only, not to --strategy greedy",
        ),
        (["--early-stopping", "yes"], "argument --early-stopping: invalid choice: 'yes'"),
    ],
)
def test_an_early_stopping_that_cannot_apply_is_refused_in_one_line(copy_run, capsys, flags, refusal):
    for command in ("translate", "evaluate"):
        argv = [command, "--checkpoint", str(copy_run), "--strategy", "beam", *flags]
        try:
            code = main([*argv, "abc"] if command == "translate" else argv)
        except SystemExit as refused:  # the parser's own refusal
            code = refused.code
        assert code == 2
        [line] = capsys.readouterr().err.strip().splitlines()
        assert refusal in line, line
