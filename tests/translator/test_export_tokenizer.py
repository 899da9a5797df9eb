"""The tokenizer of a byte-level BPE or character run exported as a ``tokenizer.json``, checked by
transformers' AutoTokenizer itself on every line of a corpus of accents, CJK, emoji, combining marks,
right-to-left scripts, odd white space and the special tokens' own text: the same tokens, the ids
the run reads (a unit the run's vocabulary lacks has an id of its own after the vocabulary's, whose
row in the exported model is <unk>'s: transformers computes the run's logits on it), the same text
decoded, and ``tokenizer.decode(generate(...)[0], skip_special_tokens=True)`` the run's translation;
with a Marian export (one vocabulary or two: the target's tokenizer in ``target/``) and a Pegasus
export. Export then ``import`` gives the run back: its settings, its weights bit for bit, its
tokenizer and vocabularies, and its translations. Labels for fine-tuning in transformers (the
target tokenizer's ids, then the end token, which it does not append) give the run's decoder input
and loss. Through the command line: a BPE run trained on a TSV of the corpus, exported as Marian and
as Pegasus, splits its own test split into its ids and translates it as ``translate`` does (greedy),
and its import translates alike. A word tokenizer, and a subword model whose units are numbered
otherwise than the library's trainer numbers them, are refused before anything is written.
Skipped, with the reason, only where transformers cannot be imported.
"""

import dataclasses
import json
import shutil
import sys
import unicodedata

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.model import loss_and_backward
from numpy_transformer.translator.batches import make_batch
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.corpora import printable
from numpy_transformer.translator.decoding import beam_search, greedy_decode
from numpy_transformer.translator.huggingface import ExportError, PretrainedError, export_pretrained
from numpy_transformer.translator.huggingface.tokenizer_json import from_huggingface
from numpy_transformer.translator.run.checkpoint import (
    load_checkpoint,
    load_for_inference,
    restore_model_and_task,
)
from numpy_transformer.translator.run.importing import import_run
from numpy_transformer.translator.tokenizers import (
    BYTE_UNITS,
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
)
from numpy_transformer.translator.translating import translate_ids
from numpy_transformer.translator.vocabulary import Vocab

torch = pytest.importorskip(
    "torch", reason="PyTorch and transformers are the oracle for the exported tokenizers"
)
transformers = pytest.importorskip(
    "transformers", reason="transformers is the oracle for the exported tokenizers"
)

BASE = [
    "The café is open.",
    "Crème brûlée à la carte, s'il vous plaît !",
    "Über den Straßen Zürichs fährt ein Bus.",
    "¿Dónde está la estación? ¡Allí!",
    "Ça coûte 12,50 € — ou 10 £.",
    "東京の天気は晴れです。",
    "我爱北京天安门。",
    "서울은 한국의 수도입니다.",
    "Ελληνικά: καλημέρα κόσμε",
    "Привет, как дела?",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया",
    "สวัสดีชาวโลก",
    "Party 🎉🙂 time!",
    "Family: 👩‍👩‍👧‍👦 and flags 🇫🇷🇯🇵",
    "Thumbs 👍🏽 up, hearts ❤️‍🔥",
    "e\u0301te\u0301 (combining acute), n\u0303 and a\u0308",
    "Z\u0351\u0364a\u0300\u0301l\u0303g\u0308o text",
    "tabs\tbetween\twords",
    "  leading and trailing spaces  ",
    "many     spaces   inside",
    "no\u00a0break\u00a0space and\u2009thin\u2009space",
    "ideographic\u3000space\u3000here",
    "zero\u200bwidth\u200bspace",
    "carriage\rreturn and\nnewline",
    "special tokens as text: <pad> <bos> <eos> <unk>",
    "<eos>",
    "math ∑ x² ≤ ∞ and → arrows ⇒",
    "https://example.org/path?q=1&r=2",
    "quotes “double” ‘single’ «guillemets»",
    "numbers 0123456789 and 3.14159",
    "ALL CAPS SENTENCE WITH ÉCLAT",
    "mixed 日本語 and English 混合",
    "ﬁ ligature, ½ fraction, Ⅻ numeral",
    "a",
    "",
    "\t",
    "😀",
    "end.",
]


def corpus():
    """About 240 lines: each base line as it is, in NFD (decomposed: more combining marks), upper
    case, wrapped in odd white space, and joined to the next."""
    lines = []
    for i, line in enumerate(BASE):
        lines += [line, unicodedata.normalize("NFD", line), line.upper(), f" \t{line}\u3000 "]
        lines += [f"{line} {BASE[(i + 1) % len(BASE)]}", f"{line}\n{BASE[(i + 7) % len(BASE)]}"]
    return lines


LINES = corpus()


