"""The fused CUDA kernels without a GPU: each twin equal to the textbook in float64, the switches, and
every source compiled by NVRTC for the GPUs lent (H100 and H200: compute_90).

On a GPU, benchmarks/gpu_check.py proves each kernel equal to its twin; here the twin, which runs in
the kernel's place off a GPU (the CuPy stand-in counts it as one launch), is proven equal to the
textbook, and the CUDA kernel set with the kernel switched on equal to the textbook too.
"""

import importlib
import os
import re

import numpy as np
import pytest
from conftest import KERNEL_TOLERANCE, model_batch, relative_error, tiny_model
from cupy_launches import LAUNCHES
from cupy_standin import make_module
from hypothesis import example, given, settings
from hypothesis import strategies as st

import numpy_transformer as nt
from numpy_transformer import backend
from numpy_transformer import functional as F
from numpy_transformer.backend import random_uint16
from numpy_transformer.kernels import cuda, cuda_fused, using_kernels
from numpy_transformer.kernels.cuda_fused import (
    adam,
    attention_dropout,
    attention_softmax,
    bias_act,
    bias_relu,
    cross_entropy,
    dropout,
    dropout_add,
    dropout_add_norm,
    embedding_backward,
    layer_norm,
    layer_norm_add,
    layer_norm_add_dropout,
)

SETTINGS = settings(max_examples=25, deadline=None)
TWIN_TESTS = {
    "layer_norm",
    "layer_norm_add",
    "layer_norm_add_dropout",
    "dropout",
    "dropout_add",
    "dropout_add_norm",
    "bias_relu",
    "bias_act",
    "attention_softmax",
    "attention_dropout",
    "embedding_backward",
    "cross_entropy",
    "adam",
}  # the kernels whose twin a test below proves
ARCHITECTURES = ("compute_90",)  # H100 and H200


def assert_close(kernel, textbook, what):
    assert np.shape(kernel) == np.shape(textbook), what
    error = relative_error(kernel, textbook)
    assert error <= KERNEL_TOLERANCE, f"{what}: relative error {error:.2e}"


def test_every_fused_kernel_has_a_twin_test():
    assert set(cuda_fused.KERNELS) == TWIN_TESTS


@SETTINGS
@given(rows=st.integers(1, 40), width=st.integers(2, 600), seed=st.integers(0, 99))
@example(rows=3, width=257, seed=0)  # a row wider than a block's threads
def test_layer_norm_twin_equals_the_textbook(rows, width, seed):
    rng = np.random.default_rng(seed)
    x, gamma, beta = (
        rng.standard_normal((2, rows, width)),
        rng.standard_normal(width),
        rng.standard_normal(width),
    )
    dout = rng.standard_normal((2, rows, width))
    out, cache = F.layer_norm_forward(x, gamma, beta)
    grads = F.layer_norm_backward(dout, cache)
    originals = [np.copy(a) for a in (x, gamma, beta, dout)]
    for forward, backward in [
        (layer_norm.forward_twin, layer_norm.backward_twin),
        (layer_norm.forward, layer_norm.backward),  # off a GPU: the twin
        (cuda.layer_norm_forward, cuda.layer_norm_backward),  # the CUDA kernel set, switched on
    ]:
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(cuda_fused.ENV_VAR, "layer_norm")
            out_twin, cache_twin = forward(x, gamma, beta)
            gradients = backward(dout, cache_twin)
        assert_close(out_twin, out, f"{forward.__qualname__}")
        for name, twin, textbook in zip(("dx", "dgamma", "dbeta"), gradients, grads):
            assert_close(twin, textbook, f"{backward.__qualname__}: {name}")
    for after, before in zip((x, gamma, beta, dout), originals):
        np.testing.assert_array_equal(after, before)  # the inputs left as they were


