"""Data parallelism across processes and machines, on MPI (mpi4py).

Started under ``mpiexec -n K`` (or ``srun`` under Slurm), every rank builds the same model from
the same seed and draws the same global batch; rank k takes its slice of the batch's rows, runs
forward and backward with the weight n_k / N (its share of the batch's N non-pad target tokens),
one ``Allreduce`` sums the model's flat gradient buffer in place, and a second, of three numbers,
sums the weighted loss, the stop flags and the failure flags. The sum is the gradient of the whole
batch's mean loss, so every rank applies the same optimiser step and the weights stay identical: a
cheap checksum compares them every few steps.
Dropout masks come from a generator seeded by (seed, step, rank), so a K-rank run is repeatable
and resumable from its checkpoint alone.

The Trainer reaches all of this through one object, MpiRanks (its step's rows and all-reduces,
the held failure, the weights' check, the time budget's plan, the loop's last agreement), and a
run alone through Ranks, the same interface with nothing to agree on; the train command's stages
agree through Ranks.run_together.

The ranks go on or stop together: a rank that cannot go on (a refusal, a failed save) says so to
the others at the next collective call they all make (``agree``, or a flag beside the step's loss),
and every rank then stops, since a rank left alone in a collective call waits for ever. A rank that
can no longer keep step with the others (a second Ctrl-C) ends them all (``abort``).

Each step sends and receives about 4 bytes (float32) per parameter per rank; see docs/scale.md for
combining ranks with threads on one host, hostfiles and Slurm.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn, TypeVar

from ..backend import Array, backend_name, get_array_module
from ..machine import blas_threads, cpu_cores
from ..module import Parameter

if TYPE_CHECKING:
    from ..model import Transformer

# what MPI launchers tell their processes: the number of ranks (MPICH/Hydra, Intel MPI and srun
# with PMI; Open MPI; PMIx launchers)
ABORT_GRACE_S = 0.5  # time for the launcher to forward a rank's last words before Abort
LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")
LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # and this process's rank


def launched_ranks() -> int:
    """How many ranks the MPI launcher started, read from its environment variables (1 without one)."""
    for name in LAUNCHER_SIZE_VARS:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 1


def launched_rank() -> int:
    """This process's rank as the MPI launcher numbered it, read before MPI starts (0 without one)."""
    for name in LAUNCHER_RANK_VARS:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


T = TypeVar("T")


class AnotherRankFailed(RuntimeError):
    """Raised on the ranks that did not fail when the ranks agree that another one did (that rank
    raises its own exception, which the command reports once)."""


