"""Every CPU kernel equals the textbook function it stands in for, in float64.

Hypothesis draws shapes on both sides of each of the kernels' internal thresholds (the
``ndarray.dot`` / matmul switch at SMALL_PRODUCT_MAX entries, the per-row sums up to FEW_ROWS
rows, Adam's slices and packing), the forward outputs and every backward gradient must agree to
a relative error of 1e-12, and a kernel must leave its inputs as it found them. Then the whole
model: two training steps on the kernels and on the textbook give the same parameters.
"""

import functools
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import KERNEL_TOLERANCE, model_batch, relative_error, tiny_model
from hypothesis import example, given, settings
from hypothesis import strategies as st

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking.contract import check_backward_contract
from numpy_transformer.kernels import (
    cpu,
    cuda,
    get_kernels,
    kernel_functions,
    ops,
    set_kernels,
    using_kernels,
)
from numpy_transformer.optim import Adam, AdamW, TextbookAdamUpdate

SETTINGS = settings(max_examples=25, deadline=None)
DECLARED = set()  # (module, kernel) pairs the tests below compare, as they declare them when the file is read
COMPARED = set()  # the pairs the running test has compared


def compares(*kernels):
    """Declares the (module, kernel) pairs a test compares: test_every_kernel_is_compared reads the
    declarations, whatever ran before it; the test fails if a run leaves one of them uncompared."""
    DECLARED.update(kernels)

    def declare(test):
        @functools.wraps(test)
        def checked(*args, **kwargs):
            COMPARED.clear()
            test(*args, **kwargs)
            missing = set(kernels) - COMPARED
            assert not missing, f"{test.__name__} declares {sorted(missing)} but did not compare them"

        return checked

    return declare


def both(name):
    """The kernel pair ``name``_forward and _backward of each kernel module (CPU and CUDA)."""
    return tuple((module, f"{name}_{way}") for module in ("cpu", "cuda") for way in ("forward", "backward"))


def rand(rng, *shape):
    return rng.standard_normal(shape)


def assert_same(kernel, textbook, what):
    if textbook is None or kernel is None:
        assert kernel is None and textbook is None, f"{what}: one side returned None"
        return
    assert np.shape(kernel) == np.shape(textbook), f"{what}: shape {np.shape(kernel)} != {np.shape(textbook)}"
    error = relative_error(kernel, textbook)
    assert error <= KERNEL_TOLERANCE, f"{what}: relative error {error:.2e}"


def compare(name, make_inputs, upstream_seed=0, dloss=None):
    """Run ``name``_forward and _backward on the textbook and on each kernel module's (the CUDA
    kernels are array operations: here on NumPy), each on fresh inputs from ``make_inputs()`` (so a
    generator inside starts from the same state), and compare."""
    for module in (cpu, cuda):
        _compare_module(module, name, make_inputs, upstream_seed, dloss)


def _compare_module(module, name, make_inputs, upstream_seed, dloss):
    forward, backward = f"{name}_forward", f"{name}_backward"
    module_name = module.__name__.rsplit(".", 1)[-1]
    COMPARED.update({(module_name, forward), (module_name, backward)})
    kernel_forward, kernel_backward = (
        getattr(module, forward, getattr(F, forward)),
        getattr(module, backward, getattr(F, backward)),
    )
    textbook_args, kernel_args = make_inputs(), make_inputs()
    originals = [np.copy(a) if isinstance(a, np.ndarray) else a for a in kernel_args]
    out_textbook, cache_textbook = getattr(F, forward)(*textbook_args)
    out_kernel, cache_kernel = kernel_forward(*kernel_args)
    assert_same(out_kernel, out_textbook, forward)
    upstream = (
        dloss if dloss is not None else rand(np.random.default_rng(upstream_seed), *np.shape(out_textbook))
    )
    grads_textbook = getattr(F, backward)(np.copy(upstream) if dloss is None else dloss, cache_textbook)
    grads_kernel = kernel_backward(np.copy(upstream) if dloss is None else dloss, cache_kernel)
    grads_textbook = grads_textbook if isinstance(grads_textbook, tuple) else (grads_textbook,)
    grads_kernel = grads_kernel if isinstance(grads_kernel, tuple) else (grads_kernel,)
    assert len(grads_kernel) == len(grads_textbook)
    for index, (kernel, textbook) in enumerate(zip(grads_kernel, grads_textbook)):
        assert_same(kernel, textbook, f"{backward}[{index}]")
    for index, (after, before) in enumerate(zip(kernel_args, originals)):
        if isinstance(before, np.ndarray):
            np.testing.assert_array_equal(after, before, err_msg=f"{forward} changed its argument {index}")
    for pair in ((kernel_forward, kernel_backward), (getattr(F, forward), getattr(F, backward))):
        assert_keeps_the_contract(*pair, make_inputs(), len(grads_kernel), OVERWRITES.get(name, ()))