@SETTINGS
@given(rows=st.integers(1, 40), width=st.integers(2, 600), seed=st.integers(0, 99))
@example(rows=3, width=257, seed=0)  # a row wider than a block's threads
def test_layer_norm_add_twin_equals_the_textbook(rows, width, seed):
    """dx + dskip, dgamma and dbeta, written into the arrays given (else new ones), from the cache of
    either forward; the CUDA kernel set's residual backward with the kernel on and off."""
    rng = np.random.default_rng(seed)
    x, dout, dskip = (rng.standard_normal((2, rows, width)) for _ in range(3))
    gamma, beta = rng.standard_normal(width), rng.standard_normal(width)
    _, cache = F.layer_norm_forward(x, gamma, beta)
    dx, dgamma, dbeta = F.layer_norm_backward(dout, cache)
    originals = [np.copy(a) for a in (x, gamma, dout, dskip)]
    for switched in ("layer_norm_add", "layer_norm,layer_norm_add", "layer_norm", "none"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(cuda_fused.ENV_VAR, switched)
            _, kernel_cache = cuda.layer_norm_forward(x, gamma, beta)
            for backward in (layer_norm_add.backward_added_twin, layer_norm_add.backward_added):
                outputs = np.full(width, np.nan), np.full(width, np.nan)
                gradients = backward(dout, kernel_cache, dskip, *outputs)
                for name, twin, textbook in zip(
                    ("dx", "dgamma", "dbeta"), gradients, (dx + dskip, dgamma, dbeta)
                ):
                    assert_close(twin, textbook, f"{switched}: {backward.__qualname__}: {name}")
                assert all(np.shares_memory(g, o) for g, o in zip(gradients[1:], outputs))
            gradients = cuda.layer_norm_backward_into(dout, kernel_cache, None, None, dskip)
            for name, got, textbook in zip(("dx", "dgamma", "dbeta"), gradients, (dx + dskip, dgamma, dbeta)):
                assert_close(got, textbook, f"{switched}: cuda.layer_norm_backward_into: {name}")
    for after, before in zip((x, gamma, dout, dskip), originals):
        np.testing.assert_array_equal(after, before)  # the inputs left as they were
    with pytest.raises(ValueError, match=r"dskip of shape \(3,\) must have dout's shape"):
        layer_norm_add.backward_added(dout, cache, np.zeros(3))


@SETTINGS
@given(
    rows=st.integers(1, 40), width=st.integers(2, 600), p=st.sampled_from([0.1, 0.5]), seed=st.integers(0, 99)
)
@example(rows=3, width=257, p=0.1, seed=0)  # a row wider than a block's threads
def test_layer_norm_add_dropout_twin_equals_the_textbook_with_its_mask(rows, width, p, seed):
    """dx + dskip, that through the dropout's Philox mask, dgamma and dbeta (into the arrays given)
    against the textbook's layer norm backward, add and dropout backward with the twin's mask; through
    the CUDA kernel set's switch, on only with dropout."""
    rng = np.random.default_rng(seed)
    x, dout, dskip = (rng.standard_normal((2, rows, width)) for _ in range(3))
    gamma, beta = rng.standard_normal(width), rng.standard_normal(width)
    _, cache = F.layer_norm_forward(x, gamma, beta)
    dx, dgamma, dbeta = F.layer_norm_backward(dout, cache)
    dropout_cache = dropout.new_cache(p, np.random.default_rng(seed))
    keep = dropout.keep_mask(dropout_cache.seed, x.shape, dropout_cache.threshold, dropout_cache.offset)
    expected = (dx + dskip, (dx + dskip) * keep / dropout_cache.keep_prob, dgamma, dbeta)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "layer_norm_add_dropout")
        assert cuda.fused_layer("layer_norm_add_dropout") is None  # the mask must be the fused dropout's
        patch.setenv(cuda_fused.ENV_VAR, "dropout,layer_norm_add_dropout")
        kernel = cuda.fused_layer("layer_norm_add_dropout")
    originals = [np.copy(a) for a in (x, dout, dskip)]
    for backward in (layer_norm_add_dropout.backward_dropped_twin, kernel):
        outputs = np.full(width, np.nan), np.full(width, np.nan)
        got = backward(dout, cache, dskip, dropout_cache, *outputs)
        for name, value, textbook in zip(("dx", "dropped", "dgamma", "dbeta"), got, expected):
            assert_close(value, textbook, f"{backward.__qualname__}: {name}")
        assert all(np.shares_memory(g, o) for g, o in zip(got[2:], outputs))
    for after, before in zip((x, dout, dskip), originals):
        np.testing.assert_array_equal(after, before)
    # without a skip gradient (a stack's final norm after its last connection): the norm's dx alone
    without_skip = (dx, dx * keep / dropout_cache.keep_prob, dgamma, dbeta)
    for backward in (layer_norm_add_dropout.backward_dropped_twin, kernel):
        got = backward(dout, cache, None, dropout_cache)
        for name, value, textbook in zip(("dx", "dropped", "dgamma", "dbeta"), got, without_skip):
            assert_close(value, textbook, f"{backward.__qualname__} without dskip: {name}")
    with pytest.raises(ValueError, match=r"dskip of shape \(3,\) must have dout's shape"):
        layer_norm_add_dropout.backward_dropped(dout, cache, np.zeros(3), dropout_cache)


@pytest.mark.parametrize("with_skip_gradient", [True, False])
def test_layer_norm_add_dropout_gradient_by_central_differences(with_skip_gradient):
    """The twin's dropped gradient is the float64 central differences, in the preceding sublayer's
    output y, of <dout, norm(skip + dropout(y))> + <dskip, skip + dropout(y)> with the twin's mask;
    without dskip (a stack's final norm), of the first term alone."""
    rng = np.random.default_rng(19)
    y, skip, dout, dskip = (rng.standard_normal((2, 3, 5)) for _ in range(4))
    gamma, beta, step = rng.standard_normal(5), rng.standard_normal(5), 1e-6
    dropout_cache = dropout.new_cache(0.4, np.random.default_rng(2))
    dskip = dskip if with_skip_gradient else None

    def loss(y):
        total = skip + dropout.apply_twin(y, dropout_cache)
        added = 0.0 if dskip is None else (dskip * total).sum()
        return float((dout * F.layer_norm_forward(total, gamma, beta)[0]).sum() + added)

    _, cache = layer_norm.forward_twin(skip + dropout.apply_twin(y, dropout_cache), gamma, beta)
    analytic = layer_norm_add_dropout.backward_dropped_twin(dout, cache, dskip, dropout_cache)[1]
    numeric = np.zeros_like(y)
    for index in np.ndindex(y.shape):
        up, down = y.copy(), y.copy()
        up[index] += step
        down[index] -= step
        numeric[index] = (loss(up) - loss(down)) / (2 * step)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


@SETTINGS
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 9),
    vocab=st.integers(1, 12),
    width=st.integers(1, 300),
    seed=st.integers(0, 99),
)
@example(batch=3, length=5, vocab=2, width=257, seed=0)  # many repeats, a row wider than a block
def test_embedding_backward_twin_equals_the_textbook(batch, length, vocab, width, seed):
    """The table's gradient (ids repeated, rows never seen left zero) against the textbook's add.at,
    the twin and through the CUDA kernel set's switch; float32 rows summed in float64."""
    rng = np.random.default_rng(seed)
    ids, table = rng.integers(0, vocab, (batch, length)), rng.standard_normal((vocab, width))
    dout = rng.standard_normal((batch, length, width))
    _, cache = F.embedding_forward(ids, table)
    expected = F.embedding_backward(dout, cache)
    originals = [np.copy(a) for a in (ids, dout)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "embedding_backward")
        for backward in (embedding_backward.backward, cuda.embedding_backward):
            assert_close(backward(dout, cache), expected, backward.__qualname__)
        single = embedding_backward.backward(dout.astype(np.float32), cache)
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, expected, rtol=1e-5, atol=1e-5)
    for after, before in zip((ids, dout), originals):
        np.testing.assert_array_equal(after, before)


