"""Modules and the whole model against finite differences in float64, on the textbook (the
kernels are proven equal to it in test_kernels.py), plus behavioural properties."""

import numpy as np
import pytest
from conftest import ATTENTION, model_batch, padded_ids, tiny_model
from conftest import GRADCHECK_TOLERANCE as TOLERANCE
from hypothesis import example, given, settings
from hypothesis import strategies as st

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_module_gradients, gradcheck
from numpy_transformer.kernels import ops, using_kernels


@settings(max_examples=6, deadline=None)
@given(
    batch=st.integers(1, 2),
    t=st.integers(1, 4),
    s=st.integers(1, 4),
    heads=st.sampled_from([1, 2]),
    d_model=st.sampled_from([4, 8]),
    kind=st.sampled_from(["mha", "mla"]),
    cross=st.booleans(),
)
def test_attention_blocks(batch, t, s, heads, d_model, kind, cross):
    rng = np.random.default_rng(batch + 3 * t + 7 * s + 11 * heads + d_model)
    block = ATTENTION[kind](d_model, heads, 0.1, dtype="float64", rng=np.random.default_rng(1)).eval()
    x_q = rng.standard_normal((batch, t, d_model))
    x_kv = rng.standard_normal((batch, s, d_model)) if cross else None
    mask = nt.make_src_mask(padded_ids(rng, batch, s if cross else t, 5), 0)
    inputs = {"x_q": x_q, "x_kv": x_kv, "mask": mask}

    def grads(returned):
        return {"x_q": returned[0], "x_kv": returned[1]} if cross else {"x_q": returned}

    with using_kernels("reference"):
        result = assert_module_gradients(block, inputs, grads)
    assert result.max_relative_error <= TOLERANCE, str(result)


@settings(max_examples=6, deadline=None)
@given(
    batch=st.integers(1, 2),
    t=st.integers(1, 4),
    s=st.integers(1, 4),
    heads=st.sampled_from([1, 2, 4]),
    kind=st.sampled_from(["mha", "mla"]),
    norm_first=st.booleans(),
)
@example(batch=1, t=2, s=4, heads=1, kind="mha", norm_first=True)  # w_q's gradients are all below 6e-4 here
def test_encoder_and_decoder_blocks(batch, t, s, heads, kind, norm_first):
    rng = np.random.default_rng(batch + 3 * t + 7 * s + 11 * heads)
    d, common = 8, {"dtype": "float64", "rng": np.random.default_rng(2)}
    attention = ATTENTION[kind]
    src = padded_ids(rng, batch, s, 6)
    tgt = padded_ids(rng, batch, t, 6)
    src_mask, tgt_mask = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)
    encoder_block = nt.EncoderBlock(
        d,
        attention(d, heads, 0.1, **common),
        nt.FeedForwardBlock(d, 12, 0.1, **common),
        0.1,
        norm_first,
        **common,
    ).eval()
    x = rng.standard_normal((batch, s, d))
    with using_kernels("reference"):
        result = assert_module_gradients(encoder_block, {"x": x, "src_mask": src_mask}, lambda dx: {"x": dx})
    assert result.max_relative_error <= TOLERANCE, str(result)

    decoder_block = nt.DecoderBlock(
        d,
        attention(d, heads, 0.1, **common),
        attention(d, heads, 0.1, **common),
        nt.FeedForwardBlock(d, 12, 0.1, **common),
        0.1,
        norm_first,
        **common,
    ).eval()
    inputs = {
        "x": rng.standard_normal((batch, t, d)),
        "encoder_output": rng.standard_normal((batch, s, d)),
        "src_mask": src_mask,
        "tgt_mask": tgt_mask,
    }
    with using_kernels("reference"):
        result = assert_module_gradients(decoder_block, inputs, lambda g: {"x": g[0], "encoder_output": g[1]})
    assert result.max_relative_error <= TOLERANCE, str(result)


@pytest.mark.parametrize(
    "module, inputs, names",
    [
        (lambda: nt.LayerNormalization(6, dtype="float64"), {"x": (2, 3, 6)}, ["x"]),
        (lambda: nt.FeedForwardBlock(6, 10, 0.0, dtype="float64"), {"x": (2, 3, 6)}, ["x"]),
        (lambda: nt.ProjectionLayer(6, 9, dtype="float64"), {"x": (2, 3, 6)}, ["x"]),
        (lambda: nt.PositionalEncoding(6, 5, 0.0, dtype="float64"), {"x": (2, 3, 6)}, ["x"]),
        (lambda: nt.Linear(6, 4, dtype="float64"), {"x": (2, 3, 6)}, ["x"]),
    ],
)
def test_simple_modules(textbook, module, inputs, names):
    rng = np.random.default_rng(0)
    arrays = {name: rng.standard_normal(shape) for name, shape in inputs.items()}
    m = module().eval()
    result = assert_module_gradients(m, arrays, lambda dx: {names[0]: dx})
    assert result.max_relative_error <= TOLERANCE, str(result)


