"""The architecture options a pretrained Marian (OPUS-MT) model needs, each off by default.

SiLU (swish) and tanh-GELU activations, biases on the attention projections, the sinusoids as
sines then cosines, no final encoder/decoder norm: each textbook pair checked against central
differences in float64 (inputs and parameters, a random non-uniform upstream gradient), the whole
model with all of them checked for every parameter, cached decoding equal to uncached, and the
defaults unchanged.
"""

import numpy as np
import pytest
from conftest import GRADCHECK_TOLERANCE as TOLERANCE
from conftest import model_batch
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_gradients, gradcheck
from numpy_transformer.translator.decoding import beam_search, greedy_decode

SETTINGS = settings(max_examples=8, deadline=None)
MARIAN = {
    "activation": "silu",
    "attention_bias": True,
    "positions": "split",
    "final_norm": False,
    "norm_first": False,
    "tie_embeddings": True,
}


def rand(rng, *shape):
    return rng.standard_normal(shape)


def check(forward, backward, inputs, wrt):
    result = assert_gradients(forward, backward, inputs, wrt)
    assert result.max_relative_error <= TOLERANCE, str(result)
    assert {report.name for report in result.reports} == {name for name in wrt if name}
    return result


@pytest.mark.parametrize("name", ["silu", "gelu_tanh"])
def test_activations_against_central_differences(name):
    """Smooth everywhere, so no kink to keep away from; entries spread over [-4, 4]."""
    x = np.random.default_rng(1).uniform(-4, 4, (3, 5, 7))
    check(getattr(F, f"{name}_forward"), getattr(F, f"{name}_backward"), {"x": x}, ["x"])


def test_activations_values():
    x = np.linspace(-6, 6, 101)
    np.testing.assert_allclose(F.silu_forward(x)[0], x / (1 + np.exp(-x)), rtol=1e-15)
    torch = pytest.importorskip("torch", reason="PyTorch is the oracle for the activations' values")
    t = torch.tensor(x)
    np.testing.assert_allclose(
        F.silu_forward(x)[0], torch.nn.functional.silu(t).numpy(), rtol=1e-14, atol=1e-15
    )
    expected = torch.nn.functional.gelu(t, approximate="tanh").numpy()
    np.testing.assert_allclose(F.gelu_tanh_forward(x)[0], expected, rtol=1e-14, atol=1e-15)


@SETTINGS
@given(
    batch=st.integers(1, 2),
    t=st.integers(1, 4),
    s=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 4]),
    cross=st.booleans(),
)
def test_multi_head_attention_with_biases(batch, t, s, heads, cross):
    rng = np.random.default_rng(batch + 5 * t + 13 * s + 17 * heads)
    d = 8
    x_q = rand(rng, batch, t, d)
    keys = s if cross else t
    mask = rng.random((batch, 1, t, keys)) < 0.7
    mask[..., 0] = True
    weights = {
        "w_qkv": rand(rng, 3 * d, d) * 0.4,
        "w_o": rand(rng, d, d) * 0.4,
        "mask": mask,
        "n_heads": heads,
        "b_qkv": rand(rng, 3 * d) * 0.5,
        "b_o": rand(rng, d) * 0.5,
    }
    if cross:
        inputs = {"x_q": x_q, "x_kv": rand(rng, batch, s, d), **weights}
        check(
            F.multi_head_attention_forward,
            F.multi_head_attention_backward,
            inputs,
            ["x_q", "x_kv", "w_qkv", "w_o", "b_qkv", "b_o"],
        )
    else:
        inputs = {"x": x_q, **weights}
        check(
            F.multi_head_self_attention_forward,
            F.multi_head_self_attention_backward,
            inputs,
            ["x", "w_qkv", "w_o", "b_qkv", "b_o"],
        )