class RanksStopped(Exception):
    """Every rank of an MPI run stops with exit status ``code``; rank 0 has said why."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Communicator:
    """The ranks of one MPI run (mpi4py's COMM_WORLD) and the things training asks of them."""

    def __init__(self, comm: Any) -> None:
        from mpi4py import MPI

        self._mpi, self.comm = MPI, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.local_size = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()  # ranks on this host

    @classmethod
    def from_environment(cls) -> Communicator | None:
        """The run's communicator when an MPI launcher started more than one rank, else None.

        Raises RuntimeError (before any work) when the launcher started several ranks but they
        cannot talk: mpi4py missing would otherwise train K independent copies.
        """
        ranks = launched_ranks()
        if ranks <= 1:
            return None
        if backend_name() == "cupy":
            raise RuntimeError(
                "multi-process training on the CuPy backend needs its all-reduce on device buffers "
                "(CUDA-aware MPI or NCCL), which this release does not drive; train on one GPU, or on CPUs "
                "with the NumPy backend"
            )
        try:
            from mpi4py import MPI
        except ImportError:
            raise RuntimeError(
                f"started under MPI with {ranks} ranks, but mpi4py is not installed, so each rank would "
                "train alone: pip install 'numpy_transformer[mpi]'"
            ) from None
        size = MPI.COMM_WORLD.Get_size()
        if size != ranks:
            raise RuntimeError(
                f"the MPI launcher started {ranks} ranks, but mpi4py's MPI sees {size}: mpiexec and mpi4py "
                "must come from the same MPI (pip install 'numpy_transformer[mpi]' brings both)"
            )
        return cls(MPI.COMM_WORLD)

    def allreduce_sum(self, buffer: Array) -> None:
        """buffer <- the sum of every rank's buffer, in place (one Allreduce)."""
        self.comm.Allreduce(self._mpi.IN_PLACE, buffer, op=self._mpi.SUM)

    def allreduce_values(self, values: Sequence[float]) -> list[float]:
        """The sums across ranks of a few host numbers (a step's loss, stop and failure flags), in float64."""
        xp = get_array_module()
        buffer = xp.asarray(values, dtype=xp.float64)
        self.allreduce_sum(buffer)
        return [float(value) for value in buffer]

    def agree(self, outcome: Any) -> list[Any]:
        """Every rank's ``outcome`` of the same piece of work (None where it went well; a small picklable
        value where not), in rank order on every rank: one allgather, so the ranks decide together."""
        return self.comm.allgather(outcome)

    def abort(self, code: int) -> NoReturn:
        """End every rank of the run, and mpiexec with exit status ``code``: for a rank that cannot keep
        step with the others any more, which may be waiting in a collective call it will never make."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(ABORT_GRACE_S)  # the launcher forwards what was said before Abort ends every process
        self.comm.Abort(code)
        raise SystemExit(code)  # not reached: Abort ends this process too

    def check_same(self, value: float, what: str) -> None:
        """Raise a RuntimeError naming the ranks whose ``value`` differs from rank 0's."""
        values = self.comm.allgather(value)
        differing = [rank for rank, other in enumerate(values) if other != values[0]]
        if differing:
            shown = ", ".join(f"rank {rank}: {values[rank]!r}" for rank in [0, *differing])
            raise RuntimeError(
                f"the ranks' {what} drifted apart ({shown}); ranks {differing} differ from rank 0"
            )

    def rows(self, batch: int) -> slice:
        """This rank's rows of a global batch of ``batch`` rows: K nearly equal, contiguous slices."""
        return slice(batch * self.rank // self.size, batch * (self.rank + 1) // self.size)

    def cores_per_rank(self) -> int:
        """This host's cores shared among its ranks (at least 1)."""
        return max(1, cpu_cores() // self.local_size)


def weights_checksum(parameters: Sequence[Parameter]) -> float:
    """A float that equal weights give bit for bit on every rank, and different ones almost surely do not."""
    xp = get_array_module()
    return math.fsum(
        float(xp.sum(p.data, dtype=xp.float64)) + float(xp.abs(p.data).max(initial=0)) for p in parameters
    )


class Part(NamedTuple):
    """A rank's part of a micro-batch: its rows (None: none to run), their target tokens and the
    step's, of which they are a share (their gradient's weight)."""

    rows: slice | None
    tokens: int
    of: int

    @property
    def weight(self) -> float:
        return self.tokens / max(self.of, 1)


class Ranks:
    """The ranks a training run's steps are taken on, and every point where they must agree.

    This one is a run alone, one process: nothing to agree with, so every agreement is the rank's
    own word and a failure is raised where it happens. MpiRanks is the same for several MPI ranks.
    The Trainer asks the same of both, at the same points of its loop.
    """

    rank, size = 0, 1
    cores: int | None = None  # the cores this rank may use (None: every core of the machine)

    def __init__(self) -> None:
        # under MPI, this rank's failure (rank 0's save, a rank's forward pass) until the ranks agree on it
        self.failure: Exception | None = None

    @property
    def is_root(self) -> bool:
        """Whether this rank logs, evaluates and saves (rank 0)."""
        return self.rank == 0

    def check(self, batch_size: int, accumulate: int) -> None:
        """Refuse, by name, settings the ranks cannot train with."""

    def threads(self) -> AbstractContextManager:
        """The BLAS threads of the step's forward and backward passes: alone, as they are."""
        return nullcontext()

    def part(self, batch: Any, tokens: int, pad: int) -> Part:
        """This rank's part of a micro-batch of the step's ``tokens`` target tokens: alone, all of it."""
        return Part(slice(None), batch.n_tokens, tokens)

    def weigh(self, loss: float, part: Part) -> float:
        """The share of the step's mean loss of a part whose rows' mean loss is ``loss``."""
        return part.weight * loss

    def all_reduce(self, model: Transformer) -> None:
        """Sum the ranks' gradients (in the model's flat buffer): alone, there is one."""

    def agree_on_step(self, loss: float, requested: str | None, lr_scale: float) -> tuple[float, bool, float]:
        """(the step's loss, whether a rank asked to stop, rank 0's learning-rate multiplier); raises
        when a rank failed. Alone: as given, and a request stops at once (``stop_at_once``)."""
        return loss, False, lr_scale

    def stop_at_once(self, requested: str | None) -> str | None:
        """The stop this rank takes without waiting for the others: alone, its own request."""
        return requested

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Under MPI, an exception of the block (rank 0's log, evaluation or save) is held in
        ``failure`` until the next all-reduce tells every rank; alone, it is raised at once."""
        yield

    def check_same_weights(self, model: Transformer) -> None:
        """Raise when the ranks' weights drifted apart (alone: they cannot)."""

    def agree_on_plan(self, steps: int) -> int:
        """A time-budgeted run's last step, as rank 0's clock planned it."""
        return steps

    def finish(self) -> None:
        """The loop's last agreement: its last failure (rank 0's last evaluation or save) has no step
        left to carry it."""

    def run_together(self, work: Callable[[], T], failure: Callable[[Exception], tuple[int, str]]) -> T:
        """``work()`` (a stage of a command: checking its settings, building the run, training): alone,
        as it goes; under MPI on every rank, then one agreement: if it raised on any rank, rank 0
        prints the first rank's reason (``failure``: the exit status and the line that says why) and
        every rank raises RanksStopped with its exit status."""
        return work()

    def raise_failure(self) -> NoReturn:
        """Every rank stops here together: a failed one raises its own exception, the others
        AnotherRankFailed."""
        failure, self.failure = self.failure, None
        if failure is not None:
            raise failure
        raise AnotherRankFailed("stopped because another rank failed")


class MpiRanks(Ranks):
    """K MPI ranks (a Communicator): each trains its slice of every global batch, one all-reduce sums
    the model's flat gradient, a second the loss and the flags every rank must agree on (the module
    doc). A rank's failure is held until that all-reduce tells the others."""

    def __init__(self, comm: Communicator) -> None:
        super().__init__()
        self.comm, self.rank, self.size = comm, comm.rank, comm.size
        self.cores: int = comm.cores_per_rank()

    def check(self, batch_size: int, accumulate: int) -> None:
        if batch_size < self.size:
            raise ValueError(
                f"batch-size {batch_size} is smaller than the {self.size} ranks: each needs a row"
            )
        if accumulate > 1:  # each micro-batch would be reduced on top of the last
            raise ValueError(
                f"accumulate {accumulate} is not supported on {self.size} MPI ranks: the ranks "
                "already add their batches' gradients; use a larger --batch-size or more ranks"
            )

    def threads(self) -> AbstractContextManager:
        return blas_threads(self.cores)

    def part(self, batch: Any, tokens: int, pad: int) -> Part:
        """This rank's rows of the batch (check refuses accumulate), with the weight n_k / N; none to
        run when they hold no target token (and the batch does), or when this rank failed."""
        rows = self.comm.rows(batch.src.shape[0])
        total, mine = int((batch.tgt_out != pad).sum()), int((batch.tgt_out[rows] != pad).sum())
        runs = self.failure is None and (mine or not total)
        return Part(rows if runs else None, mine, total)

    def weigh(self, loss: float, part: Part) -> float:
        """This rank's share of the batch's mean loss (``agree_on_step`` sums them)."""
        return loss * part.tokens / max(part.of, 1)

    def all_reduce(self, model: Transformer) -> None:
        """The all-reduce of the model's flat gradient, in place: every rank leaves with the whole
        batch's gradient."""
        assert model.flat is not None
        self.comm.allreduce_sum(model.flat.gradients())

    def agree_on_step(self, loss: float, requested: str | None, lr_scale: float) -> tuple[float, bool, float]:
        loss, stops, failures, lr_scale = self.comm.allreduce_values(  # rank 0's evaluations cut the rate
            [
                loss,
                float(requested is not None),
                float(self.failure is not None),
                lr_scale if self.rank == 0 else 0.0,
            ]
        )
        if failures > 0:  # before the update: every rank stops here, at the same step
            self.raise_failure()
        return loss, stops > 0, lr_scale

    def stop_at_once(self, requested: str | None) -> str | None:
        return None  # the next step's all-reduce makes every rank agree

    @contextmanager
    def holding(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            self.failure = self.failure or error

    def check_same_weights(self, model: Transformer) -> None:
        """On every rank at once: a drift stops all of them."""
        self.comm.check_same(weights_checksum(model.parameters()), "weights")

    def agree_on_plan(self, steps: int) -> int:
        return round(self.comm.allreduce_values([float(steps) if self.rank == 0 else 0.0])[0])

    def run_together(self, work: Callable[[], T], failure: Callable[[Exception], tuple[int, str]]) -> T:
        try:
            result, outcome = work(), None
        except Exception as error:
            outcome = (1, "") if isinstance(error, AnotherRankFailed) else failure(error)
        failed = [outcome for outcome in self.comm.agree(outcome) if outcome is not None]
        if not failed:
            return result
        code, line = next((outcome for outcome in failed if outcome[1]), failed[0])  # a rank's own reason
        if self.rank == 0 and line:
            print(line, file=sys.stderr, flush=True)
        raise RanksStopped(code)

    def finish(self) -> None:
        if self.comm.allreduce_values([float(self.failure is not None)])[0] > 0:
            self.raise_failure()


def ranks_of(comm: Communicator | None) -> Ranks:
    """The ranks of a run: MpiRanks over ``comm``, or a run alone."""
    return Ranks() if comm is None else MpiRanks(comm)
