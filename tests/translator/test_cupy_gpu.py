"""Real CuPy on a real GPU: the pipeline, and NumPy vs CuPy numbers. Skipped, with the reason, elsewhere.

Tolerances, from first principles: the two backends compute the same formulas in different
summation orders (cuBLAS's blocked products and tree reductions vs OpenBLAS's). Each sum of n
terms then differs by about sqrt(n) unit roundoffs relative to the sum of the terms' magnitudes,
and the tiny model's longest sums are its products over d_ff = 64 and the vocabulary, a handful of
layers deep. In float64 (roundoff 1.1e-16) that bounds the relative difference of logits and
gradients far below 1e-10; in float32 (roundoff 6e-8) about 1e-5 per layer, so 1e-4 for the logits
and 1e-3 for the gradients (a backward is twice as deep as a forward), each as a relative error of
the whole array.
"""

import pytest
from conftest import model_batch, relative_error

from numpy_transformer import backend, build_transformer, make_src_mask, make_tgt_mask
from numpy_transformer.kernels import ops, using_kernels
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.decoding import beam_search, greedy_decode, sample_decode
from numpy_transformer.translator.training import Trainer


def _cupy_or_reason():
    try:
        import cupy
    except ImportError:
        return None, "CuPy is not installed (pip install 'numpy_transformer[gpu-cuda12]' or [gpu-cuda13])"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None, "CuPy is installed but no CUDA GPU is visible"
    except Exception as error:
        return None, f"CuPy is installed but no CUDA GPU is usable: {error}"
    return cupy, ""


cupy, REASON = _cupy_or_reason()
pytestmark = pytest.mark.skipif(cupy is None, reason=REASON)
TOLERANCES = {"float64": (1e-10, 1e-10), "float32": (1e-4, 1e-3)}  # (logits, gradients)


@pytest.fixture
def gpu():
    backend.set_backend("cupy")
    yield cupy
    backend.set_backend("numpy")


def _logits_and_grads(seed_state, kind, dtype):
    model = build_transformer(
        11, 13, 8, 8, d_model=32, N=2, h=4, d_ff=64, attention=kind, dropout=0.0, dtype=dtype
    )
    model.load_state_dict(seed_state)
    xp = backend.get_array_module()
    src, tgt, labels = (xp.asarray(a) for a in model_batch(0))
    logits = model.forward(src, tgt, make_src_mask(src, 0), make_tgt_mask(tgt, 0))
    _loss, cache = ops.cross_entropy_forward(logits, labels, 0, 0.1)
    model.backward(ops.cross_entropy_backward(1.0, cache))
    return backend.to_numpy(logits), {name: backend.to_numpy(p.grad) for name, p in model.named_parameters()}


@pytest.mark.parametrize("kind", ["mha", "mla"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_numpy_and_cupy_agree(gpu, kind, dtype):
    backend.set_backend("numpy")
    state = build_transformer(
        11, 13, 8, 8, d_model=32, N=2, h=4, d_ff=64, attention=kind, dtype=dtype
    ).state_dict()
    logits_cpu, grads_cpu = _logits_and_grads(state, kind, dtype)
    backend.set_backend("cupy")
    logits_gpu, grads_gpu = _logits_and_grads(state, kind, dtype)
    logits_tolerance, grads_tolerance = TOLERANCES[dtype]
    assert relative_error(logits_gpu, logits_cpu) <= logits_tolerance
    for name in grads_cpu:
        assert relative_error(grads_gpu[name], grads_cpu[name]) <= grads_tolerance, name


def test_training_resumes_bit_identically_on_the_gpu(gpu, tmp_path):
    # on the kernels: their embedding gradient sums by sorted segments, the textbook's add.at in the
    # atomics' changing order
    with using_kernels("fast"):
        _resumes_bit_identically(tmp_path)


def _resumes_bit_identically(tmp_path):
    config = TrainConfig(task="copy", steps=6, batch_size=16, eval_every=3, eval_size=4)
    model_args = {"d_model": 32, "N": 1, "h": 4, "d_ff": 64, "dropout": 0.1}
    straight = Trainer.create(config, model_args)
    for _ in range(4):
        straight.train_step()
    interrupted = Trainer.create(config, model_args)
    for _ in range(2):
        interrupted.train_step()
    resumed = Trainer.resume(interrupted.save(tmp_path))
    for _ in range(2):
        resumed.train_step()
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert bool((a.data == b.data).all()), name


@pytest.mark.parametrize("kind, absorbed", [("mha", False), ("mla", False), ("mla", True)])
def test_every_decoding_strategy_on_the_gpu(gpu, kind, absorbed):
    model = build_transformer(11, 13, 8, 8, d_model=32, N=2, h=4, d_ff=64, attention=kind).eval()
    src = cupy.asarray([[5, 6, 7, 8], [6, 7, 8, 0]])
    mask = make_src_mask(src, 0)
    greedy = greedy_decode(model, src, mask, 8, 1, 2, absorbed=absorbed)
    assert bool((beam_search(model, src, mask, 8, 1, 2, absorbed=absorbed, beam_width=1) == greedy).all())
    for options in ({"top_k": 3, "seed": 0}, {"top_p": 0.9, "seed": 0}):
        assert sample_decode(model, src, mask, 8, 1, 2, absorbed=absorbed, **options).shape[0] == 2
