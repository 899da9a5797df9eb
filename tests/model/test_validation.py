"""Bad input gets a clear error naming the argument and the value, before any work is done."""

import numpy as np
import pytest

import numpy_transformer as nt


@pytest.fixture
def model():
    return nt.build_transformer(10, 12, 6, 5, d_model=8, N=1, h=2, d_ff=16)


def test_d_model_not_divisible_by_h():
    with pytest.raises(ValueError, match="d_model=10, h=3"):
        nt.build_transformer(10, 10, 5, 5, d_model=10, h=3)
    with pytest.raises(ValueError, match="d_model=10, h=4"):
        nt.MultiHeadAttentionBlock(10, 4, 0.1)


def test_d_model_not_divisible_by_4_for_mla():
    with pytest.raises(ValueError, match="divisible by 4.*d_model=6"):
        nt.build_transformer(10, 10, 5, 5, d_model=6, h=2, attention="mla")
    with pytest.raises(ValueError, match="d_model=6"):
        nt.MultiHeadLatentAttentionBlock(6, 2, 0.1)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"attention": "gqa"}, "attention must be one of.*'gqa'"),
        ({"N": 0}, "N must be a positive integer, got 0"),
        ({"dropout": 1.0}, r"dropout must be a number in \[0, 1\), got 1.0"),
        ({"dtype": "float16"}, "dtype must be one of float32, float64, got 'float16'"),
    ],
)
def test_build_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nt.build_transformer(10, 10, 5, 5, **{"d_model": 8, "h": 2, **kwargs})


def test_non_integer_ids(model):
    src = np.zeros((2, 3), dtype=np.float32)
    with pytest.raises(TypeError, match="src must be an integer array.*float32"):
        model.forward(src, np.ones((2, 3), dtype=int), None, None)


def test_ids_outside_vocabulary(model):
    src = np.array([[1, 2, 10]])
    with pytest.raises(ValueError, match=r"src holds ids in \[1, 10\], outside the vocabulary \[0, 10\)"):
        model.forward(src, np.ones((1, 3), dtype=int), None, None)
    with pytest.raises(ValueError, match="tgt holds ids in.*-1"):
        model.forward(np.ones((1, 3), dtype=int), np.array([[-1, 2]]), None, None)


@pytest.mark.parametrize(
    "labels, error, message",
    [
        (np.ones((2, 3), dtype=int), ValueError, r"labels has shape \(2, 3\), expected tgt's shape \(2, 4\)"),
        (
            np.full((2, 4), 12),
            ValueError,
            r"labels holds ids in \[12, 12\], outside the vocabulary \[0, 12\)",
        ),
        (np.full((2, 4), -1), ValueError, r"labels holds ids in \[-1, -1\]"),
        (np.ones((2, 4), dtype=np.float32), TypeError, "labels must be an integer array.*float32"),
        (np.ones(4, dtype=int), ValueError, r"labels must have shape \(B, T\), got \(4,\)"),
        (np.zeros((2, 4), dtype=int), ValueError, "labels: every token equals pad_id"),
    ],
)
def test_training_labels_are_checked_before_any_work(model, monkeypatch, labels, error, message):
    monkeypatch.setattr(model, "encode", lambda *args, **kwargs: pytest.fail("encoded before the check"))
    src, tgt = np.ones((2, 3), dtype=int), np.ones((2, 4), dtype=int)
    with pytest.raises(error, match=message):
        nt.loss_and_backward(model, src, tgt, None, None, labels, pad_id=0)
    with pytest.raises(TypeError, match="tgt must be an array.*NoneType"):
        nt.loss_and_backward(model, src, None, None, None, np.ones((2, 4), dtype=int), pad_id=0)


def test_sequences_longer_than_positional_table(model):
    with pytest.raises(ValueError, match="src has length 7, longer than the positional table's seq_len=6"):
        model.forward(np.ones((1, 7), dtype=int), np.ones((1, 3), dtype=int), None, None)
    with pytest.raises(ValueError, match="tgt has length 6.*seq_len=5"):
        model.forward(np.ones((1, 3), dtype=int), np.ones((1, 6), dtype=int), None, None)


