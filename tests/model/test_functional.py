"""Every backward of the textbook (functional.py) against central finite differences in float64."""

import numpy as np
import pytest
from conftest import GRADCHECK_TOLERANCE as TOLERANCE
from hypothesis import given, settings
from hypothesis import strategies as st

from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_gradients

SETTINGS = settings(max_examples=8, deadline=None)


def rand(rng, *shape):
    return rng.standard_normal(shape)


def check(forward, backward, inputs, wrt, seed=0):
    result = assert_gradients(forward, backward, inputs, wrt, seed=seed)
    assert result.max_relative_error <= TOLERANCE, str(result)
    return result


@SETTINGS
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 5),
    n_in=st.integers(1, 6),
    n_out=st.integers(1, 6),
    bias=st.booleans(),
)
def test_linear(batch, length, n_in, n_out, bias):
    rng = np.random.default_rng(batch * 100 + length)
    inputs = {
        "x": rand(rng, batch, length, n_in),
        "weight": rand(rng, n_out, n_in),
        "bias": rand(rng, n_out) if bias else None,
    }
    check(F.linear_forward, F.linear_backward, inputs, ["x", "weight", "bias" if bias else ""])


def test_linear_stores_weight_out_by_in():
    x, w = np.ones((2, 3)), np.arange(12.0).reshape(4, 3)
    out, _ = F.linear_forward(x, w)
    assert out.shape == (2, 4)
    np.testing.assert_allclose(out, x @ w.T)


def test_embedding_scatter_adds_repeated_ids():
    rng = np.random.default_rng(0)
    table = rand(rng, 5, 4)
    ids = np.array([[1, 1, 3], [0, 1, 4]])
    out, cache = F.embedding_forward(ids, table)
    np.testing.assert_allclose(out, table[ids] * 2.0)
    dout = rand(rng, 2, 3, 4)
    dtable = F.embedding_backward(dout, cache)
    np.testing.assert_allclose(dtable[1], 2.0 * (dout[0, 0] + dout[0, 1] + dout[1, 1]))
    np.testing.assert_allclose(dtable[2], 0.0)
    check(lambda table: F.embedding_forward(ids, table), F.embedding_backward, {"table": table}, ["table"])


def test_sinusoidal_table_matches_the_formula():
    table = F.sinusoidal_table(7, 6, np.float64)
    pos, i = 5, 2
    assert table[pos, 2 * i] == pytest.approx(np.sin(pos / 10000 ** (2 * i / 6)))
    assert table[pos, 2 * i + 1] == pytest.approx(np.cos(pos / 10000 ** (2 * i / 6)))
    assert F.sinusoidal_table(4, 5, np.float64).shape == (4, 5)


def test_positional_encoding():
    rng = np.random.default_rng(1)
    table = F.sinusoidal_table(10, 4, np.float64)
    x = rand(rng, 2, 3, 4)
    out, _ = F.positional_encoding_forward(x, table, start=2)
    np.testing.assert_allclose(out - x, np.broadcast_to(table[2:5], x.shape))
    check(lambda x: F.positional_encoding_forward(x, table), F.positional_encoding_backward, {"x": x}, ["x"])


def test_dropout_is_inverted_and_keeps_its_mask():
    x = np.ones((200, 50))
    out, cache = F.dropout_forward(x, 0.25, np.random.default_rng(3), True)
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1 / 0.75)
    assert abs(kept.mean() - 0.75) < 0.02
    dout = np.random.default_rng(4).standard_normal(x.shape)
    np.testing.assert_allclose(F.dropout_backward(dout, cache), dout * kept / 0.75)
    same, _ = F.dropout_forward(x, 0.25, np.random.default_rng(3), True)
    np.testing.assert_array_equal(out, same)
    identity, none_cache = F.dropout_forward(x, 0.25, np.random.default_rng(3), False)
    assert identity is x and none_cache is None
    fixed_rng_inputs = {"x": np.random.default_rng(5).standard_normal((3, 4))}
    check(
        lambda x: F.dropout_forward(x, 0.5, np.random.default_rng(9), True),
        F.dropout_backward,
        fixed_rng_inputs,
        ["x"],
    )


def test_relu():
    rng = np.random.default_rng(2)
    x = rand(rng, 4, 5)
    x[np.abs(x) < 0.05] = 0.5  # keep away from the kink at 0
    check(F.relu_forward, F.relu_backward, {"x": x}, ["x"])


@SETTINGS
@given(rows=st.integers(1, 4), width=st.integers(1, 7))
def test_softmax(rows, width):
    x = rand(np.random.default_rng(rows * 10 + width), rows, width) * 3
    out, _ = F.softmax_forward(x.copy())
    np.testing.assert_allclose(out.sum(-1), 1.0)
    check(lambda x: F.softmax_forward(x), F.softmax_backward, {"x": x}, ["x"])


