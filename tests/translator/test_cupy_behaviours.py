"""Where CuPy differs from NumPy, as its documentation says, and the package living with it.

Each behaviour is checked on the stand-in (tests/support/cupy_standin.py) and, where CuPy and a
GPU are present, on real CuPy too, so the stand-in is held to what CuPy does. Then the package:
the GPU's embedding gradient is the same at every call although atomic additions are not, a long
decode does not grow the memory pool, and the random streams are the backend's own.
"""

import numpy as np
import pytest
from cupy_standin import make_module

from numpy_transformer import backend, build_transformer, make_src_mask
from numpy_transformer.functional import embedding_forward
from numpy_transformer.kernels import cuda
from numpy_transformer.translator.decoding import greedy_decode


def _real_cupy():
    try:
        import cupy

        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # not installed, or no usable GPU
        return None


REAL = _real_cupy()
MODULES = [
    "stand-in",
    pytest.param("cupy", marks=pytest.mark.skipif(REAL is None, reason="no CuPy with a GPU here")),
]


@pytest.fixture(params=MODULES)
def xp(request):
    return make_module() if request.param == "stand-in" else REAL


def test_out_of_range_integer_indices_wrap_around(xp):
    # CuPy's documentation: "NumPy handles them by raising an error, but CuPy wraps around them"
    x = xp.arange(3)
    assert x[xp.asarray([1, 3])].tolist() == [1, 0]
    assert x[xp.asarray([-4])].tolist() == [2]
    assert xp.take(x, xp.asarray([4, 5])).tolist() == [1, 2]
    table = xp.arange(6).reshape(3, 2)
    assert table[xp.asarray([3])].tolist() == [[0, 1]]  # an id one past the vocabulary reads row 0
    x[xp.asarray([1, 3])] = 10
    assert x.tolist() == [10, 10, 2]
    with pytest.raises(IndexError):
        np.arange(3)[np.asarray([1, 3])]


def test_a_repeated_location_stores_one_of_its_values(xp):
    # "the value that is actually stored is undefined": one of them, not necessarily the last
    stored = set()
    for _ in range(20):
        x = xp.zeros(2)
        x[xp.asarray([0] * 16 + [1])] = xp.arange(17, dtype=xp.float64)
        value, last = x.tolist()
        assert value in range(16) and last == 16
        stored.add(value)
    if xp is not REAL:  # the stand-in draws the winner at random, so code cannot lean on one
        assert len(stored) > 1


def test_atomic_additions_sum_in_an_order_of_their_own(xp):
    values = xp.asarray(np.random.default_rng(0).standard_normal(4096).astype(np.float32) * 1e3)
    sums = set()
    for _ in range(10):
        total = xp.zeros(1, dtype=xp.float32)
        xp.add.at(total, xp.zeros(4096, dtype=xp.int64), values)
        sums.add(total.tolist()[0])
    exact = float(np.sum(backend.to_numpy(values).astype(np.float64)))
    assert all(abs(s - exact) <= 4096 * np.finfo(np.float32).eps * float(abs(values).sum()) for s in sums)
    if xp is not REAL:  # the last bits change from call to call, as atomics' order does
        assert len(sums) > 1