def run_of(kind, shared, vocab_size=420):
    """A tokenizer learned (bpe) from the corpus's first half, and vocabularies as a run builds them
    from its training pairs (every byte's unit for BPE, then the units its text uses)."""
    pairs = [(LINES[i], LINES[i + 1]) for i in range(0, len(LINES) // 2, 2)]
    tokenizer = (
        BPETokenizer.train((text for pair in pairs for text in pair), vocab_size)
        if kind == "bpe"
        else CharTokenizer()
    )
    src, tgt = (set(BYTE_UNITS), set(BYTE_UNITS)) if kind == "bpe" else (set(), set())
    for source, target in pairs:
        src.update(tokenizer.tokenize(source))
        tgt.update(tokenizer.tokenize(target))
    vocabularies = (Vocab(src | tgt),) * 2 if shared else (Vocab(src), Vocab(tgt))
    return tokenizer, vocabularies


ARCHITECTURES = {
    "marian": {"norm_first": False, "final_norm": False, "positions": "split"},
    "pegasus": {"norm_first": True, "final_norm": True, "positions": "interleaved"},
}


def random_model(vocabularies, architecture, tied=True, dtype="float32"):
    source, target = vocabularies
    shared = source is target
    model = nt.build_transformer(
        len(source),
        len(target),
        160,  # the longest line's units
        16,
        d_model=16,
        N=2,
        h=2,
        d_ff=32,
        **ARCHITECTURES[architecture],
        tie_embeddings=tied,
        shared_vocab=shared,
        activation="silu",
        attention_bias=True,
        dtype=dtype,
        seed=3,
    )
    rng = np.random.default_rng(3)
    for _, parameter in model.named_parameters():
        parameter.data[...] += rng.standard_normal(parameter.data.shape).astype(parameter.data.dtype) * 0.3
    return model.eval()


CASES = [("marian", True), ("marian", False), ("pegasus", True), ("pegasus", False)]  # shared: tied too


def exported(tmp_path, architecture, shared, kind="bpe"):
    tokenizer, vocabularies = run_of(kind, shared)
    model = random_model(vocabularies, architecture, tied=shared)
    export_pretrained(model, vocabularies, tmp_path / "hf", tokenizer)
    return model, tokenizer, vocabularies


def source_offset(directory):
    """The first source id of a Pegasus export of two vocabularies in one table (0: the run's ids)."""
    return json.loads((directory / "config.json").read_text())["numpy_transformer"].get("source_offset", 0)


def theirs(directory, architecture):
    name = "MarianMTModel" if architecture == "marian" else "PegasusForConditionalGeneration"
    model, info = getattr(transformers, name).from_pretrained(directory, output_loading_info=True)
    assert not any(info.values()), info  # no weight missing, unexpected or mismatched
    return model.eval()


@pytest.mark.parametrize("architecture, shared", CASES)
def test_autotokenizer_splits_every_line_as_the_run(tmp_path, architecture, shared):
    """Tokens, ids and decoded text of every line, on both sides; the special tokens are the run's
    and no end token is appended (the run's sources have none)."""
    _, tokenizer, (source, target) = exported(tmp_path, architecture, shared)
    their_source = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    their_target = (
        their_source if shared else transformers.AutoTokenizer.from_pretrained(tmp_path / "hf" / "target")
    )
    assert not shared or not (tmp_path / "hf" / "target").exists()
    offset = source_offset(tmp_path / "hf")  # the source's ids after the target's: Pegasus of two
    if architecture == "pegasus" and not shared:  # after the target's rows: its vocabulary's and units'
        assert offset == len(
            json.loads((tmp_path / "hf" / "target" / "tokenizer.json").read_text())["model"]["vocab"]
        )
        assert offset > len(target)
    else:
        assert offset == 0
    for their, vocab, first in ((their_source, source, offset), (their_target, target, 0)):
        ids = vocab.ids
        assert (their.pad_token_id, their.bos_token_id, their.eos_token_id) == (
            ids.pad + first,
            ids.bos + first,
            ids.eos + first,
        )
        aliased = 0
        for line in LINES:
            tokens = tokenizer.tokenize(line)
            expected, unknown = vocab.encode(tokens)
            got = [i - first for i in their(line)["input_ids"]]
            assert their.convert_ids_to_tokens([i + first for i in got]) == tokens, line
            # a unit the vocabulary lacks: an id after it, whose row is <unk>'s (the run reads <unk>)
            assert [i if i < len(vocab) else ids.unk for i in got] == expected, line
            assert all(i >= len(vocab) for i, token in zip(got, tokens) if token in unknown), line
            aliased += bool(unknown)
            assert their.decode(
                [i + first for i in expected], skip_special_tokens=True
            ) == tokenizer.detokenize(vocab.decode(expected))
            if not unknown:
                assert got == expected and their.decode([i + first for i in got]) == line, line
        assert 0 < aliased < len(LINES) / 2, aliased  # both kinds of line are checked
    # the special tokens' ids are left out of a decoded text, <unk> written, as translate does
    ids = target.ids
    some = target.encode(tokenizer.tokenize("Party time"))[0]
    text = their_target.decode(
        [ids.bos, *some, ids.unk, *some, ids.eos, ids.pad, ids.pad], skip_special_tokens=True
    )
    assert text == tokenizer.detokenize(target.decode([ids.bos, *some, ids.unk, *some, ids.eos, ids.pad]))
    assert "<unk>" in text and "<eos>" not in text


def generate(hf, batch, pad, eos, beams, new_tokens):
    with torch.no_grad():
        return hf.generate(
            **batch,
            num_beams=beams,
            do_sample=False,
            max_length=new_tokens + 1,
            min_length=0,
            length_penalty=1.0,
            early_stopping=False,
            forced_eos_token_id=None,  # ours does not force </s> at the length limit
        )


@pytest.mark.parametrize("architecture, shared", CASES)
def test_transformers_translates_text_as_translate_does(tmp_path, architecture, shared):
    """The tokenizer's ids (units the run lacks included) give the run's logits, and decode(generate())
    gives the text of our greedy and four-beam translations."""
    model, tokenizer, (source, target) = exported(tmp_path, architecture, shared)
    hf = theirs(tmp_path / "hf", architecture)
    their_source = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    their_target = (
        their_source if shared else transformers.AutoTokenizer.from_pretrained(tmp_path / "hf" / "target")
    )
    unknown = {line: bool(source.encode(tokenizer.tokenize(line))[1]) for line in LINES if line.strip()}
    # six lines of units the run's vocabulary lacks (read as <unk>), six without
    lines = [line for line in unknown if unknown[line]][:6] + [line for line in unknown if not unknown[line]][
        :6
    ]
    assert len(lines) == 12
    batch = their_source(lines, return_tensors="pt", padding=True)
    ids = target.ids
    offset = source_offset(tmp_path / "hf")
    src = np.asarray(
        [
            [i - offset if i - offset < len(source) else ids.unk for i in row]
            for row in batch["input_ids"].tolist()
        ]
    )
    mask = (src != ids.pad)[:, None, None, :]
    tgt = np.full((len(lines), 5), ids.bos)
    tgt[:, 1:] = np.random.default_rng(0).integers(4, len(target), (len(lines), 4))
    causal = np.tril(np.ones((5, 5), bool))[None, None]
    ours = np.asarray(model.project(model.decode(model.encode(src, mask), mask, tgt, causal)))
    with torch.no_grad():
        logits = hf(**batch, decoder_input_ids=torch.tensor(tgt)).logits.numpy()
    np.testing.assert_allclose(logits[..., : len(target)], ours, rtol=1e-5, atol=1e-5 * np.abs(ours).max())
    assert np.isneginf(logits[..., len(target) :]).all()  # the aliases: never predicted
    encoded = [source.encode(tokenizer.tokenize(line))[0] for line in lines]
    for beams, strategy, options in (
        (1, greedy_decode, {}),
        (4, beam_search, {"beam_width": 4, "style": "transformers"}),
    ):
        outputs = translate_ids(model, encoded, 12, ids, strategy=strategy, **options)
        texts = [tokenizer.detokenize(target.decode(row)) for row in outputs]
        rows = generate(hf, batch, ids.pad, ids.eos, beams, 12)
        assert their_target.batch_decode(rows, skip_special_tokens=True) == texts, f"beams {beams}"
    assert len(set(texts)) > 1


@pytest.mark.parametrize("architecture, shared", CASES)
def test_fine_tuning_labels_are_the_target_tokenizers_ids_and_the_end_token(tmp_path, architecture, shared):
    """The target tokenizer appends no end token: transformers' models shift their ``labels`` right
    after the decoder's start token, so labels of its ids, the end token's id, -100 for padding and
    <unk>'s id for a unit the run's vocabulary lacks give the run's decoder input (<bos> y1..yn), its
    labels (y1..yn <eos>) and its loss. Such a unit's own id as a label would make the loss infinite
    (its logit is -inf)."""
    model, tokenizer, (source, target) = exported(tmp_path, architecture, shared)
    hf = theirs(tmp_path / "hf", architecture)
    their_source = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    their_target = (
        their_source if shared else transformers.AutoTokenizer.from_pretrained(tmp_path / "hf" / "target")
    )
    short = [line for line in dict.fromkeys(LINES) if line.strip() and len(tokenizer.tokenize(line)) < 16]
    lines = short[::3]  # a target's units and <eos> within the model's 16 positions
    pairs = list(zip(lines, lines[1:] + lines[:1]))
    texts = [target_text for _, target_text in pairs]
    ids = target.ids
    rows = their_target(texts)["input_ids"]
    assert not any(row and row[-1] == ids.eos for row in rows)  # no end token appended
    assert any(i >= len(target) for row in rows for i in row)  # a unit the run's vocabulary lacks
    width = max(map(len, rows)) + 1

    def labels_of(rows):  # each row, the end token, -100 for padding
        return torch.tensor([[*row, ids.eos] + [-100] * (width - len(row) - 1) for row in rows])

    labels = labels_of([[i if i < len(target) else ids.unk for i in row] for row in rows])
    src = [source.encode(tokenizer.tokenize_source(text))[0] for text, _ in pairs]
    batch = make_batch(src, [target.encode(tokenizer.tokenize(text))[0] for text in texts], ids)
    assert np.array_equal(np.where(labels.numpy() == -100, ids.pad, labels.numpy()), batch.tgt_out)
    module = getattr(transformers.models, architecture)
    shifted = getattr(module, f"modeling_{architecture}").shift_tokens_right(
        labels, ids.pad, hf.config.decoder_start_token_id
    )
    labelled = labels.numpy() != -100  # a padded position's input (the end token, a pad) is never read
    assert np.array_equal(shifted.numpy()[labelled], batch.tgt_in[labelled])
    inputs = their_source([text for text, _ in pairs], return_tensors="pt", padding=True)
    with torch.no_grad():
        theirs_loss = hf(**inputs, labels=labels).loss.item()
        assert torch.isinf(hf(**inputs, labels=labels_of(rows)).loss)  # the units' own ids as labels
    ours = loss_and_backward(
        model, batch.src, batch.tgt_in, batch.src_mask, batch.tgt_mask, batch.tgt_out, ids.pad
    )
    assert theirs_loss == pytest.approx(ours, rel=1e-5)


def assert_same_run(imported, original):
    """The imported run's checkpoint holds the original's settings, weights, tokenizer and
    vocabularies, and translates the corpus as it does (tokens and text)."""
    arrays, meta = load_checkpoint(imported)
    model, tokenizer, source, target = original
    assert meta["model"] == dataclasses.asdict(model.config)
    weights = {name[len("param/") :]: value for name, value in arrays.items() if name.startswith("param/")}
    state = model.state_dict()
    assert weights.keys() == state.keys()
    assert all(np.array_equal(weights[name], np.asarray(state[name])) for name in state)
    assert (meta["src_vocab"], meta["tgt_vocab"]) == (source.itos, target.itos)
    assert meta["task"]["tokenizer"] == tokenizer.name and "special_ids" not in meta["task"]
    assert meta["task"].get("tokenizer_json") == getattr(tokenizer, "serialized", None)
    back, splitter, back_source, back_target = load_for_inference(imported)
    lines = [line for line in LINES[::5] if line.strip()]
    encoded = [source.encode(tokenizer.tokenize(line))[0] for line in lines]
    assert [back_source.encode(splitter.tokenize_source(line))[0] for line in lines] == encoded
    ids = target.ids
    ours = translate_ids(model, encoded, 10, ids, strategy=beam_search, beam_width=3)
    assert translate_ids(back, encoded, 10, ids, strategy=beam_search, beam_width=3) == ours
    assert [splitter.detokenize(back_target.decode(row)) for row in ours] == [
        tokenizer.detokenize(target.decode(row)) for row in ours
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(
    "architecture, shared, kind",
    [*((a, s, "bpe") for a, s in CASES), *((a, s, "char") for a, s in CASES if a == "pegasus" or not s)],
)
def test_export_then_import_gives_the_run_back(tmp_path, architecture, shared, kind, dtype):
    tokenizer, vocabularies = run_of(kind, shared)
    model = random_model(vocabularies, architecture, tied=shared, dtype=dtype)
    export_pretrained(model, vocabularies, tmp_path / "hf", tokenizer)
    written, _ = import_run(tmp_path / "hf", tmp_path / "run")
    assert_same_run(written, (model, tokenizer, *vocabularies))


def test_a_character_tokenizer_json_reads_every_line_as_the_run(tmp_path):
    """Characters the vocabulary lacks are <unk> there as here: the ids are the run's exactly."""
    _, tokenizer, (source, target) = exported(tmp_path, "marian", False, kind="char")
    their = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    unknown = 0
    for line in LINES:
        expected, missing = source.encode(tokenizer.tokenize(line))
        assert their(line)["input_ids"] == expected, line
        unknown += bool(missing)
        if not missing:
            assert their.decode(expected) == line
    assert unknown > 0
    json.loads(
        (tmp_path / "hf" / "target" / "tokenizer.json").read_text()
    )  # the target's, of its own vocabulary
    their_target = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf" / "target")
    ids = target.encode(tokenizer.tokenize("Ça coûte 12,50 €"))[0]
    assert their_target.decode(ids) == tokenizer.detokenize(target.decode(ids))


def test_a_word_tokenizer_is_refused_before_anything_is_written(tmp_path, capsys):
    tokenizer = WordTokenizer()
    vocab = Vocab(tokenizer.tokenize(" ".join(BASE)))
    model = random_model((vocab, vocab), "marian")
    with pytest.raises(ExportError, match=r"word tokenizer has no exact tokenizer.json.*--no-tokenizer"):
        export_pretrained(model, (vocab, vocab), tmp_path / "hf", tokenizer)
    assert not (tmp_path / "hf").exists()
    data = tmp_path / "pairs.tsv"
    data.write_text(
        "".join(f"{line} {i}\t{line} {i}\n" for i, line in enumerate(["one two", "three four"] * 20))
    )
    run = tmp_path / "run"
    train = "train --tokenizer word --steps 1 --d-model 16 --layers 1 --heads 2 --d-ff 32 --no-progress"
    train += " --post-norm --no-final-norm"
    assert main([*train.split(), "--data", str(data), "--out", str(run)]) == 0
    capsys.readouterr()
    assert main(["export", str(run), "--to", str(tmp_path / "hf")]) == 2
    refused = capsys.readouterr()
    assert len(refused.err.strip().splitlines()) == 1 and "--no-tokenizer" in refused.err, refused.err
    assert "word tokenizer" in refused.err and not refused.out and not (tmp_path / "hf").exists()
    assert main(["export", str(run), "--to", str(tmp_path / "hf"), "--no-tokenizer"]) == 0
    assert sorted(path.name for path in (tmp_path / "hf").iterdir()) == [
        "config.json",
        "generation_config.json",
        "model.safetensors",
    ]


def test_units_numbered_otherwise_than_the_trainer_numbers_them_are_refused(tmp_path):
    """A subword model of the same merges whose units' ids are permuted splits every line as the
    trained one does, but an import could not give it back from tokenizer.json: refused, naming
    what, before anything is written."""
    trained, _ = run_of("bpe", shared=True)
    content = json.loads(trained.serialized)
    units = sorted(content["model"]["vocab"], key=content["model"]["vocab"].get)
    content["model"]["vocab"] = {unit: len(units) - 1 - i for i, unit in enumerate(units)}  # reversed
    permuted = BPETokenizer(json.dumps(content, ensure_ascii=False))
    assert all(permuted.tokenize(line) == trained.tokenize(line) for line in LINES)
    vocab = Vocab(set(BYTE_UNITS) | {unit for line in LINES for unit in permuted.tokenize(line)})
    model = random_model((vocab, vocab), "pegasus")
    assert export_pretrained(model, (vocab, vocab), tmp_path / "hf", trained)  # the trainer's own: written
    (tmp_path / "empty").mkdir()
    for directory in (tmp_path / "new", tmp_path / "empty"):
        with pytest.raises(ExportError) as refused:
            export_pretrained(model, (vocab, vocab), directory, permuted)
        message = str(refused.value)
        assert message.startswith("tokenizer: its subword units are not numbered as the tokenizers library's")
        assert "the alphabet by code point, then each merge's unit in order" in message
        assert "--no-tokenizer" in message
    assert not (tmp_path / "new").exists() and not any((tmp_path / "empty").iterdir())
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no staging left


def tsv_corpus(path):
    """The corpus's lines that a TSV line holds (no tab, no line break; stripped, as read_tsv strips
    them): each as it is, in lower case and in title case, translated to itself as it is (a run of
    two vocabularies has two that differ). A tiny model learns enough of it in 200 steps to translate the
    lines apart."""
    kept = dict.fromkeys(line.strip() for line in LINES if "\t" not in line and len(line.splitlines()) == 1)
    pairs = {variant: line for line in kept if line for variant in (line, line.lower(), line.title())}
    path.write_text("".join(f"{source}\t{target}\n" for source, target in pairs.items()), encoding="utf-8")


TINY = (
    "--tokenizer bpe --vocab-size 600 --steps 200 --lr 0.01 --warmup 5 --dropout 0 --batch-size 16 "
    "--d-model 16 --layers 1 --heads 2 --d-ff 32 --eval-every 1000 --show 0 --no-progress"
)
EXPORTS = {  # the docs' flags for each architecture's run
    "marian": "--post-norm --no-final-norm",  # two vocabularies: the target's tokenizer in target/
    "pegasus": "--shared-vocab --tie-embeddings",  # the default pre-norm blocks and final norms
}


def translated(capsys, run, lines, max_len):
    """``numpy-transformer translate``'s greedy translations of ``lines``, as it prints them."""
    capsys.readouterr()
    command = ["translate", "--checkpoint", str(run), "--strategy", "greedy", "--max-len", str(max_len)]
    assert main([*command, *lines]) == 0
    rows = [row.split("\t") for row in capsys.readouterr().out.split("\n")[:-1]]
    assert [source for source, _ in rows] == [printable(line) for line in lines]
    return [text for _, text in rows]


@pytest.mark.parametrize("architecture", EXPORTS)
def test_a_trained_bpe_run_exports_and_imports_through_the_command_line(tmp_path, capsys, architecture):
    """train --data --tokenizer bpe, export: AutoTokenizer splits every source of the run's own test
    split into the run's ids, and generate() on them gives translate's greedy text; import of the
    export translates as the run does."""
    tsv_corpus(tmp_path / "corpus.tsv")
    run, hf, back = tmp_path / "run", tmp_path / "hf", tmp_path / "back"
    train = ["train", *TINY.split(), *EXPORTS[architecture].split()]
    assert main([*train, "--data", str(tmp_path / "corpus.tsv"), "--out", str(run)]) == 0
    assert main(["export", str(run), "--to", str(hf)]) == 0
    model, task = restore_model_and_task(run, *load_checkpoint(run))  # the test split, as evaluate reads it
    tokenizer, source, target = task.tokenizer, task.src_vocab, task.tgt_vocab
    lines = [line for line, _ in task.test]
    assert len(lines) >= 8 and (source.itos == target.itos) == (architecture == "pegasus")
    their_source = transformers.AutoTokenizer.from_pretrained(hf)
    their_target = transformers.AutoTokenizer.from_pretrained(
        hf / "target" if architecture == "marian" else hf
    )
    assert (hf / "target" / "tokenizer.json").exists() == (architecture == "marian")
    # and four of the corpus's lines (not a TSV's: tabs, line breaks) of units the run's vocabulary lacks
    lacking = [
        line
        for line in dict.fromkeys(LINES)
        if line.strip() and max(their_source(line)["input_ids"]) >= len(source)
    ]
    assert len(lacking) >= 4
    lines += lacking[:4]
    encoded = []
    for line in lines:
        tokens = tokenizer.tokenize_source(line)
        got = their_source(line)["input_ids"]
        assert their_source.convert_ids_to_tokens(got) == tokens, line
        encoded.append(source.encode(tokens)[0])
        assert [i if i < len(source) else source.ids.unk for i in got] == encoded[-1], line
    max_len = 16
    texts = translated(capsys, run, lines, max_len)
    assert len(set(texts)) > 2 and all(texts), texts  # the lines are translated apart
    ids = target.ids
    hf_model = theirs(hf, architecture)
    rows = generate(
        hf_model, their_source(lines, return_tensors="pt", padding=True), ids.pad, ids.eos, 1, max_len
    )
    assert [printable(text) for text in their_target.batch_decode(rows, skip_special_tokens=True)] == texts
    ours = translate_ids(model.eval(), encoded, max_len, ids, strategy=greedy_decode)
    assert [printable(tokenizer.detokenize(target.decode(row))) for row in ours] == texts
    assert main(["import", str(hf), "--out", str(back)]) == 0
    assert translated(capsys, back, lines, max_len) == texts


def test_a_word_run_is_refused_without_the_tokenizers_library_and_a_char_run_names_what_needs_it(monkeypatch):
    from numpy_transformer.machine import MissingLibrary
    from numpy_transformer.translator.huggingface.tokenizer_json import (
        TokenizerExportError,
        huggingface_tokenizer,
    )

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # not installed: importing it raises ImportError
    vocab = Vocab(["a", "b"])
    with pytest.raises(TokenizerExportError, match="--no-tokenizer"):
        huggingface_tokenizer(WordTokenizer(), vocab)
    with pytest.raises(MissingLibrary, match=r"the char tokenizer's tokenizer\.json needs tokenizers"):
        huggingface_tokenizer(CharTokenizer(), vocab)


def test_an_import_of_two_vocabularies_without_the_target_folder_is_refused_naming_it(tmp_path):
    """A copy of an export's top-level files alone: the source's tokenizer is not the target's."""
    exported(tmp_path, "marian", False)
    shutil.rmtree(tmp_path / "hf" / "target")
    with pytest.raises(PretrainedError, match=r"hf/target: no such folder, but .*config.json gives separate "
                       r"source and target vocabularies \(numpy_transformer.shared_vocab false\)"):  # fmt: skip
        import_run(tmp_path / "hf", tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_an_export_of_separate_but_equal_vocabularies_writes_and_reads_the_target_folder(tmp_path):
    tokenizer, (source, _) = run_of("char", True)
    vocabularies = (source, Vocab.from_list(list(source.itos), source.ids))  # two objects, one list
    model = random_model(vocabularies, "marian", tied=False)
    assert not model.config.shared_vocab
    export_pretrained(model, vocabularies, tmp_path / "hf", tokenizer)
    assert (tmp_path / "hf" / "target" / "tokenizer.json").is_file()
    written, _ = import_run(tmp_path / "hf", tmp_path / "run")
    assert_same_run(written, (model, tokenizer, *vocabularies))


def test_a_tokenizer_saved_again_by_transformers_still_imports(tmp_path):
    """config.json's fingerprint of each tokenizer.json is of its vocabulary, not of its bytes: the
    files transformers' save_pretrained writes again (laid out otherwise) import, each vocabulary
    read back as it was."""
    _, _, (source, target) = exported(tmp_path, "marian", False)
    for folder in (tmp_path / "hf", tmp_path / "hf" / "target"):
        before = (folder / "tokenizer.json").read_bytes()
        transformers.AutoTokenizer.from_pretrained(folder).save_pretrained(folder)
        assert (folder / "tokenizer.json").read_bytes() != before
    written, _ = import_run(tmp_path / "hf", tmp_path / "run")
    meta = load_checkpoint(written)[1]
    assert (meta["src_vocab"], meta["tgt_vocab"]) == (source.itos, target.itos)


@pytest.mark.parametrize("kind", ["bpe", "char"])
def test_an_import_checks_config_json_against_the_tokenizer(tmp_path, kind):
    """config.json's own vocabulary size and its rows, each against tokenizer.json: refused, naming
    both files and both values, before anything is written."""
    _, _, (source, _) = exported(tmp_path, "marian", False, kind)
    config_path = tmp_path / "hf" / "config.json"
    original = json.loads(config_path.read_text())
    held = len(json.loads((tmp_path / "hf" / "tokenizer.json").read_text())["model"]["vocab"])
    config = json.loads(config_path.read_text())
    config["numpy_transformer"]["src_vocab_size"] = 5
    config_path.write_text(json.dumps(config))
    with pytest.raises(PretrainedError) as refused:
        import_run(tmp_path / "hf", tmp_path / "run")
    message = str(refused.value)
    assert message.startswith(f"{config_path}: numpy_transformer.src_vocab_size is 5, but ")
    assert f"hf/tokenizer.json holds {held} tokens" in message
    config_path.write_text(json.dumps(original))
    other = tmp_path / "other"
    exported(other, "marian", True, kind)  # a tokenizer of another vocabulary
    shutil.copy(other / "hf" / "tokenizer.json", tmp_path / "hf" / "tokenizer.json")
    with pytest.raises(PretrainedError) as refused:
        import_run(tmp_path / "hf", tmp_path / "run")
    message = str(refused.value)  # BPE: as many tokens, other units after the vocabulary's; char: fewer
    assert "hf/tokenizer.json" in message and "hf/config.json" in message
    if kind == "char":
        assert (
            f"config.json gives vocab_size {original['vocab_size']} (the rows of the source embedding"
            in message
        )
    assert not (tmp_path / "run").exists()
    assert len(source) == original["numpy_transformer"]["src_vocab_size"]


def test_a_load_checks_the_rows_after_the_vocabulary_against_config_json(tmp_path):
    """Read without the tokenizer (load_pretrained), the weights' rows after config.json's own
    vocabulary size must be the copies of <unk>'s an export writes there."""
    from numpy_transformer.translator.huggingface import load_pretrained

    model, _, _ = exported(tmp_path, "marian", False)
    assert (
        len(load_pretrained(tmp_path / "hf").src_embed.embedding.weight.data) == model.config.src_vocab_size
    )
    config_path = tmp_path / "hf" / "config.json"
    config = json.loads(config_path.read_text())
    config["numpy_transformer"]["src_vocab_size"] = 5
    config_path.write_text(json.dumps(config))
    refusal = (
        r"model.safetensors: tensor '.*encoder.embed_tokens.weight' has \d+ rows, but config.json's "
        r"numpy_transformer.src_vocab_size is 5, and its rows after 5 are not copies of <unk>'s"
    )
    with pytest.raises(PretrainedError, match=refusal):
        load_pretrained(tmp_path / "hf")


def edit_config(directory, **settings):
    """config.json of the export in ``directory`` with ``settings`` of its own (``top``: a dict of
    top-level keys) set, None removing one."""
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(settings.pop("top", {}))
    for key, value in settings.items():
        if value is None:
            del config["numpy_transformer"][key]
        else:
            config["numpy_transformer"][key] = value
    path.write_text(json.dumps(config))
    return config


def import_refused(tmp_path, refusal):
    """The import of ``tmp_path/hf`` refused with a message that ``refusal`` matches, nothing written."""
    with pytest.raises(PretrainedError, match=refusal):
        import_run(tmp_path / "hf", tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_tied_configuration_over_a_projection_of_its_own_is_refused_naming_it(tmp_path):
    """tie_word_embeddings edited to true over an untied Pegasus export: its lm_head.weight is a
    matrix of its own, which a tied model has no place for (transformers would drop it): refused;
    a copy of the tied embedding under lm_head.weight imports."""
    from safetensors.numpy import load_file, save_file

    exported(tmp_path, "pegasus", False)
    edit_config(tmp_path / "hf", top={"tie_word_embeddings": True})
    import_refused(
        tmp_path,
        r"hf/model.safetensors: tensor 'lm_head.weight' is a projection of its own \(not the values of "
        r"'model.shared.weight'\), but config.json's tie_word_embeddings is true",
    )
    model, tokenizer, vocabularies = exported(tmp_path / "tied", "marian", True)
    weights = tmp_path / "tied" / "hf" / "model.safetensors"
    tensors = load_file(str(weights))
    save_file({**tensors, "lm_head.weight": tensors["model.shared.weight"]}, str(weights))
    written, _ = import_run(tmp_path / "tied" / "hf", tmp_path / "tied-run")
    assert_same_run(written, (model, tokenizer, *vocabularies))
    save_file({**tensors, "lm_head.weight": tensors["model.shared.weight"] + 1}, str(weights))
    with pytest.raises(PretrainedError, match="tensor 'lm_head.weight' is a projection of its own"):
        import_run(tmp_path / "tied" / "hf", tmp_path / "tied-run-2")


def test_shared_vocab_true_over_two_vocabularies_is_refused_naming_the_key(tmp_path):
    exported(tmp_path, "pegasus", False)
    edit_config(tmp_path / "hf", shared_vocab=True)
    import_refused(
        tmp_path,
        r"hf/config.json: numpy_transformer.shared_vocab is true \(one vocabulary for the source and the "
        r"target\), but .*hf/tokenizer.json and .*hf/target/tokenizer.json hold two different vocabularies",
    )


def test_a_wrong_or_missing_config_key_of_a_pegasus_export_is_named_not_the_weights_or_tokenizer(tmp_path):
    """tgt_vocab_size counting the rows of the tokenizer's units, source_offset removed or moved, the
    two tokenizers swapped: each refused naming config.json's key (and which tokenizer is which)."""
    exported(tmp_path, "pegasus", False)
    hf = tmp_path / "hf"
    original = (hf / "config.json").read_text()
    config = json.loads(original)["numpy_transformer"]
    offset, own = config["source_offset"], config["tgt_vocab_size"]
    assert offset > own  # the target's tokenizer has units its vocabulary lacks: rows of -inf bias
    edit_config(hf, tgt_vocab_size=offset)
    with pytest.raises(PretrainedError) as refused:
        import_run(hf, tmp_path / "run")
    assert str(refused.value).startswith(
        f"{hf / 'config.json'}: gives a target vocabulary of {offset} (numpy_transformer.tgt_vocab_size"
    )
    assert str(refused.value).endswith(f"expected {own}")
    (hf / "config.json").write_text(original)
    edit_config(hf, source_offset=None)
    with pytest.raises(PretrainedError, match=r"hf/config.json: has no numpy_transformer.source_offset"):
        import_run(hf, tmp_path / "run")
    (hf / "config.json").write_text(original)
    edit_config(hf, source_offset=own)
    with pytest.raises(
        PretrainedError,
        match=rf"hf/tokenizer.json: its ids start at {offset}, but .*numpy_transformer.source_offset {own} gives "
        rf"the source's ids from {own}$",
    ):
        import_run(hf, tmp_path / "run")
    (hf / "config.json").write_text(original)
    source, target = (hf / "tokenizer.json").read_bytes(), (hf / "target" / "tokenizer.json").read_bytes()
    (hf / "tokenizer.json").write_bytes(target)
    (hf / "target" / "tokenizer.json").write_bytes(source)
    with pytest.raises(
        PretrainedError,
        match=rf"hf/tokenizer.json: its ids start at 0, .* from {offset}: it is the target's tokenizer",
    ):
        import_run(hf, tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_source_offset_of_a_marian_export_and_a_missing_vocabulary_size_are_named_as_such(tmp_path):
    """source_offset added to a Marian export was refused as out of its range while in it, and a
    vocabulary size removed from a Pegasus export was said to be None."""
    exported(tmp_path / "marian", "marian", False)
    edit_config(tmp_path / "marian" / "hf", source_offset=3)
    import_refused(
        tmp_path / "marian",
        r"hf/config.json: numpy_transformer.source_offset is 3, but model_type is 'marian': only a Pegasus "
        r"export \(both vocabularies in one embedding\) records it$",
    )
    exported(tmp_path, "pegasus", False)
    edit_config(tmp_path / "hf", src_vocab_size=None)
    import_refused(
        tmp_path,
        r"hf/config.json: numpy_transformer.src_vocab_size is missing, expected a whole number in \[1, ",
    )


@pytest.mark.parametrize("architecture", EXPORTS)
def test_a_source_vocabulary_size_counting_the_tokenizers_units_is_refused_naming_the_key(
    tmp_path, architecture
):
    """src_vocab_size raised to the source tokenizer's every token (its vocabulary's and the units
    after them, whose rows an export writes as copies of <unk>'s): refused naming the key, the rows
    and the size the export wrote, never imported as a larger vocabulary."""
    model, _, _ = exported(tmp_path, architecture, False)
    own = model.config.src_vocab_size
    held = len(json.loads((tmp_path / "hf" / "tokenizer.json").read_text())["model"]["vocab"])
    assert held > own  # the tokenizer has units the vocabulary lacks
    edit_config(tmp_path / "hf", src_vocab_size=held)
    import_refused(
        tmp_path,
        rf"hf/config.json: numpy_transformer.src_vocab_size is {held}, but in model.safetensors's "
        rf"'model.encoder.embed_tokens.weight' the source's rows {own} .. {held - 1} are copies of its row \d+, "
        rf"as an export writes <unk>'s after its source vocabulary for its tokenizer's units: expected {own}$",
    )


def test_marian_shared_embeddings_over_two_vocabularies_are_refused_naming_the_key(tmp_path):
    """share_encoder_decoder_embeddings true over a Marian export of two vocabularies: transformers
    would read one embedding for both; refused naming the key, not imported with the key ignored."""
    exported(tmp_path, "marian", False)
    edit_config(tmp_path / "hf", top={"share_encoder_decoder_embeddings": True})
    import_refused(
        tmp_path,
        r"hf/config.json: share_encoder_decoder_embeddings is true \(transformers would make the source's and "
        r"the target's embeddings one\), but numpy_transformer.shared_vocab is false: an export of two "
        r"vocabularies, each its own embedding; expected false$",
    )


def test_a_pegasus_export_without_its_settings_names_what_config_json_lacks(tmp_path):
    """The whole numpy_transformer object removed from a Pegasus export of two vocabularies: named in
    config.json, not blamed on the untouched tokenizer.json."""
    exported(tmp_path, "pegasus", False)
    offset = source_offset(tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    del config["numpy_transformer"]
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config))
    import_refused(
        tmp_path,
        rf"hf/config.json: has no numpy_transformer object, but .*hf/tokenizer.json's ids start at {offset}: a "
        r"Pegasus export of two vocabularies records there the first source id of its one embedding "
        r"\(numpy_transformer.source_offset\) and each vocabulary's own size; put the export's own config.json back$",
    )


def test_a_tokenizer_json_of_other_ids_or_too_few_tokens_is_named_in_words():
    word_level = {"type": "WordLevel", "vocab": {"a": 0, "b": 1}}
    with pytest.raises(
        ValueError, match=r"^its vocabulary holds 2 tokens, fewer than the model's vocabulary of 5$"
    ):
        from_huggingface({"model": word_level}, 5)
    with pytest.raises(ValueError, match=r"^its vocabulary's ids are not 0 \.\. 1, each once$"):
        from_huggingface({"model": {**word_level, "vocab": {"a": 1, "b": 2}}}, 2)
