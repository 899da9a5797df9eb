"""A model directory on disk: the names of its files, reading one of them within a bound, and
writing an export into it (checked first, then moved in file by file, each by a rename)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path

from ...files import SaveError

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "vocab.json"
TARGET_VOCAB = "target_vocab.json"  # the target's vocabulary of a Marian tokenizer of separate ones
SENTENCEPIECE_FILES = ("source.spm", "target.spm")
TOKENIZER_JSON, TARGET_TOKENIZER = "tokenizer.json", "target"  # the target's, of separate vocabularies
GENERATION = "generation_config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"
TARGET_FILES = tuple(f"{TARGET_TOKENIZER}/{name}" for name in (TOKENIZER_JSON, TOKENIZER_CONFIG))
PICKLED = ("pytorch_model.bin", "tf_model.h5", "flax_model.msgpack")
CONVERT = (
    'python -c "from transformers import MarianMTModel as M; '
    "M.from_pretrained('{dir}').save_pretrained('{dir}', safe_serialization=True)\""
)
WRITTEN = (  # what a Hugging Face export holds
    CONFIG,
    WEIGHTS,
    GENERATION,
    *SENTENCEPIECE_FILES,
    VOCAB,
    TOKENIZER_CONFIG,
    TOKENIZER_JSON,
    *TARGET_FILES,
)
CTRANSLATE2_WRITTEN = (
    "config.json",
    "model.bin",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    TOKENIZER_JSON,
    TOKENIZER_CONFIG,
    *TARGET_FILES,
    *SENTENCEPIECE_FILES,
)  # what a CTranslate2 export holds (one shared vocabulary, or the source's and the target's; the tokenizer)
# every file either kind of export writes: an export with --overwrite removes the other kind's too, so
# that the directory holds one model (transformers cannot load a Marian directory beside model.bin)
EXPORTS_WRITTEN = tuple(dict.fromkeys((*WRITTEN, *CTRANSLATE2_WRITTEN)))
MAX_CONFIG, MAX_VOCAB = 1 << 20, 64 << 20  # config.json and vocab.json are read up to these sizes


class PretrainedError(ValueError):
    """A model directory that cannot be read as a Marian translator: the message names the file
    and the problem, and what to do where there is something to do."""


class ExportError(ValueError):
    """A model, vocabulary or directory export_pretrained cannot write: the message names it."""


def read_bounded(path: Path, limit: int) -> bytes:
    """The file's bytes, refused naming it when it holds more than ``limit`` (a device, a wrong file)."""
    try:
        with open(path, "rb") as file:
            data = file.read(limit + 1)
    except OSError as error:
        raise PretrainedError(f"{path}: cannot be read ({error.strerror or error})") from None
    if len(data) > limit:
        raise PretrainedError(
            f"{path}: larger than {limit >> 20} MiB (a model directory's {path.name} is far smaller): "
            "not the file of a model this package reads"
        )
    return data


def weights_path(directory: str | Path) -> Path:
    """The directory's ``model.safetensors``; a directory with only a pickled checkpoint is refused
    with the command that converts it."""
    path = Path(directory) / WEIGHTS
    if not path.is_file():
        pickled = [name for name in PICKLED if (Path(directory) / name).is_file()]
        if pickled:
            raise PretrainedError(
                f"{Path(directory) / pickled[0]}: a pickled checkpoint, which is never loaded (unpickling can run "
                f"any code); convert it once to {WEIGHTS} with: {CONVERT.format(dir=directory)}"
            )
        what = "not a regular file" if path.exists() else "no such file"
        raise PretrainedError(f"{path}: {what} (a Hugging Face model directory holds its weights in it)")
    return path


def check_destination(
    directory: str | Path, overwrite: bool, written: tuple[str, ...] = EXPORTS_WRITTEN
) -> Path:
    """``directory`` as the export's: absent, an empty directory, or (``overwrite``) one to replace
    the files of an export (``written``: either kind's, EXPORTS_WRITTEN) in."""
    path = Path(directory).expanduser()
    if path.exists() and not path.is_dir():
        raise ExportError(f"--to {directory}: not a directory (expected a directory to write the model into)")
    if path.is_dir() and any(path.iterdir()) and not overwrite:
        raise ExportError(
            f"--to {directory}: not empty; give an empty or new directory, or --overwrite to replace "
            f"the files an export writes ({', '.join(written)})"
        )
    if not path.parent.is_dir():
        raise ExportError(f"--to {directory}: its parent {path.parent} is not a directory")
    return path


def write_export(path: Path, write: Callable[[Path], None], names: tuple[str, ...]) -> list[Path]:
    """``write`` fills a temporary directory beside ``path``; its files are then moved into ``path``
    (made if absent), each by a rename, and a file of ``names`` it lacks (an earlier export's, of
    either kind: EXPORTS_WRITTEN) is removed from ``path``. Returns the files moved in. A failure
    (OSError) raises a SaveError naming the file and saying what is left; a ``path`` this export
    made and moved nothing into is removed."""
    created = not path.exists()
    moved: list[Path] = []
    staging: Path | None = None
    try:
        path.mkdir(exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        write(staging)
        for name in names:
            if not (staging / name).exists():
                (path / name).unlink(missing_ok=True)
                if "/" in name:  # a folder of the export's that is left empty (target/)
                    with suppress(OSError):
                        (path / name).parent.rmdir()
        for file in sorted(file for file in staging.rglob("*") if file.is_file()):
            os.chmod(file, 0o644)
            placed = path / file.relative_to(staging)
            placed.parent.mkdir(exist_ok=True)
            os.replace(file, placed)
            moved.append(placed)
    except OSError as error:
        if created and not moved:
            with suppress(OSError):
                path.rmdir()
        if not moved:
            kept = "nothing of the export was written" + (
                " (the directory made for it is removed)" if created else ""
            )
        else:
            kept = (
                f"{', '.join(str(file.relative_to(path)) for file in moved)} were moved in, each whole, the "
                "rest not: export again"
            )
        raise SaveError.writing(Path(error.filename2 or path), error, kept) from error
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return moved


def write_files(staging: Path, files: dict[str, str | bytes]) -> None:
    """Each of ``files`` (its name inside the export: ``target/tokenizer.json``) into ``staging``,
    text as UTF-8."""
    for name, content in files.items():
        (staging / name).parent.mkdir(exist_ok=True)
        (staging / name).write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
