"""Adam, AdamW, schedules and clipping against values worked out by hand from the formulas."""

import math

import numpy as np
import pytest

from numpy_transformer.kernels.cpu import SLICE, _deal_slices
from numpy_transformer.module import Parameter
from numpy_transformer.optim import (
    Adam,
    AdamW,
    ConstantSchedule,
    NoamSchedule,
    WarmupCosineSchedule,
    clip_grad_norm,
    global_grad_norm,
    grad_norm_on_device,
)

pytestmark = pytest.mark.usefixtures("kernels")  # every test on the CPU kernel's update and on the textbook's


def test_one_adam_step_by_hand():
    p = Parameter(np.array([1.0, -2.0]))
    opt = Adam([("p", p)], lr=0.1, betas=(0.9, 0.98), eps=1e-9)
    p.grad[...] = [0.5, -0.25]
    opt.step()
    # m = 0.1 g, v = 0.02 g^2; m_hat = g, v_hat = g^2  ->  step = lr * g / (|g| + eps)
    np.testing.assert_allclose(
        p.data, [1.0 - 0.1 * 0.5 / (0.5 + 1e-9), -2.0 + 0.1 * 0.25 / (0.25 + 1e-9)], rtol=1e-15
    )


def test_three_adam_steps_by_hand():
    p = Parameter(np.array([0.3]))
    opt = Adam([("p", p)], lr=0.01, betas=(0.8, 0.9), eps=1e-8)
    value, m, v = 0.3, 0.0, 0.0
    for t, g in enumerate([1.0, -0.5, 2.0], start=1):
        p.grad[...] = g
        opt.step()
        m, v = 0.8 * m + 0.2 * g, 0.9 * v + 0.1 * g * g
        value -= 0.01 * (m / (1 - 0.8**t)) / (math.sqrt(v / (1 - 0.9**t)) + 1e-8)
        assert p.data[0] == pytest.approx(value, rel=1e-14)
    assert opt.step_count == 3


def test_adamw_decays_matrices_not_vectors():
    w, b = Parameter(np.ones((2, 2))), Parameter(np.ones(2))
    opt = AdamW([("w", w), ("b", b)], lr=0.1, weight_decay=0.5)
    opt.step()  # zero gradients: only the decay moves anything
    np.testing.assert_allclose(w.data, 1.0 - 0.1 * 0.5)
    np.testing.assert_allclose(b.data, 1.0)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_sliced_threaded_update_equals_the_formula(threads, kernels):
    """Parameters larger than a slice (and one of odd size) are updated piecewise across threads and
    the smaller ones packed into one run: every entry must still get exactly the whole-array formula,
    with and without weight decay."""
    rng = np.random.default_rng(0)
    shapes = [
        (3, SLICE - 5),
        (2 * SLICE + 7,),
        (5,),
        (SLICE,),
        (4, 6),
        (SLICE - 1,),
        (2, 3),
    ]  # the small ones are packed
    params = [(f"p{i}", Parameter(rng.standard_normal(s))) for i, s in enumerate(shapes)]
    start = [p.data.copy() for _, p in params]
    adam = AdamW(params, lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=0.1, threads=threads)
    m = [np.zeros(s) for s in shapes]
    v = [np.zeros(s) for s in shapes]
    for t in (1, 2):
        grads = [rng.standard_normal(s) for s in shapes]
        for (_, p), g in zip(params, grads):
            p.grad[...] = g
        adam.step()
        for i, g in enumerate(grads):
            decay = 1.0 - 0.01 * 0.1 if len(shapes[i]) > 1 else 1.0
            m[i], v[i] = 0.8 * m[i] + 0.2 * g, 0.9 * v[i] + 0.1 * g * g
            start[i] = start[i] * decay - 0.01 * (m[i] / (1 - 0.8**t)) / (np.sqrt(v[i] / (1 - 0.9**t)) + 1e-8)
    for (_, p), expected in zip(params, start):
        np.testing.assert_allclose(p.data, expected, rtol=1e-12, atol=1e-15)


