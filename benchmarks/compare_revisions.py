"""Training-step time of two revisions of numpy_transformer, and PyTorch, side by side in one run.

    python benchmarks/compare_revisions.py --base ab94151            # tiny, small, seed, base
    python benchmarks/compare_revisions.py --base HEAD~3 --configs tiny small --repeats 20
    python benchmarks/compare_revisions.py --settings      # what tune_cpu's two settings buy

The base revision is checked out into a temporary git worktree. Each contender runs in its own
process, built by that revision's own ``benchmarks/bench.py`` (its NumpyRunner, or the working
tree's TorchRunner), and the processes take turns: a pause, an untimed step, then timed steps,
round after round, so all of them see the same machine. Contenders: the base revision, the
working tree on its fast kernels, the working tree on the textbook (``set_kernels("reference")``,
where the working tree has it) and PyTorch. Reports median step times, each one's ratio to
PyTorch, and working tree / base.

With ``--settings`` the contenders are the working tree as the command runs it (tune_cpu's
settings), without the allocator setting (NUMPY_TRANSFORMER_MALLOC=system), and with OpenBLAS's
idle threads spinning its default 2^28 cycles instead of 2^24 (OPENBLAS_THREAD_TIMEOUT=28); the
ratios are to the first.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TREE = Path(__file__).resolve().parents[1]
SETTLE_S = 0.25  # the pause before each turn, as in bench.py
CONFIGS = [
    ("tiny", "mha"),
    ("small", "mha"),
    ("small", "mla"),
    ("corpus", "mha"),
    ("seed", "mha"),
    ("base", "mha"),
    ("base", "mla"),
]


@functools.cache
def tree_configs() -> dict[str, tuple]:
    """The working tree's bench.CONFIGS, read by a process of its own (this one imports no numpy_transformer)."""
    command = [sys.executable, "-c", "import json, bench; print(json.dumps(bench.CONFIGS))"]
    env = {**os.environ, "PYTHONPATH": str(TREE / "benchmarks")}
    said = subprocess.run(command, capture_output=True, text=True, check=True, env=env, cwd=TREE)
    return {name: tuple(sizes) for name, sizes in json.loads(said.stdout).items()}


