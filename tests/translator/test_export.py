"""`numpy-transformer export`: a model of this package's as a Hugging Face directory, checked by the
tools themselves. A post-norm model without final norms goes out as Marian: transformers'
MarianMTModel loads the export (no weight missing or left over) and gives our logits (float32,
relative 1e-5) and our greedy and beam-search outputs token for token, a model of interleaved
positions too (exported with the model dimension reordered, which this package's own logits check
first); ``import`` (load_pretrained, import_run) reads every setting and every weight back bit for
bit (a model of interleaved positions: as split positions and the reordered weights); an imported
OPUS-MT run's tokenizer goes out as Marian's files, which transformers' MarianTokenizer reads to our
ids. A pre-norm model with final norms, one vocabulary and tied embeddings goes out as Pegasus:
PegasusForConditionalGeneration loads it and gives our logits, and on a trained run our greedy and
beam-search outputs. Models neither represents are refused, naming what, before anything is
written. The transformers tests are skipped, with the reason, only where it cannot be imported.
"""

import dataclasses
import itertools
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from marian_files import PAIRS, write_model

import numpy_transformer as nt
from numpy_transformer.machine import MissingLibrary
from numpy_transformer.model import build_from_config
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.decoding import beam_search, greedy_decode
from numpy_transformer.translator.huggingface import (
    ExportError,
    MarianTokenizer,
    PretrainedError,
    export_pretrained,
    load_pretrained,
)
from numpy_transformer.translator.huggingface.weights import (
    exported_state,
    permuted_state,
    residual_permutation,
)
from numpy_transformer.translator.run.checkpoint import load_for_inference
from numpy_transformer.translator.run.importing import import_run
from numpy_transformer.translator.tokenizers import CharTokenizer
from numpy_transformer.translator.vocabulary import SpecialIds, Vocab

SIZES = {"d_model": 16, "N": 2, "h": 2, "d_ff": 32}
MARIAN = {"norm_first": False, "final_norm": False, "positions": "split"}


def vocab(size):
    return Vocab.from_list(["<pad>", "<bos>", "<eos>", "<unk>"] + [f"w{i}" for i in range(size - 4)])


def random_model(tied, shared, activation, bias, padding_idx=None, dtype="float32", seed=1, **options):
    """A model of random weights away from their initial values (every bias and norm matters)."""
    source, target = (20, 20) if shared else (20, 23)
    model = nt.build_transformer(
        source,
        target,
        30,
        25,
        **SIZES,
        **{**MARIAN, **options},
        tie_embeddings=tied,
        shared_vocab=shared,
        activation=activation,
        attention_bias=bias,
        padding_idx=padding_idx,
        dtype=dtype,
        seed=seed,
    )
    rng = np.random.default_rng(seed)
    for _, parameter in model.named_parameters():
        parameter.data[...] += rng.standard_normal(parameter.data.shape).astype(parameter.data.dtype) * 0.2
    vocabularies = (vocab(source), vocab(source)) if shared else (vocab(source), vocab(target))
    return model.eval(), vocabularies


COMBINATIONS = list(itertools.product((True, False), (True, False), ("relu", "silu"), (True, False)))


def assert_same_model(back, model):
    assert back.config == model.config
    ours, theirs = model.state_dict(), back.state_dict()
    assert ours.keys() == theirs.keys()
    differ = [name for name in ours if not np.array_equal(ours[name], theirs[name])]
    assert not differ, f"weights {differ} changed"


@pytest.mark.parametrize("positions", ["split", "interleaved"])
@pytest.mark.parametrize("tied, shared, activation, bias", COMBINATIONS)
def test_export_then_import_is_the_identity(tmp_path, tied, shared, activation, bias, positions):
    model, vocabularies = random_model(
        tied, shared, activation, bias, padding_idx=None if bias else 0, positions=positions
    )
    export_pretrained(model, vocabularies, tmp_path / "hf")
    assert_same_model(load_pretrained(tmp_path / "hf"), model)


def test_float64_and_another_padding_index_round_trip(tmp_path):
    model, vocabularies = random_model(True, True, "silu", True, padding_idx=3, dtype="float64")
    export_pretrained(model, vocabularies, tmp_path / "hf")
    assert_same_model(load_pretrained(tmp_path / "hf"), model)  # the export's dtype, by default
    assert load_pretrained(tmp_path / "hf", dtype="float32").config.dtype == "float32"


