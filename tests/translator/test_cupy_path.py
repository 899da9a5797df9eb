"""The CuPy path, proven without a GPU: the whole pipeline through the strict stand-in (cupy_standin.py).

Create, train, evaluate, every decoding strategy, absorbed MLA, save, resume, and checkpoints
crossing between the "GPU" and the CPU, with DeprecationWarnings as errors and budgets on
device-to-host synchronisations and host-to-device copies.
"""

import warnings

import cupy_launches
import numpy as np
import pytest
from cupy_launches import LAUNCHES
from cupy_standin import SYNCED_AT, SYNCS, UPLOADS, make_module

import numpy_transformer as nt
from numpy_transformer import backend
from numpy_transformer.kernels import cuda_fused
from numpy_transformer.model import make_src_mask
from numpy_transformer.translator.batches import make_batch
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.decoding import beam_search, greedy_decode, sample_decode
from numpy_transformer.translator.run.checkpoint import load_for_inference
from numpy_transformer.translator.training import Trainer, TrainingDiverged
from numpy_transformer.translator.translating import translate_ids
from numpy_transformer.translator.vocabulary import BOS_ID, EOS_ID, PAD_ID

TINY = {"d_model": 16, "N": 1, "h": 2, "d_ff": 32, "dropout": 0.1}
STEP_SYNC_BUDGET = (
    1  # the loss and the gradient norm read together, at the end; the ids checked on the host batch
)
CONFIG = {"task": "copy", "steps": 4, "batch_size": 8, "eval_every": 2, "eval_size": 4, "log_every": 1}


@pytest.fixture
def gpu():
    """The stand-in as the backend, DeprecationWarnings as errors; NumPy again afterwards."""
    previous = backend.get_array_module()
    module = backend.set_backend(make_module())
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        yield module
    backend.set_backend(previous)


def cpu(call, *args, **kwargs):
    """Run ``call`` on the NumPy backend, then return to the stand-in."""
    gpu_module = backend.get_array_module()
    backend.set_backend("numpy")
    try:
        return call(*args, **kwargs)
    finally:
        backend.set_backend(gpu_module)


@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_training_steps_stay_on_the_device_with_a_few_syncs(gpu, attention):
    trainer = Trainer.create(TrainConfig(**CONFIG), {**TINY, "attention": attention})
    assert all(isinstance(p.data, gpu.ndarray) for p in trainer.model.parameters())
    trainer.train_step()  # the first step builds what later steps reuse
    SYNCS.clear()
    SYNCED_AT.clear()
    UPLOADS.clear()
    LAUNCHES.clear()
    stats = trainer.train_step()
    assert sum(SYNCS.values()) <= STEP_SYNC_BUDGET, dict(SYNCS)
    assert SYNCED_AT[-1] == cupy_launches.total()  # the read is the step's last launch: the update before it
    assert sum(UPLOADS.values()) <= 1, dict(UPLOADS)  # the batch reaches the device in one copy
    assert np.isfinite(stats["loss"]) and np.isfinite(stats["grad_norm"])


def test_a_diverged_step_on_the_device_leaves_the_weights_as_they_were(gpu):
    """The update is guarded on the device: NaN weights stop the step with the weights as they were."""
    trainer = Trainer.create(TrainConfig(**CONFIG), TINY)
    trainer.train_step()
    trainer.model.src_embed.embedding.weight.data[...] = gpu.nan
    before, step = trainer.model.flat.data.get(), trainer.step
    with pytest.raises(TrainingDiverged, match="step 2: the gradient of .* is NaN or infinite"):
        trainer.train_step()
    np.testing.assert_array_equal(trainer.model.flat.data.get(), before)
    assert trainer.step == step


