"""Each fault a hand-written backward can have, on small functions of its own (not the Transformer's):
caught by the default call and named for what it is. Before the checker learnt the contract of a
backward, each of these passed silently or failed as a wrong gradient."""

import re
from dataclasses import dataclass

import numpy as np
import pytest

from numpy_transformer import backend
from numpy_transformer.gradient_checking import assert_gradients, assert_module_gradients, gradcheck
from numpy_transformer.gradient_checking.checker import AUTO_EXHAUSTIVE_ENTRIES
from numpy_transformer.gradient_checking.report import GradcheckError


def tanh_forward(x):
    y = np.tanh(x)
    return y, y


def tanh_backward(dout, y):
    return dout * (1 - y**2)


def x34(seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((3, 4))}


def test_the_right_tanh_passes():
    assert assert_gradients(tanh_forward, tanh_backward, x34()).passed


def test_a_backward_writing_into_dout_is_named():
    def backward(dout, y):
        dout *= 1 - y**2  # the right values, in the caller's array
        return dout

    with pytest.raises(
        GradcheckError, match=r"backward wrote into dout: 12 of 12 entries differ, the first at \(0, 0\)"
    ):
        assert_gradients(tanh_forward, backward, x34())
    assert assert_gradients(tanh_forward, backward, x34(), overwrites=("dout",)).passed  # said on purpose


def test_a_backward_writing_into_the_cache_is_named():
    def backward(dout, y):
        y **= 2
        return dout * (1 - y)

    with pytest.raises(
        GradcheckError, match=r"backward wrote into the cache the forward returned, at cache:"
    ):
        assert_gradients(tanh_forward, backward, x34())


def test_a_backward_writing_into_an_input_is_named():
    def mul_forward(x, w):
        return x * w, (x, w)

    def mul_backward(dout, cache):
        x, w = cache
        dx = dout * w
        x *= dout  # dw computed in the input's own memory
        return dx, x

    rng = np.random.default_rng(1)
    with pytest.raises(GradcheckError, match=r"backward wrote into its input 'x'"):
        assert_gradients(
            mul_forward, mul_backward, {"x": rng.standard_normal(5), "w": rng.standard_normal(5)}
        )


def test_a_forward_shifting_its_input_in_place_is_named_not_blamed_on_the_backward():
    def softmax_forward(x):
        x -= x.max(axis=-1, keepdims=True)  # the usual shift, in the caller's array
        e = np.exp(x)
        y = e / e.sum(axis=-1, keepdims=True)
        return y, y

    def softmax_backward(dout, y):
        return y * (dout - (dout * y).sum(axis=-1, keepdims=True))

    with pytest.raises(
        GradcheckError, match=r"forward wrote into its input 'x': 12 of 12 entries differ"
    ) as failed:
        assert_gradients(softmax_forward, softmax_backward, x34())
    assert "gradient check failed" not in str(failed.value)


@pytest.mark.parametrize(
    "wrong, message",
    [
        (lambda g: g.astype(np.float32), r"gradient of 'x' is float32, its input float64"),
        (lambda g: g.reshape(-1), r"gradient of 'x' has shape \(12,\), its input \(3, 4\)"),
    ],
)
def test_a_gradient_of_another_dtype_or_shape_is_named(wrong, message):
    with pytest.raises(GradcheckError, match=message):
        assert_gradients(tanh_forward, lambda dout, y: wrong(tanh_backward(dout, y)), x34())


def test_a_gradient_from_another_array_library_is_named():
    class Foreign:  # an array of some other library: shape and dtype, but not the input's type
        __module__ = "otherlib"

        def __init__(self, a):
            self.a, self.shape, self.dtype = a, a.shape, a.dtype

        def copy(self):
            return Foreign(self.a.copy())

    with pytest.raises(
        GradcheckError,
        match=r"gradient of 'x' is a otherlib array \(Foreign\) for an input that is a numpy array",
    ):
        assert_gradients(tanh_forward, lambda dout, y: Foreign(tanh_backward(dout, y)), x34())


def test_a_backward_whose_last_bits_change_is_named_and_a_stated_tolerance_accepts_it():
    calls = []

    def backward(dout, y):
        calls.append(1)
        return dout * (1 - y**2) * (1 + 1e-15 * len(calls))

    with pytest.raises(
        GradcheckError, match=r"backward is not deterministic: the gradient of 'x' differs between two calls"
    ):
        assert_gradients(tanh_forward, backward, x34())
    assert assert_gradients(tanh_forward, backward, x34(), nondet_tol=1e-12).passed


