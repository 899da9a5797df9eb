"""Data parallelism over threads: the split batch gives the unsplit batch's loss and gradients."""

import numpy as np
import pytest

import numpy_transformer as nt
from numpy_transformer.kernels import ops
from numpy_transformer.machine import blas_threads
from numpy_transformer.optim import Adam
from numpy_transformer.translator.thread_parallel import DataParallel, auto_threads

PAD = 0
CONFIG = {
    "src_vocab_size": 23,
    "tgt_vocab_size": 19,
    "src_seq_len": 12,
    "tgt_seq_len": 12,
    "d_model": 16,
    "N": 2,
    "h": 2,
    "d_ff": 32,
}


def batch(seed=0, rows=5, length=7):
    rng = np.random.default_rng(seed)
    src, tgt = rng.integers(1, 19, (rows, length)), rng.integers(1, 19, (rows, length))
    labels = rng.integers(1, 19, (rows, length))
    src[0, 5:], tgt[1, 4:], labels[1, 4:] = PAD, PAD, PAD  # padding, and shards with unequal token counts
    labels[3] = PAD  # a row with no tokens at all
    return src, tgt, nt.make_src_mask(src, PAD), nt.make_tgt_mask(tgt, PAD), labels


def unsplit(model, src, tgt, src_mask, tgt_mask, labels, smoothing=0.1):
    logits = model.forward(src, tgt, src_mask, tgt_mask)
    loss, cache = ops.cross_entropy_forward(logits, labels, PAD, smoothing)
    model.backward(ops.cross_entropy_backward(1.0, cache))
    return loss


def grads(model):
    return {name: p.grad.copy() for name, p in model.named_parameters()}


@pytest.mark.parametrize("threads", [2, 3, 5, 8])
@pytest.mark.parametrize("attention", ["mha", "mla"])
def test_split_batch_gives_the_unsplit_loss_and_gradients(threads, attention):
    # no dropout and float64: the shards compute the same sums in another grouping, nothing else
    model = nt.build_transformer(**CONFIG, attention=attention, dropout=0.0, dtype="float64", seed=1)
    data = batch()
    loss = unsplit(model, *data)
    expected = grads(model)
    model.zero_grad()
    parallel = DataParallel(model, threads)
    assert parallel.loss_and_backward(*data, PAD, 0.1) == pytest.approx(loss, rel=1e-13)
    for name, grad in grads(model).items():
        np.testing.assert_allclose(grad, expected[name], rtol=1e-10, atol=1e-13, err_msg=name)
    # gradients accumulate like model.backward: a second call doubles them
    parallel.loss_and_backward(*data, PAD, 0.1)
    for name, grad in grads(model).items():
        np.testing.assert_allclose(grad, 2 * expected[name], rtol=1e-10, atol=1e-13, err_msg=name)


def test_replicas_share_the_weights_and_see_every_update():
    model = nt.build_transformer(**CONFIG, seed=2)
    parallel = DataParallel(model, 2)
    (replica,) = parallel.replicas
    for (name, mine), theirs in zip(model.named_parameters(), replica.parameters()):
        assert theirs.data is mine.data, name
        assert not np.shares_memory(theirs.grad, mine.grad), name
    optimizer = Adam(model, lr=1e-2)
    model.zero_grad()
    parallel.loss_and_backward(*batch(), PAD, 0.1)
    optimizer.step()
    # after the step the replica computes with the updated weights: same logits as the model
    src, tgt, src_mask, tgt_mask, _ = batch(seed=3)
    with model.evaluating(), replica.evaluating():
        np.testing.assert_array_equal(
            model.forward(src, tgt, src_mask, tgt_mask), replica.forward(src, tgt, src_mask, tgt_mask)
        )


def test_dropout_runs_are_reproducible_from_the_model_generator():
    def run():
        model = nt.build_transformer(**CONFIG, dropout=0.3, seed=4)
        parallel = DataParallel(model, 2)
        losses = [parallel.loss_and_backward(*batch(seed), PAD, 0.1) for seed in range(3)]
        return losses, grads(model), model.rng.bit_generator.state

    first, second = run(), run()
    assert first[0] == second[0] and first[2] == second[2]
    for name in first[1]:
        np.testing.assert_array_equal(first[1][name], second[1][name], err_msg=name)


def test_one_thread_is_the_plain_pass_and_bad_arguments_are_refused():
    model = nt.build_transformer(**CONFIG, dropout=0.2, seed=5)
    other = nt.build_transformer(**CONFIG, dropout=0.2, seed=5)
    assert DataParallel(model, 1).loss_and_backward(*batch(), PAD, 0.1) == nt.loss_and_backward(
        other, *batch(), PAD, 0.1
    )
    for name, grad in grads(model).items():
        np.testing.assert_array_equal(grad, grads(other)[name], err_msg=name)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads must be a positive integer"):
            DataParallel(model, bad)
    src, tgt, src_mask, tgt_mask, labels = batch()
    with pytest.raises(ValueError, match="every token equals pad_id"):
        DataParallel(model, 2).loss_and_backward(src, tgt, src_mask, tgt_mask, np.zeros_like(labels), PAD)
    # the whole batch's labels are checked, not each shard's rows alone
    for rows in (4, 6):
        with pytest.raises(
            ValueError, match=rf"labels has shape \({rows}, 7\), expected tgt's shape \(5, 7\)"
        ):
            DataParallel(model, 2).loss_and_backward(
                src, tgt, src_mask, tgt_mask, labels[:1].repeat(rows, 0), PAD
            )


def test_auto_threads_splits_only_batches_worth_it(monkeypatch):
    monkeypatch.setattr("numpy_transformer.translator.thread_parallel.cpu_cores", lambda: 2)
    model = nt.build_transformer(**{**CONFIG, "d_model": 128, "h": 4})
    assert auto_threads(model, 32, 32) == 2  # 16 rows x 32 tokens x 128 = 65536 entries per shard
    assert auto_threads(model, 32, 4) == 1  # 16 x 4 x 128: too few to pay for the threads
    assert auto_threads(model, 1, 512) == 1  # one row cannot be split
    monkeypatch.setattr("numpy_transformer.translator.thread_parallel.cpu_cores", lambda: 1)
    assert auto_threads(model, 32, 32) == 1


def test_blas_threads_restores_the_previous_count():
    from numpy_transformer.machine import _openblas_thread_control

    control = _openblas_thread_control()
    with blas_threads(1) as applied:
        assert applied == (control is not None)
        if control is not None:
            assert control[1]() == 1
    if control is not None:
        before = control[1]()
        with blas_threads(1):
            pass
        assert control[1]() == before


def test_train_config_refuses_a_negative_thread_count():
    from numpy_transformer.translator.config import TrainConfig

    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an integer >= 0"):
            TrainConfig(threads=bad)


def test_blas_threads_refuses_a_bad_count():
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="count must be a positive integer"), blas_threads(bad):
            pass