def test_layers_at_larger_shapes():
    # one check of the row-wise layers on arrays of a size a training step feeds them
    rng = np.random.default_rng(5)
    x = rand(rng, 2, 40, 64)
    check(lambda x: F.softmax_forward(x), F.softmax_backward, {"x": x * 3}, ["x"])
    inputs = {"x": x, "gamma": rand(rng, 64), "beta": rand(rng, 64)}
    check(F.layer_norm_forward, F.layer_norm_backward, inputs, ["x", "gamma", "beta"])
    inputs = {"x": x[..., :8].copy(), "weight": rand(rng, 64, 8), "bias": rand(rng, 64)}
    check(F.linear_forward, F.linear_backward, inputs, ["x", "weight", "bias"])
    targets = rng.integers(0, 64, (2, 40))

    def forward(logits):
        value, cache = F.cross_entropy_forward(logits, targets, 0, 0.1)
        return np.array(value), cache

    log_probs = x - np.log(np.exp(x).sum(-1, keepdims=True))
    q = np.full(x.shape, 0.1 / 64) + 0.9 * np.eye(64)[targets]
    assert forward(x)[0] == pytest.approx(-(q * log_probs).sum(-1)[targets != 0].mean(), rel=1e-12)
    check(forward, F.cross_entropy_backward, {"logits": x}, ["logits"])


@SETTINGS
# Width 2 is left out: there x_hat = +-1 whatever x is, the gradient is ~1e-5 and pure noise remains.
@given(batch=st.integers(1, 3), length=st.integers(1, 4), width=st.integers(3, 8))
def test_layer_norm(batch, length, width):
    rng = np.random.default_rng(batch + 10 * length + 100 * width)
    inputs = {"x": rand(rng, batch, length, width), "gamma": rand(rng, width), "beta": rand(rng, width)}
    out, _ = F.layer_norm_forward(inputs["x"], np.ones(width), np.zeros(width))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(out.var(-1), inputs["x"].var(-1) / (inputs["x"].var(-1) + 1e-5))
    check(F.layer_norm_forward, F.layer_norm_backward, inputs, ["x", "gamma", "beta"])


def _random_mask(rng, batch, t, s, fully_masked_row=False):
    mask = rng.random((batch, 1, t, s)) > 0.3
    mask[..., 0] = True
    if fully_masked_row:
        mask[0, 0, 0, :] = False
    return mask


@SETTINGS
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 3),
    t=st.integers(1, 4),
    s=st.integers(1, 5),
    masked=st.booleans(),
)
def test_attention(batch, heads, t, s, masked):
    rng = np.random.default_rng(batch + 3 * heads + 7 * t + 11 * s)
    inputs = {
        "q": rand(rng, batch, heads, t, 3),
        "k": rand(rng, batch, heads, s, 3),
        "v": rand(rng, batch, heads, s, 3),
        "mask": _random_mask(rng, batch, t, s) if masked else None,
    }
    check(F.attention_forward, F.attention_backward, inputs, ["q", "k", "v"])


def test_fully_masked_row_is_finite():
    rng = np.random.default_rng(0)
    q, k, v = rand(rng, 1, 2, 3, 4), rand(rng, 1, 2, 5, 4), rand(rng, 1, 2, 5, 4)
    mask = np.ones((1, 1, 3, 5), dtype=bool)
    mask[0, 0, 1, :] = False
    out, cache = F.attention_forward(q, k, v, mask)
    grads = F.attention_backward(rand(rng, *out.shape), cache)
    assert np.isfinite(out).all() and all(np.isfinite(g).all() for g in grads)
    np.testing.assert_allclose(out[0, :, 1], v[0].mean(axis=1))  # uniform weights over every key
    check(F.attention_forward, F.attention_backward, {"q": q, "k": k, "v": v, "mask": mask}, ["q", "k", "v"])


def test_attention_dropout_backward():
    rng = np.random.default_rng(4)
    inputs = {
        "q": rand(rng, 2, 2, 3, 4),
        "k": rand(rng, 2, 2, 3, 4),
        "v": rand(rng, 2, 2, 3, 4),
        "mask": None,
    }

    def forward(**kw):
        return F.attention_forward(**kw, dropout_p=0.3, rng=np.random.default_rng(8), training=True)

    check(forward, F.attention_backward, inputs, ["q", "k", "v"])


def test_split_and_merge_heads_are_inverse():
    x = np.arange(2 * 3 * 8.0).reshape(2, 3, 8)
    heads = F.split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    np.testing.assert_array_equal(heads[1, 2, 0], x[1, 0, 4:6])
    np.testing.assert_array_equal(F.merge_heads(heads), x)