@pytest.mark.parametrize("fused", ["none", "adam"])
@pytest.mark.parametrize(
    "blowup, message",
    [("loss", "step 2: the loss is nan"), ("gradient", "step 2: the gradient of .*bias is NaN or infinite")],
)
def test_a_step_read_diverged_at_its_end_left_weights_and_moments_as_they_were(
    gpu, kernels, fused, blowup, message, monkeypatch
):
    """The step reads the loss and the gradient norm once, after the update, which the device guarded by
    their being finite: a NaN loss or an infinite gradient raises TrainingDiverged with the weights and
    both moments bit for bit as they were and the optimiser's step count taken back, on the CUDA kernel
    set (the Adam kernel's twin, or its array operations) and on the textbook's update."""
    monkeypatch.setenv(cuda_fused.ENV_VAR, fused)
    trainer = Trainer.create(TrainConfig(**CONFIG), TINY)
    trainer.train_step()
    model, optimizer = trainer.model, trainer.optimizer
    loss_and_backward = trainer.stepper._loss_and_backward

    def diverged(*args):
        loss = loss_and_backward(*args)
        if blowup == "loss":
            return loss * gpu.nan
        model.projection_layer.proj.bias.grad[3] = gpu.inf
        return loss

    monkeypatch.setattr(trainer.stepper, "_loss_and_backward", diverged)

    def state():
        return [
            a.get() for p, m, v in zip(model.parameters(), optimizer.m, optimizer.v) for a in (p.data, m, v)
        ]

    before, count, step = state(), optimizer.step_count, trainer.step
    with pytest.raises(TrainingDiverged, match=message), np.errstate(invalid="ignore"):  # inf / inf, not kept
        trainer.train_step()
    for after, kept in zip(state(), before):
        np.testing.assert_array_equal(after, kept)
    assert optimizer.step_count == count and trainer.step == step
    monkeypatch.undo()  # the next step takes the refused one's count
    stats = trainer.train_step()
    assert optimizer.step_count == count + 1 and np.isfinite(stats["loss"])


def test_the_step_on_the_device_synchronises_nowhere_and_equals_the_step(gpu):
    """loss_and_backward(on_device=True): no synchronisation at all (the caller reads the loss), the
    same loss and gradients as loss_and_backward's; that one refuses labels all padding before any work."""
    rng = np.random.default_rng(0)
    src, tgt, labels = (gpu.asarray(rng.integers(1, 13, (3, 5))) for _ in range(3))
    labels[0, 3:] = 0
    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0), labels, 0, 0.1)
    models = [nt.build_transformer(13, 13, 5, 5, d_model=8, N=1, h=2, d_ff=16, seed=1) for _ in "ab"]
    loss = nt.loss_and_backward(models[0], *args)
    SYNCS.clear()
    on_device = nt.loss_and_backward(models[1], *args, on_device=True)
    assert not SYNCS, dict(SYNCS)
    assert float(on_device) == pytest.approx(loss, rel=1e-5)
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters()):
        np.testing.assert_allclose(b.grad.get(), a.grad.get(), rtol=1e-4, atol=1e-6, err_msg=name)
    before = models[0].flat.grad.get()
    with pytest.raises(ValueError, match="every token equals pad_id"):
        nt.loss_and_backward(models[0], *args[:4], gpu.zeros_like(labels), 0, 0.1)
    np.testing.assert_array_equal(models[0].flat.grad.get(), before)  # refused before any work


@pytest.mark.parametrize("attention, absorbed", [("mha", False), ("mla", False), ("mla", True)])
def test_every_decoding_strategy_runs_with_at_most_one_sync_per_token(gpu, attention, absorbed):
    trainer = Trainer.create(TrainConfig(**CONFIG), {**TINY, "attention": attention})
    model = trainer.model.eval()
    src = gpu.asarray([[5, 6, 7, 8], [6, 7, 8, PAD_ID]])
    mask = make_src_mask(src, PAD_ID)
    max_len = 6
    for decode, options in [
        (greedy_decode, {}),
        (beam_search, {"beam_width": 3}),
        (sample_decode, {"top_k": 3, "seed": 1}),
        (sample_decode, {"top_p": 0.9, "seed": 1}),
    ]:
        SYNCS.clear()
        out = decode(model, src, mask, max_len, BOS_ID, EOS_ID, absorbed=absorbed, **options)
        assert isinstance(out, gpu.ndarray) and out.shape[0] == 2
        assert sum(SYNCS.values()) <= max_len + 2, (
            decode.__name__,
            dict(SYNCS),
        )  # + the ids' bounds and the mask


