"""Data parallelism over threads: one training batch's forward and backward, split by rows.

NumPy runs every element-wise operation on one core, while BLAS spreads each matrix product over
all of them. When a batch is large enough, splitting it into one shard per core keeps every core
busy through the element-wise work too: each shard runs forward, loss and backward on its own
thread, through its own replica of the model, with BLAS held to one thread per shard. NumPy
releases the GIL inside its array operations, so the shards overlap.

A replica shares every weight array with the model (an optimiser step is seen by all of them)
and owns only its gradients and forward caches. After the backward, the replicas' gradients are
added into the model's, so the model ends up holding the gradient of the whole batch.

The loss is the mean over the batch's non-pad tokens, as one unsplit pass computes it: shard k
with n_k of the N tokens back-propagates the weight n_k / N. Dropout masks differ from an
unsplit pass (each shard draws its own), but a run stays reproducible and resumable from the
model's generator alone: the replicas' generators are seeded from it at every step.
"""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

from ..backend import Array, backend_name, make_rng
from ..machine import blas_threads, cpu_cores
from ..model import Transformer, build_from_config, check_training_inputs, loss_and_backward
from ..module import Parameter

# A shard must feed at least this many activation entries (rows x d_model) per layer for the
# overlap to beat two-threaded BLAS on the whole batch (benchmarks/README.md: the
# "small" configuration, 512 x 128 per shard, gains; "tiny", 256 x 64, and "seed", 40 x 512, lose).
MIN_SHARD_ACTIVATIONS = 32768


def auto_threads(model: Transformer, batch: int, length: int, cores: int | None = None) -> int:
    """How many shards a batch of (batch, length) tokens is worth: the cores (all of this machine's
    unless given), or 1 when too small."""
    cores = cores or cpu_cores()
    if backend_name() != "numpy" or cores < 2:
        return 1
    shards = min(cores, batch)
    return shards if (batch // shards) * length * model.config.d_model >= MIN_SHARD_ACTIVATIONS else 1


class DataParallel:
    """Runs ``loss_and_backward`` over ``threads`` row shards of the batch at once (see the module doc)."""

    def __init__(self, model: Transformer, threads: int = 2) -> None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive integer, got {threads!r}")
        if threads > 1 and backend_name() != "numpy":
            raise ValueError(f"threads={threads} needs the NumPy backend, not {backend_name()!r}")
        self.model = model
        self.threads = threads
        self.replicas = [_replica(model) for _ in range(threads - 1)]
        # (model's parameter, replica's parameter) pairs, for adding each replica's gradients
        self._gradient_pairs = [
            list(zip(model.parameters(), replica.parameters())) for replica in self.replicas
        ]
        self._pool = ThreadPoolExecutor(threads - 1, thread_name_prefix="shard") if threads > 1 else None

    def loss_and_backward(
        self,
        src: Array,
        tgt: Array,
        src_mask: Array | None,
        tgt_mask: Array | None,
        labels: Array,
        pad_id: int,
        label_smoothing: float = 0.0,
        weight: float = 1.0,
    ) -> float:
        """Forward, label-smoothed cross-entropy and backward of the whole batch (B rows).

        Gradients of ``weight`` times the mean loss accumulate (+=) into the model's parameters,
        as ``model.backward`` does. Returns the mean loss over the non-pad labels of the whole batch.
        """
        batch = src.shape[0]
        shards = min(self.threads, batch)
        if shards == 1:
            return loss_and_backward(
                self.model, src, tgt, src_mask, tgt_mask, labels, pad_id, label_smoothing, weight
            )
        assert self._pool is not None  # made whenever threads > 1
        # the whole batch's ids, masks and labels, before its shards are cut (each checks its own rows)
        check_training_inputs(self.model, src, src_mask, tgt, tgt_mask, labels, pad_id)
        bounds = [batch * i // shards for i in range(shards + 1)]
        counts = [int((labels[start:stop] != pad_id).sum()) for start, stop in itertools.pairwise(bounds)]
        total = sum(counts)
        if total == 0:  # with no tokens at all, loss_and_backward names the problem
            return loss_and_backward(
                self.model, src, tgt, src_mask, tgt_mask, labels, pad_id, label_smoothing, weight
            )
        seeds = self.model.rng.integers(0, 2**63, size=shards - 1)
        runs = []  # (shard index, arguments of loss_and_backward, token count) of every shard with tokens to learn from
        for index, (start, stop, count) in enumerate(zip(bounds, bounds[1:], counts)):
            if count:
                model = (
                    self.model
                    if index == 0
                    else self._prepare(self.replicas[index - 1], int(seeds[index - 1]))
                )
                rows = slice(start, stop)
                runs.append(
                    (
                        index,
                        (
                            model,
                            src[rows],
                            tgt[rows],
                            mask_rows(src_mask, rows, batch),
                            mask_rows(tgt_mask, rows, batch),
                            labels[rows],
                            pad_id,
                            label_smoothing,
                            weight * count / total,
                        ),
                        count,
                    )
                )
        with blas_threads(1):
            futures = [self._pool.submit(loss_and_backward, *arguments) for _, arguments, _ in runs[1:]]
            try:
                first = loss_and_backward(*runs[0][1])
            finally:  # wait for every shard, also when the first one failed
                rest = [future.result() for future in futures]
        for index, _, _ in runs:
            if index:  # shard 0 ran on the model itself
                for mine, theirs in self._gradient_pairs[index - 1]:
                    mine.accumulate(theirs.grad)
        return sum(loss * count for loss, (_, _, count) in zip([first, *rest], runs)) / total

    def _prepare(self, replica: Transformer, seed: int) -> Transformer:
        replica.zero_grad()
        replica.train(self.model.training)
        replica.set_rng(make_rng(seed))
        return replica


def mask_rows(mask: Array | None, rows: slice, batch: int) -> Array | None:
    """A mask's rows for one shard; a mask broadcast over the batch (leading axis 1) is shared."""
    return mask[rows] if mask is not None and mask.shape[0] == batch else mask


def _replica(model: Transformer) -> Transformer:
    """A model of the same shape whose every Parameter reads the model's weight arrays."""
    replica = build_from_config(model.config, seed=None)
    for source, copy in zip(model.modules(), replica.modules()):
        for name, value in vars(source).items():
            if isinstance(value, Parameter):
                getattr(copy, name).data = value.data
    object.__setattr__(replica, "_flat", None)  # its own weights' buffer is read by nothing now: let it go
    return replica
