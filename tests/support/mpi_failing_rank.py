"""``mpiexec -n K python tests/support/mpi_failing_rank.py RANK FAILURE train ...``: the command, with one rank
made to fail as a real run can, to check that the other ranks stop with it.

FAILURE is one of:

- ``disk full``: every save of that rank raises OSError (ENOSPC);
- ``unreadable data``: building the task raises ValueError, as a corpus that host cannot read;
- ``out of memory``: its forward pass of the third step raises MemoryError;
- ``second ctrl-c``: its forward pass of the third step raises KeyboardInterrupt.
"""

import errno
import sys

from mpi4py import MPI

from numpy_transformer.translator import cli
from numpy_transformer.translator.training import keeping, trainer
from numpy_transformer.translator.training import step as stepping

FAILURES = ("disk full", "unreadable data", "out of memory", "second ctrl-c")


def fail(failure: str) -> None:
    if failure == "disk full":

        def save_checkpoint(path, *args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))

        trainer.save_checkpoint = keeping.save_checkpoint = save_checkpoint
    elif failure == "unreadable data":

        def make_task(*args, **kwargs):
            raise ValueError("--data corpus.tsv cannot be read on this host")

        trainer.make_task = make_task
    else:
        error = {
            "out of memory": MemoryError("Unable to allocate 4.00 GiB for an array"),
            "second ctrl-c": KeyboardInterrupt(),
        }[failure]
        take, forward = stepping.Stepper.loss_and_backward, stepping.Stepper._loss_and_backward
        steps = []  # the steps taken so far, counted from 0

        def counted(self, batches, tokens, step):
            steps.append(step)
            return take(self, batches, tokens, step)

        def failing(self, *args):  # inside the step's forward, where a real failure happens
            if steps[-1] >= 2:
                raise error
            return forward(self, *args)

        stepping.Stepper.loss_and_backward, stepping.Stepper._loss_and_backward = counted, failing


if __name__ == "__main__":
    rank, failure = int(sys.argv[1]), sys.argv[2]
    if failure not in FAILURES:
        sys.exit(f"FAILURE must be one of {', '.join(FAILURES)}, got {failure!r}")
    if MPI.COMM_WORLD.Get_rank() == rank:
        fail(failure)
    sys.exit(cli.main(sys.argv[3:]))