PEGASUS = {"norm_first": True, "final_norm": True}


EMBEDDINGS = [(True, True), (True, False), (False, True), (False, False)]  # tied, shared


@pytest.mark.parametrize("positions", ["split", "interleaved"])
@pytest.mark.parametrize(
    "activation, bias", list(itertools.product(("relu", "silu", "gelu_tanh"), (True, False)))
)
@pytest.mark.parametrize("tied, shared", EMBEDDINGS)
def test_a_pegasus_export_imports_as_the_same_model(tmp_path, tied, shared, activation, bias, positions):
    """Of one table (tied, shared) or of both vocabularies in one (the target's ids first, the
    source's after them, config.json's source_offset) with a projection of its own (untied)."""
    model, vocabularies = random_model(
        tied, shared, activation, bias, padding_idx=0, dtype="float64", positions=positions, **PEGASUS
    )
    export_pretrained(model, vocabularies, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    source, target = vocabularies
    joined = not (tied and shared)
    assert config["vocab_size"] == len(target) + joined * len(source)
    assert config["numpy_transformer"].get("source_offset") == (len(target) if joined else None)
    assert config["tie_word_embeddings"] == tied
    assert_same_model(load_pretrained(tmp_path / "hf"), model)


@pytest.mark.parametrize(
    "tied, shared, options, named",
    [
        (True, True, {"attention": "mla", "attention_bias": False}, r"^Marian .*attention 'mla'"),
        (
            True,
            True,
            {"norm_first": True},
            r"^neither of transformers' Marian .* nor Pegasus .* can represent this model's pre-norm blocks "
            r"without final layer norms \(--no-final-norm\).*train without --no-final-norm.*\(--post-norm\)",
        ),
        (
            True,
            True,
            {"final_norm": True},
            r"^neither .*final layer norms after post-norm blocks.*\(train --no-final-norm\).*"
            r"\(train without --post-norm\)",
        ),
        (
            False,
            False,
            {**PEGASUS, "attention": "mla", "attention_bias": False},
            r"^Pegasus \(transformers' PegasusForConditionalGeneration\) cannot represent this model's "
            r"attention 'mla' \(latent attention\): transformers' Marian and Pegasus are multi-head \('mha'\)$",
        ),
    ],
)
def test_what_transformers_lacks_is_refused_before_anything_is_written(
    tmp_path, tied, shared, options, named
):
    options = dict(options)
    bias = options.pop("attention_bias", True)
    model, vocabularies = random_model(tied, shared, "relu", bias, **options)
    with pytest.raises(ExportError, match=named):
        export_pretrained(model, vocabularies, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


def test_bad_vocabularies_and_a_used_directory_are_refused(tmp_path):
    model, (source, target) = random_model(True, False, "relu", True)
    with pytest.raises(ExportError, match="the target vocabulary has 20 tokens, the model 23"):
        export_pretrained(model, (source, source), tmp_path / "hf")
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="not empty"):
        export_pretrained(model, (source, target), tmp_path / "used")
    assert [path.name for path in (tmp_path / "used").iterdir()] == ["notes.txt"]
    export_pretrained(model, (source, target), tmp_path / "used", overwrite=True)
    assert (tmp_path / "used" / "notes.txt").read_text() == "mine"  # what is not an export's stays
    assert_same_model(load_pretrained(tmp_path / "used"), model)


def test_an_overwrite_across_the_two_kinds_leaves_one_export_and_the_users_files(tmp_path):
    pytest.importorskip("ctranslate2", reason="the CTranslate2 export needs ctranslate2")
    from numpy_transformer.translator.huggingface import export_ctranslate2
    from numpy_transformer.translator.huggingface.directory import CTRANSLATE2_WRITTEN, WRITTEN

    model, vocabularies = random_model(True, False, "relu", True)
    folder = tmp_path / "used"

    def files():
        return {str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()}

    export_pretrained(model, vocabularies, folder)
    (folder / "notes.txt").write_text("mine")
    export_ctranslate2(model, vocabularies, folder, overwrite=True)
    assert files() == {
        "notes.txt",
        "config.json",
        "model.bin",
        "source_vocabulary.json",
        "target_vocabulary.json",
    }
    export_pretrained(model, vocabularies, folder, overwrite=True)
    assert "model.bin" not in files() and files() - {"notes.txt"} <= set(WRITTEN)
    assert not files() & (set(CTRANSLATE2_WRITTEN) - set(WRITTEN))
    assert (folder / "notes.txt").read_text() == "mine"
    assert_same_model(load_pretrained(folder), model)  # the directory is one model again


def test_a_failed_write_leaves_no_directory_of_its_own_and_says_what_is_left(tmp_path, monkeypatch):
    import safetensors.numpy
    from safetensors import SafetensorError

    from numpy_transformer.files import SaveError

    model, vocabularies = random_model(True, False, "relu", True)

    def full(*args, **kwargs):  # as safetensors says a full disk: its own error, not an OSError
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.numpy, "save_file", full)
    with pytest.raises(SaveError, match=r"^could not write .*/hf/model.safetensors: \[Errno 28\] No space left on "
                       r"device; nothing of the export was written$"):  # fmt: skip
        export_pretrained(model, vocabularies, tmp_path / "hf")
    assert list(tmp_path.iterdir()) == []  # no directory, no staging left either
    with pytest.raises(SaveError, match=r"nothing of the export was written \(the folders made for it are "
                       r"removed: .*/a, .*/a/b\)$"):  # fmt: skip
        export_pretrained(model, vocabularies, tmp_path / "a" / "b" / "hf")
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "used" / "config.json").mkdir(parents=True)  # a directory where a file of the export goes
    with pytest.raises(
        SaveError,
        match=r"could not write .*used/config.json: \[Errno 21\] Is a directory; nothing of the export was written$",
    ):
        export_pretrained(model, vocabularies, tmp_path / "used", overwrite=True)
    assert (tmp_path / "used" / "config.json").is_dir()
    assert sorted(path.name for path in tmp_path.iterdir()) == ["used"]