def test_input_embeddings_gradient(textbook):
    ids = np.array([[1, 2, 2], [4, 0, 1]])
    m = nt.InputEmbeddings(6, 5, dtype="float64")
    result = assert_module_gradients(m, {"ids": ids})
    assert result.max_relative_error <= TOLERANCE, str(result)


@pytest.mark.parametrize("kind", ["mha", "mla"])
@pytest.mark.parametrize("norm_first", [True, False])
def test_whole_model_every_parameter(textbook, kind, norm_first):
    model = tiny_model(kind, norm_first).eval()
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
    result = gradcheck(
        loss,
        {n: p.data for n, p in params.items()},
        {n: p.grad.copy() for n, p in params.items()},
        max_entries=24,
    )
    assert len(result.reports) == len(params)
    assert result.max_relative_error <= TOLERANCE, str(result)


@pytest.mark.parametrize("norm_first", [True, False])
def test_residual_connection_and_feed_forward_with_dropout(textbook, norm_first):
    """Dropout on: the generator is reseeded before every forward, so each sees the same masks."""
    rng = np.random.default_rng(7)
    residual = nt.ResidualConnection(6, 0.3, norm_first, dtype="float64")
    feed_forward = nt.FeedForwardBlock(6, 10, 0.2, dtype="float64")
    holder = nt.ModuleList([residual, feed_forward])  # one module owning both sets of parameters

    def forward(x):
        holder.set_rng(np.random.default_rng(3))
        return residual.exit(feed_forward.forward(residual.enter(x)))

    def backward(dout):
        return residual.enter_backward(feed_forward.backward(residual.exit_backward(dout)))

    x = rng.standard_normal((2, 3, 6))
    upstream = np.random.default_rng(5).standard_normal(x.shape)
    holder.zero_grad()
    forward(x)
    dx = backward(upstream.copy())
    params = dict(holder.named_parameters())
    result = gradcheck(
        lambda: float((forward(x) * upstream).sum()),
        {"x": x, **{name: p.data for name, p in params.items()}},
        {"x": dx, **{name: p.grad.copy() for name, p in params.items()}},
    )
    assert result.max_relative_error <= TOLERANCE, str(result)
    assert feed_forward.dropout.p and residual.dropout.p and feed_forward.training


def test_gradients_accumulate_until_zero_grad():
    model = tiny_model("mha", True).eval()
    src, tgt, _ = model_batch()
    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
    dlogits = np.random.default_rng(0).standard_normal(model.forward(*args).shape)
    model.backward(dlogits)
    once = {n: p.grad.copy() for n, p in model.named_parameters()}
    model.forward(*args)
    model.backward(dlogits)
    for name, parameter in model.named_parameters():
        np.testing.assert_allclose(parameter.grad, 2 * once[name], err_msg=name)
    model.zero_grad()
    assert all(not p.grad.any() for p in model.parameters())
    # zero_grad is lazy: a backward right after it writes the gradients in; two more add up again
    for repeats in (1, 2):
        model.zero_grad()
        for _ in range(repeats):
            model.forward(*args)
            model.backward(dlogits)
        for name, parameter in model.named_parameters():
            np.testing.assert_allclose(parameter.grad, repeats * once[name], err_msg=name)


@pytest.mark.parametrize(
    "kind, tie, norm_first", [("mha", False, True), ("mla", True, False), ("mha", True, True)]
)
def test_loss_and_backward_projects_only_labelled_positions(kernels, kind, tie, norm_first, monkeypatch):
    """The step's loss and gradients are those of the whole (B, T) grid's logits, while the
    projection sees only the positions with a label (dropout draws the same masks in both)."""
    src, tgt, labels = model_batch(3)
    labels[1] = 0  # a row with no label at all

    def build():
        return nt.build_transformer(
            11, 13, 7, 6, d_model=8, N=2, h=2, d_ff=12, dropout=0.1, attention=kind,
            norm_first=norm_first, tie_embeddings=tie, dtype="float64", seed=0,
        )  # fmt: skip

    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
    grid, step = build(), build()
    expected_loss, cache = ops.cross_entropy_forward(grid.forward(*args), labels, 0, 0.1)
    grid.backward(ops.cross_entropy_backward(0.7, cache))
    projected = []
    forward = step.projection_layer.forward
    monkeypatch.setattr(step.projection_layer, "forward", lambda x: projected.append(x.shape) or forward(x))
    loss = nt.loss_and_backward(step, *args, labels, pad_id=0, label_smoothing=0.1, weight=0.7)
    assert projected == [(int((labels != 0).sum()), 8)] and projected[0][0] < labels.size
    assert loss == pytest.approx(expected_loss, rel=1e-13)
    for (name, expected), actual in zip(grid.named_parameters(), step.parameters()):
        np.testing.assert_allclose(actual.grad, expected.grad, rtol=1e-10, atol=1e-14, err_msg=name)
    # a pad id outside the vocabulary (PyTorch's ignore_index of -100) marks the same positions
    ignored = np.where(labels == 0, -100, labels)
    assert nt.loss_and_backward(build(), *args, ignored, pad_id=-100, label_smoothing=0.1, weight=0.7) == loss


