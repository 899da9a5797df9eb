"""Writing files so that nothing a user saved is ever lost: through a temporary file in the same
folder, then a rename, so a crash leaves the old file or the new one and never half of one; an empty
path refused before it can mean the working directory. And standard streams whose reader went away
(``| head``), which must never stop the work mid-save."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any


class SaveError(OSError):
    """Writing a file failed (a full disk, a read-only mount...): the message names the file and the
    operating system's error, and says that what was on disk before is unchanged."""

    @classmethod
    def writing(cls, path: Path, error: OSError, kept: str) -> SaveError:
        """The error of writing ``path``; ``kept`` says what is still on disk."""
        reason = f"[Errno {error.errno}] {error.strerror}" if error.errno and error.strerror else str(error)
        saved = cls(f"could not write {path}: {reason}; {kept}")
        saved.errno = error.errno
        return saved


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file in the same folder, then rename: never half a file.
    A failed write (OSError) raises a SaveError naming ``path``."""
    write_atomically(path, lambda file: file.write(text.encode("utf-8")))


def write_atomically(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write ``path`` by ``write(file)`` on a temporary binary file in the same folder, then rename:
    never half a file. A failed write (OSError) raises a SaveError naming ``path`` and saying that
    the file it would have replaced is unchanged, or that nothing was written there."""
    kept = f"the previous {path.name} is unchanged" if path.exists() else "nothing was written there"
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "wb") as file:
            write(file)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError) and not isinstance(error, SaveError):
            raise SaveError.writing(path, error, kept) from error
        raise


def refuse_empty(out: str | Path | None, name: str = "--out", where: str = "") -> None:
    """``out`` "" would be the working directory: an empty argument is most often an unset shell variable.
    The one refusal of an empty path: the parser's (``where`` which of several), TrainConfig's, the run's."""
    if out == "":
        raise ValueError(
            f"{name} is empty{where}: expected a path; an empty argument is most often a shell variable "
            "that is not set"
        )


def silence(stream: IO[str]) -> None:
    """Point ``stream``'s descriptor at /dev/null (the Python documentation's recipe for a closed
    pipe): what is still buffered has nowhere to go, and Python's exit must not fail on it with a
    traceback."""
    try:
        descriptor = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (a test's StringIO): nothing to silence
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)


class ReaderWatched:
    """A standard stream (``sys.stdout``, ``sys.stderr``) whose reader may go away (``train | head``,
    quitting ``less``): the first write or flush that finds it closed silences it and calls
    ``gone()`` instead of raising, and later writes are dropped, so a print never costs the work
    in hand (a run's save) its end."""

    def __init__(self, stream: IO[str], gone: Callable[[], None]) -> None:
        self.stream, self.gone, self.closed_reader = stream, gone, False

    def write(self, text: str) -> int:
        return self._guarded(lambda: self.stream.write(text), len(text))

    def flush(self) -> None:
        self._guarded(self.stream.flush, None)

    def _guarded(self, call: Callable[[], Any], dropped: Any) -> Any:
        if self.closed_reader:
            return dropped
        try:
            return call()
        except BrokenPipeError:
            self.closed_reader = True
            silence(self.stream)
            self.gone()
            return dropped

    def __getattr__(self, name: str) -> Any:  # isatty, fileno, encoding...: the stream's own
        return getattr(self.stream, name)