def test_export_makes_the_missing_parents_of_its_directory(tmp_path):
    model, vocabularies = random_model(True, True, "relu", True)
    export_pretrained(model, vocabularies, tmp_path / "a" / "b" / "hf")
    assert_same_model(load_pretrained(tmp_path / "a" / "b" / "hf"), model)


def logits_of(model, vocabularies, seed=0):
    """Our logits on a batch of random sources (one padded) and targets from <bos>."""
    rng = np.random.default_rng(seed)
    (source, target), pad = vocabularies, vocabularies[1].ids.pad
    src = rng.integers(4, len(source), (3, 7))
    src[1, 4:] = pad
    tgt = rng.integers(4, len(target), (3, 6))
    tgt[:, 0] = target.ids.bos
    src_mask = (src != pad)[:, None, None, :]
    causal = np.tril(np.ones((6, 6), bool))[None, None]
    return (
        np.asarray(model.project(model.decode(model.encode(src, src_mask), src_mask, tgt, causal))),
        src,
        tgt,
    )


@pytest.mark.parametrize(
    "options",
    [
        {"norm_first": False, "final_norm": False},
        {"norm_first": True, "final_norm": True},
        {"attention": "mla"},
    ],
)
@pytest.mark.parametrize("tied, shared", [(True, True), (True, False), (False, False)])
def test_interleaved_positions_are_the_split_ones_with_the_model_dimension_reordered(tied, shared, options):
    """The reordering export applies, checked by this package alone: the model of interleaved
    positions and the model of split ones with its weights reordered give the same logits."""
    model, vocabularies = random_model(
        tied, shared, "silu", options.get("attention") != "mla", positions="interleaved", **options
    )
    order = residual_permutation(model.config.d_model)
    split = build_from_config(dataclasses.replace(model.config, positions="split")).eval()
    np.testing.assert_array_equal(np.asarray(model.src_pos.pe)[:, order], split.src_pos.pe)
    np.testing.assert_array_equal(np.asarray(model.tgt_pos.pe)[:, order], split.tgt_pos.pe)
    split.load_state_dict(exported_state(model))
    ours, theirs = logits_of(model, vocabularies)[0], logits_of(split, vocabularies)[0]
    np.testing.assert_allclose(theirs, ours, rtol=1e-5, atol=1e-5 * np.abs(ours).max())
    unordered = build_from_config(dataclasses.replace(model.config, positions="split")).eval()
    unordered.load_state_dict(model.state_dict())  # the weights as they are: another function
    assert np.abs(logits_of(unordered, vocabularies)[0] - ours).max() > 1e-2 * np.abs(ours).max()


