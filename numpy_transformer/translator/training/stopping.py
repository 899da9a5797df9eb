"""What asks a training run to stop after its step and save: Ctrl-C or SIGTERM, standard output or
error closed by its reader, patience run out (StopRequests); and what the run says when it stops so."""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ...files import ReaderWatched

STOP_MESSAGES = {
    "interrupted": "interrupted",
    "another rank": "stopped with another rank",
    "reader gone": "standard output was closed",
}


class StopRequests:
    """This rank's own request to stop after the current step and save: ``reason`` ("interrupted",
    "reader gone", "patience" or None). Under MPI it waits there until the step's all-reduce makes
    every rank agree (Trainer.stop); ``is_root`` says whether this rank tells the user (mpiexec
    signals every rank)."""

    def __init__(self, is_root: bool) -> None:
        self.is_root = is_root
        self.reason: str | None = None

    def request(self, reason: str) -> None:
        """Stop after this step for ``reason``, unless an earlier request stands."""
        self.reason = self.reason or reason

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Meanwhile signals ask to stop (on_signal), and standard output and error are ReaderWatched
        streams whose reader going away asks it too (reader_gone)."""
        streams = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = (
            ReaderWatched(sys.stdout, self.reader_gone),
            ReaderWatched(sys.stderr, self.reader_gone),
        )
        try:
            with _signals_call(self.on_signal):
                yield
        finally:
            sys.stdout, sys.stderr = streams

    def on_signal(self, signum: int, frame: Any) -> None:
        """Ctrl-C or SIGTERM: stop after this step; the second one stops at once."""
        if self.reason == "interrupted":  # the second signal stops at once
            raise KeyboardInterrupt
        self.reason = "interrupted"
        if not self.is_root:  # mpiexec signals every rank: rank 0 says it
            return
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(
            f"\n{name}: stopping after this step, then saving ({name} again: stop at once without saving)",
            file=sys.stderr,
            flush=True,
        )

    def reader_gone(self) -> None:
        """Standard output or error was closed by its reader (``| head``, quitting ``less``): stop
        after this step and save, as after a first Ctrl-C."""
        self.request("reader gone")
        print(
            "standard output was closed (its reader went away): stopping after this step, then saving",
            file=sys.stderr,
            flush=True,
        )


@contextmanager
def _signals_call(handler: Any) -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM (kill, a batch system's time limit) call ``handler``: they ask the
    loop to stop and save after the current step. Only the main thread has signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.signal(number, handler) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, saved in previous.items():
            signal.signal(number, saved)