def test_slices_cover_every_entry_once_in_balanced_shares():
    sizes = [10, 3, 25, 0, 7]
    shares = _deal_slices(sizes, 4, 3)
    covered = [np.zeros(size, int) for size in sizes]
    for share in shares:
        for index, start, stop in share:
            assert 0 < stop - start <= 4
            covered[index][start:stop] += 1
    assert all((c == 1).all() for c in covered)
    loads = [sum(stop - start for _, start, stop in share) for share in shares]
    assert all(abs(load - sum(sizes) / 3) <= 4 for load in loads)  # within one slice of an equal share
    assert _deal_slices(sizes, 100, 1) == [[(0, 0, 10), (1, 0, 3), (2, 0, 25), (4, 0, 7)]]


def test_non_contiguous_parameter_is_refused_by_the_kernel_and_updated_by_the_textbook(kernels):
    w = Parameter(np.ones((3, 4)).T)
    if kernels == "fast":  # the kernel updates through flat views, which must not be copies
        with pytest.raises(ValueError, match="'w'.*C-contiguous"):
            Adam([("w", w)])
        return
    w.grad[...] = 1.0
    Adam([("w", w)], lr=0.1).step()
    np.testing.assert_allclose(w.data, 1.0 - 0.1 / (1.0 + 1e-9))


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_a_step_its_flag_refuses_changes_nothing_and_one_it_takes_is_the_step(weight_decay):
    """Adam.step's ``finite`` (on a GPU the device's word on the step's loss and gradient norm): true,
    the step is the plain step bit for bit; false, the weights and moments stay bit for bit, NaN and
    infinite gradients included, and take_back_step puts the count back, so the next step is the one
    the refused step would have been."""
    rng = np.random.default_rng(0)
    shapes = [(3, 4), (SLICE + 3,), (5,)]  # packed and unpacked runs of the CPU kernel
    start = [rng.standard_normal(shape) for shape in shapes]
    plain, flagged = ([(f"p{i}", Parameter(s.copy())) for i, s in enumerate(start)] for _ in "ab")
    optimisers = [AdamW(named, lr=0.01, weight_decay=weight_decay) for named in (plain, flagged)]

    def gradients(*blowups):
        grads = [rng.standard_normal(shape) for shape in shapes]
        for grad, blowup in zip(grads, blowups):
            grad.flat[1] = blowup
        for named in (plain, flagged):
            for (_, parameter), grad in zip(named, grads):
                parameter.grad[...] = grad

    def state(named, optimiser):
        return [a.copy() for (_, p), m, v in zip(named, optimiser.m, optimiser.v) for a in (p.data, m, v)]

    for _ in range(2):
        gradients()
        optimisers[0].step(0.01)
        optimisers[1].step(0.01, finite=np.array(True))
        for a, b in zip(state(plain, optimisers[0]), state(flagged, optimisers[1])):
            np.testing.assert_array_equal(b, a)
    gradients(np.nan, np.inf)
    before = state(flagged, optimisers[1])
    with np.errstate(invalid="ignore"):  # the refused update's values, never kept, are NaN
        optimisers[1].step(0.01, finite=np.array(False))
    for a, b in zip(state(flagged, optimisers[1]), before):
        np.testing.assert_array_equal(a, b)
    assert optimisers[1].step_count == 3
    optimisers[1].take_back_step()
    assert optimisers[1].step_count == optimisers[0].step_count == 2
    gradients()
    optimisers[0].step(0.01)
    optimisers[1].step(0.01, finite=np.array(True))
    for a, b in zip(state(plain, optimisers[0]), state(flagged, optimisers[1])):
        np.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("threads", [0, -1, 2.5, True])
def test_bad_thread_count(threads):
    with pytest.raises(ValueError, match=f"threads must be a positive integer or None, got {threads!r}"):
        Adam([("p", Parameter(np.zeros(1)))], threads=threads)