def test_evaluate_save_resume_and_checkpoints_that_cross_to_the_cpu(gpu, tmp_path):
    trainer = Trainer.create(TrainConfig(**CONFIG), TINY)
    trainer.train_step()
    metrics = trainer.evaluate(trainer.task.dev[:4])
    assert 0 <= metrics["bleu"] <= 100 and np.isfinite(metrics["loss"])
    saved = trainer.save(tmp_path / "gpu")
    trainer.train_step()
    after_two = {name: p.data.get() for name, p in trainer.model.named_parameters()}

    resumed = Trainer.resume(saved)  # on the "GPU" again: bit-identical to going on
    resumed.train_step()
    for name, p in resumed.model.named_parameters():
        assert np.array_equal(p.data.get(), after_two[name]), name

    # a GPU checkpoint trains on on the CPU. CuPy's random streams are not NumPy's, so its dropout
    # masks are the CPU's own: a crossed run follows the one that stayed only without dropout
    with_dropout = cpu(Trainer.resume, saved)
    assert np.isfinite(cpu(with_dropout.train_step)["loss"])
    plain = Trainer.create(TrainConfig(**CONFIG), {**TINY, "dropout": 0.0})
    plain.train_step()
    plain_saved = plain.save(tmp_path / "plain")
    plain.train_step()
    on_cpu = cpu(Trainer.resume, plain_saved)
    cpu(on_cpu.train_step)
    for (name, p), (_, q) in zip(on_cpu.model.named_parameters(), plain.model.named_parameters()):
        np.testing.assert_allclose(p.data, q.data.get(), rtol=0, atol=1e-6, err_msg=name)
    cpu_saved = cpu(on_cpu.save, tmp_path / "cpu")
    back = Trainer.resume(cpu_saved)  # ...and a CPU checkpoint on the GPU
    assert isinstance(back.model.parameters()[0].data, gpu.ndarray) and back.step == 2

    model, tokenizer, src_vocab, _tgt_vocab = load_for_inference(cpu_saved)
    ids = translate_ids(model, [src_vocab.encode(tokenizer.tokenize("abc"))[0]], max_len=5)
    assert isinstance(ids[0][0], int)


def test_a_batch_reaches_the_device_in_one_copy(gpu):
    UPLOADS.clear()
    batch = make_batch([[5, 6, 7], [5, 6]], [[7, 8], [8, 9, 10]])
    assert isinstance(batch.src, gpu.ndarray) and isinstance(batch.tgt_mask, gpu.ndarray)
    assert sum(UPLOADS.values()) == 1, dict(UPLOADS)


# -- the stand-in is strict where CuPy is: these would pass on a lenient one -----------------------------


def test_the_stand_in_refuses_what_cupy_refuses(gpu):
    a = gpu.arange(6.0).reshape(2, 3)
    with pytest.raises(TypeError, match="Implicit conversion"):
        np.asarray(a)
    with pytest.raises(TypeError):
        np.concatenate([a, a])
    with pytest.raises(TypeError, match="host numpy.ndarray"):
        a + np.ones(3)
    with pytest.raises(NotImplementedError, match="maximum.reduce"):
        gpu.maximum.reduce(a, axis=-1)
    assert not hasattr(gpu, "put_along_axis")
    assert callable(gpu.random.default_rng(0).bit_generator.state)  # a pointer, not a dict to save
    with pytest.raises(AttributeError, match="permutation"):
        gpu.random.default_rng(0).permutation(3)
    with pytest.raises(DeprecationWarning, match="scatter_add"):
        gpu.cupyx.scatter_add(gpu.zeros(3), gpu.asarray([0, 0]), gpu.ones(2))
    assert isinstance(a.sum(), gpu.ndarray) and a.sum().shape == ()  # reductions stay on the device