def test_embedding_backward_gradient_by_central_differences():
    """The twin's dE is the float64 central differences of <dy, E[ids] * sqrt(D)>."""
    rng = np.random.default_rng(23)
    ids, table, dout = rng.integers(0, 4, (2, 3)), rng.standard_normal((5, 3)), rng.standard_normal((2, 3, 3))
    step = 1e-6
    _, cache = F.embedding_forward(ids, table)
    analytic = embedding_backward.backward(dout, cache)
    numeric = np.zeros_like(table)
    for index in np.ndindex(table.shape):
        up, down = table.copy(), table.copy()
        up[index] += step
        down[index] -= step
        numeric[index] = float(
            (dout * F.embedding_forward(ids, up)[0]).sum() - (dout * F.embedding_forward(ids, down)[0]).sum()
        ) / (2 * step)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


def test_layer_norm_add_gradient_by_central_differences():
    """The twin's dx + dskip, dgamma and dbeta are the float64 central differences of
    <dout, norm(x)> + <dskip, x>: the loss of a pre-norm residual connection's two paths."""
    rng = np.random.default_rng(7)
    x, dout, dskip = (rng.standard_normal((2, 3, 5)) for _ in range(3))
    gamma, beta, step = rng.standard_normal(5), rng.standard_normal(5), 1e-6

    def loss(x, gamma, beta):
        return float((dout * F.layer_norm_forward(x, gamma, beta)[0]).sum() + (dskip * x).sum())

    _, cache = layer_norm.forward_twin(x, gamma, beta)
    analytic = layer_norm_add.backward_added_twin(dout, cache, dskip)
    arguments = [x, gamma, beta]
    for which, gradient in enumerate(analytic):
        numeric = np.zeros_like(arguments[which])
        for index in np.ndindex(numeric.shape):
            shifted = [[a.copy() for a in arguments] for _ in range(2)]
            shifted[0][which][index] += step
            shifted[1][which][index] -= step
            numeric[index] = (loss(*shifted[0]) - loss(*shifted[1])) / (2 * step)
        np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8, err_msg=f"argument {which}")


@SETTINGS
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    t=st.integers(1, 12),
    s=st.integers(1, 200),
    mask_kind=st.sampled_from([None, "keys", "causal"]),
    p=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 99),
)
@example(batch=2, heads=2, t=3, s=130, mask_kind="keys", p=0.3, seed=0)  # a row wider than a block
def test_attention_softmax_twin_equals_the_textbook(batch, heads, t, s, mask_kind, p, seed):
    """The twin against the textbook's scale, mask and softmax (and their backward); the CUDA kernel
    set's attention with the kernel switched on against the textbook's attention."""
    rng = np.random.default_rng(seed)
    scores, dprobs = rng.standard_normal((batch, heads, t, s)) * 3, rng.standard_normal((batch, heads, t, s))
    mask = None
    if mask_kind == "keys":
        mask = rng.random((batch, 1, 1, s)) > 0.3
    elif mask_kind == "causal":
        mask = np.broadcast_to(np.tril(np.ones((t, s), dtype=bool)), (batch, 1, t, s)).copy()
    scale = 0.37
    textbook_scores = scores * scale if mask is None else np.where(mask, scores * scale, F.MASKED_SCORE)
    probs = F.softmax_forward(textbook_scores)[0]
    dscores = F.softmax_backward(dprobs, probs) * scale
    dscores = dscores if mask is None else np.where(mask, dscores, 0.0)
    for forward, backward in [
        (attention_softmax.forward_twin, attention_softmax.backward_twin),
        (attention_softmax.forward, attention_softmax.backward),  # off a GPU: the twin
    ]:
        twin_probs = forward(scores, mask, scale)
        assert_close(twin_probs, probs, forward.__qualname__)
        assert_close(backward(dprobs, twin_probs, mask, scale), dscores, backward.__qualname__)
    q, k, v = (rng.standard_normal((batch, heads, n, 4)) for n in (t, s, s))
    dout = rng.standard_normal((batch, heads, t, 4))
    out, cache = F.attention_forward(q, k, v, mask, p, np.random.default_rng(seed), p > 0)
    gradients = F.attention_backward(dout, cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "attention_softmax")
        fused_out, fused_cache = cuda.attention_forward(q, k, v, mask, p, np.random.default_rng(seed), p > 0)
        fused_gradients = cuda.attention_backward(dout, fused_cache)
    assert_close(fused_out, out, "cuda.attention_forward")
    for name, fused, textbook in zip(("dq", "dk", "dv"), fused_gradients, gradients):
        assert_close(fused, textbook, f"cuda.attention_backward: {name}")


def _attention_case(rng, batch, heads, t, s, mask_kind):
    scores = rng.standard_normal((batch, heads, t, s)) * 3
    mask = None
    if mask_kind == "keys":
        mask = rng.random((batch, 1, 1, s)) > 0.3
    elif mask_kind == "causal":
        mask = np.broadcast_to(np.tril(np.ones((t, s), dtype=bool)), (batch, 1, t, s)).copy()
    return scores, mask


def _textbook_softmax_dropout(scores, mask, scale, keep, keep_prob):
    """The textbook's scale, mask and softmax, then its dropout with the keep mask ``keep``."""
    masked = scores * scale if mask is None else np.where(mask, scores * scale, F.MASKED_SCORE)
    probs = F.softmax_forward(masked)[0]
    return probs, probs * keep / keep_prob