def test_the_reordering_is_a_permutation_of_every_residual_axis():
    model, _ = random_model(True, False, "relu", True, positions="interleaved")
    order = residual_permutation(16)
    assert sorted(order.tolist()) == list(range(16)) and order[:3].tolist() == [0, 2, 4]
    state = {name: np.asarray(value) for name, value in model.state_dict().items()}
    permuted = permuted_state(state, order)
    back = permuted_state(permuted, np.argsort(order))
    assert all(np.array_equal(back[name], state[name]) for name in state)
    assert np.array_equal(permuted["projection_layer.proj.bias"], state["projection_layer.proj.bias"])
    name = "decoder.layers.1.feed_forward_block.linear_2"
    assert np.array_equal(permuted[f"{name}.weight"], state[f"{name}.weight"][order])
    with pytest.raises(ValueError, match="extra.weight"):
        permuted_state({**state, "extra.weight": state[f"{name}.weight"]}, order)


torch = transformers = None  # the oracle's modules, imported by the fixture of the tests that need them


@pytest.fixture
def oracle():
    """PyTorch and transformers, or the test skipped with the reason."""
    global torch, transformers
    torch = pytest.importorskip(
        "torch", reason="PyTorch and transformers are the oracle for the exported models"
    )
    transformers = pytest.importorskip(
        "transformers", reason="transformers is the oracle for the exported models"
    )


def theirs(directory, architecture="MarianMTModel"):
    model, info = getattr(transformers, architecture).from_pretrained(directory, output_loading_info=True)
    assert not any(info.values()), info  # no weight missing, unexpected or mismatched
    return model.eval()


def source_offset(hf):
    """The first source id of an export's one table of both vocabularies (0: the run's own ids)."""
    return (getattr(hf.config, "numpy_transformer", None) or {}).get("source_offset", 0)


def logits_of_both(model, hf, vocabularies, seed=0):
    """Our logits and transformers' (given the source ids as the export numbers them), of the
    target's rows: the rows after them (no target token) are -inf, never generated, and the
    log-softmax over the target's rows is the one over them alone, bit for bit."""
    ours, src, tgt = logits_of(model, vocabularies, seed)
    pad = vocabularies[1].ids.pad
    with torch.no_grad():
        out = hf(
            input_ids=torch.tensor(src + source_offset(hf)),
            attention_mask=torch.tensor(src != pad),
            decoder_input_ids=torch.tensor(tgt),
        )
    rows = ours.shape[-1]
    assert torch.isneginf(out.logits[..., rows:]).all()
    assert torch.equal(
        torch.log_softmax(out.logits, -1)[..., :rows], torch.log_softmax(out.logits[..., :rows], -1)
    )
    return ours, out.logits[..., :rows].numpy()


@pytest.mark.parametrize("positions", ["split", "interleaved"])
@pytest.mark.parametrize("tied, shared, activation, bias", COMBINATIONS)
def test_transformers_gives_our_logits(oracle, tmp_path, tied, shared, activation, bias, positions):
    model, vocabularies = random_model(tied, shared, activation, bias, positions=positions)
    export_pretrained(model, vocabularies, tmp_path / "hf")
    ours, their = logits_of_both(model, theirs(tmp_path / "hf"), vocabularies)
    np.testing.assert_allclose(ours, their, rtol=1e-5, atol=1e-5 * np.abs(their).max())


def generate(hf, src, pad, eos, beams, new_tokens):
    """generate()'s outputs up to </s>, with the settings of our greedy_decode and beam_search(style="transformers")."""
    with torch.no_grad():
        rows = hf.generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != pad),
            num_beams=beams,
            do_sample=False,
            max_length=new_tokens + 1,
            min_length=0,
            length_penalty=1.0,
            early_stopping=False,
            forced_eos_token_id=None,
        ).tolist()
    return [up_to_end(row[1:], pad, eos) for row in rows]


def up_to_end(ids, pad, eos):
    ids = [i for i in ids if i != pad]
    return ids[: ids.index(eos) + 1] if eos in ids else ids


