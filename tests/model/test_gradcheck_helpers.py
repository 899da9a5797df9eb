"""The checker's two helpers and its Hypothesis strategies: a gradient check in one line of a user's
own test suite."""

import re

import numpy as np
import pytest
from hypothesis import given, settings

from numpy_transformer import Linear
from numpy_transformer.gradient_checking import assert_gradients, assert_module_gradients, gradcheck
from numpy_transformer.gradient_checking.report import GradcheckError
from numpy_transformer.gradient_checking.strategies import shapes

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


def mul_forward(x, y):
    return x * y, (x, y)


def test_a_gradient_the_backward_does_not_return_fails_naming_it():
    rng = np.random.default_rng(4)
    inputs = {"x": rng.standard_normal(3), "y": rng.standard_normal(3)}
    only_dx = lambda dout, cache: dout * cache[1]  # noqa: E731  dy forgotten
    with pytest.raises(GradcheckError, match=r"no gradient for 'y'"):
        assert_gradients(mul_forward, only_dx, inputs)
    with pytest.raises(GradcheckError, match=r"no gradient for 'y'"):
        assert_gradients(mul_forward, only_dx, inputs, wrt=["x", "y"])
    both = lambda dout, cache: (dout * cache[1], dout * cache[0])  # noqa: E731
    with pytest.raises(GradcheckError, match=r"returned 2 values but wrt names 1.*extra 1"):
        assert_gradients(mul_forward, both, inputs, wrt=["x"])
    assert len(assert_gradients(mul_forward, both, inputs, wrt=["x", ""]).reports) == 1  # skipped on purpose
    assert len(assert_gradients(mul_forward, both, inputs).reports) == 2