@SETTINGS
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    t=st.integers(1, 12),
    s=st.integers(1, 200),
    mask_kind=st.sampled_from([None, "keys", "causal"]),
    p=st.sampled_from([0.1, 0.5]),
    seed=st.integers(0, 99),
)
@example(batch=2, heads=2, t=3, s=130, mask_kind="keys", p=0.3, seed=0)  # a row wider than a block
def test_attention_dropout_twin_equals_the_textbook_with_its_mask(batch, heads, t, s, mask_kind, p, seed):
    """The twin against the textbook's softmax and dropout with the twin's Philox mask (forward and
    backward); the CUDA kernel set's attention with the kernel on against it with the softmax and the
    dropout fused apart: the same masks (one seed stream, the same offsets), so the same results."""
    rng = np.random.default_rng(seed)
    scores, mask = _attention_case(rng, batch, heads, t, s, mask_kind)
    ddropped, scale = rng.standard_normal(scores.shape), 0.37
    for forward, backward in [
        (attention_dropout.forward_dropped_twin, attention_dropout.backward_dropped_twin),
        (attention_dropout._forward, attention_dropout._backward),  # off a GPU: the twin
    ]:
        cache = attention_dropout.AttentionDropoutCache(*dropout.new_cache(p, np.random.default_rng(seed)))
        keep = dropout.keep_mask(cache.seed, scores.shape, cache.threshold, cache.offset)
        probs, dropped = _textbook_softmax_dropout(scores, mask, scale, keep, cache.keep_prob)
        dscores = F.softmax_backward(ddropped * keep / cache.keep_prob, probs) * scale
        dscores = dscores if mask is None else np.where(mask, dscores, 0.0)
        twin_probs, twin_dropped = forward(scores, mask, scale, cache)
        assert_close(twin_probs, probs, f"{forward.__qualname__}: probs")
        assert_close(twin_dropped, dropped, f"{forward.__qualname__}: dropped")
        assert_close(backward(ddropped, twin_probs, mask, scale, cache), dscores, backward.__qualname__)
    q, k, v = (rng.standard_normal((batch, heads, n, 4)) for n in (t, s, s))
    dout = rng.standard_normal((batch, heads, t, 4))
    results = {}
    for switched in ("attention_softmax,dropout", "attention_dropout"):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(cuda_fused.ENV_VAR, switched)
            out, cache = cuda.attention_forward(q, k, v, mask, p, np.random.default_rng(seed), True)
            results[switched] = (out, *cuda.attention_backward(dout, cache))
    for name, fused, apart in zip(("out", "dq", "dk", "dv"), *results.values()):
        assert_close(fused, apart, f"cuda attention with attention_dropout: {name}")


def test_attention_dropout_gradient_by_central_differences():
    """The twin's dS is the float64 central differences of <ddropped, dropped(scores)> with its mask."""
    rng = np.random.default_rng(11)
    scores, mask = _attention_case(rng, 1, 2, 3, 4, "causal")
    ddropped, scale, step = rng.standard_normal(scores.shape), 0.6, 1e-6
    cache = attention_dropout.AttentionDropoutCache(*dropout.new_cache(0.4, np.random.default_rng(3)))

    def loss(scores):
        return float((ddropped * attention_dropout.forward_dropped_twin(scores, mask, scale, cache)[1]).sum())

    probs, _ = attention_dropout.forward_dropped_twin(scores, mask, scale, cache)
    analytic = attention_dropout.backward_dropped_twin(ddropped, probs, mask, scale, cache)
    numeric = np.zeros_like(scores)
    for index in np.ndindex(scores.shape):
        up, down = scores.copy(), scores.copy()
        up[index] += step
        down[index] -= step
        numeric[index] = (loss(up) - loss(down)) / (2 * step)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


@SETTINGS
@given(
    rows=st.integers(1, 30),
    classes=st.integers(2, 300),
    smoothing=st.sampled_from([0.0, 0.1]),
    dloss=st.floats(0.1, 3.0),
    seed=st.integers(0, 99),
)
@example(rows=5, classes=257, smoothing=0.1, dloss=0.7, seed=0)  # a row wider than a block's threads
def test_cross_entropy_twin_equals_the_textbook(rows, classes, smoothing, dloss, seed):
    """Loss and gradient over every row, weighted by the labels' mask, against the textbook's
    cross-entropy of the labelled rows alone (the gradient zero on the others)."""
    rng = np.random.default_rng(seed)
    logits = rng.standard_normal((rows, classes)) * 3
    labelled = rng.random(rows) < 0.7
    labelled[-1] = True
    targets = np.where(labelled, rng.integers(0, classes, rows), -100)
    textbook, cache = F.cross_entropy_forward(logits[labelled], targets[labelled], None, smoothing)
    expected = np.zeros_like(logits)
    expected[labelled] = F.cross_entropy_backward(dloss, cache)
    originals = [np.copy(a) for a in (logits, targets, labelled)]

    def twin(*args):
        dlogits, row_loss = cross_entropy.rows_twin(*args)
        return cross_entropy.mean_twin(row_loss, args[2]), dlogits

    for function in (twin, cross_entropy.forward_backward, cuda.masked_cross_entropy):
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv(cuda_fused.ENV_VAR, "cross_entropy")
            loss, dlogits = function(logits, targets, labelled, smoothing, dloss)
        assert np.shape(loss) == ()
        assert_close(loss, textbook, f"{function.__qualname__}: loss")
        assert_close(dlogits, expected, f"{function.__qualname__}: dlogits")
    for after, before in zip((logits, targets, labelled), originals):
        np.testing.assert_array_equal(after, before)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("function", [adam.update_twin, adam.update])
def test_adam_twin_equals_the_textbook(function, weight_decay):
    """Three steps over a flat buffer against Adam's (AdamW's) update as the paper writes it, the flag
    true (the step's loss and gradient norm finite)."""
    rng = np.random.default_rng(0)
    size, lr, betas, eps = 1000, 0.01, (0.9, 0.98), 1e-9
    decay = (np.arange(size) < 600).astype(np.float64)  # the first parameters decay, the others not
    data = rng.standard_normal(size)
    m, v = np.zeros(size), np.zeros(size)
    expected, m_ref, v_ref = data.copy(), np.zeros(size), np.zeros(size)
    for t in (1, 2, 3):
        grad = rng.standard_normal(size)
        expected *= 1 - lr * weight_decay * decay
        m_ref = betas[0] * m_ref + (1 - betas[0]) * grad
        v_ref = betas[1] * v_ref + (1 - betas[1]) * grad**2
        m_hat, v_hat = m_ref / (1 - betas[0] ** t), v_ref / (1 - betas[1] ** t)
        expected -= lr * m_hat / (np.sqrt(v_hat) + eps)
        finite = np.array(True)
        function(data, grad, m, v, decay if weight_decay else None, finite, lr, betas, eps, t, weight_decay)
        assert_close(data, expected, f"step {t}")
        assert_close(m, m_ref, f"m, step {t}")
        assert_close(v, v_ref, f"v, step {t}")


