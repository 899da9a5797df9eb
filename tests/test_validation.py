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


@pytest.mark.parametrize("kwargs, message", [
    ({"attention": "gqa"}, "attention must be one of.*'gqa'"),
    ({"N": 0}, "N must be a positive integer, got 0"),
    ({"dropout": 1.0}, r"dropout must be in \[0, 1\), got 1.0"),
    ({"dtype": "float16"}, "dtype must be float32 or float64, got 'float16'"),
])
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