def test_a_gradient_aliased_to_a_buffer_the_next_call_overwrites_is_named():
    scratch = {}

    def backward(dout, y):
        buffer = scratch.setdefault(y.shape, np.empty(y.shape))
        np.multiply(dout, 1 - y**2, out=buffer)
        return buffer

    with pytest.raises(
        GradcheckError,
        match=r"the gradient of 'x' returned by one call changed when backward was called again",
    ):
        assert_gradients(tanh_forward, backward, x34())


def test_a_module_returning_its_scratch_buffer_is_named():
    class Scale:
        def __init__(self):
            self.buffer = None

        def named_parameters(self):
            return []

        def zero_grad(self):
            pass

        def eval(self):
            return self

        def forward(self, x):
            return 3.0 * x

        def backward(self, dout):
            if self.buffer is None:
                self.buffer = np.empty(dout.shape)
            np.multiply(dout, 3.0, out=self.buffer)
            return self.buffer

    x = np.random.default_rng(2).standard_normal(6)
    with pytest.raises(GradcheckError, match=r"the gradient of 'x' returned by one backward changed"):
        assert_module_gradients(Scale(), {"x": x}, lambda dx: {"x": dx})


@pytest.mark.parametrize("returns", ["float32", "float64"])
def test_a_forward_computing_in_float32_is_named_as_such_not_as_a_wrong_gradient(returns):
    def forward(x):
        y = np.tanh(x.astype(np.float32))
        y = y.astype(np.float64) if returns == "float64" else y
        return y, y

    with pytest.raises(GradcheckError, match="lower precision") as failed:
        assert_gradients(forward, tanh_backward, x34())
    assert "gradient check failed" not in str(failed.value)


# -- non-differentiable points ------------------------------------------------------------------


def relu_forward(x):
    return np.maximum(x, 0.0), x


def relu_backward(dout, x):
    return dout * (x > 0)


def abs_forward(x):
    return np.abs(x), x


def abs_backward(dout, x):
    return dout * np.sign(x)


def max_forward(x):
    return x.max(axis=-1), x


def max_backward(dout, x):
    """All of a row's gradient to its first maximum."""
    first = np.argmax(x, axis=-1)
    dx = np.zeros_like(x)
    np.put_along_axis(dx, first[..., None], dout[..., None], axis=-1)
    return dx


AT_KINKS = {
    "relu": (relu_forward, relu_backward, np.array([[0.0, 1.0, -2.0], [0.0, 1e-8, -0.5]])),
    "abs": (abs_forward, abs_backward, np.array([0.0, 1.0, -2.0, 0.0, -3e-7])),
    "max with ties": (max_forward, max_backward, np.array([[1.0, 1.0, 0.0], [2.0, 0.5, 2.0]])),
}


@pytest.mark.parametrize("name", AT_KINKS)
def test_a_right_backward_at_a_kink_passes_and_the_kink_is_reported(name):
    forward, backward, x = AT_KINKS[name]
    result = assert_gradients(forward, backward, {"x": x})
    assert all(kink.subgradient for kink in result.kinks)
    if name != "abs":  # abs at exactly 0: sign(0) = 0 is the central difference itself
        assert result.kinks and "non-differentiable at entry" in str(result)


@pytest.mark.parametrize("name", AT_KINKS)
def test_a_wrong_backward_at_a_kink_still_fails_as_wrong(name):
    forward, backward, x = AT_KINKS[name]
    with pytest.raises(GradcheckError, match="gradient check failed"):
        assert_gradients(forward, lambda dout, cache: 2 * backward(dout, cache), {"x": x})


def test_at_a_kink_the_report_gives_both_slopes_and_says_whether_it_is_a_subgradient():
    x = np.array([0.0, 1.0])
    with pytest.raises(
        GradcheckError,
        match=r"non-differentiable at entry \(0,\) of 'x': left slope 0, right slope \S+, analytic 0 is a subgradient",
    ):
        assert_gradients(relu_forward, relu_backward, {"x": x}, kinks="fail")
    wrong = lambda dout, x: dout * (x >= 0) * 3.0  # noqa: E731
    with pytest.raises(GradcheckError, match=r"is NOT a subgradient"):
        assert_gradients(relu_forward, wrong, {"x": x})
    nudged = assert_gradients(relu_forward, relu_backward, {"x": x}, kinks="nudge")
    assert nudged.passed and not nudged.kinks


