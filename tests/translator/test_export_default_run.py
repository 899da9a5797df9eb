"""The run the README recommends, ``train --data pairs.tsv`` with every default (pre-norm blocks,
final norms, separate source and target vocabularies, untied embeddings, byte-level BPE), trained
once on a phrasebook and exported both ways; each engine translates the run's held-out pairs (its
dev and test splits, which it did not train on) from text, token for token as ``translate`` does:

- transformers: ``export`` writes it as Pegasus, both vocabularies in its one table (the source's
  ids after the target's) with a projection of its own; AutoTokenizer of the export splits the text
  into those ids, ``generate()`` gives translate's greedy translations and its four-beam ones of
  ``--beam-style transformers``, and AutoTokenizer of ``target/`` decodes them to translate's text;
  ``import`` of the export gives the run back, weights bit for bit.
- CTranslate2: ``export --ctranslate2``, and the translating guide's recipe, run where
  numpy_transformer cannot be imported (``ctranslate2`` and ``tokenizers`` alone), gives translate's
  beam search of ``--beam-style transformers --early-stopping true``, and with beam_size=1
  ``translate --strategy greedy``.

Each is skipped, with the reason, where its library cannot be imported.
"""

import dataclasses
import json

import numpy as np
import pytest
from test_ctranslate2 import phrasebook, the_guides_translations, translate_command, up_to_end

from numpy_transformer.translator.cli import main
from numpy_transformer.translator.corpora import printable
from numpy_transformer.translator.decoding import beam_search
from numpy_transformer.translator.run.checkpoint import load_checkpoint, restore_model_and_task
from numpy_transformer.translator.tokenizers import encode_sentences
from numpy_transformer.translator.translating import translate_ids

TRAIN = (  # tiny and short, every architecture setting the default's
    "train --vocab-size 300 --steps 300 --lr 0.01 --warmup 5 --dropout 0 --batch-size 16 "
    "--d-model 16 --layers 1 --heads 2 --d-ff 32 --eval-every 1000 --show 0 --no-progress"
)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    """The trained run's directory, its model and its task (the held-out pairs, the tokenizer and
    the vocabularies, as evaluate reads them)."""
    base = tmp_path_factory.mktemp("default")
    phrasebook(base / "pairs.tsv")
    run = base / "run"
    assert main([*TRAIN.split(), "--data", str(base / "pairs.tsv"), "--out", str(run)]) == 0
    model, task = restore_model_and_task(run, *load_checkpoint(run))
    config = model.config
    assert (config.norm_first, config.final_norm, config.shared_vocab, config.tie_embeddings) == (
        True,
        True,
        False,
        False,
    )
    assert task.tokenizer.name == "bpe" and task.src_vocab.itos != task.tgt_vocab.itos
    return run, model.eval(), task


def held_out(task):
    lines = [line for line, _ in task.dev + task.test]  # the pairs the run kept back
    assert len(lines) >= 8
    return lines