def test_partition_sorts_fully(xp):
    a = xp.asarray([5.0, 1.0, 4.0, 1.0, 3.0, 2.0])
    assert xp.partition(a, 2).tolist() == [1.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    order = xp.argpartition(a, 2).tolist()
    assert [a.tolist()[i] for i in order] == [1.0, 1.0, 2.0, 3.0, 4.0, 5.0] and sorted(order[:2]) == [1, 3]


def test_sorting_is_stable_and_refuses_another_kind(xp):
    a = xp.asarray([2.0, 1.0, 2.0, 1.0, 2.0])
    assert xp.argsort(a).tolist() == [1, 3, 0, 2, 4]  # equal values keep their order
    assert a.argsort().tolist() == [1, 3, 0, 2, 4]
    with pytest.raises(ValueError):
        xp.argsort(a, kind="quicksort")


def test_an_array_from_host_data_is_copied_even_with_copy_false(xp):
    # measured on CuPy 14.2 with a GPU: no error, where NumPy 2 raises for a copy it cannot avoid
    host = np.ones(3)
    device = xp.array(host, copy=False)
    host[0] = 5.0
    assert device.tolist() == [1.0, 1.0, 1.0]


def test_python_numbers_keep_an_arrays_float32(xp):
    # CuPy 14 promotes as NumPy 2 does (NEP 50): a Python number takes the array's type
    x = xp.ones(3, dtype=xp.float32)
    assert (x / 3.0).dtype == xp.float32 and (x * 2).dtype == xp.float32 and (1.5 - x).dtype == xp.float32
    assert (x * xp.ones(3, dtype=xp.float64)).dtype == xp.float64


def test_max_and_min_take_no_initial(xp):
    # seen on CuPy 14.2 with a GPU: the gradient checker's a.max(initial=0.0) was a TypeError there
    a = xp.asarray([1.0, -2.0])
    assert float(a.max()) == 1.0 and float(xp.min(a)) == -2.0
    for call in (lambda: a.max(initial=0.0), lambda: a.min(initial=0.0), lambda: xp.max(a, initial=0.0)):
        with pytest.raises(TypeError, match="initial"):
            call()


def test_the_random_streams_are_not_numpys(xp):
    drawn = xp.random.default_rng(0).random(4, dtype=xp.float64)
    assert backend.to_numpy(drawn).tolist() != np.random.default_rng(0).random(4).tolist()


def test_the_memory_pool_holds_freed_blocks_until_asked(xp):
    pool = xp.get_default_memory_pool()
    pool.free_all_blocks()
    before = pool.used_bytes()
    block = xp.ones(1 << 20, dtype=xp.float32)
    assert pool.used_bytes() >= before + block.nbytes
    del block
    assert pool.used_bytes() < before + (1 << 22) and pool.total_bytes() >= before + (1 << 22)
    pool.free_all_blocks()
    assert pool.total_bytes() < before + (1 << 22)


# -- the package on the stand-in ----------------------------------------------------------------------


@pytest.fixture
def gpu():
    previous = backend.get_array_module()
    module = backend.set_backend(make_module())
    yield module
    backend.set_backend(previous)


def test_the_gpu_embedding_gradient_is_the_same_at_every_call(gpu):
    """The textbook's add.at sums repeated ids in the atomics' changing order; the GPU kernel sums
    each id's rows as a segment of the sorted ids, so its gradient is bit-identical at every call."""
    rng = np.random.default_rng(0)
    ids = gpu.asarray(rng.integers(0, 3, (8, 64)))  # 3 ids, each repeated about 170 times
    table = gpu.asarray(rng.standard_normal((3, 16)).astype(np.float32))
    dout = gpu.asarray(rng.standard_normal((8, 64, 16)).astype(np.float32) * 100)
    _, cache = embedding_forward(ids, table)
    kernel = {cuda.embedding_backward(dout, cache).get().tobytes() for _ in range(5)}
    atomics = set()
    for _ in range(5):
        dtable = gpu.zeros((3, 16), dtype=gpu.float32)
        gpu.add.at(dtable, ids.reshape(-1), dout.reshape(-1, 16) * 4.0)
        atomics.add(dtable.get().tobytes())
    assert len(kernel) == 1 and len(atomics) > 1


def test_a_long_decode_does_not_grow_the_memory_pool(gpu):
    model = build_transformer(11, 13, 8, 80, d_model=16, N=1, h=2, d_ff=32).eval()
    model.projection_layer.proj.bias.data[2] = -1e4  # never the end: every call decodes all its tokens
    src = gpu.asarray([[5, 6, 7, 8]])
    mask = make_src_mask(src, 0)
    pool = gpu.get_default_memory_pool()
    held = []
    for length in (16, 64, 64):
        pool.free_all_blocks()
        base = pool.used_bytes()
        assert greedy_decode(model, src, mask, length, 1, 2).shape == (1, length)
        held.append(pool.total_bytes() - base)
    assert held[2] <= held[1]  # a second decode reuses what the first freed
    assert held[1] <= 4 * held[0] + (1 << 16)  # four times the tokens: at most four times the memory