# -- the fast mode --------------------------------------------------------------------------------


def test_the_fast_mode_catches_and_names_one_wrong_entry_among_many():
    x = np.random.default_rng(3).standard_normal((200, 100))
    assert x.size > AUTO_EXHAUSTIVE_ENTRIES  # the default chooses projections

    def one_wrong(dout, y):
        dx = dout * (1 - y**2)
        dx[137, 42] *= 1.05
        return dx

    assert assert_gradients(tanh_forward, tanh_backward, {"x": x}).reports[0].mode == "fast"
    with pytest.raises(
        GradcheckError, match=r"x: FAILED .* at \(137, 42\) .*by projection\)\n  located by bisecting"
    ):
        assert_gradients(tanh_forward, one_wrong, {"x": x})
    with pytest.raises(GradcheckError, match=r"at \(137, 42\) .*20000 entries\)"):
        assert_gradients(tanh_forward, one_wrong, {"x": x}, mode="exhaustive")


def test_the_fast_mode_passes_relu_with_exact_zeros_and_reports_them():
    x = np.random.default_rng(4).standard_normal(10_000)
    x[:50] = 0.0  # padding
    result = assert_gradients(relu_forward, relu_backward, {"x": x}, mode="fast")
    assert result.passed and len(result.kinks) >= 1
    with pytest.raises(GradcheckError):
        assert_gradients(relu_forward, lambda dout, x: dout * (x >= 0), {"x": x}, mode="fast", kinks="fail")


# -- the checker's own arguments --------------------------------------------------------------------


@pytest.mark.parametrize(
    "options, error, message",
    [
        ({"eps": float("nan")}, ValueError, r"eps must be a finite positive number, got nan"),
        ({"eps": float("inf")}, ValueError, r"eps must be a finite positive number, got inf"),
        ({"atol": "1e-5"}, TypeError, r"atol must be a real number, got str '1e-5'"),
        ({"rtol": None}, TypeError, r"rtol must be a real number, got NoneType"),
        ({"mode": "quick"}, ValueError, r"mode must be one of .* got 'quick'"),
        ({"kinks": "ignore"}, ValueError, r"kinks must be one of .* got 'ignore'"),
        ({"nondet_tol": -1.0}, ValueError, r"nondet_tol must be a finite non-negative number, got -1.0"),
        ({"overwrites": "dout"}, TypeError, r"overwrites must be a tuple of names"),
        (
            {"overwrites": ("y",)},
            ValueError,
            r"overwrites names 'y', expected 'dout', 'cache' or one of the inputs",
        ),
        ({"wrt": []}, ValueError, r"wrt: nothing to check, expected the names of floating inputs, got \[\]"),
    ],
)
def test_the_checkers_own_bad_input_names_the_argument(options, error, message):
    with pytest.raises(error, match=message):
        assert_gradients(tanh_forward, tanh_backward, x34(), **options)


def test_a_forward_returning_nothing_is_a_clear_error():
    with pytest.raises(TypeError, match=r"forward returned None \(nothing\), expected \(output, cache\)"):
        assert_gradients(lambda x: None, tanh_backward, x34())


# -- the report ---------------------------------------------------------------------------------------


def test_a_failure_lists_the_worst_entries_and_can_draw_them(tmp_path):
    wrong = lambda dout, y: dout * (1 - y)  # noqa: E731
    picture = tmp_path / "error.png"
    with pytest.raises(GradcheckError, match=r"worst entries:\s+index\s+analytic\s+numeric") as failed:
        assert_gradients(tanh_forward, wrong, x34(), picture=picture)
    message = str(failed.value)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert f"no picture saved to {picture}: matplotlib is not installed" in message
    else:
        assert f"picture of the error: {picture}" in message and picture.stat().st_size > 0


