"""Checkpoints: one ``.npz`` of plain arrays plus a JSON document, written atomically.

Layout: ``param/<name>`` model weights, ``optim/<key>`` optimiser moments, and ``meta``, a UTF-8
JSON document stored as a uint8 array (model config, step, random-generator states, tokenizer,
vocabularies, training arguments). Loading uses ``allow_pickle=False``: nothing is unpickled.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from pathlib import Path
from typing import Any

import numpy

FORMAT = "numpy_transformer/1"
FILENAME = "model.npz"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, truncated or does not fit: the message names file and problem."""


def resolve_path(path: str | Path) -> Path:
    """``--checkpoint`` accepts the run directory or the file itself."""
    path = Path(path)
    return path / FILENAME if path.is_dir() else path


def save_checkpoint(path: str | Path, arrays: dict[str, numpy.ndarray], meta: dict[str, Any]) -> Path:
    """Write arrays and meta to ``path`` through a temporary file in the same folder, then rename.

    A crash at any moment leaves either the old checkpoint or the new one, never half of one.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {**meta, "format": FORMAT}
    payload = {**arrays, "meta": numpy.frombuffer(json.dumps(meta).encode("utf-8"), dtype=numpy.uint8)}
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_umask())  # as any file the user creates (the log), not mkstemp's 0600
        with os.fdopen(handle, "wb") as file:
            numpy.savez(file, **payload)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process's file-creation mask, read without changing it where Linux tells it."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError):
        mask = os.umask(0o022)
        os.umask(mask)
        return mask


def load_checkpoint(path: str | Path) -> tuple[dict[str, numpy.ndarray], dict[str, Any]]:
    """(arrays, meta) from a checkpoint file or run directory; CheckpointError names what is wrong."""
    path = resolve_path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: no such file")
    try:
        with numpy.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except ValueError as error:
        if "Object arrays" in str(error):
            raise CheckpointError(
                f"checkpoint {path}: holds pickled Python objects, which are never loaded (they can "
                "run any code): it was not written by numpy_transformer"
            ) from error
        raise CheckpointError(f"checkpoint {path}: corrupt or truncated (ValueError: {error})") from error
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as error:
        raise CheckpointError(
            f"checkpoint {path}: corrupt or truncated ({type(error).__name__}: {error})"
        ) from error
    if "meta" not in arrays:
        raise CheckpointError(
            f"checkpoint {path}: has no 'meta' entry, so it was not written by numpy_transformer"
        )
    try:
        meta = json.loads(arrays.pop("meta").tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise CheckpointError(f"checkpoint {path}: its 'meta' entry is not valid JSON ({error})") from error
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return arrays, meta


def split_prefix(arrays: dict[str, numpy.ndarray], prefix: str) -> dict[str, numpy.ndarray]:
    """The entries under ``prefix/``, with the prefix removed."""
    return {name[len(prefix) + 1 :]: value for name, value in arrays.items() if name.startswith(prefix + "/")}
