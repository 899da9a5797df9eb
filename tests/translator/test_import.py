"""`numpy-transformer import`: a Marian (OPUS-MT) model in the Hugging Face format as a run directory,
checked end to end against transformers.

The oracle is a small randomly initialised MarianMTModel that transformers builds and saves here
(no network) beside tiny SentencePiece models trained here (tests/support/marian_files.py). Shown: beam
search with ``style="transformers"`` equals ``generate(num_beams=4, ...)`` (tokens and scores), the
command line's translations are transformers' text, one fine-tuning step of ``train --from`` on a
padded batch of the user's pairs has autograd's gradients, and the commands of docs/translating.md run. Skipped,
with the reason, only where transformers cannot be imported.
"""

import json
import shutil

import numpy as np
import pytest
from marian_files import PAIRS, SIZES, marian_config, write_tokenizer

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.translator.cli import main
from numpy_transformer.translator.config import (
    FROM_LR,
    FROM_WARMUP,
    ModelConfig,
    TrainConfig,
    read_config_file,
)
from numpy_transformer.translator.decoding import beam_search_n_best
from numpy_transformer.translator.huggingface.weights import _state_dict
from numpy_transformer.translator.run.checkpoint import load_checkpoint, load_for_inference
from numpy_transformer.translator.run.importing import import_run
from numpy_transformer.translator.training import Trainer

torch = pytest.importorskip("torch", reason="PyTorch and transformers are the oracle for the Marian models")
transformers = pytest.importorskip("transformers", reason="transformers is the oracle for the Marian models")

EOS = 0


def oracle(directory, eos_bias=0.0, seed=0):
    """A random float64 MarianMTModel saved into ``directory`` beside its tokenizer; ``eos_bias`` raises
    </s>'s logit, so that translations end at many lengths. Returns (model, vocabulary size)."""
    vocab_size = write_tokenizer(directory)
    settings = {key: value for key, value in marian_config(vocab_size).items() if key != "model_type"}
    torch.manual_seed(seed)
    model = transformers.MarianMTModel(transformers.MarianConfig(**settings)).double().eval()
    with torch.no_grad():  # away from the initial zeros and ones, so every bias and norm matters
        for name, parameter in model.named_parameters():
            if "embed_positions" not in name:
                parameter.add_(torch.randn_like(parameter) * 0.2)
        model.final_logits_bias.normal_()
        model.final_logits_bias[0, EOS] += eos_bias
        table = torch.tensor(F.sinusoidal_table(SIZES["positions"], SIZES["d_model"], np.float64, "split"))
        for side in (model.model.encoder, model.model.decoder):  # the exact table (transformers': float32)
            side.embed_positions.weight.copy_(table)
    model.save_pretrained(directory)
    return model, vocab_size


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    directory = tmp_path_factory.mktemp("opus-mt-tiny")
    model, vocab_size = oracle(directory, eos_bias=3.0)
    return model, vocab_size, directory


def generate(model, src, pad, **options):
    with torch.no_grad():
        return model.generate(
            input_ids=torch.tensor(src),
            attention_mask=torch.tensor(src != pad),
            bad_words_ids=[[pad]],  # OPUS-MT's generation configs never emit <pad>, as decoding here
            do_sample=False,
            min_length=0,
            **options,
        )


def up_to_end(ids, pad):
    ids = [i for i in ids if i != pad]
    return ids[: ids.index(EOS) + 1] if EOS in ids else ids


FLOAT32_ROUNDOFF = 2.0**-24