def assert_same_translations(model, their, source, target):
    """transformers' generate() gives our greedy and four-beam translations token for token."""
    ids = target.ids
    rng = np.random.default_rng(1)
    src = rng.integers(4, len(source), (8, 6))
    src[:, -1], src[2, 3:], src[5, 4:] = ids.eos, ids.pad, ids.pad
    mask = (src != ids.pad)[:, None, None, :]
    for beams in (1, 4):
        if beams == 1:
            out = greedy_decode(model, src, mask, 12, ids.bos, ids.eos, pad_id=ids.pad)
        else:
            out = beam_search(
                model, src, mask, 12, ids.bos, ids.eos, beam_width=4, pad_id=ids.pad, style="transformers"
            )
        expected = generate(their, src, ids.pad, ids.eos, beams, 12)
        assert [up_to_end(row, ids.pad, ids.eos) for row in np.asarray(out).tolist()] == expected, (
            f"beams {beams}"
        )


@pytest.mark.parametrize("positions", ["split", "interleaved"])
def test_a_trained_run_exports_to_our_logits_and_translations(oracle, tmp_path, positions):
    run, hf = tmp_path / "run", tmp_path / "hf"
    flags = f"--d-model 16 --layers 2 --heads 2 --d-ff 32 --post-norm --no-final-norm --positions {positions}"
    train = f"train --task copy --steps 30 --eval-every 1000 --no-progress --activation silu --attention-bias {flags}"
    assert main([*train.split(), "--out", str(run)]) == 0
    assert main(["export", str(run), "--to", str(hf)]) == 0
    model, _, source, target = load_for_inference(run)
    their = theirs(hf)
    ours, logits = logits_of_both(model, their, (source, target))
    np.testing.assert_allclose(ours, logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())
    assert_same_translations(model, their, source, target)
    assert_same_model(load_pretrained(hf), model)


@pytest.mark.parametrize("positions", ["split", "interleaved"])
@pytest.mark.parametrize("activation, bias", list(itertools.product(("relu", "silu"), (True, False))))
@pytest.mark.parametrize("tied, shared", EMBEDDINGS)
def test_a_pre_norm_model_exports_as_pegasus_to_our_logits(
    oracle, tmp_path, tied, shared, activation, bias, positions
):
    model, vocabularies = random_model(tied, shared, activation, bias, positions=positions, **PEGASUS)
    export_pretrained(model, vocabularies, tmp_path / "hf")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "pegasus" and config["decoder_start_token_id"] == vocabularies[1].ids.bos
    their = theirs(tmp_path / "hf", "PegasusForConditionalGeneration")
    assert their.generation_config.decoder_start_token_id == vocabularies[1].ids.bos
    split = np.asarray(build_from_config(dataclasses.replace(model.config, positions="split")).src_pos.pe)
    np.testing.assert_array_equal(
        their.model.encoder.embed_positions.weight.detach().numpy()[: len(split)], split
    )
    ours, logits = logits_of_both(model, their, vocabularies)
    np.testing.assert_allclose(ours, logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())


def test_a_trained_pre_norm_run_exports_as_pegasus_to_our_logits_and_translations(oracle, tmp_path):
    """The default run's blocks, positions and final norms, of one vocabulary and tied embeddings."""
    rng = np.random.default_rng(0)
    pairs = ["".join(rng.choice(list("abcdefghij"), rng.integers(2, 9))) for _ in range(400)]
    (tmp_path / "pairs.tsv").write_text("".join(f"{line}\t{line}\n" for line in pairs))
    run, hf = tmp_path / "run", tmp_path / "hf"
    flags = "--d-model 16 --layers 2 --heads 2 --d-ff 32 --activation silu --attention-bias --no-progress"
    train = f"train --tokenizer char --shared-vocab --tie-embeddings --steps 200 --eval-every 1000 {flags}"
    assert main([*train.split(), "--data", str(tmp_path / "pairs.tsv"), "--out", str(run)]) == 0
    assert main(["export", str(run), "--to", str(hf)]) == 0
    model, _, source, target = load_for_inference(run)
    config = model.config
    assert (config.norm_first, config.final_norm, config.positions) == (True, True, "interleaved")
    their = theirs(hf, "PegasusForConditionalGeneration")
    ours, logits = logits_of_both(model, their, (source, target))
    np.testing.assert_allclose(ours, logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())
    assert_same_translations(model, their, source, target)