OVERWRITES: dict[str, tuple[str, ...]] = {}  # kernels that write into an array they are given, on purpose


def assert_keeps_the_contract(forward, backward, args, count, overwrites):
    """The gradient checker's contract (gradcheck.check_backward_contract): dout, the inputs and the
    cache left as given, gradients in their input's dtype, shape and library, the same bits for the
    same arguments, no returned gradient overwritten by a later call. Gradient i is named after the
    first unnamed floating argument of its shape."""
    names = [f"a{i}" for i in range(len(args))]
    inputs = dict(zip(names, args))
    floating = [n for n, a in inputs.items() if isinstance(a, np.ndarray) and a.dtype == np.float64]
    out, cache = forward(*args)
    returned = backward(1.0 if np.ndim(out) == 0 else rand(np.random.default_rng(0), *np.shape(out)), cache)
    returned = returned if isinstance(returned, tuple) else (returned,)
    wrt = []
    for grad in returned[:count]:
        match = next(
            (n for n in floating if n not in wrt and grad is not None and inputs[n].shape == grad.shape), ""
        )
        wrt.append(match)
    inputs = dict(zip(names, make_fresh(args)))
    check_backward_contract(
        lambda **kw: forward(*(kw[n] for n in names)), backward, inputs, wrt, overwrites=overwrites
    )


def make_fresh(args):
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


# -- shapes on both sides of the thresholds --------------------------------------------------

rows = st.integers(1, 160)  # FEW_ROWS = 16
width = st.integers(1, 70)  # rows x width: both sides of SMALL_PRODUCT_MAX = 4096


def test_the_drawn_shapes_straddle_the_thresholds():
    assert cpu.FEW_ROWS == 16 and 160 * 70 > cpu.SMALL_PRODUCT_MAX > 70


@compares(*both("linear"))
@SETTINGS
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 40),
    n_in=width,
    n_out=width,
    bias=st.booleans(),
    seed=st.integers(0, 99),
)
@example(batch=1, length=3, n_in=5, n_out=4, bias=True, seed=0)  # dot
@example(batch=4, length=40, n_in=64, n_out=33, bias=True, seed=1)  # matmul
def test_linear(batch, length, n_in, n_out, bias, seed):
    rng = np.random.default_rng(seed)
    x, w, b = rand(rng, batch, length, n_in), rand(rng, n_out, n_in), rand(rng, n_out) if bias else None
    compare("linear", lambda: (x, w, b), seed)


@compares(*both("linear"))
@pytest.mark.parametrize(
    "n_out",
    [cpu.CHUNKED_PRODUCT_MIN, cpu.CHUNKED_PRODUCT_MIN + 1, cpu.CHUNKED_PRODUCT_MIN + cpu.PRODUCT_CHUNK + 5],
)
@pytest.mark.parametrize("rows", [8, cpu.FEW_ROWS_PRODUCT, cpu.FEW_ROWS_PRODUCT + 1])
def test_linear_of_a_decoding_steps_rows(rows, n_out):
    """2-D rows, as a decoding step's: up to FEW_ROWS_PRODUCT rows the weight multiplies on the left,
    by chunks of its rows past CHUNKED_PRODUCT_MIN (an output projection over a large vocabulary)."""
    rng = np.random.default_rng(rows + n_out)
    n_in = cpu.SMALL_PRODUCT_MAX // 8  # x.size >= SMALL_PRODUCT_MAX at every row count
    x, w, b = rand(rng, rows, n_in), rand(rng, n_out, n_in), rand(rng, n_out)
    compare("linear", lambda: (x, w, b), rows)
    # the weight on the left hands back a transposed view
    assert cpu.linear_forward(x, w, b)[0].flags.c_contiguous == (rows > cpu.FEW_ROWS_PRODUCT)