@pytest.mark.parametrize("blowup", [1.0, np.nan, np.inf])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("function", [adam.update_twin, adam.update])
def test_adam_twin_with_its_flag_false_writes_nothing(function, weight_decay, blowup):
    """A refused step (the flag false: the loss or the gradient norm not finite) leaves the weights and
    both moments bit for bit, a NaN or infinite gradient included, as the kernel returns before it
    writes."""
    rng = np.random.default_rng(1)
    size = 1000
    data, m, v, grad = (
        rng.standard_normal(size),
        rng.standard_normal(size),
        rng.random(size),
        rng.standard_normal(size),
    )
    grad[7] = blowup
    decay = (np.arange(size) < 600).astype(np.float64)
    before = data.copy(), m.copy(), v.copy(), grad.copy()
    finite = np.array(False)
    with np.errstate(invalid="ignore"):  # the values not written are NaN where the gradient is infinite
        function(
            data,
            grad,
            m,
            v,
            decay if weight_decay else None,
            finite,
            0.01,
            (0.9, 0.98),
            1e-9,
            4,
            weight_decay,
        )
    for after, kept, name in zip((data, m, v, grad), before, ("data", "m", "v", "grad")):
        np.testing.assert_array_equal(after, kept, err_msg=name)


# Random123's known-answer vectors of Philox4x32-10 (its kat_vectors file): counter, key -> output
PHILOX_KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter, key, expected", PHILOX_KNOWN_ANSWERS)
def test_the_twins_philox_gives_the_known_answers(counter, key, expected):
    words = dropout.philox4x32(*(np.array([c], dtype=np.uint64) for c in counter), *map(np.uint64, key))
    assert tuple(int(word[0]) for word in words) == expected


@SETTINGS
@given(
    shape=st.sampled_from([(1,), (3, 5), (2, 7, 9), (4, 33, 16)]),
    p=st.sampled_from([0.1, 0.5, 0.9]),
    seed=st.integers(0, 99),
)
def test_dropout_twin_equals_the_textbook_with_its_mask(shape, p, seed):
    """The textbook's formula with the kernel's mask, forward and backward, the mask recomputed from
    the seed alone; through the CUDA kernel set with the kernel switched on too."""
    rng = np.random.default_rng(seed)
    x, dout = rng.standard_normal(shape), rng.standard_normal(shape)
    originals = [np.copy(x), np.copy(dout)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "dropout")
        out, cache = cuda.dropout_forward(x, p, np.random.default_rng(seed), True)
        dx = cuda.dropout_backward(dout, cache)
    assert isinstance(cache, dropout.PhiloxDropoutCache)
    keep = dropout.keep_mask(cache.seed, shape, cache.threshold, cache.offset)
    expected = F.DropoutCache(keep, cache.keep_prob)
    assert cache.keep_prob == F.dropout_forward(x, p, np.random.default_rng(0), True)[1].keep_prob
    assert_close(out, x * keep / cache.keep_prob, "forward")
    assert_close(dx, F.dropout_backward(dout, expected), "backward")
    assert_close(dropout.backward(dout, cache), dx, "the backward again")  # the same mask every time
    for after, before in zip((x, dout), originals):
        np.testing.assert_array_equal(after, before)


@SETTINGS
@given(
    shape=st.sampled_from([(1,), (3, 5), (2, 7, 9), (4, 33, 16)]),
    p=st.sampled_from([0.1, 0.5, 0.9]),
    seed=st.integers(0, 99),
)
def test_dropout_add_twin_equals_the_textbook_with_its_mask(shape, p, seed):
    """skip + the textbook's dropout with the kernel's mask, in float64; through the CUDA kernel set's
    switch (on only with dropout on), whose backward is dropout's."""
    rng = np.random.default_rng(seed)
    x, skip, dout = (rng.standard_normal(shape) for _ in range(3))
    originals = [np.copy(a) for a in (x, skip, dout)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "dropout_add")
        assert cuda.fused_layer("dropout_add") is None  # its backward is dropout's: off without it
        patch.setenv(cuda_fused.ENV_VAR, "dropout,dropout_add")
        out, cache = cuda.fused_layer("dropout_add")(x, skip, p, np.random.default_rng(seed))
        dx = cuda.dropout_backward(dout, cache)
    keep = dropout.keep_mask(cache.seed, shape, cache.threshold, cache.offset)
    expected = F.DropoutCache(keep, cache.keep_prob)
    assert_close(out, skip + F.dropout_backward(x, expected), "forward")
    assert_close(dropout_add.added_twin(x, skip, cache), out, "the twin again")
    assert_close(dx, F.dropout_backward(dout, expected), "backward")
    for after, before in zip((x, skip, dout), originals):
        np.testing.assert_array_equal(after, before)
    with pytest.raises(ValueError, match=r"skip of shape \(1,\) must have x's shape"):
        dropout_add.forward(np.zeros(3), np.zeros(1), p, np.random.default_rng(0))


