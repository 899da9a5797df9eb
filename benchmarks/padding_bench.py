"""The training step on a corpus's real, padded batches: what padding costs, side by side in one process.

    python benchmarks/padding_bench.py --data de.tsv                     # the loss's two versions
    python benchmarks/padding_bench.py --data de.tsv --buckets 20 100    # two bucket sizes

Builds the run a ``train --data FILE.tsv`` with default settings would (its vocabularies, model and
batches, bucketed by length), then times Trainer steps taking turns, 400 of each by default:

* without ``--buckets``: each step twice on the same batch, once with ``loss_and_backward`` (only
  the labelled positions projected) and once with the whole (B, T) grid's logits, padding included;
* with ``--buckets A B``: two runs, one drawing its batches from buckets of A steps' pairs sorted
  by length (``--bucket-steps A``), the other from buckets of B steps' pairs, each with its own
  model.

Prints each contender's median and mean step time (the mean is what the time budget pays), the
ratios of the second to the first, and the mean source and target positions of its batches, with
the share of the target positions that hold a label.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy_transformer as nt
from numpy_transformer.kernels import ops
from numpy_transformer.translator import thread_parallel, training
from numpy_transformer.translator.config import TrainConfig
from numpy_transformer.translator.training import trainer as trainer_module

WARM_UP = 5  # steps of each contender left out of the figures


def whole_grid(
    model, src, tgt, src_mask, tgt_mask, labels, pad_id=0, label_smoothing=0.0, weight=1.0
) -> float:
    """Forward, loss and backward over every position, padding included."""
    logits = model.forward(src, tgt, src_mask, tgt_mask)
    loss, cache = ops.cross_entropy_forward(logits, labels, pad_id, label_smoothing)
    model.backward(ops.cross_entropy_backward(weight, cache))
    return loss


def use_loss(function: Any) -> None:
    """Make the Trainer and its row shards call ``function`` for the forward, loss and backward."""
    trainer_module.loss_and_backward = thread_parallel.loss_and_backward = function


def batch_shape(trainer: training.Trainer, step: int) -> tuple[int, int, int]:
    """(source positions, target positions, labelled target positions) of a step's batches."""
    pad = trainer.task.ids.pad
    shape = [0, 0, 0]
    for batch in trainer.stepper.batches(step):  # the step's micro-batches, as train_step draws them
        for i, count in enumerate((batch.src.size, batch.tgt_out.size, int((batch.tgt_out != pad).sum()))):
            shape[i] += count
    return shape[0], shape[1], shape[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, help="a TSV corpus, as train --data takes")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--buckets", type=int, nargs=2, metavar=("A", "B"), help="compare two bucket sizes")
    args = parser.parse_args()
    nt.tune_cpu()
    if args.buckets:
        contenders = {
            f"buckets of {size}": (
                training.Trainer.create(TrainConfig(data=args.data, bucket_steps=size)),
                None,
            )
            for size in args.buckets
        }
    else:
        trainer = training.Trainer.create(TrainConfig(data=args.data))
        contenders = {"whole grid": (trainer, whole_grid), "labelled only": (trainer, nt.loss_and_backward)}
    times: dict[str, list[float]] = {name: [] for name in contenders}
    shapes: dict[str, list[tuple[int, int, int]]] = {name: [] for name in contenders}
    for step in range(args.steps):
        for name in list(contenders) if step % 2 else list(contenders)[::-1]:
            trainer, loss = contenders[name]
            use_loss(loss or nt.loss_and_backward)
            trainer.step = step  # the loss's versions: the same batch for both
            start = time.perf_counter()
            trainer.train_step()
            times[name].append(time.perf_counter() - start)
            shapes[name].append(batch_shape(trainer, step))
    use_loss(nt.loss_and_backward)
    means = {}
    for name in contenders:
        kept = times[name][WARM_UP:]
        source, target, labelled = (statistics.mean(shape[i] for shape in shapes[name]) for i in range(3))
        means[name] = (statistics.median(kept), statistics.mean(kept))
        print(
            f"{name:16} median {1000 * means[name][0]:6.1f} ms   mean {1000 * means[name][1]:6.1f} ms   "
            f"positions: source {source:.0f}, target {target:.0f}, {labelled / target:.1%} of them labelled"
        )
    (first_median, first_mean), (second_median, second_mean) = means.values()
    first, second = list(contenders)
    print(
        f"{second} / {first}: median {second_median / first_median:.3f}, mean {second_mean / first_mean:.3f}"
        f" ({args.steps} steps each)"
    )


if __name__ == "__main__":
    main()