@compares(*both("embedding"))
@SETTINGS
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 40),
    vocab=st.integers(1, 30),
    d=width,
    seed=st.integers(0, 99),
)
@example(batch=4, length=40, vocab=3, d=64, seed=0)  # many repeated ids
def test_embedding(batch, length, vocab, d, seed):
    rng = np.random.default_rng(seed)
    ids, table = rng.integers(0, vocab, (batch, length)), rand(rng, vocab, d)
    compare("embedding", lambda: (ids, table), seed)
    # the flat add.at makes the same additions in the same order as the textbook's: identical sums
    dout = rand(rng, batch, length, d)
    np.testing.assert_array_equal(
        cpu.embedding_backward(dout, cpu.embedding_forward(ids, table)[1]),
        F.embedding_backward(dout, F.embedding_forward(ids, table)[1]),
    )


@compares(*both("dropout"))
@SETTINGS
@given(
    n=rows, d=width, p=st.sampled_from([0.0, 0.1, 0.5, 0.9]), training=st.booleans(), seed=st.integers(0, 99)
)
def test_dropout(n, d, p, training, seed):
    x = rand(np.random.default_rng(seed), n, d)
    compare("dropout", lambda: (x, p, np.random.default_rng(seed + 1), training), seed)


@compares(*both("softmax"))
@SETTINGS
@given(n=rows, d=width, seed=st.integers(0, 99))
@example(n=3, d=5, seed=0)  # a dot per row
@example(n=20, d=100, seed=1)  # one dot
@example(n=160, d=70, seed=2)  # one matmul
def test_softmax(n, d, seed):
    x = rand(np.random.default_rng(seed), 2, n, d) * 3
    compare("softmax", lambda: (x,), seed)


@compares(*both("layer_norm"))
@SETTINGS
@given(n=rows, d=st.integers(3, 70), seed=st.integers(0, 99))
@example(n=2, d=8, seed=0)
@example(n=160, d=64, seed=1)
def test_layer_norm(n, d, seed):
    rng = np.random.default_rng(seed)
    x, gamma, beta = rand(rng, n, d), rand(rng, d), rand(rng, d)
    compare("layer_norm", lambda: (x, gamma, beta), seed)


def _mask(rng, batch, t, s):
    mask = rng.random((batch, 1, t, s)) > 0.3
    mask[..., 0] = True
    return mask


@compares(*both("attention"))
@SETTINGS
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    t=st.integers(1, 24),
    s=st.integers(1, 24),
    k=st.integers(1, 8),
    masked=st.booleans(),
    p=st.sampled_from([0.0, 0.3]),
    seed=st.integers(0, 99),
)
@example(batch=1, heads=1, t=1, s=3, k=4, masked=True, p=0.3, seed=0)
@example(batch=3, heads=4, t=24, s=24, k=8, masked=True, p=0.3, seed=1)
def test_attention(batch, heads, t, s, k, masked, p, seed):
    rng = np.random.default_rng(seed)
    q, key, v = rand(rng, batch, heads, t, k), rand(rng, batch, heads, s, k), rand(rng, batch, heads, s, k)
    mask = _mask(rng, batch, t, s) if masked else None
    compare("attention", lambda: (q, key, v, mask, p, np.random.default_rng(seed), p > 0), seed)