@SETTINGS
@given(
    shape=st.sampled_from([(3, 5), (2, 4, 7), (1, 1, 300), (4, 70)]),
    p=st.sampled_from([0.1, 0.5]),
    seed=st.integers(0, 99),
)
def test_dropout_add_norm_twin_equals_the_textbook_with_its_mask(shape, p, seed):
    """The sum and its norm against the textbook's add of the dropped x (the twin's Philox mask) and its
    layer norm; through the CUDA kernel set's switch (on only with dropout); the norm's cache serves the
    textbook's layer norm backward."""
    rng = np.random.default_rng(seed)
    x, skip, dout = (rng.standard_normal(shape) for _ in range(3))
    gamma, beta = rng.standard_normal(shape[-1]), rng.standard_normal(shape[-1])
    originals = [np.copy(a) for a in (x, skip, gamma, beta)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "dropout_add_norm")
        assert cuda.fused_layer("dropout_add_norm") is None  # its backward is dropout's
        patch.setenv(cuda_fused.ENV_VAR, "dropout,dropout_add_norm")
        kernel = cuda.fused_layer("dropout_add_norm")
    total, out, cache, norm_cache = kernel(x, skip, p, np.random.default_rng(seed), gamma, beta, 1e-5)
    keep = dropout.keep_mask(cache.seed, shape, cache.threshold, cache.offset)
    textbook_total = skip + x * keep / cache.keep_prob
    textbook_out, textbook_cache = F.layer_norm_forward(textbook_total, gamma, beta, 1e-5)
    assert_close(total, textbook_total, "sum")
    assert_close(out, textbook_out, "normed")
    for name, got, textbook in zip(
        ("dx", "dgamma", "dbeta"),
        F.layer_norm_backward(dout, norm_cache),
        F.layer_norm_backward(dout, textbook_cache),
    ):
        assert_close(got, textbook, f"the norm's backward from the kernel's cache: {name}")
    assert_close(dropout.backward(dout, cache), dout * keep / cache.keep_prob, "dropout's backward")
    twin = dropout_add_norm.added_norm_twin(x, skip, cache, gamma, beta, 1e-5)
    for got, expected in zip(twin[:2], (textbook_total, textbook_out)):
        assert_close(got, expected, "twin")
    for after, before in zip((x, skip, gamma, beta), originals):
        np.testing.assert_array_equal(after, before)
    with pytest.raises(ValueError, match=r"skip of shape \(2,\) must have x's shape"):
        dropout_add_norm.forward(x, np.zeros(2), p, np.random.default_rng(0), gamma, beta)


@SETTINGS
@given(shape=st.sampled_from([(1, 1), (3, 5), (2, 7, 300), (4, 33, 16)]), seed=st.integers(0, 99))
def test_bias_relu_twin_equals_the_textbook(shape, seed):
    """relu(h + b) and its backward (dh, and db summed down every row) against the textbook's bias
    add, relu_forward and relu_backward, the twin and through the CUDA kernel set's switch."""
    rng = np.random.default_rng(seed)
    h, dout, bias = rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal(shape[-1])
    originals = [np.copy(a) for a in (h, dout, bias)]
    out, relu_cache = F.relu_forward(h + bias)
    dh = F.relu_backward(dout, relu_cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "bias_relu")
        kernel = cuda.fused_layer("bias_relu")
    assert kernel is bias_relu
    for forward, backward in (
        (bias_relu.forward_twin, bias_relu.backward_twin),
        (kernel.forward, kernel.backward),
    ):
        y, cache = forward(h, bias)
        assert_close(y, out, "forward")
        kernel_dh, dbias = backward(dout, cache)
        assert_close(kernel_dh, dh, "dh")
        assert_close(dbias, dh.reshape(-1, shape[-1]).sum(axis=0), "dbias")
    for after, before in zip((h, dout, bias), originals):
        np.testing.assert_array_equal(after, before)
    with pytest.raises(
        ValueError,
        match="no fused layer named 'bias_gelu': expected dropout_add, dropout_add_norm, layer_norm",
    ):
        cuda.fused_layer("bias_gelu")
    kernel_dh, dbias = bias_relu.backward(dout, y, np.full(shape[-1], np.nan))  # into the array given
    assert_close(dbias, dh.reshape(-1, shape[-1]).sum(axis=0), "dbias written")


@SETTINGS
@given(
    shape=st.sampled_from([(3, 5), (2, 4, 7), (1, 1, 300), (4, 70)]),
    activation=st.sampled_from(bias_act.ACTIVATIONS),
    seed=st.integers(0, 99),
)
def test_bias_act_twin_equals_the_textbook(shape, activation, seed):
    """f(h + b) and its backward (dh, and db summed down every row, written into the array given or a
    new one) against the textbook's bias add and activation, the twin and through the CUDA kernel set's
    switch; the feed-forward block's own activation where the switch is off."""
    rng = np.random.default_rng(seed)
    h, dout, bias = rng.standard_normal(shape) * 2, rng.standard_normal(shape), rng.standard_normal(shape[-1])
    originals = [np.copy(a) for a in (h, dout, bias)]
    out, cache = getattr(F, f"{activation}_forward")(h + bias)
    dh = getattr(F, f"{activation}_backward")(dout, cache)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(cuda_fused.ENV_VAR, "bias_act")
        kernel = cuda.fused_layer(f"bias_{activation}")
        patch.setenv(cuda_fused.ENV_VAR, "bias_relu")
        assert cuda.fused_layer(f"bias_{activation}") is None
    twin = (
        lambda h, bias: bias_act.forward_twin(h, bias, activation),
        lambda dout, pre, dbias=None: bias_act.backward_twin(dout, pre, activation, dbias),
    )
    for forward, backward in (twin, (kernel.forward, kernel.backward)):
        y, pre = forward(h, bias)
        assert_close(y, out, f"{activation} forward")
        for output in (None, np.full(shape[-1], np.nan)):
            kernel_dh, dbias = backward(dout, pre, output)
            assert_close(kernel_dh, dh, f"{activation} dh")
            assert_close(dbias, dh.reshape(-1, shape[-1]).sum(axis=0), f"{activation} dbias")
            assert output is None or np.shares_memory(dbias, output)
    for after, before in zip((h, dout, bias), originals):
        np.testing.assert_array_equal(after, before)
    with pytest.raises(ValueError, match="activation must be one of"):
        bias_act.BiasActivation("relu")


