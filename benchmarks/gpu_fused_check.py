"""gpu_check.py's sections for the fused CUDA kernels (numpy_transformer/kernels/cuda_fused/).

- ``fused_kernels``: each fused kernel against its twin on the device, float64 and float32, on
  shapes wider than a block and ragged ones; the kernels' switch is not needed (the modules are
  called directly). A dry run compares the twin with itself: it proves the script only.
- ``launch_counts``: for a few configurations, one training step with the fused kernels off
  (NUMPY_TRANSFORMER_FUSED=none) and on (all): CUPTI's kernels per step (through PyTorch's profiler,
  as gpu_profile.py counts them) beside the CuPy stand-in's count (benchmarks/gpu_launches.py), and
  the step's median time against PyTorch eager's on the same device.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import bench
import gpu_launches
import numpy as np

from numpy_transformer import backend
from numpy_transformer.functional import EmbeddingCache
from numpy_transformer.kernels import cuda_fused
from numpy_transformer.kernels.cuda_fused import (
    adam,
    attention_dropout,
    attention_softmax,
    bias_act,
    bias_relu,
    cross_entropy,
    dropout,
    dropout_add,
    dropout_add_norm,
    embedding_backward,
    layer_norm,
    layer_norm_add,
    layer_norm_add_dropout,
)

BOUNDS = {"float64": 1e-12, "float32": 1e-5}  # kernel vs twin: worst relative error of an array
LAUNCH_RUNS = [("tiny", "mha"), ("base", "mha"), ("base", "mla")]
STEPS = 10


def _relative_error(a: Any, b: Any) -> float:
    a, b = backend.to_numpy(a).astype(np.float64), backend.to_numpy(b).astype(np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-300))


def _layer_norm(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x, dout = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(2))
    gamma, beta = (xp.asarray(rng.standard_normal(width).astype(dtype)) for _ in range(2))
    out, cache = layer_norm.forward(x, gamma, beta)
    twin_out, twin_cache = layer_norm.forward_twin(x, gamma, beta)
    pairs = {"y": (out, twin_out), "rstd": (cache.rstd, twin_cache.rstd)}
    for name, kernel, twin in zip(
        ("dx", "dgamma", "dbeta"),
        layer_norm.backward(dout, cache),
        layer_norm.backward_twin(dout, twin_cache),
    ):
        pairs[name] = (kernel, twin)
    return pairs


def _layer_norm_add(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x, dout, dskip = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(3))
    gamma, beta = (xp.asarray(rng.standard_normal(width).astype(dtype)) for _ in range(2))
    _, cache = layer_norm.forward_twin(x, gamma, beta)
    return dict(
        zip(
            ("dx", "dgamma", "dbeta"),
            zip(
                layer_norm_add.backward_added(dout, cache, dskip),
                layer_norm_add.backward_added_twin(dout, cache, dskip),
            ),
        )
    )


def _layer_norm_add_dropout(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x, dout, dskip = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(3))
    gamma, beta = (xp.asarray(rng.standard_normal(width).astype(dtype)) for _ in range(2))
    _, cache = layer_norm.forward_twin(x, gamma, beta)
    _, dropout_cache = dropout.forward(x, 0.1, xp.random.default_rng(int(rng.integers(2**31))))
    return dict(
        zip(
            ("dx", "dropped", "dgamma", "dbeta"),
            zip(
                layer_norm_add_dropout.backward_dropped(dout, cache, dskip, dropout_cache),
                layer_norm_add_dropout.backward_dropped_twin(dout, cache, dskip, dropout_cache),
            ),
        )
    )


def _dropout(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x = xp.asarray(rng.standard_normal((rows, width)).astype(dtype))
    out, cache = dropout.forward(x, 0.1, xp.random.default_rng(int(rng.integers(2**31))))
    return {
        "y": (out, dropout.apply_twin(x, cache)),
        "dx": (dropout.backward(x, cache), dropout.apply_twin(x, cache)),
    }


def _dropout_add(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x, skip = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(2))
    out, cache = dropout_add.forward(x, skip, 0.1, xp.random.default_rng(int(rng.integers(2**31))))
    return {"y": (out, dropout_add.added_twin(x, skip, cache))}


def _dropout_add_norm(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    x, skip = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(2))
    gamma, beta = (xp.asarray(rng.standard_normal(width).astype(dtype)) for _ in range(2))
    generator = xp.random.default_rng(int(rng.integers(2**31)))
    total, out, cache, norm_cache = dropout_add_norm.forward(x, skip, 0.1, generator, gamma, beta)
    twin_total, twin_out, twin_cache = dropout_add_norm.added_norm_twin(x, skip, cache, gamma, beta, 1e-5)
    return {
        "sum": (total, twin_total),
        "y": (out, twin_out),
        "xhat": (norm_cache.xhat, twin_cache.xhat),
        "rstd": (norm_cache.rstd, twin_cache.rstd),
    }


def _bias_relu(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    h, dout = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(2))
    bias = xp.asarray(rng.standard_normal(width).astype(dtype))
    (y, cache), (twin_y, twin_cache) = bias_relu.forward(h, bias), bias_relu.forward_twin(h, bias)
    (dh, dbias), (twin_dh, twin_dbias) = (
        bias_relu.backward(dout, cache),
        bias_relu.backward_twin(dout, twin_cache),
    )
    return {"y": (y, twin_y), "dh": (dh, twin_dh), "dbias": (dbias, twin_dbias)}


def _bias_act(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    h, dout = (xp.asarray(rng.standard_normal((rows, width)).astype(dtype)) for _ in range(2))
    bias = xp.asarray(rng.standard_normal(width).astype(dtype))
    pairs = {}
    for activation in bias_act.ACTIVATIONS:
        (y, cache), (twin_y, twin_cache) = (
            bias_act.forward(h, bias, activation),
            bias_act.forward_twin(h, bias, activation),
        )
        (dh, dbias), (twin_dh, twin_dbias) = (
            bias_act.backward(dout, cache, activation),
            bias_act.backward_twin(dout, twin_cache, activation),
        )
        pairs |= {f"{activation} y": (y, twin_y), f"{activation} dh": (dh, twin_dh)}
        pairs[f"{activation} dbias"] = (dbias, twin_dbias)
    return pairs


def _attention_dropout(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    scores, ddropped = (xp.asarray(rng.standard_normal((2, 2, rows, width)).astype(dtype)) for _ in range(2))
    mask = xp.asarray(rng.random((2, 1, 1, width)) > 0.3)
    generator = xp.random.default_rng(int(rng.integers(2**31)))
    probs, dropped, cache = attention_dropout.forward(scores, mask, 0.125, 0.1, generator)
    twin_probs, twin_dropped = attention_dropout.forward_dropped_twin(scores, mask, 0.125, cache)
    return {
        "probs": (probs, twin_probs),
        "dropped": (dropped, twin_dropped),
        "dscores": (
            attention_dropout.backward(ddropped, probs, mask, 0.125, cache),
            attention_dropout.backward_dropped_twin(ddropped, twin_probs, mask, 0.125, cache),
        ),
    }


def _attention_softmax(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    scores, dprobs = (xp.asarray(rng.standard_normal((2, 2, rows, width)).astype(dtype)) for _ in range(2))
    mask = xp.asarray(rng.random((2, 1, 1, width)) > 0.3)
    probs, twin_probs = (
        attention_softmax.forward(scores, mask, 0.125),
        attention_softmax.forward_twin(scores, mask, 0.125),
    )
    return {
        "probs": (probs, twin_probs),
        "dscores": (
            attention_softmax.backward(dprobs, probs, mask, 0.125),
            attention_softmax.backward_twin(dprobs, twin_probs, mask, 0.125),
        ),
    }


def _embedding_backward(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    vocab = max(1, rows // 4)  # every id repeated about four times
    ids = xp.asarray(rng.integers(0, vocab, (1, rows)))
    dout = xp.asarray(rng.standard_normal((1, rows, width)).astype(dtype))
    cache = EmbeddingCache(ids, (vocab, width), float(np.sqrt(width)))
    twin = xp.zeros((vocab, width), dtype=dtype)
    embedding_backward.write_rows_twin(dout, cache, twin)
    return {"dtable": (embedding_backward.backward(dout, cache), twin)}


def _cross_entropy(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    logits = xp.asarray((rng.standard_normal((rows, width)) * 3).astype(dtype))
    labelled = rng.random(rows) < 0.75
    labelled[0] = True
    targets, mask = xp.asarray(np.where(labelled, rng.integers(0, width, rows), -100)), xp.asarray(labelled)
    loss, dlogits = cross_entropy.forward_backward(logits, targets, mask, 0.1, 0.7)
    twin_dlogits, row_loss = cross_entropy.rows_twin(logits, targets, mask, 0.1, 0.7)
    return {"loss": (loss, cross_entropy.mean_twin(row_loss, mask)), "dlogits": (dlogits, twin_dlogits)}


def _adam(xp: Any, dtype: str, rng: np.random.Generator, rows: int, width: int) -> dict:
    size = rows * width
    data, grad, m = (xp.asarray(rng.standard_normal(size).astype(dtype)) for _ in range(3))
    v = xp.asarray(rng.random(size).astype(dtype))
    decay = xp.asarray((np.arange(size) % 3 == 0).astype(dtype))
    kernel, twin = [data.copy(), m.copy(), v.copy()], [data.copy(), m.copy(), v.copy()]
    taken, refused = xp.ones((), dtype=xp.bool_), xp.zeros((), dtype=xp.bool_)
    for update, (d, first, second) in ((adam.update, kernel), (adam.update_twin, twin)):
        update(d, grad, first, second, decay, taken, 1e-3, (0.9, 0.98), 1e-9, 7, 0.01)
    # a refused step (its flag false, its gradient NaN) writes nothing: the kernel's arrays as they were
    held = [array.copy() for array in kernel]
    adam.update(*kernel[:1], grad * xp.nan, *kernel[1:], decay, refused, 1e-3, (0.9, 0.98), 1e-9, 8, 0.01)
    names = ("data", "m", "v")
    return {name: (a, b) for name, a, b in zip(names, kernel, twin)} | {
        f"{name} refused": (a, b) for name, a, b in zip(names, kernel, held)
    }


KERNEL_CHECKS: dict[str, Callable[..., dict]] = {
    "layer_norm": _layer_norm,
    "layer_norm_add": _layer_norm_add,
    "layer_norm_add_dropout": _layer_norm_add_dropout,
    "dropout": _dropout,
    "dropout_add": _dropout_add,
    "dropout_add_norm": _dropout_add_norm,
    "bias_relu": _bias_relu,
    "bias_act": _bias_act,
    "attention_softmax": _attention_softmax,
    "attention_dropout": _attention_dropout,
    "embedding_backward": _embedding_backward,
    "cross_entropy": _cross_entropy,
    "adam": _adam,
}
SHAPES = [(2048, 512), (7, 1000), (1, 3)]  # base's rows, a row wider than a block, a tiny ragged one


def section_fused_kernels(device: Any, args: Any) -> dict:
    rows: dict[str, Any] = {}
    ok = set(KERNEL_CHECKS) == set(cuda_fused.KERNELS)  # every fused kernel checked
    for name, check in KERNEL_CHECKS.items():
        for dtype, bound in BOUNDS.items():
            for shape in SHAPES:
                pairs = check(device.xp, dtype, np.random.default_rng(0), *shape)
                errors = {what: _relative_error(kernel, twin) for what, (kernel, twin) in pairs.items()}
                worst = max(errors.values())
                ok = ok and worst <= bound
                rows[f"{name} {dtype} {shape[0]}x{shape[1]}"] = {"worst": worst, "bound": bound, **errors}
    return {"ok": ok, "kernel_launched": cuda_fused.on_a_gpu(), "rows": rows}


@contextlib.contextmanager
def _fused(value: str) -> Iterator[None]:
    previous = os.environ.get(cuda_fused.ENV_VAR)
    os.environ[cuda_fused.ENV_VAR] = value
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(cuda_fused.ENV_VAR, None)
        else:
            os.environ[cuda_fused.ENV_VAR] = previous


def _median_ms(step: Callable[[], None], steps: int) -> float:
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def _cupti_kernels(step: Callable[[], None], steps: int) -> float | None:
    """Kernels (and memsets, copies) per step as CUPTI records them; None without a CUDA PyTorch."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        return None
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
    count = sum(
        entry.count
        for entry in prof.key_averages()
        if (getattr(entry, "self_device_time_total", None) or getattr(entry, "self_cuda_time_total", 0.0)) > 0
    )
    return count / steps