def teacher_forced_scores(model, src, pad, sequences, length_penalty):
    """The exact score of each of generate()'s hypotheses (rows of ``sequences``, the start token first,
    len(sequences) // len(src) of them a source): the float64 model teacher-forced on it, log-softmax in
    float64, summed over its tokens up to </s> (all of them when none) and divided by
    length ** length_penalty, as generate() scores a finished hypothesis (length: the tokens generated,
    </s> included). Returns (scores, bounds): how far generate()'s float32 arithmetic may move each score.
    """
    sources = np.repeat(src, len(sequences) // len(src), axis=0)
    with torch.no_grad():
        logits = model(
            input_ids=torch.tensor(sources),
            attention_mask=torch.tensor(sources != pad),
            decoder_input_ids=torch.tensor(sequences[:, :-1]),
        ).logits.numpy()
    targets = sequences[:, 1:]
    lengths = np.array([len(up_to_end(row.tolist(), pad)) for row in targets])
    generated = np.arange(targets.shape[1]) < lengths[:, None]
    top = logits.max(-1)
    shifted = logits - top[..., None]
    total = np.exp(shifted).sum(-1)
    chosen = np.take_along_axis(logits, targets[..., None], -1)[..., 0]
    log_probs = chosen - top - np.log(total)
    penalty = lengths.astype(np.float64) ** length_penalty
    scores = (log_probs * generated).sum(-1) / penalty
    # generate() casts each step's float64 logits z to float32 and there takes torch's log_softmax,
    # y = (z_i - m) - log S with m = max z, S = sum_j exp(z_j - m). To first order in u = 2**-24:
    # - the cast moves each z_j by <= u |z_j|, hence y (1-Lipschitz in z_i, and in z's max-norm through
    #   log S) by <= u (|z_i| + max |z|);
    # - z_j - m rounds by <= u (m - z_j), so exp(z_j - m) by that relatively and S by <= u sum_j p_j
    #   (m - z_j) (p = softmax(z)); exp within 1 ulp (Sleef's u10 kernels) adds <= 2u; summing V positive
    #   terms, in any order (the CPU's vector kernel picks it), <= (V - 1) u; log S moves by S's relative
    #   error and rounds (1 ulp) by <= 2u log S;
    # - the two subtractions round by <= u (m - z_i) and u |y|.
    # The running score s_t = s_{t-1} + y_t then rounds by <= u |s_t| (exact at the first step, from 0),
    # and the division by length ** length_penalty, its divisor rounded to float32 (maybe taken as a
    # reciprocal), by <= 3u |score|. generate()'s incremental float64 logits differ from these by float64
    # rounding only: that and the terms in u**2 stay within the 2**-10 of slack.
    vocab = logits.shape[-1]
    probs = np.exp(shifted) / total[..., None]
    cast = abs(chosen) + abs(logits).max(-1)
    log_total = (probs * -shifted).sum(-1) + 2 + (vocab - 1) + 2 * np.log(total)
    subtractions = (top - chosen) + abs(log_probs)
    per_step = cast + log_total + subtractions
    running = np.cumsum(log_probs * generated, axis=-1)
    accumulated = (abs(running) * generated)[:, 1:].sum(-1)
    bounds = FLOAT32_ROUNDOFF * ((per_step * generated).sum(-1) + accumulated) / penalty
    bounds += 3 * FLOAT32_ROUNDOFF * abs(scores)
    return scores, bounds * (1 + 2.0**-10)


def test_beam_search_equals_generate(tmp_path):
    """Every hypothesis of num_beams=4, num_return_sequences=2 equal, over length penalties, lengths,
    early stopping and models whose translations end early, late or not at all: the tokens exactly; our
    float64 scores within 1e-9 relatively of the exact float64 score of transformers' hypotheses
    (teacher_forced_scores); transformers' scores, which it rounds in float32, within the bound derived
    there for that rounding."""
    rng = np.random.default_rng(1)
    lengths, differ = set(), 0
    for eos_bias in (3.0, 4.0, 6.0):
        model, vocab_size = oracle(tmp_path / f"eos-{eos_bias}", eos_bias)
        ours = nt.load_pretrained(tmp_path / f"eos-{eos_bias}", dtype="float64")
        pad = vocab_size - 1
        src = rng.integers(2, pad, (6, 7))
        src[:, -1] = EOS
        src[1, 3], src[1, 4:] = EOS, pad
        mask = nt.make_src_mask(src, pad)
        for length_penalty in (1.0, 0.6, 0.0, -0.5):
            for max_len in (8, 30):
                for early_stopping in (False, True, "never") if eos_bias == 4.0 else (False,):
                    out = generate(
                        model,
                        src,
                        pad,
                        num_beams=4,
                        num_return_sequences=2,
                        length_penalty=length_penalty,
                        max_length=max_len + 1,  # transformers counts the start token
                        early_stopping=early_stopping,
                        return_dict_in_generate=True,
                        output_scores=True,
                    )
                    theirs = out.sequences.numpy()[:, 1:].reshape(6, 2, -1)
                    their_scores = out.sequences_scores.numpy().reshape(6, 2)
                    ids, scores = beam_search_n_best(
                        ours,
                        src,
                        mask,
                        max_len,
                        pad,
                        EOS,
                        beam_width=4,
                        length_penalty=length_penalty,
                        early_stopping=early_stopping,
                        pad_id=pad,
                        n_best=2,
                        style="transformers",
                    )
                    where = f"eos bias {eos_bias}, length penalty {length_penalty}, max_len {max_len}"
                    for row in range(6):
                        for k in range(2):
                            mine = up_to_end(ids[row, k].tolist(), pad)
                            assert mine == up_to_end(theirs[row, k].tolist(), pad), f"{where}, row {row}"
                            lengths.add(len(mine) if mine[-1] == EOS else None)
                    exact, rounding = teacher_forced_scores(
                        model, src, pad, out.sequences.numpy(), length_penalty
                    )
                    np.testing.assert_allclose(scores, exact.reshape(6, 2), rtol=1e-9, atol=0, err_msg=where)
                    np.testing.assert_array_less(
                        abs(their_scores - exact.reshape(6, 2)), rounding.reshape(6, 2), where
                    )
                    default, _ = beam_search_n_best(
                        ours, src, mask, max_len, pad, EOS, length_penalty=length_penalty, pad_id=pad
                    )
                    differ += sum(
                        up_to_end(a.tolist(), pad) != up_to_end(b.tolist(), pad)
                        for a, b in zip(default[:, 0], ids[:, 0])
                    )
    assert None in lengths and 1 in lengths and len(lengths) >= 6, sorted(
        lengths, key=str
    )  # the check can fail
    assert differ > 0  # the default style is another search, hence the option


def test_translate_gives_transformers_text_and_scores(marian, tmp_path, capsys):
    """The command line's n-best translations are generate()'s, as text with their scores, and its
    --score of the pairs is transformers' log-likelihood: tokenizer, ids and model end to end."""
    model, vocab_size, directory = marian
    pad = vocab_size - 1
    run = tmp_path / "run"
    assert main(["import", str(directory), "--out", str(run), "--dtype", "float64"]) == 0
    sources = [source for source, _ in PAIRS]
    capsys.readouterr()
    options = ["--beam-style", "transformers", "--length-penalty", "1", "--max-len", "12", "--n-best", "4"]
    assert main(["translate", "--checkpoint", str(run), *options, *sources]) == 0
    ours = [line.split("\t")[1:] for line in capsys.readouterr().out.splitlines()]
    tokenizer = transformers.MarianTokenizer(
        source_spm=str(directory / "source.spm"),
        target_spm=str(directory / "target.spm"),
        vocab=str(directory / "vocab.json"),
    )
    src = tokenizer(sources, padding=True, return_tensors="np").input_ids
    out = generate(
        model,
        src,
        pad,
        num_beams=4,
        num_return_sequences=4,
        length_penalty=1.0,
        max_length=13,
        return_dict_in_generate=True,
        output_scores=True,
    )
    texts = tokenizer.batch_decode(out.sequences, skip_special_tokens=True)
    assert [text for text, _ in ours] == texts and len(set(texts)) > 1
    # printed to 4 decimals; transformers' are float32
    np.testing.assert_allclose(
        [float(score) for _, score in ours], out.sequences_scores.numpy(), rtol=0, atol=1e-4
    )

    assert main(["translate", "--checkpoint", str(run), "--score", *(f"{s}\t{t}" for s, t in PAIRS)]) == 0
    scores = [float(line.split("\t")[2]) for line in capsys.readouterr().out.splitlines()]
    batch = tokenizer(
        [s for s, _ in PAIRS], text_target=[t for _, t in PAIRS], padding=True, return_tensors="pt"
    )
    labels = batch["labels"].masked_fill(batch["labels"] == pad, -100)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels
        ).logits
    picked = torch.log_softmax(logits, -1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    np.testing.assert_allclose(scores, (picked * (labels != -100)).sum(-1).numpy(), rtol=0, atol=5e-5)


def test_an_imported_run_holds_the_model_and_its_tokenizer(marian, tmp_path):
    _, vocab_size, directory = marian
    written, model = import_run(directory, tmp_path / "run")
    arrays, meta = load_checkpoint(written)
    assert meta["step"] == 0 and meta["run_id"] and meta["imported_from"]["directory"] == str(directory)
    assert meta["task"]["tokenizer"] == "marian" and set(meta["task"]["sentencepiece"]) == {
        "source",
        "target",
    }
    assert meta["task"]["special_ids"] == {"pad": vocab_size - 1, "bos": vocab_size - 1, "eos": 0, "unk": 1}
    vocab = json.loads((directory / "vocab.json").read_text())
    assert meta["src_vocab"] == sorted(vocab, key=vocab.get) and not any(
        k.startswith("optim/") for k in arrays
    )
    saved = read_config_file(tmp_path / "run" / "config.toml")
    assert "train" not in saved and ModelConfig(**saved["model"]) == ModelConfig.from_model(model.config)
    assert saved["model"]["activation"] == "silu" and saved["model"]["padding_idx"] == vocab_size - 1
    (directory / "source.spm").rename(directory / "moved.spm")  # the run needs nothing of the directory
    try:
        loaded, tokenizer, src_vocab, _ = load_for_inference(tmp_path / "run")
    finally:
        (directory / "moved.spm").rename(directory / "source.spm")
    ids, _ = src_vocab.encode(tokenizer.tokenize_source("The café is open."))
    assert (
        ids
        == transformers.MarianTokenizer(
            source_spm=str(directory / "source.spm"),
            target_spm=str(directory / "target.spm"),
            vocab=str(directory / "vocab.json"),
        )("The café is open.").input_ids
    )
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(loaded.state_dict()[name], value, err_msg=name)


def test_a_fine_tuning_step_has_autograds_gradients_on_a_padded_batch(marian, tmp_path):
    """train --from on the user's pairs: the batch (</s> closing each source, decoding from <pad>,
    no <bos> on the targets, padding with <pad>), the causal target mask and the label-smoothed loss
    give transformers' model the gradients autograd computes, in every parameter (float64)."""
    oracle_model, vocab_size, directory = marian
    pad = vocab_size - 1
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text(
        "".join(f"{source} {i}\t{target} {i}\n" for i, (source, target) in enumerate(PAIRS * 4))
    )
    import_run(directory, tmp_path / "run", dtype="float64")
    run = str(tmp_path / "run")
    config = TrainConfig(data=str(corpus), from_run=run, steps=1, batch_size=6, bucket_steps=1, clip=0.0)
    trainer = Trainer.create(config, {"dropout": 0.0})
    trainer.optimizer.step = lambda lr=None: None  # keep the weights: compare the gradient
    loss = trainer.train_step()["loss"]
    batch = trainer.task.train_batch(0, 6, config.bucket_steps)
    src, labels = batch.src, batch.tgt_out
    assert (src == pad).any() and (labels == pad).any()  # padded on both sides
    assert (src[np.arange(len(src)), (src != pad).sum(1) - 1] == EOS).all()  # each source closed by </s>
    shifted = np.where(labels[:, :-1] == EOS, pad, labels[:, :-1])  # transformers feeds </s> where we pad
    assert (batch.tgt_in[:, 0] == pad).all() and (batch.tgt_in[:, 1:] == shifted).all()

    oracle_model.zero_grad()
    logits = oracle_model(
        input_ids=torch.tensor(src),
        attention_mask=torch.tensor(src != pad),
        labels=torch.tensor(np.where(labels == pad, -100, labels)),  # it makes its decoder input from them
    ).logits
    expected_loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, vocab_size),
        torch.tensor(labels.reshape(-1)),
        ignore_index=pad,
        label_smoothing=0.1,
    )
    expected_loss.backward()
    assert loss == pytest.approx(expected_loss.item(), rel=1e-12)
    autograd = {name: p.grad.numpy() for name, p in oracle_model.named_parameters() if p.grad is not None}
    autograd["final_logits_bias"] = np.zeros((1, vocab_size))  # a buffer in transformers: never trained there
    expected = _state_dict(autograd, SIZES["layers"], directory)
    scale = max(np.abs(value).max() for value in expected.values())
    for name, parameter in trainer.model.named_parameters():
        if name != "projection_layer.proj.bias":
            error = np.abs(parameter.grad - expected[name]).max() / scale
            assert error <= 1e-12, f"{name}: error {error:.2e} of the largest gradient"
    assert np.abs(trainer.model.src_embed.embedding.weight.grad[pad]).max() > 0  # the tied projection's part