def test_attention_without_biases_returns_none_for_them():
    rng = np.random.default_rng(0)
    x, w_qkv, w_o = rand(rng, 2, 3, 4), rand(rng, 12, 4), rand(rng, 4, 4)
    out, cache = F.multi_head_self_attention_forward(x, w_qkv, w_o, None, 2)
    grads = F.multi_head_self_attention_backward(np.ones_like(out), cache)
    assert grads[3] is None and grads[4] is None
    # zero biases are the bias-free block
    biased, _ = F.multi_head_self_attention_forward(
        x, w_qkv, w_o, None, 2, b_qkv=np.zeros(12), b_o=np.zeros(4)
    )
    np.testing.assert_array_equal(biased, out)


def test_split_sinusoids_are_the_interleaved_columns_reordered():
    for width in (8, 9):
        paper = F.sinusoidal_table(50, width, np.float64)
        split = F.sinusoidal_table(50, width, np.float64, "split")
        half = (width + 1) // 2
        np.testing.assert_array_equal(split[:, :half], paper[:, 0::2])
        np.testing.assert_array_equal(split[:, half:], paper[:, 1::2])
    # Marian's own formula (transformers' MarianSinusoidalPositionalEmbedding.create_weight)
    n_pos, dim = 20, 8
    enc = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)])
    expected = np.concatenate([np.sin(enc[:, 0::2]), np.cos(enc[:, 1::2])], axis=1)
    np.testing.assert_allclose(
        F.sinusoidal_table(n_pos, dim, np.float64, "split"), expected, rtol=0, atol=1e-12
    )
    with pytest.raises(ValueError, match=r"layout must be one of \('interleaved', 'split'\), got 'odd'"):
        F.sinusoidal_table(4, 4, np.float64, "odd")


def marian_model(dtype="float64", seed=0, **overrides):
    options = {**MARIAN, **overrides}
    model = nt.build_transformer(
        13,
        13,
        7,
        6,
        d_model=8,
        N=2,
        h=2,
        dropout=0.0,
        d_ff=12,
        dtype=dtype,
        seed=seed,
        shared_vocab=True,
        **options,
    )
    rng = np.random.default_rng(seed + 100)  # biases away from their zero start, so they matter
    for name, parameter in model.named_parameters():
        if name.endswith((".bias", ".beta")) or name.endswith(".gamma"):
            parameter.data[...] += rng.standard_normal(parameter.data.shape) * 0.3
    return model.eval()


@pytest.mark.parametrize(
    "overrides",
    [{}, {"activation": "gelu_tanh", "norm_first": True, "final_norm": True}, {"tie_embeddings": False}],
)
def test_whole_model_with_the_marian_options_every_parameter(textbook, overrides):
    model = marian_model(**overrides)
    src, tgt, labels = model_batch()
    src_mask, tgt_mask = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)

    def loss():
        logits = model.forward(src, tgt, src_mask, tgt_mask)
        return F.cross_entropy_forward(logits, labels, pad_id=0, label_smoothing=0.1)[0]

    model.zero_grad()
    logits = model.forward(src, tgt, src_mask, tgt_mask)
    _, cache = F.cross_entropy_forward(logits, labels, pad_id=0, label_smoothing=0.1)
    model.backward(F.cross_entropy_backward(1.0, cache))
    params = dict(model.named_parameters())
    assert "encoder.layers.0.self_attention_block.w_q.bias" in params
    assert ("encoder.norm.gamma" in params) == model.config.final_norm
    result = gradcheck(
        loss,
        {n: p.data for n, p in params.items()},
        {n: p.grad.copy() for n, p in params.items()},
        max_entries=24,
    )
    assert len(result.reports) == len(params)
    assert result.max_relative_error <= TOLERANCE, str(result)


def test_parameter_count_counts_the_options():
    for overrides in ({}, {"attention_bias": False}, {"final_norm": True}, {"tie_embeddings": False}):
        model = marian_model(**overrides)
        assert nt.model.parameter_count(model.config) == sum(p.data.size for _, p in model.named_parameters())