def test_a_pegasus_model_of_transformers_own_loads_to_its_logits_and_its_tokenizer_is_named(oracle, tmp_path):
    """A Pegasus directory made elsewhere (no numpy_transformer settings): of the exact GELU
    (transformers' default), refused naming it; of ReLU (google/pegasus-large's), the model loads,
    pre-norm with final norms, split positions and one embedding, to transformers' logits; import
    refuses it for its tokenizer, naming the file it lacks."""
    settings = {"d_model": 16, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 2}
    settings |= {"decoder_attention_heads": 2, "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "vocab_size": 30}
    settings |= {
        "max_position_embeddings": 40,
        "pad_token_id": 0,
        "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    settings |= {"scale_embedding": True, "activation_function": "relu"}  # google/pegasus-large's
    torch.manual_seed(0)
    their = transformers.PegasusForConditionalGeneration(transformers.PegasusConfig(**settings)).eval()
    with torch.no_grad():  # away from the initial zeros and ones, so every bias and norm matters
        for name, parameter in their.named_parameters():
            if "embed_positions" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.2)
    their.save_pretrained(tmp_path / "pegasus")
    shutil.copytree(tmp_path / "pegasus", tmp_path / "gelu")
    config = json.loads((tmp_path / "gelu" / "config.json").read_text())
    for key, value in (("activation_function", "gelu"), ("scale_embedding", False)):  # transformers' defaults
        (tmp_path / "gelu" / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(
            PretrainedError, match=rf"config.json: {key} .*(not supported|this package always)"
        ):
            load_pretrained(tmp_path / "gelu")  # the exact GELU, and unscaled embeddings: not this package's
    model = load_pretrained(tmp_path / "pegasus").eval()
    config = model.config
    assert (config.norm_first, config.final_norm, config.positions) == (True, True, "split")
    assert (config.shared_vocab, config.tie_embeddings, config.activation) == (True, True, "relu")
    vocab = Vocab.from_list([f"w{i}" for i in range(30)], SpecialIds(pad=0, bos=0, eos=1, unk=2))
    ours, logits = logits_of_both(model, their, (vocab, vocab))
    np.testing.assert_allclose(ours, logits, rtol=1e-5, atol=1e-5 * np.abs(logits).max())
    with pytest.raises(
        PretrainedError, match=r"pegasus/tokenizer.json: no such file: a Pegasus model's tokenizer"
    ):
        import_run(tmp_path / "pegasus", tmp_path / "run")
    assert not (tmp_path / "run").exists()


LINES = [
    *(source for source, _ in PAIRS),
    "Crème brûlée à la café.",
    "東京の天気は晴れです。",
    "Party 🎉🙂 time!",
    ">>deu<< Save it.",
]


def test_an_imported_run_goes_out_with_marians_tokenizer(oracle, tmp_path):
    original = write_model(tmp_path / "opus")
    import_run(original, tmp_path / "run")
    assert main(["export", str(tmp_path / "run"), "--to", str(tmp_path / "hf")]) == 0
    for name in ("source.spm", "target.spm"):
        assert (tmp_path / "hf" / name).read_bytes() == (original / name).read_bytes()
    assert json.loads((tmp_path / "hf" / "vocab.json").read_text()) == json.loads(
        (original / "vocab.json").read_text()
    )
    _, model = import_run(tmp_path / "hf", tmp_path / "again")  # export, then import: the same run
    assert_same_model(model, load_pretrained(original))
    ours = MarianTokenizer(tmp_path / "hf")
    their = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    for line in LINES:
        assert their(line)["input_ids"] == ours.encode_source(line), line
    ids = ours.encode_target(PAIRS[0][1])
    assert their.decode(ids, skip_special_tokens=True) == ours.decode(ids)


TINY = "--task copy --steps 2 --d-model 16 --layers 1 --heads 2 --d-ff 32 --eval-every 1000 --show 0 --no-progress"


def test_post_norm_is_the_papers_blocks_without_final_norms_and_exports_as_marian(tmp_path, capsys):
    """--post-norm alone: the paper's post-norm blocks, whose stacks end without a layer norm (as
    Marian's): the run exports to transformers as Marian, and train says nothing of exporting."""
    pytest.importorskip("tokenizers", reason="a character run's tokenizer.json is written by tokenizers")
    run = tmp_path / "run"
    assert main(["train", *TINY.split(), "--post-norm", "--out", str(run)]) == 0
    assert "cannot be exported" not in capsys.readouterr().out
    model = load_for_inference(run)[0]
    assert (model.config.norm_first, model.config.final_norm) == (False, False)
    assert main(["export", str(run), "--to", str(tmp_path / "hf")]) == 0
    assert "as Marian (MarianMTModel)" in capsys.readouterr().out
    assert_same_model(load_pretrained(tmp_path / "hf"), model)


@pytest.mark.parametrize(
    "flags, model_table, said",
    [
        (
            ["--no-final-norm"],
            "",
            r"^note: this run cannot be exported whole: to transformers: neither of transformers' Marian .*"
            r"pre-norm blocks without final layer norms \(--no-final-norm\)[^|]*$",
        ),
        (
            ["--post-norm"],
            "final_norm = true\n",
            r"^note: this run cannot be exported whole: to transformers: .*final layer norms after post-norm "
            r"blocks.* \| to CTranslate2: CTranslate2 cannot represent this model's final layer norms after "
            r"post-norm blocks",
        ),
        (
            ["--attention", "mla"],
            "",
            r"^note: this run cannot be exported whole: to transformers: Pegasus .*attention 'mla'.* \| to "
            r"CTranslate2: .*attention 'mla'",
        ),
    ],
)
def test_train_says_at_its_start_what_export_cannot_write(tmp_path, capsys, flags, model_table, said):
    """Before its first step (the first dev evaluation is at step 1), on the lines that say what it
    trains; a [model] table's final_norm = true keeps final norms after post-norm blocks."""
    config = tmp_path / "run.toml"
    config.write_text(f"[model]\n{model_table}")
    train = ["train", *TINY.split(), "--eval-every", "1", *flags, "--config", str(config)]
    assert main([*train, "--out", str(tmp_path / "run")]) == 0
    lines = capsys.readouterr().out.splitlines()
    [note] = [number for number, line in enumerate(lines) if line.startswith("note:")]
    first_step = next(number for number, line in enumerate(lines) if line.startswith("step 1 "))
    assert lines[0].startswith("training ") and note < first_step
    assert re.search(said, lines[note]), lines[note]


def test_an_import_beyond_the_address_space_limit_is_refused_in_one_line(tmp_path):
    """safetensors maps the whole file to read its header: under an address-space limit (ulimit -v)
    below the file's size, import says so in one line naming the file and the limit (a raw
    MemoryError traceback before), and writes nothing."""
    resource = pytest.importorskip("resource", reason="address-space limits are POSIX's")
    pytest.importorskip("tokenizers", reason="a character run's tokenizer.json is written by tokenizers")
    model, vocabularies = random_model(True, True, "relu", True)
    export_pretrained(model, vocabularies, tmp_path / "hf", CharTokenizer())  # import reads it first
    size = 16 << 30  # a sparse file: no disk taken, but 16 GiB to map
    header = json.dumps({"big": {"dtype": "F32", "shape": [size // 4], "data_offsets": [0, size]}}).encode()
    header += b" " * (-len(header) % 8)
    with open(tmp_path / "hf" / "model.safetensors", "wb") as file:
        file.write(len(header).to_bytes(8, "little") + header)
        file.truncate(8 + len(header) + size)
    limit = 6 << 30  # room for Python and the libraries, not for the file

    def limited():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    code = "import sys; from numpy_transformer.translator.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", code, "import", str(tmp_path / "hf"), "--out", str(tmp_path / "run")],
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        f"numpy-transformer import: error: {tmp_path / 'hf' / 'model.safetensors'}: the 16.0 GiB"
    )
    assert "could not be mapped into memory" in line and "address-space limit of 6.0 GiB (ulimit -v)" in line
    assert not (tmp_path / "run").exists()


def test_export_names_the_library_a_train_install_lacks_before_any_work(tmp_path, capsys, monkeypatch):
    """`pip install -e ".[train]"` brings no safetensors: export says which extra does, and reads nothing."""
    monkeypatch.setitem(sys.modules, "safetensors", None)  # its import fails, as after a train install
    out = tmp_path / "hf"
    assert main(["export", str(tmp_path / "run"), "--to", str(out), "--no-tokenizer"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "needs safetensors, which is not installed: pip install 'numpy_transformer[pretrained]'" in line
    assert not out.exists()
    model, vocabularies = random_model(*COMBINATIONS[0], padding_idx=None, positions="split")
    with pytest.raises(MissingLibrary, match="export_pretrained .* needs safetensors"):
        export_pretrained(model, vocabularies, out)
    assert not out.exists()