@compares(
    *both("multi_head_self_attention"),
    *both("multi_head_attention"),
    *both("multi_head_latent_self_attention"),
    *both("multi_head_latent_attention"),
)
@SETTINGS
@given(
    kind=st.sampled_from(["mha", "mha-bias", "mla"]),
    batch=st.integers(1, 3),
    t=st.integers(1, 30),
    s=st.integers(1, 30),
    d_heads=st.sampled_from([(8, 1), (8, 2), (16, 4), (32, 2), (64, 8)]),
    p=st.sampled_from([0.0, 0.2]),
    seed=st.integers(0, 99),
)
@example(kind="mha", batch=1, t=1, s=2, d_heads=(8, 2), p=0.2, seed=0)
@example(kind="mha", batch=3, t=30, s=30, d_heads=(64, 8), p=0.2, seed=1)
@example(kind="mha-bias", batch=1, t=1, s=2, d_heads=(8, 2), p=0.2, seed=0)
@example(kind="mha-bias", batch=3, t=30, s=30, d_heads=(64, 8), p=0.2, seed=1)
@example(kind="mla", batch=1, t=1, s=2, d_heads=(8, 2), p=0.2, seed=0)
@example(kind="mla", batch=3, t=30, s=30, d_heads=(64, 8), p=0.2, seed=1)
def test_attention_blocks_self_and_cross(kind, batch, t, s, d_heads, p, seed):
    """MHA's weights [W_q; W_k; W_v] and W_o (with "mha-bias" their biases too, as Marian's), or
    MLA's [W_q; W_c], [W_kd; W_vd] and W_o."""
    d, heads = d_heads
    rng = np.random.default_rng(seed)
    x, encoder_output = rand(rng, batch, t, d), rand(rng, batch, s, d)
    if kind in ("mha", "mha-bias"):
        name, weights = "multi_head", (rand(rng, 3 * d, d) * 0.3, rand(rng, d, d) * 0.3)
    else:
        name = "multi_head_latent"
        weights = (rand(rng, d + d // 4, d) * 0.3, rand(rng, 2 * d, d // 4) * 0.3, rand(rng, d, d) * 0.3)
    self_mask, cross_mask = _mask(rng, batch, t, t), _mask(rng, batch, t, s)
    biases = (rand(rng, 3 * d), rand(rng, d)) if kind == "mha-bias" else ()
    dropout = lambda: (p, np.random.default_rng(seed), p > 0)  # noqa: E731  (a fresh generator per call)
    compare(f"{name}_self_attention", lambda: (x, *weights, self_mask, heads, *dropout(), *biases), seed)
    compare(
        f"{name}_attention",
        lambda: (x, encoder_output, *weights, cross_mask, heads, *dropout(), *biases),
        seed,
    )


@compares(*both("cross_entropy"))
@SETTINGS
@given(
    n=rows,
    vocab=st.integers(2, 70),
    smoothing=st.sampled_from([0.0, 0.1]),
    pad=st.sampled_from([None, 0]),
    dloss=st.floats(0.1, 3.0),
    seed=st.integers(0, 99),
)
@example(n=2, vocab=5, smoothing=0.1, pad=0, dloss=1.0, seed=0)
@example(n=160, vocab=64, smoothing=0.1, pad=0, dloss=0.5, seed=1)
def test_cross_entropy(n, vocab, smoothing, pad, dloss, seed):
    rng = np.random.default_rng(seed)
    logits, targets = rand(rng, 2, n, vocab) * 2, rng.integers(0, vocab, (2, n))
    targets[0, 0] = 1  # at least one real token
    compare("cross_entropy", lambda: (logits, targets, pad, smoothing), seed, dloss=dloss)


# -- Adam ------------------------------------------------------------------------------------


def _parameters(shapes, seed):
    rng = np.random.default_rng(seed)
    named = [(f"p{i}", nt.Parameter(rand(rng, *shape))) for i, shape in enumerate(shapes)]
    for _, parameter in named:
        parameter.grad[...] = rand(rng, *parameter.shape)
    return named


@compares(("cpu", "AdamUpdate"))
@settings(max_examples=10, deadline=None)
@given(
    shapes=st.lists(
        st.sampled_from([(3,), (7, 5), (40, 40), (300, 300), (70000,), (1, 65536)]), min_size=1, max_size=4
    ),
    threads=st.sampled_from([None, 1, 2]),
    decay=st.sampled_from([0.0, 0.1]),
    seed=st.integers(0, 99),
)
@example(
    shapes=[(3,), (300, 300), (7, 5)], threads=2, decay=0.1, seed=0
)  # packed, sliced and threaded together
def test_adam_update(shapes, threads, decay, seed):
    """Slices of 65536 entries, packing below that, PARALLEL_MIN threads: three steps, both ways."""
    COMPARED.add(("cpu", "AdamUpdate"))
    textbook_parameters, kernel_parameters = _parameters(shapes, seed), _parameters(shapes, seed)
    with using_kernels("reference"):
        textbook = AdamW(textbook_parameters, lr=0.01, weight_decay=decay)
    with using_kernels("fast"):
        kernel = AdamW(kernel_parameters, lr=0.01, weight_decay=decay, threads=threads)
    assert isinstance(kernel.update, cpu.AdamUpdate) and isinstance(textbook.update, TextbookAdamUpdate)
    for step in range(3):
        with using_kernels("reference"):
            textbook.step(0.01 / (step + 1))
        with using_kernels("fast"):
            kernel.step(0.01 / (step + 1))
        for (name, a), (_, b), m_a, m_b, v_a, v_b in zip(
            textbook_parameters, kernel_parameters, textbook.m, kernel.m, textbook.v, kernel.v
        ):
            assert_same(b.data, a.data, f"{name} after step {step + 1}")
            assert_same(m_b, m_a, f"m.{name}")
            assert_same(v_b, v_a, f"v.{name}")


def test_the_update_is_chosen_once_when_the_optimiser_is_made():
    """The kernel choice is not looked up at every step: an optimiser keeps the update it was made with."""
    named = _parameters([(5, 4)], 0)
    with using_kernels("fast"):
        optimiser = Adam(named, lr=0.1)
    calls = []
    optimiser.update.step = lambda *args: calls.append(args)
    with using_kernels("reference"):
        optimiser.step(0.05)
    assert len(calls) == 1 and calls[0][:5] == (0.05, (0.9, 0.98), 1e-9, 1, 0.0) and calls[0][5] == [False]
    with using_kernels("reference"):
        assert isinstance(Adam(named, lr=0.1).update, TextbookAdamUpdate)


@compares(("cuda", "embedding_backward"))
@SETTINGS
@given(
    batch=st.integers(1, 4),
    length=st.integers(1, 40),
    vocab=st.integers(1, 30),
    d=width,
    seed=st.integers(0, 99),
)
@example(batch=4, length=40, vocab=3, d=64, seed=0)  # many repeated ids
def test_cuda_embedding_backward_sums_sorted_segments(batch, length, vocab, d, seed):
    """The CUDA kernels are plain array operations: here they run on NumPy against the textbook."""
    COMPARED.add(("cuda", "embedding_backward"))
    rng = np.random.default_rng(seed)
    ids, table, dout = (
        rng.integers(0, vocab, (batch, length)),
        rand(rng, vocab, d),
        rand(rng, batch, length, d),
    )
    cache = F.embedding_forward(ids, table)[1]
    assert_same(
        cuda.embedding_backward(dout, cache), F.embedding_backward(dout, cache), "cuda.embedding_backward"
    )
    single = cuda.embedding_backward(dout.astype(np.float32), cache)  # float32 rows, summed in float64
    assert single.dtype == np.float32
    assert relative_error(single, F.embedding_backward(dout, cache)) <= 1e-6


@compares(("cuda", "masked_cross_entropy"))
@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 40),
    vocab=st.integers(2, 50),
    smoothing=st.sampled_from([0.0, 0.1]),
    dloss=st.floats(0.1, 3.0),
    seed=st.integers(0, 99),
)
@example(n=6, vocab=5, smoothing=0.1, dloss=1.0, seed=0)
def test_masked_cross_entropy_weights_the_labelled_rows(n, vocab, smoothing, dloss, seed):
    """The mask-weighted loss over every row (the textbook's and the CUDA kernel's) equals the
    textbook's cross-entropy of the labelled rows alone, and its gradient the textbook's there and
    zero elsewhere, without a look at the mask on the host."""
    COMPARED.add(("cuda", "masked_cross_entropy"))
    rng = np.random.default_rng(seed)
    logits, targets = rand(rng, n, vocab) * 2, rng.integers(0, vocab, n)
    labelled = rng.random(n) < 0.7
    labelled[0] = True
    targets[~labelled] = -100  # anything: an ignore index outside the vocabulary
    textbook, cache = F.cross_entropy_forward(logits[labelled], targets[labelled], None, smoothing)
    expected = np.zeros_like(logits)
    expected[labelled] = F.cross_entropy_backward(dloss, cache)
    originals = [np.copy(a) for a in (logits, targets, labelled)]
    for function in (F.masked_cross_entropy, cuda.masked_cross_entropy):
        loss, dlogits = function(logits, targets, labelled, smoothing, dloss)
        assert loss.shape == () and dlogits.shape == logits.shape
        assert_same(loss, textbook, f"{function.__module__}: loss")
        assert_same(dlogits, expected, f"{function.__module__}: dlogits")
        for after, before in zip((logits, targets, labelled), originals):
            np.testing.assert_array_equal(after, before)
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 / 0: no row labelled
            nothing, _ = function(logits, targets, np.zeros(n, bool), smoothing, dloss)
        assert np.isnan(nothing)