def section_launch_counts(device: Any, args: Any, ours: Callable[..., Any], torch_where: str | None) -> dict:
    """``ours(device, config, batch, length)``: gpu_check's runner of our step on the device."""
    rows = []
    warmup, steps = (1, 1) if device.dry_run else (3, STEPS)
    for name, attention in LAUNCH_RUNS[:1] if device.dry_run else LAUNCH_RUNS:
        config = bench.model_config(name, attention)
        batch, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
        row: dict[str, Any] = {"config": f"{name}/{attention}"}
        if torch_where == "cuda":
            theirs = bench.TorchRunner(config, batch, length, device="cuda")
            for _ in range(3):
                theirs.train_step()
            row["pytorch_ms"] = _median_ms(theirs.train_step, STEPS)
            del theirs
        for fused in ("none", "all"):
            with _fused(fused):
                counted = gpu_launches.count_launches(name, attention, small_shapes=True)["training"]
                backend.set_backend(device.xp)
                runner = ours(device, config, batch, length)
                for _ in range(warmup):
                    runner.train_step()
                row[fused] = {
                    "standin_launches": counted["launches"],
                    "standin_syncs": counted["syncs"],
                    "cupti_kernels": None if device.dry_run else _cupti_kernels(runner.train_step, 3),
                    "step_ms": _median_ms(runner.train_step, steps),
                }
                if "pytorch_ms" in row:
                    row[fused]["ratio"] = row[fused]["step_ms"] / row["pytorch_ms"]
                del runner
                device.free_pool()
        rows.append(row)
        print(f"  launch counts {row['config']}: {row}", flush=True)
    return {"ok": True, "rows": rows}