def test_the_translating_guide_commands_run(marian, tmp_path, capsys, monkeypatch):
    """Import, translate, fine-tune on a TSV, evaluate, resume, plot attention: docs/translating.md's commands."""
    _, _, directory = marian
    monkeypatch.chdir(tmp_path)
    corpus = tmp_path / "my.tsv"
    corpus.write_text(
        "".join(f"{source} {i}\t{target} {i}\n" for i, (source, target) in enumerate(PAIRS * 5))
    )
    quick = [
        "--steps",
        "4",
        "--eval-every",
        "2",
        "--no-progress",
        "--show",
        "1",
        "--eval-size",
        "4",
        "--batch-size",
        "8",
    ]
    commands = [
        ["import", str(directory), "--out", "runs/opus-mt-tiny"],
        ["translate", "--checkpoint", "runs/opus-mt-tiny", "The café is open."],
        ["evaluate", "--checkpoint", "runs/opus-mt-tiny", "--data", "my.tsv", "--limit", "4"],
        [
            "train",
            "--from",
            "runs/opus-mt-tiny",
            "--data",
            "my.tsv",
            "--out",
            "runs/my-en-de",
            *quick,
        ],
        ["evaluate", "--checkpoint", "runs/my-en-de"],
        ["translate", "--checkpoint", "runs/my-en-de", "--beam-style", "transformers", "Save the file."],
        ["train", "--resume", "--out", "runs/my-en-de", "--steps", "5", "--no-progress", "--show", "0"],
    ]
    for command in commands:
        assert main(command) == 0, (command, capsys.readouterr().err)
    saved = load_checkpoint(tmp_path / "runs/my-en-de")[1]
    assert saved["step"] == 5 and saved["train"]["from_run"] == str(tmp_path / "runs/opus-mt-tiny")
    assert saved["task"]["tokenizer"] == "marian" and saved["model"]["activation"] == "silu"
    pytest.importorskip("matplotlib", reason="plot attention draws with matplotlib")
    assert main(["plot", "attention", "--checkpoint", "runs/my-en-de", "--out", "att.png", "Save it."]) == 0
    assert (tmp_path / "att-cross.png").exists()


