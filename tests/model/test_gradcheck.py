"""The gradient checker's own tests: it passes right gradients and catches wrong ones."""

import numpy as np
import pytest
from conftest import GRADCHECK_TOLERANCE

import numpy_transformer as nt
from numpy_transformer import functional as F
from numpy_transformer.gradient_checking import assert_gradients, assert_module_gradients, gradcheck
from numpy_transformer.gradient_checking.report import GradcheckError


def test_gradcheck_errors_are_relative_to_the_whole_check_and_still_catch_small_tensors():
    """One loss, two tensors: a's gradients are about 1, b's about 1e-4."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(4), rng.standard_normal(4)

    def loss():
        return float((a**2).sum() + 1e-4 * (b**2).sum())

    right = gradcheck(loss, {"a": a, "b": b}, {"a": 2 * a, "b": 2e-4 * b})
    assert right.max_relative_error <= GRADCHECK_TOLERANCE, str(right)
    half_wrong = gradcheck(loss, {"a": a, "b": b}, {"a": 2 * a, "b": 1e-4 * b}, raise_on_failure=False)
    assert half_wrong.reports[1].relative_error > 10 * GRADCHECK_TOLERANCE, str(half_wrong)


def test_a_backward_missing_one_term_is_caught_and_named():
    rng = np.random.default_rng(1)
    inputs = {
        "x": rng.standard_normal((2, 3, 5)),
        "gamma": rng.standard_normal(5),
        "beta": rng.standard_normal(5),
    }

    def backward_without_the_mean_term(dout, cache):
        xhat, rstd, gamma = cache
        g = dout * gamma
        dx = rstd * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))  # forgot - mean(g)
        return dx, (dout * xhat).reshape(-1, 5).sum(0), dout.reshape(-1, 5).sum(0)

    right = assert_gradients(F.layer_norm_forward, F.layer_norm_backward, inputs, ["x", "gamma", "beta"])
    assert right.max_relative_error <= GRADCHECK_TOLERANCE, str(right)
    with pytest.raises(GradcheckError, match=r"x: FAILED"):
        assert_gradients(F.layer_norm_forward, backward_without_the_mean_term, inputs, ["x", "gamma", "beta"])


def test_refuses_float32_and_misshaped_gradients():
    a = np.ones(3, dtype=np.float32)
    with pytest.raises(TypeError, match="float64 for 'a'"):
        gradcheck(lambda: float(a.sum()), {"a": a}, {"a": np.ones(3)})
    b = np.ones(3)
    with pytest.raises(ValueError, match=r"'b' has shape \(2,\), expected \(3,\)"):
        gradcheck(lambda: float(b.sum()), {"b": b}, {"b": np.ones(2)})


def test_every_input_entry_is_restored():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    before = x.copy()
    gradcheck(lambda: float((np.sin(x) * before).sum()), {"x": x}, {"x": np.cos(x) * before})
    np.testing.assert_array_equal(x, before)


def test_the_helpers_never_write_into_the_callers_inputs_even_when_they_move_them_off_kinks():
    x = np.array([[0.0, 1.0, -2.0, 0.0], [0.5, 0.0, 3.0, -1.0]])
    before = x.copy()
    result = assert_gradients(
        lambda x: (np.maximum(x, 0.0), x), lambda d, x: d * (x > 0), {"x": x}, kinks="nudge"
    )
    assert result.passed
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("shared", [False, True])
def test_tied_embeddings_gradient_is_the_sum_of_their_uses(textbook, shared):
    """One matrix for the target embedding and the projection (and the source embedding when the
    vocabulary is shared): finite differences of the loss through every use at once."""
    model = nt.build_transformer(
        9,
        9,
        5,
        5,
        d_model=8,
        N=1,
        h=2,
        d_ff=8,
        dropout=0.0,
        dtype="float64",
        seed=1,
        tie_embeddings=True,
        shared_vocab=shared,
    )
    names = [name for name, _ in model.named_parameters()]
    tables = [
        name for name in names if name.endswith("embedding.weight") or name == "projection_layer.proj.weight"
    ]
    assert tables == (
        ["src_embed.embedding.weight"]
        if shared
        else ["src_embed.embedding.weight", "tgt_embed.embedding.weight"]
    )
    assert model.tgt_embed.embedding.weight is model.projection_layer.proj.weight
    src, tgt = np.array([[1, 2, 3, 4], [5, 6, 7, 0]]), np.array([[1, 8, 2], [3, 4, 5]])
    result = assert_module_gradients(
        model,
        {"src": src, "tgt": tgt},
        forward=lambda src, tgt: model.forward(src, tgt, nt.make_src_mask(src, 0), None),
    )
    assert result.passed


def test_numpy_transformer_gradcheck_is_the_function_and_can_be_pickled():
    """``nt.gradcheck`` is the checker's function itself (a ``functools.partial`` of it can go to
    another process), and the old module path says where the checker went."""
    import pickle

    x = np.linspace(-1.0, 1.0, 5)
    assert nt.gradcheck is gradcheck and pickle.loads(pickle.dumps(nt.gradcheck)) is gradcheck
    result = nt.gradcheck(lambda: float((x**2).sum()), {"x": x}, {"x": 2 * x})
    assert result.passed and [report.name for report in result.reports] == ["x"], str(result)
    with pytest.raises(GradcheckError, match="x: FAILED"):
        nt.gradcheck(lambda: float((x**2).sum()), {"x": x}, {"x": 3 * x})
    with pytest.raises(
        ModuleNotFoundError,
        match="numpy_transformer.gradcheck has moved: import numpy_transformer.gradient_checking",
    ):
        import numpy_transformer.gradcheck  # noqa: F401


@pytest.mark.parametrize("old", ["testing", "finite_differences", "backward_contract"])
def test_the_checkers_old_module_paths_name_their_new_place(old):
    import importlib

    with pytest.raises(
        ModuleNotFoundError,
        match=rf"numpy_transformer.{old} has moved: import numpy_transformer.gradient_checking",
    ):
        importlib.import_module(f"numpy_transformer.{old}")


def test_the_checkers_public_surface_is_three_names():
    import numpy_transformer.gradient_checking as checking

    assert checking.__all__ == ["assert_gradients", "assert_module_gradients", "gradcheck"]
    assert nt.assert_gradients is assert_gradients and nt.assert_module_gradients is assert_module_gradients


@pytest.mark.parametrize(
    "wrt, expected",
    [
        ("ab", r"wrt must be a list of input names.*got the str 'ab'.*\['ab'\]"),
        (iter(["a", "b"]), r"wrt must be a list of input names.*got list_iterator"),
        (["a", 2], r"wrt must be a list of input names.*got int 2 in it"),
        (["a", "a"], r"wrt names 'a' more than once"),
    ],
)
def test_assert_gradients_refuses_a_wrt_that_is_not_a_list_of_names(wrt, expected):
    def forward(a, b):
        return a * b, (a, b)

    def backward(dout, cache):
        return dout * cache[1], dout * cache[0]

    inputs = {"a": np.linspace(0.5, 1.5, 4), "b": np.linspace(-1.0, 2.0, 4), "ab": np.ones(4)}
    calls = []

    def watched(**given):
        calls.append(1)
        return forward(given["a"], given["b"])

    with pytest.raises((TypeError, ValueError), match=expected):
        assert_gradients(watched, backward, inputs, wrt)
    assert calls == [], "refused before the forward runs"


@pytest.mark.parametrize(
    "overwrites, expected",
    [(5, r"overwrites must be a tuple of names.*got int 5"), (None, r"overwrites.*got NoneType None")],
)
def test_assert_gradients_refuses_overwrites_that_are_not_names(overwrites, expected):
    inputs = {"x": np.linspace(0.5, 1.5, 4)}
    with pytest.raises(TypeError, match=expected):
        assert_gradients(lambda x: (x * x, x), lambda d, c: 2 * d * c, inputs, ["x"], overwrites=overwrites)


@pytest.mark.parametrize("argument", ["variables", "analytic"])
def test_gradcheck_refuses_variables_or_analytic_that_are_not_mappings(argument):
    x = np.linspace(0.5, 1.5, 4)
    given = {"variables": {"x": x}, "analytic": {"x": 2 * x}}
    given[argument] = [given[argument]["x"]]
    with pytest.raises(TypeError, match=rf"{argument} must map each name to its array, got list"):
        gradcheck(lambda: float((x**2).sum()), given["variables"], given["analytic"])


def test_both_helpers_refuse_inputs_that_are_not_a_mapping():
    x = np.linspace(0.5, 1.5, 4)
    with pytest.raises(
        TypeError, match="inputs must map each forward argument's name to its value, got list"
    ):
        assert_gradients(lambda x: (x * x, x), lambda d, c: 2 * d * c, [x], ["x"])
    with pytest.raises(
        TypeError, match="inputs must map each forward argument's name to its value, got list"
    ):
        assert_module_gradients(nt.Linear(4, 2, dtype="float64"), [x.reshape(1, 4)])
