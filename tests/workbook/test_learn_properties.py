"""Hypothesis: whatever a learner's backward returns, `learn check` ends in a verdict or one clear
error line for that function, in bounded time, and never raises."""

import time

import numpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from numpy_transformer import workbook

FILE = """
VALUE = None

def relu_backward(dout, cache):
    return VALUE

def linear_backward(dout, cache):
    return VALUE

def residual_backward(dout, cache):
    return VALUE
"""

arrays = hnp.arrays(
    dtype=st.sampled_from([numpy.float64, numpy.float32, numpy.int64, numpy.bool_, numpy.complex128]),
    shape=hnp.array_shapes(min_dims=0, max_dims=4, max_side=5),
)
leaves = st.one_of(
    st.none(),
    st.integers(),
    st.floats(allow_nan=True),
    st.complex_numbers(),
    st.text(max_size=5),
    arrays,
    st.just(numpy.array(["a", "b"])),
    st.just(numpy.array([object(), 1], dtype=object)),
)
objects = st.recursive(
    leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=7).map(tuple),
        st.dictionaries(st.text(max_size=6), children, max_size=4),
        st.lists(children, max_size=3).map(lambda items: (item for item in items)),
    ),
    max_leaves=8,
)


def _module(tmp_path_factory):
    path = tmp_path_factory.mktemp("learner") / "mine.py"
    path.write_text(FILE)
    return path, workbook.load_learner(path)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=objects, name=st.sampled_from(["relu_backward", "linear_backward", "residual_backward"]))
def test_any_returned_object_ends_in_a_verdict_or_one_clear_error(tmp_path_factory, value, name):
    path, module = _module(tmp_path_factory)
    module.VALUE = value
    started = time.perf_counter()
    (verdict,) = workbook.check(path, [name], module=module, time_limit=20.0)
    assert time.perf_counter() - started < 20.0
    assert verdict.status in ("done", "wrong", "error")
    if verdict.status == "error":
        assert verdict.message and "\n" not in verdict.message and "Traceback" not in verdict.message
    if verdict.status == "wrong":
        assert all(g.detail for g in verdict.gradients if g.status == "wrong")
    report = workbook.format_verdicts([verdict])
    assert report.startswith(("✔", "✖"))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shift=st.complex_numbers(min_magnitude=1e-3, max_magnitude=1e3))
def test_a_complex_gradient_never_passes(tmp_path_factory, shift):
    path, module = _module(tmp_path_factory)
    module.relu_backward = lambda dout, cache: dout * cache + shift
    (verdict,) = workbook.check(path, ["relu_backward"], module=module)
    assert verdict.status == "wrong"