def test_optimizer_state_round_trip():
    p = Parameter(np.array([1.0, 2.0]))
    opt = Adam([("p", p)], lr=0.1)
    p.grad[...] = [1.0, -1.0]
    opt.step()
    state = opt.state_dict()
    q = Parameter(p.data.copy())
    other = Adam([("p", q)], lr=0.5)
    other.load_state_dict(state)
    p.grad[...] = q.grad[...] = [0.3, 0.2]
    opt.step(), other.step()
    np.testing.assert_array_equal(p.data, q.data)
    with pytest.raises(ValueError, match="missing"):
        other.load_state_dict({"step": 1, "lr": 0.1, "betas": [0.9, 0.98], "eps": 1e-9})


@pytest.mark.parametrize("lr", [0, -1.0, float("nan")])
def test_bad_learning_rate(lr):
    with pytest.raises(ValueError, match="lr must be a positive number"):
        Adam([("p", Parameter(np.zeros(1)))], lr=lr)


def test_noam_schedule_closed_form():
    schedule = NoamSchedule(d_model=512, warmup=4000, factor=2.0)
    for step in (1, 100, 4000, 4001, 100000):
        assert schedule(step) == pytest.approx(2.0 * 512**-0.5 * min(step**-0.5, step * 4000**-1.5))
    assert max(range(1, 9000), key=schedule) == 4000


def test_constant_and_cosine_schedules():
    assert ConstantSchedule(0.3)(12345) == 0.3
    cosine = WarmupCosineSchedule(1.0, warmup=10, total=110, min_lr=0.1)
    assert cosine(5) == pytest.approx(0.5)
    assert cosine(10) == pytest.approx(1.0)
    assert cosine(60) == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert cosine(110) == pytest.approx(0.1) and cosine(500) == pytest.approx(0.1)


def test_clipping_caps_the_norm_and_keeps_direction():
    a, b = Parameter(np.zeros(2)), Parameter(np.zeros((1, 2)))
    a.grad[...] = [3.0, 0.0]
    b.grad[...] = [[0.0, 4.0]]
    before = np.concatenate([a.grad.ravel(), b.grad.ravel()])
    assert clip_grad_norm([a, b], 1.0) == pytest.approx(5.0)
    after = np.concatenate([a.grad.ravel(), b.grad.ravel()])
    assert global_grad_norm([a, b]) == pytest.approx(1.0)
    np.testing.assert_allclose(after, before / 5.0)
    assert clip_grad_norm([a, b], 10.0) == pytest.approx(1.0)  # under the cap: untouched
    np.testing.assert_allclose(np.concatenate([a.grad.ravel(), b.grad.ravel()]), after)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("max_norm", [None, 0.5, 1e6])
@pytest.mark.parametrize("blowup", [None, np.inf, np.nan])
def test_the_norm_on_the_device_clips_as_clip_grad_norm_does(dtype, max_norm, blowup):
    """The norm and the clipped gradients bit for bit those of clip_grad_norm (global_grad_norm where
    there is no max_norm), the norm left on the device as a 0-d array; a norm that is not finite
    clips nothing."""
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(shape).astype(dtype) for shape in [(3, 4), (5,), (2, 2, 2)]]
    if blowup is not None:
        grads[1][2] = blowup
    host, device = ([Parameter(np.zeros_like(g)) for g in grads] for _ in "ab")
    for parameters in (host, device):
        for parameter, g in zip(parameters, grads):
            parameter.grad[...] = g
    expected = global_grad_norm(host) if max_norm is None else clip_grad_norm(host, max_norm)
    norm = grad_norm_on_device(device, max_norm)
    assert np.shape(norm) == () and norm.dtype == np.float64  # on CuPy a 0-d array of the device
    np.testing.assert_array_equal(norm, expected)
    for a, b in zip(host, device):
        np.testing.assert_array_equal(b.grad, a.grad)
    if max_norm == 0.5 and blowup is None:
        assert global_grad_norm(device) == pytest.approx(0.5)  # it did clip
    with pytest.raises(ValueError, match="max_norm must be a positive number, got 0"):
        grad_norm_on_device(device, 0)