def test_multi_head_splits_attends_and_merges():
    rng = np.random.default_rng(3)
    q, k, v = rand(rng, 2, 3, 8), rand(rng, 2, 5, 8), rand(rng, 2, 5, 8)
    out, _ = F.multi_head_forward(q, k, v, None, 4)
    head_2, _ = F.attention_forward(
        q[:, None, :, 4:6], k[:, None, :, 4:6], v[:, None, :, 4:6], None
    )  # (2, 1, 3, 2)
    np.testing.assert_allclose(out[..., 4:6], head_2[:, 0], rtol=1e-12)
    check(
        lambda q, k, v: F.multi_head_forward(q, k, v, None, 4),
        F.multi_head_backward,
        {"q": q, "k": k, "v": v},
        ["q", "k", "v"],
    )


@SETTINGS
@given(
    batch=st.integers(1, 2),
    t=st.integers(1, 4),
    s=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 4]),
    cross=st.booleans(),
)
def test_multi_head_attention(batch, t, s, heads, cross):
    rng = np.random.default_rng(batch + 5 * t + 13 * s + 17 * heads)
    d = 8
    x_q = rand(rng, batch, t, d)
    weights = {
        "w_qkv": rand(rng, 3 * d, d) * 0.4,
        "w_o": rand(rng, d, d) * 0.4,
        "mask": _random_mask(rng, batch, t, s if cross else t),
        "n_heads": heads,
    }
    if cross:
        check(
            F.multi_head_attention_forward,
            F.multi_head_attention_backward,
            {"x_q": x_q, "x_kv": rand(rng, batch, s, d), **weights},
            ["x_q", "x_kv", "w_qkv", "w_o"],
        )
    else:
        check(
            F.multi_head_self_attention_forward,
            F.multi_head_self_attention_backward,
            {"x": x_q, **weights},
            ["x", "w_qkv", "w_o"],
        )


@SETTINGS
@given(
    batch=st.integers(1, 2),
    t=st.integers(1, 4),
    s=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 4]),
    cross=st.booleans(),
)
def test_multi_head_latent_attention(batch, t, s, heads, cross):
    rng = np.random.default_rng(batch + 5 * t + 13 * s + 17 * heads)
    d, latent = 8, 2
    x_q = rand(rng, batch, t, d)
    weights = {
        "w_q_compress": rand(rng, d + latent, d) * 0.4,
        "w_kv_decompress": rand(rng, 2 * d, latent) * 0.4,
        "w_o": rand(rng, d, d) * 0.4,
        "mask": _random_mask(rng, batch, t, s if cross else t),
        "n_heads": heads,
    }
    names = ["w_q_compress", "w_kv_decompress", "w_o"]
    if cross:
        check(
            F.multi_head_latent_attention_forward,
            F.multi_head_latent_attention_backward,
            {"x_q": x_q, "x_kv": rand(rng, batch, s, d), **weights},
            ["x_q", "x_kv", *names],
        )
    else:
        check(
            F.multi_head_latent_self_attention_forward,
            F.multi_head_latent_self_attention_backward,
            {"x": x_q, **weights},
            ["x", *names],
        )


def test_attention_with_dropout_through_the_projections():
    rng = np.random.default_rng(6)
    d = 8
    inputs = {"x": rand(rng, 2, 3, d), "w_qkv": rand(rng, 3 * d, d) * 0.4, "w_o": rand(rng, d, d) * 0.4}

    def forward(x, w_qkv, w_o):
        return F.multi_head_self_attention_forward(
            x, w_qkv, w_o, None, 2, 0.3, np.random.default_rng(1), True
        )

    check(forward, F.multi_head_self_attention_backward, inputs, ["x", "w_qkv", "w_o"])


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_cross_entropy(smoothing):
    rng = np.random.default_rng(8)
    logits = rand(rng, 2, 4, 6) * 2
    targets = np.array([[1, 2, 0, 0], [5, 3, 4, 0]])
    loss, cache = F.cross_entropy_forward(logits, targets, pad_id=0, label_smoothing=smoothing)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    valid = targets != 0
    q = np.full(logits.shape, smoothing / 6) + (1 - smoothing) * np.eye(6)[targets]
    expected = -(q * log_probs).sum(-1)[valid].mean()
    assert loss == pytest.approx(expected, rel=1e-12)
    dlogits = F.cross_entropy_backward(1.0, cache)
    np.testing.assert_array_equal(dlogits[~valid], 0.0)

    def forward(logits):
        value, c = F.cross_entropy_forward(logits, targets, 0, smoothing)
        return np.array(value), c

    check(forward, F.cross_entropy_backward, {"logits": logits}, ["logits"])


def test_cross_entropy_rejects_all_padding():
    with pytest.raises(ValueError, match="pad_id"):
        F.cross_entropy_forward(np.zeros((1, 2, 3)), np.zeros((1, 2), dtype=int), pad_id=0)
