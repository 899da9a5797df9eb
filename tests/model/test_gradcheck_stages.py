"""The gradient checker's stages, each alone: the fast mode's blocks, bisection and report, the
backward contract's forward and repeated calls, and the choice of mode."""

import itertools

import numpy as np
import pytest

from numpy_transformer.gradient_checking.checker import AUTO_EXHAUSTIVE_ENTRIES, resolved_mode
from numpy_transformer.gradient_checking.contract import Pair, checked_forward, repeated_backward
from numpy_transformer.gradient_checking.differences import Tolerances
from numpy_transformer.gradient_checking.projections import (
    ProjectedTensor,
    Search,
    bisect,
    blocks,
    disagreeing_blocks,
    projection_report,
)
from numpy_transformer.gradient_checking.report import GradcheckError


@pytest.mark.parametrize("size", [1, 3, 16, 17, 1000])
def test_the_blocks_cover_every_entry_once(size):
    parts = blocks(size)
    assert parts[0][0] == 0 and parts[-1][1] == size
    assert all(hi > lo for lo, hi in parts) and all(a[1] == b[0] for a, b in itertools.pairwise(parts))
    assert len(parts) == min(size, 16)


def squares(wrong_at=None):
    x = np.random.default_rng(0).standard_normal(500)
    grad = 2 * x
    if wrong_at is not None:
        grad[wrong_at] += 0.5
    tensor = ProjectedTensor(
        lambda: float((x * x).sum()),
        "x",
        x,
        grad,
        float((x * x).sum()),
        Tolerances(1e-6, 1e-5, 1e-3),
        1.0,
        1.0,
    )
    return tensor, x


def test_a_right_gradient_agrees_along_a_random_direction():
    tensor, _ = squares()
    v = tensor.direction(np.random.default_rng(1))
    analytic, numeric, noise, _, _ = tensor.measure(v, 0, tensor.size)
    assert tensor.agrees(analytic, numeric, v, noise)
    assert disagreeing_blocks(tensor, v) == ([], 16)


def test_bisection_comes_down_to_the_one_wrong_entry():
    tensor, x = squares(wrong_at=321)
    before = x.copy()
    v = tensor.direction(np.random.default_rng(1))
    disagree, parts = disagreeing_blocks(tensor, v)
    assert parts == 16 and [part for _, part in disagree] == [(312, 343)]
    assert bisect(tensor, v, disagree, limit=16) == [321]
    np.testing.assert_array_equal(x, before)  # every move given back


def test_the_report_of_located_entries_names_the_worst_first():
    tensor, _ = squares()
    search = Search(located=[(3, 1.0, 1.1), (7, 2.0, 3.0)])
    report = projection_report(tensor, search)
    assert (
        not report.passed and report.worst_index == (7,) and (report.analytic, report.numeric) == (2.0, 3.0)
    )
    assert report.note == "located by bisecting the projection: 2 wrong entries"


def test_the_mode_is_exhaustive_up_to_its_limit_of_entries_or_when_entries_are_sampled():
    small, large = {"x": np.zeros(AUTO_EXHAUSTIVE_ENTRIES)}, {"x": np.zeros(AUTO_EXHAUSTIVE_ENTRIES + 1)}
    assert resolved_mode("auto", None, small) == "exhaustive"
    assert resolved_mode("auto", None, large) == "fast"
    assert resolved_mode("auto", 10, large) == "exhaustive"
    assert resolved_mode("fast", None, small) == "fast"


def test_the_forward_stage_names_a_forward_writing_into_its_input():
    def forward(x):
        x += 1.0
        return x * 2, None

    pair = Pair(forward, lambda d, c: d, {"x": np.ones(3)}, ["x"])
    with pytest.raises(GradcheckError, match=r"forward wrote into its input 'x': 3 of 3 entries differ"):
        checked_forward(pair)


def test_the_repeated_calls_stage_names_a_backward_that_ignores_its_dout():
    kept = {}

    def backward(dout, cache):
        kept.setdefault("grad", 2 * dout * cache)  # the first call's gradient, kept
        return kept["grad"].copy()

    x = np.linspace(0.5, 1.5, 4)
    pair = Pair(lambda x: (x * x, x), backward, {"x": x}, ["x"])
    _, cache = checked_forward(pair)
    upstream = np.ones(4)
    first = {"x": backward(upstream, cache)}
    with pytest.raises(GradcheckError, match=r"backward does not follow its dout: the gradient of 'x'"):
        repeated_backward(pair, {"x": first["x"].copy()}, first, upstream, cache, 0.0)