@pytest.mark.parametrize("overrides", [{}, {"activation": "gelu_tanh", "norm_first": True}])
def test_cached_decoding_equals_uncached_with_the_options(kernels, overrides):
    model = marian_model(**overrides)
    src = np.array([[3, 4, 5, 6, 1, 1], [0, 2, 3, 4, 5, 6], [7, 8, 1, 1, 1, 1]])
    mask = nt.make_src_mask(src, 1)
    ids, logits = greedy_decode(model, src, mask, 6, 1, 0, use_cache=False, return_logits=True, pad_id=1)
    cached_ids, cached_logits = greedy_decode(model, src, mask, 6, 1, 0, return_logits=True, pad_id=1)
    np.testing.assert_array_equal(ids, cached_ids)
    np.testing.assert_allclose(cached_logits, logits, rtol=0, atol=1e-10)
    beams = beam_search(model, src, mask, 6, 1, 0, beam_width=3, use_cache=False, pad_id=1)
    np.testing.assert_array_equal(beam_search(model, src, mask, 6, 1, 0, beam_width=3, pad_id=1), beams)


def test_defaults_are_unchanged():
    model = nt.build_transformer(11, 13, 7, 6, d_model=8, N=2, h=2, d_ff=12, seed=0)
    assert model.config.activation == "relu" and model.config.positions == "interleaved"
    assert model.config.attention_bias is False and model.config.final_norm is True
    names = [name for name, _ in model.named_parameters()]
    assert not any(name.endswith(("w_q.bias", "w_o.bias")) for name in names)
    assert "encoder.norm.gamma" in names and "decoder.norm.beta" in names
    # the weights one seed draws are those it drew before the options existed
    old = nt.build_transformer(11, 13, 7, 6, d_model=8, N=2, h=2, d_ff=12, seed=0, activation="relu")
    for (name, a), (_, b) in zip(model.named_parameters(), old.named_parameters()):
        np.testing.assert_array_equal(a.data, b.data, err_msg=name)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (
            {"activation": "swish"},
            ValueError,
            r"activation must be one of relu, silu, gelu_tanh, got 'swish'",
        ),
        (
            {"positions": "marian"},
            ValueError,
            r"positions must be one of interleaved, split, got 'marian'",
        ),
        ({"attention_bias": 2}, TypeError, r"attention_bias must be true or false, got 2"),
        ({"final_norm": "no"}, TypeError, r"final_norm must be true or false, got 'no'"),
        (
            {"attention_bias": True, "attention": "mla"},
            ValueError,
            r"attention_bias=True needs attention='mha'",
        ),
        ({"padding_idx": 11}, ValueError, r"padding_idx must be None or a token id of both vocabularies"),
        ({"padding_idx": True}, ValueError, r"padding_idx must be an integer >= 0, got True"),
    ],
)
def test_bad_options_are_named(kwargs, error, message):
    with pytest.raises(error, match=message):
        nt.build_transformer(11, 13, 7, 6, d_model=8, N=2, h=2, d_ff=12, **kwargs)


def test_padding_idx_gives_its_row_no_gradient_from_the_lookups(textbook):
    """As nn.Embedding(padding_idx=...): the row of that id keeps what a tied projection gives it."""
    src, tgt, labels = model_batch()
    tgt[:, 0] = 1  # the padding id starts every target, as Marian's decoder starts from <pad>
    grads = {}
    for padding_idx in (None, 1):
        model = marian_model(padding_idx=padding_idx, tie_embeddings=False)
        logits = model.forward(src, tgt, nt.make_src_mask(src, 0), nt.causal_mask(tgt.shape[1]))
        _, cache = F.cross_entropy_forward(logits, labels, pad_id=0)
        model.zero_grad()
        model.backward(F.cross_entropy_backward(1.0, cache))
        grads[padding_idx] = {name: p.grad.copy() for name, p in model.named_parameters()}
    for name in ("src_embed.embedding.weight", "tgt_embed.embedding.weight"):
        assert np.abs(grads[None][name][1]).max() > 0 and not grads[1][name][1].any()
        np.testing.assert_array_equal(np.delete(grads[1][name], 1, 0), np.delete(grads[None][name], 1, 0))
    assert grads[1]["projection_layer.proj.weight"][1].any()
