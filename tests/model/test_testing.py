"""numpy_transformer.testing: a gradient check in one line of a user's own test suite."""

import numpy as np
import pytest
from hypothesis import given, settings

from numpy_transformer import Linear
from numpy_transformer.testing import GradcheckError, assert_gradients, assert_module_gradients, shapes

C = 0.7978845608028654  # sqrt(2 / pi)


def gelu_forward(x):
    t = np.tanh(C * (x + 0.044715 * x**3))
    return 0.5 * x * (1 + t), (x, t)


def gelu_backward(dout, cache):
    x, t = cache
    return dout * (0.5 * (1 + t) + 0.5 * x * (1 - t**2) * C * (1 + 3 * 0.044715 * x**2))


@settings(max_examples=20, deadline=None)
@given(shapes())
def test_the_readme_gelu_passes_on_every_shape(shape):
    assert_gradients(gelu_forward, gelu_backward, {"x": np.random.default_rng(0).standard_normal(shape)})


def test_a_wrong_gelu_fails_naming_the_gradient_and_its_worst_entry():
    def gelu_backward_wrong(dout, cache):
        _, t = cache
        return dout * 0.5 * (1 + t)  # the derivative of tanh's argument forgotten

    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)  # checked in float64 anyway
    with pytest.raises(
        GradcheckError, match=r"gelu_backward_wrong: gradient check failed:\nx: FAILED"
    ) as failed:
        assert_gradients(gelu_forward, gelu_backward_wrong, {"x": x})
    assert "analytic" in str(failed.value) and "numeric" in str(failed.value)
    assert isinstance(failed.value, AssertionError)


def test_a_module_is_checked_in_one_line_and_refused_in_float32():
    rng = np.random.default_rng(2)
    layer = Linear(4, 3, dtype="float64", rng=np.random.default_rng(3))
    result = assert_module_gradients(layer, {"x": rng.standard_normal((2, 4))}, lambda dx: {"x": dx})
    assert result.passed and {r.name for r in result.reports} >= {"x"}
    with pytest.raises(TypeError, match="float64"):
        assert_module_gradients(
            Linear(4, 3, rng=np.random.default_rng(3)), {"x": rng.standard_normal((2, 4))}
        )


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="'y'"):
        assert_gradients(gelu_forward, gelu_backward, {"x": np.ones(3)}, wrt=["y"])
    with pytest.raises(TypeError, match="inputs"):
        assert_gradients(gelu_forward, gelu_backward, [np.ones(3)])