def test_loss_and_backward_on_device_is_the_step_weighted_by_the_labels_mask(kernels):
    """on_device=True: every position projected and the loss a 0-d array: the same loss and gradients
    as the step of the labelled positions; the ids' range is the caller's (an id out of range is not
    read here), which check_ids_on_host checks on the host arrays."""
    src, tgt, labels = model_batch(3)
    labels[1] = 0
    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0), labels)
    step, device = tiny_model("mha", True, dropout=0.1, seed=2), tiny_model("mha", True, dropout=0.1, seed=2)
    for model in (step, device):
        model.set_rng(np.random.default_rng(5))
    loss = nt.loss_and_backward(step, *args, pad_id=0, label_smoothing=0.1, weight=0.7)
    on_device = nt.loss_and_backward(device, *args, pad_id=0, label_smoothing=0.1, weight=0.7, on_device=True)
    assert on_device.shape == () and float(on_device) == pytest.approx(loss, rel=1e-12)
    for (name, expected), actual in zip(step.named_parameters(), device.parameters()):
        np.testing.assert_allclose(actual.grad, expected.grad, rtol=1e-9, atol=1e-13, err_msg=name)
    with pytest.raises(ValueError, match="labels"):  # the settings and shapes are still checked
        nt.loss_and_backward(device, *args[:4], labels[:, :-1], pad_id=0, on_device=True)
    with pytest.raises(ValueError, match="outside the vocabulary"):  # loss_and_backward reads the range
        nt.loss_and_backward(step, *args[:4], labels + 1000, pad_id=0)
    nt.check_ids_on_host(step, src, tgt, labels, 0)
    outside = r"src holds ids in \[\d+, \d+\], outside the vocabulary \[0, 11\)"
    for wrong, expected in [
        ((src + 1000, tgt, labels), outside),
        ((src, tgt - 100, labels), r"tgt holds ids in \[-\d+, -?\d+\]"),
        ((src, tgt, np.where(labels == 0, 0, labels + 1000)), r"labels holds ids in"),
        ((src, tgt, np.zeros_like(labels)), "every token equals pad_id=0"),
    ]:
        with pytest.raises(ValueError, match=expected):
            nt.check_ids_on_host(step, *wrong, 0)


def test_zero_grad_reaches_views_and_grad_is_never_rebound():
    model = tiny_model("mha", True)
    w_q = model.encoder.layers[0].self_attention_block.w_q.weight
    w_q.grad[...] = 1.0
    model.zero_grad()
    assert not w_q.grad.any()
    w_q.grad += 2.0  # in-place update through the property is fine
    assert (w_q.grad == 2.0).all()
    with pytest.raises(AttributeError, match="never rebound"):
        w_q.grad = np.zeros_like(w_q.data)


def test_gradient_buffers_are_made_on_first_use_and_equal_eager_ones():
    """A model that only runs forward (translating) holds no gradient buffer; the first backward
    makes the flat one, views included, and the gradients equal those of a model whose buffer
    was made before its first backward."""
    from numpy_transformer.translator.decoding import greedy_decode

    lazy, eager = tiny_model("mha", True).eval(), tiny_model("mha", True).eval()
    assert eager.flat.grad.shape == eager.flat.data.shape  # reading the buffer makes it
    src, tgt, _ = model_batch()
    greedy_decode(lazy, src, nt.make_src_mask(src, 0), 5, 1, 2)
    lazy.zero_grad()  # marks the gradients zero; nothing to make yet
    assert not lazy.flat.grad_allocated
    assert all(p._grad is None for p in lazy.parameters())
    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
    dlogits = np.random.default_rng(0).standard_normal(lazy.forward(*args).shape)
    lazy.backward(dlogits)
    eager.forward(*args)
    eager.backward(dlogits)
    assert lazy.flat.grad_allocated
    for (name, mine), (_, theirs) in zip(lazy.named_parameters(), eager.named_parameters()):
        np.testing.assert_array_equal(mine.grad, theirs.grad, err_msg=name)
        assert np.shares_memory(mine.grad, lazy.flat.grad), name  # views of the one flat buffer
    np.testing.assert_array_equal(lazy.flat.grad, eager.flat.grad)
    loose = nt.Parameter(np.ones(3))
    assert loose._grad is None and not loose.grad.any() and loose._grad is not None