def test_transformers_translates_the_default_run_as_translate_does(default_run, tmp_path, capsys):
    torch = pytest.importorskip("torch", reason="PyTorch and transformers are the oracle for the export")
    transformers = pytest.importorskip("transformers", reason="transformers is the oracle for the export")
    run, model, task = default_run
    hf = tmp_path / "hf"
    assert main(["export", str(run), "--to", str(hf)]) == 0
    said = capsys.readouterr().out
    assert "as Pegasus (PegasusForConditionalGeneration)" in said and f"{hf}/target" in said
    source, target, ids = task.src_vocab, task.tgt_vocab, task.tgt_vocab.ids
    config = json.loads((hf / "config.json").read_text())
    offset = config["numpy_transformer"]["source_offset"]
    assert config["tie_word_embeddings"] is False and offset >= len(target)
    their, info = transformers.PegasusForConditionalGeneration.from_pretrained(hf, output_loading_info=True)
    assert not any(info.values()), info  # no weight missing, unexpected or mismatched
    their_source = transformers.AutoTokenizer.from_pretrained(hf)
    their_target = transformers.AutoTokenizer.from_pretrained(hf / "target")
    lines = held_out(task)
    encoded = encode_sentences(lines, task.tokenizer, source)
    batch = their_source(lines, return_tensors="pt", padding=True)
    for row, mask, expected in zip(batch["input_ids"].tolist(), batch["attention_mask"].tolist(), encoded):
        got = [i - offset for i, kept in zip(row, mask) if kept]
        assert [
            i if i < len(source) else ids.unk for i in got
        ] == expected  # the source's ids, after the target's
    max_len = 20
    for beams, flags, options in (
        (1, ["--strategy", "greedy"], {}),
        (
            4,
            ["--beam-style", "transformers"],
            {"strategy": beam_search, "beam_width": 4, "style": "transformers"},
        ),
    ):
        ours = translate_ids(model, encoded, max_len, ids, **options)
        with torch.no_grad():
            rows = their.generate(
                **batch,
                num_beams=beams,
                do_sample=False,
                max_length=max_len + 1,  # the start token and max_len more, as translate's --max-len
                length_penalty=1.0,
                early_stopping=False,  # generate()'s default, as translate's for --beam-style transformers
                forced_eos_token_id=None,  # translate does not force </s> at the length limit
            ).tolist()
        assert [up_to_end(row[1:], ids.pad, ids.eos) for row in rows] == [
            up_to_end(row, ids.pad, ids.eos) for row in ours
        ], beams
        assert sum(ids.eos in row for row in ours) >= len(lines) // 2, "the run learned little"
        texts = [printable(text) for text in their_target.batch_decode(rows, skip_special_tokens=True)]
        assert len(set(texts)) > 2, texts  # the lines are translated apart
        command = ["--max-len", str(max_len), *flags]
        assert texts == translate_command(capsys, run, lines, *command), beams
    assert main(["import", str(hf), "--out", str(tmp_path / "back")]) == 0
    arrays, meta = load_checkpoint(tmp_path / "back")
    state = model.state_dict()
    assert meta["model"] == dataclasses.asdict(model.config)
    assert (meta["src_vocab"], meta["tgt_vocab"]) == (source.itos, target.itos)
    assert {name[len("param/") :] for name in arrays if name.startswith("param/")} == set(state)
    assert all(np.array_equal(arrays[f"param/{name}"], np.asarray(value)) for name, value in state.items())


def test_ctranslate2_translates_the_default_run_from_text_without_this_package(default_run, tmp_path, capsys):
    """export --ctranslate2 (the target's tokenizer in target/), and the guide's recipe run where
    numpy_transformer cannot be imported."""
    pytest.importorskip(
        "ctranslate2", reason="CTranslate2 serves the exported models (pip install ctranslate2)"
    )
    pytest.importorskip("tokenizers", reason="the exported tokenizer is read by the tokenizers library")
    run, model, task = default_run
    out = tmp_path / "runs" / "messages-ct2"  # the guide's directory
    out.parent.mkdir()
    assert main(["export", str(run), "--to", str(out), "--ctranslate2"]) == 0
    said = capsys.readouterr().out
    assert "target/tokenizer.json" in said and "tokenizers.Tokenizer.from_file" in said
    lines = held_out(task)
    assert f"max_decoding_length={model.config.tgt_seq_len}" in said
    assert json.loads((out / "config.json").read_text())["max_decoding_length"] == model.config.tgt_seq_len
    target, ids = task.tgt_vocab, task.tgt_vocab.ids
    encoded = encode_sentences(lines, task.tokenizer, task.src_vocab)
    for beams, flags in (
        (4, ["--beam-style", "transformers", "--early-stopping", "true"]),
        (1, ["--strategy", "greedy"]),
    ):
        tokens, texts = the_guides_translations(tmp_path, lines, beams)
        options = {"beam_width": beams, "style": "transformers", "early_stopping": True}
        ours = translate_ids(
            model, encoded, None, ids, **({"strategy": beam_search, **options} if beams > 1 else {})
        )
        assert tokens == [[target.itos[i] for i in up_to_end(row, ids.pad, ids.eos)] for row in ours], beams
        assert sum(row[-1:] == ["<eos>"] for row in tokens) >= len(lines) // 2, "the run learned little"
        assert len(set(texts)) > 2, texts  # the lines are translated apart
        assert [printable(text) for text in texts] == translate_command(capsys, run, lines, *flags), beams