@pytest.mark.parametrize("where", ["a directory", "no suffix", "an unknown suffix", "a file as its folder"])
def test_a_picture_that_cannot_be_saved_as_named_never_hides_the_failure(tmp_path, where):
    pytest.importorskip("matplotlib")
    (tmp_path / "file").write_text("mine")
    picture = {
        "a directory": tmp_path,
        "no suffix": tmp_path / "error",
        "an unknown suffix": tmp_path / "error.txt",
        "a file as its folder": tmp_path / "file" / "error.png",
    }[where]
    wrong = lambda dout, y: dout * (1 - y)  # noqa: E731
    with pytest.raises(GradcheckError, match="gradient check failed") as failed:
        assert_gradients(tanh_forward, wrong, x34(), picture=picture)
    message = str(failed.value)
    if where == "no suffix":  # the file named is the file written, a PNG
        assert f"picture of the error: {picture}" in message and picture.read_bytes().startswith(b"\x89PNG")
        assert not picture.with_suffix(".png").exists()
    else:
        assert f"no picture saved to {picture}: " in message
    assert (tmp_path / "file").read_text() == "mine"


def test_a_picture_that_is_no_file_name_is_refused_by_name():
    with pytest.raises(TypeError, match="picture must be a file name .* got int"):
        assert_gradients(tanh_forward, lambda dout, y: dout * (1 - y), x34(), picture=3)


# -- the same checks on CuPy: the strict stand-in, and real CuPy where a GPU is present --------------


def _real_cupy():
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # not installed, or no usable GPU
        return None


@pytest.fixture(
    params=[
        "stand-in",
        pytest.param("cupy", marks=pytest.mark.skipif(_real_cupy() is None, reason="no GPU here")),
    ]
)
def device(request):
    from cupy_standin import make_module

    previous = backend.get_array_module()
    module = backend.set_backend(make_module() if request.param == "stand-in" else "cupy")
    yield module
    backend.set_backend(previous)


def test_the_checks_run_on_cupy_arrays(device):
    xp = device

    def forward(x):
        y = xp.tanh(x)
        return y, y

    def backward(dout, y):
        return dout * (1 - y**2)

    def writes_dout(dout, y):
        dout *= 1 - y**2
        return dout

    def on_the_host(dout, y):
        return (dout * (1 - y**2)).get()

    small = {"x": xp.asarray(np.random.default_rng(5).standard_normal((3, 4)))}
    assert assert_gradients(forward, backward, small).passed
    large = {"x": xp.asarray(np.random.default_rng(6).standard_normal((80, 80)))}
    assert assert_gradients(forward, backward, large).reports[0].mode == "fast"
    with pytest.raises(GradcheckError, match="backward wrote into dout"):
        assert_gradients(forward, writes_dout, small)
    with pytest.raises(
        GradcheckError,
        match=r"gradient of 'x' is a numpy array \(ndarray\) for an input that is a cupy array",
    ):
        assert_gradients(forward, on_the_host, small)
    with pytest.raises(GradcheckError, match=r"located by bisecting"):
        assert_gradients(forward, lambda d, y: backward(d, y) * (1 + (y > 0.99)), large)


def test_the_low_level_checker_refuses_a_non_finite_eps():
    x = np.ones(3)
    with pytest.raises(ValueError, match="eps must be a finite positive number"):
        gradcheck(lambda: float(x.sum()), {"x": x}, {"x": np.ones(3)}, eps=float("nan"))


# -- the hostile review: each false pass, false alarm, slowness and message, on its own ------------


def _fails(forward, backward, inputs, match=None, **options):
    with pytest.raises(GradcheckError, match=match) as failed:
        assert_gradients(forward, backward, inputs, **options)
    return str(failed.value)


def test_a_nan_gradient_fails_by_name():
    _fails(
        tanh_forward, lambda d, y: np.full_like(y, np.nan), x34(), match=r"analytic gradient is not finite"
    )

    def one_nan(d, y):
        g = d * (1 - y**2)
        g[0, 0] = np.nan
        return g

    _fails(tanh_forward, one_nan, x34(), match=r"not finite at \(0, 0\): nan \(1 of 12")
    x = {"x": np.random.default_rng(0).standard_normal((80, 80))}
    _fails(tanh_forward, one_nan, x, match=r"not finite at \(0, 0\)")  # fast mode too