def test_masks_that_do_not_broadcast(model):
    src, tgt = np.ones((2, 4), dtype=int), np.ones((2, 3), dtype=int)
    with pytest.raises(ValueError, match=r"src_mask has shape \(2, 1, 1, 5\)"):
        model.forward(src, tgt, np.ones((2, 1, 1, 5), dtype=bool), None)
    with pytest.raises(ValueError, match=r"tgt_mask has shape \(2, 3, 3\)"):
        model.forward(src, tgt, None, np.ones((2, 3, 3), dtype=bool))


def test_errors_come_before_any_work(model):
    """A bad target is reported before the encoder runs: no cache is left behind."""
    with pytest.raises(ValueError):
        model.forward(np.ones((1, 3), dtype=int), np.array([[99]]), None, None)
    assert all(m._cache is None for _, m in model.named_modules())


def test_backward_before_forward(model):
    with pytest.raises(ValueError, match="ProjectionLayer|Linear.backward was called before forward"):
        model.backward(np.zeros((1, 2, 12), dtype=np.float32))
    block = nt.LayerNormalization(4)
    with pytest.raises(ValueError, match="LayerNormalization.backward was called before forward"):
        block.backward(np.zeros((1, 4)))


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--clip", "-1", "expected a finite number >= 0, got -1.0"),
        ("--weight-decay", "nan", "expected a finite number >= 0, got nan"),
        ("--lr", "inf", "expected a positive finite number, got inf"),
        ("--factor", "-2", "expected a positive finite number, got -2.0"),
    ],
)
def test_cli_numbers_must_be_finite_and_in_range(capsys, flag, value, expected):
    from numpy_transformer.translator.cli import main

    with pytest.raises(SystemExit) as stopped:
        main(["train", flag, value])
    assert stopped.value.code == 2 and expected in capsys.readouterr().err


@pytest.mark.parametrize("value, shown", [("-0.5", "-0.5"), ("1e300", "1e+300"), ("inf", "inf")])
def test_length_penalty_must_be_within_0_and_10(capsys, value, shown):
    """length ** 1e300 overflows: refused by the parser, before any model is read."""
    from numpy_transformer.translator.cli import main

    with pytest.raises(SystemExit):
        main(["translate", "--length-penalty", value, "x"])
    assert f"--length-penalty: expected a number in [0, 10], got {shown}" in capsys.readouterr().err


def test_masks_must_be_boolean(model):
    src = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])
    tgt = np.array([[1, 2, 3], [4, 5, 6]])
    additive = np.where(nt.make_src_mask(src, 0), 0.0, -np.inf)  # PyTorch's style: would read inverted
    with pytest.raises(TypeError, match="src_mask must be a boolean array.*got float64.*additive"):
        model.forward(src, tgt, additive, nt.make_tgt_mask(tgt, 0))
    with pytest.raises(TypeError, match="tgt_mask must be a boolean array.*got <U1"):
        model.forward(src, tgt, nt.make_src_mask(src, 0), np.full((1, 1, 3, 3), "x"))


def test_clip_grad_norm_refuses_a_max_norm_that_is_not_positive():
    from numpy_transformer.optim import clip_grad_norm

    for bad in (-1.0, 0.0, float("nan")):
        with pytest.raises(ValueError, match=f"max_norm must be a positive number, got {bad!r}"):
            clip_grad_norm([nt.Parameter(np.ones(2))], bad)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"norm_first": "no"}, TypeError, "norm_first must be true or false, got 'no'"),
        ({"dropout": "0.1"}, TypeError, "dropout must be a number in \\[0, 1\\), got '0.1'"),
        ({"seed": "abc"}, TypeError, "seed must be an integer or None, got 'abc'"),
    ],
)
def test_build_transformer_names_wrong_types(kwargs, error, message):
    with pytest.raises(error, match=message):
        nt.build_transformer(10, 12, 6, 5, d_model=8, N=1, h=2, d_ff=16, **kwargs)


def test_build_transformer_takes_numpy_integers():
    model = nt.build_transformer(
        np.int64(10), 12, 6, 5, d_model=np.int64(8), N=1, h=np.int32(2), d_ff=16, norm_first=np.bool_(False)
    )
    assert (
        model.config.d_model == 8 and type(model.config.d_model) is int and model.config.norm_first is False
    )