def test_evaluation_in_several_batches_scores_as_one(marian, tmp_path):
    from numpy_transformer.translator.evaluation import evaluate
    from numpy_transformer.translator.run.checkpoint import load_meta, saved_task

    _, _, directory = marian
    written, model = import_run(directory, tmp_path / "run")
    task = saved_task(written, load_meta(written))
    whole, parts = (evaluate(model.eval(), task, PAIRS, batch_size=size) for size in (100, 2))
    assert parts["loss"] == pytest.approx(whole["loss"], rel=1e-6) and parts["chrf"] == whole["chrf"]


def test_a_fine_tune_chooses_nothing_averages_and_stands_alone(marian, tmp_path, capsys):
    """train --from an imported model: its model and vocabulary (no size chosen from the corpus), the
    fine-tuning learning rate and warm-up by default, --bpe-dropout refused for Marian's
    SentencePiece, the end-of-run average and the plateau cut as in any run, and checkpoints that
    need nothing of the imported run."""
    _, _, directory = marian
    corpus = tmp_path / "my.tsv"
    corpus.write_text(
        "".join(f"{source} {i}\t{target} {i}\n" for i, (source, target) in enumerate(PAIRS * 5))
    )
    imported, out = tmp_path / "imported", tmp_path / "tuned"
    import_run(directory, imported)
    base = ["train", "--from", str(imported), "--data", str(corpus), "--no-progress", "--show", "0"]
    base += ["--batch-size", "8", "--eval-size", "4"]
    assert main([*base, "--bpe-dropout", "0.1", "--steps", "2", "--out", str(tmp_path / "no")]) == 2
    error = capsys.readouterr().err
    assert "--bpe-dropout 0.1 applies to learned BPE subwords only" in error and "marian" in error
    assert not (tmp_path / "no" / "model.npz").exists()
    tuned = ["--steps", "8", "--eval-every", "2", "--average-last", "3", "--patience", "0"]
    assert main([*base, *tuned, "--plateau-cut", "0.5", "--plateau-patience", "1", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"training the model of {imported} (" in said and "chosen for" not in said
    assert "the learning rate is cut to 0.5 times the schedule's" in said
    assert "average of steps 6, 8 dev" in said  # those of the run's second half
    saved = load_checkpoint(out)[1]
    assert (saved["train"]["lr"], saved["train"]["warmup"]) == (FROM_LR, FROM_WARMUP)
    assert saved["train"]["vocab_size"] is None and saved["task"]["tokenizer"] == "marian"
    best = load_checkpoint(out / "best.npz")[1]
    assert best["best"]["kept"] in ("average", "checkpoint") and "sentencepiece" in best["task"]
    shutil.rmtree(imported)  # the fine-tuned run's checkpoints hold all they need
    for checkpoint in (out, out / "best.npz"):
        assert main(["translate", "--checkpoint", str(checkpoint), "Save the file."]) == 0, (
            capsys.readouterr()
        )
    assert (
        main(["train", "--resume", "--out", str(out), "--steps", "10", "--no-progress", "--show", "0"]) == 0
    )
