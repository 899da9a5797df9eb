"""Training step on MPI ranks vs threads in one process, and the all-reduce's share of a step.

    python benchmarks/mpi_bench.py [--configs small base] [--repeats 10]

For each configuration (bench.py's model and batch), the Trainer's step on the same fixed global
batch, in two kinds of run started alternately (``--rounds`` of each): one process splitting the
batch into two row shards on two threads (DataParallel, as auto_threads would on two cores), and
``mpiexec -n 2`` with one thread per rank, where rank 0 also times its one Allreduce per step
(which includes waiting for the other rank to finish its backward). Medians of ``--repeats``
steps after two warm-up steps, then the median over the rounds. Needs mpi4py and mpiexec
(pip install -e ".[mpi]").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def worker(name: str, attention: str, threads: int, repeats: int) -> None:
    import bench

    from numpy_transformer.model import make_src_mask, make_tgt_mask
    from numpy_transformer.translator.batches import Batch
    from numpy_transformer.translator.config import TrainConfig
    from numpy_transformer.translator.distributed import Communicator
    from numpy_transformer.translator.training import Trainer

    config = bench.model_config(name, attention)
    batch_size, length = bench.CONFIGS[name][6], bench.CONFIGS[name][7]
    src, tgt, labels = bench.make_data(config, batch_size, length)
    batch = Batch(
        src,
        tgt,
        labels,
        make_src_mask(src, bench.PAD),
        make_tgt_mask(tgt, bench.PAD),
        int((labels != bench.PAD).sum()),
    )

    class FixedTask:  # the Trainer asks its task for each step's batch: always the same one here
        def train_batch(self, step: int, size: int, bucket_steps: int) -> Batch:
            return batch

    comm = Communicator.from_environment()
    model = bench.nt.build_transformer(**config)
    trainer = Trainer(
        model, FixedTask(), TrainConfig(batch_size=batch_size, threads=threads, lr=1e-4), comm=comm
    )
    reduce_seconds = []
    if comm is not None:
        allreduce = comm.allreduce_sum

        def timed_allreduce(buffer):
            start = time.perf_counter()
            allreduce(buffer)
            reduce_seconds.append(time.perf_counter() - start)

        comm.allreduce_sum = timed_allreduce
    steps = []
    for index in range(repeats + 2):
        start = time.perf_counter()
        trainer.train_step()
        if index >= 2:
            steps.append(time.perf_counter() - start)
    if comm is None or comm.rank == 0:
        parameters = sum(p.data.size for p in model.parameters())
        result = {
            "step_s": statistics.median(steps),
            "parameters": parameters,
            "ranks": comm.size if comm else 1,
            "threads": threads,
        }
        if reduce_seconds:
            result["allreduce_s"] = statistics.median(reduce_seconds[2:])
            result["allreduce_bytes"] = int(trainer._flat.buffer.nbytes)
        print(json.dumps(result))


def run(command: list[str]) -> dict:
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="*", default=["small", "base"])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, attention, threads, repeats = args.worker
        worker(name, attention, int(threads), int(repeats))
        return
    mpiexec = shutil.which(
        "mpiexec", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if mpiexec is None:
        raise SystemExit("mpiexec not found: pip install -e '.[mpi]'")
    for name in args.configs:
        me = [sys.executable, __file__, "--worker", name, "mha"]
        rounds = [
            (run([*me, "2", str(args.repeats)]), run([mpiexec, "-n", "2", *me, "1", str(args.repeats)]))
            for _ in range(args.rounds)
        ]
        threads = {"step_s": statistics.median(t["step_s"] for t, _ in rounds)}
        ranks = {
            **rounds[0][1],
            **{key: statistics.median(r[key] for _, r in rounds) for key in ("step_s", "allreduce_s")},
        }
        share = ranks["allreduce_s"] / ranks["step_s"]
        print(
            f"{name}/mha ({ranks['parameters']:,} parameters, {ranks['allreduce_bytes'] / 1e6:.1f} MB all-reduced): "
            f"1 process x 2 threads {threads['step_s'] * 1e3:.1f} ms, "
            f"2 ranks x 1 thread {ranks['step_s'] * 1e3:.1f} ms "
            f"(ratio {ranks['step_s'] / threads['step_s']:.2f}); all-reduce {ranks['allreduce_s'] * 1e3:.1f} ms "
            f"= {share:.1%} of the step",
            flush=True,
        )


if __name__ == "__main__":
    main()
