"""Time the gradient checker's two modes on a correct elementwise function (tanh) of 10^3 to 10^7 entries.

    python benchmarks/gradcheck_bench.py                 # the table recorded in benchmarks/README.md
    python benchmarks/gradcheck_bench.py --sizes 1000 1000000 --exhaustive-max 10000

The fast mode (random projections, two forward calls per direction, two directions) at every size;
the exhaustive mode (two forward calls per entry) up to --exhaustive-max entries, where it ends in
minutes at most. Each time includes the contract checks (three backward calls, the precision probe).
Then one wrong entry planted among the largest size: the time the fast mode takes to name it.
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from numpy_transformer.gradient_checking import assert_gradients
from numpy_transformer.gradient_checking.report import GradcheckError


def tanh_forward(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.tanh(x)
    return y, y


def tanh_backward(dout: np.ndarray, y: np.ndarray) -> np.ndarray:
    return dout * (1 - y**2)


def timed(mode: str, x: np.ndarray, backward=tanh_backward) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        assert_gradients(tanh_forward, backward, {"x": x}, mode=mode)
        verdict = "passed"
    except GradcheckError as error:
        verdict = "failed: " + str(error).splitlines()[1].split(" (analytic")[0]
    return time.perf_counter() - start, verdict


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**3, 10**4, 10**5, 10**6, 10**7])
    parser.add_argument("--exhaustive-max", type=int, default=10**4)
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, NumPy {np.__version__}")
    print("| entries | fast mode (s) | exhaustive mode (s) |")
    print("|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for size in args.sizes:
        x = rng.standard_normal(size)
        fast, verdict = timed("fast", x)
        assert verdict == "passed", verdict
        exhaustive = f"{timed('exhaustive', x)[0]:.2f}" if size <= args.exhaustive_max else "not run"
        print(f"| {size:.0e} | {fast:.2f} | {exhaustive} |", flush=True)
    size = max(args.sizes)
    x = rng.standard_normal(size)
    planted = size // 3

    def one_wrong(dout: np.ndarray, y: np.ndarray) -> np.ndarray:
        dx = tanh_backward(dout, y)
        dx[planted] *= 1.01
        return dx

    seconds, verdict = timed("fast", x, one_wrong)
    print(f"\none entry wrong by 1% among {size:.0e} (at {planted}): fast mode {seconds:.2f} s, {verdict}")


if __name__ == "__main__":
    main()