@compares(("cuda", "AdamUpdate"))
@pytest.mark.parametrize("fused", ["none", "adam"])  # the array operations, the fused kernel's twin
@pytest.mark.parametrize("kind", ["mha", "mla"])
@pytest.mark.parametrize("decay", [0.0, 0.1])
def test_cuda_adam_update_over_the_flat_buffers(kind, decay, fused, monkeypatch):
    monkeypatch.setenv("NUMPY_TRANSFORMER_FUSED", fused)
    COMPARED.add(("cuda", "AdamUpdate"))
    models = [tiny_model(kind, True, dropout=0.0, seed=3) for _ in "ab"]
    with using_kernels("reference"):
        textbook, fused = (
            AdamW(models[0], lr=0.01, weight_decay=decay),
            AdamW(models[1], lr=0.01, weight_decay=decay),
        )
    fused.update = cuda.AdamUpdate(fused.named_parameters, None, models[1].flat)
    fused.m, fused.v = fused.update.m, fused.update.v
    for step in range(3):
        src, tgt, labels = model_batch(step)
        for model in models:
            model.zero_grad()
            logits = model.forward(src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
            model.backward(
                ops.cross_entropy_backward(1.0, ops.cross_entropy_forward(logits, labels, 0, 0.1)[1])
            )
        with using_kernels("reference"):
            textbook.step(0.01 / (step + 1))
        with using_kernels("fast"):
            fused.step(0.01 / (step + 1))
        for (name, a), (_, b), m_a, m_b in zip(
            textbook.named_parameters, fused.named_parameters, textbook.m, fused.m
        ):
            assert_same(b.data, a.data, f"{name} after step {step + 1}")
            assert_same(m_b, m_a, f"m.{name}")


def test_every_kernel_is_compared():
    """A kernel added without a test here fails this, in any order and alone."""
    kernels = {
        (module.__name__.rsplit(".", 1)[-1], name)
        for module in (cpu, cuda)
        for name in [*kernel_functions(module), "AdamUpdate"]
    }
    assert kernels <= DECLARED, f"kernels without an equality test: {sorted(kernels - DECLARED)}"


# -- the whole model -------------------------------------------------------------------------


def _two_training_steps(kind, norm_first, kernels):
    with using_kernels(kernels):
        model = tiny_model(kind, norm_first, dropout=0.2, seed=3).train()
        optimiser = AdamW(model, lr=0.01, weight_decay=0.01)
        for seed in (0, 1):
            src, tgt, labels = model_batch(seed)
            optimiser.zero_grad()
            logits = model.forward(src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
            loss, cache = ops.cross_entropy_forward(logits, labels, 0, 0.1)
            model.backward(ops.cross_entropy_backward(1.0, cache))
            optimiser.step()
    return loss, {name: parameter.data.copy() for name, parameter in model.named_parameters()}


@pytest.mark.parametrize("kind", ["mha", "mla"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_two_training_steps_fast_equal_reference(kind, norm_first):
    fast_loss, fast = _two_training_steps(kind, norm_first, "fast")
    reference_loss, reference = _two_training_steps(kind, norm_first, "reference")
    assert fast_loss == pytest.approx(reference_loss, rel=1e-10)
    for name in reference:
        error = relative_error(fast[name], reference[name])
        assert error <= 1e-10, f"{name}: relative error {error:.2e}"
    assert any(
        not np.array_equal(fast[name], tiny_model(kind, norm_first, seed=3).state_dict()[name])
        for name in fast
    )  # the steps moved the weights


# -- selecting kernels -----------------------------------------------------------------------


def test_set_kernels_chooses_and_refuses_unknown_names():
    set_kernels("fast")
    assert get_kernels() == "fast"
    assert ops.layer_norm_forward is cpu.layer_norm_forward
    assert ops.relu_forward is F.relu_forward  # not tuned: the textbook's
    with using_kernels("reference"):
        assert get_kernels() == "reference"
        assert ops.layer_norm_forward is F.layer_norm_forward
    assert ops.layer_norm_forward is cpu.layer_norm_forward
    with pytest.raises(
        ValueError, match=r"kernels must be one of \('fast', 'reference', 'learner'\), got 'turbo'"
    ):
        set_kernels("turbo")
    assert get_kernels() == "fast"
    assert nt.set_kernels is set_kernels and nt.get_kernels is get_kernels


@pytest.mark.parametrize("value, chosen", [(None, "fast"), ("reference", "reference"), ("fast", "fast")])
def test_environment_variable_chooses_the_kernels(value, chosen):
    env = {k: v for k, v in os.environ.items() if k != "NUMPY_TRANSFORMER_KERNELS"}
    env.update({"NUMPY_TRANSFORMER_KERNELS": value} if value else {})
    code = (
        "import numpy_transformer as nt; from numpy_transformer.kernels import ops; "
        "print(nt.get_kernels(), ops.softmax_forward.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    module = "numpy_transformer.kernels.cpu" if chosen == "fast" else "numpy_transformer.functional"
    assert out.stdout.split() == [chosen, module]


def test_a_bad_environment_variable_is_named():
    env = {**os.environ, "NUMPY_TRANSFORMER_KERNELS": "turbo"}
    code = "import numpy_transformer as nt; nt.get_kernels()"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode != 0
    assert (
        "the environment variable NUMPY_TRANSFORMER_KERNELS is 'turbo', expected one of fast, reference, "
        "learner" in out.stderr
    )


def test_every_kernel_keeps_the_textbook_signature():
    import inspect

    def arguments(function):  # names, kinds and defaults: the caches' types are each side's own
        return [(p.name, p.kind, p.default) for p in inspect.signature(function).parameters.values()]

    for module in (cpu, cuda):
        for name, kernel in kernel_functions(module).items():
            assert arguments(kernel) == arguments(getattr(F, name)), name


def test_masked_cross_entropy_gradient_by_central_differences():
    """The textbook's masked loss: dlogits equals dloss times the float64 central differences of the
    loss, entry by entry (the rows not labelled included: there both are zero)."""
    rng = np.random.default_rng(5)
    logits, targets = rng.normal(size=(5, 4)), rng.integers(0, 4, 5)
    labelled = np.array([True, False, True, True, False])
    dloss, step = float(rng.uniform(0.5, 2.0)), 1e-6
    _, dlogits = F.masked_cross_entropy(logits, targets, labelled, 0.1, dloss)
    numeric = np.zeros_like(logits)
    for index in np.ndindex(logits.shape):
        shifted = [logits.copy(), logits.copy()]
        shifted[0][index] += step
        shifted[1][index] -= step
        up, down = (float(F.masked_cross_entropy(s, targets, labelled, 0.1, 1.0)[0]) for s in shifted)
        numeric[index] = dloss * (up - down) / (2 * step)
    np.testing.assert_allclose(dlogits, numeric, rtol=1e-6, atol=1e-9)
