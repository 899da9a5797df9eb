"""A --data run's training step at several subword vocabulary sizes, side by side in one process.

    python benchmarks/vocab_bench.py data/messages-en-fr.tsv                  # 8000, 4000, 2000
    python benchmarks/vocab_bench.py data/messages-en-fr.tsv --sizes 8000 4000 --rounds 30

One Trainer per size on the same corpus, model and seed (the default --data model of
config.sizes_for_corpus, each size's own BPE), taking turns: a pause, then a few steps of each,
round after round, so every size sees the same machine. A smaller vocabulary makes the output
projection and its softmax cheaper but cuts the text into more tokens; the report gives both:
the median step time, the target tokens per step, the time per 1,000 target tokens, and each
size's step time over the first size's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from numpy_transformer.translator.config import ModelConfig, TrainConfig
from numpy_transformer.translator.training import Trainer

SETTLE_S = 0.25  # the pause before each turn, as in bench.py


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("data", help="a source<TAB>target corpus")
    parser.add_argument("--sizes", type=int, nargs="+", default=[8000, 4000, 2000])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3, help="steps per turn")
    args = parser.parse_args()
    trainers = {
        size: Trainer.create(TrainConfig(data=args.data, steps=10**6, vocab_size=size), ModelConfig())
        for size in args.sizes
    }
    for trainer in trainers.values():
        trainer.train_step()  # untimed: the first step allocates
    times: dict[int, list[float]] = {size: [] for size in args.sizes}
    tokens: dict[int, list[float]] = {size: [] for size in args.sizes}
    for _ in range(args.rounds):
        for size, trainer in trainers.items():
            time.sleep(SETTLE_S)
            for _ in range(args.steps):
                started = time.perf_counter()
                stats = trainer.train_step()
                times[size].append(time.perf_counter() - started)
                tokens[size].append(stats["tokens"])
    first = statistics.median(times[args.sizes[0]])
    columns = ["BPE units", "vocabularies (source / target)", "step (ms)", "target tokens a step"]
    print("| " + " | ".join([*columns, "ms per 1,000 tokens", "step ÷ first"]) + " |")
    print("|---|---|---|---|---|---|")
    for size, trainer in trainers.items():
        step, per_step = statistics.median(times[size]), statistics.mean(tokens[size])
        vocab = f"{len(trainer.task.src_vocab):,} / {len(trainer.task.tgt_vocab):,}"
        print(
            f"| {size:,} | {vocab} | {1000 * step:.0f} | {per_step:.0f} | {1e6 * step / per_step:.0f} "
            f"| {step / first:.3f} |"
        )


if __name__ == "__main__":
    main()
