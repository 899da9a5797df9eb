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
from collections.abc import Sequence
from typing import Any, NoReturn

from ..backend import Array, backend_name, get_array_module
from ..machine import cpu_cores
from ..module import Parameter

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


class AnotherRankFailed(RuntimeError):
    """Raised on the ranks that did not fail when the ranks agree that another one did (that rank
    raises its own exception, which the command reports once)."""


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