def test_a_small_error_spread_over_a_large_tensor_is_said_with_its_precision():
    """A gradient 0.1% too large everywhere, in the fast mode: the message gives 0.1%, not 0%."""
    x = {"x": np.random.default_rng(0).standard_normal((100, 100))}
    message = _fails(
        lambda x: (float((x * x).sum()), x), lambda d, x: d * 2 * x * 1.001, x, rtol=1e-5, atol=1e-8
    )
    # three significant digits of the worst entry's relative error: 0.1%, or 0.101% where a small entry's
    # finite difference carries its rounding (NumPy 1 and 2 sum in other orders); never 0%
    assert re.search(r"each wrong by up to 0\.10?\d?% of its value", message), message
    assert "the projection on a random direction is wrong by 0.0999%" in message, message


def test_a_nan_gradient_is_shown_beside_the_numeric_value_at_its_entry():
    """Where the analytic gradient is NaN and the loss is finite, the numeric derivative there is
    computed and shown (0 at x = 0 for x**2), not said to be NaN too."""
    x = {"x": np.linspace(-1.0, 1.0, 12).reshape(3, 4)}
    x["x"][0, 0] = 0.0

    def backward(d, x):
        g = 2 * d * x
        g[0, 0] = np.nan
        return g

    message = _fails(lambda x: (float((x * x).sum()), x), backward, x, match=r"not finite at \(0, 0\)")
    assert "(analytic nan, numeric 0, 12 entries)" in message, message


def test_a_forward_output_or_input_that_is_not_finite_fails_by_name():
    x = np.abs(x34()["x"])
    x[0, 0] = 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        _fails(
            lambda x: (np.log(x), x),
            lambda d, x: 7.0 * d,
            {"x": x},
            match=r"the forward's output is not finite at \(0, 0\): -inf",
        )
    x = x34()["x"]
    x[0, 0] = np.nan
    _fails(tanh_forward, lambda d, y: 3.0 * d, {"x": x}, match=r"input 'x' is not finite at \(0, 0\)")


def test_gradients_smaller_than_atol_are_still_checked():
    forward = lambda x: (1e-6 * x**2, x)  # noqa: E731
    _fails(forward, lambda d, x: 1e-6 * x * d, x34(), match="FAILED")
    message = _fails(forward, lambda d, x: np.zeros_like(x), x34(), match="FAILED rel 1.00e")
    assert " ok " not in message
    assert assert_gradients(forward, lambda d, x: 2e-6 * x * d, x34()).passed


def _max_forward(x):
    m = x.max(axis=-1)
    return m, (x, m)


def test_every_tied_entry_given_the_whole_gradient_fails_even_nudged():
    x = {"x": np.array([[1.0, 1.0, 0.5], [2.0, -1.0, 2.0]])}

    def every_tied_entry(d, c):
        x, m = c
        return (x == m[:, None]) * d[:, None]

    _fails(_max_forward, every_tied_entry, x, match=r"tied entries .* wrong")
    _fails(_max_forward, every_tied_entry, x, kinks="nudge")
    first = lambda d, c: max_backward(d, c[0])  # noqa: E731
    assert assert_gradients(_max_forward, first, x).passed
    nudged = assert_gradients(_max_forward, first, {"x": np.array([[1.0, 1.0, 0.5]])}, kinks="nudge")
    assert nudged.passed and not nudged.kinks  # the tie broken: each entry moved by its own amount


def test_the_fast_mode_catches_a_gradient_swapped_between_two_entries():
    def swapped(d, y):
        g = d * (1 - y**2)
        g[0, 0], g[0, 1] = g[0, 1], g[0, 0]
        return g

    x = np.random.default_rng(0).standard_normal((1000, 1000))
    _fails(tanh_forward, swapped, {"x": x}, match=r"located by bisecting")


def test_the_fast_mode_noise_allowance_does_not_hide_a_wrong_entry_in_a_large_sum():
    x = np.random.default_rng(0).standard_normal((1000, 1000))
    x[23, 57] = 1.0

    def backward(d, x):
        g = d * x
        g[23, 57] *= 1.008
        return g

    _fails(lambda x: (0.5 * float((x * x).sum()), x), backward, {"x": x}, match=r"\(23, 57\)")
    assert assert_gradients(lambda x: (0.5 * float((x * x).sum()), x), lambda d, x: d * x, {"x": x}).passed