def test_seed_shapes_from_the_seeds():
    model = nt.build_transformer(2000, 1000, 8, 8, seed=0)
    rng = np.random.default_rng(0)
    src, tgt = rng.integers(0, 2000, (10, 8)), rng.integers(0, 1000, (10, 8))
    encoded = model.encode(src, None)
    assert encoded.shape == (10, 8, 512) and encoded.dtype == np.float32
    assert model.forward(src, tgt, None, nt.causal_mask(8)).shape == (10, 8, 1000)


def test_xavier_initialisation_and_parameter_layout():
    model = nt.build_transformer(50, 60, 10, 10, d_model=32, N=1, h=4, d_ff=64, attention="mla")
    params = dict(model.named_parameters())
    w = params["encoder.layers.0.self_attention_block.w_kv_compress.weight"].data
    assert w.shape == (8, 32)
    bound = np.sqrt(6 / (8 + 32))
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert params["decoder.layers.0.self_attention_block.w_k_decompress.weight"].shape == (32, 8)
    assert not any(n.endswith("w_q.bias") or n.endswith("w_o.bias") for n in params)
    assert (
        "projection_layer.proj.bias" in params
        and "decoder.layers.0.feed_forward_block.linear_2.bias" in params
    )
    assert not params["projection_layer.proj.bias"].data.any()
    np.testing.assert_array_equal(params["encoder.norm.gamma"].data, 1.0)