def test_the_stand_in_counts_every_transfer(gpu):
    a = gpu.arange(4.0)
    SYNCS.clear()
    float(a.sum()), int(a.argmax()), bool(a.any()), a.get(), a.tolist(), gpu.asnumpy(a), a[1].item()
    assert dict(SYNCS) == {"float": 1, "int": 1, "bool": 1, "get": 1, "tolist": 1, "asnumpy": 1, "item": 1}


def test_the_kernels_on_cupy_are_the_cuda_module(gpu):
    from numpy_transformer.kernels import cuda, ops, using_kernels

    with using_kernels("fast"):  # CI runs the suite a second time on the textbook
        trainer = Trainer.create(TrainConfig(**CONFIG), TINY)
        assert ops.embedding_backward is cuda.embedding_backward
    assert isinstance(trainer.optimizer.update, cuda.AdamUpdate)


def test_the_command_line_on_cupy(gpu, monkeypatch, tmp_path, capsys):
    """train --backend cupy, translate and evaluate on it, then --resume on the CPU (NumPy)."""
    from numpy_transformer.translator.cli import main

    monkeypatch.setattr(backend, "_load_cupy", lambda: gpu)
    out = tmp_path / "run"
    tiny = [
        "--task",
        "copy",
        "--d-model",
        "16",
        "--layers",
        "1",
        "--heads",
        "2",
        "--d-ff",
        "16",
        "--batch-size",
        "8",
        "--steps",
        "2",
        "--eval-every",
        "2",
        "--eval-size",
        "4",
        "--no-progress",
        "--show",
        "1",
    ]
    assert main(["train", "--backend", "cupy", *tiny, "--out", str(out)]) == 0
    assert backend.backend_name() == "cupy" and "translations of 1 unseen" in capsys.readouterr().out
    assert (
        main(["translate", "--backend", "cupy", "--checkpoint", str(out), "--strategy", "beam", "abc"]) == 0
    )
    assert main(["evaluate", "--backend", "cupy", "--checkpoint", str(out), "--json"]) == 0
    assert '"bleu"' in capsys.readouterr().out
    assert (
        main(
            [
                "train",
                "--backend",
                "numpy",
                "--resume",
                "--steps",
                "3",
                "--no-progress",
                "--show",
                "0",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert backend.backend_name() == "numpy"


def test_fit_with_adamw_and_gradcheck_in_float64(gpu, tmp_path):
    from numpy_transformer import build_transformer
    from numpy_transformer.gradient_checking import assert_module_gradients

    trainer = Trainer.create(TrainConfig(**CONFIG, optimizer="adamw", weight_decay=0.01), TINY)
    records = trainer.fit(tmp_path, progress=False)
    assert [r["step"] for r in records if r.get("split") == "dev"] == [2, 4] and (
        tmp_path / "model.npz"
    ).exists()
    model = build_transformer(7, 7, 4, 4, d_model=8, N=1, h=2, d_ff=8, dropout=0.0, dtype="float64")
    src = gpu.asarray([[1, 2, 3], [4, 5, 0]])
    tgt = gpu.asarray([[1, 2], [3, 4]])
    result = assert_module_gradients(
        model,
        {"src": src, "tgt": tgt},
        forward=lambda src, tgt: model.forward(src, tgt, make_src_mask(src, 0), None),
        max_entries=4,
    )
    assert result.passed


def test_a_pretrained_model_loads_onto_the_device(gpu, tmp_path):
    """The importer reads each tensor on the host and writes it into the device's weight."""
    from marian_files import write_model

    from numpy_transformer.translator.huggingface import load_pretrained

    model = load_pretrained(write_model(tmp_path))
    on_host = cpu(lambda: load_pretrained(tmp_path).state_dict())
    assert all(isinstance(p.data, gpu.ndarray) for p in model.parameters())
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(value, on_host[name], err_msg=name)