def test_a_backward_that_memoizes_its_gradient_fails():
    def forward(x):
        y = np.tanh(x)
        return y, {"y": y}

    def memoizing(d, c):
        if "dx" not in c:
            c["dx"] = d * (1 - c["y"] ** 2)
        return c["dx"].copy()

    _fails(forward, memoizing, x34(), match=r"the key\(s\) 'dx' added")
    memo = {}

    def memoizing_outside(d, c):  # the cache left alone: the stale gradient is seen by its dout
        if "dx" not in memo:
            memo["dx"] = d * (1 - c["y"] ** 2)
        return memo["dx"].copy()

    _fails(forward, memoizing_outside, x34(), match=r"does not follow its dout")


@dataclass(slots=True)
class SlotCache:
    out: np.ndarray


def test_a_cache_with_slots_is_watched_for_writes():
    def forward(x):
        y = np.maximum(x, 0)
        return y, SlotCache(y.copy())

    def backward(d, c):
        np.sign(c.out, out=c.out)
        return d * c.out

    _fails(forward, backward, x34(), match=r"wrote into the cache the forward returned, at cache.out")


def test_a_stable_sort_with_three_tied_entries_passes():
    def forward(x):
        i = np.argsort(x, axis=-1, kind="stable")
        return np.take_along_axis(x, i, -1), i

    def backward(d, i):
        g = np.empty_like(d)
        np.put_along_axis(g, i, d, -1)
        return g

    x = np.array([[0.3, 0.3, -1.0, 2.0], [1.0, 1.0, 1.0, 0.0]])
    assert assert_gradients(forward, backward, {"x": x}).passed
    _fails(forward, lambda d, i: 2 * backward(d, i), {"x": x})


@pytest.mark.parametrize("x", [np.array([6.67e-7, -6.67e-7]), np.linspace(-1e-5, 1e-5, 31)])
def test_a_relu_within_a_step_of_its_kink_passes(x):
    assert assert_gradients(relu_forward, relu_backward, {"x": x}).passed
    _fails(relu_forward, lambda d, x: 2 * relu_backward(d, x), {"x": x})


def test_large_inputs_get_a_step_relative_to_their_magnitude():
    assert assert_gradients(lambda x: (3.0 * x, None), lambda d, c: 3.0 * d, {"x": 1e8 * x34()["x"]}).passed
    _fails(lambda x: (3.0 * x, None), lambda d, c: 3.03 * d, {"x": 1e8 * x34()["x"]})


def test_parameters_sharing_one_array_are_checked_as_one_and_named():
    from numpy_transformer.module import Module, Parameter

    class Tied(Module):
        def __init__(self, factor=1.0):
            super().__init__("float64")
            self.w = Parameter(np.random.default_rng(0).standard_normal((3, 3)))
            self.w2 = Parameter(self.w.data)
            self.factor = factor

        def forward(self, x):
            self._save(x)
            return x @ self.w.data.T @ self.w2.data

        def backward(self, d):
            x = self._take()
            self.w2.accumulate(self.factor * (x @ self.w.data.T).T @ d)
            dy = d @ self.w2.data.T
            self.w.accumulate(dy.T @ x)
            return dy @ self.w.data

    x = {"x": x34()["x"][:2, :3].copy()}
    result = assert_module_gradients(Tied(), x, lambda dx: {"x": dx})
    assert "'w' shares its memory with 'w2'" in str(result)
    with pytest.raises(GradcheckError, match="shares its memory"):
        assert_module_gradients(Tied(factor=2.0), x, lambda dx: {"x": dx})


def test_relu_on_a_million_entries_with_exact_zeros_is_quick_and_passes():
    import time

    x = np.random.default_rng(0).standard_normal((1000, 1000))
    x.flat[::100] = 0.0
    start = time.perf_counter()
    result = assert_gradients(relu_forward, relu_backward, {"x": x})
    assert "checked at the input moved off them" in str(result)
    assert assert_gradients(relu_forward, relu_backward, {"x": x}, kinks="nudge").passed
    assert time.perf_counter() - start < 20
    _fails(relu_forward, lambda d, x: 2 * relu_backward(d, x), {"x": x})


def test_a_gradient_wrong_everywhere_in_a_million_entries_fails_quickly_with_its_relative_error():
    import time

    x = np.random.default_rng(0).standard_normal((1000, 1000))
    start = time.perf_counter()
    message = _fails(lambda x: (float((x * x).mean()), x), lambda d, x: d * x / x.size, {"x": x})
    assert "rel 5.00e-01" in message and "spread over many entries" in message
    message = _fails(lambda x: (float((x * x).mean()), x), lambda d, x: np.zeros_like(x), {"x": x})
    assert "rel 1.00e+00" in message
    assert time.perf_counter() - start < 20


