"""Where the training step's time goes on a GPU: the host's time per function, and the device's.

    python benchmarks/gpu_profile.py [tiny|small|corpus|seed|base ...] [--attention mha|mla] [--steps 10]

A CuPy step is bound by whichever is slower: the host launching kernels (Python and CuPy's own
work per operation, asynchronous) or the device running them. For each configuration: the step's
time with a synchronisation at its end; the host's time alone (the same steps with none until the
last); the device's time alone (CUDA events around a step whose launches were queued behind a
long product, so the host never makes it wait); and, under cProfile, the functions of
numpy_transformer with the most self time (each one's launches: CuPy's compiled calls count as
their caller's time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import bench  # noqa: E402
import cupy  # noqa: E402

import numpy_transformer as nt  # noqa: E402
from numpy_transformer import backend  # noqa: E402
from numpy_transformer.optim import Adam  # noqa: E402


def device_work(step, steps: int) -> tuple[float, float]:
    """Kernels launched and the device's busy milliseconds per step, as CUPTI sees them (through
    PyTorch's profiler, which records every kernel of the process, CuPy's too)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        cupy.cuda.Device().synchronize()
    count = busy = 0.0
    for entry in prof.key_averages():
        self_us = getattr(entry, "self_device_time_total", None)
        if self_us is None:
            self_us = getattr(entry, "self_cuda_time_total", 0.0)
        if self_us > 0:
            count += entry.count
            busy += self_us
    return count / steps, busy / 1e3 / steps


def torch_device_work(config: dict, batch: int, length: int, steps: int) -> tuple[float, float, float]:
    import torch

    runner = bench.TorchRunner(config, batch, length, device="cuda")
    for _ in range(3):
        runner.train_step()
    start = time.perf_counter()
    for _ in range(steps):
        runner.train_step()
    step_ms = (time.perf_counter() - start) / steps * 1e3
    kernels, busy = device_work(runner.train_step, steps)
    del runner
    torch.cuda.empty_cache()
    return kernels, busy, step_ms


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("configs", nargs="*", default=["tiny", "base"])
    parser.add_argument("--attention", default="mha")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    backend.set_backend("cupy")
    for name in args.configs:
        profile_config(name, args.attention, args.steps, args.top)
        cupy.get_default_memory_pool().free_all_blocks()


def profile_config(name: str, attention: str, steps: int, top: int) -> None:
    config = bench.model_config(name, attention)
    batch, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
    model = nt.build_transformer(**config).train()
    optimizer = Adam(model, lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    src, tgt, labels = (cupy.asarray(a) for a in bench.make_data(config, batch, length))
    src_mask, tgt_mask = nt.make_src_mask(src, bench.PAD), nt.make_tgt_mask(tgt, bench.PAD)

    def step() -> None:
        optimizer.zero_grad()
        nt.loss_and_backward(model, src, tgt, src_mask, tgt_mask, labels, bench.PAD, 0.1)
        optimizer.step()

    for _ in range(3):
        step()
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
        cupy.cuda.Device().synchronize()
    synchronised = (time.perf_counter() - start) / steps
    kernels, device_ms = device_work(step, steps)
    torch_kernels, torch_device_ms, torch_step_ms = torch_device_work(config, batch, length, steps)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(steps):
        step()
    cupy.cuda.Device().synchronize()
    profile.disable()
    print(
        f"\n== {name}/{attention}: ours {synchronised * 1e3:.2f} ms a step, {kernels:.0f} kernels "
        f"busy {device_ms:.2f} ms; PyTorch {torch_step_ms:.2f} ms a step, {torch_kernels:.0f} kernels "
        f"busy {torch_device_ms:.2f} ms"
    )
    stats = pstats.Stats(profile)
    rows = sorted(
        (
            (tottime / steps, calls / steps, f"{Path(file).name}:{function}")
            for (file, _line, function), (_cc, calls, tottime, _ct, _callers) in stats.stats.items()  # type: ignore[attr-defined]
        ),
        reverse=True,
    )
    print(f"{'self ms/step':>13} {'calls/step':>11}  function")
    for tottime, calls, where in rows[:top]:
        print(f"{tottime * 1e3:13.3f} {calls:11.1f}  {where}")
    total_calls = sum(calls for _t, calls, _w in rows)
    print(f"python-level calls per step: {total_calls:.0f}")


if __name__ == "__main__":
    main()
