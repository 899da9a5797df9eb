"""The training step on a corpus's real batches: only the labelled positions projected, as
``loss_and_backward`` does, against the whole (B, T) grid's logits, side by side in one process.

    python benchmarks/padding_bench.py --data de.tsv              # 400 steps of each
    python benchmarks/padding_bench.py --data fr.tsv --steps 200

Builds the run a ``train --data FILE.tsv`` with default settings would (its vocabularies, model and
batches: bucketed by length, so padded), then makes each Trainer step twice on the same batch, once
with each version of the forward, loss and backward, taking turns which goes first. Prints both
versions' median and mean step time (the mean is what the time budget pays), their ratios, and the
share of target positions that hold a label.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy_transformer as nt
from numpy_transformer.kernels import ops
from numpy_transformer.translator import thread_parallel, training
from numpy_transformer.translator.config import TrainConfig

WARM_UP = 5  # steps of each version left out of the figures


def whole_grid(
    model, src, tgt, src_mask, tgt_mask, labels, pad_id=0, label_smoothing=0.0, weight=1.0
) -> float:
    """Forward, loss and backward over every position, padding included."""
    logits = model.forward(src, tgt, src_mask, tgt_mask)
    loss, cache = ops.cross_entropy_forward(logits, labels, pad_id, label_smoothing)
    model.backward(ops.cross_entropy_backward(weight, cache))
    return loss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a TSV corpus, as train --data takes")
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    nt.tune_cpu()
    trainer = training.Trainer.create(TrainConfig(data=args.data))
    config, pad = trainer.config, trainer.task.ids.pad
    versions = {"labelled only": nt.loss_and_backward, "whole grid": whole_grid}
    times: dict[str, list[float]] = {name: [] for name in versions}
    filled = []
    for step in range(args.steps):
        order = list(versions) if step % 2 else list(versions)[::-1]
        for name in order:
            # the Trainer and its row shards call the function by these names
            training.loss_and_backward = thread_parallel.loss_and_backward = versions[name]
            trainer.step = step  # the same batch for both versions
            start = time.perf_counter()
            trainer.train_step()
            times[name].append(time.perf_counter() - start)
        for k in range(config.accumulate):  # the step's micro-batches, as train_step draws them
            batch = trainer.task.train_batch(
                step * config.accumulate + k,
                config.batch_size,
                config.bucket_steps,
                config.batch_tokens,
                trainer.subword_dropout,
            )
            filled.append(float((batch.tgt_out != pad).mean()))
    training.loss_and_backward = thread_parallel.loss_and_backward = nt.loss_and_backward
    summary = {
        name: (statistics.median(kept), statistics.mean(kept))
        for name, kept in ((name, values[WARM_UP:]) for name, values in times.items())
    }
    for name, (median, mean) in summary.items():
        print(f"{name:14} median {1000 * median:6.1f} ms   mean {1000 * mean:6.1f} ms")
    (new_median, new_mean), (old_median, old_mean) = summary["labelled only"], summary["whole grid"]
    print(f"labelled only / whole grid: median {new_median / old_median:.3f}, mean {new_mean / old_mean:.3f}")
    print(f"target positions holding a label: {statistics.mean(filled):.1%} ({len(filled)} batches)")


if __name__ == "__main__":
    main()