def test_a_forward_that_is_not_deterministic_is_named():
    def forward(x):
        m = (np.random.random(x.shape) > 0.5) * 2.0
        return x * m, m

    _fails(forward, lambda d, m: d * m, {"x": np.ones((3, 4))}, match=r"forward is not deterministic")


def test_a_forward_with_one_float32_branch_is_named_as_lower_precision():
    def forward(x):
        return x + np.tanh(x.astype(np.float32)).astype(np.float64), x

    _fails(
        forward, lambda d, x: d * (2 - np.tanh(x) ** 2), x34(), match="part of its output in lower precision"
    )


def test_overwrites_naming_an_input_held_in_the_cache_is_honoured():
    def forward(x):
        return np.tanh(x), x

    def backward(d, x):
        np.tanh(x, out=x)
        x **= 2
        np.subtract(1, x, out=x)
        return d * x

    assert assert_gradients(forward, backward, x34(), overwrites=("x",)).passed
    assert assert_gradients(forward, backward, x34(), overwrites=("x", "cache")).passed
    _fails(forward, backward, x34(), match="wrote into")


def test_arrays_of_another_library_than_the_backend_are_named():
    from cupy_standin import make_module

    cp = make_module()
    with pytest.raises(TypeError, match=r"set_backend\('cupy'\)"):
        assert_gradients(lambda x: (cp.tanh(x), None), tanh_backward, {"x": cp.asarray(x34()["x"])})
    previous = backend.get_array_module()
    backend.set_backend(cp)
    try:
        with pytest.raises(TypeError, match=r"is a numpy array .* but the array backend is cupy"):
            assert_gradients(tanh_forward, tanh_backward, x34())
    finally:
        backend.set_backend(previous)


@pytest.mark.parametrize("seed, error", [(None, TypeError), ("a", TypeError), (-5, ValueError)])
def test_a_bad_seed_is_named(seed, error):
    with pytest.raises(error, match=r"seed must be a whole number >= 0"):
        assert_gradients(tanh_forward, tanh_backward, x34(), seed=seed)


def test_minor_messages_name_what_is_wrong():
    with pytest.raises(TypeError, match=r"inputs\['x'\] is a float, not an array"):
        assert_gradients(tanh_forward, tanh_backward, {"x": 0.3})
    with pytest.raises(TypeError, match=r"is a list, not an array"):
        assert_gradients(tanh_forward, tanh_backward, {"x": [0.3, 0.2]})
    with pytest.raises(GradcheckError, match=r"returns float16 .* a float16 function"):
        assert_gradients(
            lambda x: (np.tanh(x).astype(np.float16), None), lambda d, c: np.zeros((3, 4)), x34()
        )
    with pytest.raises(ValueError, match=r"mode='fast' checks every entry by projection"):
        assert_gradients(tanh_forward, tanh_backward, x34(), mode="fast", max_entries=3)
    with pytest.raises(ValueError, match=r"wrt names 'x' more than once"):
        assert_gradients(tanh_forward, tanh_backward, x34(), wrt=["x", "x"])

    class Empty:
        def named_parameters(self):
            return []

        def eval(self):
            return self

    with pytest.raises(ValueError, match=r"Empty has no parameters and input_grads is None"):
        assert_module_gradients(Empty(), x34())


def test_inputs_too_small_for_float64_to_resolve_are_not_called_lower_precision():
    def add_forward(x, y):
        return x + y, None

    inputs = {"x": np.array([2.83524833e-38, 2.83524833e-38]), "y": np.array([1.0])}
    assert assert_gradients(add_forward, lambda d, c: (d, d.sum(keepdims=True)), inputs).passed


def test_the_rounding_allowance_of_a_large_array_output_does_not_hide_a_one_percent_error():
    x = np.random.default_rng(0).standard_normal(10**6)

    def one_wrong(dout, y):
        dx = dout * (1 - y**2)
        dx[333_333] *= 1.01
        return dx

    _fails(tanh_forward, one_wrong, {"x": x}, match=r"at \(333333,\)")