def test_the_textbook_loss_returning_a_float_is_checked():
    from numpy_transformer.functional import cross_entropy_backward, cross_entropy_forward

    rng = np.random.default_rng(5)
    result = assert_gradients(
        cross_entropy_forward,
        cross_entropy_backward,
        {"logits": rng.standard_normal((2, 3, 5)), "targets": np.array([[1, 2, 0], [4, 0, 3]]), "pad_id": 0},
    )
    assert result.passed and [r.name for r in result.reports] == ["logits"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: assert_gradients(gelu_forward, gelu_backward, {"x": np.ones(0)}),
            ValueError,
            r"inputs\['x'\] is empty",
        ),
        (
            lambda: assert_gradients(gelu_forward, gelu_backward, {"x": np.ones(3)}, max_entries=0),
            ValueError,
            "max_entries must be a positive .* got 0",
        ),
        (
            lambda: assert_gradients(gelu_forward, lambda d, c: [d], {"x": np.ones(3)}),
            TypeError,
            "backward returned a list",
        ),
        (
            lambda: assert_gradients(gelu_forward, lambda d, c: None, {"x": np.ones(3)}),
            GradcheckError,
            "backward returned None",
        ),
        (
            lambda: assert_gradients(lambda x: x, gelu_backward, {"x": np.ones(3)}),
            TypeError,
            r"forward must return \(output, cache\)",
        ),
        (
            lambda: assert_gradients(lambda x: (None, x), gelu_backward, {"x": np.ones(3)}),
            TypeError,
            "forward must return an array or a number, got NoneType",
        ),
        (
            lambda: assert_gradients(gelu_forward, gelu_backward, {"x": np.ones(3)}, wrt="x"),
            TypeError,
            "wrt must be a list",
        ),
        (lambda: shapes(min_side=0), ValueError, "min_side must be a whole number >= 1"),
        (lambda: shapes(max_dims=-1), ValueError, "max_dims"),
    ],
)
def test_unusable_arguments_get_a_clear_error_naming_them(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_low_level_checker_refuses_what_it_would_skip():

    x = np.ones(3)
    with pytest.raises(GradcheckError, match="no analytic gradient for 'x'"):
        gradcheck(lambda: float(x.sum()), {"x": x}, {})
    with pytest.raises(GradcheckError, match="analytic gradient for 'y'.*unchecked"):
        gradcheck(lambda: float(x.sum()), {"x": x}, {"x": np.ones(3), "y": np.ones(3)})
    with pytest.raises(ValueError, match="'x' is empty"):
        gradcheck(lambda: 0.0, {"x": np.ones(0)}, {"x": np.ones(0)})


def test_a_module_input_whose_gradient_is_not_mapped_fails_naming_it():
    rng = np.random.default_rng(6)
    layer = Linear(4, 3, dtype="float64", rng=np.random.default_rng(3))
    x = rng.standard_normal((2, 4))
    with pytest.raises(GradcheckError, match=r"Linear: no gradient checked for the floating input\(s\) 'x'"):
        assert_module_gradients(layer, {"x": x})
    result = assert_module_gradients(layer, {"x": x}, unchecked=("x",))  # left out on purpose
    assert "x" not in {r.name for r in result.reports}
    with pytest.raises(ValueError, match="unchecked names 'y'"):
        assert_module_gradients(layer, {"x": x}, unchecked=("y",))


# -- the Hypothesis strategies of arrays --------------------------------------------------------------

from hypothesis import strategies as st  # noqa: E402

from numpy_transformer.gradient_checking.strategies import arrays, broadcastable_shapes, ids, masks  # noqa: E402


def add_forward(x, y):
    return x + y, (x.shape, y.shape)


def add_backward_forgetting_broadcast(dout, cache):
    return dout, dout  # right only when x and y have the output's shape


def unbroadcast(grad, shape):
    grad = grad.sum(axis=tuple(range(grad.ndim - len(shape))))
    return grad.sum(axis=tuple(i for i, n in enumerate(shape) if n == 1), keepdims=True)


def add_backward(dout, cache):
    x_shape, y_shape = cache
    return unbroadcast(dout, x_shape), unbroadcast(dout, y_shape)


@settings(max_examples=30, deadline=None)
@given(broadcastable_shapes(), st.data())
def test_broadcastable_shapes_find_a_real_broadcasting_bug(pair, data):
    x = data.draw(arrays(pair[0]))
    y = data.draw(arrays(pair[1]))
    assert_gradients(add_forward, add_backward, {"x": x, "y": y})
    if np.broadcast_shapes(x.shape, y.shape) != x.shape or x.shape != y.shape:
        with pytest.raises(GradcheckError, match="has shape"):
            assert_gradients(add_forward, add_backward_forgetting_broadcast, {"x": x, "y": y})


@settings(max_examples=20, deadline=None)
@given(arrays(magnitude=3.0, away_from=(0.0,), margin=1e-3), ids(7, (2, 3)), masks((2, 3)))
def test_the_array_strategies_keep_their_promises(x, token_ids, mask):
    assert np.isfinite(x).all() and np.abs(x).max(initial=0) <= 3.0 + 1e-3
    assert (np.abs(x) >= 1e-3).all()  # away from relu's kink
    assert token_ids.dtype == np.int64 and token_ids.min() >= 0 and token_ids.max() < 7
    assert mask.dtype == np.bool_ and mask.any()
    relu = (lambda x: (np.maximum(x, 0), x), lambda dout, x: dout * (x > 0))
    assert not assert_gradients(*relu, {"x": x}, kinks="fail").kinks


@settings(max_examples=50, deadline=None)
@given(
    arrays((4,), magnitude=1e-3, away_from=(0.0,), margin=5e-4),
    arrays((4,), magnitude=1.0, away_from=(0.0, 0.0015), margin=1e-3),
)
def test_values_kept_off_the_kinks_stay_within_magnitude_and_off_every_kink(near_zero, two_kinks):
    assert np.abs(near_zero).max() <= 1e-3 and (np.abs(near_zero) >= 5e-4).all()
    assert (np.abs(two_kinks) <= 1.0).all()
    assert (np.abs(two_kinks) >= 1e-3).all() and (np.abs(two_kinks - 0.0015) >= 1e-3).all()


@pytest.mark.parametrize(
    "strategy, error, message",
    [
        (lambda: arrays((2,), magnitude=1e-3, away_from=(0.0,), margin=1.0), ValueError, "no value of"),
        (lambda: arrays((0, 3)), ValueError, r"at least 1, got \(0, 3\): an array with a side of 0"),
        (lambda: arrays((-1,)), ValueError, r"at least 1, got \(-1,\)"),
        (lambda: arrays("abc"), TypeError, "arrays: shape must be a tuple of whole numbers"),
        (lambda: ids(2**70), ValueError, "int64"),
        (lambda: masks((0,)), ValueError, "an empty mask has no True entry"),
        (lambda: masks((2,), at_least_one="no"), TypeError, "at_least_one must be True or False"),
    ],
)
def test_a_strategy_refuses_what_it_cannot_draw_when_it_is_made(strategy, error, message):
    with pytest.raises(error, match=message):
        strategy()


@pytest.mark.parametrize("value", [np.arange(4), np.ones(3) + 1j])
def test_inputs_with_no_floating_array_say_what_they_are(value):
    with pytest.raises(
        TypeError, match=f"inputs hold no floating array to check \\('x' is ndarray of {value.dtype}\\)"
    ):
        assert_gradients(gelu_forward, gelu_backward, {"x": value})


def test_a_module_check_refuses_what_is_not_a_module_its_inputs_or_input_grads_by_name():
    x = {"x": np.ones((2, 4))}
    with pytest.raises(TypeError, match="module must be a Module .* got object"):
        assert_module_gradients(object(), x)
    with pytest.raises(TypeError, match="got the class Linear, not one of its instances"):
        assert_module_gradients(Linear, x)
    layer = Linear(4, 3, dtype="float64", rng=np.random.default_rng(3))
    with pytest.raises(TypeError, match="inputs must map"):
        assert_module_gradients(layer, [np.ones((2, 4))])
    with pytest.raises(TypeError, match="input_grads must be a function .* got int"):
        assert_module_gradients(layer, x, input_grads=3)


def test_a_module_is_given_back_in_its_mode_with_its_gradients():
    from numpy_transformer.layers import FeedForwardBlock

    block = FeedForwardBlock(4, 8, 0.5, dtype="float64", rng=np.random.default_rng(0))
    for _, parameter in block.named_parameters():
        parameter.grad[...] = 7.0  # a training step's gradients, not yet applied
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    assert_module_gradients(block, {"x": x}, lambda dx: {"x": dx})
    assert all(part.training for part in block.modules())  # its dropout on again, as it was
    assert all((parameter.grad == 7.0).all() for _, parameter in block.named_parameters())
    block.eval()
    assert_module_gradients(block, {"x": x}, lambda dx: {"x": dx})
    assert not any(part.training for part in block.modules())


DATA_AS_INTEGERS = "is ndarray of int64, and {}'s forward takes it as float64 too: expected a floating array"


@pytest.mark.parametrize("kernels", ["fast", "reference"])
@pytest.mark.parametrize("input_grads", [lambda dx: {"x": dx}, None])
@pytest.mark.parametrize("layer", ["LayerNormalization", "Linear"])
def test_an_integer_input_the_forward_takes_as_floats_is_refused_on_either_kernel_set(
    layer, input_grads, kernels
):
    """An int array of data cannot be moved by a float64 central difference, and its gradient would go
    unchecked: refused by name before the check, whether the kernels take it as it is (the textbook's
    layer norm, either set's Linear) or fail on it (the fast layer norm)."""
    import numpy_transformer as nt
    from numpy_transformer.kernels import using_kernels

    module = (
        getattr(nt, layer)(6, dtype="float64")
        if layer == "LayerNormalization"
        else Linear(6, 2, dtype="float64")
    )
    x = np.arange(12).reshape(2, 6)
    with (
        using_kernels(kernels),
        pytest.raises(
            TypeError,
            match=r"inputs\['x'\] "
            + re.escape(DATA_AS_INTEGERS.format(layer))
            + r".*numpy.asarray\(x, dtype=float\)"
            r".*unchecked=\('x',\) to hold it as given",
        ) as caught,
    ):
        assert_module_gradients(module, {"x": x}, input_grads)
    assert "\n" not in str(caught.value)
    assert all(p.grad.sum() == 0 for _, p in module.named_parameters()) and module.training, (
        "given back as it came"
    )


def test_an_integer_input_held_on_purpose_is_passed_as_it_is_and_named_if_the_forward_fails_on_it():
    """unchecked=('x',) holds an int input as given: the textbook's layer norm checks its parameters
    there; the fast one fails on it, and the check names the input, the module's error as the cause."""
    from numpy_transformer import LayerNormalization
    from numpy_transformer.kernels import using_kernels

    module = LayerNormalization(6, dtype="float64")
    x = np.arange(12).reshape(2, 6)
    with using_kernels("reference"):
        result = assert_module_gradients(module, {"x": x}, unchecked=("x",))
    assert sorted(report.name for report in result.reports) == ["beta", "gamma"]
    with (
        using_kernels("fast"),
        pytest.raises(
            TypeError,
            match=r"inputs\['x'\] is ndarray of int64 and LayerNormalization's forward failed on it",
        ) as caught,
    ):
        assert_module_gradients(module, {"x": x}, unchecked=("x",))
    assert isinstance(caught.value.__cause__, TypeError), "the module's own error stays visible as the cause"


def test_token_ids_are_passed_as_they_are():
    """Integer ids, which a forward cannot index with as floats, are not taken for data."""
    from numpy_transformer import InputEmbeddings

    result = assert_module_gradients(InputEmbeddings(4, 7, dtype="float64"), {"ids": np.array([[1, 2, 6]])})
    assert [report.name for report in result.reports] == ["embedding.weight"]


def test_an_integer_input_whose_gradient_is_asked_for_is_refused_as_assert_gradients_refuses_it():
    """Linear's forward takes an int array, but its gradient cannot be checked: said of the input,
    not blamed on the backward's dtype."""
    layer = Linear(3, 2, dtype="float64")
    with pytest.raises(TypeError, match=r"inputs\['x'\] " + re.escape(DATA_AS_INTEGERS.format("Linear"))):
        assert_module_gradients(layer, {"x": np.arange(6).reshape(2, 3)}, lambda dx: {"x": dx})
    with pytest.raises(TypeError, match=r"inputs\['x'\] is ndarray of int64: a gradient is checked"):
        assert_gradients(lambda x: (x * 2.0, None), lambda d, c: 2.0 * d, {"x": np.arange(3)}, ["x"])


@pytest.mark.parametrize("unchecked", [5, None, ("x", 1), "x"])
def test_unchecked_that_is_not_a_tuple_of_names_is_refused(unchecked):
    layer = Linear(3, 2, dtype="float64")
    with pytest.raises(TypeError, match=r"unchecked must be a tuple \(or a set\) of input names, got"):
        assert_module_gradients(layer, {"x": np.ones((2, 3))}, lambda dx: {"x": dx}, unchecked=unchecked)


@pytest.mark.parametrize("unchecked", [("x",), ["x"], {"x"}, frozenset({"x"})])
def test_unchecked_names_may_come_in_a_tuple_a_list_or_a_set(unchecked):
    layer = Linear(3, 2, dtype="float64")
    assert_module_gradients(layer, {"x": np.ones((2, 3))}, unchecked=unchecked)


def test_a_failing_entrys_kink_check_reuses_its_central_difference():
    """The exhaustive mode's kink check of a failing entry starts from the moves by h its central
    difference took: two more evaluations of the loss per failing entry (those at 2 h), not four."""

    x = np.linspace(0.5, 1.5, 12).reshape(3, 4)
    calls = []

    def loss():
        calls.append(1)
        return float((x**3).sum())

    def evaluations(analytic):
        calls.clear()
        gradcheck(loss, {"x": x}, {"x": analytic}, mode="exhaustive", raise_on_failure=False)
        return len(calls)

    right, wrong = evaluations(3 * x**2), evaluations(2 * x**2)
    assert wrong - right == 2 * x.size
