"""Gradients written straight into their parameters' arrays (kernels.backward_into), as the CUDA kernel
set does so that no copy follows a product: the same gradients as the ones handed to accumulate().

kernels.cuda's ``*_backward_into`` run on NumPy here (they are array operations), written into arrays
filled with NaN so that an entry left unwritten shows; then a training step on the CuPy stand-in,
whose first backward after zero_grad writes and whose second accumulates, against NumPy's textbook.
"""

import numpy as np
import pytest
from conftest import KERNEL_TOLERANCE, model_batch, relative_error
from cupy_standin import make_module

import numpy_transformer as nt
from numpy_transformer import backend
from numpy_transformer import functional as F
from numpy_transformer.kernels import backward_into, cuda, cuda_fused, using_kernels


def assert_written(returned, outputs, expected, what):
    """Each returned gradient is its output array (where one was given), equal to the expected one."""
    for index, (gradient, output, wanted) in enumerate(zip(returned, outputs, expected)):
        if wanted is None:
            assert gradient is None, f"{what}[{index}]"
            continue
        if output is not None:
            assert np.shares_memory(gradient, output), f"{what}[{index}] is not its output"
            assert not np.isnan(output).any(), f"{what}[{index}] left entries unwritten"
        error = relative_error(gradient, wanted)
        assert error <= KERNEL_TOLERANCE, f"{what}[{index}]: relative error {error:.2e}"


def nan_like(array):
    return None if array is None else np.full_like(array, np.nan)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_backward_into_writes_the_textbooks_gradients(bias):
    rng = np.random.default_rng(0)
    x, weight, dout = (
        rng.standard_normal((3, 4, 5)),
        rng.standard_normal((6, 5)),
        rng.standard_normal((3, 4, 6)),
    )
    b = rng.standard_normal(6) if bias else None
    _, cache = F.linear_forward(x, weight, b)
    dx, dweight, dbias = F.linear_backward(dout, cache)
    outputs = (nan_like(dweight), nan_like(dbias))
    written = cuda.linear_backward_into(dout, cache, *outputs)
    assert_written(written, (None, *outputs), (dx, dweight, dbias), "linear")


@pytest.mark.parametrize("fused", ["none", "layer_norm"])
def test_layer_norm_backward_into_writes_the_textbooks_gradients(fused, monkeypatch):
    monkeypatch.setenv(cuda_fused.ENV_VAR, fused)
    rng = np.random.default_rng(1)
    x, gamma, beta, dout = (rng.standard_normal(shape) for shape in ((5, 3, 7), (7,), (7,), (5, 3, 7)))
    _, cache = F.layer_norm_forward(x, gamma, beta)
    expected = F.layer_norm_backward(dout, cache)
    outputs = (nan_like(gamma), nan_like(gamma))
    _, kernel_cache = cuda.layer_norm_forward(x, gamma, beta)
    written = cuda.layer_norm_backward_into(dout, kernel_cache, *outputs)
    assert_written(written, (None, *outputs), expected, "layer_norm")


@pytest.mark.parametrize(
    "kind, cross, bias",
    [
        ("mha", False, False),
        ("mha", False, True),
        ("mha", True, True),
        ("mha", True, False),
        ("mla", False, False),
        ("mla", True, False),
    ],
)
def test_attention_backward_into_writes_what_the_block_returns(kind, cross, bias):
    """Every gradient of a block written into its output (cross-attention's w_in by its two products
    into its two row blocks), equal to the block's own backward (test_kernels holds that equal to the
    textbook); with no outputs, new arrays."""
    rng = np.random.default_rng(2)
    d, heads, latent = 8, 2, 2
    x_q, x_kv = rng.standard_normal((2, 5, d)), rng.standard_normal((2, 4, d)) if cross else None
    w_in = rng.standard_normal((d + latent if kind == "mla" else 3 * d, d))
    w_decompress = rng.standard_normal((2 * d, latent)) if kind == "mla" else None
    w_o = rng.standard_normal((d, d))
    b_in, b_o = (rng.standard_normal(len(w_in)), rng.standard_normal(d)) if bias else (None, None)
    out, cache = cuda._fused_forward(
        x_q, x_kv, w_in, w_decompress, w_o, None, heads, 0.0, None, False, b_in, b_o
    )
    dout = rng.standard_normal(out.shape)
    expected = cuda._fused_backward(dout, cache)
    outputs = tuple(nan_like(gradient) for gradient in expected[2:])
    written = cuda.attention_backward_into(dout, cache, outputs)
    assert_written(written, (None, None, *outputs), expected, f"{kind} attention")
    assert_written(cuda.attention_backward_into(dout, cache, cuda.NO_OUTPUTS), (None,) * 7, expected, "new")


def test_only_the_cuda_kernel_set_writes_gradients_in_place():
    with using_kernels("fast"):
        assert backward_into("linear") is None  # NumPy: the CPU kernels, unchanged
    previous = backend.get_array_module()
    backend.set_backend(make_module())
    try:
        with using_kernels("fast"):
            assert backward_into("attention") is cuda.attention_backward_into
            with pytest.raises(ValueError, match="no backward_into for 'softmax'"):
                backward_into("softmax")
        with using_kernels("reference"):
            assert backward_into("linear") is None
    finally:
        backend.set_backend(previous)


def two_backwards(kind, attention_bias, on_standin, tie_embeddings=False):
    """The flat gradient after zero_grad and two backwards of one batch (the first written, the second
    accumulated), in float64 without dropout; on the stand-in (the CUDA kernel set, every fused kernel
    on), else on NumPy's textbook; the weights NumPy's generator drew either way."""

    def build():
        return nt.build_transformer(
            11, 13, 7, 6, d_model=8, N=2, h=2, d_ff=12, dropout=0.0, attention=kind,
            attention_bias=attention_bias, tie_embeddings=tie_embeddings, dtype="float64", seed=5,
        )  # fmt: skip

    weights = build().state_dict()
    previous = backend.get_array_module()
    xp = backend.set_backend(make_module()) if on_standin else previous
    try:
        with using_kernels("fast" if on_standin else "reference"):
            model = build()
            model.load_state_dict(weights)
            model.flatten_parameters()
            src, tgt, labels = (xp.asarray(a) for a in model_batch(3))
            masks = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)
            model.zero_grad()
            for _ in range(2):
                nt.loss_and_backward(model, src, tgt, *masks, labels, 0, 0.1, on_device=True)
            return backend.to_numpy(model.flat.gradients())
    finally:
        backend.set_backend(previous)


@pytest.mark.parametrize(
    "kind, attention_bias, tie_embeddings",
    [("mha", False, False), ("mha", True, False), ("mla", False, False), ("mha", False, True)],
)  # tied: the projection writes the shared table's gradient, the embedding's backward adds to it
def test_a_step_on_the_stand_in_writes_the_textbooks_gradients(
    kind, attention_bias, tie_embeddings, monkeypatch
):
    monkeypatch.setenv(cuda_fused.ENV_VAR, "all")
    written = two_backwards(kind, attention_bias, True, tie_embeddings)
    textbook = two_backwards(kind, attention_bias, False, tie_embeddings)
    assert relative_error(written, textbook) <= KERNEL_TOLERANCE