@pytest.mark.parametrize(
    "bad, message",
    [
        (lambda a: a.astype(complex), "must hold real numbers, got dtype complex128"),
        (lambda a: np.full(a.shape, "x"), "must hold real numbers, got dtype <U1"),
        (lambda a: np.where(a == a.flat[0], np.nan, a), "holds NaN or infinite values"),
    ],
)
def test_load_state_dict_is_all_or_nothing(model, bad, message):
    state = model.state_dict()
    other = nt.build_transformer(10, 12, 6, 5, d_model=8, N=1, h=2, d_ff=16, seed=7)
    before = other.state_dict()
    last = list(state)[-1]
    state[last] = bad(state[last].astype(np.float64))
    with pytest.raises(ValueError, match=f"{last} {message}"):
        other.load_state_dict(state)
    for name, value in other.state_dict().items():  # not one entry was copied
        np.testing.assert_array_equal(value, before[name], err_msg=name)


def test_the_model_configuration_is_typed_and_frozen():
    """model.config is a frozen TransformerConfig: one place for the defaults and the checks."""
    import dataclasses

    model = nt.build_transformer(10, 12, 6, 5, d_model=8, N=1, h=2, d_ff=16, dtype=np.float64)
    config = model.config
    assert isinstance(config, nt.TransformerConfig) and config.dtype == "float64" and config.h == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 16
    assert nt.TransformerConfig.of(dataclasses.asdict(config)) == config
    rebuilt = nt.build_transformer(**dataclasses.asdict(config), seed=0)
    assert rebuilt.config == config
    with pytest.raises(TypeError, match="unknown model setting.*heads"):
        nt.TransformerConfig.of({**dataclasses.asdict(config), "heads": 2})
    with pytest.raises(ValueError, match="d_model must be divisible by h, got d_model=8, h=3"):
        nt.TransformerConfig(10, 12, 6, 5, d_model=8, h=3)


def test_build_transformer_takes_the_configuration_or_its_fields_in_their_order():
    """The from-scratch design's call, by position or by name, and a TransformerConfig (its fields
    replaced by keyword) build the same model; the defaults are the paper's base model."""
    import dataclasses

    config = nt.TransformerConfig(10, 12, 6, 5, d_model=8, N=1, h=2, dropout=0.0, d_ff=16)
    by_position = nt.build_transformer(10, 12, 6, 5, 8, 1, 2, 0.0, 16, seed=3)
    by_name = nt.build_transformer(
        src_vocab_size=10,
        tgt_vocab_size=12,
        src_seq_len=6,
        tgt_seq_len=5,
        d_model=8,
        N=1,
        h=2,
        dropout=0.0,
        d_ff=16,
        seed=3,
    )
    given = nt.build_transformer(config, seed=3)
    for model in (by_name, given):
        assert model.config == by_position.config == config
        for name, value in model.state_dict().items():
            np.testing.assert_array_equal(value, by_position.state_dict()[name], err_msg=name)
    assert nt.build_transformer(config, N=2, attention="mla").config == dataclasses.replace(
        config, N=2, attention="mla"
    )
    with pytest.raises(ValueError, match="N must be a positive integer, got 0"):
        nt.build_transformer(config, N=0)
    with pytest.raises(TypeError, match="heads"):
        nt.build_transformer(config, heads=2)
    base = nt.TransformerConfig(10, 12, 6, 5)
    assert (base.d_model, base.N, base.h, base.dropout, base.d_ff) == (512, 6, 8, 0.1, 2048)


@pytest.mark.parametrize("args", [("config", 2), (10, "config")])
def test_a_configuration_among_positional_arguments_is_named_not_read_as_a_vocabulary_size(args):
    config = nt.TransformerConfig(10, 12, 6, 5, d_model=8, N=1, h=2, dropout=0.0, d_ff=16)
    given = [config if arg == "config" else arg for arg in args]
    with pytest.raises(TypeError, match="takes a TransformerConfig alone, its fields replaced by keyword"):
        nt.build_transformer(*given)