@pytest.mark.parametrize("activation", bias_act.ACTIVATIONS)
def test_a_feed_forward_block_runs_bias_act_on_the_stand_in(activation, monkeypatch):
    """The block's forward and backward on the CuPy stand-in with bias_act on: its launches counted, the
    output, dx and the parameters' gradients (the bias's written straight in) the textbook's on NumPy."""
    monkeypatch.setenv(cuda_fused.ENV_VAR, "bias_act")
    rng = np.random.default_rng(17)
    x, dout = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 3, 8))
    weights = nt.layers.FeedForwardBlock(8, 12, 0.0, activation, dtype="float64").state_dict()
    results = []
    for on_standin in (False, True):
        previous = backend.get_array_module()
        xp = backend.set_backend(make_module()) if on_standin else previous
        try:
            with using_kernels("fast" if on_standin else "reference"):
                block = nt.layers.FeedForwardBlock(8, 12, 0.0, activation, dtype="float64")
                block.load_state_dict(weights)
                LAUNCHES.clear()
                out = block.forward(xp.asarray(x))
                dx = block.backward(xp.asarray(dout))
                results.append(
                    [backend.to_numpy(a) for a in (out, dx, *(p.grad for p in block.parameters()))]
                )
                launches = dict(LAUNCHES)
        finally:
            backend.set_backend(previous)
    assert launches["fused:bias_act"] == 2
    for index, (fused, textbook) in enumerate(zip(*results)):
        assert_close(fused, textbook, f"result {index}")


@pytest.mark.parametrize("activation", bias_act.ACTIVATIONS)
def test_bias_act_gradient_by_central_differences(activation):
    """The twin's dh and db are the float64 central differences of <dy, f(h + b)>."""
    rng = np.random.default_rng(13)
    h, dout, bias, step = (
        rng.standard_normal((2, 3, 4)) * 2,
        rng.standard_normal((2, 3, 4)),
        rng.standard_normal(4),
        1e-6,
    )

    def loss(h, bias):
        return float((dout * bias_act.forward_twin(h, bias, activation)[0]).sum())

    _, pre = bias_act.forward_twin(h, bias, activation)
    analytic = bias_act.backward_twin(dout, pre, activation)
    for which, gradient in enumerate(analytic):
        arguments = [h, bias]
        numeric = np.zeros_like(arguments[which])
        for index in np.ndindex(numeric.shape):
            shifted = [[a.copy() for a in arguments] for _ in range(2)]
            shifted[0][which][index] += step
            shifted[1][which][index] -= step
            numeric[index] = (loss(*shifted[0]) - loss(*shifted[1])) / (2 * step)
        np.testing.assert_allclose(gradient, numeric, rtol=1e-6, atol=1e-8, err_msg=f"argument {which}")


@pytest.mark.parametrize(
    "fused, more, saved, norm_first",
    [
        ("dropout", "dropout,dropout_add", 2 * 2 + 3 * 2, False),  # a launch at every residual connection
        # post-norm, where a norm follows no connection's sum as it is: the norms' kernels on change nothing
        ("dropout", "dropout,dropout_add_norm,layer_norm_add_dropout,dropout_add", 2 * 2 + 3 * 2, False),
        ("dropout", "dropout,bias_relu", 2 * 2 * 2, False),  # two forward, one backward at every feed-forward
        # pre-norm: a launch where one connection's sum is the next one's norm, inside every block,
        # and across blocks: a block's last sum into the next block's norm, or into the stack's final one
        ("dropout,dropout_add", "dropout,dropout_add,dropout_add_norm", 2 * 1 + 2 * 2 + 2 * 2, True),
        # and backwards: a launch where one connection's input gradient is the one before's output's
        (
            "dropout,layer_norm_add",
            "dropout,layer_norm_add,layer_norm_add_dropout",
            2 * 1 + 2 * 2 + 2 * 2,
            True,
        ),
    ],
)
def test_a_fused_layer_is_the_step_it_replaces(fused, more, saved, norm_first):
    """A training step on the CuPy stand-in with a layer's steps fused (the residual add into dropout,
    the bias and ReLU): the same masks (one seed stream, the same offsets), so the same loss and
    gradients to rounding, with ``saved`` launches fewer at least (tiny_model: two encoder blocks, two
    decoder blocks)."""
    previous = backend.get_array_module()
    backend.set_backend(make_module())
    try:
        steps = {}
        for switched in (fused, more):
            with pytest.MonkeyPatch.context() as patch, using_kernels("fast"):
                patch.setenv(cuda_fused.ENV_VAR, switched)
                model = tiny_model("mha", norm_first, dtype="float64", dropout=0.3, seed=4).train()
                model.set_rng(backend.make_rng(9))
                src, tgt, labels = (backend.get_array_module().asarray(a) for a in model_batch(2))
                masks = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)
                LAUNCHES.clear()
                loss = nt.loss_and_backward(model, src, tgt, *masks, labels, 0, 0.1, on_device=True)
                steps[switched] = (float(loss), model.flat.grad.get(), dict(LAUNCHES))
    finally:
        backend.set_backend(previous)
    (loss, grads, launches), (fused_loss, fused_grads, fused_launches) = steps.values()
    assert fused_loss == pytest.approx(loss, rel=1e-12)
    assert relative_error(fused_grads, grads) <= KERNEL_TOLERANCE
    assert fused_launches[f"fused:{more.split(',')[-1]}"] > 0
    assert sum(fused_launches.values()) <= sum(launches.values()) - saved