def worker(tree: str, runner_kind: str, name: str, attention: str) -> None:
    """Build one runner from ``tree``'s bench.py, then answer "N" on stdin with N timed steps (JSON)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_of_tree", Path(tree) / "benchmarks" / "bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)  # puts ``tree`` first on sys.path, so it imports that tree's package
    import numpy_transformer as nt

    if not Path(nt.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise SystemExit(f"worker for {tree} imported {nt.__file__}")
    if name not in bench.CONFIGS:  # a configuration added after that revision: the working tree's sizes
        bench.CONFIGS[name] = tuple(json.loads(os.environ["COMPARE_CONFIG"]))
    config = bench.model_config(name, attention)
    batch, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
    if runner_kind == "torch":
        bench.have_torch()
        runner = bench.TorchRunner(config, batch, length)
    elif runner_kind == "reference":
        nt.set_kernels("reference")
        runner = bench.NumpyRunner(config, batch, length)
    else:
        runner = bench.NumpyRunner(config, batch, length)
    for _ in range(2):
        runner.train_step()
    print("ready", flush=True)
    for line in sys.stdin:
        count = int(line)
        runner.train_step()  # untimed: the timed steps follow a step of their own, as in training
        times = []
        for _ in range(count):
            start = time.perf_counter()
            runner.train_step()
            times.append(time.perf_counter() - start)
        print(json.dumps(times), flush=True)


class Contender:
    def __init__(
        self,
        label: str,
        tree: Path,
        runner_kind: str,
        name: str,
        attention: str,
        env: dict[str, str] | None = None,
    ) -> None:
        self.label = label
        command = [sys.executable, __file__, "--worker", str(tree), runner_kind, name, attention]
        sizes = json.dumps(tree_configs()[name])
        env = {**os.environ, "PYTHONPATH": str(tree), "COMPARE_CONFIG": sizes, **(env or {})}
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=tree
        )
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{label} failed to start")
        self.samples: list[float] = []

    def turn(self, count: int) -> None:
        self.process.stdin.write(f"{count}\n")
        self.process.stdin.flush()
        self.samples += json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def has_reference(tree: Path) -> bool:
    return (tree / "numpy_transformer" / "kernels").is_dir()


def run_turns(contenders: list[Contender], repeats: int, per_turn: int) -> dict[str, float]:
    """Each contender's median step time, the contenders taking turns; every process closed after."""
    try:
        for _ in range(-(-repeats // per_turn)):
            for contender in contenders:
                time.sleep(SETTLE_S)
                contender.turn(per_turn)
    finally:
        for contender in contenders:
            contender.close()
    return {c.label: statistics.median(c.samples) for c in contenders}


def summary(name: str, attention: str, contenders: list[Contender], medians: dict[str, float]) -> dict:
    return {
        "config": f"{name}/{attention}",
        "median_ms": {k: v * 1e3 for k, v in medians.items()},
        "spread_ms": {c.label: [min(c.samples) * 1e3, max(c.samples) * 1e3] for c in contenders},
    }


def compare(base_tree: Path, name: str, attention: str, repeats: int, per_turn: int, use_torch: bool) -> dict:
    contenders = [
        Contender("base", base_tree, "numpy", name, attention),
        Contender("tree", TREE, "numpy", name, attention),
    ]
    if has_reference(TREE):
        contenders.append(Contender("reference", TREE, "reference", name, attention))
    if use_torch:
        contenders.append(Contender("pytorch", TREE, "torch", name, attention))
    medians = run_turns(contenders, repeats, per_turn)
    row = {
        **summary(name, attention, contenders, medians),
        "tree_over_base": medians["tree"] / medians["base"],
    }
    if use_torch:
        row["over_pytorch"] = {k: v / medians["pytorch"] for k, v in medians.items() if k != "pytorch"}
    return row


def compare_settings(name: str, attention: str, repeats: int, per_turn: int) -> dict:
    variants = {
        "tuned": {},
        "system-malloc": {"NUMPY_TRANSFORMER_MALLOC": "system"},
        "openblas-default-spin": {"OPENBLAS_THREAD_TIMEOUT": "28"},
    }
    contenders = [Contender(label, TREE, "numpy", name, attention, env) for label, env in variants.items()]
    medians = run_turns(contenders, repeats, per_turn)
    return {
        **summary(name, attention, contenders, medians),
        "over_tuned": {k: v / medians["tuned"] for k, v in medians.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="HEAD", help="the revision to compare the working tree with")
    parser.add_argument("--configs", nargs="*", default=None, help="subset of: tiny small corpus seed base")
    parser.add_argument("--repeats", type=int, default=12, help="timed steps per contender")
    parser.add_argument("--no-torch", action="store_true")
    parser.add_argument(
        "--settings", action="store_true", help="compare tune_cpu's settings instead of revisions"
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    try:
        import torch  # noqa: F401

        use_torch = not args.no_torch
    except ImportError:
        use_torch = False
    rows = []
    configs = [(n, a) for n, a in CONFIGS if args.configs is None or n in args.configs]
    if args.settings:
        for name, attention in configs:
            rows.append(compare_settings(name, attention, args.repeats, 2))
            print_row(rows[-1], "over_tuned")
        return
    with tempfile.TemporaryDirectory() as scratch:
        base_tree = Path(scratch) / "base"
        subprocess.run(
            ["git", "-C", str(TREE), "worktree", "add", "--detach", str(base_tree), args.base],
            check=True,
            capture_output=True,
        )
        try:
            for name, attention in configs:
                rows.append(compare(base_tree, name, attention, args.repeats, 2, use_torch))
                if not args.json:
                    print_row(rows[-1], "over_pytorch")
        finally:
            subprocess.run(
                ["git", "-C", str(TREE), "worktree", "remove", "--force", str(base_tree)], check=True
            )
    if args.json:
        print(json.dumps({"base": args.base, "cores": os.cpu_count(), "rows": rows}, indent=1))


def print_row(row: dict, ratio_key: str) -> None:
    medians, ratios = row["median_ms"], row.get(ratio_key, {})
    parts = [
        f"{label} {ms:8.1f} ms" + (f" ({ratios[label]:.3f}x)" if label in ratios else "")
        for label, ms in medians.items()
    ]
    tail = f"  tree/base {row['tree_over_base']:.3f}" if "tree_over_base" in row else ""
    print(f"{row['config']:<10} " + "  ".join(parts) + tail, flush=True)


if __name__ == "__main__":
    main()