def test_mla_equals_mha_with_composed_weights():
    rng = np.random.default_rng(3)
    d, h = 8, 2
    mla = nt.MultiHeadLatentAttentionBlock(d, h, 0.0, dtype="float64", rng=rng)
    mha = nt.MultiHeadAttentionBlock(d, h, 0.0, dtype="float64", rng=rng)
    mha.w_q.weight.data[...] = mla.w_q.weight.data
    mha.w_k.weight.data[...] = mla.w_k_decompress.weight.data @ mla.w_kv_compress.weight.data
    mha.w_v.weight.data[...] = mla.w_v_decompress.weight.data @ mla.w_kv_compress.weight.data
    mha.w_o.weight.data[...] = mla.w_o.weight.data
    x, memory = rng.standard_normal((2, 3, d)), rng.standard_normal((2, 5, d))
    mask = nt.make_src_mask(np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), 0)
    np.testing.assert_allclose(
        mla.forward(x, memory, mask), mha.forward(x, memory, mask), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_allclose(mla.forward(x), mha.forward(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_causality_future_tokens_do_not_change_the_past(kind):
    model = tiny_model(kind, True).eval()
    src, tgt, _ = model_batch()
    tgt[:, :] = np.random.default_rng(5).integers(1, 13, tgt.shape)
    src_mask, tgt_mask = nt.make_src_mask(src, 0), nt.causal_mask(tgt.shape[1])
    memory = model.encode(src, src_mask)
    before = model.decode(memory, src_mask, tgt, tgt_mask)
    changed = tgt.copy()
    changed[:, 4] = (changed[:, 4] % 12) + 1
    after = model.decode(memory, src_mask, changed, tgt_mask)
    np.testing.assert_array_equal(before[:, :4], after[:, :4])
    assert not np.allclose(before[:, 4:], after[:, 4:])


def test_padded_source_positions_receive_zero_attention():
    rng = np.random.default_rng(0)
    q, k, v = (
        rng.standard_normal((2, 2, 3, 4)),
        rng.standard_normal((2, 2, 5, 4)),
        rng.standard_normal((2, 2, 5, 4)),
    )
    mask = nt.make_src_mask(np.array([[3, 4, 5, 0, 0], [1, 2, 3, 4, 0]]), 0)
    _, cache = F.attention_forward(q, k, v, mask)
    probs = cache.probs
    np.testing.assert_array_equal(probs[0, :, :, 3:], 0.0)
    np.testing.assert_array_equal(probs[1, :, :, 4], 0.0)
    # and the model's output ignores what stands in the padded source positions
    model = tiny_model("mha", True).eval()
    src, tgt, _ = model_batch()
    src[0, 4:] = 0
    src_mask, tgt_mask = nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0)
    before = model.forward(src, tgt, src_mask, tgt_mask)
    src[0, 4:] = 7
    np.testing.assert_allclose(
        model.forward(src, tgt, src_mask, tgt_mask)[0], before[0], rtol=1e-12, atol=1e-12
    )


def test_dropout_train_eval_and_seed():
    src, tgt, _ = model_batch()
    args = (src, tgt, nt.make_src_mask(src, 0), nt.make_tgt_mask(tgt, 0))
    model_a, model_b = (
        tiny_model("mha", True, dropout=0.3, seed=4),
        tiny_model("mha", True, dropout=0.3, seed=4),
    )
    train_a, train_b = model_a.train().forward(*args), model_b.train().forward(*args)
    np.testing.assert_array_equal(train_a, train_b)  # same seed -> same weights and masks
    assert not np.allclose(model_a.forward(*args), train_a)  # a fresh mask on the next call
    eval_1, eval_2 = model_a.eval().forward(*args), model_a.forward(*args)
    np.testing.assert_array_equal(eval_1, eval_2)
    dropout = nt.Dropout(0.5, rng=np.random.default_rng(0))
    x = np.ones((100, 100), dtype=np.float32)
    y = dropout.train().forward(x)
    assert set(np.unique(y)) == {0.0, 2.0}
    assert dropout.eval().forward(x) is x


def test_modules_walks_the_tree_like_named_modules_and_modes_reach_every_module():
    model = tiny_model("mla", True)
    assert model.modules() == [module for _, module in model.named_modules()]
    with model.evaluating():
        assert not any(module.training for module in model.modules())
    assert all(module.training for module in model.modules())


def test_state_dict_round_trip_and_errors():
    model, other = tiny_model("mla", True, seed=1), tiny_model("mla", True, seed=2)
    other.load_state_dict(model.state_dict())
    for (name, p), (_, q) in zip(model.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)
    state = model.state_dict()
    del state["decoder.norm.beta"]
    with pytest.raises(ValueError, match="missing.*decoder.norm.beta"):
        other.load_state_dict(state)
    state = model.state_dict()
    state["extra.weight"] = np.zeros(2)
    with pytest.raises(ValueError, match="unexpected.*extra.weight"):
        other.load_state_dict(state)
    state = model.state_dict()
    state["encoder.norm.gamma"] = np.zeros(9)
    with pytest.raises(ValueError, match=r"encoder.norm.gamma: expected \(8,\), got \(9,\)"):
        other.load_state_dict(state)


def test_tied_embeddings_count_as_the_papers_table_3():
    """A shared 37,000-token vocabulary: base 63.1 M tied (101.0 M untied), big 214.2 M (290.0 M);
    the paper says 65 M and 213 M."""
    from numpy_transformer.model import parameter_count

    base = {
        **{"src_vocab_size": 37000, "tgt_vocab_size": 37000, "src_seq_len": 512, "tgt_seq_len": 512},
        **{"d_model": 512, "N": 6, "h": 8, "d_ff": 2048},  # the sinusoid tables hold no weights
    }
    big = {**base, "d_model": 1024, "d_ff": 4096, "h": 16}
    counts = [
        round(parameter_count({**c, "tie_embeddings": tie, "shared_vocab": tie}) / 1e6, 1)
        for c in (base, big)
        for tie in (True, False)
    ]
    assert counts == [63.1, 101.0, 214.2, 290.0]
    tied = nt.build_transformer(
        50, 50, 8, 8, d_model=16, N=1, h=2, d_ff=32, tie_embeddings=True, shared_vocab=True
    )
    assert parameter_count(tied.config) == sum(p.data.size for p in tied.parameters()) == tied.flat.data.size


def test_xavier_drawn_a_few_rows_at_a_time_equals_one_draw(monkeypatch):
    """The initialisation bounds its float64 temporary by drawing rows in chunks: the same values."""
    from numpy_transformer import layers

    parameter = nt.Parameter(np.zeros((37, 5), dtype=np.float32))
    monkeypatch.setattr(layers, "INIT_CHUNK", 11)  # two rows a draw, the last chunk shorter
    layers.xavier_uniform_(parameter, np.random.default_rng(3))
    bound = np.sqrt(6.0 / 42)
    expected = np.random.default_rng(3).uniform(-bound, bound, size=(37, 5)).astype(np.float32)
    np.testing.assert_array_equal(parameter.data, expected)