def test_one_seed_a_generator_and_an_offset_a_call():
    """The first fused dropout under a generator draws its seed (four 16-bit draws); every later call
    under it takes the next offset, the counter's third word, and so a mask of its own; another
    generator draws its own seed, from offset 0."""
    rng, fresh = np.random.default_rng(7), np.random.default_rng(7)
    caches = [dropout.forward(np.ones(64), 0.5, rng)[1] for _ in range(3)]
    assert [cache.offset for cache in caches] == [0, 1, 2]
    assert all(cache.seed is caches[0].seed for cache in caches)
    np.testing.assert_array_equal(caches[0].seed, random_uint16(fresh, (4,)))
    assert rng.integers(0, 2**32) == fresh.integers(0, 2**32)  # one draw, not three
    masks = [dropout.keep_mask(c.seed, (64,), c.threshold, c.offset) for c in caches]
    assert not np.array_equal(masks[0], masks[1]) and not np.array_equal(masks[1], masks[2])
    other = dropout.forward(np.ones(64), 0.5, np.random.default_rng(8))[1]
    assert other.offset == 0 and not np.array_equal(other.seed, caches[0].seed)
    words = dropout.philox4x32(
        *(np.array([c], dtype=np.uint64) for c in (0, 0, 2, 0)),
        *(np.uint64(int(caches[2].seed[i]) | int(caches[2].seed[i + 1]) << 16) for i in (0, 2)),
    )
    assert masks[2][:4].tolist() == [int(w[0]) >> 16 >= caches[2].threshold for w in words]


def test_the_philox_mask_keeps_one_minus_p():
    keep_prob = []
    for seed in range(4):
        cache = dropout.forward(np.ones(2**16), 0.1, np.random.default_rng(seed))[1]
        keep_prob.append(dropout.keep_mask(cache.seed, (2**16,), cache.threshold, cache.offset).mean())
    kept = np.mean(keep_prob)  # 2^18 entries: the standard error of the kept fraction is 5.9e-4
    assert abs(kept - 0.9) < 6 * 5.9e-4, kept
    assert len(set(keep_prob)) == 4  # each seed its own mask


@pytest.mark.parametrize(
    "value, on",
    [
        (None, cuda_fused.PROVEN_ON_GPU),
        ("all", cuda_fused.KERNELS),
        ("none", ()),
        ("layer_norm", ("layer_norm",)),
    ],
)
def test_the_switches(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv(cuda_fused.ENV_VAR, raising=False)
    else:
        monkeypatch.setenv(cuda_fused.ENV_VAR, value)
    assert cuda_fused.switched_on() == on
    assert cuda_fused.enabled("layer_norm") == ("layer_norm" in on)


def test_no_fused_kernel_is_on_by_default_until_a_gpu_proves_it(monkeypatch):
    monkeypatch.delenv(cuda_fused.ENV_VAR, raising=False)
    assert cuda_fused.PROVEN_ON_GPU == () and cuda_fused.switched_on() == ()


@pytest.mark.parametrize("value", ["layer_nrom", "layer_norm,", ",", "ALL"])
def test_an_unknown_kernel_name_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(cuda_fused.ENV_VAR, value)
    if value == "layer_norm,":  # a trailing comma names nothing more: accepted
        assert cuda_fused.switched_on() == ("layer_norm",)
        return
    with pytest.raises(
        ValueError, match=f"{cuda_fused.ENV_VAR} is {re.escape(repr(value))}, expected all, none"
    ):
        cuda_fused.switched_on()


# -- every source compiled for the GPUs lent, without one ---------------------------------------------


def _nvrtc():
    """cuda-bindings' NVRTC (pip install nvidia-cuda-nvrtc cuda-bindings); CI installs both (.ci/run)
    and sets NUMPY_TRANSFORMER_REQUIRE_NVRTC=1, so that there a missing compiler fails, never skips."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        if os.environ.get("NUMPY_TRANSFORMER_REQUIRE_NVRTC") == "1":
            raise
        pytest.skip("NVRTC is not installed here: pip install nvidia-cuda-nvrtc cuda-bindings")
    return nvrtc


def compile_to_ptx(source, name, architecture):
    """(PTX, log) of ``source`` compiled by NVRTC for ``architecture``; PTX is None on an error."""
    nvrtc = _nvrtc()

    def checked(result):
        error, *values = result
        assert error == nvrtc.nvrtcResult.NVRTC_SUCCESS, f"NVRTC: {error}"
        return values[0] if len(values) == 1 else values

    program = checked(nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], []))
    options = [
        f"--gpu-architecture={architecture}".encode(),
        *(o.encode() for o in cuda_fused.COMPILE_OPTIONS),
    ]
    (error,) = nvrtc.nvrtcCompileProgram(program, len(options), options)
    log = bytearray(checked(nvrtc.nvrtcGetProgramLogSize(program)))
    checked(nvrtc.nvrtcGetProgramLog(program, log))
    ptx = None
    if error == nvrtc.nvrtcResult.NVRTC_SUCCESS:
        ptx = bytearray(checked(nvrtc.nvrtcGetPTXSize(program)))
        checked(nvrtc.nvrtcGetPTX(program, ptx))
    checked(nvrtc.nvrtcDestroyProgram(program))
    return (None if ptx is None else bytes(ptx).decode(errors="replace")), bytes(log).decode(errors="replace")


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("name", cuda_fused.KERNELS)
def test_every_fused_source_compiles_for_the_gpus_lent(name, architecture):
    source = importlib.import_module(f"{cuda_fused.__name__}.{name}").KERNEL.source  # the whole program
    ptx, log = compile_to_ptx(source, name, architecture)
    assert ptx is not None, f"{name}.cu does not compile for {architecture}:\n{log}"
    for dtype in cuda_fused.C_TYPES.values():  # every entry the launches ask for, by dtype
        for entry in re.findall(r"\b(\w+)_##T\(", source):
            assert f".entry {entry}_{dtype}(" in ptx, f"{name}: no entry {entry}_{dtype} in the PTX"


def test_a_compile_error_is_named_with_its_line():
    source = 'extern "C" __global__ void broken(float* x) {\n    x[0] = undefined_name;\n}\n'
    ptx, log = compile_to_ptx(source, "broken", ARCHITECTURES[0])
    assert ptx is None
    assert re.search(r"broken\.cu\(2\): error: identifier \"undefined_name\" is undefined", log), log
