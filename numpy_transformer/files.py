"""Writing files so that nothing a user saved is ever lost: through a temporary file in the same
folder, then a rename, so a crash leaves the old file or the new one and never half of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
    kept = f"the previous {path.name} is unchanged" if path.exists() else "nothing was written there"
    temporary = None
    try:
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException as error:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise SaveError.writing(path, error, kept) from error
        raise
