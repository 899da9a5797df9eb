"""Where one training step's time goes: self time of every forward/backward pair the model calls.

    python benchmarks/profile_step.py [tiny|small|corpus|seed|base] [mha|mla] [fast|reference]

Every ``*_forward`` / ``*_backward`` function of ``numpy_transformer.kernels.ops`` (the CPU
kernels, or the textbook with ``reference``) is wrapped with a timer that subtracts the time of
the pairs it calls, so each row is that layer's own work. What
is left of the step is the optimiser and the modules' bookkeeping (gradient accumulation,
zeroing). Medians over 5 steps after 2 warm-up steps. The batch runs as one shard (threads=1):
the timers assume one thread.

With PyTorch installed, its step on the same model and batch is timed in turn with ours (each
turn: a pause, an untimed step, the timed one, as bench.py does), and the linear layers' time is
given as a fraction of it: what the step would cost against PyTorch's if nothing but those
products took any time.
"""

from __future__ import annotations

import functools
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import CONFIGS, SETTLE_S, NumpyRunner, TorchRunner, model_config

from numpy_transformer.backend import get_array_module
from numpy_transformer.kernels import ops, set_kernels

self_time: dict[str, float] = defaultdict(float)
_stack: list[float] = []


def timed(name: str, function):
    @functools.wraps(function)  # keeps its name and module, by which the kernels table finds it
    def wrapper(*args, **kwargs):
        _stack.append(0.0)
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            elapsed = time.perf_counter() - start
            children = _stack.pop()
            self_time[name] += elapsed - children
            if _stack:
                _stack[-1] += elapsed

    return wrapper


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "small"
    attention = sys.argv[2] if len(sys.argv) > 2 else "mha"
    set_kernels(sys.argv[3] if len(sys.argv) > 3 else "fast")
    get_array_module()  # selects the backend, which empties ops: fill it after
    ops.linear_forward  # noqa: B018  (fills ops with the selected functions)
    for attribute, function in list(vars(ops).items()):
        if attribute.endswith(("_forward", "_backward")):
            wrapped = timed(attribute, function)
            vars(ops)[attribute] = wrapped  # calls from the modules
            setattr(
                sys.modules[function.__module__], attribute, wrapped
            )  # calls inside the kernels and textbook
    runner = NumpyRunner(model_config(name, attention), CONFIGS[name][6], CONFIGS[name][7], threads=1)
    optimizer_step = runner.optimizer.step
    runner.optimizer.step = timed("adam_step", optimizer_step)
    torch_runner = torch_step(name, attention)
    for _ in range(2):
        runner.train_step()
    steps, totals, torch_totals = [], [], []
    for _ in range(5):
        time.sleep(SETTLE_S)
        runner.train_step()
        self_time.clear()
        start = time.perf_counter()
        runner.train_step()
        totals.append(time.perf_counter() - start)
        steps.append(dict(self_time))
        if torch_runner is not None:
            time.sleep(SETTLE_S)
            torch_runner.train_step()
            start = time.perf_counter()
            torch_runner.train_step()
            torch_totals.append(time.perf_counter() - start)
    total = statistics.median(totals)
    rows = {key: statistics.median(step.get(key, 0.0) for step in steps) for key in steps[0]}
    print(f"{name}/{attention}: median step {total * 1e3:.1f} ms")
    print(f"{'layer':<40}{'forward ms':>12}{'backward ms':>13}{'share':>8}")
    layers = sorted(
        {k.rsplit("_", 1)[0] for k in rows},
        key=lambda k: (
            -(rows.get(k + "_forward", 0) + rows.get(k + "_backward", 0) + rows.get(k + "_step", 0))
        ),
    )
    for layer in layers:
        forward, backward = (
            rows.get(layer + "_forward", 0.0),
            rows.get(layer + "_backward", rows.get(layer + "_step", 0.0)),
        )
        print(f"{layer:<40}{forward * 1e3:>12.2f}{backward * 1e3:>13.2f}{(forward + backward) / total:>8.1%}")
    rest = total - sum(rows.values())
    print(f"{'modules (grad accumulation, zero_grad)':<40}{'':>12}{rest * 1e3:>13.2f}{rest / total:>8.1%}")
    if torch_totals:
        theirs = statistics.median(torch_totals)
        linear = rows.get("linear_forward", 0.0) + rows.get("linear_backward", 0.0)
        print(
            f"PyTorch's step, timed in turn: {theirs * 1e3:.1f} ms; this step (one shard, timers on) "
            f"{total / theirs:.2f} of it; the linear layers alone {linear / theirs:.2f} of it"
        )


def torch_step(name: str, attention: str) -> TorchRunner | None:
    """PyTorch's runner of the same model and batch, or None without PyTorch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    runner = TorchRunner(model_config(name, attention), CONFIGS[name][6], CONFIGS[name][7])
    for _ in range(2):
        runner.train_step()
    return runner


if __name__ == "__main__":
    main()
